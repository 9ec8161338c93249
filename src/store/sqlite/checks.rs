//! The tables' `CHECK`s on a status or an outcome, as comparisons instead of an
//! `IN` list.
//!
//! SQLite codes `CHECK (status IN ('pending', 'processing', …))` as an ephemeral
//! table that every checked row builds again: a list's table is built once per
//! statement only outside a `CHECK` (its code has no `Once` there). Each
//! delivery wrote five such rows (its insert, its outcome, its attempt, its event's
//! insert and settle): four inserts into an ephemeral b-tree and its clearing each
//! time. callgrind, one `log` handler end to end at 64 connections
//! (`MODES=e2e SMALL=1000 LARGE=4000 CONNECTIONS=64 scripts/bench-instructions.sh`):
//! 294,994 → 268,206 instructions per event, SQLite's VM 31.7k → 25.9k, its b-tree
//! inserts 7.7k → 3.6k.
//!
//! The migrations made the `IN` lists (migrations 0001 and 0014), and SQLite
//! cannot alter a `CHECK`. Rebuilding the tables would copy every event at the
//! upgrade; an equivalent `CHECK` keeps every stored row valid and the file's
//! format as it is, so the change takes the procedure SQLite's `ALTER TABLE` page
//! gives for such edits ("Making Other Kinds Of Table Schema Changes", there for
//! removing a `CHECK`, which is no safer than swapping one for its equal): in
//! one `IMMEDIATE` transaction the tables' text in `sqlite_schema` is rewritten
//! with `writable_schema` on, `schema_version` goes up by one so that every
//! connection parses the schema again, and the new schema is parsed before the
//! commit (a text SQLite could not parse rolls back instead of making the file
//! unreadable). It runs after the migrations at every open and changes nothing
//! once done (nothing matches the old text then). It only saves time, so a
//! database where it cannot run (SQLite's defensive mode refuses
//! `writable_schema`) keeps its `IN` lists and a warning in the log.

use sqlx::{Connection, SqliteConnection};
use tracing::warn;

use crate::store::StoreError;

/// Each `IN` list and the comparisons that replace it, as the schema spells them.
const REWRITES: [(&str, &str); 2] = [
    (
        "status IN ('pending', 'processing', 'completed', 'failed')",
        "status = 'pending' OR status = 'processing' OR status = 'completed' \
         OR status = 'failed'",
    ),
    (
        "outcome IN ('completed', 'retry', 'dead_letter', 'cancelled')",
        "outcome = 'completed' OR outcome = 'retry' OR outcome = 'dead_letter' \
         OR outcome = 'cancelled'",
    ),
];

/// The tables whose `CHECK`s are rewritten.
const TABLES: &str = "('events', 'deliveries', 'attempts')";

/// Rewrites the `CHECK`s' `IN` lists of `events`, `deliveries` and `attempts` as
/// comparisons (see the module's docs), or leaves them and logs why when SQLite
/// refuses; does nothing when none is left.
///
/// ```ignore
/// sqlx::migrate!("migrations/sqlite").run(&mut *conn).await?;
/// checks::rewrite(&mut conn).await; // what `migrate` ends with
/// let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = 'events'")
///     .fetch_one(&mut conn).await?;
/// assert!(!sql.contains("status IN"));
/// ```
pub(super) async fn rewrite(conn: &mut SqliteConnection) {
    if let Err(e) = without_in_lists(conn).await {
        // Not transactional: never leave the connection able to write the schema.
        let reset = sqlx::query("PRAGMA writable_schema = RESET")
            .persistent(false)
            .execute(&mut *conn)
            .await;
        warn!(error = %e, reset_failed = reset.is_err(), "the status CHECKs keep their IN lists (each checked row costs more)");
    }
}

/// [`rewrite`]'s transaction: an error leaves the schema as it was.
async fn without_in_lists(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
    if left(&mut tx).await? == 0 {
        tx.rollback().await?;
        return Ok(());
    }
    let version: i64 = sqlx::query_scalar("PRAGMA schema_version")
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    run(&mut tx, "PRAGMA writable_schema = ON").await?;
    for (list, comparisons) in REWRITES {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE sqlite_schema SET sql = replace(sql, ?, ?) \
             WHERE type = 'table' AND name IN {TABLES}"
        )))
        .bind(list)
        .bind(comparisons)
        .persistent(false)
        .execute(&mut *tx)
        .await?;
    }
    // A PRAGMA takes no bound value; the version is an integer read just above.
    run(&mut tx, &format!("PRAGMA schema_version = {}", version + 1)).await?;
    run(&mut tx, "PRAGMA writable_schema = OFF").await?;
    // With writable_schema off again SQLite refuses a schema it cannot parse:
    // this read parses the new one, and an error here rolls it back.
    if left(&mut tx).await? != 0 {
        return Err(StoreError::Corrupt(
            "an IN list is left after the rewrite".into(),
        ));
    }
    tx.commit().await?;
    Ok(())
}

/// How many of the tables still hold an `IN` list (parsing the schema first).
async fn left(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    let n = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN {TABLES} \
         AND (instr(sql, ?) > 0 OR instr(sql, ?) > 0)"
    )))
    .bind(REWRITES[0].0)
    .bind(REWRITES[1].0)
    .persistent(false)
    .fetch_one(conn)
    .await?;
    Ok(n)
}

/// Runs one statement that returns nothing, uncached.
async fn run(conn: &mut SqliteConnection, sql: &str) -> Result<(), StoreError> {
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .persistent(false)
        .execute(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlx::ConnectOptions;
    use sqlx::sqlite::SqliteConnectOptions;

    use super::*;

    async fn connect(path: &std::path::Path) -> SqliteConnection {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(std::time::Duration::ZERO)
            .connect()
            .await
            .expect("connect")
    }

    /// A database at `path` with the migrations alone: the `IN` lists.
    async fn with_in_lists(path: &std::path::Path) -> SqliteConnection {
        let mut conn = connect(path).await;
        sqlx::migrate!("migrations/sqlite")
            .run(&mut conn)
            .await
            .expect("migrations");
        conn
    }

    /// A database with the migrations alone (`IN` lists) and one migrated as
    /// hookbox migrates (comparisons), each holding the event `e1`.
    async fn both(dir: &std::path::Path) -> (SqliteConnection, SqliteConnection) {
        let mut plain = with_in_lists(&dir.join("plain.db")).await;
        let mut ours = connect(&dir.join("ours.db")).await;
        super::super::migrate(&mut ours).await.expect("migrate");
        for conn in [&mut plain, &mut ours] {
            insert(conn, Table::Events, "completed", "e1")
                .await
                .expect("the event");
        }
        (plain, ours)
    }

    #[derive(Clone, Copy, Debug)]
    enum Table {
        Events,
        Deliveries,
        Attempts,
    }

    /// Inserts a row of `table` whose checked column is `value` (a text, or the
    /// SQL literal after `sql:`), keyed by `key`.
    async fn insert(
        conn: &mut SqliteConnection,
        table: Table,
        value: &str,
        key: &str,
    ) -> Result<(), sqlx::Error> {
        let (column, rest) = match value.strip_prefix("sql:") {
            Some(literal) => (literal.to_owned(), None),
            None => ("?".to_owned(), Some(value)),
        };
        let sql = match table {
            Table::Events => format!(
                "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, \
                 status, created_at, updated_at) VALUES ('{key}', '{key}', 'a', '{{}}', 's', \
                 {column}, 't', 't')"
            ),
            Table::Deliveries => format!(
                "INSERT INTO deliveries (id, event_id, handler, status, created_at, updated_at) \
                 VALUES ('{key}', 'e1', '{key}', {column}, 't', 't')"
            ),
            Table::Attempts => format!(
                "INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, \
                 outcome) VALUES ('e1', '{key}', 1, 't', 1, {column})"
            ),
        };
        let query = sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false);
        let query = match rest {
            Some(text) => query.bind(text.to_owned()),
            None => query,
        };
        query.execute(conn).await.map(|_| ())
    }

    /// The opcodes SQLite compiles `sql` to, prepared now (never a cached plan).
    async fn opcodes(conn: &mut SqliteConnection, sql: &str) -> Vec<String> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
            .persistent(false)
            .fetch_all(conn)
            .await
            .expect("explain");
        rows.iter()
            .map(|r| sqlx::Row::get::<String, _>(r, "opcode"))
            .collect()
    }

    async fn schema(conn: &mut SqliteConnection) -> String {
        let texts: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name IN {TABLES} \
             ORDER BY name"
        )))
        .persistent(false)
        .fetch_all(conn)
        .await
        .expect("schema");
        texts.join("\n")
    }

    async fn version(conn: &mut SqliteConnection) -> i64 {
        sqlx::query_scalar("PRAGMA schema_version")
            .persistent(false)
            .fetch_one(conn)
            .await
            .expect("version")
    }

    const STATUSES: [&str; 4] = ["pending", "processing", "completed", "failed"];
    const OUTCOMES: [&str; 4] = ["completed", "retry", "dead_letter", "cancelled"];
    /// Values near the allowed ones: case, spaces, empty, another type, the same
    /// bytes as a blob, NULL.
    const NEAR: [&str; 8] = [
        "Pending",
        "pending ",
        " retry",
        "",
        "dead-letter",
        "sql:1",
        "sql:x'70656e64696e67'",
        "sql:NULL",
    ];

    #[tokio::test]
    async fn the_comparisons_accept_and_refuse_exactly_what_the_in_lists_did() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut plain, mut ours) = both(dir.path()).await;
        let cases = [
            (Table::Events, &STATUSES[..]),
            (Table::Deliveries, &STATUSES[..]),
            (Table::Attempts, &OUTCOMES[..]),
        ];
        let mut n = 0;
        for (table, allowed) in cases {
            for (i, value) in allowed.iter().chain(NEAR.iter()).enumerate() {
                n += 1;
                let key = format!("k{n}");
                let before = insert(&mut plain, table, value, &key).await;
                let after = insert(&mut ours, table, value, &key).await;
                assert_eq!(
                    before.is_ok(),
                    after.is_ok(),
                    "{table:?} {value:?}: {before:?} against {after:?}"
                );
                assert_eq!(
                    after.is_ok(),
                    i < allowed.len(),
                    "{table:?} {value:?}: {after:?}"
                );
            }
        }
        let check: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut ours)
            .await
            .expect("integrity");
        assert_eq!(check, "ok");
    }

    #[tokio::test]
    async fn no_checked_row_builds_a_table_any_more() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut plain, mut ours) = both(dir.path()).await;
        let inserts = [
            "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, \
             status, created_at, updated_at) VALUES ('e2', 'k', 'a', '{}', 's', ?, 't', 't')",
            "INSERT INTO deliveries (id, event_id, handler, status, created_at, updated_at) \
             VALUES ('d1', 'e1', 'h', ?, 't', 't')",
            "INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome) \
             VALUES ('e1', 'h', 1, 't', 1, ?)",
            "UPDATE events SET status = ? WHERE id = 'e1'",
        ];
        let ephemeral = "OpenEphemeral".to_string();
        for sql in inserts {
            assert!(opcodes(&mut plain, sql).await.contains(&ephemeral), "{sql}");
            assert!(!opcodes(&mut ours, sql).await.contains(&ephemeral), "{sql}");
        }
    }

    #[tokio::test]
    async fn a_connection_open_before_the_rewrite_checks_with_the_new_text() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.db");
        let mut conn = with_in_lists(&path).await;
        let mut open = connect(&path).await;
        assert!(
            insert(&mut open, Table::Events, "pending", "e1")
                .await
                .is_ok()
        );
        let before = version(&mut conn).await;

        without_in_lists(&mut conn).await.expect("rewrite");

        assert_eq!(version(&mut conn).await, before + 1);
        let refused = insert(&mut open, Table::Events, "lost", "e2")
            .await
            .expect_err("an unknown status");
        assert!(
            refused.to_string().contains(REWRITES[0].1),
            "checked with the old text: {refused}"
        );
    }

    #[tokio::test]
    async fn a_second_open_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.db");
        let mut conn = connect(&path).await;
        super::super::migrate(&mut conn).await.expect("migrate");
        let (text, done) = (schema(&mut conn).await, version(&mut conn).await);
        assert!(!text.contains(" IN ("), "{text}");
        super::super::migrate(&mut conn)
            .await
            .expect("migrate again");
        assert_eq!(schema(&mut conn).await, text);
        assert_eq!(version(&mut conn).await, done);
    }

    #[tokio::test]
    async fn a_rewrite_that_cannot_run_leaves_the_schema_as_it_was() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.db");
        let mut conn = with_in_lists(&path).await;
        let text = schema(&mut conn).await;
        // Another connection holds the write lock: the IMMEDIATE transaction
        // cannot begin (these test connections do not wait for a lock).
        let mut holder = connect(&path).await;
        run(&mut holder, "BEGIN IMMEDIATE").await.expect("lock");

        rewrite(&mut conn).await;

        run(&mut holder, "ROLLBACK").await.expect("unlock");
        assert_eq!(schema(&mut conn).await, text);
        let writable = sqlx::query("UPDATE sqlite_schema SET sql = sql WHERE 0")
            .persistent(false)
            .execute(&mut conn)
            .await;
        assert!(writable.is_err(), "writable_schema was left on");
    }
}
