//! The PostgreSQL store: a connection pool on a database that several instances
//! share.
//!
//! Intake is group-committed (`intake.rs`): the events waiting are inserted with
//! their deliveries by one `WITH … INSERT` over `UNNEST` arrays whose `ON CONFLICT
//! (idempotency_key) DO UPDATE … WHERE` settles duplicate keys atomically across
//! instances, counting a retry (same type and payload) on the event that holds the
//! key. Attempt outcomes, with their attempt rows,
//! are group-committed by a task (`finisher.rs`) through the `hookbox_finish_attempts`
//! function of the migration, which locks the events first so that outcomes
//! recorded at once on two instances settle their event correctly.
//!
//! The claim side ([`ClaimStore`](super::ClaimStore)) is in `claim.rs`; the
//! `LISTEN` connection in `listen.rs`.

mod claim;
mod finisher;
mod instance;
mod intake;
mod listen;
mod overview;
mod pull;
mod rejected;
mod rows;
#[cfg(test)]
pub(crate) mod tests;
mod young;

use std::str::FromStr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::ConnectOptions as _;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, QueryBuilder, Row};
use tokio::sync::{Notify, mpsc, oneshot};
use uuid::Uuid;

use super::rows::RowExt;
use super::{
    EventSummary, Inserted, ListQuery, Page, PendingDelivery, Stats, Store, StoreError, Unfinished,
};
use crate::model::{
    Attempt, DeadLetter, DeliveryTask, EventView, Finish, NewEvent, Subscriber, Timestamp,
};
use crate::store::ReplayFilter;
use rows::{ATTEMPT_COLUMNS, ATTEMPT_ORDER, EVENT_COLUMNS, SUMMARY_COLUMNS, TASK_COLUMNS};

/// Connections per instance unless the caller says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// How long a request waits for a pooled connection before it fails (503).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL implementation of [`Store`] and [`ClaimStore`](super::ClaimStore).
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// One connection for the claim, whose plan is always the generic one (see
    /// [`claim::claim_sql`]).
    claims: PgPool,
    options: PgConnectOptions,
    /// This instance's id in `locked_by`.
    owner: Arc<str>,
    /// Whether `owner` is this instance's `INSTANCE_ID` itself (this process holds
    /// the id's lock), so that what a previous run held under it is ours to take back.
    owns_id: bool,
    /// Poked by the `LISTEN` task.
    announced: Arc<Notify>,
    /// Poked by the `LISTEN` task when another instance changed the subscribers.
    subscribers_changed: Arc<Notify>,
    /// Poked by the `LISTEN` task when an instance kept a destination's state.
    destinations_changed: Arc<Notify>,
    /// The group-commit task for outcomes.
    finishes: mpsc::Sender<finisher::Request>,
    /// Told when an ordered outcome was sent (`finisher::run`).
    hurry: Arc<Notify>,
    /// The group-commit task for intake.
    inserts: mpsc::Sender<intake::Request>,
    listening: Arc<OnceLock<()>>,
    /// The gauges' counts, computed at most once a second.
    stats: Arc<super::StatsCache>,
    /// Seal and open subscriber secrets ([`PgStore::with_keys`]).
    keys: crate::sealing::Keyring,
}

impl PgStore {
    /// Connects to `url` (`postgres://…`) with at most `max_connections` pooled
    /// connections and applies the migrations (instances starting at once take
    /// turns: sqlx holds an advisory lock while it migrates). The instance id is
    /// the host name.
    pub async fn open(url: &str, max_connections: u32) -> Result<Self, StoreError> {
        Self::open_as(url, max_connections, &crate::config::host_name()).await
    }

    /// [`Self::open`] for the instance `instance_id` (`INSTANCE_ID`): the claims it
    /// makes are held under that id (see `postgres/instance.rs`).
    pub async fn open_as(
        url: &str,
        max_connections: u32,
        instance_id: &str,
    ) -> Result<Self, StoreError> {
        // A statement's text can hold a whole batch (megabytes): never in the log.
        let options = PgConnectOptions::from_str(url)?
            .application_name("hookbox")
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A broken connection fails one query and is then dropped; a ping before
            // every query would cost a round trip each.
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("migrations/postgres").run(&pool).await?;
        let claims = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .connect_lazy_with(
                options
                    .clone()
                    .options([("plan_cache_mode", "force_generic_plan")]),
            );
        let (owner, owns_id) = instance::take(&options, instance_id).await?;
        let owner: Arc<str> = owner.into();
        let (finishes, rx) = mpsc::channel(4096);
        let hurry = Arc::new(Notify::new());
        tokio::spawn(finisher::run(
            pool.clone(),
            owner.clone(),
            rx,
            hurry.clone(),
            finisher::LINGER,
        ));
        let (inserts, rx) = mpsc::channel(intake::MAX_BATCH * 4);
        tokio::spawn(intake::run(pool.clone(), owner.clone(), Arc::default(), rx));
        Ok(Self {
            pool,
            claims,
            options,
            owner,
            owns_id,
            finishes,
            hurry,
            inserts,
            announced: Arc::new(Notify::new()),
            subscribers_changed: Arc::new(Notify::new()),
            destinations_changed: Arc::new(Notify::new()),
            listening: Arc::new(OnceLock::new()),
            stats: Arc::default(),
            keys: Default::default(),
        })
    }

    /// Seals subscriber secrets with `keys` from now on, and opens them with them
    /// (without, secrets are kept in the clear).
    pub fn with_keys(mut self, keys: crate::sealing::Keyring) -> Self {
        self.keys = keys;
        self
    }

    /// Starts the `LISTEN` task once (new work and subscriber changes).
    fn listen(&self) {
        self.listening.get_or_init(|| {
            tokio::spawn(listen::run(
                self.options.clone(),
                self.announced.clone(),
                self.subscribers_changed.clone(),
                self.destinations_changed.clone(),
            ));
        });
    }

    /// The pool (for tools and tests).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The counts behind [`Store::stats`], computed now.
    async fn count(&self) -> Result<Stats, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(claim::stats_sql()))
            .fetch_one(&self.pool)
            .await?;
        let count = |col: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get(col)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(Stats {
            pending_events: count("pending")?,
            dead_letters: count("dead")?,
            oldest_pending: row.opt_timestamp("oldest")?,
        })
    }

    /// The event of `row` (a row of [`EVENT_COLUMNS`]) with its deliveries.
    async fn view(
        &self,
        row: Option<sqlx::postgres::PgRow>,
    ) -> Result<Option<EventView>, StoreError> {
        let Some(row) = row else { return Ok(None) };
        let mut views = vec![rows::event_view(&row)?];
        rows::attach_deliveries(&self.pool, &mut views).await?;
        Ok(views.pop())
    }
}

/// `select` (the columns, or an `EXPLAIN` of them) from the page of events that
/// `query` asks for, newest first, one row more than the page.
fn list_query(select: &str, query: &ListQuery) -> QueryBuilder<Postgres> {
    let mut qb = QueryBuilder::<Postgres>::new(format!("{select} FROM events WHERE 1=1"));
    if let Some(status) = query.status {
        qb.push(" AND status = ").push_bind(status.as_str());
        if !status.is_terminal() {
            // Found from the unfinished deliveries (no index of events names
            // status): as many rows as the backlog, not the whole history.
            qb.push(" AND id = ANY (ARRAY(SELECT event_id FROM (")
                .push(claim::unfinished_sql())
                .push(") u))");
        }
    }
    if let Some(t) = &query.event_type {
        qb.push(" AND event_type = ").push_bind(t.as_str());
    }
    if let Some(source) = &query.source {
        qb.push(" AND source = ").push_bind(source.as_str());
    }
    if let Some(before) = query.before {
        qb.push(" AND id < ").push_bind(before);
    }
    qb.push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(query.limit) + 1);
    qb
}

/// Resets up to `limit` of the dead letters `filter` selects after `after` (in id
/// order) to `pending`, returning them. Read through the index of failed
/// deliveries (one event's: through its deliveries), the event's type and age
/// checked per row (`EXISTS`), so that a page costs its own rows; the first
/// version's `event_id IN (SELECT id FROM events …)` with `$n IS NULL OR …` for
/// every filter could pass over every event for each page.
fn replay_query(filter: &ReplayFilter, after: Option<Uuid>, limit: u32) -> QueryBuilder<Postgres> {
    let mut qb = QueryBuilder::<Postgres>::new(
        "UPDATE deliveries SET status = 'pending', retry_after = NULL, locked_until = NULL, \
                locked_by = NULL, updated_at = now() \
         WHERE id = ANY (ARRAY(SELECT d.id FROM deliveries d WHERE d.status = 'failed'",
    );
    if let Some(event) = filter.event {
        qb.push(" AND d.event_id = ").push_bind(event);
    }
    if let Some(after) = after {
        qb.push(" AND d.id > ").push_bind(after);
    }
    if let Some(handler) = &filter.handler {
        qb.push(" AND d.handler = ").push_bind(handler.clone());
    }
    if filter.event_type.is_some() || filter.before.is_some() {
        qb.push(" AND EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id");
        if let Some(t) = &filter.event_type {
            qb.push(" AND e.event_type = ").push_bind(t.clone());
        }
        if let Some(before) = filter.before {
            qb.push(" AND e.created_at < ").push_bind(before.0);
        }
        qb.push(")");
    }
    qb.push(" ORDER BY d.id LIMIT ")
        .push_bind(i64::from(limit))
        .push(")) RETURNING id, event_id, handler, ordering_value");
    qb
}

/// Deletes up to `$2` terminal events created before `$1`, oldest first, with
/// their deliveries and attempts (one statement, so all or none; migration 0012
/// dropped the cascading foreign keys). The ids come from the index of events by
/// creation time (migration 0024), which a batch reads only as far as its own rows
/// (and the unfinished events older than the cutoff, normally none); an array of them (`= ANY`) makes each delete look its rows up by
/// index (`IN (SELECT …)` was planned as a hash join over the whole table).
const PURGE: &str = "WITH doomed AS MATERIALIZED (
    SELECT id FROM events
    WHERE status IN ('completed', 'failed') AND created_at < $1
    ORDER BY created_at LIMIT $2
), deliveries_gone AS (
    DELETE FROM deliveries WHERE event_id = ANY (ARRAY(SELECT id FROM doomed))
), attempts_gone AS (
    DELETE FROM attempts WHERE event_id = ANY (ARRAY(SELECT id FROM doomed))
)
DELETE FROM events WHERE id = ANY (ARRAY(SELECT id FROM doomed))";

/// A source's terminal events last changed before $2, up to $3 ($1: the source),
/// with their deliveries and attempts (its `retention`).
const PURGE_SOURCE: &str = "WITH doomed AS MATERIALIZED (
    SELECT id FROM events
    WHERE source = $1 AND status IN ('completed', 'failed') AND updated_at < $2
    ORDER BY updated_at LIMIT $3
), deliveries_gone AS (
    DELETE FROM deliveries WHERE event_id = ANY (ARRAY(SELECT id FROM doomed))
), attempts_gone AS (
    DELETE FROM attempts WHERE event_id = ANY (ARRAY(SELECT id FROM doomed))
)
DELETE FROM events WHERE id = ANY (ARRAY(SELECT id FROM doomed))";

/// Erases an event with its deliveries and attempts (PostgreSQL keeps no foreign
/// keys on them: retention deletes them the same way) unless one of its
/// deliveries is being attempted; bind: id. Answers its key and source.
const ERASE: &str = "WITH gone AS (
    DELETE FROM events WHERE id = $1
      AND NOT EXISTS (SELECT 1 FROM deliveries WHERE event_id = $1 AND status = 'processing')
    RETURNING id, idempotency_key, source
), deliveries_gone AS (
    DELETE FROM deliveries WHERE event_id IN (SELECT id FROM gone)
), attempts_gone AS (
    DELETE FROM attempts WHERE event_id IN (SELECT id FROM gone)
)
SELECT idempotency_key, source FROM gone";

/// Inserts an event and its deliveries unless its key is taken. One statement, so
/// one atomic commit. When the key is taken by an event of the same type and
/// payload (a retry, answered 200), the same statement counts the receipt on that
/// event instead (`received_count + 1`, `last_received_at`); it answers the row
/// inserted or counted — none when the key is taken by another type or payload.
pub(super) const INSERT_EVENT: &str = "\
WITH e AS (
    INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, status,
                        created_at, updated_at, source, traceparent, tracestate,
                        delivery_count)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $11, $12, $13, cardinality($8::uuid[]))
    ON CONFLICT (idempotency_key) DO UPDATE
        SET received_count = events.received_count + 1,
            last_received_at = excluded.created_at
        WHERE events.event_type = excluded.event_type
          AND events.payload_sha256 = excluded.payload_sha256
    RETURNING id, idempotency_key, event_type, status, created_at, payload_sha256,
              received_count
), d AS (
    INSERT INTO deliveries (id, event_id, handler, ordering_value, created_at, updated_at)
    SELECT u.id, e.id, u.handler, u.ordering_value, e.created_at, e.created_at
    FROM e, unnest($8::uuid[], $9::text[], $10::text[]) WITH ORDINALITY
        AS u (id, handler, ordering_value, n)
    WHERE e.id = $1
    ORDER BY u.n
    RETURNING 1
)
SELECT e.*, (SELECT count(*) FROM d) AS deliveries FROM e";

/// A cursor (a name) up to its first NUL byte, which PostgreSQL's text cannot
/// hold: since no stored name has one, the names after the cut are the names
/// after the whole cursor.
fn before_nul(cursor: &str) -> &str {
    cursor.split('\0').next().unwrap_or_default()
}

/// The version of the stored subscribers (migration 0009).
const ROUTING_VERSION: &str = "SELECT version FROM hookbox_routing WHERE id = 1";

#[async_trait]
impl Store for PgStore {
    /// Group-committed with whatever other events are waiting (`intake.rs`).
    async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.inserts
            .send((event, reply))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        answer.await.map_err(|_| StoreError::WriterGone)?
    }

    async fn find_key(&self, key: &str) -> Result<Option<EventSummary>, StoreError> {
        let sql = format!("SELECT {SUMMARY_COLUMNS} FROM events WHERE idempotency_key = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(rows::summary).transpose()
    }

    async fn event(&self, id: Uuid) -> Result<Option<EventView>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        self.view(row).await
    }

    async fn event_by_key(&self, key: &str) -> Result<Option<EventView>, StoreError> {
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE idempotency_key = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        self.view(row).await
    }

    async fn list_events(&self, query: &ListQuery) -> Result<Page<EventView>, StoreError> {
        let mut qb = list_query(&format!("SELECT {EVENT_COLUMNS}"), query);
        let fetched = qb.build().fetch_all(&self.pool).await?;
        let mut items = fetched
            .iter()
            .map(rows::event_view)
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = super::cut_page(&mut items, query.limit, |x| x.id);
        rows::attach_deliveries(&self.pool, &mut items).await?;
        Ok(Page { items, next_cursor })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn settle(&self, event: Uuid) -> Result<(), StoreError> {
        sqlx::query("SELECT hookbox_settle($1)")
            .bind(vec![event])
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn unfinished(&self) -> Result<Unfinished, StoreError> {
        let deliveries = sqlx::query(
            "SELECT id, event_id, retry_after, handler, ordering_value FROM deliveries \
             WHERE status IN ('pending', 'processing') ORDER BY seq",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| {
            Ok(PendingDelivery {
                delivery: r.try_get("id")?,
                event: r.try_get("event_id")?,
                retry_after: r.opt_timestamp("retry_after")?,
                handler: r.try_get("handler")?,
                ordering_value: r.try_get("ordering_value")?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
        let unsettled = sqlx::query(
            "SELECT id FROM events e WHERE status IN ('pending', 'processing') \
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id \
                             AND d.status IN ('pending', 'processing')) ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(|r| r.try_get("id").map_err(StoreError::from))
        .collect::<Result<_, _>>()?;
        Ok(Unfinished {
            deliveries,
            unsettled,
        })
    }

    async fn delivery_task(&self, delivery: Uuid) -> Result<Option<DeliveryTask>, StoreError> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM deliveries d JOIN events e ON e.id = d.event_id \
             WHERE d.id = $1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(delivery)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(rows::delivery_task).transpose()
    }

    /// A claimed delivery is `processing` already; its event follows (the worker
    /// calls this only for attempts that take a while, as on SQLite).
    async fn start(&self, _delivery: Uuid, event: Uuid) -> Result<(), StoreError> {
        self.settle(event).await
    }

    /// Records the outcome if this instance still holds the delivery's lease (if it
    /// lost it, another instance has taken the delivery over and its attempt counts).
    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        finisher::submit(&self.finishes, &self.hurry, super::storable_finish(finish)).await
    }

    async fn list_attempts(&self, event_id: Uuid) -> Result<Vec<Attempt>, StoreError> {
        let sql =
            format!("SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE event_id = $1 {ATTEMPT_ORDER}");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(event_id)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::attempt)
            .collect()
    }

    async fn purge(&self, cutoff: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let done = sqlx::query(PURGE)
            .bind(cutoff.0)
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn purge_source(
        &self,
        source: &str,
        cutoff: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(PURGE_SOURCE)
            .bind(source)
            .bind(cutoff.0)
            .bind(i64::from(limit))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        self.stats.get(self.count()).await
    }

    async fn destination_states(&self) -> Result<Vec<(String, String)>, StoreError> {
        sqlx::query(super::sql::DESTINATION_STATES)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| Ok((r.text("name")?.to_owned(), r.text("state")?.to_owned())))
            .collect()
    }

    /// Kept and announced in one transaction: the `NOTIFY` on
    /// [`listen::DESTINATIONS`] reaches every instance's `LISTEN` once committed.
    async fn save_destination(&self, name: String, state: String) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(super::sql::SAVE_DESTINATION)
            .bind(name)
            .bind(state)
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(listen::DESTINATIONS)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn destination_backlog(&self) -> Result<Vec<super::DestinationBacklog>, StoreError> {
        sqlx::query(super::sql::DESTINATION_BACKLOG)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(super::destination_backlog_row)
            .collect()
    }

    async fn overview(
        &self,
        now: Timestamp,
    ) -> Result<crate::store::overview::Overview, StoreError> {
        overview::overview(&self.pool, now).await
    }

    async fn payload(&self, id: Uuid) -> Result<Option<String>, StoreError> {
        overview::payload(&self.pool, id).await
    }

    async fn dead_letters_where(
        &self,
        filter: &ReplayFilter,
        limit: u32,
        before: Option<Uuid>,
    ) -> Result<Page<DeadLetter>, StoreError> {
        overview::dead_letters(&self.pool, filter, limit, before).await
    }

    async fn count_dead_letters(&self, filter: &ReplayFilter) -> Result<u64, StoreError> {
        overview::count_dead_letters(&self.pool, filter).await
    }

    async fn replay_page(
        &self,
        filter: &ReplayFilter,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<PendingDelivery>, StoreError> {
        let mut tx = self.pool.begin().await?;
        let rows = replay_query(filter, after, limit)
            .build()
            .fetch_all(&mut *tx)
            .await?;
        let mut replayed = Vec::with_capacity(rows.len());
        for r in &rows {
            replayed.push(PendingDelivery {
                delivery: r.try_get("id")?,
                event: r.try_get("event_id")?,
                retry_after: None,
                handler: r.try_get("handler")?,
                ordering_value: r.try_get("ordering_value")?,
            });
        }
        let mut events: Vec<Uuid> = replayed.iter().map(|d| d.event).collect();
        events.sort_unstable();
        events.dedup();
        if !events.is_empty() {
            sqlx::query("SELECT hookbox_settle($1)")
                .bind(events)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        replayed.sort_by_key(|d| d.delivery);
        Ok(replayed)
    }

    async fn subscribers(&self) -> Result<Vec<Subscriber>, StoreError> {
        sqlx::query(crate::store::sql::SELECT_SUBSCRIBERS)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| rows::subscriber(row, &self.keys))
            .collect()
    }

    /// The subscribers and their version (migration 0009), read in one snapshot.
    async fn routing(&self) -> Result<(Vec<Subscriber>, u64), StoreError> {
        let (mut tx, version) = self.routing_snapshot().await?;
        let subscribers = sqlx::query(crate::store::sql::SELECT_SUBSCRIBERS)
            .fetch_all(&mut *tx)
            .await?
            .iter()
            .map(|row| rows::subscriber(row, &self.keys))
            .collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        Ok((subscribers, version))
    }

    async fn routing_version(&self) -> Result<u64, StoreError> {
        let version: i64 = sqlx::query_scalar(ROUTING_VERSION)
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(version).unwrap_or(0))
    }

    async fn subscriber(&self, name: &str) -> Result<Option<Subscriber>, StoreError> {
        if name.contains('\0') {
            return Ok(None); // no stored name has one (PostgreSQL's text cannot)
        }
        sqlx::query(crate::store::sql::SELECT_SUBSCRIBER)
            .bind(name)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| rows::subscriber(&row, &self.keys))
            .transpose()
    }

    async fn subscribers_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Subscriber>, StoreError> {
        sqlx::query(crate::store::sql::SUBSCRIBERS_PAGE_PG)
            .bind(before_nul(after.unwrap_or("")))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| rows::subscriber(row, &self.keys))
            .collect()
    }

    /// The subscriber and the version (migration 0009), read in one snapshot.
    async fn subscriber_routing(
        &self,
        name: &str,
    ) -> Result<(Option<Subscriber>, u64), StoreError> {
        if name.contains('\0') {
            return Ok((None, self.routing_version().await?));
        }
        let (mut tx, version) = self.routing_snapshot().await?;
        let subscriber = sqlx::query(crate::store::sql::SELECT_SUBSCRIBER)
            .bind(name)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| rows::subscriber(&row, &self.keys))
            .transpose()?;
        tx.commit().await?;
        Ok((subscriber, version))
    }

    fn subscriber_changes(&self) -> Option<Arc<Notify>> {
        self.listen();
        Some(self.subscribers_changed.clone())
    }

    fn destination_changes(&self) -> Option<Arc<Notify>> {
        self.listen();
        Some(self.destinations_changed.clone())
    }

    async fn insert_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError> {
        self.save_subscriber(subscriber, false).await
    }

    async fn update_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError> {
        self.save_subscriber(subscriber, true).await
    }

    async fn delete_subscriber(&self, name: &str) -> Result<bool, StoreError> {
        if name.contains('\0') {
            return Ok(false); // no stored name has one (PostgreSQL's text cannot)
        }
        let done = sqlx::query("DELETE FROM subscribers WHERE name = $1")
            .bind(name)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn erase(&self, id: Uuid) -> Result<crate::store::Erasure, StoreError> {
        let erased = sqlx::query(ERASE)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(crate::store::rows::erased)
            .transpose()?;
        let exists = erased.is_none()
            && sqlx::query(super::sql::EVENT_EXISTS)
                .bind(id)
                .fetch_optional(&self.pool)
                .await?
                .is_some();
        Ok(crate::store::erasure(erased, exists, Vec::new()))
    }
}

impl PgStore {
    /// Inserts (or, with `replace`, updates) a subscriber; false when the name is
    /// taken (insert) or unknown (update).
    /// A read-only snapshot of the subscribers and their version (migration 0009),
    /// so that what is read next is exactly what that version names.
    async fn routing_snapshot(
        &self,
    ) -> Result<(sqlx::Transaction<'_, sqlx::Postgres>, u64), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut *tx)
            .await?;
        let version: i64 = sqlx::query_scalar(ROUTING_VERSION)
            .fetch_one(&mut *tx)
            .await?;
        Ok((tx, u64::try_from(version).unwrap_or(0)))
    }

    async fn save_subscriber(&self, s: Subscriber, replace: bool) -> Result<bool, StoreError> {
        let (s, key_id) = super::sealed_subscriber(s, &self.keys);
        let (event_types, backoff) = super::subscriber_lists(&s)?;
        let sql = if replace {
            super::sql::UPDATE_SUBSCRIBER
        } else {
            super::sql::INSERT_SUBSCRIBER
        };
        let done = sqlx::query(sql)
            .bind(s.name)
            .bind(event_types)
            .bind(s.url)
            .bind(s.secret)
            .bind(s.ordering_key)
            .bind(s.max_attempts.and_then(|n| i32::try_from(n).ok()))
            .bind(backoff)
            .bind(s.active)
            .bind(s.created_at.0)
            .bind(s.updated_at.0)
            .bind(s.max_in_flight.and_then(|n| i32::try_from(n).ok()))
            .bind(s.rate_limit)
            .bind(s.disable_after)
            .bind(s.filter.as_ref().map(|f| f.to_string()))
            .bind(s.transform)
            .bind(key_id)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }
}
