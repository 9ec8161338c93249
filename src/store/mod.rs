//! Persistence behind one trait, [`Store`], with one implementation per backend.
//!
//! The SQLite store ([`sqlite::SqliteStore`]) has a single writer task that commits
//! whatever is waiting as one transaction (group commit) and answers each caller after
//! that commit, plus a read-only pool for reads.
//!
//! The PostgreSQL store ([`postgres::PgStore`], feature `postgres`) lets several
//! instances share one database: it also implements [`ClaimStore`], through which
//! workers claim due deliveries under a lease instead of reading an in-memory queue.

#[cfg(test)]
mod contract;
pub mod overview;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod pull;
pub mod rejected;
mod rows;
pub mod sqlite;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use crate::model::{
    Attempt, DeadLetter, DeliveryTask, EventView, Finish, NewEvent, Status, Subscriber, Timestamp,
};

/// What can go wrong in a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be applied.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The writer task has stopped (the process is shutting down).
    #[error("the store's writer has stopped")]
    WriterGone,
    /// The batch this write was committed with failed: the batch's error, which
    /// every write of the batch shares.
    #[error("batched write failed: {0}")]
    Batch(#[source] Arc<StoreError>),
    /// A stored value that does not parse (a corrupt or foreign row).
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A subscriber's stored secret that no configured key opens (SPEC §14).
    #[error("the stored secret of subscriber {subscriber:?} cannot be read: {reason}")]
    Sealed {
        /// The subscriber.
        subscriber: String,
        /// Why (which key it needs; never the secret).
        reason: crate::sealing::OpenError,
    },
    /// The subscribers changed since the event was routed (PostgreSQL): route it
    /// again with the stored subscribers and retry. Nothing was stored.
    #[error("the subscribers changed since the event was routed")]
    StaleRouting,
    /// The SQLite database's folder (or file) may not be written by this process:
    /// typically a bind-mounted folder owned by another user.
    #[error(
        "cannot write in {} (DB_PATH's folder, owned by uid {owner}; hookbox runs as uid {uid}): run `chown -R {uid} {}` (the container image runs as uid 10001), or set DB_PATH to a folder uid {uid} may write",
        folder.display(),
        folder.display()
    )]
    NotWritable {
        /// The folder (or file) refused.
        folder: std::path::PathBuf,
        /// Its owner.
        owner: u32,
        /// This process's effective uid.
        uid: u32,
    },
    /// Another process already serves this SQLite file (it holds its lock file).
    #[error(
        "{} is already in use by another hookbox process (it holds {}); stop that one first, or give this one another database file",
        database.display(),
        lock.display()
    )]
    InUse {
        /// The database file.
        database: std::path::PathBuf,
        /// The lock file next to it.
        lock: std::path::PathBuf,
    },
}

/// The short form of an event that intake answers with.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct EventSummary {
    /// Event id.
    pub id: Uuid,
    /// Its idempotency key.
    pub idempotency_key: String,
    /// Its type.
    pub event_type: String,
    /// Current status.
    pub status: Status,
    /// Acceptance time.
    pub created_at: Timestamp,
    /// Hex SHA-256 of the canonical payload (not shown).
    #[serde(skip)]
    pub payload_sha256: String,
    /// Requests that carried it so far, this one included (not shown here: `GET
    /// /webhooks/{id}` shows it).
    #[serde(skip)]
    pub received_count: u32,
}

impl EventSummary {
    /// The summary of `event` as its insert stores it: `pending`, received once.
    pub(crate) fn fresh(event: &NewEvent) -> Self {
        Self {
            id: event.id,
            idempotency_key: event.idempotency_key.clone(),
            event_type: event.event_type.clone(),
            status: Status::Pending,
            created_at: event.created_at,
            payload_sha256: event.payload_sha256.clone(),
            received_count: 1,
        }
    }
}

/// The result of [`Store::insert_event`].
#[derive(Debug, Clone)]
pub struct Inserted {
    /// The stored event: the new one, or the one that already had this key.
    pub event: EventSummary,
    /// False when the key already existed (nothing was inserted).
    pub created: bool,
}

/// Filters and page position for [`Store::list_events`].
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    /// Only events with this status.
    pub status: Option<Status>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only events from this source (`POST /ingest/{name}`).
    pub source: Option<String>,
    /// Page size (1..=500).
    pub limit: u32,
    /// Only events older than this id (the previous page's `next_cursor`).
    pub before: Option<Uuid>,
}

/// One page of results, newest first.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass as `cursor` to get the next page; `null` on the last one.
    pub next_cursor: Option<String>,
}

/// SQL that both backends run as it is (`$N` placeholders work in SQLite too).
pub(crate) mod sql {
    /// The numbers behind the gauges: `pending`, `dead`, `oldest` (SQLite;
    /// PostgreSQL reads them from the deliveries, see its `stats_sql`).
    pub(crate) const STATS: &str = "SELECT \
        (SELECT COUNT(*) FROM events WHERE status IN ('pending', 'processing')) AS pending, \
        (SELECT COUNT(*) FROM deliveries WHERE status = 'failed') AS dead, \
        (SELECT MIN(created_at) FROM events WHERE status IN ('pending', 'processing')) AS oldest";

    /// Inserts a subscriber unless its name is taken; binds: name, event_types,
    /// url, secret, ordering_key, max_attempts, backoff, active, created_at,
    /// updated_at, max_in_flight, rate_limit, disable_after, filter, transform,
    /// secret_key_id (the secret as [`crate::sealing::Keyring::seal`] made it).
    pub(crate) const INSERT_SUBSCRIBER: &str = "INSERT INTO subscribers (name, event_types, \
        url, secret, ordering_key, max_attempts, backoff, active, created_at, updated_at, \
        max_in_flight, rate_limit, disable_after, filter, transform, secret_key_id) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
        ON CONFLICT (name) DO NOTHING";

    /// Replaces a subscriber; the same binds as [`INSERT_SUBSCRIBER`] ($9 unused).
    pub(crate) const UPDATE_SUBSCRIBER: &str = "UPDATE subscribers SET event_types = $2, \
        url = $3, secret = $4, ordering_key = $5, max_attempts = $6, backoff = $7, \
        active = $8, updated_at = $10, max_in_flight = $11, rate_limit = $12, \
        disable_after = $13, filter = $14, transform = $15, secret_key_id = $16 \
        WHERE name = $1";

    /// Unfinished deliveries per handler, with the oldest's creation time.
    pub(crate) const DESTINATION_BACKLOG: &str = "SELECT handler, CAST(COUNT(*) AS INTEGER) AS n, \
        MIN(created_at) AS oldest FROM deliveries \
        WHERE status IN ('pending', 'processing') GROUP BY handler";

    /// Every destination's kept state.
    pub(crate) const DESTINATION_STATES: &str = "SELECT name, state FROM destinations";

    /// Keeps a destination's state; binds: name, state.
    pub(crate) const SAVE_DESTINATION: &str = "INSERT INTO destinations (name, state) \
        VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET state = excluded.state";

    /// Erases an event (on SQLite its deliveries and attempts go with it, by
    /// cascade; PostgreSQL has its own statement) unless one of its deliveries is
    /// being attempted; bind: id. Answers its key and source.
    pub(crate) const ERASE_EVENT: &str = "DELETE FROM events WHERE id = $1 \
        AND NOT EXISTS (SELECT 1 FROM deliveries WHERE event_id = $1 AND status = 'processing') \
        RETURNING idempotency_key, source";

    /// Whether an event exists; bind: id.
    pub(crate) const EVENT_EXISTS: &str = "SELECT 1 FROM events WHERE id = $1";

    /// The columns of a subscriber row, as [`crate::store::rows`] decodes them.
    macro_rules! subscriber_columns {
        () => {
            "SELECT name, event_types, url, secret, ordering_key, max_attempts, backoff, \
             active, created_at, updated_at, max_in_flight, rate_limit, disable_after, \
             filter, transform, secret_key_id FROM subscribers"
        };
    }

    /// Every subscriber, by name.
    pub(crate) const SELECT_SUBSCRIBERS: &str = concat!(subscriber_columns!(), " ORDER BY name");

    /// One subscriber; bind: name.
    pub(crate) const SELECT_SUBSCRIBER: &str = concat!(subscriber_columns!(), " WHERE name = $1");

    /// A page of subscribers by name in byte order (SQLite's own), after a name
    /// (`''` for the first page); binds: after, limit.
    pub(crate) const SUBSCRIBERS_PAGE: &str = concat!(
        subscriber_columns!(),
        " WHERE name > $1 ORDER BY name LIMIT $2"
    );

    /// [`SUBSCRIBERS_PAGE`] on PostgreSQL: byte order whatever the database's
    /// collation (the index of migration 0023 serves it).
    pub(crate) const SUBSCRIBERS_PAGE_PG: &str = concat!(
        subscriber_columns!(),
        " WHERE name COLLATE \"C\" > $1 ORDER BY name COLLATE \"C\" LIMIT $2"
    );
}

/// What [`Store::erase`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Erasure {
    /// Gone: its idempotency key and source (to erase the copies elsewhere).
    Erased {
        /// Its idempotency key.
        idempotency_key: String,
        /// The source it came from.
        source: Option<String>,
        /// Its deliveries that were fresh work (never tried: handler and ordering
        /// value), which the pending backlog counted (SQLite; empty on
        /// PostgreSQL, whose backlog is counted from the table).
        fresh: Vec<(String, Option<String>)>,
    },
    /// A delivery of it is being attempted: nothing was erased.
    InProgress,
    /// No such event.
    NotFound,
}

/// Decodes [`sql::ERASE_EVENT`]'s answer, or tells in-progress from unknown;
/// `fresh` as [`Erasure::Erased`] has it.
pub(crate) fn erasure(
    erased: Option<(String, Option<String>)>,
    exists: bool,
    fresh: Vec<(String, Option<String>)>,
) -> Erasure {
    match (erased, exists) {
        (Some((idempotency_key, source)), _) => Erasure::Erased {
            idempotency_key,
            source,
            fresh,
        },
        (None, true) => Erasure::InProgress,
        (None, false) => Erasure::NotFound,
    }
}

/// One handler's unfinished deliveries ([`Store::destination_backlog`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DestinationBacklog {
    /// The handler.
    pub handler: String,
    /// Deliveries `pending` or `processing`.
    pub pending: u64,
    /// When the oldest of them was created.
    pub oldest: Option<Timestamp>,
}

/// Decodes the rows of [`sql::DESTINATION_BACKLOG`].
pub(in crate::store) fn destination_backlog_row(
    row: &impl rows::RowExt,
) -> Result<DestinationBacklog, StoreError> {
    Ok(DestinationBacklog {
        handler: row.text("handler")?.to_owned(),
        pending: u64::try_from(row.int("n")?).unwrap_or(0),
        oldest: row.opt_timestamp("oldest")?,
    })
}

/// How long [`Store::stats`] answers with the counts it last computed.
pub const STATS_MAX_AGE: Duration = Duration::from_secs(1);

/// The counts [`Store::stats`] last computed, reused for [`STATS_MAX_AGE`]: they
/// scan the tables, and `/metrics` may be scraped any number of times a second by
/// any number of scrapers at once. Concurrent callers wait for one computation.
#[derive(Debug, Default)]
pub(crate) struct StatsCache(tokio::sync::Mutex<Option<(tokio::time::Instant, Stats)>>);

impl StatsCache {
    /// The cached counts if younger than [`STATS_MAX_AGE`], else `compute`'s.
    pub(crate) async fn get<F>(&self, compute: F) -> Result<Stats, StoreError>
    where
        F: std::future::Future<Output = Result<Stats, StoreError>>,
    {
        let mut cached = self.0.lock().await;
        if let Some((at, stats)) = &*cached {
            if at.elapsed() < STATS_MAX_AGE {
                return Ok(stats.clone());
            }
        }
        let started = tokio::time::Instant::now();
        let stats = compute.await?;
        *cached = Some((started, stats.clone()));
        Ok(stats)
    }
}

/// Text as both stores keep it: PostgreSQL refuses NUL in text, so every NUL
/// becomes U+FFFD (as undecodable bytes of a handler's output already do).
pub(crate) fn storable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}").into()
    } else {
        text.into()
    }
}

/// An outcome as both stores record it: its errors and the answer's body (a
/// receiver's answer or a program's stderr, any bytes) made [`storable`].
pub(crate) fn storable_finish(mut finish: Finish) -> Finish {
    let clean = |text: &mut Option<String>| {
        if let Some(std::borrow::Cow::Owned(clean)) = text.as_deref().map(storable) {
            *text = Some(clean);
        }
    };
    clean(&mut finish.last_error);
    if let Some(attempt) = &mut finish.attempt {
        clean(&mut attempt.error);
        clean(&mut attempt.response_body);
        clean(&mut attempt.request);
    }
    finish
}

/// A subscriber as both stores keep it: its secret sealed with `keys` (kept as it
/// is without a key), and the sealing key's id.
pub(crate) fn sealed_subscriber(
    mut s: crate::model::Subscriber,
    keys: &crate::sealing::Keyring,
) -> (crate::model::Subscriber, Option<String>) {
    let Some(secret) = s.secret.take() else {
        return (s, None);
    };
    let sealed = keys.seal(&s.name, &secret);
    s.secret = Some(sealed.text);
    (s, sealed.key_id)
}

/// A subscriber's `event_types` and `backoff` as the JSON text both stores keep.
pub(crate) fn subscriber_lists(
    s: &crate::model::Subscriber,
) -> Result<(String, Option<String>), StoreError> {
    let json =
        |v: &Vec<String>| serde_json::to_string(v).map_err(|e| StoreError::Corrupt(e.to_string()));
    Ok((
        json(&s.event_types)?,
        s.backoff.as_ref().map(json).transpose()?,
    ))
}

/// Cuts a page fetched with `limit + 1` rows down to `limit`: the extra row only
/// says that there is more, and the last kept row's id is the next cursor.
pub(crate) fn cut_page<T>(
    items: &mut Vec<T>,
    limit: u32,
    id: impl Fn(&T) -> Uuid,
) -> Option<String> {
    let limit = limit as usize;
    if items.len() <= limit {
        return None;
    }
    items.truncate(limit);
    items.last().map(|x| id(x).to_string())
}

/// Everything hookbox persists.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Durably stores a new event with its deliveries, or returns the event that
    /// already holds its idempotency key. Returns only after the commit.
    ///
    /// When the event holding the key has the same `event_type` and
    /// `payload_sha256` (a retry, which intake answers 200), the same commit adds
    /// one to its `received_count` and sets its `last_received_at` to the new
    /// event's `created_at`; the returned summary has the new count. An event of
    /// another type or payload (a 422) is left as it was.
    async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError>;

    /// The event with this idempotency key, without its deliveries.
    async fn find_key(&self, key: &str) -> Result<Option<EventSummary>, StoreError>;

    /// The event holding `key`, answered from memory when the key was retried
    /// recently — exactly as the table holds it now (its current status) — or
    /// `None`: the key is not known here (never used, forgotten, or this store
    /// keeps no such memory), and the table must be asked. No I/O.
    ///
    /// The SQLite store keeps a bounded cache of recent keys that its one writer
    /// fills and invalidates in commit order; the PostgreSQL store keeps none
    /// (another instance may change an event's status), so it always says `None`.
    fn recent_key(&self, _key: &str) -> Option<EventSummary> {
        None
    }

    /// Counts one more request that carried `event` — a retry answered from
    /// [`Store::recent_key`]: `received_count + 1` and `last_received_at` = `at`
    /// (if later). Returns once the count is queued, not committed: it is
    /// committed with the next write batch. Only a store that answers
    /// `recent_key` is asked; the others refuse.
    async fn count_retry(&self, _event: Uuid, _at: Timestamp) -> Result<(), StoreError> {
        Err(StoreError::Corrupt(
            "count_retry on a store that answers no recent keys".into(),
        ))
    }

    /// The event with its deliveries.
    async fn event(&self, id: Uuid) -> Result<Option<EventView>, StoreError>;

    /// The event with this idempotency key, with its deliveries.
    async fn event_by_key(&self, key: &str) -> Result<Option<EventView>, StoreError>;

    /// A page of events, newest first.
    async fn list_events(&self, query: &ListQuery) -> Result<Page<EventView>, StoreError>;

    /// Succeeds when the database answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Derives the event's status, attempts and last error from its deliveries (an
    /// event without deliveries becomes `completed`). It may return before the
    /// change is committed: a lost settle is redone by recovery, as the event is
    /// still unfinished.
    async fn settle(&self, event: Uuid) -> Result<(), StoreError>;

    /// Everything not finished, for startup recovery.
    async fn unfinished(&self) -> Result<Unfinished, StoreError>;

    /// What a worker needs to run one attempt of a delivery.
    async fn delivery_task(&self, delivery: Uuid) -> Result<Option<DeliveryTask>, StoreError>;

    /// Marks a pending delivery `processing` (not awaited: recovery treats both alike).
    async fn start(&self, delivery: Uuid, event: Uuid) -> Result<(), StoreError>;

    /// Records an attempt's outcome, its row in the attempt history
    /// ([`Finish::attempt`]) and the event's new status, in one commit that has
    /// happened on return. An attempt already on record (the same handler and
    /// number, recorded before a crash) is kept as it was.
    async fn finish(&self, finish: Finish) -> Result<(), StoreError>;

    /// Every attempt of every delivery of an event, oldest first (empty for an
    /// unknown event, and for an event nothing was tried on yet).
    async fn list_attempts(&self, event_id: Uuid) -> Result<Vec<Attempt>, StoreError>;

    /// Deletes up to `limit` terminal events created before `cutoff` (with their
    /// deliveries and attempts); returns how many.
    async fn purge(&self, cutoff: Timestamp, limit: u32) -> Result<u64, StoreError>;

    /// Counts for the gauges of `/metrics` (docs/api.md), computed at most once per
    /// [`STATS_MAX_AGE`] (callers in between get the last counts).
    async fn stats(&self) -> Result<Stats, StoreError>;

    /// Every destination's kept state: `(name, JSON text)`.
    async fn destination_states(&self) -> Result<Vec<(String, String)>, StoreError>;

    /// Keeps a destination's state (JSON text), replacing what was kept.
    async fn save_destination(&self, name: String, state: String) -> Result<(), StoreError>;

    /// Unfinished deliveries per handler: how many, and when the oldest was
    /// created (`GET /destinations`).
    async fn destination_backlog(&self) -> Result<Vec<DestinationBacklog>, StoreError>;

    /// What the console's overview shows: events by status, deliveries per
    /// handler, and the per-minute series of the hour that ends with `now`'s minute
    /// ([`overview`] says what each counts).
    async fn overview(&self, now: Timestamp) -> Result<overview::Overview, StoreError>;

    /// An event's payload, as stored (canonical JSON text).
    async fn payload(&self, id: Uuid) -> Result<Option<String>, StoreError>;

    /// A page of the dead letters that `filter` selects (those [`Store::replay`]
    /// with it would reset), newest first; `before` is the previous page's last
    /// delivery id.
    async fn dead_letters_where(
        &self,
        filter: &ReplayFilter,
        limit: u32,
        before: Option<Uuid>,
    ) -> Result<Page<DeadLetter>, StoreError>;

    /// How many dead letters `filter` selects.
    async fn count_dead_letters(&self, filter: &ReplayFilter) -> Result<u64, StoreError>;

    /// A page of dead letters (failed deliveries), newest first; `before` is the
    /// previous page's last delivery id: [`Store::dead_letters_where`] without a
    /// filter.
    async fn dead_letters(
        &self,
        limit: u32,
        before: Option<Uuid>,
    ) -> Result<Page<DeadLetter>, StoreError> {
        self.dead_letters_where(&ReplayFilter::default(), limit, before)
            .await
    }

    /// Resets the failed deliveries that `filter` selects to `pending` (attempts and
    /// last error kept) and re-derives their events' status, in one transaction.
    /// Returns the deliveries to run.
    async fn replay(&self, filter: ReplayFilter) -> Result<Vec<PendingDelivery>, StoreError> {
        self.replay_page(&filter, None, u32::MAX).await
    }

    /// [`Store::replay`] of one page: at most `limit` of the selected deliveries
    /// whose id is after `after`, in id order, in one transaction — so a replay of
    /// every dead letter is many short transactions, not one long one.
    async fn replay_page(
        &self,
        filter: &ReplayFilter,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<PendingDelivery>, StoreError>;

    /// Every subscriber.
    async fn subscribers(&self) -> Result<Vec<Subscriber>, StoreError>;

    /// Every subscriber, with the version of the stored subscribers they are
    /// (what [`NewEvent::routing_version`] names). The version only changes on a
    /// database that several instances share; one instance's store answers 0.
    async fn routing(&self) -> Result<(Vec<Subscriber>, u64), StoreError> {
        Ok((self.subscribers().await?, 0))
    }

    /// The subscriber of this name, if there is one.
    async fn subscriber(&self, name: &str) -> Result<Option<Subscriber>, StoreError>;

    /// At most `limit` subscribers whose names sort after `after` (`None`: from the
    /// first), by name — a page of `GET /subscribers` without reading the rest.
    async fn subscribers_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Subscriber>, StoreError>;

    /// The version of the stored subscribers alone (see [`Store::routing`]).
    async fn routing_version(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// The subscriber of this name (if any) with the version of the stored
    /// subscribers it is part of, read together: what one change to the routing
    /// table needs ([`crate::registry::live::LiveRegistry::apply`]). One instance's
    /// store answers version 0, as [`Store::routing`] does.
    async fn subscriber_routing(
        &self,
        name: &str,
    ) -> Result<(Option<Subscriber>, u64), StoreError> {
        Ok((self.subscriber(name).await?, 0))
    }

    /// Notified when another instance may have changed the subscribers (a
    /// `NOTIFY` on PostgreSQL); `None` where no other instance can.
    fn subscriber_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Notified when an instance kept a destination's state
    /// ([`Store::save_destination`]; a `NOTIFY` on PostgreSQL); `None` where no
    /// other instance can.
    fn destination_changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Stores a new subscriber; false when the name is taken.
    async fn insert_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError>;

    /// Replaces a subscriber; false when there is none of that name.
    async fn update_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError>;

    /// Deletes a subscriber; false when there is none of that name.
    async fn delete_subscriber(&self, name: &str) -> Result<bool, StoreError>;

    /// Erases an event: payload, deliveries, attempts (and on SQLite its recent
    /// key) — unless an attempt of it is running.
    async fn erase(&self, id: Uuid) -> Result<Erasure, StoreError>;

    /// Deletes up to `limit` of `source`'s terminal events that became terminal
    /// (their last change) before `cutoff`, with their deliveries and attempts: a
    /// source's own `retention`. How many.
    async fn purge_source(
        &self,
        source: &str,
        cutoff: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError>;
}

/// Which dead letters to replay (all given filters apply).
#[derive(Debug, Clone, Default)]
pub struct ReplayFilter {
    /// Only this event's.
    pub event: Option<Uuid>,
    /// Only events of this type.
    pub event_type: Option<String>,
    /// Only this handler's.
    pub handler: Option<String>,
    /// Only events created before this time.
    pub before: Option<Timestamp>,
}

/// Work left over from a previous run (docs/states.md: loaded before `/ready`).
#[derive(Debug, Clone, Default)]
pub struct Unfinished {
    /// Every `pending` or `processing` delivery, oldest first.
    pub deliveries: Vec<PendingDelivery>,
    /// Unfinished events none of whose deliveries is unfinished (not yet settled).
    pub unsettled: Vec<Uuid>,
}

/// An unfinished delivery as recovery sees it.
#[derive(Debug, Clone)]
pub struct PendingDelivery {
    /// The delivery.
    pub delivery: Uuid,
    /// Its event.
    pub event: Uuid,
    /// When it is due (a retry waiting), if not now.
    pub retry_after: Option<Timestamp>,
    /// Its handler.
    pub handler: String,
    /// Its ordering key value, if any.
    pub ordering_value: Option<String>,
}

/// The numbers behind the gauges.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Events `pending` or `processing`.
    pub pending_events: u64,
    /// Deliveries `failed`.
    pub dead_letters: u64,
    /// Creation time of the oldest unfinished event.
    pub oldest_pending: Option<Timestamp>,
}

/// How a database is the queue: read by one instance in order of due work
/// (SQLite), or claimed by several sharing it (PostgreSQL). A store opened is one
/// or the other; processing is built for it (`crate::inbox`).
#[derive(Clone)]
pub enum WorkStore {
    /// One instance serves the database (SQLite).
    Due(Arc<dyn DueStore>),
    /// Several instances share the database (PostgreSQL).
    Claims(Arc<dyn ClaimStore>),
}

/// The due-work side of a database that one instance serves (SQLite): the
/// database is the queue, and memory holds only a bounded window of it
/// (the window of due work, `processing/window.rs`). Unfinished deliveries are
/// *fresh* (`retry_after` unset: never tried, replayed, or interrupted while
/// `processing`) or *retries* (`retry_after` set); both are read in order through
/// indexes on due work (migration 0008), skipping any delivery that an older
/// unfinished one of its handler and ordering value holds back.
#[async_trait]
pub trait DueStore: Send + Sync + 'static {
    /// Fresh deliveries per handler and ordering value (`None`: those without
    /// one), each count handed to `each` as it is read (one per key: not
    /// gathered in memory): the pending backlog at startup.
    async fn count_fresh(
        &self,
        each: &mut (dyn for<'k> FnMut(&'k str, Option<&'k str>, u64) + Send),
    ) -> Result<(), StoreError>;

    /// Unfinished deliveries with a `retry_after` (retries, due or waiting): with
    /// the fresh ones, every pending delivery (`MAX_BACKLOG`), at startup.
    async fn count_retries(&self) -> Result<u64, StoreError>;

    /// The ids of up to `limit` fresh deliveries above `after`, oldest first, each
    /// with its handler; none of the handlers in `skip` (destinations that hold
    /// enough already).
    async fn fresh_ids_after(
        &self,
        after: Uuid,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<(Uuid, String)>, StoreError>;

    /// The highest delivery id stored (any status), if any: how far a read of
    /// fresh work that comes back short has passed.
    async fn last_delivery_id(&self) -> Result<Option<Uuid>, StoreError>;

    /// The tasks of the deliveries among `ids` that are still unfinished, in id
    /// order, stopping early once their payloads pass `budget` bytes.
    async fn tasks_of(&self, ids: &[Uuid], budget: usize) -> Result<Vec<DeliveryTask>, StoreError>;

    /// Up to `limit` retries due at `now`, the longest due first, stopping early once
    /// their payloads pass `budget` bytes; none of the handlers in `skip`.
    async fn due_retries(
        &self,
        now: Timestamp,
        limit: u32,
        budget: usize,
        skip: &[String],
    ) -> Result<Vec<DeliveryTask>, StoreError>;

    /// When the first retry not yet due at `now` falls due.
    async fn next_retry(&self, now: Timestamp) -> Result<Option<Timestamp>, StoreError>;

    /// The oldest unfinished delivery of `handler` and ordering `value`: its id, its
    /// event and its `retry_after`.
    async fn head_of_key(
        &self,
        handler: &str,
        value: &str,
    ) -> Result<Option<(Uuid, Uuid, Option<Timestamp>)>, StoreError>;

    /// True when an unfinished delivery of `handler` and `value` older than
    /// `delivery` exists.
    async fn older_unfinished(
        &self,
        handler: &str,
        value: &str,
        delivery: Uuid,
    ) -> Result<bool, StoreError>;

    /// Unfinished events none of whose deliveries is unfinished (their status
    /// update was lost), to settle.
    async fn unsettled(&self) -> Result<Vec<Uuid>, StoreError>;
}

/// The claim side of a database shared by several instances (PostgreSQL): the
/// database is the queue. Each delivery a worker runs is first *claimed*: marked
/// `processing` with a lease (`locked_until`, `locked_by` = [`ClaimStore::owner`])
/// that the instance renews while it runs; once a lease expires, any instance may
/// claim the delivery again.
#[async_trait]
pub trait ClaimStore: Send + Sync + 'static {
    /// This instance's id, written to `locked_by` on the deliveries it claims.
    fn owner(&self) -> &str;

    /// Claims up to `limit` due deliveries, oldest first: `pending` ones whose
    /// `retry_after` has passed and `processing` ones whose lease expired, skipping
    /// any that another instance is claiming and any with an older unfinished
    /// delivery of the same handler and ordering value.
    async fn claim(
        &self,
        limit: u32,
        lease: Duration,
        skip: &[String],
    ) -> Result<Claimed, StoreError>;

    /// Extends the lease of those of `held` that this instance still holds (still
    /// `processing` and claimed by it); returns those.
    async fn renew(&self, held: &[Uuid], lease: Duration) -> Result<Vec<Uuid>, StoreError>;

    /// Gives back every delivery this instance holds (`pending` again, unlocked),
    /// so that other instances take them at once instead of after the lease.
    async fn release(&self) -> Result<u64, StoreError>;

    /// At startup: takes back at once what a previous run of this instance (the
    /// same `INSTANCE_ID`) still held when it died, instead of waiting for the
    /// lease. Does nothing when another live process uses the same id.
    async fn reclaim(&self) -> Result<u64, StoreError>;

    /// Deliveries due or running, on every instance: `pending` ones whose
    /// `retry_after` has passed (or that have none) and `processing` ones. Retries
    /// still waiting are not counted.
    async fn backlog(&self) -> Result<u64, StoreError>;

    /// Retries waiting for their `retry_after`, on every instance: with
    /// [`ClaimStore::backlog`], every pending delivery (`MAX_BACKLOG`, SPEC §1).
    async fn waiting_retries(&self) -> Result<u64, StoreError>;

    /// How many instances hold their `INSTANCE_ID` on this database now (at
    /// least 1): they share every destination's limits.
    async fn instances(&self) -> Result<u32, StoreError>;

    /// [`ClaimStore::backlog`] of these handlers only (destinations that hold
    /// their work back: it is not due).
    async fn backlog_of(&self, handlers: &[String]) -> Result<u64, StoreError>;

    /// Deliveries never tried that wait behind an older unfinished delivery of
    /// their handler and ordering value (strict ordering: not due work), except
    /// those of `except` (destinations whose whole backlog is held back already).
    async fn behind_keys(&self, except: &[String]) -> Result<u64, StoreError>;

    /// Tells every instance's claimers that new work is due (`NOTIFY`).
    async fn announce(&self) -> Result<(), StoreError>;

    /// Notified whenever any instance announces work, and after the listening
    /// connection is re-established (announcements may have been missed).
    fn announcements(&self) -> Arc<tokio::sync::Notify>;
}

/// The result of [`ClaimStore::claim`].
#[derive(Debug, Default)]
pub struct Claimed {
    /// What was claimed, ready to run.
    pub tasks: Vec<DeliveryTask>,
    /// When fewer than asked were claimed: how long until the next waiting retry is
    /// due, if one is waiting.
    pub next_due: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn concurrent_stats_callers_share_one_computation_a_second() {
        let cache = std::sync::Arc::new(StatsCache::default());
        let computed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let ask = || {
            let (cache, computed) = (cache.clone(), computed.clone());
            tokio::spawn(async move {
                cache
                    .get(async {
                        let n = computed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(Stats {
                            pending_events: n,
                            ..Stats::default()
                        })
                    })
                    .await
                    .expect("stats")
                    .pending_events
            })
        };
        let answers: Vec<_> = (0..20).map(|_| ask()).collect();
        for answer in answers {
            assert_eq!(answer.await.expect("task"), 0);
        }
        assert_eq!(ask().await.expect("task"), 0);
        tokio::time::sleep(STATS_MAX_AGE).await;
        assert_eq!(ask().await.expect("task"), 1);
        assert_eq!(computed.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn nul_bytes_are_replaced_and_clean_text_is_not_copied() {
        assert_eq!(storable("a\0b\0"), "a\u{fffd}b\u{fffd}");
        assert!(matches!(
            storable("clean"),
            std::borrow::Cow::Borrowed("clean")
        ));
    }
}
