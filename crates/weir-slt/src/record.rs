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
    Statement { sql: String, expect: Expect },
    Query { sql: String, sort: SortMode, expected: Vec<String>, expect_error: Option<Expect> },
    Subscribe { name: String, sql: String },
    Output { name: String, expected: Vec<String> },
    Explain { sql: String, expected: Vec<String> },
    Halt,
}

#[derive(Debug, Clone)]
pub struct Record {
    pub line: usize,
    pub kind: Kind,
    /// `skipif weir` / `onlyif <other>` seen before the record.
    pub skip: bool,
}

/// Splits a file into records. Errors name the line.
pub fn parse(text: &str) -> Result<Vec<Record>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let mut skip = false;
    while i < lines.len() {
        let line = lines[i].trim_end();
        let start = i + 1;
        i += 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let block = |i: &mut usize, dashes: bool| read_block(&lines, i, dashes);
        let kind = match words[0] {
            "skipif" => {
                skip |= words.get(1) == Some(&"weir");
                continue;
            }
            "onlyif" => {
                skip |= words.get(1) != Some(&"weir");
                continue;
            }
            "hash-threshold" | "control" => continue,
            "halt" => Kind::Halt,
            "statement" => {
                let (sql, dashed) = block(&mut i, true);
                match words.get(1) {
                    Some(&"ok") => Kind::Statement { sql: sql.join("\n"), expect: Expect::Ok },
                    Some(&"error") => {
                        let pattern = (words.len() > 2).then(|| words[2..].join(" "));
                        let exact =
                            if dashed { Some(read_until_blank(&lines, &mut i)) } else { None };
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
                    let (sql, dashed) = block(&mut i, true);
                    let pattern = (words.len() > 2).then(|| words[2..].join(" "));
                    let exact = if dashed { Some(read_until_blank(&lines, &mut i)) } else { None };
                    Kind::Query {
                        sql: sql.join("\n"),
                        sort: SortMode::NoSort,
                        expected: vec![],
                        expect_error: Some(Expect::Error { pattern, exact }),
                    }
                } else {
                    let sort = match words.get(2) {
                        Some(&"rowsort") => SortMode::RowSort,
                        Some(&"valuesort") => SortMode::ValueSort,
                        _ => SortMode::NoSort,
                    };
                    let (sql, dashed) = block(&mut i, true);
                    let expected = if dashed { read_until_blank(&lines, &mut i) } else { vec![] };
                    Kind::Query { sql: sql.join("\n"), sort, expected, expect_error: None }
                }
            }
            "subscribe" => {
                let name = words.get(1).ok_or(format!("line {start}: subscribe needs a name"))?;
                let (sql, _) = block(&mut i, false);
                Kind::Subscribe { name: name.to_string(), sql: sql.join("\n") }
            }
            "output" => {
                let name = words.get(1).ok_or(format!("line {start}: output needs a name"))?;
                let (_, dashed) = block(&mut i, true);
                if !dashed {
                    return Err(format!("line {start}: output needs '----' and the expected rows"));
                }
                Kind::Output { name: name.to_string(), expected: read_until_blank(&lines, &mut i) }
            }
            "explain" => {
                let (sql, dashed) = block(&mut i, true);
                if !dashed {
                    return Err(format!(
                        "line {start}: explain needs '----' and the expected plan"
                    ));
                }
                Kind::Explain { sql: sql.join("\n"), expected: read_until_blank(&lines, &mut i) }
            }
            other => return Err(format!("line {start}: unknown record '{other}'")),
        };
        out.push(Record { line: start, kind, skip });
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
