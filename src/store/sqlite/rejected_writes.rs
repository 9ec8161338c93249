//! What SQLite's writer does with refusals to keep in the rejected log: those it
//! received together go into one transaction with one trim per source and class
//! ([`keep_all`]), so a flood of forged requests costs the writer one commit per
//! turn, not one per request (each commit is a wait for the intake behind it).

use std::collections::HashSet;

use sqlx::{Connection, Sqlite, SqliteConnection};

use crate::store::StoreError;
use crate::store::rejected::{Bounds, RejectedRow, headers_text, sql};

type Query<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds a row for [`sql::INSERT`].
fn insert(r: &RejectedRow) -> Query<'static> {
    sqlx::query(sql::INSERT)
        .bind(r.id.to_string())
        .bind(r.source.clone())
        .bind(r.class.as_str())
        .bind(r.received_at.millis())
        .bind(r.reason.clone())
        .bind(i64::from(r.status))
        .bind(r.code.clone())
        .bind(r.detail.clone())
        .bind(headers_text(&r.headers))
        .bind(r.body.clone())
        .bind(i64::try_from(r.body_bytes).unwrap_or(i64::MAX))
        .bind(r.retryable)
        .bind(r.delivery_id.clone())
}

/// Keeps `rows` (each with its source's bounds) in one transaction, then trims
/// each source and class they touch once, by the bounds of the last of its rows
/// received: the same entries remain as when each row is kept and trimmed in turn
/// (a row past a bound only goes further past it as newer rows come) — exactly
/// so when the rows came in id order, as they nearly always do; when two came
/// out of order, the grouped trim is the stricter at the byte bound.
pub(super) async fn keep_all(
    conn: &mut SqliteConnection,
    rows: &[(RejectedRow, Bounds)],
) -> Result<(), StoreError> {
    let mut tx = conn.begin().await?;
    for (r, _) in rows {
        insert(r).execute(&mut *tx).await?;
    }
    let mut trimmed = HashSet::new();
    for (r, bounds) in rows.iter().rev() {
        if !trimmed.insert((r.source.as_str(), r.class.as_str())) {
            continue;
        }
        sqlx::query(sql::TRIM)
            .bind(&r.source)
            .bind(r.class.as_str())
            .bind(i64::from(bounds.count))
            .bind(i64::try_from(bounds.bytes).unwrap_or(i64::MAX))
            .bind(bounds.oldest_kept(r.received_at))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
