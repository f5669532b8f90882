//! The files kept beside a test corpus, outside its (pristine) test files: a list of known
//! failures to skip, and a baseline of pass counts per file.
//!
//! Both name a test file by a path suffix (`select1.test`, or `joins/outer.slt`), which matches
//! any file whose path ends with those components, so the lists work whichever directory the
//! corpus is run from. `#` starts a comment line; blank lines are ignored.
//!
//! - known failures, one per line: `FILE:LINE reason`. LINE is the line of the record's
//!   `statement`/`query` line, as failures are reported. Such a record is not run and counts as
//!   skipped.
//! - baseline, one per line: `FILE PASSED`, the number of records of FILE that passed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Whether the path `key` (relative, from a list) names `file`.
pub fn names(key: &Path, file: &Path) -> bool {
    !key.as_os_str().is_empty() && file.ends_with(key)
}

#[derive(Debug, Clone)]
pub struct KnownFailure {
    pub file: PathBuf,
    pub line: usize,
    pub reason: String,
    /// The line of the list file the entry is on.
    pub list_line: usize,
}

/// A skip list of known failures.
#[derive(Debug, Clone, Default)]
pub struct KnownFailures {
    pub entries: Vec<KnownFailure>,
}

impl KnownFailures {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (loc, reason) = match line.split_once(char::is_whitespace) {
                Some((l, r)) => (l, r.trim()),
                None => (line, ""),
            };
            let parsed = loc.rsplit_once(':').and_then(|(f, n)| Some((f, n.parse().ok()?)));
            let Some((file, rec_line)) = parsed else {
                return Err(format!("line {}: expected 'FILE:LINE reason', got '{line}'", i + 1));
            };
            if reason.is_empty() {
                return Err(format!("line {}: '{loc}' needs a reason", i + 1));
            }
            entries.push(KnownFailure {
                file: PathBuf::from(file),
                line: rec_line,
                reason: reason.to_string(),
                list_line: i + 1,
            });
        }
        Ok(Self { entries })
    }

    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The entries for `file`: record line -> reason.
    pub fn for_file(&self, file: &Path) -> BTreeMap<usize, String> {
        self.entries
            .iter()
            .filter(|e| names(&e.file, file))
            .map(|e| (e.line, e.reason.clone()))
            .collect()
    }
}

/// Pass counts per file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Baseline {
    pub entries: BTreeMap<PathBuf, usize>,
}

impl Baseline {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(file), Some(count), None) = (words.next(), words.next(), words.next()) else {
                return Err(format!("line {}: expected 'FILE PASSED', got '{line}'", i + 1));
            };
            let count =
                count.parse().map_err(|_| format!("line {}: '{count}' is not a count", i + 1))?;
            entries.insert(PathBuf::from(file), count);
        }
        Ok(Self { entries })
    }

    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The recorded pass count for `file`, with the key it is recorded under.
    pub fn get(&self, file: &Path) -> Option<(&Path, usize)> {
        self.entries.iter().find(|(k, _)| names(k, file)).map(|(k, v)| (k.as_path(), *v))
    }

    /// The file's text, with a header comment.
    pub fn to_text(&self) -> String {
        let mut out = String::from(
            "# Records that pass, per file: weir-slt fails if a file drops below its count.\n\
             # Re-record after an improvement with `weir-slt --baseline THIS_FILE --write-baseline DIR`.\n",
        );
        for (k, v) in &self.entries {
            let _ = writeln!(out, "{} {v}", k.display());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_failures() {
        let k = KnownFailures::parse(
            "# comment\n\nselect1.test:12 wrong NULL ordering\nsub/x.slt:3   reason two\n",
        )
        .expect("parses");
        assert_eq!(k.entries.len(), 2);
        let f = k.for_file(Path::new("../shared/conformance/sqlite/select1.test"));
        assert_eq!(f.get(&12).map(String::as_str), Some("wrong NULL ordering"));
        assert!(k.for_file(Path::new("other/select1.test.bak")).is_empty());
        assert_eq!(k.for_file(Path::new("a/sub/x.slt")).len(), 1);
        assert!(k.for_file(Path::new("a/x.slt")).is_empty());
        assert!(KnownFailures::parse("select1.test:12\n").is_err());
        assert!(KnownFailures::parse("select1.test reason\n").is_err());
    }

    #[test]
    fn baseline_roundtrip() {
        let b = Baseline::parse("# c\nselect1.test 1031\nselect2.test 5\n").expect("parses");
        assert_eq!(b.get(Path::new("x/select1.test")), Some((Path::new("select1.test"), 1031)));
        assert_eq!(b.get(Path::new("x/select3.test")), None);
        assert_eq!(Baseline::parse(&b.to_text()).expect("parses"), b);
        assert!(Baseline::parse("select1.test many\n").is_err());
        assert!(Baseline::parse("select1.test 1 2\n").is_err());
    }
}
