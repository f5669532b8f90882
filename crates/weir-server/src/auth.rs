//! Who may connect: nobody is asked anything on a loopback-only server without a password;
//! with one, every connection authenticates with SCRAM-SHA-256 (PostgreSQL's default method,
//! which never sends the password), as the one configured user.
//!
//! The password is salted and hashed once when the server starts (4096 PBKDF2 iterations, as
//! PostgreSQL does), and only the hash is kept.

use std::fmt::Debug;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{ClientInfo, ConnectionManager};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::session::Session;

/// PBKDF2 iterations of the stored password hash (PostgreSQL's default).
const ITERATIONS: usize = 4096;

/// The user a password-protected server admits, and its password's salted hash.
#[derive(Debug)]
pub(crate) struct Credentials {
    user: String,
    salt: Vec<u8>,
    salted: Vec<u8>,
}

impl Credentials {
    pub fn new(user: &str, password: &str) -> Self {
        let salt = random_salt();
        let salted = gen_salted_password(password, &salt, ITERATIONS);
        Credentials { user: user.to_string(), salt, salted }
    }
}

/// 16 bytes from the standard library's per-process random hash keys: a salt must be unique
/// to this server, not secret.
fn random_salt() -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        out.extend_from_slice(&h.finish().to_le_bytes());
    }
    out
}

#[async_trait]
impl AuthSource for Credentials {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or("");
        if user != self.user {
            return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                "FATAL".into(),
                "28P01".into(),
                format!("password authentication failed for user \"{user}\""),
            ))));
        }
        Ok(Password::new(Some(self.salt.clone()), self.salted.clone()))
    }
}

/// A connection's startup: open, or SCRAM-SHA-256.
pub(crate) enum Startup {
    Open(Arc<Session>),
    Scram(Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>),
}

impl Debug for Startup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Startup::Open(_) => "Startup::Open",
            Startup::Scram(_) => "Startup::Scram",
        })
    }
}

impl Startup {
    pub fn new(
        session: Arc<Session>,
        credentials: Option<Arc<Credentials>>,
        connections: Arc<ConnectionManager>,
        certificate: Option<&[u8]>,
    ) -> Self {
        match credentials {
            None => Startup::Open(session),
            Some(c) => {
                let mut scram = ScramAuth::new(c);
                scram.set_iterations(ITERATIONS);
                // Over TLS, SCRAM-SHA-256-PLUS binds the login to the server's certificate.
                if let Some(pem) = certificate {
                    let _ = scram.configure_certificate(pem);
                }
                let handler = SASLAuthStartupHandler::new(Arc::new(
                    DefaultServerParameterProvider::default(),
                ))
                .with_scram(scram)
                .with_connection_manager(connections);
                Startup::Scram(Box::new(handler))
            }
        }
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match self {
            Startup::Open(s) => s.on_startup(client, message).await,
            Startup::Scram(h) => h.on_startup(client, message).await,
        }
    }
}
