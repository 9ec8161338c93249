//! The one writer: group commit of every row waiting, then the answers.

use std::collections::HashMap;
use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Row as _, Sqlite, SqliteConnection};
use tokio::sync::{mpsc, oneshot};

/// Rows written in one transaction at most (4 bound values each, far below
/// SQLite's limit of 32,766).
pub(crate) const MAX_BATCH: usize = 500;

/// Requests waiting for the writer at most; a full queue makes handlers wait.
const QUEUE_CAPACITY: usize = 4096;

/// The table: the shape of hookbox's `events`, without the delivery columns.
const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS events (
    id              TEXT PRIMARY KEY NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)";

/// One event to store.
pub(crate) struct Row {
    /// UUID v7, as text.
    pub(crate) id: String,
    /// The `Idempotency-Key` header, or the id.
    pub(crate) key: String,
    /// The body's `event_type`.
    pub(crate) event_type: String,
    /// The body's `payload` member as sent (`null` when absent).
    pub(crate) payload: String,
}

/// What the writer tells a waiting request, after its transaction ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Outcome {
    /// Stored by this commit.
    Created,
    /// The key was stored already, under this id.
    Duplicate(String),
    /// The transaction failed: nothing of this batch is stored.
    Failed,
}

/// A row and where its outcome goes.
pub(crate) struct Pending {
    /// The event.
    pub(crate) row: Row,
    /// The waiting handler.
    pub(crate) reply: oneshot::Sender<Outcome>,
}

/// The handlers' side of the writer's queue.
pub(crate) type Queue = mpsc::Sender<Pending>;

/// Opens (creating it if needed) the SQLite file in WAL mode with
/// `synchronous=FULL`, and creates the table.
pub(crate) async fn open(path: &Path) -> Result<SqliteConnection, sqlx::Error> {
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        // One prepared statement per batch size, kept: no re-preparing under load.
        .statement_cache_capacity(MAX_BATCH + 8)
        .connect()
        .await?;
    sqlx::query(SCHEMA).execute(&mut conn).await?;
    Ok(conn)
}

/// Starts the writer task on `conn` and returns its queue.
pub(crate) fn spawn(conn: SqliteConnection) -> Queue {
    let (queue, rx) = mpsc::channel(QUEUE_CAPACITY);
    tokio::spawn(run(conn, rx));
    queue
}

/// Takes every request waiting (up to [`MAX_BATCH`]), commits them together,
/// answers them; until every handler's sender is gone.
async fn run(mut conn: SqliteConnection, mut rx: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let outcomes = match commit(&mut conn, &batch).await {
            Ok(outcomes) => outcomes,
            Err(err) => {
                eprintln!("intake-floor: commit of {} rows failed: {err}", batch.len());
                batch.iter().map(|_| Outcome::Failed).collect()
            }
        };
        for (pending, outcome) in batch.drain(..).zip(outcomes) {
            // The handler may have gone (its client hung up): nothing to tell.
            let _ = pending.reply.send(outcome);
        }
    }
}

/// One transaction: the multi-row INSERT, the duplicates' ids if any, COMMIT.
async fn commit(
    conn: &mut SqliteConnection,
    batch: &[Pending],
) -> Result<Vec<Outcome>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let inserted = insert(batch)
        .build()
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let outcomes = if inserted == batch.len() as u64 {
        batch.iter().map(|_| Outcome::Created).collect()
    } else {
        let stored = stored_ids(&mut tx, batch).await?;
        batch.iter().map(|p| outcome(&p.row, &stored)).collect()
    };
    tx.commit().await?;
    Ok(outcomes)
}

/// `INSERT INTO events … VALUES (…), (…) ON CONFLICT(idempotency_key) DO NOTHING`.
fn insert(batch: &[Pending]) -> QueryBuilder<Sqlite> {
    let mut query =
        QueryBuilder::new("INSERT INTO events (id, idempotency_key, event_type, payload) ");
    query.push_values(batch, |mut values, pending| {
        let row = &pending.row;
        values
            .push_bind(row.id.as_str())
            .push_bind(row.key.as_str())
            .push_bind(row.event_type.as_str())
            .push_bind(row.payload.as_str());
    });
    query.push(" ON CONFLICT(idempotency_key) DO NOTHING");
    query
}

/// The stored id of each of the batch's keys (only when some row was a
/// duplicate, so not on the path of new events).
async fn stored_ids(
    conn: &mut SqliteConnection,
    batch: &[Pending],
) -> Result<HashMap<String, String>, sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new(
        "SELECT idempotency_key, id FROM events WHERE idempotency_key IN (",
    );
    let mut keys = query.separated(", ");
    for pending in batch {
        keys.push_bind(pending.row.key.as_str());
    }
    query.push(")");
    let rows = query.build().fetch_all(conn).await?;
    rows.iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect()
}

/// Created if the key's stored id is the row's own, else a duplicate of it.
fn outcome(row: &Row, stored: &HashMap<String, String>) -> Outcome {
    match stored.get(&row.key) {
        Some(id) if *id == row.id => Outcome::Created,
        Some(id) => Outcome::Duplicate(id.clone()),
        None => Outcome::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, key: &str) -> Row {
        Row {
            id: id.to_owned(),
            key: key.to_owned(),
            event_type: "t".to_owned(),
            payload: "null".to_owned(),
        }
    }

    #[test]
    fn a_row_is_created_only_if_its_key_holds_its_own_id() {
        let stored = HashMap::from([("k".to_owned(), "a".to_owned())]);
        assert_eq!(outcome(&row("a", "k"), &stored), Outcome::Created);
        assert_eq!(
            outcome(&row("b", "k"), &stored),
            Outcome::Duplicate("a".to_owned())
        );
        assert_eq!(outcome(&row("c", "other"), &stored), Outcome::Failed);
    }

    #[test]
    fn the_insert_binds_four_values_per_row() {
        let (reply, _answer) = oneshot::channel();
        let (reply2, _answer2) = oneshot::channel();
        let batch = [
            Pending {
                row: row("a", "k1"),
                reply,
            },
            Pending {
                row: row("b", "k2"),
                reply: reply2,
            },
        ];
        let sql = insert(&batch).into_string();
        assert_eq!(
            sql,
            "INSERT INTO events (id, idempotency_key, event_type, payload) \
             VALUES (?, ?, ?, ?), (?, ?, ?, ?) ON CONFLICT(idempotency_key) DO NOTHING"
        );
    }
}
