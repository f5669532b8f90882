//! Command-line arguments of `weir`, parsed with clap: `weir [run FILE | -c SQL | demo | serve]
//! [OPTIONS]`. The options that apply to every command (`--format`, `--workers`, ...) may come
//! before or after the command and its file; `serve`'s own options follow `serve`. Mistakes
//! that are habits from other tools (`weir FILE.sql`, psql's `weir -f FILE`) are answered with
//! the form that works.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::output::Format;

/// What `weir --help` prints after the options.
const AFTER_HELP: &str = "\
Examples:
  weir run FILE.sql                 run a script ('-' reads standard input)
  weir -c \"SQL\"                     run the statements given
  weir                              a REPL on a terminal; otherwise runs standard input
  weir demo                         the REPL with a live stream of auction bids to query
  weir serve                        a PostgreSQL-protocol server (docs/server.md)
  weir run FILE.sql --format csv --output-dir out
                                    each continuous query's changes in out/query-N.csv

After each statement Weir prints the new output of every running continuous query; at the end
of a script every stream is closed, so all pending instants are emitted. In the REPL,
continuous queries print their changes live and \\help lists the commands (docs/repl.md).
Output formats: docs/repl.md, section \"Output formats\".";

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "Weir: continuous SQL queries over streams (CQL)",
    after_help = AFTER_HELP,
    disable_help_subcommand = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    /// Run the statements of SQL (instead of a script)
    #[arg(short = 'c', value_name = "SQL")]
    sql: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// The options of every command, accepted before or after it.
#[derive(Debug, clap::Args)]
struct Common {
    /// How results are printed: table (for people, the default),
    /// csv or jsonl. A script's CSV on standard output holds one
    /// continuous query: with more, give --output-dir
    #[arg(long, global = true, value_name = "F", value_parser = parse_format, verbatim_doc_comment)]
    format: Option<Format>,
    /// Write each continuous query's changes to a file of its own:
    /// DIR/query-N.csv (DIR/query-N.jsonl with --format jsonl),
    /// listed in DIR/queries.csv; one-shot results still go to
    /// standard output
    #[arg(long, global = true, value_name = "DIR", verbatim_doc_comment)]
    output_dir: Option<PathBuf>,
    /// Keep checkpoints in DIR; if it holds one, resume from it
    /// (a script is then not run again: its streams, views and
    /// sinks are in the checkpoint; docs/recovery.md)
    #[arg(long, global = true, value_name = "DIR", verbatim_doc_comment)]
    data_dir: Option<PathBuf>,
    /// With --data-dir: checkpoint every T while sources are read
    /// (e.g. 500ms, 2s, 1m); CHECKPOINT takes one at any time
    #[arg(
        long,
        global = true,
        value_name = "T",
        requires = "data_dir",
        value_parser = parse_interval,
        verbatim_doc_comment
    )]
    checkpoint_interval: Option<Duration>,
    /// Run continuous queries on N timely workers, threads of this
    /// process (1: the calling thread); a checkpoint restores on
    /// any worker count
    #[arg(
        long,
        global = true,
        value_name = "N",
        default_value_t = 1,
        value_parser = parse_workers,
        verbatim_doc_comment
    )]
    workers: usize,
    /// Form a cluster of weir processes: every process's host:port,
    /// comma-separated or one per line in a file; start the same
    /// command on each host with its --process index. Queries run
    /// on --workers workers in each process; process 0 runs the
    /// statements, reads the sources and writes the outputs
    #[arg(long, global = true, value_name = "LIST|FILE", verbatim_doc_comment)]
    hosts: Option<String>,
    /// With --hosts: this process's index in the list (default 0);
    /// a process other than 0 only runs workers for process 0
    #[arg(long, global = true, value_name = "I", requires = "hosts", verbatim_doc_comment)]
    process: Option<usize>,
    /// Fail the continuous query holding the most state when the
    /// queries' state reaches SIZE (e.g. 512MB, 4GB), instead of
    /// growing until the system kills the process (SET memory_limit)
    #[arg(
        long,
        global = true,
        value_name = "SIZE",
        value_parser = parse_memory_limit,
        verbatim_doc_comment
    )]
    memory_limit: Option<usize>,
    /// With --data-dir, in the REPL and weir serve: log pushed
    /// input (INSERT, DELETE, ADVANCE, CLOSE, COPY FROM STDIN)
    /// before taking it in, so a restart replays what came after
    /// the last checkpoint; fsync: durable when the statement
    /// returns, write: survives Weir's crash, not the machine's
    #[arg(
        long,
        global = true,
        value_name = "SYNC",
        requires = "data_dir",
        value_parser = ["fsync", "write"],
        verbatim_doc_comment
    )]
    wal: Option<String>,
    /// At the end of a script, print every stream's final
    /// accounting (SHOW STREAM STATS: accepted, late and bad rows,
    /// how far each source read) on standard error
    #[arg(long, global = true, verbatim_doc_comment)]
    stats: bool,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Run a script: its statements in order, then its streams' sources to their end
    #[command(after_help = "Relative paths in the script (its sources' and sinks' files) are \
                            read from the script's directory.\nAt the end every stream is \
                            closed, so all pending instants are emitted.")]
    Run {
        /// The script; '-' reads standard input
        #[arg(value_name = "FILE.sql")]
        file: PathBuf,
    },
    /// The REPL with a live, generated stream of auction bids to query
    Demo,
    /// A PostgreSQL-protocol server: connect with psql or any driver (docs/server.md)
    Serve(ServeArgs),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (default 127.0.0.1:6875); beyond
    /// loopback only with a password: set WEIR_PASSWORD, and every
    /// client then authenticates with SCRAM-SHA-256 as --user
    #[arg(long, value_name = "ADDR", value_parser = parse_listen, verbatim_doc_comment)]
    pub listen: Option<SocketAddr>,
    /// With WEIR_PASSWORD: the user clients log in as (default weir)
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// A PEM certificate chain; with --tls-key, clients may
    /// connect with TLS (sslmode=require)
    #[arg(long, value_name = "FILE", requires = "tls_key", verbatim_doc_comment)]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, in PEM
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Streams read and sinks write only files inside DIR (relative
    /// paths are read from it); no stream reads standard input
    #[arg(long, value_name = "DIR", verbatim_doc_comment)]
    pub file_dir: Option<PathBuf>,
    /// Rows that may wait for one slow subscriber before its
    /// subscription is ended (default 1000000)
    #[arg(long, value_name = "N", value_parser = parse_positive, verbatim_doc_comment)]
    pub subscriber_buffer: Option<usize>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Run a script file (`-`: standard input).
    Run(PathBuf),
    /// Run the text given with `-c`.
    Inline(String),
    /// No command: the REPL on a terminal, standard input otherwise.
    Default,
    /// The REPL with a generated stream of bids flowing.
    Demo,
    /// A PostgreSQL-protocol server.
    Serve(ServeArgs),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub command: Command,
    pub format: Format,
    /// `--output-dir`: one file per continuous query.
    pub output_dir: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    pub checkpoint_interval: Option<Duration>,
    /// `--workers`.
    pub workers: usize,
    /// `--hosts` and `--process`: this process's place in a cluster of processes.
    pub cluster: Option<weir::Cluster>,
    /// `--memory-limit`, in bytes.
    pub memory_limit: Option<usize>,
    /// `--wal`: the write-ahead log's sync policy.
    pub wal: Option<weir::WalSync>,
    /// `--stats`: the final accounting of every stream, at the end of a script.
    pub stats: bool,
}

/// Parses the arguments after the program name. The error is clap's, ready to print (it
/// also carries `--help` and `--version`, and their exit status, 0).
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Args, clap::Error> {
    let args: Vec<OsString> = args.into_iter().collect();
    let mut command = Cli::command();
    let matches = command
        .try_get_matches_from_mut(std::iter::once(OsString::from("weir")).chain(args.clone()))
        .map_err(|e| suggest(&mut command, &args, e))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    let Common {
        format,
        output_dir,
        data_dir,
        checkpoint_interval,
        workers,
        hosts,
        process,
        memory_limit,
        wal,
        stats,
    } = cli.common;
    let cluster = match hosts {
        None => None,
        Some(list) => {
            let addresses =
                host_list(&list).map_err(|e| command.error(ErrorKind::InvalidValue, e))?;
            let cluster = weir::Cluster::new(process.unwrap_or(0), addresses, workers)
                .map_err(|e| command.error(ErrorKind::InvalidValue, e.to_string()))?;
            Some(cluster)
        }
    };
    let wal = wal.as_deref().and_then(weir::WalSync::parse);
    let command_of = match (cli.sql, cli.command) {
        (Some(_), Some(_)) => {
            return Err(command.error(
                ErrorKind::ArgumentConflict,
                "give either -c SQL or a command (run, demo, serve), not both",
            ))
        }
        (Some(sql), None) => Command::Inline(sql),
        (None, None) => Command::Default,
        (None, Some(Sub::Run { file })) => Command::Run(file),
        (None, Some(Sub::Demo)) => Command::Demo,
        (None, Some(Sub::Serve(s))) => Command::Serve(s),
    };
    let format = match (format, &output_dir) {
        (Some(Format::Table), Some(_)) => {
            return Err(command.error(
                ErrorKind::ArgumentConflict,
                "--output-dir writes CSV or JSON lines files: give --format csv (the default \
                 with --output-dir) or --format jsonl",
            ))
        }
        (Some(f), _) => f,
        (None, Some(_)) => Format::Csv,
        (None, None) => Format::Table,
    };
    if output_dir.is_some() && matches!(command_of, Command::Demo | Command::Serve(_)) {
        return Err(command.error(
            ErrorKind::ArgumentConflict,
            "--output-dir is for scripts: weir run FILE, weir -c SQL, or statements on \
             standard input",
        ));
    }
    if stats && matches!(command_of, Command::Demo | Command::Serve(_)) {
        return Err(command.error(
            ErrorKind::ArgumentConflict,
            "--stats is for scripts (the REPL and the server answer SHOW STREAM STATS)",
        ));
    }
    Ok(Args {
        command: command_of,
        format,
        output_dir,
        data_dir,
        checkpoint_interval,
        workers,
        cluster,
        memory_limit,
        wal,
        stats,
    })
}

/// The addresses of `--hosts`: those in the file it names, one per line (blank lines and
/// `#` comments skipped), or else its comma-separated list. Each must be `host:port`.
fn host_list(value: &str) -> Result<Vec<String>, String> {
    let path = std::path::Path::new(value);
    let text = if path.is_file() {
        std::fs::read_to_string(path).map_err(|e| format!("--hosts {value}: {e}"))?
    } else {
        value.replace(',', "\n")
    };
    let hosts: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if hosts.is_empty() {
        return Err(format!("--hosts {value}: no host:port given"));
    }
    if let Some(bad) =
        hosts.iter().find(|h| h.rsplit_once(':').is_none_or(|(_, p)| p.parse::<u16>().is_err()))
    {
        return Err(format!("--hosts: '{bad}' is not host:port (e.g. 10.0.0.2:2101)"));
    }
    Ok(hosts)
}

/// Replaces clap's error for a script given without `run` (`weir FILE.sql`) or with psql's
/// `-f` by one that shows `weir run FILE`; other errors are left as they are.
fn suggest(command: &mut clap::Command, args: &[OsString], e: clap::Error) -> clap::Error {
    let context = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    match e.kind() {
        ErrorKind::InvalidSubcommand => {
            let Some(name) = context(ContextKind::InvalidSubcommand) else { return e };
            let lower = name.to_ascii_lowercase();
            let msg = if lower.ends_with(".sql") || std::path::Path::new(&name).is_file() {
                format!("'{name}' is not a command: to run a script, use 'weir run {name}'")
            } else {
                format!(
                    "'{name}' is not a command: the commands are run, demo and serve (a script \
                     runs with 'weir run FILE.sql')"
                )
            };
            command.error(ErrorKind::InvalidSubcommand, msg)
        }
        ErrorKind::UnknownArgument => {
            let Some(arg) = context(ContextKind::InvalidArg) else { return e };
            let flag = arg.split('=').next().unwrap_or(&arg);
            if flag != "-f" && flag != "--file" {
                return e;
            }
            // The file given with it (`-f F`, `--file=F`), for the suggestion.
            let attached = format!("{flag}=");
            let file = args.iter().enumerate().find_map(|(i, a)| {
                let a = a.to_string_lossy();
                if let Some(f) = a.strip_prefix(&attached) {
                    return Some(f.to_string());
                }
                (a == flag)
                    .then(|| args.get(i + 1).map(|f| f.to_string_lossy().into_owned()))
                    .flatten()
                    .filter(|f| !f.starts_with('-') || f == "-")
            });
            let file = file.unwrap_or_else(|| "FILE.sql".to_string());
            command.error(
                ErrorKind::UnknownArgument,
                format!("weir has no {flag} option: to run a script, use 'weir run {file}'"),
            )
        }
        _ => e,
    }
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

fn parse_interval(s: &str) -> Result<Duration, String> {
    weir::parse_wall_duration(s).map_err(|e| e.to_string())
}

fn parse_memory_limit(s: &str) -> Result<usize, String> {
    weir::engine::memory::parse_bytes(s).ok_or_else(|| {
        format!("'{s}' is not a size: give bytes or a number with kB, MB, GB or TB (e.g. 512MB)")
    })
}

fn parse_workers(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive number of workers"))
}

fn parse_positive(s: &str) -> Result<usize, String> {
    s.parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("'{s}' is not a positive number"))
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| format!("'{s}' is not an address with a port, e.g. 127.0.0.1:6875"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Args, String> {
        parse(args.iter().map(OsString::from)).map_err(|e| e.to_string())
    }

    fn args(command: Command, format: Format) -> Args {
        Args {
            command,
            format,
            output_dir: None,
            data_dir: None,
            checkpoint_interval: None,
            workers: 1,
            cluster: None,
            memory_limit: None,
            wal: None,
            stats: false,
        }
    }

    #[test]
    fn parses_commands_and_options_anywhere() {
        assert_eq!(p(&[]).unwrap(), args(Command::Default, Format::Table));
        assert_eq!(
            p(&["run", "a.sql", "--format", "csv"]).unwrap(),
            args(Command::Run("a.sql".into()), Format::Csv)
        );
        assert_eq!(
            p(&["--format=jsonl", "-c", "SELECT 1"]).unwrap(),
            args(Command::Inline("SELECT 1".into()), Format::Jsonl)
        );
        assert_eq!(
            p(&["-c", "SELECT 1", "--format", "jsonl"]).unwrap(),
            args(Command::Inline("SELECT 1".into()), Format::Jsonl)
        );
        let a = p(&["--data-dir", "d", "--checkpoint-interval", "250ms", "run", "x.sql"]).unwrap();
        assert_eq!(a.data_dir, Some("d".into()));
        assert_eq!(a.checkpoint_interval, Some(Duration::from_millis(250)));
        assert_eq!(p(&["--format", "csv"]).unwrap().command, Command::Default);
        assert_eq!(p(&["run", "-"]).unwrap().command, Command::Run("-".into()));
        // Options between `run` and its file, after it, before `run`.
        for argv in [
            &["run", "--workers", "2", "--format", "csv", "x.sql"][..],
            &["run", "--format", "csv", "x.sql", "--workers", "2"],
            &["--workers=2", "run", "x.sql", "--format=csv"],
        ] {
            let a = p(argv).unwrap();
            assert_eq!(
                (a.command, a.workers, a.format),
                (Command::Run("x.sql".into()), 2, Format::Csv)
            );
        }
        assert_eq!(p(&["demo"]).unwrap().command, Command::Demo);
        assert_eq!(p(&["demo", "--format", "csv"]).unwrap().format, Format::Csv);
        let a = p(&["serve", "--listen", "127.0.0.1:7000", "--subscriber-buffer", "10"]).unwrap();
        let Command::Serve(s) = a.command else { panic!("{a:?}") };
        assert_eq!(s.listen, Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(s.subscriber_buffer, Some(10));
        let a =
            p(&["--workers", "3", "serve", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap();
        let Command::Serve(s) = a.command else { panic!("{a:?}") };
        assert_eq!(
            (s.tls_cert, s.tls_key, a.workers),
            (Some("c.pem".into()), Some("k.pem".into()), 3)
        );
        // --output-dir: CSV unless jsonl is asked for.
        let a = p(&["run", "x.sql", "--output-dir", "out"]).unwrap();
        assert_eq!((a.output_dir, a.format), (Some("out".into()), Format::Csv));
        let a = p(&["--output-dir", "out", "--format", "jsonl", "-c", "SELECT 1"]).unwrap();
        assert_eq!((a.output_dir, a.format), (Some("out".into()), Format::Jsonl));
    }

    /// The first line of an error (clap follows it with the usage and a pointer to --help).
    fn first_line(args: &[&str]) -> String {
        p(args).unwrap_err().lines().next().unwrap_or("").to_string()
    }

    #[test]
    fn rejects_bad_arguments_with_the_right_form() {
        assert_eq!(
            first_line(&["x.sql"]),
            "error: 'x.sql' is not a command: to run a script, use 'weir run x.sql'"
        );
        assert_eq!(
            first_line(&["--format", "csv", "Q.SQL"]),
            "error: 'Q.SQL' is not a command: to run a script, use 'weir run Q.SQL'"
        );
        assert_eq!(
            first_line(&["-f", "x.sql"]),
            "error: weir has no -f option: to run a script, use 'weir run x.sql'"
        );
        assert_eq!(
            first_line(&["--file=y.sql"]),
            "error: weir has no --file option: to run a script, use 'weir run y.sql'"
        );
        assert_eq!(
            first_line(&["-f"]),
            "error: weir has no -f option: to run a script, use 'weir run FILE.sql'"
        );
        assert_eq!(
            first_line(&["rnu"]),
            "error: 'rnu' is not a command: the commands are run, demo and serve (a script runs with 'weir run FILE.sql')"
        );
        assert_eq!(first_line(&["--bogus"]), "error: unexpected argument '--bogus' found");
        assert_eq!(
            first_line(&["run"]),
            "error: the following required arguments were not provided:"
        );
        assert_eq!(
            first_line(&["-c"]),
            "error: a value is required for '-c <SQL>' but none was supplied"
        );
        assert_eq!(
            first_line(&["--format", "xml"]),
            "error: invalid value 'xml' for '--format <F>': unknown format 'xml' (expected table, csv or jsonl)"
        );
        assert_eq!(
            first_line(&["-c", "a", "run", "f"]),
            "error: give either -c SQL or a command (run, demo, serve), not both"
        );
        assert_eq!(first_line(&["run", "f", "run", "g"]), "error: unexpected argument 'run' found");
        assert_eq!(first_line(&["demo", "demo"]), "error: unexpected argument 'demo' found");
        assert_eq!(
            first_line(&["--checkpoint-interval", "2s"]),
            "error: the following required arguments were not provided:"
        );
        assert!(p(&["--checkpoint-interval", "2s"]).unwrap_err().contains("--data-dir <DIR>"));
        assert_eq!(
            first_line(&["--listen", "127.0.0.1:1"]),
            "error: unexpected argument '--listen' found"
        );
        assert_eq!(
            first_line(&["serve", "--listen", "localhost"]),
            "error: invalid value 'localhost' for '--listen <ADDR>': 'localhost' is not an address with a port, e.g. 127.0.0.1:6875"
        );
        assert!(p(&["serve", "--subscriber-buffer", "0"])
            .unwrap_err()
            .contains("'0' is not a positive number"));
        assert!(p(&["serve", "--tls-cert", "c.pem"]).unwrap_err().contains("--tls-key <FILE>"));
        assert!(p(&["--data-dir", "d", "--checkpoint-interval", "2x"])
            .unwrap_err()
            .contains("bad duration '2x'"));
        assert!(p(&["--workers", "0"])
            .unwrap_err()
            .contains("'0' is not a positive number of workers"));
        assert_eq!(
            first_line(&["run", "x.sql", "--output-dir", "o", "--format", "table"]),
            "error: --output-dir writes CSV or JSON lines files: give --format csv (the default with --output-dir) or --format jsonl"
        );
        assert_eq!(
            first_line(&["demo", "--output-dir", "o"]),
            "error: --output-dir is for scripts: weir run FILE, weir -c SQL, or statements on standard input"
        );
    }

    #[test]
    fn a_cluster_is_a_host_list_and_an_index() {
        let a = p(&["--hosts", "10.0.0.1:2101, 10.0.0.2:2101", "--process", "1", "run", "x.sql"])
            .unwrap();
        let c = a.cluster.expect("a cluster");
        assert_eq!((c.process, c.threads, c.processes()), (1, 1, 2));
        assert_eq!(c.addresses, ["10.0.0.1:2101", "10.0.0.2:2101"]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("hosts");
        std::fs::write(&file, "# the cluster\nh0:1\n\nh1:2  # second\nh2:3\n").unwrap();
        let a = p(&["--hosts", file.to_str().unwrap(), "--workers", "3"]).unwrap();
        let c = a.cluster.expect("a cluster");
        assert_eq!((c.process, c.threads, c.addresses.len()), (0, 3, 3));
        // The server too runs on a cluster, as process 0.
        let a = p(&["--hosts", "h0:1,h1:2", "serve", "--listen", "127.0.0.1:7000"]).unwrap();
        assert!(matches!(a.command, Command::Serve(_)));
        assert_eq!(a.cluster.expect("a cluster").process, 0);
        for (argv, says) in [
            (&["--hosts", "h0:1,h1"][..], "'h1' is not host:port"),
            (&["--hosts", "h0:1,h1:2", "--process", "2"], "process index 2 is not below"),
            (&["--process", "1"], "--hosts"),
        ] {
            let e = p(argv).unwrap_err();
            assert!(e.contains(says), "{argv:?}: {e}");
        }
    }

    #[test]
    fn help_and_version_are_answers_not_errors() {
        for argv in [
            &["--help"][..],
            &["-h"],
            &["run", "--help"],
            &["serve", "--help"],
            &["demo", "-h"],
            &["--version"],
        ] {
            let e = parse(argv.iter().map(OsString::from)).unwrap_err();
            assert_eq!(e.exit_code(), 0, "{argv:?}");
        }
        let help = parse(["run", "--help"].map(OsString::from)).unwrap_err().to_string();
        assert!(help.starts_with("Run a script"), "{help}");
    }
}
