//! Command-line arguments: `weir [run FILE | -c SQL] [--format table|csv|jsonl]`.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::output::Format;

pub const USAGE: &str = "\
Weir: continuous SQL queries over streams (CQL)

Usage:
  weir run FILE.sql [--format F]   run a script ('-' reads standard input)
  weir -c \"SQL\" [--format F]       run the statements given
  weir [--format F]                a REPL on a terminal; otherwise runs standard input
  weir demo [--format F]           the REPL with a live stream of auction bids to query
  weir serve [--listen ADDR]       a PostgreSQL-protocol server: connect with psql or any
                                   PostgreSQL driver (docs/server.md)

After each statement Weir prints the new output of every running continuous query; at the
end of a script every stream is closed, so all pending instants are emitted. In the REPL,
continuous queries print their changes live and \\help lists the commands (docs/repl.md).

Options:
  --format F      table (default), csv or jsonl
  --data-dir DIR  keep checkpoints in DIR; if it holds one, resume from it (a script is then
                  not run again: its streams, views and sinks are in the checkpoint)
  --checkpoint-interval T
                  with --data-dir, checkpoint every T while sources are read (e.g. 500ms,
                  2s, 1m); CHECKPOINT takes one at any time (docs/recovery.md)
  --listen ADDR   with serve: the address to listen on (default 127.0.0.1:6875); beyond
                  loopback only with a password: set WEIR_PASSWORD, and every client then
                  authenticates with SCRAM-SHA-256 as --user (default weir)
  --user NAME     with serve and WEIR_PASSWORD: the user clients log in as
  --tls-cert FILE, --tls-key FILE
                  with serve: a PEM certificate chain and its private key; clients may then
                  connect with TLS (sslmode=require)
  --file-dir DIR  with serve: streams read and sinks write only files inside DIR (relative
                  paths are read from it), and no stream reads the server's standard input
  --subscriber-buffer N
                  with serve: rows that may wait for one slow subscriber before its
                  subscription is ended (default 1000000)
  --workers N     run continuous queries on N timely workers, threads of this process
                  (default 1: the calling thread; docs/architecture.md); a checkpoint
                  in --data-dir restores on the worker count it was taken on
  -c SQL          run SQL instead of a file
  -h, --help      this help
  -V, --version   the version
";

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
    Serve,
    Help,
    Version,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub command: Command,
    pub format: Format,
    pub data_dir: Option<PathBuf>,
    pub checkpoint_interval: Option<std::time::Duration>,
    /// `serve --listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `serve --subscriber-buffer`.
    pub subscriber_buffer: Option<usize>,
    /// `serve --user`.
    pub user: Option<String>,
    /// `serve --file-dir`.
    pub file_dir: Option<PathBuf>,
    /// `serve --tls-cert` and `--tls-key`.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// `--workers`.
    pub workers: usize,
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = OsString>>(args: I) -> Result<Args, String> {
    let mut command = Command::Default;
    let mut format = Format::Table;
    let mut data_dir = None;
    let mut checkpoint_interval = None;
    let mut listen = None;
    let mut subscriber_buffer = None;
    let mut user = None;
    let mut file_dir = None;
    let mut tls_cert = None;
    let mut tls_key = None;
    let mut workers = 1;
    let mut awaiting_file = false;
    let mut args = args.into_iter();
    let set = |command: &mut Command, new: Command| -> Result<(), String> {
        if *command != Command::Default {
            return Err("give one of 'run FILE', '-c SQL' or 'demo', once".to_string());
        }
        *command = new;
        Ok(())
    };
    while let Some(arg) = args.next() {
        let Some(s) = arg.to_str() else {
            return Err(format!("unexpected argument '{}'", arg.to_string_lossy()));
        };
        match s {
            "-h" | "--help" | "-V" | "--version" => {
                let command = if s.starts_with("-h") || s == "--help" {
                    Command::Help
                } else {
                    Command::Version
                };
                return Ok(Args {
                    command,
                    format,
                    data_dir,
                    checkpoint_interval,
                    listen,
                    subscriber_buffer,
                    user,
                    file_dir,
                    tls_cert,
                    tls_key,
                    workers,
                });
            }
            "--listen" => {
                let v = args.next().ok_or("--listen needs an address, e.g. 127.0.0.1:6875")?;
                let v = v.to_string_lossy();
                listen = Some(v.parse().map_err(|_| {
                    format!("--listen: '{v}' is not an address with a port, e.g. 127.0.0.1:6875")
                })?);
            }
            "--tls-cert" => {
                let v = args.next().ok_or("--tls-cert needs a PEM file")?;
                tls_cert = Some(PathBuf::from(v));
            }
            "--tls-key" => {
                let v = args.next().ok_or("--tls-key needs a PEM file")?;
                tls_key = Some(PathBuf::from(v));
            }
            "--file-dir" => {
                let v = args.next().ok_or("--file-dir needs a directory")?;
                file_dir = Some(PathBuf::from(v));
            }
            "--user" => {
                let v = args.next().ok_or("--user needs a user name")?;
                user = Some(v.to_string_lossy().into_owned());
            }
            "--subscriber-buffer" => {
                let v = args.next().ok_or("--subscriber-buffer needs a number of rows")?;
                let v = v.to_string_lossy();
                subscriber_buffer =
                    Some(v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!("--subscriber-buffer: '{v}' is not a positive number")
                    })?);
            }
            "--workers" => {
                let v = args.next().ok_or("--workers needs a number, e.g. --workers 2")?;
                let v = v.to_string_lossy();
                workers = v.parse::<usize>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("--workers: '{v}' is not a positive number of workers")
                })?;
            }
            "--data-dir" => {
                let v = args.next().ok_or("--data-dir needs a directory")?;
                data_dir = Some(PathBuf::from(v));
            }
            "--checkpoint-interval" => {
                let v = args.next().ok_or("--checkpoint-interval needs a value, e.g. 2s")?;
                checkpoint_interval = Some(
                    weir::parse_wall_duration(&v.to_string_lossy())
                        .map_err(|e| format!("--checkpoint-interval: {e}"))?,
                );
            }
            "--format" => {
                let v = args.next().ok_or("--format needs a value: table, csv or jsonl")?;
                format = v.to_string_lossy().parse()?;
            }
            _ if s.starts_with("--format=") => {
                format = s["--format=".len()..].parse()?;
            }
            "-c" => {
                let v = args.next().ok_or("-c needs the SQL to run")?;
                let sql = v.into_string().map_err(|_| "-c: the SQL is not valid UTF-8")?;
                set(&mut command, Command::Inline(sql))?;
            }
            "demo" if command == Command::Default => set(&mut command, Command::Demo)?,
            "serve" if command == Command::Default => set(&mut command, Command::Serve)?,
            // The file may come after options: `weir run --workers 2 x.sql`.
            "run" if command == Command::Default => {
                set(&mut command, Command::Run(PathBuf::new()))?;
                awaiting_file = true;
            }
            _ if awaiting_file && !(s.starts_with('-') && s != "-") => {
                command = Command::Run(PathBuf::from(s));
                awaiting_file = false;
            }
            _ if s.starts_with('-') && s != "-" => return Err(format!("unknown option '{s}'")),
            _ => return Err(format!("unexpected argument '{s}'")),
        }
    }
    if awaiting_file {
        return Err("run needs a file: weir run FILE.sql".into());
    }
    if checkpoint_interval.is_some() && data_dir.is_none() {
        return Err("--checkpoint-interval needs --data-dir".into());
    }
    let serve_only = listen.is_some()
        || subscriber_buffer.is_some()
        || user.is_some()
        || file_dir.is_some()
        || tls_cert.is_some()
        || tls_key.is_some();
    if serve_only && command != Command::Serve {
        return Err("--listen, --user, --file-dir, --tls-cert, --tls-key and \
                    --subscriber-buffer are options of 'weir serve'"
            .into());
    }
    if tls_cert.is_some() != tls_key.is_some() {
        return Err("--tls-cert and --tls-key go together".into());
    }
    Ok(Args {
        command,
        format,
        data_dir,
        checkpoint_interval,
        listen,
        subscriber_buffer,
        user,
        file_dir,
        tls_cert,
        tls_key,
        workers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Args, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_commands_and_format_anywhere() {
        let args = |command, format| Args {
            command,
            format,
            data_dir: None,
            checkpoint_interval: None,
            listen: None,
            subscriber_buffer: None,
            user: None,
            file_dir: None,
            tls_cert: None,
            tls_key: None,
            workers: 1,
        };
        assert_eq!(p(&[]).unwrap(), args(Command::Default, Format::Table));
        assert_eq!(
            p(&["run", "a.sql", "--format", "csv"]).unwrap(),
            args(Command::Run("a.sql".into()), Format::Csv)
        );
        assert_eq!(
            p(&["--format=jsonl", "-c", "SELECT 1"]).unwrap(),
            args(Command::Inline("SELECT 1".into()), Format::Jsonl)
        );
        let a = p(&["--data-dir", "d", "--checkpoint-interval", "250ms", "run", "x.sql"]).unwrap();
        assert_eq!(a.data_dir, Some("d".into()));
        assert_eq!(a.checkpoint_interval, Some(std::time::Duration::from_millis(250)));
        assert_eq!(p(&["--format", "csv"]).unwrap().command, Command::Default);
        assert_eq!(p(&["run", "-"]).unwrap().command, Command::Run("-".into()));
        // Options before the file, and a missing file.
        let a = p(&["run", "--workers", "2", "--format", "csv", "x.sql"]).unwrap();
        assert_eq!(
            (a.command, a.workers, a.format),
            (Command::Run("x.sql".into()), 2, Format::Csv)
        );
        assert_eq!(
            p(&["run", "--workers", "2"]).unwrap_err(),
            "run needs a file: weir run FILE.sql"
        );
        assert_eq!(p(&["run", "--help"]).unwrap().command, Command::Help);
        assert_eq!(p(&["-h"]).unwrap().command, Command::Help);
        assert_eq!(p(&["--version"]).unwrap().command, Command::Version);
        assert_eq!(p(&["demo"]).unwrap().command, Command::Demo);
        assert_eq!(p(&["demo", "--format", "csv"]).unwrap().format, Format::Csv);
        let a = p(&["serve", "--listen", "127.0.0.1:7000", "--subscriber-buffer", "10"]).unwrap();
        assert_eq!(a.command, Command::Serve);
        assert_eq!(a.listen, Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(a.subscriber_buffer, Some(10));
    }

    #[test]
    fn rejects_bad_arguments() {
        assert_eq!(p(&["--bogus"]).unwrap_err(), "unknown option '--bogus'");
        assert_eq!(p(&["x.sql"]).unwrap_err(), "unexpected argument 'x.sql'");
        assert!(p(&["run"]).unwrap_err().contains("run needs a file"));
        assert!(p(&["-c"]).unwrap_err().contains("-c needs"));
        assert!(p(&["--format", "xml"]).unwrap_err().contains("unknown format 'xml'"));
        assert!(p(&["--format"]).unwrap_err().contains("--format needs a value"));
        assert!(p(&["-c", "a", "run", "f"]).is_err());
        assert!(p(&["run", "f", "run", "g"]).is_err());
        assert!(p(&["demo", "demo"]).is_err());
        assert!(p(&["run", "f", "demo"]).is_err());
        assert!(p(&["--checkpoint-interval", "2s"]).unwrap_err().contains("needs --data-dir"));
        assert!(p(&["--listen", "127.0.0.1:1"]).unwrap_err().contains("options of 'weir serve'"));
        assert!(p(&["serve", "--listen", "localhost"]).unwrap_err().contains("not an address"));
        assert!(p(&["serve", "--subscriber-buffer", "0"]).unwrap_err().contains("not a positive"));
        assert!(p(&["serve", "--tls-cert", "c.pem"]).unwrap_err().contains("go together"));
        assert!(p(&["--data-dir", "d", "--checkpoint-interval", "2x"])
            .unwrap_err()
            .contains("--checkpoint-interval: bad duration '2x'"));
    }
}
