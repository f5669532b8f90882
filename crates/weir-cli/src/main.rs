//! The `weir` command: runs CQL scripts (`weir run FILE`, `weir -c SQL`, statements piped on
//! standard input) or, on a terminal, a REPL (`weir`, or `weir demo` with a live stream of
//! bids to query). See `weir --help`, `docs/repl.md`, and the module docs of [`output`] for the
//! output formats.

mod args;
mod complete;
mod demo;
mod highlight;
mod output;
mod progress;
mod repl;
mod script;
mod tableview;

use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use args::{Args, Command};
use script::{Failure, Session};

/// mimalloc: operator state (join indexes, group maps, MIN/MAX multisets) makes many small
/// allocations, where the system allocator cost 10-20% of the time in the NEXMark benchmarks.
/// Built without transparent huge pages (`no_thp`): with them every page mimalloc had
/// returned to the system and touched again was a 2 MiB page to zero, which put 30-40 ms
/// pauses in q9's and q19's p99 latency (docs/benchmarks.md, "Allocator"). Purged memory is
/// reset rather than decommitted (`weir_alloc::reset_on_purge`, set first thing in `main`). A
/// program embedding the `weir` library chooses its own allocator.
#[global_allocator]
static GLOBAL: weir_alloc::MiMalloc = weir_alloc::MiMalloc;

/// Prints `error: msg` on standard error (ignoring a closed stderr: nothing else to do).
pub(crate) fn report(msg: &str) {
    let _ = writeln!(io::stderr(), "error: {msg}");
}

fn main() -> ExitCode {
    weir_alloc::reset_on_purge();
    let args = match args::parse(std::env::args_os().skip(1)) {
        Ok(a) => a,
        // Also --help and --version (to standard output, status 0).
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    if let Some(c) = &args.cluster {
        quiet_network_panics(c.process);
    }
    let result = match args.command.clone() {
        _ if args.cluster.as_ref().is_some_and(|c| c.process != 0) => serve_cluster(&args),
        Command::Inline(sql) => run_input(sql.as_bytes(), None, None, Some(&sql), &args),
        Command::Run(path) if path.as_os_str() == "-" => {
            run_input(io::stdin().lock(), None, None, None, &args)
        }
        Command::Run(path) => match std::fs::read_to_string(&path) {
            Ok(text) => run_input(text.as_bytes(), path.parent(), Some(&path), Some(&text), &args),
            Err(e) => Err(Failure::Statement(format!("cannot read {}: {e}", path.display()))),
        },
        Command::Default if io::stdin().is_terminal() && args.output_dir.is_some() => {
            Err(Failure::Statement(
                "--output-dir is for scripts: weir run FILE, weir -c SQL, or statements on \
                 standard input"
                    .into(),
            ))
        }
        Command::Default if io::stdin().is_terminal() => {
            repl::run(&args, false).map_err(|e| Failure::Statement(format!("{e:#}")))
        }
        Command::Demo if io::stdin().is_terminal() => {
            repl::run(&args, true).map_err(|e| Failure::Statement(format!("{e:#}")))
        }
        Command::Demo => Err(Failure::Statement(
            "weir demo is interactive: run it in a terminal (or try weir run examples/auction.sql)"
                .into(),
        )),
        Command::Default => run_input(io::stdin().lock(), None, None, None, &args),
        Command::Serve(s) => serve(&args, &s),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`weir run x.sql | head`): stop quietly.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            report(&format!("cannot write the output: {e}"));
            ExitCode::FAILURE
        }
        Err(Failure::Statement(msg)) => {
            report(&msg);
            ExitCode::FAILURE
        }
        Err(Failure::Reported(_)) => ExitCode::FAILURE,
    }
}

/// In a cluster, a failed connection between processes panics timely's network threads, and
/// then every worker of the process: prints the first such failure as one line instead of a
/// backtrace per thread. A process other than 0 then has nothing left to do and exits; process
/// 0 goes on to report each query the failure stopped.
fn quiet_network_panics(process: usize) {
    let reported = std::sync::atomic::AtomicBool::new(false);
    std::panic::set_hook(Box::new(move |info| {
        if reported.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let payload = info.payload();
        let what = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a thread failed");
        let _ = writeln!(
            io::stderr(),
            "error: process {process} of the cluster lost a connection to another process: {what}"
        );
        if process != 0 {
            std::process::exit(1);
        }
    }));
}

/// A process other than 0 of a cluster: its workers run process 0's queries until process 0
/// ends. Whatever command was given is process 0's to run.
fn serve_cluster(args: &Args) -> Result<(), Failure> {
    let Some(c) = &args.cluster else { return Ok(()) };
    let first = c.process * c.threads;
    let _ = writeln!(
        io::stderr(),
        "weir: process {} of {}: workers {first}..{} serve process 0 ({})",
        c.process,
        c.processes(),
        first + c.threads - 1,
        c.addresses[0]
    );
    weir::serve_cluster(c).map_err(|e| Failure::Statement(e.to_string()))
}

/// Sets `engine` to run continuous queries as `args` ask: on a cluster of processes (this
/// one process 0) or on `--workers` threads.
pub(crate) fn place_workers(engine: &mut weir::Engine, args: &Args) -> weir::Result<()> {
    match &args.cluster {
        Some(c) => engine.join_cluster(c),
        None => engine.set_workers(args.workers),
    }
}

/// `weir serve`: runs the PostgreSQL-protocol server until it fails or is interrupted.
fn serve(args: &Args, s: &args::ServeArgs) -> Result<(), Failure> {
    let mut config = weir_server::Config {
        data_dir: args.data_dir.clone(),
        checkpoint_interval: args.checkpoint_interval,
        file_dir: s.file_dir.clone(),
        tls: s.tls_cert.clone().zip(s.tls_key.clone()),
        workers: args.workers,
        cluster: args.cluster.clone(),
        memory_limit: args.memory_limit,
        wal: args.wal,
        ..Default::default()
    };
    if let Some(addr) = s.listen {
        config.listen = addr;
    }
    if let Some(n) = s.subscriber_buffer {
        config.subscriber_buffer = n;
    }
    if let Some(u) = &s.user {
        config.user = u.clone();
    }
    // From the environment, not the command line, where other users' `ps` would show it.
    config.password = std::env::var("WEIR_PASSWORD").ok().filter(|p| !p.is_empty());
    let user = config.user.clone();
    weir_server::serve(config, |addr, notes| {
        for n in notes {
            let _ = writeln!(io::stderr(), "weir: {n}");
        }
        let _ = writeln!(
            io::stderr(),
            "weir: listening on {addr} (PostgreSQL protocol): psql -h {} -p {} -U {user}",
            addr.ip(),
            addr.port()
        );
    })
    .map_err(|e| Failure::Statement(e.to_string()))
}

/// The checkpoint note that holds the script's fingerprint.
const SCRIPT_NOTE: &str = "weir run script crc32";

/// A session over an engine: with `--data-dir`, restored from the newest checkpoint there
/// (reported on standard error) and checkpointing into it. Whether a checkpoint was restored.
/// With the `script`'s text, its fingerprint is kept in the checkpoints, and a checkpoint taken
/// with another script is refused: a restart resumes the statements the checkpoint holds and
/// would silently ignore an edited script.
fn session<W: Write>(
    args: &Args,
    out: W,
    script: Option<&str>,
) -> Result<(Session<W>, bool), Failure> {
    let Some(dir) = &args.data_dir else {
        let mut engine = weir::Engine::new();
        place_workers(&mut engine, args).map_err(|e| Failure::Statement(e.to_string()))?;
        engine.set_memory_limit(args.memory_limit);
        let mut session = Session::with_engine(engine, args.format, out, false);
        if args.stats {
            session.print_final_stats();
        }
        if let Some(dir) = &args.output_dir {
            session.set_output_dir(dir)?;
        }
        return Ok((session, false));
    };
    let (mut engine, recovery) = match &args.cluster {
        Some(c) => weir::Engine::open_on_cluster(dir, c),
        None => weir::Engine::open_with_workers(dir, args.workers),
    }
    .map_err(|e| Failure::Statement(e.to_string()))?;
    for w in &recovery.warnings {
        let _ = writeln!(io::stderr(), "warning: {w}");
    }
    engine.set_checkpoint_interval(args.checkpoint_interval);
    engine.set_memory_limit(args.memory_limit);
    if let Some(text) = script {
        let fingerprint = format!("{:08x}", crc32fast::hash(text.as_bytes()));
        let taken_with = recovery.notes.get(SCRIPT_NOTE);
        if recovery.checkpoint.is_some() && taken_with.is_some_and(|f| *f != fingerprint) {
            return Err(Failure::Statement(format!(
                "the script changed since the checkpoint in {dir} was taken, and a restart \
                 resumes the statements of the checkpoint, not the script: put the script back \
                 as it was to resume, or delete {dir} to start over with the new one",
                dir = dir.display()
            )));
        }
        engine.set_checkpoint_note(SCRIPT_NOTE, &fingerprint);
    }
    let mut session = Session::with_engine(engine, args.format, out, false);
    if args.stats {
        session.print_final_stats();
    }
    if let Some(dir) = &args.output_dir {
        session.set_output_dir(dir)?;
    }
    let restored = match recovery.checkpoint {
        Some(n) => {
            let _ =
                writeln!(io::stderr(), "weir: resuming from checkpoint {n} in {}", dir.display());
            session.resume_parked(&recovery.parked)?;
            true
        }
        None => false,
    };
    Ok((session, restored))
}

/// Runs statements as they are read from `input`, then reads the sources and closes every
/// stream. Relative source paths are read from `base_dir` (a script file's directory) or the
/// working directory; no sink may overwrite the `script` file. A session restored from a
/// checkpoint does not run the statements again.
fn run_input(
    input: impl io::BufRead,
    base_dir: Option<&Path>,
    script: Option<&Path>,
    text: Option<&str>,
    args: &Args,
) -> Result<(), Failure> {
    if args.wal.is_some() {
        return Err(Failure::Statement(
            "--wal is for the REPL and weir serve, whose input arrives as it is typed or sent: \
             a script's input is its text and its streams' sources, which a restart reads \
             again from the checkpoint (docs/recovery.md)"
                .into(),
        ));
    }
    let (mut session, restored) = session(args, io::stdout().lock(), text)?;
    if restored {
        return session.finish();
    }
    if let Some(dir) = base_dir {
        session.engine_mut().set_base_dir(dir);
    }
    if let Some(path) = script {
        session.engine_mut().protect_path(path, "the script being run");
    }
    script::run_lines(&mut session, input)
}
