//! What pull sources keep in the database: each source's cursor, and the
//! commit that stores a batch of fetched events *and* the cursor after them in one
//! transaction, so that the cursor never runs ahead of the events it covers.
//!
//! An adapter first takes a [`SourceLease`] ([`PullStore::lease`]): on SQLite (one
//! instance) it is always granted; on PostgreSQL it is a session advisory lock held
//! on a connection of its own, so one instance runs a source at a time and another
//! takes over as soon as the holder's connection ends (a crash closes it). Commits go
//! through the lease: on PostgreSQL on the very connection that holds the lock, so a
//! lost lock fails the commit instead of racing the new holder.
//!
//! Every commit and every reset bumps the cursor's `version`; a commit names the
//! version it started from and is refused (`Ok(None)`, nothing stored) when a reset
//! has moved the cursor meanwhile.

use std::collections::HashMap;

use async_trait::async_trait;

use super::{Inserted, StoreError};
use crate::model::{NewEvent, Timestamp};

/// A source's committed position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CursorRow {
    /// The JSON text of the last committed cursor value; `None`: from the beginning.
    pub cursor: Option<String>,
    /// Grows with every commit and reset (0: never written).
    pub version: i64,
    /// When it was last written.
    pub updated_at: Option<Timestamp>,
}

/// One fetched event with what the source says of it besides its body.
#[derive(Debug, Clone)]
pub struct PulledEvent {
    /// The event as intake would store it (`source` set, key `{name}:{id}`).
    pub event: NewEvent,
    /// The source's own sequence number, when it gives one.
    pub sequence: Option<i64>,
    /// The source's own timestamp, when it gives one.
    pub emitted_at: Option<Timestamp>,
}

/// Events to store and the cursor after them, in one transaction.
#[derive(Debug, Clone)]
pub struct PullBatch {
    /// The source's name.
    pub source: String,
    /// The events, in the order fetched (may be empty: a page of bad items still
    /// moves the cursor).
    pub events: Vec<PulledEvent>,
    /// The JSON text of the new cursor.
    pub cursor: Option<String>,
    /// The cursor version the batch was fetched from.
    pub version: i64,
}

/// The right to run one source's adapter, and its commits.
#[async_trait]
pub trait SourceLease: Send {
    /// The committed cursor.
    async fn cursor(&mut self) -> Result<CursorRow, StoreError>;

    /// Stores the batch's events (deduplicated on their keys, as intake) and its
    /// cursor in one transaction. One [`Inserted`] per event, in order; `Ok(None)`
    /// and nothing stored when the cursor's version is no longer `batch.version`.
    async fn commit(&mut self, batch: PullBatch) -> Result<Option<Vec<Inserted>>, StoreError>;

    /// Fails when the lease is lost (PostgreSQL: its connection ended).
    async fn check(&mut self) -> Result<(), StoreError>;
}

/// The cursor side of a store.
#[async_trait]
pub trait PullStore: Send + Sync + 'static {
    /// Every stored cursor, by source name.
    async fn cursors(&self) -> Result<HashMap<String, CursorRow>, StoreError>;

    /// Moves a source's cursor (`None`: from the beginning), bumping its version;
    /// returns the new row.
    async fn reset_cursor(
        &self,
        source: &str,
        cursor: Option<String>,
    ) -> Result<CursorRow, StoreError>;

    /// Takes the right to run `source`'s adapter; `None` while another instance
    /// holds it.
    async fn lease(&self, source: &str) -> Result<Option<Box<dyn SourceLease>>, StoreError>;
}

/// SQL that both backends run as it is.
pub(crate) mod sql {
    /// Writes the cursor of a commit if its version is still `$3`; binds: source,
    /// cursor, version, updated_at. (Placeholders first appear in their order:
    /// SQLite numbers named parameters by first appearance.)
    pub(crate) const COMMIT_CURSOR: &str = "INSERT INTO source_cursors \
        (source, cursor, version, updated_at) VALUES ($1, $2, CAST($3 AS BIGINT) + 1, $4) \
        ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, \
        version = source_cursors.version + 1, updated_at = excluded.updated_at \
        WHERE source_cursors.version = $3";

    /// Moves a cursor whatever its version; binds: source, cursor, updated_at.
    pub(crate) const RESET_CURSOR: &str = "INSERT INTO source_cursors \
        (source, cursor, version, updated_at) VALUES ($1, $2, 1, $3) \
        ON CONFLICT (source) DO UPDATE SET cursor = excluded.cursor, \
        version = source_cursors.version + 1, updated_at = excluded.updated_at \
        RETURNING cursor, version, updated_at";

    /// One source's row; bind: source.
    pub(crate) const CURSOR: &str =
        "SELECT cursor, version, updated_at FROM source_cursors WHERE source = $1";

    /// Every row.
    pub(crate) const CURSORS: &str =
        "SELECT source, cursor, version, updated_at FROM source_cursors";
}

/// Decodes a row of [`sql::CURSOR`] (either backend).
pub(super) fn cursor_row(row: &impl super::rows::RowExt) -> Result<CursorRow, StoreError> {
    Ok(CursorRow {
        cursor: row.opt_text("cursor")?.map(str::to_owned),
        version: row.opt_big("version")?.unwrap_or(0),
        updated_at: row.opt_timestamp("updated_at")?,
    })
}

/// The created events of a batch that carry a sequence or a timestamp:
/// `(id, sequence, emitted_at)`, for the UPDATE that records them.
pub(super) fn source_marks(
    batch: &PullBatch,
    results: &[Inserted],
) -> Vec<(uuid::Uuid, Option<i64>, Option<Timestamp>)> {
    batch
        .events
        .iter()
        .zip(results)
        .filter(|(p, r)| {
            r.created
                && r.event.id == p.event.id
                && (p.sequence.is_some() || p.emitted_at.is_some())
        })
        .map(|(p, _)| (p.event.id, p.sequence, p.emitted_at))
        .collect()
}
