//! The records of a test file (sqllogictest format plus Weir's continuous-query records).

/// How the rows of a one-shot query are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortMode {
    NoSort,
    RowSort,
    ValueSort,
}

#[derive(Debug, Clone)]
pub enum Expect {
    Ok,
    /// A regex the error must match, or the exact error text after `----`.
    Error {
        pattern: Option<String>,
        exact: Option<Vec<String>>,
    },
}

#[derive(Debug, Clone)]
pub enum Kind {
    Statement {
        sql: String,
        expect: Expect,
    },
    /// A one-shot query. `types` are the type letters (`ITR`, ...), one per column; `label`
    /// names results that must hash the same wherever the label appears in the file.
    Query {
        sql: String,
        types: String,
        sort: SortMode,
        label: Option<String>,
        expected: Vec<String>,
        expect_error: Option<Expect>,
    },
    Subscribe {
        name: String,
        sql: String,
    },
    Output {
        name: String,
        expected: Vec<String>,
    },
    Explain {
        sql: String,
        expected: Vec<String>,
    },
    Halt,
    /// `sleep 5s` (or `500ms`, `2m`): moves the engine's processing-time clock forward, which
    /// is what idle timeouts count; nothing actually waits.
    Sleep(std::time::Duration),
    /// `hash-threshold N`: results with more than N values are compared by hash (0: never).
    HashThreshold(usize),
}

#[derive(Debug, Clone)]
pub struct Record {
    pub line: usize,
    pub kind: Kind,
    /// `skipif weir` / `onlyif <other>` seen before the record.
    pub skip: bool,
    /// Where the record's parts are in the file, for `--complete`.
    pub layout: Layout,
}

/// Where a record's parts are in its file, as 1-based line numbers of the whole text (comment
/// lines included).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Layout {
    /// The last line of the record's SQL, or its header line when it has no SQL.
    pub sql_end: usize,
    /// The `----` line.
    pub dashes: Option<usize>,
    /// The first and last line of what follows `----` (expected rows, changes, plan or error
    /// text); `None` when nothing does.
    pub expected: Option<(usize, usize)>,
}

/// The engine name `skipif` and `onlyif` compare against (case-insensitively).
pub const ENGINE: &str = "weir";

/// Splits a file into records. Errors name the line.
///
/// As in the reference driver, a line starting with `#` is a comment wherever it is (it ends
/// nothing and is not part of a record's SQL or results).
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    let numbers: Vec<usize> =
        text.lines().enumerate().filter(|(_, l)| !l.starts_with('#')).map(|(n, _)| n + 1).collect();
    let mut i = 0;
    let mut out = Vec::new();
    let mut skip = false;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let start = numbers[i];
        i += 1;
        if line.trim().is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut layout = Layout { sql_end: start, ..Layout::default() };
        // The record's SQL, up to `----` when `dashes`, noting where it ends.
        let block = |i: &mut usize, dashes: bool, layout: &mut Layout| {
            let from = *i;
            let (sql, dashed) = read_block(&lines, i, dashes);
            let sql_to = if dashed { *i - 1 } else { *i };
            if sql_to > from {
                layout.sql_end = numbers[sql_to - 1];
            }
            if dashed {
                layout.dashes = Some(numbers[*i - 1]);
            }
            (sql, dashed)
        };
        // What follows `----`, noting where it is.
        let after_dashes = |i: &mut usize, layout: &mut Layout| {
            let from = *i;
            let got = read_until_blank(&lines, i);
            if *i > from {
                layout.expected = Some((numbers[from], numbers[*i - 1]));
            }
            got
        };
        let kind = match words[0] {
            "skipif" => {
                skip |= words.get(1).is_some_and(|w| w.eq_ignore_ascii_case(ENGINE));
                continue;
            }
            "onlyif" => {
                skip |= !words.get(1).is_some_and(|w| w.eq_ignore_ascii_case(ENGINE));
                continue;
            }
            "control" => continue,
            "hash-threshold" => match words.get(1).and_then(|n| n.parse().ok()) {
                Some(n) => Kind::HashThreshold(n),
                None => return Err(format!("line {start}: hash-threshold needs a number")),
            },
            "halt" => Kind::Halt,
            "sleep" => match words.get(1).and_then(|d| weir::parse_wall_duration(d).ok()) {
                Some(d) => Kind::Sleep(d),
                None => return Err(format!("line {start}: sleep needs a duration such as 5s")),
            },
            "statement" => {
                let (sql, dashed) = block(&mut i, true, &mut layout);
                match words.get(1) {
                    Some(&"ok") => Kind::Statement { sql: sql.join("\n"), expect: Expect::Ok },
                    Some(&"error") => {
                        let pattern = (words.len() > 2).then(|| words[2..].join(" "));
                        let exact =
                            if dashed { Some(after_dashes(&mut i, &mut layout)) } else { None };
                        Kind::Statement {
                            sql: sql.join("\n"),
                            expect: Expect::Error { pattern, exact },
                        }
                    }
                    _ => {
                        return Err(format!(
                            "line {start}: expected 'statement ok' or 'statement error'"
                        ))
                    }
                }
            }
            "query" => {
                if words.get(1) == Some(&"error") {
                    let (sql, dashed) = block(&mut i, true, &mut layout);
                    let pattern = (words.len() > 2).then(|| words[2..].join(" "));
                    let exact = if dashed { Some(after_dashes(&mut i, &mut layout)) } else { None };
                    Kind::Query {
                        sql: sql.join("\n"),
                        types: String::new(),
                        sort: SortMode::NoSort,
                        label: None,
                        expected: vec![],
                        expect_error: Some(Expect::Error { pattern, exact }),
                    }
                } else {
                    let sort = match words.get(2) {
                        None | Some(&"nosort") => SortMode::NoSort,
                        Some(&"rowsort") => SortMode::RowSort,
                        Some(&"valuesort") => SortMode::ValueSort,
                        Some(other) => {
                            return Err(format!("line {start}: unknown sort mode '{other}'"))
                        }
                    };
                    let (sql, dashed) = block(&mut i, true, &mut layout);
                    let expected = if dashed { after_dashes(&mut i, &mut layout) } else { vec![] };
                    Kind::Query {
                        sql: sql.join("\n"),
                        types: words.get(1).map(|t| t.to_string()).unwrap_or_default(),
                        sort,
                        label: words.get(3).map(|l| l.to_string()),
                        expected,
                        expect_error: None,
                    }
                }
            }
            "subscribe" => {
                let name = words.get(1).ok_or(format!("line {start}: subscribe needs a name"))?;
                let (sql, _) = block(&mut i, false, &mut layout);
                Kind::Subscribe { name: name.to_string(), sql: sql.join("\n") }
            }
            "output" => {
                let name = words.get(1).ok_or(format!("line {start}: output needs a name"))?;
                let (_, dashed) = block(&mut i, true, &mut layout);
                if !dashed {
                    return Err(format!("line {start}: output needs '----' and the expected rows"));
                }
                Kind::Output { name: name.to_string(), expected: after_dashes(&mut i, &mut layout) }
            }
            "explain" => {
                let (sql, dashed) = block(&mut i, true, &mut layout);
                if !dashed {
                    return Err(format!(
                        "line {start}: explain needs '----' and the expected plan"
                    ));
                }
                Kind::Explain { sql: sql.join("\n"), expected: after_dashes(&mut i, &mut layout) }
            }
            other => return Err(format!("line {start}: unknown record '{other}'")),
        };
        out.push(Record { line: start, kind, skip, layout });
        skip = false;
    }
    Ok(out)
}

fn read_until_blank(lines: &[&str], i: &mut usize) -> Vec<String> {
    let mut got = Vec::new();
    while *i < lines.len() && !lines[*i].trim().is_empty() {
        got.push(lines[*i].trim_end().to_string());
        *i += 1;
    }
    got
}

/// Lines until a blank line, or until `----` when `dashes` (then `true` is returned too).
fn read_block(lines: &[&str], i: &mut usize, dashes: bool) -> (Vec<String>, bool) {
    let mut got = Vec::new();
    while *i < lines.len() && !lines[*i].trim().is_empty() {
        if dashes && lines[*i].trim_end() == "----" {
            *i += 1;
            return (got, true);
        }
        got.push(lines[*i].to_string());
        *i += 1;
    }
    (got, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Record {
        let mut r = parse(text).expect("parses");
        assert_eq!(r.len(), 1, "{r:?}");
        r.remove(0)
    }

    #[test]
    fn sqlite_query_with_hash_and_label() {
        let r = one("# comment\nquery III rowsort label-7\nSELECT a, b, c\n  FROM t1\n----\n\
             30 values hashing to 3c13dee48d9356ae19af2515e05e6b54\n");
        assert_eq!(r.line, 2);
        let Kind::Query { sql, types, sort, label, expected, expect_error } = r.kind else {
            panic!("not a query")
        };
        assert_eq!(sql, "SELECT a, b, c\n  FROM t1");
        assert_eq!(types, "III");
        assert_eq!(sort, SortMode::RowSort);
        assert_eq!(label.as_deref(), Some("label-7"));
        assert_eq!(expected, ["30 values hashing to 3c13dee48d9356ae19af2515e05e6b54"]);
        assert!(expect_error.is_none());
    }

    #[test]
    fn value_wise_results_and_sort_modes() {
        let r = one("query IT valuesort\nSELECT 1, 'a'\n----\n1\na\n");
        let Kind::Query { sort, label, expected, .. } = r.kind else { panic!("not a query") };
        assert_eq!(sort, SortMode::ValueSort);
        assert_eq!(label, None);
        assert_eq!(expected, ["1", "a"]);
        let r = one("query I nosort\nSELECT 1\n----\n1\n");
        assert!(matches!(r.kind, Kind::Query { sort: SortMode::NoSort, .. }));
        assert!(parse("query I bogus\nSELECT 1\n").is_err());
    }

    #[test]
    fn conditions_apply_to_the_next_record() {
        let recs = parse(
            "onlyif sqlite # empty RHS\nquery I nosort\nSELECT 1\n----\n1\n\n\
             skipif mysql\nstatement ok\nSELECT 1\n\nskipif Weir\nstatement ok\nSELECT 1\n\n\
             onlyif weir\nstatement error\nSELECT x\n",
        )
        .expect("parses");
        let skips: Vec<(usize, bool)> = recs.iter().map(|r| (r.line, r.skip)).collect();
        // Engine names compare case-insensitively, as in the reference driver.
        assert_eq!(skips, [(2, true), (8, false), (12, true), (16, false)]);
    }

    #[test]
    fn layout_counts_comment_lines() {
        let recs = parse(
            "statement ok\nCREATE TABLE t(a INT)\n\nquery I rowsort\nSELECT a\n# note\nFROM t\n\
             ----\n1\n# between\n2\n\nstatement error\nSELECT x\n\nquery I\nSELECT 1\n----\n\n\
             output o\n----\n@1 a\n",
        )
        .expect("parses");
        let layouts: Vec<Layout> = recs.iter().map(|r| r.layout).collect();
        assert_eq!(
            layouts,
            [
                Layout { sql_end: 2, dashes: None, expected: None },
                Layout { sql_end: 7, dashes: Some(8), expected: Some((9, 11)) },
                Layout { sql_end: 14, dashes: None, expected: None },
                Layout { sql_end: 17, dashes: Some(18), expected: None },
                Layout { sql_end: 20, dashes: Some(21), expected: Some((22, 22)) },
            ]
        );
    }

    #[test]
    fn statements_halt_and_hash_threshold() {
        let recs = parse(
            "hash-threshold 8\n\nstatement ok\nCREATE TABLE t1(a INTEGER)\n\n\
             statement error\nSELECT 1 IN (SELECT 1,2)\n\nquery error division\nSELECT 1/0\n\n\
             control resultmode valuewise\n\nhalt\n",
        )
        .expect("parses");
        assert!(matches!(recs[0].kind, Kind::HashThreshold(8)));
        assert!(matches!(recs[1].kind, Kind::Statement { expect: Expect::Ok, .. }));
        assert!(matches!(
            &recs[2].kind,
            Kind::Statement { expect: Expect::Error { pattern: None, exact: None }, .. }
        ));
        assert!(matches!(
            &recs[3].kind,
            Kind::Query { expect_error: Some(Expect::Error { pattern: Some(p), .. }), .. }
                if p == "division"
        ));
        assert!(matches!(recs[4].kind, Kind::Halt));
        assert_eq!(recs.len(), 5);
        assert!(parse("hash-threshold x\n").is_err());
    }
}
