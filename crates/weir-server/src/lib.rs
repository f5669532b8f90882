//! # `weir serve`: Weir over PostgreSQL's wire protocol
//!
//! One [`weir::Engine`] shared by every connection, so `psql` and PostgreSQL drivers (libpq,
//! tokio-postgres, psycopg, JDBC) can create streams, push events and watch continuous queries.
//! The protocol itself is the `pgwire` crate's, on `tokio`; this crate maps it onto Weir:
//!
//! - [`core`]: the engine thread, which owns the engine and answers requests in arrival order,
//!   reads sources, and feeds each subscription (bounded per subscriber);
//! - [`auth`]: who may connect (SCRAM-SHA-256 when a password is set);
//! - [`session`]: one connection's handlers (simple queries, COPY, cancel);
//! - [`extended`]: prepared statements with parameters (the extended query protocol);
//! - [`command`]: the statements the server answers itself (SUBSCRIBE, COPY, cursors,
//!   transactions, settings) and how a query string splits into statements;
//! - [`encode`]: Arrow values as PostgreSQL types and text or binary values;
//! - [`sqlstate`]: Weir's errors as PostgreSQL error responses.
//!
//! See docs/server.md for what a client can do and how.

mod auth;
mod command;
mod core;
mod encode;
mod extended;
mod session;
mod sqlstate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::ConnectionManager;
use tokio::net::TcpListener;

use crate::core::{CoreConfig, CoreHandle};
use crate::session::{Handlers, Session, Shared};

/// The default address: PostgreSQL's protocol on Materialize's port, loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:6875";

/// The default bound of rows waiting for one subscriber.
pub const DEFAULT_SUBSCRIBER_BUFFER: usize = 1_000_000;

/// How a server runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen. Beyond loopback only with a password.
    pub listen: SocketAddr,
    /// With a password, every connection authenticates with SCRAM-SHA-256 as this user.
    pub user: String,
    /// The password of `user`; None: no authentication (loopback only).
    pub password: Option<String>,
    /// Checkpoints go here, and the server resumes from the newest one.
    pub data_dir: Option<PathBuf>,
    /// With `data_dir`: how often to checkpoint while sources are read.
    pub checkpoint_interval: Option<Duration>,
    /// Relative source and sink paths are resolved here.
    pub base_dir: Option<PathBuf>,
    /// If set, clients' streams read and sinks write only files inside this directory
    /// (relative paths are read from it), and no stream reads the server's standard input.
    pub file_dir: Option<PathBuf>,
    /// Rows that may wait for one subscriber before its subscription is ended.
    pub subscriber_buffer: usize,
    /// A PEM certificate chain and private key: clients may then connect with TLS
    /// (`sslmode=require`).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Timely workers the continuous queries run on (1: the engine's thread).
    pub workers: usize,
    /// Run the continuous queries on a cluster of processes, this one process 0 (`weir
    /// --hosts ... serve`; `workers` is then ignored: the cluster says how many each process
    /// runs).
    pub cluster: Option<weir::Cluster>,
    /// The limit on the continuous queries' state, in bytes (`SET memory_limit`).
    pub memory_limit: Option<usize>,
    /// With `data_dir`: log pushed input (INSERT, COPY FROM STDIN...) before taking it in,
    /// with this sync policy, so a restart replays it ([`weir::Engine::set_wal`]).
    pub wal: Option<weir::WalSync>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: DEFAULT_LISTEN
                .parse()
                .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 6875))),
            user: "weir".into(),
            password: None,
            data_dir: None,
            checkpoint_interval: None,
            cluster: None,
            base_dir: None,
            file_dir: None,
            subscriber_buffer: DEFAULT_SUBSCRIBER_BUFFER,
            tls: None,
            workers: 1,
            memory_limit: None,
            wal: None,
        }
    }
}

/// Why a server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error(
        "refusing to listen on {0} without authentication: set a password (WEIR_PASSWORD) or \
         listen on loopback (127.0.0.1 or ::1)"
    )]
    NotLoopback(SocketAddr),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Engine(#[from] weir::WeirError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A server bound to its address, ready to [`Server::run`].
pub struct Server {
    listener: TcpListener,
    shared: Shared,
    credentials: Option<Arc<auth::Credentials>>,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    /// The certificate chain (PEM), for SCRAM's channel binding over TLS.
    certificate: Option<Vec<u8>>,
    /// Messages about the start (checkpoint resumed, damaged checkpoints skipped).
    pub notes: Vec<String>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .field("password", &self.credentials.is_some())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Server {
    /// Opens the engine (resuming from `data_dir` if it holds a checkpoint), starts the engine
    /// thread and binds the address. Must be called inside a tokio runtime.
    pub async fn bind(config: Config) -> Result<Server, ServerError> {
        if !config.listen.ip().is_loopback() && config.password.is_none() {
            return Err(ServerError::NotLoopback(config.listen));
        }
        let mut notes = Vec::new();
        let mut engine = match &config.data_dir {
            Some(dir) => {
                let (mut engine, recovery) = match &config.cluster {
                    Some(c) => weir::Engine::open_on_cluster(dir, c)?,
                    None => weir::Engine::open_with_workers(dir, config.workers)?,
                };
                notes.extend(recovery.warnings.iter().map(|w| format!("warning: {w}")));
                if let Some(n) = recovery.checkpoint {
                    notes.push(format!("resumed from checkpoint {n} in {}", dir.display()));
                }
                // Subscriptions belong to connections, which do not survive a restart: their
                // queries are dropped; views and sinks go on.
                for sql in &recovery.parked {
                    drop(engine.resume(sql)?);
                }
                engine.set_checkpoint_interval(config.checkpoint_interval);
                engine.set_wal(config.wal)?;
                if recovery.replayed > 0 {
                    notes.push(format!(
                        "replayed {} records of pushed input from the write-ahead log",
                        recovery.replayed
                    ));
                }
                engine
            }
            None => weir::Engine::new(),
        };
        match &config.cluster {
            Some(c) => engine.join_cluster(c)?,
            None => engine.set_workers(config.workers)?,
        }
        engine.set_memory_limit(config.memory_limit);
        if let Some(dir) = &config.base_dir {
            engine.set_base_dir(dir);
        }
        if let Some(dir) = &config.file_dir {
            engine.confine_paths(dir)?;
        }
        let core: CoreHandle =
            core::start(engine, CoreConfig { subscriber_buffer: config.subscriber_buffer })?;
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| ServerError::Listen { addr: config.listen, source })?;
        let shared = Shared { core, connections: Arc::new(ConnectionManager::new()) };
        let credentials =
            config.password.as_deref().map(|p| Arc::new(auth::Credentials::new(&config.user, p)));
        let (tls, certificate) = match &config.tls {
            Some((cert, key)) => {
                let (acceptor, pem) = tls_acceptor(cert, key)?;
                (Some(acceptor), Some(pem))
            }
            None => (None, None),
        };
        Ok(Server { listener, shared, credentials, tls, certificate, notes })
    }

    /// The address bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until the listener fails; each connection runs as its own task.
    pub async fn run(self) -> Result<(), ServerError> {
        let cancel = Arc::new(DefaultCancelHandler::new(self.shared.connections.clone()));
        loop {
            let (socket, _peer) = self.listener.accept().await?;
            let _ = socket.set_nodelay(true);
            let (socket, probe) = with_probe(socket)?;
            let session = Arc::new(Session::new(self.shared.clone(), probe));
            let startup = Arc::new(auth::Startup::new(
                session.clone(),
                self.credentials.clone(),
                self.shared.connections.clone(),
                self.certificate.as_deref(),
            ));
            let handlers = Handlers { session, startup, cancel: cancel.clone() };
            let tls = self.tls.clone();
            tokio::spawn(async move {
                let _ = pgwire::tokio::process_socket(socket, tls, handlers).await;
            });
        }
    }
}

/// A TLS acceptor for a PEM certificate chain and private key, and the chain's PEM text.
fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<(pgwire::tokio::TlsAcceptor, Vec<u8>), ServerError> {
    use pgwire::tokio::tokio_rustls::rustls::ServerConfig;
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let pem = std::fs::read(cert)
        .map_err(|e| ServerError::Tls(format!("cannot read '{}': {e}", cert.display())))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ServerError::Tls(format!("'{}': {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(ServerError::Tls(format!("'{}' holds no certificate", cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| ServerError::Tls(format!("'{}': {e}", key.display())))?;
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| ServerError::Tls(e.to_string()))?;
    Ok((pgwire::tokio::TlsAcceptor::from(Arc::new(config)), pem))
}

/// The socket, and a second handle on it that a session peeks at to notice a client that
/// went away while it streamed (None if the handle cannot be had: then it is noticed at the
/// next write).
fn with_probe(
    socket: tokio::net::TcpStream,
) -> std::io::Result<(tokio::net::TcpStream, Option<tokio::net::TcpStream>)> {
    let std_socket = socket.into_std()?;
    let probe = std_socket
        .try_clone()
        .and_then(|p| {
            p.set_nonblocking(true)?;
            tokio::net::TcpStream::from_std(p)
        })
        .ok();
    Ok((tokio::net::TcpStream::from_std(std_socket)?, probe))
}

/// Runs a server until it fails: `weir serve`. Builds its own tokio runtime; calls `started`
/// with the address once it listens.
pub fn serve(
    config: Config,
    started: impl FnOnce(SocketAddr, &[String]),
) -> Result<(), ServerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        let server = Server::bind(config).await?;
        started(server.local_addr()?, &server.notes);
        server.run().await
    })
}
