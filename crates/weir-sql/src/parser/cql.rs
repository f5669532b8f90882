//! The CQL pre-pass over a query's tokens: `SELECT ISTREAM|DSTREAM|RSTREAM` is recorded and
//! removed, windows after stream names (`s [RANGE 10]`, `TABLE(TUMBLE(...))`) are parsed and
//! replaced by synthetic table names, and the rest goes to sqlparser.

use sqlparser::ast as sql;
use sqlparser::keywords::{Keyword, RESERVED_FOR_TABLE_ALIAS};
use sqlparser::tokenizer::{Token, TokenWithSpan};
use weir_common::{Result, Span, WeirError};
use weir_plan::R2S;

use super::ast::{CqlQuery, Duration, WindowAst, WindowKind};
use super::time::parse_duration;
use super::tokens::{
    ident_name, matching, span_of, sql_err, sub_parser, tok_span, word_is, word_token, Cursor,
};

/// Prefix of the synthetic table names that stand for windowed streams.
pub const WINDOW_PREFIX: &str = "__weir_w";

/// Prefix of the synthetic table names that stand for the versioned side of a temporal join
/// (`t FOR SYSTEM_TIME AS OF s.ts`); it starts with [`WINDOW_PREFIX`].
pub const VERSIONED_PREFIX: &str = "__weir_wv";

/// `FOR SYSTEM_TIME AS OF col` or `... AS OF q.col` starting at `toks[i]` (the `FOR`): the
/// qualifier, the column, the column's position and the index after the clause.
fn parse_as_of(
    toks: &[TokenWithSpan],
    i: usize,
) -> Result<(Option<String>, String, Option<Span>, usize)> {
    let mut c = Cursor::new(&toks[i..]);
    c.expect_word("FOR")?;
    c.expect_word("SYSTEM_TIME")?;
    c.expect_word("AS")?;
    c.expect_word("OF")?;
    let what = "the event-time column of the stream joined (e.g. s.ts)";
    let at = c.peek().and_then(tok_span);
    let (first, _) = c.ident(what)?;
    let (qualifier, column) =
        if c.eat(&Token::Period) { (Some(first), c.ident(what)?.0) } else { (None, first) };
    if c.peek().is_some_and(|t| matches!(t.token, Token::Period | Token::LParen)) {
        return Err(c.err(what));
    }
    let span = match (at, c.pos.checked_sub(1).and_then(|j| toks.get(i + j)).and_then(tok_span)) {
        (Some(a), Some(b)) => Some(Span { end_line: b.end_line, end_column: b.end_column, ..a }),
        (a, _) => a,
    };
    Ok((qualifier, column, span, i + c.pos))
}

/// The inside of `[ ... ]`.
fn parse_window(
    toks: &[TokenWithSpan],
    open: &TokenWithSpan,
    close: &TokenWithSpan,
) -> Result<(WindowKind, Option<Duration>)> {
    let mut c = Cursor::new(toks).followed_by(close);
    let mut offset = None;
    let expected =
        "UNBOUNDED, NOW, RANGE, ROWS, PARTITION BY, SESSION, DEDUPLICATE or SAMPLE in the window";
    if c.at_end() {
        return Err(WeirError::syntax_at(
            format!("expected {expected}, found ']'"),
            tok_span(open).map(|s| Span::point(s.line, s.column + 1)),
        ));
    }
    let kind = if c.eat_word("UNBOUNDED") {
        WindowKind::Unbounded
    } else if c.eat_word("NOW") {
        WindowKind::Now
    } else if c.eat_word("RANGE") {
        if c.eat_word("UNBOUNDED") {
            WindowKind::Unbounded
        } else {
            let range = parse_duration(&mut c, &["SLIDE", "OFFSET", "SAMPLE"])?;
            if c.peek_word("OFFSET") {
                return Err(WeirError::plan_at(
                    "OFFSET shifts the windows of a SLIDE: write [RANGE T SLIDE S OFFSET O]",
                    c.peek().and_then(tok_span),
                ));
            }
            if c.peek_word("SAMPLE") {
                return Err(WeirError::plan_at(
                    "a SAMPLE over a time window samples each window of a SLIDE: write [RANGE T \
                     SLIDE S SAMPLE N ROWS] (SLIDE T for tumbling windows)",
                    c.peek().and_then(tok_span),
                ));
            }
            if c.eat_word("SLIDE") {
                let slide = parse_duration(&mut c, &["OFFSET", "SAMPLE"])?;
                if c.eat_word("OFFSET") {
                    offset = Some(parse_offset(&mut c)?);
                }
                if c.eat_word("SAMPLE") {
                    let (rows, seed) = sample_clause(&mut c)?;
                    WindowKind::Sample { rows, seed, over: Some((range, slide)) }
                } else {
                    WindowKind::RangeSlide(range, slide)
                }
            } else {
                WindowKind::Range(range)
            }
        }
    } else if c.eat_word("ROWS") {
        WindowKind::Rows(rows_count(&mut c)?)
    } else if c.eat_word("PARTITION") {
        c.expect_word("BY")?;
        let mut cols = vec![c.ident("a partition column")?];
        while c.eat(&Token::Comma) {
            cols.push(c.ident("a partition column")?);
        }
        c.expect_word("ROWS")?;
        WindowKind::PartitionRows(cols, rows_count(&mut c)?)
    } else if c.eat_word("SESSION") {
        let gap = session_gap(&mut c, &["PARTITION"])?;
        let by = if c.eat_word("PARTITION") {
            c.expect_word("BY")?;
            partition_columns(&mut c)?
        } else {
            vec![]
        };
        WindowKind::Session { column: None, gap, by }
    } else if c.eat_word("DEDUPLICATE") {
        let by = if c.eat_word("BY") { partition_columns(&mut c)? } else { vec![] };
        let (mut capacity, mut error) = (None, None);
        let mut capacity_span = None;
        loop {
            if capacity.is_none() && c.eat_word("CAPACITY") {
                capacity_span = c.peek().and_then(tok_span);
                capacity = Some(dedup_capacity(&mut c)?);
            } else if error.is_none() && c.eat_word("ERROR") {
                error = Some(dedup_error(&mut c)?);
            } else {
                break;
            }
        }
        if !c.at_end() {
            let what = match (capacity, &error) {
                (None, None) => "BY, CAPACITY, ERROR or ']'",
                (None, Some(_)) => "CAPACITY or ']'",
                (Some(_), None) => "ERROR or ']'",
                (Some(_), Some(_)) => "']'",
            };
            return Err(c.err(what));
        }
        dedup_size(capacity, error.as_deref(), capacity_span)?;
        WindowKind::Deduplicate { by, capacity, error }
    } else if c.eat_word("SAMPLE") {
        let (rows, seed) = sample_clause(&mut c)?;
        WindowKind::Sample { rows, seed, over: None }
    } else {
        return Err(c.err(expected));
    };
    if !c.at_end() {
        return Err(c.err("']'"));
    }
    Ok((kind, offset))
}

/// `N ROWS [SEED s]` after `SAMPLE`.
fn sample_clause(c: &mut Cursor) -> Result<(u64, Option<u64>)> {
    let span = c.peek().and_then(tok_span);
    let rows = rows_count(c)?;
    if rows == 0 {
        return Err(WeirError::syntax_at("a SAMPLE window needs a count of at least 1", span));
    }
    c.expect_word("ROWS")?;
    let seed = if c.eat_word("SEED") {
        let span = c.peek().and_then(tok_span);
        let s = c.integer("a seed")?;
        Some(u64::try_from(s).map_err(|_| {
            WeirError::syntax_at("a SAMPLE window's SEED must be an integer of at least 0", span)
        })?)
    } else {
        None
    };
    Ok((rows, seed))
}

/// A window's offset: a duration, which may be negative (`-2`, `INTERVAL '-1' MINUTE`).
fn parse_offset(c: &mut Cursor) -> Result<Duration> {
    let negative = c.eat(&Token::Minus);
    let d = parse_duration(c, &["SAMPLE"])?;
    Ok(match (negative, d) {
        (false, d) => d,
        (true, Duration::Ticks(v)) => Duration::Ticks(-v),
        (true, Duration::Micros(v)) => Duration::Micros(-v),
    })
}

/// A window table function of TUMBLE/HOP's shape.
#[derive(PartialEq, Clone, Copy)]
enum F {
    Tumble,
    Hop,
    Cumulate,
}

/// `TUMBLE(TABLE s, DESCRIPTOR(col), size)`, `HOP(TABLE s, DESCRIPTOR(col), slide, size)` or
/// `CUMULATE(TABLE s, DESCRIPTOR(col), step, size)` (the tokens inside Flink's `TABLE( ... )`),
/// or RisingWave's `TUMBLE(s, col, size)`, `HOP(s, col, slide, size)` and
/// `CUMULATE(s, col, step, size)`.
fn parse_window_function(
    toks: &[TokenWithSpan],
    close: &TokenWithSpan,
) -> Result<(String, WindowKind, Option<Duration>)> {
    let mut c = Cursor::new(toks).followed_by(close);
    let f = if c.eat_word("TUMBLE") {
        F::Tumble
    } else if c.eat_word("CUMULATE") {
        F::Cumulate
    } else {
        c.expect_word("HOP")?;
        F::Hop
    };
    let expects = match f {
        F::Tumble => TUMBLE_ARGS,
        F::Hop => HOP_ARGS,
        F::Cumulate => CUMULATE_ARGS,
    };
    window_args(&mut c, f).map_err(|e| match e {
        WeirError::Syntax(mut d) => {
            d.message = format!("{expects}: {}", d.message);
            WeirError::Syntax(d)
        }
        e => e,
    })
}

/// What `TABLE(TUMBLE(...))` takes, for its errors.
const TUMBLE_ARGS: &str =
    "TUMBLE expects (TABLE stream, DESCRIPTOR(time_column), INTERVAL size [, INTERVAL offset])";

/// What `TABLE(HOP(...))` takes, for its errors.
const HOP_ARGS: &str = "HOP expects (TABLE stream, DESCRIPTOR(time_column), INTERVAL slide, \
                        INTERVAL size [, INTERVAL offset])";

/// What `TABLE(CUMULATE(...))` takes, for its errors.
const CUMULATE_ARGS: &str = "CUMULATE expects (TABLE stream, DESCRIPTOR(time_column), \
                             INTERVAL step, INTERVAL size [, INTERVAL offset])";

/// A window table function's arguments, from its '(' on.
fn window_args(c: &mut Cursor, f: F) -> Result<(String, WindowKind, Option<Duration>)> {
    c.expect(&Token::LParen, "'('")?;
    // Flink's `TABLE s, DESCRIPTOR(col)` or RisingWave's `s, col`.
    let flink = c.eat_word("TABLE");
    let (stream, _) = c.ident("a stream, table or view name")?;
    c.expect(&Token::Comma, "','")?;
    let column = if flink {
        c.expect_word("DESCRIPTOR")?;
        c.expect(&Token::LParen, "'('")?;
        let (column, _) = c.ident("the time column")?;
        c.expect(&Token::RParen, "')'")?;
        column
    } else {
        c.ident("the time column")?.0
    };
    c.expect(&Token::Comma, "','")?;
    let first = parse_duration(c, &[])?;
    let kind = match f {
        F::Hop => {
            c.expect(&Token::Comma, "',' and the window size (HOP takes slide, then size)")?;
            let size = parse_duration(c, &[])?;
            WindowKind::Hop { column, slide: first, size }
        }
        F::Cumulate => {
            c.expect(&Token::Comma, "',' and the window size (CUMULATE takes step, then size)")?;
            let size = parse_duration(c, &[])?;
            WindowKind::Cumulate { column, step: first, size }
        }
        F::Tumble => WindowKind::Tumble { column, size: first },
    };
    // Flink's optional offset, the last argument.
    let offset = if c.eat(&Token::Comma) { Some(parse_offset(c)?) } else { None };
    c.expect(&Token::RParen, "')'")?;
    c.end()?;
    Ok((stream, kind, offset))
}

/// The window table functions, as `TABLE( ... )` and FROM take them.
const WINDOW_FUNCTIONS: [&str; 4] = ["TUMBLE", "HOP", "CUMULATE", "SESSION"];

/// What `TABLE(SESSION(...))` takes, for its errors.
const SESSION_ARGS: &str =
    "SESSION expects (TABLE stream [PARTITION BY cols], DESCRIPTOR(time_column), INTERVAL gap)";

/// `SESSION(TABLE s [PARTITION BY k, ...], DESCRIPTOR(col), gap)`, the tokens inside Flink's
/// `TABLE( ... )`. A syntax error names the function and what it takes.
fn parse_session_function(
    toks: &[TokenWithSpan],
    close: &TokenWithSpan,
) -> Result<(String, WindowKind)> {
    let mut c = Cursor::new(toks).followed_by(close);
    let args = |c: &mut Cursor| -> Result<(String, WindowKind)> {
        c.expect_word("SESSION")?;
        c.expect(&Token::LParen, "'('")?;
        c.expect_word("TABLE")?;
        let (stream, _) = c.ident("a stream name")?;
        let by = if c.eat_word("PARTITION") {
            c.expect_word("BY")?;
            partition_columns(c)?
        } else {
            vec![]
        };
        c.expect(&Token::Comma, "','")?;
        c.expect_word("DESCRIPTOR")?;
        c.expect(&Token::LParen, "'('")?;
        let (column, _) = c.ident("the time column")?;
        c.expect(&Token::RParen, "')'")?;
        c.expect(&Token::Comma, "','")?;
        let gap = session_gap(c, &[])?;
        c.expect(&Token::RParen, "')'")?;
        c.end()?;
        Ok((stream, WindowKind::Session { column: Some(column), gap, by }))
    };
    args(&mut c).map_err(|e| match e {
        WeirError::Syntax(mut d) => {
            d.message = format!("{SESSION_ARGS}: {}", d.message);
            WeirError::Syntax(d)
        }
        e => e,
    })
}

/// `a, b, ...` after PARTITION BY.
fn partition_columns(c: &mut Cursor) -> Result<Vec<(String, Option<Span>)>> {
    let mut cols = vec![c.ident("a partition column")?];
    while c.eat(&Token::Comma) {
        if c.peek_word("DESCRIPTOR") {
            c.pos_back();
            break;
        }
        cols.push(c.ident("a partition column")?);
    }
    Ok(cols)
}

/// A session's gap: a duration that must be positive (an error at the duration otherwise).
fn session_gap(c: &mut Cursor, then: &[&str]) -> Result<Duration> {
    let from = c.pos;
    let gap = parse_duration(c, then)?;
    let (Duration::Ticks(v) | Duration::Micros(v)) = gap;
    if v <= 0 {
        let span = span_of(&c.toks[from..c.pos.min(c.toks.len())]);
        return Err(WeirError::plan_at("a SESSION gap must be positive", span));
    }
    Ok(gap)
}

/// `[DEDUPLICATE ... CAPACITY n]`'s n: keys per generation of the filter.
fn dedup_capacity(c: &mut Cursor) -> Result<u64> {
    let span = c.peek().and_then(tok_span);
    let range = weir_plan::DEDUP_CAPACITIES;
    let n = c.integer("a capacity (keys remembered)")?;
    u64::try_from(n).ok().filter(|n| range.contains(n)).ok_or_else(|| {
        WeirError::syntax_at(
            format!(
                "a DEDUPLICATE window's CAPACITY must be from {} to {} keys, found {n}",
                range.start(),
                range.end()
            ),
            span,
        )
    })
}

/// Refuses a `[DEDUPLICATE ...]` whose two filter generations would take more than 4 GB
/// (each −n·ln(p/2)/ln²2 bits): they are allocated when the query starts, and a capacity of
/// 10^8 with a tiny error would otherwise abort the process.
fn dedup_size(capacity: Option<u64>, error: Option<&str>, span: Option<Span>) -> Result<()> {
    let n = capacity.unwrap_or(weir_plan::DEFAULT_DEDUP_CAPACITY);
    let p = error.and_then(|e| e.parse::<f64>().ok()).unwrap_or(weir_plan::DEFAULT_DEDUP_ERROR);
    let bytes = 2.0 * weir_plan::bloom_cells(n, p / 2.0) / 8.0;
    if bytes > weir_plan::MAX_FILTER_BYTES as f64 {
        return Err(WeirError::syntax_at(
            format!(
                "a DEDUPLICATE window of CAPACITY {n} and ERROR {} needs {:.1} GB for its two \
                 filter generations; at most {} GB: lower the capacity or raise the error",
                error.unwrap_or("0.01"),
                bytes / 1e9,
                weir_plan::MAX_FILTER_BYTES / 1_000_000_000
            ),
            span,
        ));
    }
    Ok(())
}

/// `[DEDUPLICATE ... ERROR p]`'s p, a false-positive rate: a number strictly between 0 and 1.
fn dedup_error(c: &mut Cursor) -> Result<String> {
    let t = c.peek();
    let span = t.and_then(tok_span);
    match t.map(|t| &t.token) {
        Some(Token::Number(n, _)) if n.parse::<f64>().is_ok_and(|p| p > 0.0 && p < 1.0) => {
            let n = n.clone();
            c.next();
            Ok(n)
        }
        Some(Token::Number(n, _)) => Err(WeirError::syntax_at(
            format!(
                "a DEDUPLICATE window's ERROR is a false-positive rate, a number greater than 0 \
                 and less than 1, found {n}"
            ),
            span,
        )),
        _ => Err(c.err("a false-positive rate (0.01 is 1 %)")),
    }
}

fn rows_count(c: &mut Cursor) -> Result<u64> {
    let span = c.peek().and_then(tok_span);
    let n = c.integer("a row count")?;
    u64::try_from(n)
        .map_err(|_| WeirError::syntax_at("a ROWS window needs a count of at least 0", span))
}

/// Writes `synthetic AS name` in place of a windowed stream, or just `synthetic` when the
/// query gives an alias itself (`next` is the token after the window).
fn push_windowed(
    out: &mut Vec<TokenWithSpan>,
    synthetic: &str,
    name: TokenWithSpan,
    next: Option<&TokenWithSpan>,
) {
    let alias_follows = match next.map(|t| &t.token) {
        Some(Token::Word(w)) => {
            w.keyword == Keyword::AS || !RESERVED_FOR_TABLE_ALIAS.contains(&w.keyword)
        }
        _ => false,
    };
    out.push(word_token(synthetic, Keyword::NoKeyword, name.span));
    if !alias_follows {
        out.push(word_token("AS", Keyword::AS, name.span));
        out.push(name);
    }
}

/// Clause keywords that end a FROM clause at their nesting depth.
const ENDS_FROM: &[&str] = &[
    "SELECT",
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "UNION",
    "EXCEPT",
    "INTERSECT",
    "ON",
    "USING",
    "WINDOW",
    "QUALIFY",
];

/// Takes CQL's parts out of a query's tokens and parses the rest with sqlparser.
pub fn parse_cql_query(toks: &[TokenWithSpan]) -> Result<CqlQuery> {
    // 0. Flink's group windows (GROUP BY TUMBLE(ts, ...)) become window table functions.
    let mut toks: Vec<TokenWithSpan> = super::group_window::desugar(toks.to_vec())?;
    if toks.is_empty() {
        return Err(WeirError::syntax_at("expected a query, found end of statement", None));
    }
    // 1. Relation-to-stream operator after the top-level SELECT.
    let mut r2s = None;
    // The top-level SELECT is the first SELECT outside parentheses (after any WITH clause,
    // whose definitions are parenthesized).
    let mut depth = 0i32;
    let mut sel = None;
    for (i, t) in toks.iter().enumerate() {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && word_is(t, "SELECT") => {
                sel = Some(i);
                break;
            }
            _ => {}
        }
    }
    if let Some(sel) = sel.filter(|&i| i + 1 < toks.len()) {
        let op = if word_is(&toks[sel + 1], "ISTREAM") {
            Some(R2S::Istream)
        } else if word_is(&toks[sel + 1], "DSTREAM") {
            Some(R2S::Dstream)
        } else if word_is(&toks[sel + 1], "RSTREAM") {
            Some(R2S::Rstream)
        } else {
            None
        };
        if let Some(op) = op {
            r2s = Some(op);
            toks.remove(sel + 1);
            // Function form: SELECT ISTREAM(a, b) FROM ... / SELECT ISTREAM(*)
            if toks.get(sel + 1).is_some_and(|t| t.token == Token::LParen) {
                if let Some(close) = matching(&toks, sel + 1, &Token::LParen, &Token::RParen) {
                    let after = toks.get(close + 1);
                    if after.is_none() || after.is_some_and(|t| word_is(t, "FROM")) {
                        toks.remove(close);
                        toks.remove(sel + 1);
                    }
                }
            }
        }
    }
    // A relation-to-stream operator anywhere else (a subquery's SELECT) would reach sqlparser
    // as a call of a function `istream`.
    for w in toks.windows(2) {
        if word_is(&w[0], "SELECT")
            && ["ISTREAM", "DSTREAM", "RSTREAM"].iter().any(|op| word_is(&w[1], op))
        {
            return Err(WeirError::plan_at(
                format!(
                    "{} is supported only after the outermost SELECT: define a view with it \
                     and read the view in FROM",
                    w[1].token.to_string().to_ascii_uppercase()
                ),
                tok_span(&w[1]),
            ));
        }
    }
    // 2. `x IN ()`: SQL's empty list (false; NOT IN () is true, even for NULL x), which
    // sqlparser rejects, becomes an empty subquery with the same meaning.
    let mut i = 0;
    while i + 2 < toks.len() {
        if word_is(&toks[i], "IN")
            && toks[i + 1].token == Token::LParen
            && toks[i + 2].token == Token::RParen
        {
            let span = toks[i + 1].span;
            let empty = [
                word_token("SELECT", Keyword::SELECT, span),
                word_token("NULL", Keyword::NULL, span),
                word_token("WHERE", Keyword::WHERE, span),
                word_token("FALSE", Keyword::FALSE, span),
            ];
            toks.splice(i + 2..i + 2, empty);
            i += 6;
        } else {
            i += 1;
        }
    }
    // 3. Windows after stream names in FROM clauses.
    let mut windows = Vec::new();
    let mut out: Vec<TokenWithSpan> = Vec::with_capacity(toks.len());
    // Per parenthesis depth: outside a FROM clause, in one, or in a join condition (ON/USING)
    // inside one, which a comma or another JOIN ends.
    #[derive(Clone, Copy, PartialEq)]
    enum From {
        Outside,
        In,
        JoinCondition,
    }
    let mut in_from: Vec<From> = vec![From::Outside];
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        match &t.token {
            Token::LParen => in_from.push(From::Outside),
            Token::RParen if in_from.len() > 1 => {
                in_from.pop();
            }
            Token::Word(w)
                if in_from.last() == Some(&From::In)
                    && w.value.eq_ignore_ascii_case("TABLE")
                    && toks.get(i + 1).is_some_and(|t| t.token == Token::LParen)
                    && toks
                        .get(i + 2)
                        .is_some_and(|t| WINDOW_FUNCTIONS.iter().any(|f| word_is(t, f))) =>
            {
                let close =
                    matching(&toks, i + 1, &Token::LParen, &Token::RParen).ok_or_else(|| {
                        WeirError::syntax_at("TABLE( is never closed: expected ')'", tok_span(t))
                    })?;
                let inner = &toks[i + 2..close];
                let (stream, kind, offset) = if word_is(&toks[i + 2], "SESSION") {
                    let (stream, kind) = parse_session_function(inner, &toks[close])?;
                    (stream, kind, None)
                } else {
                    parse_window_function(inner, &toks[close])?
                };
                let synthetic = format!("{WINDOW_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    t.span.start,
                    toks[close].span.end,
                ));
                let name = word_token(&stream, Keyword::NoKeyword, t.span);
                push_windowed(&mut out, &synthetic, name, toks.get(close + 1));
                windows.push(WindowAst { synthetic, stream, kind, span, offset });
                i = close + 1;
                continue;
            }
            // `TABLE(F(...))` with a function Weir has no window table function for.
            Token::Word(w)
                if in_from.last() == Some(&From::In)
                    && w.value.eq_ignore_ascii_case("TABLE")
                    && toks.get(i + 1).is_some_and(|t| t.token == Token::LParen)
                    && toks.get(i + 2).is_some_and(
                        |t| matches!(&t.token, Token::Word(f) if f.quote_style.is_none()),
                    )
                    && toks.get(i + 3).is_some_and(|t| t.token == Token::LParen) =>
            {
                let name = toks[i + 2].token.to_string();
                return Err(WeirError::plan_at(
                    format!(
                        "unknown window table function '{name}': the window table functions \
                         are TUMBLE, HOP, CUMULATE and SESSION"
                    ),
                    tok_span(&toks[i + 2]),
                ));
            }
            // RisingWave's form, without TABLE( ... ) around it: `FROM TUMBLE(t, ts, size)`.
            // `FROM SESSION(...)` takes Flink's arguments (and says so when they are wrong).
            Token::Word(w)
                if in_from.last() == Some(&From::In)
                    && w.quote_style.is_none()
                    && WINDOW_FUNCTIONS.iter().any(|f| w.value.eq_ignore_ascii_case(f))
                    && toks.get(i + 1).is_some_and(|t| t.token == Token::LParen) =>
            {
                let close =
                    matching(&toks, i + 1, &Token::LParen, &Token::RParen).ok_or_else(|| {
                        WeirError::syntax_at(
                            format!("{}( is never closed: expected ')'", w.value),
                            tok_span(t),
                        )
                    })?;
                let end = toks.get(close + 1).unwrap_or(&toks[close]);
                let (stream, kind, offset) = if w.value.eq_ignore_ascii_case("SESSION") {
                    let (stream, kind) = parse_session_function(&toks[i..=close], end)?;
                    (stream, kind, None)
                } else {
                    parse_window_function(&toks[i..=close], end)?
                };
                let synthetic = format!("{WINDOW_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    t.span.start,
                    toks[close].span.end,
                ));
                let name = word_token(&stream, Keyword::NoKeyword, t.span);
                push_windowed(&mut out, &synthetic, name, toks.get(close + 1));
                windows.push(WindowAst { synthetic, stream, kind, span, offset });
                i = close + 1;
                continue;
            }
            // `t FOR SYSTEM_TIME AS OF s.ts [AS] [alias]`: a temporal join's versioned side.
            Token::Word(w)
                if in_from.last() == Some(&From::In)
                    && w.quote_style.is_none()
                    && w.value.eq_ignore_ascii_case("FOR")
                    && toks.get(i + 1).is_some_and(|t| word_is(t, "SYSTEM_TIME")) =>
            {
                let popped = out.pop();
                let qualified = out.last().is_some_and(|p| p.token == Token::Period);
                let name = match (&popped, qualified) {
                    (Some(n @ TokenWithSpan { token: Token::Word(w), .. }), false) => {
                        Some((ident_name(w), n.clone()))
                    }
                    _ => None,
                };
                let Some((stream, name_tok)) = name else {
                    return Err(WeirError::plan_at(
                        "FOR SYSTEM_TIME AS OF must follow the name of a table or of a stream \
                         with a PRIMARY KEY",
                        tok_span(t),
                    ));
                };
                let (qualifier, column, at, next) = parse_as_of(&toks, i)?;
                let synthetic = format!("{VERSIONED_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    name_tok.span.start,
                    toks[next - 1].span.end,
                ));
                windows.push(WindowAst {
                    synthetic: synthetic.clone(),
                    stream,
                    kind: WindowKind::AsOf { qualifier, column, at },
                    span,
                    offset: None,
                });
                push_windowed(&mut out, &synthetic, name_tok, toks.get(next));
                i = next;
                continue;
            }
            Token::Word(w) if w.quote_style.is_none() => {
                let up = w.value.to_ascii_uppercase();
                if let Some(top) = in_from.last_mut() {
                    if up == "FROM" || up == "JOIN" {
                        *top = From::In;
                    } else if (up == "ON" || up == "USING") && *top != From::Outside {
                        *top = From::JoinCondition;
                    } else if ENDS_FROM.contains(&up.as_str()) {
                        *top = From::Outside;
                    }
                }
            }
            Token::Comma if in_from.last() == Some(&From::JoinCondition) => {
                // `a JOIN b ON ..., c [NOW]`: the FROM list goes on.
                if let Some(top) = in_from.last_mut() {
                    *top = From::In;
                }
            }
            Token::LBracket if in_from.last() == Some(&From::In) => {
                let close =
                    matching(&toks, i, &Token::LBracket, &Token::RBracket).ok_or_else(|| {
                        WeirError::syntax_at(
                            "window '[' is never closed: expected ']'",
                            tok_span(t),
                        )
                    })?;
                let Some(name_tok) = out.pop() else {
                    return Err(WeirError::syntax_at(
                        "a window must follow a stream name",
                        tok_span(t),
                    ));
                };
                let Token::Word(name_word) = &name_tok.token else {
                    return Err(WeirError::plan_at(
                        "a window must follow a stream name (windows over subqueries are not \
                         supported: define a view and window it)",
                        tok_span(t),
                    ));
                };
                if out.last().is_some_and(|p| p.token == Token::Period) {
                    return Err(WeirError::plan_at(
                        "qualified stream names are not supported before a window",
                        tok_span(&name_tok),
                    ));
                }
                let (kind, offset) = parse_window(&toks[i + 1..close], t, &toks[close])?;
                let synthetic = format!("{WINDOW_PREFIX}{}", windows.len());
                let span = Span::from_sql(sqlparser::tokenizer::Span::new(
                    name_tok.span.start,
                    toks[close].span.end,
                ));
                windows.push(WindowAst {
                    synthetic: synthetic.clone(),
                    stream: ident_name(name_word),
                    kind,
                    span,
                    offset,
                });
                push_windowed(&mut out, &synthetic, name_tok, toks.get(close + 1));
                i = close + 1;
                continue;
            }
            _ => {}
        }
        out.push(t.clone());
        i += 1;
    }
    let mut p = sub_parser(&out)?;
    let query = p.parse_query().map_err(|e| sql_err(e, &out))?;
    if let Err(e) = p.expect_token(&Token::EOF) {
        return Err(sql_err(e, &out));
    }
    check_no_locks(&query, &out)?;
    Ok(CqlQuery { query, r2s, windows })
}

/// `FOR UPDATE`, `FOR SHARE` and the other row locks (in the query or a subquery) are an error
/// at their `FOR`: a continuous query reads streams and relations as they change, and there is
/// no transaction for a lock to belong to, so accepting one would promise what Weir does not do.
fn check_no_locks(query: &sql::Query, toks: &[TokenWithSpan]) -> Result<()> {
    use sqlparser::ast::{Visit, Visitor};
    use std::ops::ControlFlow;
    struct Locks;
    impl Visitor for Locks {
        type Break = ();
        fn pre_visit_query(&mut self, q: &sql::Query) -> ControlFlow<()> {
            if q.locks.is_empty() {
                ControlFlow::Continue(())
            } else {
                ControlFlow::Break(())
            }
        }
    }
    if query.visit(&mut Locks).is_continue() {
        return Ok(());
    }
    let words: Vec<&TokenWithSpan> =
        toks.iter().filter(|t| !matches!(t.token, Token::Whitespace(_))).collect();
    let at = words.windows(2).find(|w| {
        word_is(w[0], "FOR") && ["UPDATE", "SHARE", "NO", "KEY"].iter().any(|k| word_is(w[1], k))
    });
    Err(WeirError::plan_at(
        "FOR UPDATE and FOR SHARE (row locks) are not supported: a continuous query holds no \
         transaction for a lock to belong to",
        at.and_then(|w| tok_span(w[0])),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::testing::query;
    use crate::parser::Duration;

    #[test]
    fn for_system_time_as_of_becomes_a_versioned_side() {
        let q = query("SELECT * FROM s AS p JOIN t FOR SYSTEM_TIME AS OF p.ts AS x ON p.k = x.k");
        assert_eq!(q.query.to_string(), "SELECT * FROM s AS p JOIN __weir_wv0 AS x ON p.k = x.k");
        let w = &q.windows[0];
        assert_eq!(w.stream, "t");
        let WindowKind::AsOf { qualifier, column, at } = &w.kind else { panic!("{w:?}") };
        assert_eq!((qualifier.as_deref(), column.as_str()), (Some("p"), "ts"));
        assert_eq!(at.map(|a| (a.line, a.column)), Some((1, 51)));
        // Without an alias the versioned side keeps its name; unqualified time columns too.
        let q = query("SELECT * FROM s LEFT JOIN t FOR SYSTEM_TIME AS OF ts ON s.k = t.k");
        assert_eq!(q.query.to_string(), "SELECT * FROM s LEFT JOIN __weir_wv0 AS t ON s.k = t.k");
        assert!(
            matches!(&q.windows[0].kind, WindowKind::AsOf { qualifier: None, column, .. } if column == "ts")
        );
        // Round trip through the CQL text.
        assert_eq!(
            q.to_string(),
            "SELECT * FROM s LEFT JOIN t FOR SYSTEM_TIME AS OF ts AS t ON s.k = t.k"
        );
        let bad =
            crate::parser::parse_script("SELECT * FROM s JOIN t FOR SYSTEM_TIME AS OF 1 ON true");
        assert!(bad.unwrap_err().to_string().contains("expected the event-time column"));
    }

    #[test]
    fn windows_are_replaced_and_round_trip() {
        let q = query("SELECT ISTREAM * FROM s [RANGE 10 SECONDS SLIDE 2 SECONDS] AS x, t [NOW]");
        assert_eq!(q.r2s, Some(R2S::Istream));
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 AS x, __weir_w1 AS t");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::RangeSlide(Duration::Micros(10_000_000), Duration::Micros(2_000_000))
        );
        assert_eq!(q.windows[1].kind, WindowKind::Now);
        assert_eq!(q.windows[1].stream, "t");
        // Round trip: the rewritten SQL parses to the same text again.
        let again = query(&q.query.to_string());
        assert_eq!(again.query.to_string(), q.query.to_string());
    }

    #[test]
    fn function_form_of_r2s() {
        let q = query("SELECT RSTREAM(a, b) FROM s [ROWS 3]");
        assert_eq!(q.r2s, Some(R2S::Rstream));
        assert_eq!(q.query.to_string(), "SELECT a, b FROM __weir_w0 AS s");
        let q = query("SELECT DSTREAM(*) FROM s [PARTITION BY k, j ROWS 1] y");
        assert_eq!(q.r2s, Some(R2S::Dstream));
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 y");
        match &q.windows[0].kind {
            WindowKind::PartitionRows(cols, 1) => {
                assert_eq!(cols.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["k", "j"])
            }
            k => panic!("{k:?}"),
        }
    }

    /// parse -> print -> parse gives the same query.
    fn round_trip(sql: &str) {
        let q = query(sql);
        let printed = q.to_string();
        let again = query(&printed);
        assert_eq!(again.to_string(), printed, "round trip of {sql}");
        assert_eq!(again.r2s, q.r2s);
        // Spans differ between the two texts; compare the windows as written.
        let kinds = |q: &CqlQuery| {
            q.windows.iter().map(|w| (w.stream.clone(), w.kind.to_string())).collect::<Vec<_>>()
        };
        assert_eq!(kinds(&again), kinds(&q));
    }

    #[test]
    fn round_trips() {
        for sql in [
            "SELECT ISTREAM a, b FROM s [RANGE 10] WHERE a > 1",
            "SELECT DSTREAM(*) FROM s [ROWS 3] x JOIN t [NOW] ON x.a = t.a",
            "SELECT RSTREAM k, COUNT(*) FROM s [PARTITION BY k, j ROWS 2] GROUP BY k",
            "SELECT * FROM s [RANGE INTERVAL '10' SECOND SLIDE 5 SECONDS] AS w, p",
            "SELECT k FROM (SELECT k FROM s [UNBOUNDED]) AS sub",
            "SELECT a FROM s [RANGE 2] UNION ALL SELECT a FROM t [RANGE 3]",
            "WITH g AS (SELECT k FROM s [RANGE 2]) SELECT ISTREAM k FROM g",
            "SELECT ISTREAM window_start, COUNT(*) FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start",
            "SELECT * FROM TABLE(HOP(TABLE e, DESCRIPTOR(ts), 5, 10)) AS h",
            "SELECT ISTREAM k, COUNT(*) FROM s [SESSION 30 SECONDS PARTITION BY k, j] GROUP BY k",
            "SELECT * FROM s [DEDUPLICATE] x JOIN t [DEDUPLICATE BY a, b CAPACITY 10 ERROR 0.5] y ON x.a = y.a",
            "SELECT * FROM s [DEDUPLICATE ERROR 0.001]",
            "SELECT v FROM s [SAMPLE 3 ROWS] UNION ALL SELECT v FROM t [SAMPLE 4 ROWS SEED 9]",
            "SELECT * FROM s [SESSION 5] AS x",
            "SELECT window_start FROM TABLE(SESSION(TABLE e PARTITION BY k, DESCRIPTOR(ts), INTERVAL '30' SECOND)) AS w",
            "SELECT * FROM TABLE(SESSION(TABLE e, DESCRIPTOR(ts), 5))",
            "SELECT window_end, COUNT(*) FROM TABLE(CUMULATE(TABLE e, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '1' HOUR)) GROUP BY window_end",
            "SELECT * FROM TABLE(CUMULATE(TABLE e, DESCRIPTOR(ts), 2, 6)) AS c",
            "SELECT * FROM s [RANGE 4 SLIDE 2 OFFSET 1] AS x",
            "SELECT * FROM s [RANGE 4 SLIDE 2 OFFSET -3]",
            "SELECT * FROM TABLE(TUMBLE(TABLE e, DESCRIPTOR(ts), INTERVAL '10' MINUTE, INTERVAL '-1' MINUTE))",
            "SELECT * FROM TABLE(HOP(TABLE e, DESCRIPTOR(ts), 2, 4, 1)) AS h",
            "SELECT * FROM TABLE(CUMULATE(TABLE e, DESCRIPTOR(ts), 2, 6, 3))",
        ] {
            round_trip(sql);
        }
    }

    /// Both forms of a session window: the table function (with bounds columns) and CQL's.
    #[test]
    fn session_windows_parse() {
        let q =
            query("SELECT * FROM TABLE(SESSION(TABLE e PARTITION BY a, b, DESCRIPTOR(ts), 7)) w");
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 w");
        assert_eq!(q.windows[0].stream, "e");
        let WindowKind::Session { column, gap, by } = &q.windows[0].kind else {
            panic!("{:?}", q.windows[0].kind)
        };
        assert_eq!((column.as_deref(), *gap), (Some("ts"), Duration::Ticks(7)));
        assert_eq!(by.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(q.windows[0].kind.has_bounds_columns());
        let q = query("SELECT * FROM e [SESSION 2 SECONDS]");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::Session { column: None, gap: Duration::Micros(2_000_000), by: vec![] }
        );
        assert!(!q.windows[0].kind.has_bounds_columns());
        let e = crate::parser::parse_script("SELECT * FROM TABLE(SESSION(TABLE e, ts, 5))")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SESSION expects (TABLE stream [PARTITION BY cols]"), "{e}");
        let e = crate::parser::parse_script("SELECT * FROM e [SESSION 0]").unwrap_err().to_string();
        assert!(e.contains("a SESSION gap must be positive"), "{e}");
    }

    /// CUMULATE takes the step, then the size, in both spellings; a wrong argument list names
    /// the function and what it takes.
    #[test]
    fn cumulate_windows_parse() {
        for sql in [
            "SELECT * FROM TABLE(CUMULATE(TABLE e, DESCRIPTOR(ts), 2, 6)) c",
            "SELECT * FROM CUMULATE(e, ts, 2, 6) c",
        ] {
            let q = query(sql);
            assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 c");
            assert_eq!(q.windows[0].stream, "e");
            assert_eq!(
                q.windows[0].kind,
                WindowKind::Cumulate {
                    column: "ts".into(),
                    step: Duration::Ticks(2),
                    size: Duration::Ticks(6)
                }
            );
            assert!(q.windows[0].kind.has_bounds_columns());
            assert!(!q.windows[0].kind.maps_relations());
        }
        let e = crate::parser::parse_script("SELECT * FROM TABLE(CUMULATE(TABLE e, ts, 2, 6))")
            .unwrap_err()
            .to_string();
        assert!(e.contains("CUMULATE expects (TABLE stream, DESCRIPTOR(time_column)"), "{e}");
        // A column named cumulate is still a column.
        assert!(query("SELECT cumulate FROM t WHERE cumulate > 1").windows.is_empty());
    }

    /// Flink's group windows become the table functions, and X_START/X_END their bounds.
    #[test]
    fn group_windows_become_window_table_functions() {
        let q = query("SELECT k, TUMBLE_END(ts, 5) FROM e AS x GROUP BY TUMBLE(ts, 5), k");
        assert_eq!(
            q.query.to_string(),
            "SELECT k, window_end FROM __weir_w0 AS x GROUP BY window_start, window_end, k"
        );
        assert_eq!(
            q.windows[0].kind,
            WindowKind::Tumble { column: "ts".into(), size: Duration::Ticks(5) }
        );
        let q = query("SELECT COUNT(*) FROM e GROUP BY k, j, SESSION(ts, 3)");
        let WindowKind::Session { column, gap, by } = &q.windows[0].kind else {
            panic!("{:?}", q.windows[0].kind)
        };
        assert_eq!((column.as_deref(), *gap), (Some("ts"), Duration::Ticks(3)));
        assert_eq!(by.iter().map(|c| c.0.as_str()).collect::<Vec<_>>(), ["k", "j"]);
        let q = query("SELECT HOP_START(ts, 2, 6) FROM e GROUP BY HOP(ts, 2, 6)");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::Hop {
                column: "ts".into(),
                slide: Duration::Ticks(2),
                size: Duration::Ticks(6)
            }
        );
        // Columns and functions named like the windows are left alone.
        assert!(query("SELECT tumble FROM t GROUP BY tumble").windows.is_empty());
        let e = crate::parser::parse_script("SELECT SESSION_END(ts, 3) FROM e GROUP BY k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SESSION_END(...) needs GROUP BY SESSION(...)"), "{e}");
    }

    /// RisingWave's spelling, `TUMBLE(t, col, size)` and `HOP(t, col, slide, size)` in FROM,
    /// is the same window as Flink's `TABLE(TUMBLE(TABLE t, DESCRIPTOR(col), size))`.
    #[test]
    fn risingwave_spelling_of_the_window_functions() {
        let q = query("SELECT * FROM TUMBLE(t, ts, INTERVAL '10' SECOND) w JOIN u ON w.k = u.k");
        assert_eq!(q.query.to_string(), "SELECT * FROM __weir_w0 w JOIN u ON w.k = u.k");
        assert_eq!(q.windows[0].stream, "t");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::Tumble { column: "ts".into(), size: Duration::Micros(10_000_000) }
        );
        let q = query("SELECT window_start FROM hop(t, ts, 2, 4)");
        assert_eq!(q.query.to_string(), "SELECT window_start FROM __weir_w0 AS t");
        assert_eq!(
            q.windows[0].kind,
            WindowKind::Hop {
                column: "ts".into(),
                slide: Duration::Ticks(2),
                size: Duration::Ticks(4)
            }
        );
        let e = crate::parser::parse_script("SELECT * FROM TUMBLE(t, ts)").unwrap_err().to_string();
        assert!(e.contains("expected ','"), "{e}");
        // A column named tumble is still a column.
        let q = query("SELECT tumble FROM t WHERE tumble > 1");
        assert!(q.windows.is_empty());
        for sql in ["SELECT * FROM TUMBLE(t, ts, 5) AS x", "SELECT * FROM HOP(t, ts, 5, 10)"] {
            round_trip(sql);
        }
    }

    mod props {
        use proptest::prelude::*;

        fn window() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("[UNBOUNDED]".to_string()),
                Just("[NOW]".to_string()),
                (1i64..100).prop_map(|t| format!("[RANGE {t}]")),
                (1i64..100, 1i64..100).prop_map(|(t, s)| format!("[RANGE {t} SLIDE {s}]")),
                (1i64..10).prop_map(|t| format!("[RANGE {t} SECONDS]")),
                (0u64..10).prop_map(|n| format!("[ROWS {n}]")),
                (1u64..10).prop_map(|n| format!("[SAMPLE {n} ROWS SEED {}]", n * 7)),
                (1i64..100, 1i64..100, 1u64..10).prop_map(|(t, s, n)| {
                    format!("[RANGE {t} SLIDE {s} SAMPLE {n} ROWS SEED {}]", n * 3)
                }),
                (1i64..100, 1u64..10).prop_map(|(t, n)| {
                    format!("[RANGE {t} SLIDE {t} OFFSET -{n} SAMPLE {n} ROWS]")
                }),
                (1u64..10).prop_map(|n| format!("[DEDUPLICATE BY k CAPACITY {n} ERROR 0.25]")),
                (0u64..10).prop_map(|n| format!("[PARTITION BY k ROWS {n}]")),
                (1i64..100).prop_map(|g| format!("[SESSION {g}]")),
                (1i64..10).prop_map(|g| format!("[SESSION {g} SECONDS PARTITION BY k, j]")),
            ]
        }

        fn query() -> impl Strategy<Value = String> {
            (
                prop_oneof![Just(""), Just("ISTREAM "), Just("DSTREAM "), Just("RSTREAM ")],
                prop::collection::vec(
                    (prop_oneof![Just("s"), Just("t"), Just("bids")], window(), any::<bool>()),
                    1..4,
                ),
                any::<bool>(),
            )
                .prop_map(|(r2s, from, filter)| {
                    let from: Vec<String> = from
                        .iter()
                        .enumerate()
                        .map(|(i, (name, w, alias))| {
                            if *alias {
                                format!("{name} {w} AS x{i}")
                            } else {
                                format!("{name} {w}")
                            }
                        })
                        .collect();
                    let filter = if filter { " WHERE a > 1" } else { "" };
                    format!("SELECT {r2s}a, b FROM {}{filter}", from.join(", "))
                })
        }

        proptest! {
            #[test]
            fn generated_queries_round_trip(sql in query()) {
                super::round_trip(&sql);
            }

            #[test]
            fn token_soup_never_panics(words in prop::collection::vec(prop_oneof![
                Just("SELECT"), Just("ISTREAM"), Just("FROM"), Just("s"), Just("["), Just("]"),
                Just("RANGE"), Just("SLIDE"), Just("ROWS"), Just("PARTITION"), Just("BY"),
                Just("("), Just(")"), Just(","), Just("10"), Just("-1"), Just("SECONDS"),
                Just("INTERVAL"), Just("'5'"), Just("AS"), Just("WHERE"), Just("CREATE"),
                Just("STREAM"), Just("WATERMARK"), Just("FOR"), Just("t"), Just("-"), Just(";"),
                Just("ADVANCE"), Just("TO"), Just("CLOSE"), Just("AT"), Just("INSERT"),
                Just("INTO"), Just("VALUES"), Just("NOW"), Just("UNBOUNDED"), Just("*"),
                Just("SESSION"), Just("DESCRIPTOR"), Just("TABLE"), Just("TABLE(SESSION(TABLE s"),
                Just("CUMULATE"), Just("TABLE(CUMULATE(TABLE s"),
            ], 0..25)) {
                let _ = crate::parser::parse_script(&words.join(" "));
            }

            #[test]
            fn arbitrary_text_never_panics(text in ".{0,80}") {
                let _ = crate::parser::parse_script(&text);
            }
        }
    }
}
