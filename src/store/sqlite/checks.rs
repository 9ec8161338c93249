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
//! upgrade; the change keeps every stored row valid and the file's format as it
//! is, so it takes SQLite's documented procedure for such changes instead
//! ("Making Other Kinds Of Table Schema Changes" in SQLite's `ALTER TABLE`
//! page): in one transaction, the tables' text in `sqlite_schema` is rewritten
//! with `writable_schema` on, and `schema_version` goes up by one so that every
//! connection parses the schema again. It runs after the migrations at every
//! open and changes nothing once done (nothing matches the old text then).

use sqlx::{Connection, SqliteConnection};

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
/// comparisons (see the module's docs); does nothing when none is left.
///
/// ```ignore
/// migrate(&mut conn).await?; // ends with this
/// let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = 'events'")
///     .fetch_one(&mut conn).await?;
/// assert!(!sql.contains("status IN"));
/// ```
pub(super) async fn without_in_lists(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
    let pending: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN {TABLES} \
         AND (instr(sql, ?) > 0 OR instr(sql, ?) > 0)"
    )))
    .bind(REWRITES[0].0)
    .bind(REWRITES[1].0)
    .fetch_one(&mut *tx)
    .await?;
    if pending == 0 {
        return Ok(());
    }
    let version: i64 = sqlx::query_scalar("PRAGMA schema_version")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query("PRAGMA writable_schema = ON")
        .execute(&mut *tx)
        .await?;
    for (list, comparisons) in REWRITES {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE sqlite_schema SET sql = replace(sql, ?, ?) \
             WHERE type = 'table' AND name IN {TABLES}"
        )))
        .bind(list)
        .bind(comparisons)
        .execute(&mut *tx)
        .await?;
    }
    // A PRAGMA takes no bound value; the version is an integer read just above.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "PRAGMA schema_version = {}",
        version.saturating_add(1)
    )))
    .execute(&mut *tx)
    .await?;
    sqlx::query("PRAGMA writable_schema = OFF")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
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
            .connect()
            .await
            .expect("connect")
    }

    async fn schema(conn: &mut SqliteConnection) -> String {
        let texts: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name IN {TABLES} \
             ORDER BY name"
        )))
        .fetch_all(conn)
        .await
        .expect("schema");
        texts.join("\n")
    }

    async fn version(conn: &mut SqliteConnection) -> i64 {
        sqlx::query_scalar("PRAGMA schema_version")
            .fetch_one(conn)
            .await
            .expect("version")
    }

    /// The opcodes SQLite compiles `sql` to.
    async fn opcodes(conn: &mut SqliteConnection, sql: &str) -> Vec<String> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
            .fetch_all(conn)
            .await
            .expect("explain");
        rows.iter()
            .map(|r| sqlx::Row::get::<String, _>(r, "opcode"))
            .collect()
    }

    const INSERT_DELIVERY: &str = "INSERT INTO deliveries \
        (id, event_id, handler, status, created_at, updated_at) \
        VALUES ('d1', 'e1', 'h', ?, 't', 't')";

    async fn insert_event(conn: &mut SqliteConnection, status: &str) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256, \
             status, created_at, updated_at) VALUES ('e1', 'k1', 'a', '{}', 's', ?, 't', 't')",
        )
        .bind(status)
        .execute(conn)
        .await
        .map(|_| ())
    }

    #[tokio::test]
    async fn the_migrated_checks_build_no_table_per_row_and_still_refuse() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.db");
        let mut conn = connect(&path).await;
        sqlx::migrate!("migrations/sqlite")
            .run(&mut conn)
            .await
            .expect("migrations");
        assert!(schema(&mut conn).await.contains(REWRITES[0].0));
        assert!(
            opcodes(&mut conn, INSERT_DELIVERY)
                .await
                .contains(&"OpenEphemeral".to_string()),
            "the migrations' IN list builds a table for the row"
        );
        insert_event(&mut conn, "pending").await.expect("an event");
        let before = version(&mut conn).await;

        without_in_lists(&mut conn).await.expect("rewrite");

        let text = schema(&mut conn).await;
        for (list, comparisons) in REWRITES {
            assert!(!text.contains(list), "{list} is left in {text}");
            assert!(text.contains(comparisons), "{comparisons} is not in {text}");
        }
        assert_eq!(version(&mut conn).await, before + 1);
        assert!(
            !opcodes(&mut conn, INSERT_DELIVERY)
                .await
                .contains(&"OpenEphemeral".to_string())
        );
        let bad = sqlx::query(INSERT_DELIVERY)
            .bind("lost")
            .execute(&mut conn)
            .await;
        assert!(
            matches!(&bad, Err(sqlx::Error::Database(e)) if e.message().contains("CHECK")),
            "{bad:?}"
        );
        let attempt = sqlx::query(
            "INSERT INTO attempts (event_id, handler, attempt, started_at, duration_ms, outcome) \
             VALUES ('e1', 'h', 1, 't', 1, 'maybe')",
        )
        .execute(&mut conn)
        .await;
        assert!(attempt.is_err(), "an unknown outcome went in");
        sqlx::query(INSERT_DELIVERY)
            .bind("processing")
            .execute(&mut conn)
            .await
            .expect("a known status goes in");
        let check: String = sqlx::query_scalar("PRAGMA integrity_check")
            .fetch_one(&mut conn)
            .await
            .expect("integrity");
        assert_eq!(check, "ok");
    }

    #[tokio::test]
    async fn a_second_open_changes_nothing_and_a_new_connection_reads_the_new_checks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("events.db");
        let mut conn = connect(&path).await;
        super::super::migrate(&mut conn).await.expect("migrate");
        let (text, done) = (schema(&mut conn).await, version(&mut conn).await);
        super::super::migrate(&mut conn)
            .await
            .expect("migrate again");
        assert_eq!(schema(&mut conn).await, text);
        assert_eq!(version(&mut conn).await, done);
        drop(conn);

        let mut other = connect(&path).await;
        assert_eq!(
            insert_event(&mut other, "stuck")
                .await
                .map_err(|e| e.to_string().contains("CHECK")),
            Err(true)
        );
        insert_event(&mut other, "completed")
            .await
            .expect("a known status goes in");
    }
}
