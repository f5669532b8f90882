//! Weir's errors as PostgreSQL error responses: a SQLSTATE code, the message, and for errors
//! in SQL text the position of the offending character (which psql shows with a caret).
//!
//! | Weir error | SQLSTATE |
//! | --- | --- |
//! | syntax | `42601` syntax_error |
//! | plan: unknown stream, table or view | `42P01` undefined_table |
//! | plan: unknown column | `42703` undefined_column |
//! | plan: unknown function | `42883` undefined_function |
//! | plan: already exists | `42P07` duplicate_table |
//! | plan: not supported | `0A000` feature_not_supported |
//! | plan: anything else (types, shapes) | `42804` datatype_mismatch if about types, else `42000` |
//! | execution: unknown stream | `42P01` undefined_table |
//! | execution: a subscriber fell behind | `53400` configuration_limit_exceeded |
//! | execution: anything else (a closed stream, a late element refused) | `55000` object_not_in_prerequisite_state |
//! | input (a bad row under `bad_rows = 'fail'`) | `22P02` invalid_text_representation |
//! | internal | `XX000` internal_error |

use pgwire::error::{ErrorInfo, PgWireError};
use weir::WeirError;

/// The SQLSTATE of an error.
pub(crate) fn code(e: &WeirError) -> &'static str {
    match e {
        WeirError::Syntax(_) => "42601",
        WeirError::Plan(d) => {
            let m = d.message.to_ascii_lowercase();
            if m.contains("not supported") || m.contains("unsupported") {
                "0A000"
            } else if m.starts_with("unknown stream")
                || m.starts_with("unknown table")
                || m.starts_with("unknown view")
                || m.contains("not found") && m.contains("table")
                || m.starts_with("unknown stream, table or view")
            {
                "42P01"
            } else if m.contains("column")
                && (m.contains("unknown") || m.contains("not found") || m.contains("no field"))
            {
                "42703"
            } else if m.contains("function") && (m.contains("unknown") || m.contains("invalid")) {
                "42883"
            } else if m.contains("already exists") {
                "42P07"
            } else if m.contains("type") {
                "42804"
            } else {
                "42000"
            }
        }
        WeirError::Execution(m) if m.starts_with("the subscription fell behind") => "53400",
        WeirError::Execution(m) if m.starts_with("unknown stream") => "42P01",
        WeirError::Execution(_) => "55000",
        WeirError::Input(_) => "22P02",
        WeirError::Internal(_) => "XX000",
    }
}

/// The error response for `e`, raised by a statement that begins `offset` characters into
/// the query string the client sent.
pub(crate) fn error_info(e: &WeirError, query: &str, offset: usize) -> ErrorInfo {
    let (message, position) = match e {
        WeirError::Syntax(d) | WeirError::Plan(d) => {
            let message = match e {
                WeirError::Syntax(_) => format!("syntax error: {}", d.message),
                _ => d.message.clone(),
            };
            let position = d.span.and_then(|s| {
                let source = d.source.as_deref()?;
                char_index(source, s.line, s.column).map(|i| i + offset)
            });
            (message, position)
        }
        other => (other.to_string(), None),
    };
    let code = code(e);
    let lower = query.to_ascii_lowercase();
    let catalog = lower.contains("pg_catalog.") || lower.contains("information_schema.");
    let mut info = ErrorInfo::new("ERROR".into(), code.into(), message);
    if code == "42P01" && (catalog || lower.contains(" pg_")) {
        info.hint = Some(
            "Weir has no PostgreSQL system catalog: SHOW STREAMS, SHOW TABLES, SHOW VIEWS, \
             SHOW SINKS and DESCRIBE name tell what exists"
                .into(),
        );
    }
    // 1-based, in characters of the whole query string, as PostgreSQL counts.
    info.position =
        position.filter(|p| *p < query.chars().count() + 1).map(|p| (p + 1).to_string());
    info
}

/// An error response for a Weir error.
pub(crate) fn pg_error(e: &WeirError, query: &str, offset: usize) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e, query, offset)))
}

/// An error response with a code and message of the server's own.
pub(crate) fn server_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), code.into(), message.into())))
}

/// The 0-based character index of 1-based `line` and `column` in `text`.
fn char_index(text: &str, line: u64, column: u64) -> Option<usize> {
    let mut index = 0;
    for (n, l) in text.split_inclusive('\n').enumerate() {
        if n as u64 + 1 == line {
            return Some(index + column.saturating_sub(1) as usize);
        }
        index += l.chars().count();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_of_the_whole_query() {
        assert_eq!(char_index("ab\ncdé\nfg", 3, 2), Some(8));
        assert_eq!(char_index("abc", 1, 1), Some(0));
        assert_eq!(char_index("abc", 2, 1), None);
        let e = weir::Engine::new().execute("SELECT 1;\nSELEC 2").unwrap_err();
        let info = error_info(&e, "  SELECT 1;\nSELEC 2", 2);
        assert_eq!(info.code, "42601");
        // `SELEC` starts at character 13 (1-based) of the query as sent.
        assert_eq!(info.position.as_deref(), Some("13"));
    }

    #[test]
    fn codes_follow_the_kind_of_error() {
        let mut e = weir::Engine::new();
        let code_of = |e: &mut weir::Engine, sql: &str| code(&e.execute(sql).unwrap_err());
        assert_eq!(code_of(&mut e, "SELECT * FROM nowhere"), "42P01");
        e.execute("CREATE TABLE t (a BIGINT)").unwrap();
        assert_eq!(code_of(&mut e, "SELECT b FROM t"), "42703");
        assert_eq!(code_of(&mut e, "SELECT nosuchfn(a) FROM t"), "42883");
        assert_eq!(code_of(&mut e, "CREATE TABLE t (a BIGINT)"), "42P07");
        assert_eq!(code_of(&mut e, "CLOSE nowhere"), "42P01");
    }

    /// psql's `\d` asks PostgreSQL's catalog: the error says where to look instead.
    #[test]
    fn catalog_queries_get_a_hint() {
        let q = "SELECT c.relname FROM pg_catalog.pg_class c";
        let e = weir::Engine::new().execute(q).unwrap_err();
        let info = error_info(&e, q, 0);
        assert_eq!(info.code, "42P01");
        assert!(info.hint.unwrap().starts_with("Weir has no PostgreSQL system catalog"));
    }
}
