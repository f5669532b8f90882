//! One client connection: the pgwire handlers that answer its messages.
//!
//! Each statement of a query string is either Weir SQL, sent to the engine thread, or one the
//! session answers itself ([`crate::command`]): SUBSCRIBE and continuous queries stream their
//! changes as rows until the client cancels (PostgreSQL's cancel request) or the query ends;
//! `COPY (SUBSCRIBE ...) TO STDOUT` streams them as copy data, which psql prints as they
//! arrive; `COPY s FROM STDIN` feeds the engine chunk by chunk; cursors over a subscription
//! (`DECLARE`/`FETCH`) let a client pull changes in bounded bites.
//!
//! A subscription's rows are written and flushed batch by batch, as the engine produces them.
//! Every subscription row starts with two columns: `weir_instant`, the instant of the change
//! (BIGINT, or TIMESTAMP for a stream whose event time is a TIMESTAMP), and `weir_diff`, +1 for
//! an insertion and -1 for a deletion (a stream's elements are all +1).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::util::display::FormatOptions;
use async_trait::async_trait;
use futures::{stream, Sink, SinkExt};
use pgwire::api::auth::noop::NoopStartupHandler;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::copy::CopyHandler;
use pgwire::api::query::{send_execution_response, send_query_response, SimpleQueryHandler};
use pgwire::api::results::{
    CopyCsvOptions, CopyEncoder, CopyResponse, DataRowEncoder, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail, CopyOutResponse};
use pgwire::messages::data::{DataRow, FieldDescription, RowDescription};
use pgwire::messages::response::CommandComplete;
use pgwire::messages::PgWireBackendMessage;
use weir::{ChangeBatch, Format, PlanKind, TimeDomain, WeirError};

use crate::command::{classify, split, Command};
use crate::core::{CoreHandle, Feed, FeedItem, Outcome, Request};
use crate::encode::{data_rows, fields, timestamp, Columns, FieldOut, Timestamp};
use crate::sqlstate::{error_info, pg_error, server_error};

/// Everything a connection shares with the others: the engine thread and the registry that
/// routes cancel requests.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    pub core: CoreHandle,
    pub connections: Arc<ConnectionManager>,
}

/// The handlers of one connection.
#[derive(Debug)]
pub(crate) struct Session {
    shared: Shared,
    state: Mutex<State>,
    /// A second handle on the client's socket, to notice while a subscription is quiet that
    /// the client has gone (the protocol gives the server nothing to send meanwhile).
    probe: Option<tokio::net::TcpStream>,
    preparer: Arc<crate::extended::Preparer>,
}

/// What a connection remembers between statements.
#[derive(Debug, Default)]
struct State {
    /// The COPY FROM STDIN in progress, by the engine thread's id.
    copy: Option<u64>,
    /// Open cursors over subscriptions.
    cursors: HashMap<String, Cursor>,
    /// `SET` values.
    settings: BTreeMap<String, String>,
}

/// A cursor: a subscription read by FETCH.
#[derive(Debug)]
struct Cursor {
    feed: Feed,
    /// Rows received and not fetched yet: a batch, a row of it and the row's diff (a
    /// stream's element of multiplicity n is n entries), encoded when fetched, in the format
    /// that FETCH asks for.
    pending: VecDeque<(Arc<ChangeBatch>, usize, i64)>,
    /// The rows' columns (instant, diff, the query's).
    schema: SchemaRef,
    /// The query ended (or failed: the error is returned by the next FETCH).
    ended: Option<Option<WeirError>>,
}

impl Session {
    pub fn new(shared: Shared, probe: Option<tokio::net::TcpStream>) -> Self {
        let preparer = Arc::new(crate::extended::Preparer {
            core: shared.core.clone(),
            cursors: Arc::default(),
        });
        Session { shared, state: Mutex::new(State::default()), probe, preparer }
    }

    pub fn preparer(&self) -> Arc<crate::extended::Preparer> {
        self.preparer.clone()
    }

    /// The columns of this session's cursors, which FETCH statements are prepared with.
    fn shared_cursors(&self) -> std::sync::MutexGuard<'_, HashMap<String, SchemaRef>> {
        self.preparer.cursors.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Resolves once the client has closed its connection (or sent Terminate) while the
    /// server was streaming; never, if it cannot tell.
    async fn client_gone(&self) {
        use tokio::io::Interest;
        let Some(probe) = &self.probe else { return std::future::pending().await };
        loop {
            match probe.ready(Interest::READABLE).await {
                Ok(ready) if !ready.is_read_closed() => {
                    // Bytes the client sent meanwhile (a Sync after Execute, a pipelined
                    // query) are read after the subscription ends: forget this readiness and
                    // look again a little later (the bytes keep the socket readable, so
                    // waiting for readiness alone would spin).
                    let _ = probe.try_io(Interest::READABLE, || {
                        Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
                    });
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // The client closed its side (after Terminate, or dropping the connection), or
                // the socket failed.
                _ => return,
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The connection's handler set, as pgwire asks for it.
#[derive(Debug)]
pub(crate) struct Handlers {
    pub session: Arc<Session>,
    pub startup: Arc<crate::auth::Startup>,
    pub cancel: Arc<DefaultCancelHandler>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.session.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl pgwire::api::query::ExtendedQueryHandler> {
        self.session.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        self.startup.clone()
    }

    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.session.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        self.cancel.clone()
    }
}

#[async_trait]
impl NoopStartupHandler for Session {
    fn connection_manager(&self) -> Option<Arc<ConnectionManager>> {
        Some(self.shared.connections.clone())
    }
}

/// The columns of a subscription's rows: instant, diff, then the query's.
pub(crate) fn subscription_schema(feed: &Feed) -> SchemaRef {
    subscription_columns(&feed.schema, feed.domain)
}

/// The columns of a subscription's rows: instant, diff, then the query's.
pub(crate) fn subscription_columns(schema: &SchemaRef, domain: TimeDomain) -> SchemaRef {
    let instant = match domain {
        TimeDomain::Micros => DataType::Timestamp(TimeUnit::Microsecond, None),
        TimeDomain::Ticks => DataType::Int64,
    };
    let mut cols = vec![
        Field::new("weir_instant", instant, false),
        Field::new("weir_diff", DataType::Int64, false),
    ];
    cols.extend(schema.fields().iter().map(|f| f.as_ref().clone()));
    Arc::new(Schema::new(cols))
}

/// Encodes the changes of a batch, each row preceded by its instant and diff; a stream's
/// element of multiplicity n is n rows with diff 1.
fn encode_changes<O: FieldOut>(
    b: &ChangeBatch,
    kind: PlanKind,
    domain: TimeDomain,
    out: &mut O,
    mut emit: impl FnMut(&mut O),
) -> PgWireResult<usize> {
    let options = FormatOptions::default();
    let columns = Columns::new(&b.data, &options)?;
    let mut rows = 0;
    for (row, diff) in change_rows(b, kind) {
        encode_change(b, row, diff, domain, &columns, out)?;
        emit(out);
        rows += 1;
    }
    Ok(rows)
}

/// The rows of a batch as subscription rows: (row, diff), a stream's element of
/// multiplicity n as n rows of diff 1.
fn change_rows(b: &ChangeBatch, kind: PlanKind) -> impl Iterator<Item = (usize, i64)> + '_ {
    (0..b.data.num_rows()).flat_map(move |row| {
        let (diff, repeat) = match kind {
            PlanKind::Stream => (1, b.diffs[row].max(0) as usize),
            PlanKind::Relation => (b.diffs[row], 1),
        };
        std::iter::repeat_n((row, diff), repeat)
    })
}

/// One subscription row: the instant, the diff, then the values.
fn encode_change<O: FieldOut>(
    b: &ChangeBatch,
    row: usize,
    diff: i64,
    domain: TimeDomain,
    columns: &Columns<'_>,
    out: &mut O,
) -> PgWireResult<()> {
    match domain {
        TimeDomain::Micros => out.put(&Timestamp(timestamp(b.times[row])?))?,
        TimeDomain::Ticks => out.put(&b.times[row])?,
    }
    out.put(&diff)?;
    columns.encode(row, out)
}

fn row_description(fields: &[FieldInfo]) -> RowDescription {
    RowDescription::new(
        fields
            .iter()
            .map(|f| {
                FieldDescription::new(
                    f.name().to_string(),
                    0,
                    0,
                    f.datatype().oid(),
                    f.type_size(),
                    f.type_modifier(),
                    f.format().value(),
                )
            })
            .collect(),
    )
}

/// A command tag as PostgreSQL spells it (`INSERT 0 n`).
fn tag(done: &str) -> Tag {
    if let Some(n) = done.strip_prefix("INSERT ").and_then(|n| n.parse::<usize>().ok()) {
        return Tag::new("INSERT").with_oid(0).with_rows(n);
    }
    if let Some((word, n)) = done.rsplit_once(' ') {
        if let Ok(n) = n.parse::<usize>() {
            return Tag::new(word).with_rows(n);
        }
    }
    Tag::new(done)
}

/// A one-shot result as a query response.
fn rows_response(
    schema: &SchemaRef,
    batches: &[arrow::array::RecordBatch],
    command: &str,
    mode: Mode<'_>,
) -> PgWireResult<QueryResponse> {
    let fields = Arc::new(fields(schema, |i| mode.format(i)));
    let mut rows = Vec::new();
    for b in batches {
        rows.extend(data_rows(b, &fields)?);
    }
    let mut r = QueryResponse::new(fields, stream::iter(rows.into_iter().map(Ok)));
    r.set_command_tag(command);
    Ok(r)
}

/// EXPLAIN's text as rows of one `QUERY PLAN` column, as PostgreSQL gives it.
fn explain_response(text: &str, mode: Mode<'_>) -> PgWireResult<QueryResponse> {
    let schema = Arc::new(Schema::new(vec![Field::new("QUERY PLAN", DataType::Utf8, false)]));
    let lines: Vec<&str> = text.lines().collect();
    let batch = arrow::array::RecordBatch::try_new(
        schema.clone(),
        vec![Arc::new(arrow::array::StringArray::from(lines))],
    )
    .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
    rows_response(&schema, &[batch], "EXPLAIN", mode)
}

/// Sends responses gathered so far, the way pgwire would after the query (a subscription
/// must send them before its own rows).
async fn send_responses<C>(client: &mut C, responses: &mut Vec<Response>) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    for r in responses.drain(..) {
        match r {
            Response::Query(q) => send_query_response(client, q, true).await?,
            Response::Execution(t)
            | Response::TransactionStart(t)
            | Response::TransactionEnd(t) => send_execution_response(client, t).await?,
            _ => {}
        }
    }
    Ok(())
}

/// Sends every response but the last (which the caller hands back to pgwire).
pub(crate) async fn send_all_but_last<C>(
    client: &mut C,
    out: &mut Vec<Response>,
) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if out.len() > 1 {
        let last = out.pop();
        send_responses(client, out).await?;
        out.extend(last);
    }
    Ok(())
}

/// A subscription's feed as rows until it ends: `Ok(rows)` once its query ended, an error if
/// it failed. Cancelling the statement drops the feed, which stops the query.
async fn stream_rows<C>(
    session: &Session,
    client: &mut C,
    mut feed: Feed,
    mode: Mode<'_>,
    describe: bool,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let schema = subscription_schema(&feed);
    let fields = Arc::new(fields(&schema, |i| mode.format(i)));
    if describe {
        client.send(PgWireBackendMessage::RowDescription(row_description(&fields))).await?;
    }
    let mut enc = DataRowEncoder::new(fields.clone());
    pump(session, client, &mut feed, &mut enc, |e| PgWireBackendMessage::DataRow(e.take_row()))
        .await
}

/// A subscription's feed as `COPY TO STDOUT` data (text or CSV lines) until it ends.
async fn stream_copy<C>(
    session: &Session,
    client: &mut C,
    mut feed: Feed,
    csv: bool,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let schema = subscription_schema(&feed);
    let fields = Arc::new(fields(&schema, |_| FieldFormat::Text));
    let n = fields.len() as i16;
    client
        .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            0,
            n,
            vec![0; n as usize],
        )))
        .await?;
    let mut enc = copy_encoder(fields, csv);
    let total = pump(session, client, &mut feed, &mut enc, |e| {
        PgWireBackendMessage::CopyData(e.take_copy())
    })
    .await?;
    client.send(PgWireBackendMessage::CopyDone(CopyDone::new())).await?;
    Ok(total)
}

/// Writes a feed's changes to the client as they come, each batch flushed, until the query
/// ends (`Ok(rows written)`) or fails; `take` turns the values encoded into one message.
async fn pump<C, E>(
    session: &Session,
    client: &mut C,
    feed: &mut Feed,
    enc: &mut E,
    take: impl Fn(&mut E) -> PgWireBackendMessage + Send,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    E: FieldOut + Send,
{
    let mut total = 0;
    loop {
        let Some(item) = next_or_gone(session, feed).await? else { return Ok(total) };
        match item {
            FeedItem::Changes(b) => {
                let mut messages = Vec::new();
                total +=
                    encode_changes(&b, feed.kind, feed.domain, enc, |e| messages.push(take(e)))?;
                for m in messages {
                    client.feed(m).await?;
                }
                client.flush().await?;
            }
            FeedItem::Failed(e) => return Err(pg_error(&e, "", 0)),
            FeedItem::Ended => return Ok(total),
        }
    }
}

/// The feed's next item, or an error once the client has gone (which ends the statement and
/// drops the feed, stopping its query).
async fn next_or_gone(session: &Session, feed: &mut Feed) -> PgWireResult<Option<FeedItem>> {
    tokio::select! {
        item = feed.next() => Ok(item),
        () = session.client_gone() => Err(PgWireError::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the client closed the connection during a subscription",
        ))),
    }
}

fn copy_encoder(fields: Arc<Vec<FieldInfo>>, csv: bool) -> CopyEncoder {
    if csv {
        CopyEncoder::new_csv(fields, CopyCsvOptions::default())
    } else {
        CopyEncoder::new_text(fields, Default::default())
    }
}

/// The byte offset `offset` of `query` in characters.
fn chars_before(query: &str, offset: usize) -> usize {
    query.get(..offset).map_or(0, |s| s.chars().count())
}

impl Session {
    async fn execute(&self, sql: &str) -> Result<Vec<Outcome>, WeirError> {
        let sql = sql.to_string();
        self.shared.core.call(|reply| Request::Execute { sql, reply }).await?
    }

    async fn subscribe(&self, query: &str) -> Result<Feed, WeirError> {
        let query = query.to_string();
        self.shared.core.call(|reply| Request::Subscribe { query, reply }).await?
    }

    /// A cursor's next rows: up to `count` (all available if None), waiting for the first
    /// as long as `timeout` allows (without one, until a row arrives or the query ends).
    async fn fetch(
        &self,
        name: &str,
        count: Option<usize>,
        timeout: Option<Duration>,
        mode: Mode<'_>,
    ) -> PgWireResult<QueryResponse> {
        let mut cursor =
            self.state().cursors.remove(name).ok_or_else(|| {
                server_error("34000", format!("cursor \"{name}\" does not exist"))
            })?;
        let result = fetch_rows(&mut cursor, count, timeout).await;
        let fields = Arc::new(fields(&cursor.schema, |i| mode.format(i)));
        let domain = cursor.feed.domain;
        self.state().cursors.insert(name.to_string(), cursor);
        let rows = encode_fetched(&result?, domain, &fields)?;
        let mut r = QueryResponse::new(fields, stream::iter(rows.into_iter().map(Ok)));
        r.set_command_tag("FETCH");
        Ok(r)
    }
}

/// Fetched changes as data rows of `fields`.
fn encode_fetched(
    rows: &[(Arc<ChangeBatch>, usize, i64)],
    domain: TimeDomain,
    fields: &Arc<Vec<FieldInfo>>,
) -> PgWireResult<Vec<DataRow>> {
    let options = FormatOptions::default();
    let mut enc = DataRowEncoder::new(fields.clone());
    let mut out = Vec::with_capacity(rows.len());
    let mut i = 0;
    while i < rows.len() {
        // The run of rows from one batch shares its columns.
        let batch = &rows[i].0;
        let columns = Columns::new(&batch.data, &options)?;
        while i < rows.len() && Arc::ptr_eq(&rows[i].0, batch) {
            encode_change(batch, rows[i].1, rows[i].2, domain, &columns, &mut enc)?;
            out.push(enc.take_row());
            i += 1;
        }
    }
    Ok(out)
}

/// Takes what a cursor's feed has ready into its pending rows.
fn take_ready(cursor: &mut Cursor, item: FeedItem) {
    match item {
        FeedItem::Changes(b) => {
            let b = Arc::new(b);
            let kind = cursor.feed.kind;
            cursor.pending.extend(change_rows(&b, kind).map(|(row, diff)| (b.clone(), row, diff)));
        }
        FeedItem::Failed(e) => cursor.ended = Some(Some(e)),
        FeedItem::Ended => cursor.ended = Some(None),
    }
}

async fn fetch_rows(
    cursor: &mut Cursor,
    count: Option<usize>,
    timeout: Option<Duration>,
) -> PgWireResult<Vec<(Arc<ChangeBatch>, usize, i64)>> {
    while let Some(item) = cursor.feed.try_next() {
        take_ready(cursor, item);
    }
    if cursor.pending.is_empty() && cursor.ended.is_none() {
        let next = match timeout {
            Some(t) => tokio::time::timeout(t, cursor.feed.next()).await.unwrap_or(None),
            None => cursor.feed.next().await.or(Some(FeedItem::Ended)),
        };
        if let Some(item) = next {
            take_ready(cursor, item);
        }
        while let Some(item) = cursor.feed.try_next() {
            take_ready(cursor, item);
        }
    }
    if cursor.pending.is_empty() {
        if let Some(Some(e)) = cursor.ended.take() {
            cursor.ended = Some(None);
            return Err(pg_error(&e, "", 0));
        }
    }
    let n = count.unwrap_or(usize::MAX).min(cursor.pending.len());
    Ok(cursor.pending.drain(..n).collect())
}

/// How a statement's results are sent: after a simple query (row descriptions included), or
/// for an extended-protocol Execute (described before, in the formats the client bound).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Mode<'a> {
    Simple,
    Extended(&'a pgwire::api::portal::Format),
}

impl Mode<'_> {
    fn format(&self, i: usize) -> FieldFormat {
        match self {
            Mode::Simple => FieldFormat::Text,
            Mode::Extended(f) => f.format_for(i),
        }
    }
}

impl Session {
    /// Runs one statement of a query string (beginning `offset` characters into `query`),
    /// appending its responses to `out`. Returns false if the rest of the string must not run
    /// (an error response was added).
    pub(crate) async fn run_piece<C>(
        &self,
        client: &mut C,
        text: &str,
        query: &str,
        offset: usize,
        last: bool,
        mode: Mode<'_>,
        out: &mut Vec<Response>,
    ) -> PgWireResult<bool>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let describe = matches!(mode, Mode::Simple);
        match classify(text) {
            Command::Weir => {
                let outcomes = match self.execute(text).await {
                    Ok(o) => o,
                    Err(e) => {
                        out.push(Response::Error(Box::new(error_info(&e, query, offset))));
                        return Ok(false);
                    }
                };
                for o in outcomes {
                    match o {
                        Outcome::Done(done) => out.push(Response::Execution(tag(&done))),
                        Outcome::Rows { schema, batches } => {
                            out.push(Response::Query(rows_response(
                                &schema, &batches, "SELECT", mode,
                            )?));
                        }
                        Outcome::Explain(text) => {
                            out.push(Response::Query(explain_response(&text, mode)?))
                        }
                        Outcome::Subscribed(feed) => {
                            send_responses(client, out).await?;
                            let n = stream_rows(self, client, feed, mode, describe).await?;
                            out.push(Response::Execution(Tag::new("SELECT").with_rows(n)));
                        }
                    }
                }
            }
            Command::Subscribe { query: q } => {
                let feed = self.subscribe(&q).await.map_err(|e| pg_error(&e, "", 0))?;
                send_responses(client, out).await?;
                let n = stream_rows(self, client, feed, mode, describe).await?;
                out.push(Response::Execution(Tag::new("SUBSCRIBE").with_rows(n)));
            }
            Command::CopyOut { query: q, subscribe, csv } => {
                let outcome = if subscribe {
                    self.subscribe(&q).await.map(Outcome::Subscribed)
                } else {
                    self.execute(&q).await.and_then(|mut o| {
                        o.pop().ok_or_else(|| WeirError::plan("COPY needs a query"))
                    })
                };
                let outcome = outcome.map_err(|e| pg_error(&e, "", 0))?;
                send_responses(client, out).await?;
                let n = match outcome {
                    Outcome::Subscribed(feed) => stream_copy(self, client, feed, csv).await?,
                    Outcome::Rows { schema, batches } => {
                        copy_rows(client, &schema, &batches, csv).await?
                    }
                    _ => return Err(server_error("42601", "COPY (...) TO STDOUT needs a query")),
                };
                out.push(Response::Execution(Tag::new("COPY").with_rows(n)));
            }
            Command::CopyIn { stream, format } => {
                if !last {
                    return Err(server_error(
                        "0A000",
                        "COPY FROM STDIN must be the last statement of a query string",
                    ));
                }
                let columns = self.copy_begin(&stream, format).await?;
                out.push(Response::CopyIn(CopyResponse::new(0, columns, stream::empty())));
            }
            Command::Declare { cursor, query: q } => {
                let feed = self.subscribe(&q).await.map_err(|e| pg_error(&e, "", 0))?;
                let schema = subscription_schema(&feed);
                self.shared_cursors().insert(cursor.clone(), schema.clone());
                let c = Cursor { feed, pending: VecDeque::new(), schema, ended: None };
                self.state().cursors.insert(cursor, c);
                out.push(Response::Execution(Tag::new("DECLARE CURSOR")));
            }
            Command::Fetch { cursor, count, timeout_ms } => {
                let timeout = timeout_ms.map(Duration::from_millis);
                let r = self.fetch(&cursor, count, timeout, mode).await?;
                out.push(Response::Query(r));
            }
            Command::Close { name } => {
                if self.state().cursors.remove(&name).is_some() {
                    self.shared_cursors().remove(&name);
                    out.push(Response::Execution(Tag::new("CLOSE CURSOR")));
                } else {
                    // Not a cursor: Weir's `CLOSE stream`.
                    match self.execute(text).await {
                        Ok(_) => out.push(Response::Execution(Tag::new("CLOSE"))),
                        Err(e) => {
                            out.push(Response::Error(Box::new(error_info(&e, query, offset))));
                            return Ok(false);
                        }
                    }
                }
            }
            Command::Begin => out.push(Response::TransactionStart(Tag::new("BEGIN"))),
            Command::Commit { rollback } => {
                out.push(Response::TransactionEnd(Tag::new(if rollback {
                    "ROLLBACK"
                } else {
                    "COMMIT"
                })))
            }
            Command::Discard => out.push(Response::Execution(Tag::new("DISCARD ALL"))),
            Command::Set { name, value } => {
                {
                    let mut st = self.state();
                    match value {
                        Some(v) => st.settings.insert(name, v),
                        None => st.settings.remove(&name),
                    };
                }
                let word = if value_is_reset(text) { "RESET" } else { "SET" };
                out.push(Response::Execution(Tag::new(word)));
            }
            Command::ShowSetting { name } => {
                let value = if name == "weir_running_queries" {
                    let n = self.shared.core.call(|reply| Request::RunningQueries { reply });
                    n.await.map_err(|e| pg_error(&e, "", 0))?.to_string()
                } else {
                    self.setting(client, &name)?
                };
                let schema = Arc::new(Schema::new(vec![Field::new(&name, DataType::Utf8, false)]));
                let batch = arrow::array::RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(arrow::array::StringArray::from(vec![value]))],
                )
                .map_err(|e| PgWireError::ApiError(Box::new(e)))?;
                out.push(Response::Query(rows_response(&schema, &[batch], "SHOW", mode)?));
            }
            Command::Refused { code, message } => {
                out.push(Response::Error(Box::new(pgwire::error::ErrorInfo::new(
                    "ERROR".into(),
                    code.into(),
                    message,
                ))));
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[async_trait]
impl SimpleQueryHandler for Session {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut out = Vec::new();
        let pieces = split(query);
        let last = pieces.len().saturating_sub(1);
        for (i, piece) in pieces.into_iter().enumerate() {
            let offset = chars_before(query, piece.offset);
            let go_on = self
                .run_piece(client, piece.text, query, offset, i == last, Mode::Simple, &mut out)
                .await?;
            if !go_on {
                break;
            }
        }
        Ok(out)
    }
}

fn value_is_reset(text: &str) -> bool {
    text.trim_start().get(..5).is_some_and(|w| w.eq_ignore_ascii_case("reset"))
}

/// A one-shot query's rows as `COPY TO STDOUT` data.
async fn copy_rows<C>(
    client: &mut C,
    schema: &SchemaRef,
    batches: &[arrow::array::RecordBatch],
    csv: bool,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let fields = Arc::new(fields(schema, |_| FieldFormat::Text));
    let n = fields.len() as i16;
    client
        .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            0,
            n,
            vec![0; n as usize],
        )))
        .await?;
    let lines = copy_lines(fields, batches, csv)?;
    let total = lines.len();
    for l in lines {
        client.feed(PgWireBackendMessage::CopyData(l)).await?;
    }
    client.send(PgWireBackendMessage::CopyDone(CopyDone::new())).await?;
    Ok(total)
}

/// The rows of `batches` as lines of copy data.
fn copy_lines(
    fields: Arc<Vec<FieldInfo>>,
    batches: &[arrow::array::RecordBatch],
    csv: bool,
) -> PgWireResult<Vec<CopyData>> {
    let mut enc = copy_encoder(fields, csv);
    let options = FormatOptions::default();
    let mut out = Vec::new();
    for b in batches {
        let columns = Columns::new(b, &options)?;
        for row in 0..b.num_rows() {
            columns.encode(row, &mut enc)?;
            out.push(enc.take_copy());
        }
    }
    Ok(out)
}

impl Session {
    /// A session setting: what `SET` gave, else what the server told the client at startup.
    fn setting<C: ClientInfo>(&self, client: &C, name: &str) -> PgWireResult<String> {
        if let Some(v) = self.state().settings.get(name) {
            return Ok(v.clone());
        }
        let v = match name {
            "server_version" => "16.6".to_string(),
            "server_encoding" | "client_encoding" => "UTF8".into(),
            "datestyle" => "ISO, MDY".into(),
            "timezone" => "UTC".into(),
            "integer_datetimes" | "standard_conforming_strings" => "on".into(),
            "transaction_isolation" | "default_transaction_isolation" => "serializable".into(),
            "application_name" => {
                client.metadata().get("application_name").cloned().unwrap_or_default()
            }
            "weir_version" => env!("CARGO_PKG_VERSION").into(),
            _ => {
                return Err(server_error(
                    "42704",
                    format!("unrecognized configuration parameter \"{name}\""),
                ))
            }
        };
        Ok(v)
    }

    /// Starts a COPY into `stream`; the number of the stream's columns.
    async fn copy_begin(&self, stream: &str, format: Format) -> PgWireResult<usize> {
        let name = stream.to_string();
        let id = self
            .shared
            .core
            .call(|reply| Request::CopyBegin { stream: name, format, reply })
            .await
            .and_then(|r| r)
            .map_err(|e| pg_error(&e, "", 0))?;
        self.state().copy = Some(id);
        Ok(0)
    }
}

#[async_trait]
impl CopyHandler for Session {
    async fn on_copy_data<C>(&self, _client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(id) = self.state().copy else {
            return Err(server_error("08P01", "copy data without a COPY in progress"));
        };
        let bytes = data.data.to_vec();
        let result = self
            .shared
            .core
            .call(|reply| Request::CopyData { id, bytes, reply })
            .await
            .and_then(|r| r);
        if let Err(e) = result {
            self.state().copy = None;
            return Err(pg_error(&e, "", 0));
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(id) = self.state().copy.take() else {
            return Err(server_error("08P01", "COPY done without a COPY in progress"));
        };
        let report = self
            .shared
            .core
            .call(|reply| Request::CopyDone { id, reply })
            .await
            .and_then(|r| r)
            .map_err(|e| pg_error(&e, "", 0))?;
        if report.late > 0 || report.bad > 0 {
            let notice = pgwire::error::ErrorInfo::new(
                "NOTICE".into(),
                "01000".into(),
                format!(
                    "COPY: {} row(s) taken in, {} late, {} unreadable (see the stream's $late \
                     and $errors streams)",
                    report.accepted, report.late, report.bad
                ),
            );
            client.feed(PgWireBackendMessage::NoticeResponse(notice.into())).await?;
        }
        // pgwire then leaves the copy state and, for a simple query, sends ReadyForQuery.
        let tag = Tag::new("COPY").with_rows(report.records as usize);
        client.send(PgWireBackendMessage::CommandComplete(CommandComplete::from(tag))).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, _client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(id) = self.state().copy.take() {
            self.shared.core.tell(Request::CopyAbort { id });
        }
        server_error(
            "57014",
            format!(
                "COPY from stdin failed: {} (rows sent before it stay in the stream)",
                fail.message
            ),
        )
    }
}
