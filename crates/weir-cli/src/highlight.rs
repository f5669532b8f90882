//! SQL syntax highlighting for the REPL's line editor: keywords, quoted text, numbers and
//! comments get their own colour as the statement is typed. It is lexical only (no parse), so
//! it never fails on a half-typed statement: an unterminated quote or comment is coloured to
//! the end of the line. `NO_COLOR` (any value) turns it off, as https://no-color.org asks.

use crate::complete::KEYWORDS;

const KEYWORD: &str = "\x1b[1;34m";
const TEXT: &str = "\x1b[32m";
const NUMBER: &str = "\x1b[36m";
const COMMENT: &str = "\x1b[90m";
const RESET: &str = "\x1b[0m";

/// Whether the terminal should get colours: not when `NO_COLOR` is set.
pub fn wanted() -> bool {
    std::env::var_os("NO_COLOR").is_none()
}

/// `line` with ANSI colours around its keywords, quoted text, numbers and comments; everything
/// else (names, operators, spaces) is left as typed, so the visible text is unchanged.
pub fn highlight(line: &str) -> String {
    let mut out = String::with_capacity(line.len() + 32);
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        let (len, colour) = if rest.starts_with("--") {
            (rest.find('\n').unwrap_or(rest.len()), Some(COMMENT))
        } else if let Some(body) = rest.strip_prefix("/*") {
            (body.find("*/").map_or(rest.len(), |i| i + 4), Some(COMMENT))
        } else if c == '\'' || c == '"' {
            (quoted_len(rest, c), if c == '\'' { Some(TEXT) } else { None })
        } else if c.is_ascii_digit() {
            let n = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '.'))
                .unwrap_or(rest.len());
            (n, Some(NUMBER))
        } else if c.is_alphabetic() || c == '_' {
            let n = rest
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '$'))
                .unwrap_or(rest.len());
            let word = &rest[..n];
            let keyword = KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word));
            (n, keyword.then_some(KEYWORD))
        } else {
            (c.len_utf8(), None)
        };
        let (token, after) = rest.split_at(len);
        match colour {
            Some(colour) => {
                out.push_str(colour);
                out.push_str(token);
                out.push_str(RESET);
            }
            None => out.push_str(token),
        }
        rest = after;
    }
    out
}

/// The length of the quoted token at the start of `s` (quote `q`, doubled to escape), to the
/// end of `s` if it is not closed yet.
fn quoted_len(s: &str, q: char) -> usize {
    let mut chars = s.char_indices().skip(1).peekable();
    while let Some((i, c)) = chars.next() {
        if c == q {
            if chars.peek().is_some_and(|&(_, n)| n == q) {
                chars.next();
                continue;
            }
            return i + c.len_utf8();
        }
    }
    s.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('\x1b') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            rest = &rest[rest.find('m').map_or(rest.len(), |m| m + 1)..];
        }
        out + rest
    }

    #[test]
    fn keywords_text_numbers_and_comments_are_coloured() {
        let got = highlight("SELECT k, 'it''s' FROM s [RANGE 10] -- note");
        assert_eq!(
            got,
            "\x1b[1;34mSELECT\x1b[0m k, \x1b[32m'it''s'\x1b[0m \x1b[1;34mFROM\x1b[0m s \
             [\x1b[1;34mRANGE\x1b[0m \x1b[36m10\x1b[0m] \x1b[90m-- note\x1b[0m"
        );
    }

    #[test]
    fn half_typed_statements_keep_their_text() {
        for line in [
            "select * from t where name = 'unterminated",
            "/* open comment select",
            "SELECT \"Quoted Name\", 1.5e3, x_1$late FROM s;",
            "é ü 漢字 'ö' -- ünïcode",
            "",
        ] {
            assert_eq!(strip(&highlight(line)), line);
        }
        // Case does not matter for keywords; names that contain one are not keywords.
        assert!(highlight("select").starts_with(KEYWORD));
        assert_eq!(highlight("selected"), "selected");
        assert!(highlight("x = 'open").ends_with(&format!("{TEXT}'open{RESET}")));
    }
}
