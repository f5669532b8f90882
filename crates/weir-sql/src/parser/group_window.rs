//! Flink's group-window syntax, desugared onto the window table functions.
//!
//! ```sql
//! SELECT k, TUMBLE_START(ts, INTERVAL '10' SECOND), COUNT(*)
//! FROM s GROUP BY TUMBLE(ts, INTERVAL '10' SECOND), k
//! ```
//!
//! is read as
//!
//! ```sql
//! SELECT k, window_start, COUNT(*)
//! FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), INTERVAL '10' SECOND))
//! GROUP BY window_start, window_end, k
//! ```
//!
//! `HOP(ts, slide, size)` (Flink's order: the slide first) becomes `HOP(TABLE s,
//! DESCRIPTOR(ts), slide, size)`, and `SESSION(ts, gap)` becomes `SESSION(TABLE s PARTITION BY
//! <the other GROUP BY columns>, DESCRIPTOR(ts), gap)`: Flink computes a group window's sessions
//! per group of the other keys. `X_START(...)` is `window_start` and `X_END(...)` is
//! `window_end` (exclusive, as in Flink), and they must repeat the group window's arguments.
//! The rewrite is on tokens, before the window table functions are taken out, so the result
//! is evaluated exactly as the table function form is.

use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Result, WeirError};

use super::ast::Duration;
use super::time::parse_duration;
use super::tokens::{matching, span_of, tok_span, word_is, word_token, Cursor};

/// The group window functions.
const KINDS: [&str; 3] = ["TUMBLE", "HOP", "SESSION"];

/// Words that end a GROUP BY list at its depth.
const ENDS_GROUP: &[&str] =
    &["HAVING", "ORDER", "LIMIT", "OFFSET", "UNION", "EXCEPT", "INTERSECT", "WINDOW", "QUALIFY"];

/// Words that end a FROM item at its depth.
const ENDS_FROM_ITEM: &[&str] = &["WHERE", "GROUP"];

/// One desugared group window: its kind and arguments, for the `_START`/`_END` calls.
struct Desugared {
    kind: &'static str,
    column: String,
    durations: Vec<Duration>,
}

/// What a group window function takes, for its errors.
fn expects(kind: &str) -> &'static str {
    match kind {
        "HOP" => "GROUP BY HOP expects (time_column, INTERVAL slide, INTERVAL size)",
        "SESSION" => "GROUP BY SESSION expects (time_column, INTERVAL gap)",
        _ => "GROUP BY TUMBLE expects (time_column, INTERVAL size)",
    }
}

/// The group window kind that `t` (followed by `next`) calls, if any.
fn call_of(t: &TokenWithSpan, next: Option<&TokenWithSpan>) -> Option<&'static str> {
    if next.is_none_or(|n| n.token != Token::LParen) {
        return None;
    }
    KINDS.into_iter().find(|k| word_is(t, k))
}

/// The arguments of a group window call `toks` = `KIND ( ... )`: the time column and the
/// durations.
fn parse_args(kind: &'static str, toks: &[TokenWithSpan]) -> Result<Desugared> {
    let (last, inner) = match toks.split_last() {
        Some((last, rest)) if rest.len() >= 2 => (last, &rest[2..]),
        _ => return Err(WeirError::internal("a group window call without parentheses")),
    };
    let mut c = Cursor::new(inner).followed_by(last);
    let n = if kind == "HOP" { 2 } else { 1 };
    let args = |c: &mut Cursor| -> Result<Desugared> {
        let (column, _) = c.ident("the time column")?;
        if c.peek().is_some_and(|t| t.token == Token::Period) {
            return Err(c.err("',' (name the time column without its table)"));
        }
        let mut durations = Vec::with_capacity(n);
        for _ in 0..n {
            c.expect(&Token::Comma, "','")?;
            durations.push(parse_duration(c, &[])?);
        }
        c.end()?;
        Ok(Desugared { kind, column, durations })
    };
    args(&mut c).map_err(|e| match e {
        WeirError::Syntax(mut d) => {
            d.message = format!("{}: {}", expects(kind), d.message);
            WeirError::Syntax(d)
        }
        e => e,
    })
}

/// The index of the first token at or after `from` at the same depth whose word is one of
/// `ends`, or that closes the depth, or the end.
fn end_of_clause(toks: &[TokenWithSpan], from: usize, ends: &[&str]) -> usize {
    let mut depth = 0i32;
    for (i, t) in toks.iter().enumerate().skip(from) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => return i,
            Token::RParen => depth -= 1,
            Token::SemiColon if depth == 0 => return i,
            _ if depth == 0 && ends.iter().any(|w| word_is(t, w)) => return i,
            _ => {}
        }
    }
    toks.len()
}

/// The FROM of the query block whose GROUP is at `group`: the nearest FROM before it at the
/// same depth.
fn from_of(toks: &[TokenWithSpan], group: usize) -> Option<usize> {
    let mut depth = 0i32;
    for i in (0..group).rev() {
        match toks[i].token {
            Token::RParen => depth += 1,
            Token::LParen if depth == 0 => return None,
            Token::LParen => depth -= 1,
            _ if depth == 0 && word_is(&toks[i], "FROM") => return Some(i),
            _ => {}
        }
    }
    None
}

/// The comma-separated items of toks[from..to] at depth 0, as index ranges.
fn items(toks: &[TokenWithSpan], from: usize, to: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = from;
    for (i, t) in toks.iter().enumerate().take(to).skip(from) {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::Comma if depth == 0 => {
                out.push((start, i));
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push((start, to));
    out
}

/// Rewrites one group window (the first one found), returning whether there was one.
fn desugar_one(toks: &mut Vec<TokenWithSpan>, done: &mut Vec<Desugared>) -> Result<bool> {
    let mut found = None;
    'scan: for g in 0..toks.len().saturating_sub(1) {
        if !(word_is(&toks[g], "GROUP") && word_is(&toks[g + 1], "BY")) {
            continue;
        }
        let end = end_of_clause(toks, g + 2, ENDS_GROUP);
        for (a, b) in items(toks, g + 2, end) {
            if b > a + 1 {
                if let Some(kind) = call_of(&toks[a], toks.get(a + 1)) {
                    let close = matching(toks, a + 1, &Token::LParen, &Token::RParen);
                    if close == Some(b - 1) {
                        found = Some((g, end, a, b, kind));
                        break 'scan;
                    }
                }
            }
        }
    }
    let Some((g, end, a, b, kind)) = found else { return Ok(false) };
    let call_span = span_of(&toks[a..b]);
    let args = parse_args(kind, &toks[a..b])?;
    // A second group window in the same GROUP BY.
    for (x, y) in items(toks, g + 2, end) {
        if x != a && y > x + 1 && call_of(&toks[x], toks.get(x + 1)).is_some() {
            return Err(WeirError::plan_at(
                "a GROUP BY takes one group window (TUMBLE, HOP or SESSION)",
                span_of(&toks[x..y]),
            ));
        }
    }
    let one_stream = || {
        WeirError::plan_at(
            format!(
                "GROUP BY {kind}(...) needs one stream in FROM, without a window, a join or a \
                 subquery (or write FROM TABLE({kind}(TABLE s, DESCRIPTOR(col), ...)))"
            ),
            call_span,
        )
    };
    // The FROM item: a stream name, then an optional alias, then WHERE or GROUP.
    let f = from_of(toks, g).ok_or_else(one_stream)?;
    let name = f + 1;
    let is_name = |t: &TokenWithSpan| matches!(&t.token, Token::Word(w) if w.quote_style.is_some() || !["TABLE", "LATERAL", "SELECT"].iter().any(|k| w.value.eq_ignore_ascii_case(k)));
    if !toks.get(name).is_some_and(is_name)
        || toks.get(name + 1).is_some_and(|t| t.token == Token::Period || t.token == Token::LParen)
    {
        return Err(one_stream());
    }
    let mut next = name + 1;
    if toks.get(next).is_some_and(|t| word_is(t, "AS")) {
        next += 1;
    }
    if toks.get(next).is_some_and(|t| {
        matches!(t.token, Token::Word(_)) && !ENDS_FROM_ITEM.iter().any(|w| word_is(t, w))
    }) {
        next += 1; // the alias
    }
    if !toks.get(next).is_some_and(|t| ENDS_FROM_ITEM.iter().any(|w| word_is(t, w))) {
        return Err(one_stream());
    }
    // SESSION: the other GROUP BY keys, plain columns, are its PARTITION BY.
    let mut partition: Vec<TokenWithSpan> = Vec::new();
    if kind == "SESSION" {
        for (x, y) in items(toks, g + 2, end) {
            if x == a {
                continue;
            }
            let plain = y == x + 1 && matches!(toks[x].token, Token::Word(_));
            if !plain {
                return Err(WeirError::plan_at(
                    "with GROUP BY SESSION(...) the other keys must be plain columns: they are \
                     the keys the sessions are computed per",
                    span_of(&toks[x..y]),
                ));
            }
            if !partition.is_empty() {
                partition.push(TokenWithSpan::new(Token::Comma, toks[x].span));
            }
            partition.push(toks[x].clone());
        }
    }
    // GROUP BY KIND(...) -> GROUP BY window_start, window_end.
    let (sa, sb) = (toks[a].span, toks[b - 1].span);
    let keys = vec![
        word_token("window_start", Keyword::NoKeyword, sa),
        TokenWithSpan::new(Token::Comma, sa),
        word_token("window_end", Keyword::NoKeyword, sb),
    ];
    // FROM s -> FROM TABLE(KIND(TABLE s [PARTITION BY ...], DESCRIPTOR(col), args...)).
    let w = |v: &str| word_token(v, Keyword::NoKeyword, sa);
    let p = |t: Token| TokenWithSpan::new(t, sa);
    let mut table = vec![w("TABLE"), p(Token::LParen), w(kind), p(Token::LParen), w("TABLE")];
    table.push(toks[name].clone());
    if !partition.is_empty() {
        table.extend([w("PARTITION"), w("BY")]);
        table.extend(partition);
    }
    table.extend([p(Token::Comma), w("DESCRIPTOR"), p(Token::LParen), toks[a + 2].clone()]);
    table.push(p(Token::RParen));
    // The durations' tokens, as written: after the column, from its comma to the ')'.
    table.extend(toks[a + 3..b - 1].iter().cloned());
    table.push(TokenWithSpan::new(Token::RParen, sb));
    table.push(TokenWithSpan::new(Token::RParen, sb));
    toks.splice(a..b, keys);
    toks.splice(name..name + 1, table);
    done.push(args);
    Ok(true)
}

/// The group window a `KIND_START`/`KIND_END` word names: (kind, is_end).
fn bound_fn(t: &TokenWithSpan) -> Option<(&'static str, bool)> {
    for kind in KINDS {
        for (suffix, end) in [("_START", false), ("_END", true)] {
            if word_is(t, &format!("{kind}{suffix}")) {
                return Some((kind, end));
            }
        }
    }
    None
}

/// Rewrites Flink's group windows in a query's tokens (see the module docs).
pub(super) fn desugar(mut toks: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let has_any = toks.iter().any(|t| bound_fn(t).is_some() || KINDS.iter().any(|k| word_is(t, k)));
    if !has_any {
        return Ok(toks);
    }
    let mut done = Vec::new();
    // Each rewrite removes its GROUP BY call, so this ends; a statement has few of them.
    while desugar_one(&mut toks, &mut done)? {}
    // KIND_START(...) / KIND_END(...) -> window_start / window_end.
    let mut i = 0;
    while i < toks.len() {
        let Some((kind, is_end)) = bound_fn(&toks[i]) else {
            i += 1;
            continue;
        };
        if toks.get(i + 1).is_none_or(|t| t.token != Token::LParen) {
            i += 1;
            continue;
        }
        let close = matching(&toks, i + 1, &Token::LParen, &Token::RParen).ok_or_else(|| {
            WeirError::syntax_at("'(' is never closed: expected ')'", tok_span(&toks[i + 1]))
        })?;
        let call = &toks[i..=close];
        let name = if is_end { format!("{kind}_END") } else { format!("{kind}_START") };
        let args = parse_args(kind, call).map_err(|e| match e {
            WeirError::Syntax(mut d) => {
                d.message = d.message.replacen(&format!("GROUP BY {kind}"), &name, 1);
                WeirError::Syntax(d)
            }
            e => e,
        })?;
        let matches = done
            .iter()
            .any(|d| d.kind == kind && d.column == args.column && d.durations == args.durations);
        if !matches {
            let what = if done.iter().any(|d| d.kind == kind) {
                format!("{name}(...) must repeat the arguments of its query's GROUP BY {kind}(...)")
            } else {
                format!(
                    "{name}(...) needs GROUP BY {kind}(...) with the same arguments in its query"
                )
            };
            return Err(WeirError::plan_at(what, span_of(call)));
        }
        let column = if is_end { "window_end" } else { "window_start" };
        let span = sqlparser::tokenizer::Span::new(toks[i].span.start, toks[close].span.end);
        let with = vec![word_token(column, Keyword::NoKeyword, span)];
        let n = with.len();
        toks.splice(i..=close, with);
        i += n;
    }
    Ok(toks)
}
