//! Tab completion in the REPL: SQL keywords, the names of streams, tables and views, their
//! columns (`bids.` offers the columns of `bids`, or of whatever `b` is an alias of in
//! `FROM bids b`), backslash commands and their arguments, and file names after `\i`.
//!
//! The catalog is the engine's own listing ([`Engine::catalog`]), read again after each
//! statement the REPL runs.

use std::borrow::Cow;

use rustyline::completion::{Completer, FilenameCompleter, Pair};
use rustyline::highlight::{CmdKind, Highlighter};
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Helper};
use weir::{CatalogObject, Engine, ObjectKind};

/// Keywords offered by completion (the words of `docs/sql.md`).
pub const KEYWORDS: &[&str] = &[
    "ADVANCE",
    "ALL",
    "AND",
    "AS",
    "AT",
    "AVG",
    "BETWEEN",
    "BIGINT",
    "BOOLEAN",
    "BY",
    "CASE",
    "CAST",
    "CLOSE",
    "COALESCE",
    "COPY",
    "COUNT",
    "CREATE",
    "DATE",
    "DAY",
    "DAYS",
    "DECIMAL",
    "DELETE",
    "DESCRIBE",
    "DESCRIPTOR",
    "DISTINCT",
    "DOUBLE",
    "DROP",
    "DSTREAM",
    "ELSE",
    "END",
    "EXISTS",
    "EXPLAIN",
    "FALSE",
    "FLOAT",
    "FOR",
    "FROM",
    "GROUP",
    "HAVING",
    "HOP",
    "HOUR",
    "HOURS",
    "IF",
    "IN",
    "INSERT",
    "INT",
    "INTEGER",
    "INTERVAL",
    "INTO",
    "IS",
    "ISTREAM",
    "JOIN",
    "LIKE",
    "MAX",
    "MEMORY",
    "MICROSECOND",
    "MICROSECONDS",
    "MILLISECOND",
    "MILLISECONDS",
    "MIN",
    "MINUTE",
    "MINUTES",
    "NOT",
    "NOW",
    "NULL",
    "NULLIF",
    "ON",
    "OR",
    "PARTITION",
    "QUERIES",
    "RANGE",
    "REAL",
    "REPLACE",
    "RESET",
    "ROWS",
    "RSTREAM",
    "SECOND",
    "SECONDS",
    "SELECT",
    "SESSION",
    "SET",
    "SHOW",
    "SINK",
    "SINKS",
    "SLIDE",
    "SMALLINT",
    "STATS",
    "STREAM",
    "STREAMS",
    "SUM",
    "TABLE",
    "TABLES",
    "TEXT",
    "THEN",
    "TIMESTAMP",
    "TINYINT",
    "TO",
    "TRUE",
    "TUMBLE",
    "UNBOUNDED",
    "UNION",
    "VALUES",
    "VARCHAR",
    "VIEW",
    "VIEWS",
    "WATERMARK",
    "WHEN",
    "WHERE",
    "WITH",
];

/// The backslash commands, for completion (see `repl::HELP`).
pub const COMMANDS: &[&str] = &[
    "\\?",
    "\\d",
    "\\format",
    "\\help",
    "\\i",
    "\\q",
    "\\queries",
    "\\stop",
    "\\timing",
    "\\view",
];

/// What exists in the engine, for completion and `\d`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    /// Streams (each followed by its companions `s$late` and `s$errors`), tables and views:
    /// what a query reads, so what completion offers and `\d` lists.
    pub objects: Vec<CatalogObject>,
    /// The sinks' names, offered only after `DROP SINK` (the one statement that names a sink).
    pub sinks: Vec<String>,
}

/// How `\d` names a kind of object.
pub fn kind_name(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Stream => "stream",
        ObjectKind::Table => "table",
        ObjectKind::View => "view",
        ObjectKind::Sink => "sink",
    }
}

/// `name` as SQL: bare if it can be, double-quoted otherwise.
pub fn quote_ident(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain && !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(name)) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// The names of an object's columns.
pub fn column_names(o: &CatalogObject) -> impl Iterator<Item = &str> {
    o.columns.iter().map(|(name, _)| name.as_str())
}

impl Catalog {
    /// The engine's listing, in its order (each stream followed by its companions), with the
    /// sinks kept apart.
    pub fn load(engine: &Engine) -> Catalog {
        let (sinks, objects): (Vec<CatalogObject>, Vec<CatalogObject>) =
            engine.catalog().into_iter().partition(|o| o.kind == ObjectKind::Sink);
        Catalog { objects, sinks: sinks.into_iter().map(|o| o.name).collect() }
    }

    fn get(&self, name: &str) -> Option<&CatalogObject> {
        self.objects
            .iter()
            .find(|o| o.name == name)
            .or_else(|| self.objects.iter().find(|o| o.name.eq_ignore_ascii_case(name)))
    }
}

/// A word of SQL text, for finding names and aliases: identifiers (quoted ones unquoted) and
/// single punctuation characters; strings, comments and `[...]` windows are skipped.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '$')
            {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
            continue;
        }
        match c {
            '\'' | '"' => {
                let start = i + 1;
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += 1;
                }
                if c == '"' {
                    out.push(chars[start..i.min(chars.len())].iter().collect());
                }
                i += 1;
            }
            '[' => {
                while i < chars.len() && chars[i] != ']' {
                    i += 1;
                }
                i += 1;
            }
            '-' if chars.get(i + 1) == Some(&'-') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            c if c.is_whitespace() => i += 1,
            c => {
                out.push(c.to_string());
                i += 1;
            }
        }
    }
    out
}

fn is_keyword(w: &str) -> bool {
    KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(w))
        || ["WHERE", "GROUP", "ON", "JOIN", "HAVING", "UNION", "LIMIT", "ORDER"]
            .iter()
            .any(|k| k.eq_ignore_ascii_case(w))
}

/// The objects a statement names, and its aliases (`FROM bids b`, `bids AS b`).
fn mentioned<'c>(
    catalog: &'c Catalog,
    text: &str,
) -> (Vec<&'c CatalogObject>, Vec<(String, &'c CatalogObject)>) {
    let ws = words(text);
    let mut objects: Vec<&CatalogObject> = Vec::new();
    let mut aliases = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let Some(o) = catalog.get(w) else { continue };
        // `x.col` uses a name, it does not mention a relation of the FROM clause.
        if ws.get(i + 1).is_some_and(|n| n == ".") {
            continue;
        }
        if !objects.iter().any(|m| m.name == o.name) {
            objects.push(o);
        }
        let mut j = i + 1;
        if ws.get(j).is_some_and(|n| n.eq_ignore_ascii_case("AS")) {
            j += 1;
        }
        if let Some(a) = ws.get(j) {
            let ident = a.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_');
            if ident && !is_keyword(a) && catalog.get(a).is_none() {
                aliases.push((a.clone(), o));
            }
        }
    }
    (objects, aliases)
}

/// Keywords after which only a stream, table or view name makes sense.
const NAME_CONTEXT: &[&str] =
    &["FROM", "JOIN", "INTO", "DESCRIBE", "ADVANCE", "CLOSE", "COPY", "STREAM", "TABLE", "VIEW"];

/// Completions of the word ending at the end of `before` (the statement typed so far, up to
/// the cursor): where the word starts (a byte offset into `before`) and the candidates.
pub fn complete_sql(catalog: &Catalog, before: &str) -> (usize, Vec<String>) {
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == '$' || *c == '.')
        .last()
        .map_or(before.len(), |(i, _)| i);
    let word = &before[start..];
    let matches = |cand: &str, prefix: &str| {
        cand.len() >= prefix.len()
            && cand.get(..prefix.len()).is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    // `qualifier.prefix`: the columns of a stream, table, view or alias.
    if let Some(dot) = word.rfind('.') {
        let qualifier = &word[..dot];
        let prefix = &word[dot + 1..];
        let (_, aliases) = mentioned(catalog, &before[..start]);
        let object = aliases
            .iter()
            .rev()
            .find(|(a, _)| a.eq_ignore_ascii_case(qualifier))
            .map(|(_, o)| *o)
            .or_else(|| catalog.get(qualifier));
        let mut out: Vec<String> = object
            .map(|o| column_names(o).filter(|c| matches(c, prefix)).map(quote_ident).collect())
            .unwrap_or_default();
        out.dedup();
        return (start + dot + 1, out);
    }
    let ws = words(&before[..start]);
    let prev = ws.last().map(|w| w.to_ascii_uppercase());
    let before_prev =
        ws.len().checked_sub(2).and_then(|i| ws.get(i)).map(|w| w.to_ascii_uppercase());
    let names = catalog.objects.iter().map(|o| quote_ident(&o.name));
    let mut out: Vec<String> = Vec::new();
    match prev.as_deref() {
        // A new name: nothing to offer.
        Some("STREAM" | "TABLE" | "VIEW") if before_prev.as_deref() == Some("CREATE") => {}
        Some("SINK") if before_prev.as_deref() == Some("DROP") => {
            out.extend(catalog.sinks.iter().map(|s| quote_ident(s)).filter(|n| matches(n, word)));
        }
        Some(p) if NAME_CONTEXT.contains(&p) => out.extend(names.filter(|n| matches(n, word))),
        _ => {
            let lower = !word.is_empty() && !word.chars().any(|c| c.is_ascii_uppercase());
            out.extend(KEYWORDS.iter().filter(|k| matches(k, word)).map(|k| {
                if lower {
                    k.to_ascii_lowercase()
                } else {
                    k.to_string()
                }
            }));
            out.extend(names.filter(|n| matches(n, word)));
            // Columns of what the statement names, or of everything if it names nothing yet.
            let (objects, _) = mentioned(catalog, &before[..start]);
            let sources: Vec<&CatalogObject> =
                if objects.is_empty() { catalog.objects.iter().collect() } else { objects };
            for o in sources {
                out.extend(column_names(o).map(quote_ident).filter(|c| matches(c, word)));
            }
        }
    }
    out.sort();
    out.dedup();
    (start, out)
}

/// Completions of a backslash command line up to the cursor.
pub fn complete_command(catalog: &Catalog, before: &str) -> Option<(usize, Vec<String>)> {
    let lead = before.len() - before.trim_start().len();
    let cmdline = &before[lead..];
    if !cmdline.starts_with('\\') {
        return None;
    }
    let Some(space) = cmdline.find(char::is_whitespace) else {
        let out = COMMANDS.iter().filter(|c| c.starts_with(cmdline)).map(|c| c.to_string());
        return Some((lead, out.collect()));
    };
    let start = before.trim_end_matches(|c: char| !c.is_whitespace()).len();
    let arg = &before[start..];
    if cmdline[space..].trim_start().contains(char::is_whitespace) {
        return Some((start, Vec::new()));
    }
    let options: Vec<String> = match &cmdline[..space] {
        "\\d" => catalog.objects.iter().map(|o| quote_ident(&o.name)).collect(),
        "\\format" => ["table", "csv", "jsonl"].map(String::from).to_vec(),
        "\\timing" => ["on", "off"].map(String::from).to_vec(),
        "\\stop" => vec!["all".to_string()],
        _ => Vec::new(),
    };
    Some((start, options.into_iter().filter(|o| o.starts_with(arg)).collect()))
}

/// The REPL's line-editor helper: completion (see the module docs) and SQL highlighting
/// (`crate::highlight`); no hints or validation (statements end at `;`, which the REPL checks
/// itself).
#[derive(Default)]
pub struct SqlHelper {
    pub catalog: Catalog,
    /// The earlier lines of the statement being typed, each followed by `\n`.
    pub pending: String,
    /// Whether typed SQL is coloured (off with `NO_COLOR`).
    pub colour: bool,
    files: FilenameCompleter,
}

impl SqlHelper {
    pub fn new() -> Self {
        SqlHelper { colour: crate::highlight::wanted(), ..SqlHelper::default() }
    }
}

impl Completer for SqlHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let Some(before) = line.get(..pos) else {
            return Ok((pos, Vec::new()));
        };
        let pair = |s: String| Pair { display: s.clone(), replacement: s };
        if self.pending.is_empty() {
            if before.trim_start().starts_with("\\i ") || before.trim_start().starts_with("\\i\t") {
                return self.files.complete(line, pos, ctx);
            }
            if let Some((start, cands)) = complete_command(&self.catalog, before) {
                return Ok((start, cands.into_iter().map(pair).collect()));
            }
        }
        let text = format!("{}{before}", self.pending);
        let (start, cands) = complete_sql(&self.catalog, &text);
        let start = start.saturating_sub(self.pending.len());
        Ok((start, cands.into_iter().map(pair).collect()))
    }
}

impl Hinter for SqlHelper {
    type Hint = String;
}

impl Highlighter for SqlHelper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        if self.colour && !line.starts_with('\\') {
            Cow::Owned(crate::highlight::highlight(line))
        } else {
            Cow::Borrowed(line)
        }
    }

    /// Whether the line must be redrawn: moving the cursor changes no colour; a character
    /// typed at the end of the line needs a redraw only if it changes the colours (it ends a
    /// keyword, opens a quote...) rather than being printed plain after the rest.
    fn highlight_char(&self, line: &str, pos: usize, kind: CmdKind) -> bool {
        match kind {
            _ if !self.colour || line.starts_with('\\') => false,
            CmdKind::MoveCursor => false,
            CmdKind::ForcedRefresh => true,
            CmdKind::Other => {
                let Some(typed) = line.get(..pos).and_then(|l| l.chars().next_back()) else {
                    return true;
                };
                if pos != line.len() {
                    return true;
                }
                let before = &line[..pos - typed.len_utf8()];
                crate::highlight::highlight(line)
                    != format!("{}{typed}", crate::highlight::highlight(before))
            }
        }
    }
}

impl Validator for SqlHelper {}

impl Helper for SqlHelper {}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        let mut engine = Engine::new();
        engine
            .execute(
                "CREATE STREAM bids (auction BIGINT, bidder BIGINT, price BIGINT, ts TIMESTAMP, \
                 WATERMARK FOR ts AS ts); \
                 CREATE TABLE auctions (id BIGINT, item VARCHAR, reserve BIGINT); \
                 CREATE VIEW top AS SELECT auction, MAX(price) AS best FROM bids GROUP BY auction",
            )
            .unwrap();
        Catalog::load(&engine)
    }

    fn c(before: &str) -> Vec<String> {
        let cat = catalog();
        let (start, cands) = complete_sql(&cat, before);
        assert!(start <= before.len());
        cands
    }

    #[test]
    fn loads_names_kinds_companions_and_columns_from_the_engine() {
        use arrow::datatypes::{DataType, TimeUnit};
        let cat = catalog();
        let listed: Vec<(&str, &str, Option<&str>, &str)> = cat
            .objects
            .iter()
            .map(|o| {
                (o.name.as_str(), kind_name(o.kind), o.companion_of.as_deref(), o.details.as_str())
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("bids", "stream", None, "event time ts, 0 element(s)"),
                ("bids$late", "stream", Some("bids"), "late elements of bids"),
                ("bids$errors", "stream", Some("bids"), "unreadable rows of bids"),
                ("auctions", "table", None, "0 row(s)"),
                ("top", "view", None, "relation"),
            ]
        );
        let names = |i: usize| column_names(&cat.objects[i]).collect::<Vec<_>>();
        assert_eq!(names(0), ["auction", "bidder", "price", "ts"]);
        assert_eq!(names(1), ["auction", "bidder", "price", "ts", "missed_watermark"]);
        assert_eq!(names(3), ["id", "item", "reserve"]);
        let typed = |i: usize, j: usize| {
            (cat.objects[i].columns[j].0.as_str(), &cat.objects[i].columns[j].1)
        };
        assert_eq!(typed(0, 0), ("auction", &DataType::Int64));
        assert_eq!(typed(0, 3), ("ts", &DataType::Timestamp(TimeUnit::Microsecond, None)));
        assert_eq!(typed(3, 1), ("item", &DataType::Utf8));
        assert_eq!(typed(4, 1), ("best", &DataType::Int64));
        assert!(cat.sinks.is_empty());
    }

    #[test]
    fn sinks_are_offered_after_drop_sink_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut engine = Engine::new();
        engine.set_base_dir(dir.path());
        engine
            .execute(
                "CREATE STREAM \"Odd\" (x BIGINT, WATERMARK FOR x AS x); \
                 CREATE SINK out1 WITH (path = 'o.csv') AS SELECT ISTREAM x FROM \"Odd\" [NOW]",
            )
            .unwrap();
        let cat = Catalog::load(&engine);
        assert_eq!(cat.sinks, ["out1"]);
        let names: Vec<&str> = cat.objects.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["Odd", "Odd$late", "Odd$errors"]);
        // A companion of a name that needs quotes has its columns too.
        assert_eq!(column_names(&cat.objects[1]).collect::<Vec<_>>(), ["x", "missed_watermark"]);
        assert_eq!(complete_sql(&cat, "DROP SINK ").1, ["out1"]);
        assert_eq!(complete_sql(&cat, "drop sink O").1, ["out1"]);
        assert_eq!(
            complete_sql(&cat, "SELECT * FROM ").1,
            ["\"Odd\"", "\"Odd$errors\"", "\"Odd$late\""]
        );
        assert_eq!(complete_sql(&cat, "DROP STREAM ").1.len(), 3);
        assert_eq!(complete_command(&cat, "\\d o").map(|(_, c)| c), Some(Vec::new()));
    }

    #[test]
    fn keywords_follow_the_case_typed() {
        assert_eq!(c("SEL"), ["SELECT"]);
        assert_eq!(c("sel"), ["select"]);
        assert_eq!(c("SELECT * FROM bids [RANGE 10 SEC"), ["SECOND", "SECONDS"]);
    }

    #[test]
    fn names_after_from_and_columns_of_what_is_named() {
        assert_eq!(c("SELECT * FROM "), ["auctions", "bids", "bids$errors", "bids$late", "top"]);
        assert_eq!(c("SELECT * FROM bids$l"), ["bids$late"]);
        assert_eq!(c("SELECT * FROM au"), ["auctions"]);
        assert_eq!(c("DESCRIBE t"), ["top"]);
        // No FROM yet: every column.
        assert_eq!(c("SELECT pri"), ["price"]);
        assert_eq!(c("SELECT it"), ["item"]);
        // Only the columns of the relations named.
        assert_eq!(c("SELECT * FROM bids WHERE it"), Vec::<String>::new());
        assert_eq!(
            c("SELECT b FROM bids WHERE bi"),
            ["bidder", "bids", "bids$errors", "bids$late", "bigint"]
        );
        assert!(c("CREATE STREAM b").is_empty());
    }

    #[test]
    fn qualified_columns_and_aliases() {
        assert_eq!(c("SELECT bids."), ["auction", "bidder", "price", "ts"]);
        assert_eq!(c("SELECT bids.p"), ["price"]);
        assert_eq!(
            c("SELECT a.item FROM bids [NOW] b JOIN auctions AS a ON b."),
            ["auction", "bidder", "price", "ts"]
        );
        assert_eq!(c("SELECT x FROM auctions a WHERE a.re"), ["reserve"]);
        let cat = catalog();
        assert_eq!(complete_sql(&cat, "SELECT bids.p").0, "SELECT bids.".len());
        assert!(c("SELECT nope.").is_empty());
    }

    #[test]
    fn backslash_commands_and_arguments() {
        let cat = catalog();
        assert_eq!(complete_command(&cat, "\\ti"), Some((0, vec!["\\timing".to_string()])));
        assert_eq!(complete_command(&cat, "\\format j"), Some((8, vec!["jsonl".to_string()])));
        assert_eq!(complete_command(&cat, "\\d a"), Some((3, vec!["auctions".to_string()])));
        assert_eq!(complete_command(&cat, "SELECT"), None);
        let (_, all) = complete_command(&cat, "\\").unwrap();
        assert_eq!(all.len(), COMMANDS.len());
    }

    proptest::proptest! {
        #[test]
        fn completion_never_panics(s in "[a-zA-Z0-9_ .,;:'\"\\[\\]()\\\\\n\t-名é]{0,40}") {
            let cat = catalog();
            let (start, _) = complete_sql(&cat, &s);
            proptest::prop_assert!(s.is_char_boundary(start));
            if let Some((start, _)) = complete_command(&cat, &s) {
                proptest::prop_assert!(s.is_char_boundary(start));
            }
        }
    }

    #[test]
    fn odd_input_never_panics() {
        let cat = catalog();
        for s in ["", ".", "..", "a.b.c", "'", "\"", "[", "名前.", "SELECT \"bi", "\\", "\\d  x  y"]
        {
            let _ = complete_sql(&cat, s);
            let _ = complete_command(&cat, s);
            let _ = words(s);
        }
        assert_eq!(quote_ident("bids"), "bids");
        assert_eq!(quote_ident("Bids"), "\"Bids\"");
        assert_eq!(quote_ident("select"), "\"select\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }
}
