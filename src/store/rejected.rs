//! The durable rejected log (SPEC §11): what `POST /ingest/{name}` refused, kept in
//! the database so that every instance sees it, a restart keeps it, and an
//! operator can retry an entry once its cause is fixed.
//!
//! Entries are bounded per source and [`Class`]: the newest [`Bounds::count`], at
//! most [`Bounds::bytes`] of bodies, none older than [`Bounds::age`]. Each insert
//! trims its own class in the same transaction, so a flood of unsigned junk (class
//! `unverified`) cannot push out a real sender's verified-but-refused requests
//! (class `verified`), and the table never holds more than the bounds allow (plus
//! the newest entry, which is always kept) — on PostgreSQL, plus at most the
//! refusals being kept at that moment (each trims what was committed when it
//! ran; the next one trims the rest).
//!
//! Ids are UUIDv7 text, so their order is arrival order on every backend.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::StoreError;
use crate::model::Timestamp;

/// Which quota an entry counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Refused before it was verified: no signature, a wrong one, a stale timestamp.
    Unverified,
    /// Verified, then refused: a body that does not parse, no event type, a key
    /// reused.
    Verified,
}

impl Class {
    /// As stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unverified => "unverified",
            Self::Verified => "verified",
        }
    }
}

/// The entries the log keeps per source and class, by default.
pub const KEPT_PER_CLASS: u32 = 1000;

/// How much the log keeps, per source and class.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// The newest entries kept.
    pub count: u32,
    /// The bytes of bodies kept (the newest entry is kept whatever its size).
    pub bytes: u64,
    /// Entries older than this are dropped.
    pub age: Duration,
}

impl Default for Bounds {
    /// 1,000 entries, 32 MiB of bodies, 7 days.
    fn default() -> Self {
        Self {
            count: KEPT_PER_CLASS,
            bytes: 32 << 20,
            age: Duration::from_secs(7 * 86_400),
        }
    }
}

impl Bounds {
    /// The oldest `received_at` (unix ms) kept at `now`.
    pub fn oldest_kept(&self, now: Timestamp) -> i64 {
        let age = i64::try_from(self.age.as_millis()).unwrap_or(i64::MAX);
        now.millis().saturating_sub(age)
    }
}

/// One refused request as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// Its id (UUIDv7: arrival order).
    pub id: Uuid,
    /// The source's name.
    pub source: String,
    /// Which quota it counts against.
    pub class: Class,
    /// When it came.
    pub received_at: Timestamp,
    /// `signature`, `timestamp`, `invalid_body` or `other`.
    pub reason: String,
    /// What it was answered (401, 400, 413, 422).
    pub status: u16,
    /// The problem's code.
    pub code: String,
    /// What was wrong (never a secret).
    pub detail: String,
    /// Its headers, in order, without the secret-bearing ones.
    pub headers: Vec<(String, String)>,
    /// Its raw body (in a listing, only its first bytes).
    pub body: Vec<u8>,
    /// The body's whole size.
    pub body_bytes: u64,
    /// False when what proved it was not kept (a token header, a cut body).
    pub retryable: bool,
    /// The sender's delivery id, when it could be read (erasure finds it by this).
    pub delivery_id: Option<String>,
}

/// The rejected-log side of a store.
#[async_trait]
pub trait RejectedStore: Send + Sync + 'static {
    /// Keeps `row` and trims its source's class to `bounds`, in one transaction.
    async fn keep(&self, row: RejectedRow, bounds: Bounds) -> Result<(), StoreError>;

    /// A source's entries received at or after `since` (unix ms), newest first, at
    /// most `limit` of each [`Class`] (so that a flood of one hides none of the
    /// other), each body cut to its first `preview` bytes.
    async fn rejected(
        &self,
        source: &str,
        since: i64,
        limit: u32,
        preview: u32,
    ) -> Result<Vec<RejectedRow>, StoreError>;

    /// One entry of a source, whole.
    async fn rejected_one(&self, source: &str, id: Uuid)
    -> Result<Option<RejectedRow>, StoreError>;

    /// The ids of a source's retryable entries received at or after `since`, oldest
    /// first.
    async fn retryable(&self, source: &str, since: i64) -> Result<Vec<Uuid>, StoreError>;

    /// Records how a retried entry was refused again.
    async fn refused_again(&self, row: &RejectedRow) -> Result<(), StoreError>;

    /// Drops an entry (it passed); false when it was not there.
    async fn forget(&self, source: &str, id: Uuid) -> Result<bool, StoreError>;

    /// Drops every entry received before `before` (unix ms); how many.
    async fn purge_rejected(&self, before: i64) -> Result<u64, StoreError>;

    /// Drops a source's entries of one delivery id (erasure); how many.
    async fn forget_delivery(&self, source: &str, delivery_id: &str) -> Result<u64, StoreError>;
}

/// SQL that both backends run as it is. (Placeholders first appear in their
/// order: SQLite numbers them by first appearance.)
pub(crate) mod sql {
    /// Binds: id, source, class, received_at, reason, status, code, detail,
    /// headers, body, body_bytes, retryable, delivery_id.
    pub(crate) const INSERT: &str = "INSERT INTO rejected_requests (id, source, class, \
        received_at, reason, status, code, detail, headers, body, body_bytes, retryable, \
        delivery_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

    /// Binds: source, delivery_id.
    pub(crate) const FORGET_DELIVERY: &str =
        "DELETE FROM rejected_requests WHERE source = $1 AND delivery_id = $2";

    /// Drops what is beyond the bounds of one source's class, always keeping its
    /// newest entry; binds: source, class, count, bytes, oldest received_at.
    pub(crate) const TRIM: &str = "DELETE FROM rejected_requests WHERE id IN (\
        SELECT id FROM (SELECT id, received_at, \
        ROW_NUMBER() OVER (ORDER BY id DESC) AS n, \
        SUM(body_bytes) OVER (ORDER BY id DESC) AS total \
        FROM rejected_requests WHERE source = $1 AND class = $2) AS ranked \
        WHERE n > 1 AND (n > $3 OR total > $4 OR received_at < $5))";

    /// The newest `limit` of each class, newest first; binds: preview bytes,
    /// source, since, limit.
    pub(crate) const LIST: &str = "SELECT id, source, class, received_at, reason, status, \
        code, detail, headers, body_bytes, retryable, delivery_id, substr(body, 1, $1) AS body \
        FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY class ORDER BY id DESC) AS n \
              FROM rejected_requests WHERE source = $2 AND received_at >= $3) AS ranked \
        WHERE n <= $4 ORDER BY id DESC";

    /// Binds: source, id.
    pub(crate) const ONE: &str = "SELECT id, source, class, received_at, reason, status, \
        code, detail, headers, body_bytes, retryable, delivery_id, body \
        FROM rejected_requests WHERE source = $1 AND id = $2";

    /// Binds: source, since.
    pub(crate) const RETRYABLE: &str = "SELECT id FROM rejected_requests \
        WHERE source = $1 AND retryable AND received_at >= $2 ORDER BY id";

    /// Binds: reason, status, code, detail, id.
    pub(crate) const REFUSED_AGAIN: &str = "UPDATE rejected_requests \
        SET reason = $1, status = $2, code = $3, detail = $4 WHERE id = $5";

    /// Binds: source, id.
    pub(crate) const FORGET: &str = "DELETE FROM rejected_requests WHERE source = $1 AND id = $2";

    /// Binds: before.
    pub(crate) const PURGE: &str = "DELETE FROM rejected_requests WHERE received_at < $1";
}

/// The headers as stored: a JSON array of `[name, value]` pairs.
pub(super) fn headers_text(headers: &[(String, String)]) -> String {
    serde_json::to_string(headers).unwrap_or_else(|_| "[]".into())
}

/// Decodes a row of [`sql::LIST`] or [`sql::ONE`] (either backend).
pub(super) fn row(r: &impl super::rows::RowExt) -> Result<RejectedRow, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("rejected_requests.{what}"));
    let class = match r.text("class")? {
        "verified" => Class::Verified,
        _ => Class::Unverified,
    };
    let headers = serde_json::from_str(r.text("headers")?).map_err(|_| corrupt("headers"))?;
    let millis = r.long("received_at")?;
    Ok(RejectedRow {
        id: r.text("id")?.parse().map_err(|_| corrupt("id"))?,
        source: r.text("source")?.to_owned(),
        class,
        received_at: chrono::DateTime::from_timestamp_millis(millis)
            .map(Timestamp)
            .ok_or_else(|| corrupt("received_at"))?,
        reason: r.text("reason")?.to_owned(),
        status: u16::try_from(r.int("status")?).map_err(|_| corrupt("status"))?,
        code: r.text("code")?.to_owned(),
        detail: r.text("detail")?.to_owned(),
        headers,
        body: r.blob("body")?,
        body_bytes: u64::try_from(r.long("body_bytes")?).unwrap_or(0),
        retryable: r.flag("retryable")?,
        delivery_id: r.opt_text("delivery_id")?.map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn entry(class: Class, at: Timestamp, n: u32, bytes: usize) -> RejectedRow {
        RejectedRow {
            id: Uuid::now_v7(),
            source: "src".into(),
            class,
            received_at: at,
            reason: "signature".into(),
            status: 401,
            code: "invalid_signature".into(),
            detail: format!("n={n}"),
            headers: vec![
                ("x-n".into(), n.to_string()),
                ("x-n".into(), "again".into()),
            ],
            body: vec![b'a'; bytes],
            body_bytes: bytes as u64,
            retryable: n % 2 == 0,
            delivery_id: Some(format!("d-{n}")),
        }
    }

    /// What every backend must do with the log.
    async fn contract(name: &str, store: Arc<dyn RejectedStore>) {
        let now = Timestamp::now();
        let bounds = Bounds {
            count: 5,
            bytes: 100,
            age: Duration::from_secs(3600),
        };
        let kept = entry(Class::Verified, now, 0, 10);
        store.keep(kept.clone(), bounds).await.expect("keep");
        // A flood of the other class leaves the verified entry alone.
        for n in 1..=8 {
            store
                .keep(entry(Class::Unverified, now, n, 10), bounds)
                .await
                .expect("keep");
        }
        let all = store.rejected("src", 0, 100, 4).await.expect("list");
        let details: Vec<&str> = all.iter().map(|r| r.detail.as_str()).collect();
        assert_eq!(
            details,
            ["n=8", "n=7", "n=6", "n=5", "n=4", "n=0"],
            "{name}"
        );
        assert_eq!(all[0].body, b"aaaa", "{name}: the preview is cut");
        // The limit is per class: the flood's newest and the verified one.
        let one_each = store.rejected("src", 0, 1, 0).await.expect("list");
        let details: Vec<&str> = one_each.iter().map(|r| r.detail.as_str()).collect();
        assert_eq!(details, ["n=8", "n=0"], "{name}");
        assert_eq!(all[0].body_bytes, 10);
        assert_eq!(all[5].headers, kept.headers, "{name}: headers in order");
        let whole = store.rejected_one("src", kept.id).await.expect("one");
        assert_eq!(whole.as_ref(), Some(&kept), "{name}: kept whole");
        assert!(
            store
                .rejected_one("other", kept.id)
                .await
                .expect("one")
                .is_none()
        );
        // Bytes: a 95-byte body pushes out all but itself and one 10-byte entry…
        store
            .keep(entry(Class::Unverified, now, 10, 85), bounds)
            .await
            .expect("keep");
        let all = store.rejected("src", 0, 100, 0).await.expect("list");
        let details: Vec<&str> = all.iter().map(|r| r.detail.as_str()).collect();
        assert_eq!(
            details,
            ["n=10", "n=8", "n=0"],
            "{name}: 85 + 10 fit in 100, not 85 + 20"
        );
        // …and one larger than the budget is kept alone: the newest always is.
        store
            .keep(entry(Class::Unverified, now, 12, 500), bounds)
            .await
            .expect("keep");
        let unverified: Vec<_> = store.rejected("src", 0, 100, 0).await.expect("list");
        assert_eq!(unverified.len(), 2, "{name}: {unverified:?}");
        // Age: an insert drops what is older than the bounds; a listing skips it.
        let old = Timestamp(now.0 - chrono::Duration::hours(2));
        store
            .keep(entry(Class::Verified, old, 14, 1), bounds)
            .await
            .expect("keep");
        let since = bounds.oldest_kept(now);
        assert_eq!(
            store
                .rejected("src", since, 100, 0)
                .await
                .expect("list")
                .len(),
            2
        );
        // Retryable ids, oldest first; a refusal recorded again; forget.
        let ids = store.retryable("src", since).await.expect("ids");
        assert_eq!(ids, [kept.id, unverified[0].id], "{name}");
        let mut again = kept.clone();
        again.reason = "timestamp".into();
        again.detail = "again".into();
        store.refused_again(&again).await.expect("update");
        let read = store
            .rejected_one("src", kept.id)
            .await
            .expect("one")
            .expect("there");
        assert_eq!(
            (read.reason.as_str(), read.detail.as_str()),
            ("timestamp", "again")
        );
        assert_eq!(
            store.forget_delivery("src", "d-12").await.expect("forget"),
            1,
            "{name}"
        );
        assert!(
            store
                .rejected_one("src", unverified[0].id)
                .await
                .expect("one")
                .is_none()
        );
        assert!(store.forget("src", kept.id).await.expect("forget"));
        assert!(
            !store.forget("src", kept.id).await.expect("forget"),
            "{name}: gone"
        );
        assert_eq!(
            store.purge_rejected(now.millis() + 1).await.expect("purge"),
            1,
            "{name}"
        );
        burst(name, store).await;
    }

    /// Refusals kept at once (SQLite's writer keeps those it receives together in
    /// one transaction with one trim) leave what keeping them one by one leaves:
    /// the newest within the count and bytes, the newest always. On PostgreSQL
    /// each keep trims what was committed when it ran, so a burst keeps all of
    /// those and may leave a few more.
    async fn burst(name: &str, store: Arc<dyn RejectedStore>) {
        let bounds = Bounds {
            count: 7,
            bytes: 60,
            age: Duration::from_secs(3600),
        };
        let row = |n: u32| {
            let mut r = entry(
                Class::Unverified,
                Timestamp::now(),
                n,
                (n as usize * 7) % 23,
            );
            r.source = "burst".into();
            r
        };
        let mut rows: Vec<RejectedRow> = (0..40).map(row).collect();
        let keeps = rows.iter().map(|r| store.keep(r.clone(), bounds));
        for kept in futures_util::future::join_all(keeps).await {
            kept.expect("keep");
        }
        let listed = || async {
            let listed = store.rejected("burst", 0, 100, 0).await.expect("list");
            listed.iter().map(|r| r.id).collect::<Vec<Uuid>>()
        };
        if name == "sqlite" {
            assert_eq!(listed().await, newest_within(&mut rows, bounds), "{name}");
        }
        let last = row(40);
        store.keep(last.clone(), bounds).await.expect("keep");
        rows.push(last);
        let (listed, expected) = (listed().await, newest_within(&mut rows, bounds));
        if name == "sqlite" {
            assert_eq!(listed, expected, "{name}");
        } else {
            // A trim sees fewer rows than there are, never more: it keeps all that
            // the bounds keep, and may leave a few more (the pool runs 4 at once).
            assert!(expected.iter().all(|id| listed.contains(id)), "{name}");
            assert!(listed.len() <= expected.len() + 4, "{name}: {listed:?}");
        }
    }

    /// The ids of `rows` the bounds keep, newest first (the newest always).
    fn newest_within(rows: &mut [RejectedRow], bounds: Bounds) -> Vec<Uuid> {
        rows.sort_by_key(|r| std::cmp::Reverse(r.id));
        let mut total = 0;
        rows.iter()
            .enumerate()
            .take_while(|(i, r)| {
                total += r.body_bytes;
                *i == 0 || (*i < bounds.count as usize && total <= bounds.bytes)
            })
            .map(|(_, r)| r.id)
            .collect()
    }

    #[tokio::test]
    async fn the_sqlite_log_keeps_its_bounds() {
        let dir = tempfile::tempdir().expect("dir");
        let store = crate::store::sqlite::SqliteStore::open(
            &dir.path().join("rejected.db"),
            crate::config::SqliteSynchronous::Normal,
        )
        .await
        .expect("open");
        contract("sqlite", Arc::new(store)).await;
    }

    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn the_postgres_log_keeps_its_bounds() {
        let Some(db) = crate::store::postgres::tests::TestDb::new().await else {
            return;
        };
        let store = crate::store::postgres::PgStore::open(&db.url, 4)
            .await
            .expect("open");
        contract("postgres", Arc::new(store)).await;
    }
}
