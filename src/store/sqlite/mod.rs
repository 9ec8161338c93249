//! The SQLite store: one writer task (group commit), a read-only pool for reads.
//!
//! PRAGMAs are set on [`SqliteConnectOptions`], so every connection gets them:
//! WAL, `synchronous` FULL (default) or NORMAL, `busy_timeout`, `foreign_keys`.
//! With group commit one fsync covers a whole batch, which is why FULL costs little.
//!
//! One process per file: [`SqliteStore::open`] takes an exclusive `flock` on
//! `<file>.lock` next to the database and holds it while the writer task runs, so a
//! second hookbox on the same file (which would load the same unfinished deliveries
//! and run each of them twice) stops with [`StoreError::InUse`]. A separate lock file,
//! because SQLite's own locks on the database are POSIX locks, which closing any
//! descriptor of the file would drop; the kernel releases the `flock` when the
//! process ends, however it ends.

mod checkpoint;
mod checks;
mod due;
mod overview;
mod pull;
mod recent;
mod rejected;
mod rejected_writes;
mod rows;
mod script;
mod slow_round;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, QueryBuilder, Sqlite};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use super::rows::RowExt;
use super::{
    EventSummary, Inserted, ListQuery, Page, PendingDelivery, ReplayFilter, Stats, Store,
    StoreError, Unfinished,
};
use crate::config::SqliteSynchronous as Sync;
use crate::model::{
    Attempt, DeadLetter, DeliveryTask, EventView, Finish, NewEvent, Subscriber, Timestamp,
};
pub use recent::RECENT_KEYS;
use recent::RecentKeys;
use rows::{ATTEMPT_COLUMNS, ATTEMPT_ORDER, EVENT_COLUMNS, SUMMARY_COLUMNS};
use writer::Write;

/// Compiled statements the write connection keeps (see [`SqliteStore::open`]):
/// every group-commit script shape a busy instance uses, so that none is compiled
/// again. A batch is one script whose statements (inserts, outcomes, attempts,
/// settles) are all padded to one of 16 row counts, so its text is that count and
/// which parts it has. With 48 kept scripts they were evicted and compiled again,
/// over and over (callgrind: 459 compilations for 4,000 events, 20,000
/// instructions per event); with each part padded to a count of its own, the
/// product of the counts outgrew even 128.
const WRITER_STATEMENT_CACHE: usize = 128;

/// How many write requests may wait for the writer before callers wait to enqueue.
const WRITE_BACKLOG: usize = 16_384;

/// The SQLite implementation of [`Store`].
#[derive(Clone)]
pub struct SqliteStore {
    read: SqlitePool,
    writes: mpsc::Sender<Write>,
    stats: Arc<super::StatsCache>,
    /// The keys the writer found taken lately ([`RECENT_KEYS`] at most), which
    /// [`Store::recent_key`] answers from.
    recent: Arc<RecentKeys>,
    /// Seal and open subscriber secrets ([`SqliteStore::with_keys`]).
    keys: crate::sealing::Keyring,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file, applies the migrations and starts
    /// the writer task.
    pub async fn open(path: &Path, sync: Sync) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| refused(dir, e))?;
        }
        let lock = lock(path)?;
        let base = SqliteConnectOptions::new()
            .filename(path)
            // A statement's text can hold a whole batch (megabytes): never in the log.
            .disable_statement_logging()
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true)
            .synchronous(match sync {
                Sync::Full => SqliteSynchronous::Full,
                Sync::Normal => SqliteSynchronous::Normal,
            });
        let mut conn = base
            .clone()
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // The writer caches its group-commit scripts, one per batch shape; a
            // compiled script of many rows takes ~100 KB, so the cache holds what
            // the shapes need and no more (RSS after 100,000 events end to end: 47.5
            // MB with 48, 60.2 MB with 160; 85 MB with 256 after the e2e and
            // deliver benchmarks).
            .statement_cache_capacity(WRITER_STATEMENT_CACHE)
            // Checkpoints run beside the writer ([`checkpoint`]); its own commits
            // checkpoint only if that falls far behind.
            .pragma("wal_autocheckpoint", checkpoint::BACKSTOP_PAGES.to_string())
            // What the writer deletes or rewrites is overwritten with zeros, not
            // left in the file's free space: an erased payload (SPEC §14) is gone
            // from the file, earlier versions of its row (each status update
            // rewrites the row) included. A memset within pages written anyway,
            // and a page of zeros for each freed overflow page (payloads over
            // about 4 KB).
            .pragma("secure_delete", "on")
            .connect()
            .await?;
        migrate(&mut conn).await?;
        let checkpoints = base.clone().connect().await?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .connect_with(base.read_only(true))
            .await?;
        let (writes, rx) = mpsc::channel(WRITE_BACKLOG);
        let recent = Arc::new(RecentKeys::new(recent_keys_bound()));
        let kept = recent.clone();
        tokio::spawn(async move {
            let (checkpointer, finishing) =
                checkpoint::Checkpointer::start(checkpoints, checkpoint::Pace::default());
            writer::run(conn, rx, kept, finishing).await;
            checkpointer.stop().await;
            drop(lock);
        });
        Ok(Self {
            read,
            writes,
            stats: Default::default(),
            recent,
            keys: Default::default(),
        })
    }

    /// Seals subscriber secrets with `keys` from now on, and opens them with them
    /// (without, secrets are kept in the clear).
    pub fn with_keys(mut self, keys: crate::sealing::Keyring) -> Self {
        self.keys = keys;
        self
    }

    /// Opens `sqlite://PATH`-style URLs too (for tests and tools).
    pub async fn open_url(url: &str, sync: Sync) -> Result<Self, StoreError> {
        let opts = SqliteConnectOptions::from_str(url)?;
        Self::open(opts.get_filename(), sync).await
    }

    async fn send<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Write,
    ) -> Result<T, StoreError> {
        let (tx, rx) = oneshot::channel();
        self.writes
            .send(make(tx))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// The counts behind [`Store::stats`], computed now.
    async fn count(&self) -> Result<Stats, StoreError> {
        let row = sqlx::query(super::sql::STATS).fetch_one(&self.read).await?;
        let count = |col: &str| -> Result<u64, StoreError> {
            let n: i64 = sqlx::Row::try_get(&row, col)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(Stats {
            pending_events: count("pending")?,
            dead_letters: count("dead")?,
            oldest_pending: row.opt_timestamp("oldest")?,
        })
    }

    /// Waits until the writer has committed every retry counted so far, when some
    /// are queued ([`Store::count_retry`]): a read of events then shows them.
    async fn settle_receipts(&self) -> Result<(), StoreError> {
        if !self.recent.unsettled() {
            return Ok(());
        }
        // The writer runs each batch before the solos received with it, in the
        // order they were sent: this answers after every earlier receipt.
        self.send(|reply| writer::solo(reply, |_| Box::pin(async { Ok(()) })))
            .await
    }

    async fn view_where(&self, column: &str, value: &str) -> Result<Option<EventView>, StoreError> {
        self.settle_receipts().await?;
        let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE {column} = ?");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(value)
            .fetch_optional(&self.read)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let mut views = vec![rows::event_view(&row)?];
        rows::attach_deliveries(&self.read, &mut views).await?;
        Ok(views.pop())
    }
}

/// How many recent keys to keep: [`RECENT_KEYS`], or the number in
/// `HOOKBOX_RECENT_KEYS` — not a documented setting: it is there so that tests
/// can watch keys being evicted without posting 65,536 of them.
fn recent_keys_bound() -> usize {
    std::env::var("HOOKBOX_RECENT_KEYS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(RECENT_KEYS)
}

/// The lock file of the database at `path`: `<path>.lock`, beside the file a
/// symbolic link names (or its folder does), so that two names of one database
/// share one lock.
pub fn lock_path(path: &Path) -> PathBuf {
    let resolved = std::fs::canonicalize(path).ok().or_else(|| {
        let folder = path.parent().filter(|d| !d.as_os_str().is_empty())?;
        Some(std::fs::canonicalize(folder).ok()?.join(path.file_name()?))
    });
    let mut name = resolved.unwrap_or_else(|| path.to_owned()).into_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

/// An I/O error opening the database at `path`: permission denied says which
/// folder, whose it is and what to do ([`StoreError::NotWritable`]).
fn refused(path: &Path, e: std::io::Error) -> StoreError {
    use std::os::unix::fs::MetadataExt as _;
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        // The nearest folder that exists is the one that refused.
        let folder = path
            .ancestors()
            .find(|p| p.is_dir())
            .unwrap_or(path)
            .to_owned();
        if let Ok(meta) = std::fs::metadata(&folder) {
            return StoreError::NotWritable {
                folder,
                owner: meta.uid(),
                uid: nix::unistd::geteuid().as_raw(),
            };
        }
    }
    StoreError::Database(sqlx::Error::Io(e))
}

/// Takes the exclusive lock on the database at `path` without waiting: held while
/// the returned value lives (or the process does).
fn lock(path: &Path) -> Result<Flock<File>, StoreError> {
    let lock = lock_path(path);
    let io = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            return refused(&lock, e);
        }
        let message = format!("cannot lock {}: {e}", lock.display());
        StoreError::Database(sqlx::Error::Io(std::io::Error::new(e.kind(), message)))
    };
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(io)?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| match errno {
        Errno::EWOULDBLOCK => StoreError::InUse {
            database: path.to_owned(),
            lock: lock.clone(),
        },
        other => io(other.into()),
    })
}

/// Applies the embedded SQLite migrations on one connection, then writes the
/// tables' status and outcome `CHECK`s as comparisons ([`checks`]: an `IN` list
/// in a `CHECK` costs a table built per row).
pub async fn migrate(conn: &mut sqlx::SqliteConnection) -> Result<(), StoreError> {
    sqlx::migrate!("migrations/sqlite").run(&mut *conn).await?;
    checks::rewrite(conn).await;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn insert_event(&self, event: NewEvent) -> Result<Inserted, StoreError> {
        self.send(|reply| Write::Insert(event, reply)).await
    }

    async fn find_key(&self, key: &str) -> Result<Option<EventSummary>, StoreError> {
        self.settle_receipts().await?;
        let sql = format!("SELECT {SUMMARY_COLUMNS} FROM events WHERE idempotency_key = ?");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(key)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(rows::summary).transpose()
    }

    fn recent_key(&self, key: &str) -> Option<EventSummary> {
        self.recent.keys.get(key)
    }

    async fn count_retry(&self, event: Uuid, at: Timestamp) -> Result<(), StoreError> {
        self.recent.queued();
        let sent = self.writes.send(Write::Receipt(event, at)).await;
        sent.map_err(|_| {
            self.recent.settled(1);
            StoreError::WriterGone
        })
    }

    async fn event(&self, id: Uuid) -> Result<Option<EventView>, StoreError> {
        self.view_where("id", &id.to_string()).await
    }

    async fn event_by_key(&self, key: &str) -> Result<Option<EventView>, StoreError> {
        self.view_where("idempotency_key", key).await
    }

    async fn list_events(&self, query: &ListQuery) -> Result<Page<EventView>, StoreError> {
        self.settle_receipts().await?;
        let mut qb =
            QueryBuilder::<Sqlite>::new(format!("SELECT {EVENT_COLUMNS} FROM events WHERE 1=1"));
        if let Some(status) = query.status {
            qb.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(t) = &query.event_type {
            qb.push(" AND event_type = ").push_bind(t.clone());
        }
        if let Some(source) = &query.source {
            qb.push(" AND source = ").push_bind(source.clone());
        }
        if let Some(before) = query.before {
            qb.push(" AND id < ").push_bind(before.to_string());
        }
        qb.push(" ORDER BY id DESC LIMIT ")
            .push_bind(i64::from(query.limit) + 1);
        let fetched = qb.build().fetch_all(&self.read).await?;
        let mut items = fetched
            .iter()
            .map(rows::event_view)
            .collect::<Result<Vec<_>, _>>()?;
        let next_cursor = super::cut_page(&mut items, query.limit, |x| x.id);
        rows::attach_deliveries(&self.read, &mut items).await?;
        Ok(Page { items, next_cursor })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        if self.writes.is_closed() {
            return Err(StoreError::WriterGone);
        }
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }

    async fn settle(&self, event: Uuid) -> Result<(), StoreError> {
        self.writes
            .send(Write::Settle(event))
            .await
            .map_err(|_| StoreError::WriterGone)
    }

    async fn unfinished(&self) -> Result<Unfinished, StoreError> {
        let deliveries = sqlx::query(
            "SELECT id, event_id, retry_after, handler, ordering_value FROM deliveries \
             WHERE status IN ('pending', 'processing') ORDER BY id",
        )
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(|r| {
            Ok(PendingDelivery {
                delivery: r.uuid("id")?,
                event: r.uuid("event_id")?,
                retry_after: r.opt_timestamp("retry_after")?,
                handler: sqlx::Row::try_get(r, "handler")?,
                ordering_value: sqlx::Row::try_get(r, "ordering_value")?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
        let unsettled = sqlx::query(
            "SELECT id FROM events e WHERE status IN ('pending', 'processing') \
             AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id \
                             AND d.status IN ('pending', 'processing')) ORDER BY id",
        )
        .fetch_all(&self.read)
        .await?
        .iter()
        .map(|r| r.uuid("id"))
        .collect::<Result<_, _>>()?;
        Ok(Unfinished {
            deliveries,
            unsettled,
        })
    }

    async fn delivery_task(&self, delivery: Uuid) -> Result<Option<DeliveryTask>, StoreError> {
        let row = sqlx::query(
            "SELECT d.id, d.handler, d.status, d.attempts, d.retry_after, d.ordering_value, \
                    d.created_at, e.id AS event_id, e.idempotency_key, e.event_type, e.payload, \
                    e.traceparent, e.tracestate \
             FROM deliveries d JOIN events e ON e.id = d.event_id WHERE d.id = ?",
        )
        .bind(delivery.to_string())
        .fetch_optional(&self.read)
        .await?;
        row.as_ref().map(rows::delivery_task).transpose()
    }

    async fn start(&self, delivery: Uuid, event: Uuid) -> Result<(), StoreError> {
        self.writes
            .send(Write::Start(delivery, event))
            .await
            .map_err(|_| StoreError::WriterGone)
    }

    async fn finish(&self, finish: Finish) -> Result<(), StoreError> {
        let finish = super::storable_finish(finish);
        self.send(|reply| Write::Finish(finish, reply)).await
    }

    async fn list_attempts(&self, event_id: Uuid) -> Result<Vec<Attempt>, StoreError> {
        let sql =
            format!("SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE event_id = ? {ATTEMPT_ORDER}");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(event_id.to_string())
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(rows::attempt)
            .collect()
    }

    async fn purge(&self, cutoff: Timestamp, limit: u32) -> Result<u64, StoreError> {
        let recent = self.recent.clone();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move { writer::purge(conn, cutoff, limit, &recent).await })
            })
        })
        .await
    }

    async fn purge_source(
        &self,
        source: &str,
        cutoff: Timestamp,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let recent = self.recent.clone();
        let source = source.to_owned();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    writer::purge_source(conn, &source, cutoff, limit, &recent).await
                })
            })
        })
        .await
    }

    async fn stats(&self) -> Result<Stats, StoreError> {
        self.stats.get(self.count()).await
    }

    async fn destination_states(&self) -> Result<Vec<(String, String)>, StoreError> {
        sqlx::query(crate::store::sql::DESTINATION_STATES)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|r| Ok((r.text("name")?.to_owned(), r.text("state")?.to_owned())))
            .collect()
    }

    async fn save_destination(&self, name: String, state: String) -> Result<(), StoreError> {
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    sqlx::query(crate::store::sql::SAVE_DESTINATION)
                        .bind(name)
                        .bind(state)
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            })
        })
        .await
    }

    async fn destination_backlog(
        &self,
    ) -> Result<Vec<crate::store::DestinationBacklog>, StoreError> {
        sqlx::query(crate::store::sql::DESTINATION_BACKLOG)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(crate::store::destination_backlog_row)
            .collect()
    }

    async fn overview(
        &self,
        now: Timestamp,
    ) -> Result<crate::store::overview::Overview, StoreError> {
        overview::overview(&self.read, now).await
    }

    async fn payload(&self, id: Uuid) -> Result<Option<String>, StoreError> {
        overview::payload(&self.read, id).await
    }

    async fn dead_letters_where(
        &self,
        filter: &ReplayFilter,
        limit: u32,
        before: Option<Uuid>,
    ) -> Result<Page<DeadLetter>, StoreError> {
        overview::dead_letters(&self.read, filter, limit, before).await
    }

    async fn count_dead_letters(&self, filter: &ReplayFilter) -> Result<u64, StoreError> {
        overview::count_dead_letters(&self.read, filter).await
    }

    async fn replay_page(
        &self,
        filter: &ReplayFilter,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<PendingDelivery>, StoreError> {
        let recent = self.recent.clone();
        let filter = filter.clone();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move { writer::replay(conn, filter, after, limit, &recent).await })
            })
        })
        .await
    }

    async fn subscribers(&self) -> Result<Vec<Subscriber>, StoreError> {
        sqlx::query(crate::store::sql::SELECT_SUBSCRIBERS)
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|row| rows::subscriber(row, &self.keys))
            .collect()
    }

    async fn subscriber(&self, name: &str) -> Result<Option<Subscriber>, StoreError> {
        sqlx::query(crate::store::sql::SELECT_SUBSCRIBER)
            .bind(name)
            .fetch_optional(&self.read)
            .await?
            .map(|row| rows::subscriber(&row, &self.keys))
            .transpose()
    }

    async fn subscribers_page(
        &self,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Subscriber>, StoreError> {
        sqlx::query(crate::store::sql::SUBSCRIBERS_PAGE)
            .bind(after.unwrap_or(""))
            .bind(i64::from(limit))
            .fetch_all(&self.read)
            .await?
            .iter()
            .map(|row| rows::subscriber(row, &self.keys))
            .collect()
    }

    async fn insert_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError> {
        let sealed = crate::store::sealed_subscriber(subscriber, &self.keys);
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(writer::save_subscriber(conn, sealed, false))
            })
        })
        .await
    }

    /// The row is rewritten with `secure_delete` on and the WAL truncated after
    /// it, so a secret replaced (a PATCH, `rotate-key` sealing one kept in the
    /// clear) leaves the files, not only the table.
    async fn update_subscriber(&self, subscriber: Subscriber) -> Result<bool, StoreError> {
        let sealed = crate::store::sealed_subscriber(subscriber, &self.keys);
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    let saved = writer::save_subscriber(conn, sealed, true).await;
                    if matches!(saved, Ok(true)) {
                        truncate_wal(conn, "a subscriber's update").await;
                    }
                    saved
                })
            })
        })
        .await
    }

    /// Like an update, a deletion takes the secret out of the files too.
    async fn delete_subscriber(&self, name: &str) -> Result<bool, StoreError> {
        let name = name.to_owned();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    let done = sqlx::query("DELETE FROM subscribers WHERE name = ?")
                        .bind(name)
                        .execute(&mut *conn)
                        .await?;
                    let deleted = done.rows_affected() > 0;
                    if deleted {
                        truncate_wal(conn, "a subscriber's deletion").await;
                    }
                    Ok(deleted)
                })
            })
        })
        .await
    }

    async fn erase(&self, id: Uuid) -> Result<crate::store::Erasure, StoreError> {
        let recent = self.recent.clone();
        self.send(|reply| {
            writer::solo(reply, move |conn| {
                Box::pin(async move {
                    // The deleted rows' bytes are zeros (`secure_delete`, the
                    // writer's setting); their earlier images leave the WAL.
                    let erased = erase_event(conn, id, &recent).await;
                    if matches!(erased, Ok(crate::store::Erasure::Erased { .. })) {
                        truncate_wal(conn, "an erasure").await;
                    }
                    erased
                })
            })
        })
        .await
    }
}

/// After an erasure: the WAL's frames are copied into the database (where the
/// erased rows' bytes are zeros now) and the WAL is truncated, so the event's
/// earlier page images leave the disk at once rather than when the WAL comes
/// round again. The writer waits for it (erasures are rare; the WAL holds at
/// most a few seconds of writes), but not long: a reader in the middle of a
/// read, or the checkpointer's own run, can keep the WAL from being truncated
/// ([`TRUNCATE_WAIT`] for a lock, [`TRUNCATE_TRIES`] tries). Then the WAL is
/// left as it is and the erasure says so in the log: its earlier frames stay
/// in the WAL file until they are written over.
pub(super) async fn truncate_wal(conn: &mut sqlx::SqliteConnection, after: &'static str) {
    let wait = |ms: u128| format!("PRAGMA busy_timeout = {ms}");
    let _ = sqlx::query(sqlx::AssertSqlSafe(wait(TRUNCATE_WAIT.as_millis())))
        .execute(&mut *conn)
        .await;
    let mut truncated = false;
    for tried in 1..=TRUNCATE_TRIES {
        let done = sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&mut *conn)
            .await;
        truncated = done.is_ok_and(|row| row.int("busy").unwrap_or(1) == 0);
        if truncated || tried == TRUNCATE_TRIES {
            break;
        }
        // The checkpointer's run answers busy at once, without waiting.
        tokio::time::sleep(TRUNCATE_WAIT).await;
    }
    let _ = sqlx::query(sqlx::AssertSqlSafe(wait(BUSY_TIMEOUT.as_millis())))
        .execute(&mut *conn)
        .await;
    if !truncated {
        tracing::warn!(
            after,
            "the WAL could not be truncated (busy): its earlier frames stay in the WAL \
             file until written over"
        );
    }
}

/// How long the writer waits for a lock (every connection's `busy_timeout`).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an erasure's WAL truncation waits for a busy lock, and between
/// tries (the writer, and every caller behind it, waits with it).
const TRUNCATE_WAIT: Duration = Duration::from_millis(50);

/// How often an erasure tries to truncate the WAL.
const TRUNCATE_TRIES: u32 = 4;

/// [`Store::erase`] on the writer's connection, `secure_delete` on.
async fn erase_event(
    conn: &mut sqlx::SqliteConnection,
    id: Uuid,
    recent: &Arc<RecentKeys>,
) -> Result<crate::store::Erasure, StoreError> {
    // Read before the cascade deletes them (one writer: nothing changes them in
    // between).
    let fresh = sqlx::query(due::ERASED_FRESH)
        .bind(id.to_string())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| -> Result<_, StoreError> {
            Ok((
                r.text("handler")?.to_owned(),
                r.opt_text("ordering_value")?.map(str::to_owned),
            ))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let erased = sqlx::query(crate::store::sql::ERASE_EVENT)
        .bind(id.to_string())
        .fetch_optional(&mut *conn)
        .await?;
    let erased = erased
        .as_ref()
        .map(crate::store::rows::erased)
        .transpose()?;
    let exists = erased.is_none()
        && sqlx::query(crate::store::sql::EVENT_EXISTS)
            .bind(id.to_string())
            .fetch_optional(&mut *conn)
            .await?
            .is_some();
    if erased.is_some() {
        recent::forget(recent, &[id]);
    }
    Ok(crate::store::erasure(erased, exists, fresh))
}

/// The plan of `sql` (bound to `binds`) on a fresh migrated database, one line per
/// step: what the index tests of `due.rs` and `writer.rs` read.
#[cfg(test)]
async fn query_plan(sql: &str, binds: &[&str]) -> Vec<String> {
    use sqlx::{Connection, Row, SqliteConnection};
    let mut conn = SqliteConnection::connect("sqlite::memory:")
        .await
        .expect("connect");
    migrate(&mut conn).await.expect("migrate");
    let explain = format!("EXPLAIN QUERY PLAN {sql}");
    let mut query = sqlx::query(sqlx::AssertSqlSafe(explain));
    for b in binds {
        query = query.bind(*b);
    }
    query
        .fetch_all(&mut conn)
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<String, _>("detail"))
        .collect()
}
