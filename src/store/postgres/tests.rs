//! The PostgreSQL store on the real server named by `HOOKBOX_TEST_PG` (for example
//! `postgres://postgres@127.0.0.1:5432`; unset, these tests pass without running,
//! and say so once), each test with a database of its own:
//! the plans of its big queries on filled, analysed tables (retention and the claim
//! read through their indexes only as far as their batch, the list of unfinished
//! events only the backlog), the backlog count, and
//! the outcome finisher's one-by-one fallback.

use sqlx::{Connection, Executor, PgConnection, Row};

use super::{EVENT_COLUMNS, PURGE, PgStore, list_query, replay_query};
use crate::model::Status;
use crate::store::{ClaimStore, ListQuery, ReplayFilter, Store};

fn server() -> String {
    std::env::var("HOOKBOX_TEST_PG").unwrap_or_default()
}

/// A database of its own, dropped (from a thread of its own) when this is.
pub(crate) struct TestDb {
    name: String,
    /// Its URL.
    pub(crate) url: String,
}

impl TestDb {
    /// `None` when `HOOKBOX_TEST_PG` is unset (one line on the terminal says so).
    pub(crate) async fn new() -> Option<Self> {
        if server().is_empty() {
            static ONCE: std::sync::Once = std::sync::Once::new();
            ONCE.call_once(|| {
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: PostgreSQL store tests (set HOOKBOX_TEST_PG to run them)"
                );
            });
            return None;
        }
        let name = format!("hookbox_lib_{}", uuid::Uuid::now_v7().simple());
        admin(&format!("CREATE DATABASE {name}")).await;
        let url = format!("{}/{name}", server());
        Some(Self { name, url })
    }
}

async fn admin(sql: &str) {
    let mut conn = PgConnection::connect(&format!("{}/postgres", server()))
        .await
        .expect("PostgreSQL on 127.0.0.1:5432");
    conn.execute(sqlx::AssertSqlSafe(sql.to_owned()))
        .await
        .expect("admin statement");
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(admin(&sql));
        })
        .join();
    }
}

/// A migrated store whose tables hold what a busy instance keeps: 40,000 terminal
/// events from the last days, 5,000 deliveries of a dead subscriber waiting an hour
/// for their retry, and 50 new ones.
async fn busy_store(db: &TestDb) -> PgStore {
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let fill = "
        INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                            status, created_at, updated_at)
        SELECT gen_random_uuid(), 'old' || g, 't', '{}', '-',
               CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'completed' END,
               now() - (40000 - g) * interval '10 seconds', now()
        FROM generate_series(1, 40000) g;
        INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                            status, created_at, updated_at)
        SELECT gen_random_uuid(), 'dead' || g, 't', '{}', '-', 'processing',
               now() - interval '1 minute', now()
        FROM generate_series(1, 5000) g;
        INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                            status, created_at, updated_at)
        SELECT gen_random_uuid(), 'new' || g, 't', '{}', '-', 'pending', now(), now()
        FROM generate_series(1, 50) g;
        INSERT INTO deliveries (id, event_id, handler, status, attempts, retry_after,
                                created_at, updated_at)
        SELECT gen_random_uuid(), id, 'h',
               CASE WHEN idempotency_key LIKE 'old%' THEN status ELSE 'pending' END,
               CASE WHEN idempotency_key LIKE 'dead%' THEN 1 ELSE 0 END,
               CASE WHEN idempotency_key LIKE 'dead%' THEN now() + interval '1 hour' END,
               created_at, created_at
        FROM events ORDER BY created_at;
        ANALYZE;";
    store
        .pool()
        .execute(sqlx::raw_sql(fill))
        .await
        .expect("fill");
    store
}

/// The plan lines of `EXPLAIN ANALYZE` of `sql` (run in a transaction that is
/// rolled back, so a delete or update changes nothing).
async fn explain_analyze(store: &PgStore, sql: &str, bind: impl Fn(Q<'_>) -> Q<'_>) -> Vec<String> {
    let mut tx = store.pool().begin().await.expect("begin");
    let explain = format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) {sql}");
    let query = bind(sqlx::query(sqlx::AssertSqlSafe(explain)));
    let plan = lines(query.fetch_all(&mut *tx).await.expect("explain"));
    tx.rollback().await.expect("rollback");
    plan
}

/// The text of `EXPLAIN`'s rows, one line each.
fn lines(rows: Vec<sqlx::postgres::PgRow>) -> Vec<String> {
    rows.iter().map(|r| r.get::<String, _>(0)).collect()
}

/// The plan lines of `EXPLAIN ANALYZE` of the claim as the claim's connection runs
/// it: prepared, with the generic plan (`plan_cache_mode = force_generic_plan`),
/// for `limit` rows (in a transaction that is rolled back).
async fn explain_generic_claim(store: &PgStore, limit: i64) -> Vec<String> {
    let sql = super::claim::claim_sql();
    let types = "bigint, bigint, text, text[]";
    let args = format!("{limit}, 30000, 'test', '{{}}'");
    explain_generic(store, &sql, types, &args).await
}

/// The plan lines of `EXPLAIN ANALYZE` of `sql` prepared with parameters of
/// `types`, executed with the generic plan (`plan_cache_mode =
/// force_generic_plan`: what sqlx's cached statements get after five runs) on
/// `args` (SQL literals), in a transaction that is rolled back.
async fn explain_generic(store: &PgStore, sql: &str, types: &str, args: &str) -> Vec<String> {
    let mut conn = store.pool().acquire().await.expect("connection");
    let prepare = format!("PREPARE generic_plan ({types}) AS {sql}");
    conn.execute(sqlx::AssertSqlSafe(prepare))
        .await
        .expect("prepare");
    let mut tx = conn.begin().await.expect("begin");
    tx.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        .await
        .expect("set");
    let explain = format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) EXECUTE generic_plan ({args})");
    let plan = lines(
        sqlx::raw_sql(sqlx::AssertSqlSafe(explain))
            .fetch_all(&mut *tx)
            .await
            .expect("explain"),
    );
    tx.rollback().await.expect("rollback");
    conn.execute("DEALLOCATE generic_plan")
        .await
        .expect("deallocate");
    plan
}

type Q<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// The largest "Rows Removed by Filter" of a plan: rows read and thrown away.
fn discarded(plan: &[String]) -> u64 {
    plan.iter()
        .filter_map(|l| l.split("Rows Removed by Filter: ").nth(1))
        .filter_map(|n| n.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn retention_reads_one_batch_through_the_events_creation_index() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = busy_store(&db).await;
    let cutoff = chrono::Utc::now() - chrono::Duration::hours(1);
    let plan = explain_analyze(&store, PURGE, |q| q.bind(cutoff).bind(1000_i64)).await;
    let text = plan.join("\n");
    assert!(text.contains("Index Scan using events_created"), "{text}");
    assert!(!text.contains("Sort"), "{text}");
    assert!(!text.contains("Seq Scan on events"), "{text}");
    assert!(!text.contains("Seq Scan on deliveries"), "{text}");
    assert!(text.contains("events_pkey"), "{text}");
    assert_eq!(discarded(&plan), 0, "{text}");
    drop(store);
}

#[tokio::test]
async fn listing_unfinished_events_reads_the_backlog_not_the_history() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = busy_store(&db).await;
    let query = ListQuery {
        status: Some(Status::Pending),
        limit: 100,
        ..ListQuery::default()
    };
    let explain = format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) SELECT {EVENT_COLUMNS}");
    let rows = list_query(&explain, &query)
        .build()
        .fetch_all(store.pool())
        .await
        .expect("explain");
    let plan = lines(rows);
    let text = plan.join("\n");
    assert!(!text.contains("Seq Scan on events"), "{text}");
    assert!(!text.contains("Backward using events_pkey"), "{text}");
    // The 5,000 unfinished `processing` events are passed over; the 40,000
    // finished ones are never read.
    assert!(discarded(&plan) <= 5_000, "{text}");
    let page = store.list_events(&query).await.expect("list");
    assert_eq!(page.items.len(), 50);
    assert!(page.items.iter().all(|e| e.status == Status::Pending));
    assert!(page.items.windows(2).all(|w| w[0].id > w[1].id));
    drop(store);
}

/// A page of a replay reads the failed deliveries' index from where the last page
/// ended, also in the generic plan a cached statement gets: no pass over the
/// events.
#[tokio::test]
async fn a_replay_page_reads_its_own_rows() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = busy_store(&db).await;
    let after = "'00000000-0000-0000-0000-000000000000'";
    let all = replay_query(&ReplayFilter::default(), Some(uuid::Uuid::nil()), 100);
    let typed = ReplayFilter {
        event_type: Some("t".into()),
        handler: Some("h".into()),
        ..ReplayFilter::default()
    };
    let by_type = replay_query(&typed, Some(uuid::Uuid::nil()), 100);
    let plans = [
        explain_generic(
            &store,
            all.sql().as_str(),
            "uuid, bigint",
            &format!("{after}, 100"),
        )
        .await,
        explain_generic(
            &store,
            by_type.sql().as_str(),
            "uuid, text, text, bigint",
            &format!("{after}, 'h', 't', 100"),
        )
        .await,
    ];
    for plan in plans {
        let text = plan.join("\n");
        assert!(text.contains("deliveries_dead"), "{text}");
        assert!(!text.contains("Seq Scan"), "{text}");
        assert!(discarded(&plan) == 0, "{text}");
    }
    let replayed = store.replay_page(&typed, None, 100).await.expect("replay");
    assert_eq!(replayed.len(), 100);
    assert!(replayed.windows(2).all(|w| w[0].delivery < w[1].delivery));
    drop(store);
}

/// The claim's plans for `limit` rows: as a one-off statement (the limit known)
/// and as the claim's own connection runs it (the generic plan).
async fn claim_plans(store: &PgStore, limit: i64) -> [Vec<String>; 2] {
    let custom = explain_analyze(store, &super::claim::claim_sql(), |q| {
        q.bind(limit)
            .bind(30_000_i64)
            .bind("test")
            .bind(Vec::<String>::new())
    })
    .await;
    [custom, explain_generic_claim(store, limit).await]
}

/// Asserts that a claim's `plan` walks `deliveries_ready`, scans no table and
/// throws away next to nothing; answers the plan's text.
fn reads_only_what_it_claims(plan: &[String]) -> String {
    let text = plan.join("\n");
    assert!(text.contains("deliveries_ready"), "{text}");
    assert!(!text.contains("Seq Scan on deliveries"), "{text}");
    assert!(
        discarded(plan) < 100,
        "the claim read and discarded rows it did not claim:\n{text}"
    );
    text
}

#[tokio::test]
async fn claims_read_due_work_without_walking_past_waiting_retries() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = busy_store(&db).await;
    for plan in claim_plans(&store, 8).await {
        let text = reads_only_what_it_claims(&plan);
        assert!(text.contains("deliveries_retry"), "{text}");
    }
    let claimed = store
        .claim(8, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 8);
    assert!(claimed.tasks.iter().all(|t| t.attempts == 0));
    drop(store);
}

/// A table filling faster than ANALYZE runs: the statistics still say it is empty.
/// 20,000 never-tried deliveries behind 2,000 live leases of another instance.
/// (The claim once walked past every live lease, and with stale statistics the
/// planner scanned and sorted the whole backlog: 10 ms a claim at 30,000 pending.)
#[tokio::test]
async fn claims_read_only_what_they_take_while_statistics_are_stale() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let fill = "
        ALTER TABLE deliveries SET (autovacuum_enabled = false);
        ALTER TABLE events SET (autovacuum_enabled = false);
        ANALYZE;
        INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                            status, created_at, updated_at)
        SELECT gen_random_uuid(), 'k' || lpad(g::text, 6, '0'), 't', '{}', '-', 'pending',
               now(), now()
        FROM generate_series(1, 22000) g;
        INSERT INTO deliveries (id, event_id, handler, status, locked_by, locked_until,
                                created_at, updated_at)
        SELECT gen_random_uuid(), id, 'h',
               CASE WHEN substr(idempotency_key, 2)::int <= 2000
                    THEN 'processing' ELSE 'pending' END,
               CASE WHEN substr(idempotency_key, 2)::int <= 2000 THEN 'another' END,
               CASE WHEN substr(idempotency_key, 2)::int <= 2000
                    THEN now() + interval '1 hour' END,
               created_at, created_at
        FROM events ORDER BY idempotency_key;";
    store
        .pool()
        .execute(sqlx::raw_sql(fill))
        .await
        .expect("fill");
    for limit in [16_i64, 512] {
        for plan in claim_plans(&store, limit).await {
            let text = reads_only_what_it_claims(&plan);
            // In seq order straight from the index: no bitmap scan and sort of the backlog.
            assert!(text.contains("Index Scan using deliveries_ready"), "{text}");
        }
    }
    let claimed = store
        .claim(512, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim");
    assert_eq!(claimed.tasks.len(), 512);
    drop(store);
}

#[tokio::test]
async fn the_backlog_counts_due_and_running_work_not_waiting_retries() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = busy_store(&db).await;
    assert_eq!(store.backlog().await.expect("backlog"), 50);
    store
        .claim(8, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim");
    assert_eq!(
        store.backlog().await.expect("backlog"),
        50,
        "running work counts"
    );
    store
        .pool()
        .execute(
            "UPDATE deliveries SET retry_after = now() - interval '1 second' \
             WHERE id IN (SELECT id FROM deliveries WHERE attempts = 1 LIMIT 10)",
        )
        .await
        .expect("make retries due");
    assert_eq!(
        store.backlog().await.expect("backlog"),
        60,
        "due retries count"
    );
    drop(store);
}

/// A store holding one event with two deliveries (handlers `a` and `b`), both
/// claimed by it.
async fn two_claimed_deliveries(db: &TestDb) -> (PgStore, Vec<crate::model::DeliveryTask>) {
    claimed_after(
        db,
        "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                             status, created_at, updated_at)
         VALUES (gen_random_uuid(), 'k', 't', '{}', '-', 'pending', now(), now());
         INSERT INTO deliveries (id, event_id, handler, created_at, updated_at)
         SELECT gen_random_uuid(), id, h, now(), now() FROM events, unnest('{a,b}'::text[]) h;",
        2,
    )
    .await
}

/// A store over `db` after `fill` (SQL), with the `n` deliveries it stored claimed.
async fn claimed_after(
    db: &TestDb,
    fill: &'static str,
    n: u32,
) -> (PgStore, Vec<crate::model::DeliveryTask>) {
    let store = PgStore::open(&db.url, 2).await.expect("open");
    store
        .pool()
        .execute(sqlx::raw_sql(fill))
        .await
        .expect("fill");
    let claimed = store
        .claim(n, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim")
        .tasks;
    assert_eq!(u32::try_from(claimed.len()).ok(), Some(n));
    (store, claimed)
}

/// An outcome PostgreSQL refuses (a NUL in text, sent here past the store's
/// cleaning) fails alone; the outcome batched with it is recorded.
#[tokio::test]
async fn a_refused_outcome_fails_alone_not_with_its_batch() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, claimed) = two_claimed_deliveries(&db).await;
    let finish = |task: &crate::model::DeliveryTask, error: &str| crate::model::Finish {
        ordered: false,
        delivery_id: task.delivery_id,
        event_id: task.event_id,
        status: crate::model::Status::Failed,
        attempts: 1,
        last_error: Some(error.to_owned()),
        retry_after: None,
        attempt: None,
    };
    // Both are queued before the finisher runs (this runtime has one thread), so
    // they are one batch.
    let (poison, poisoned) = tokio::sync::oneshot::channel();
    let (clean, cleaned) = tokio::sync::oneshot::channel();
    store
        .finishes
        .try_send((finish(&claimed[0], "nul\0here"), poison))
        .expect("send");
    store
        .finishes
        .try_send((finish(&claimed[1], "plain"), clean))
        .expect("send");
    assert!(poisoned.await.expect("answer").is_err());
    cleaned
        .await
        .expect("answer")
        .expect("the clean outcome is recorded");
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE last_error = 'plain'")
            .fetch_one(store.pool())
            .await
            .expect("count");
    assert_eq!(failed, 1);
    drop(store);
}

/// A finisher of its own over `store`'s database and owner that lingers ten
/// minutes unless `hurry` is told; its sender.
fn lingering_finisher(
    store: &PgStore,
    hurry: std::sync::Arc<tokio::sync::Notify>,
) -> tokio::sync::mpsc::Sender<super::finisher::Request> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let linger = std::time::Duration::from_secs(600);
    let pool = store.pool().clone();
    tokio::spawn(super::finisher::run(
        pool,
        store.owner.clone(),
        rx,
        hurry,
        linger,
    ));
    tx
}

/// A small batch of outcomes lingers for more before it commits, unless one of
/// them is ordered (the next delivery of its key waits for it): then the batch
/// commits at once, lingering or not. Here the finisher lingers ten minutes.
#[tokio::test]
async fn an_ordered_outcome_commits_without_lingering() {
    use std::sync::Arc;
    use std::time::Duration;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, claimed) = two_claimed_deliveries(&db).await;
    let hurry = Arc::new(tokio::sync::Notify::new());
    let tx = lingering_finisher(&store, hurry.clone());
    let finish = |task: &crate::model::DeliveryTask, ordered| crate::model::Finish {
        ordered,
        ..settled_by(task, Status::Completed, 1)
    };
    let (first, then) = (finish(&claimed[0], false), finish(&claimed[1], true));
    let (t, h) = (tx.clone(), hurry.clone());
    let unordered = tokio::spawn(async move { super::finisher::submit(&t, &h, first).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!unordered.is_finished(), "an unordered outcome lingers");
    let ordered = super::finisher::submit(&tx, &hurry, then);
    tokio::time::timeout(Duration::from_secs(60), ordered)
        .await
        .expect("the ordered outcome commits without lingering")
        .expect("recorded");
    tokio::time::timeout(Duration::from_secs(60), unordered)
        .await
        .expect("the lingering batch commits with it")
        .expect("joined")
        .expect("recorded");
    // Alone, an ordered outcome does not linger either (and this finisher is
    // never hurried: its `hurry` is not the one `submit` tells).
    let db = TestDb::new().await.expect("a second database");
    let (store, claimed) = two_claimed_deliveries(&db).await;
    let tx = lingering_finisher(&store, Arc::new(tokio::sync::Notify::new()));
    let alone = super::finisher::submit(&tx, &hurry, finish(&claimed[0], true));
    tokio::time::timeout(Duration::from_secs(60), alone)
        .await
        .expect("an ordered outcome alone commits at once")
        .expect("recorded");
    let done: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE status = 'completed'")
            .fetch_one(store.pool())
            .await
            .expect("count");
    assert_eq!(done, 1);
}

/// The contract's outcome of `task` (`boom {attempts}` unless it completed).
fn settled_by(
    task: &crate::model::DeliveryTask,
    status: crate::model::Status,
    attempts: u32,
) -> crate::model::Finish {
    crate::store::contract::outcome(task.delivery_id, task.event_id, status, attempts)
}

/// The stored status, attempts and last error of `event`.
async fn event_state(store: &PgStore, event: uuid::Uuid) -> (String, i32, Option<String>) {
    sqlx::query_as("SELECT status, attempts, last_error FROM events WHERE id = $1")
        .bind(event)
        .fetch_one(store.pool())
        .await
        .expect("event")
}

/// Migration 0026: intake keeps each event's number of deliveries, and an event
/// with one is settled from its outcome by the rule every event follows (0013):
/// an outcome without an attempt leaves it pending, a retry processing, a dead
/// letter failed, a success completed, each with its attempts and last error — as
/// the settle over all of an event's deliveries says, which an operator's settle
/// (`hookbox_settle`) still runs.
#[tokio::test]
async fn an_event_with_one_delivery_is_settled_from_its_outcome() {
    use crate::model::Status;
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let one = new_event("one", "{}", &["h"]);
    let two = new_event("two", "{}", &["a", "b"]);
    let none = new_event("none", "{}", &[]);
    for e in [&one, &two, &none] {
        store.insert_event(e.clone()).await.expect("insert");
    }
    let counts: Vec<(String, Option<i32>)> = sqlx::query_as(
        "SELECT idempotency_key, delivery_count FROM events ORDER BY idempotency_key",
    )
    .fetch_all(store.pool())
    .await
    .expect("counts");
    assert_eq!(
        counts,
        [
            ("none".into(), Some(0)),
            ("one".into(), Some(1)),
            ("two".into(), Some(2))
        ]
    );
    let claim = || async {
        store
            .claim(3, std::time::Duration::from_secs(30), &[])
            .await
            .expect("claim")
            .tasks
    };
    let mine = |tasks: Vec<crate::model::DeliveryTask>| {
        tasks
            .into_iter()
            .find(|t| t.event_id == one.id)
            .expect("claimed")
    };
    let steps = [
        // No attempt ran (its handler went away, say): still pending.
        (Status::Pending, 0, ("pending", 0, Some("boom 0"))),
        (Status::Pending, 1, ("processing", 1, Some("boom 1"))),
        (Status::Failed, 2, ("failed", 2, Some("boom 2"))),
    ];
    for (status, attempts, (want, n, error)) in steps {
        let task = mine(claim().await);
        store
            .finish(settled_by(&task, status, attempts))
            .await
            .expect("finish");
        let got = event_state(&store, one.id).await;
        assert_eq!(
            got,
            (want.to_owned(), n, error.map(str::to_owned)),
            "after {status:?}"
        );
        // The settle over all its deliveries agrees.
        sqlx::query("SELECT hookbox_settle($1)")
            .bind(vec![one.id])
            .execute(store.pool())
            .await
            .expect("settle");
        assert_eq!(
            event_state(&store, one.id).await,
            got,
            "hookbox_settle after {status:?}"
        );
    }
    sqlx::query("UPDATE deliveries SET status = 'pending' WHERE event_id = $1")
        .bind(one.id)
        .execute(store.pool())
        .await
        .expect("replayed");
    let task = mine(claim().await);
    store
        .finish(settled_by(&task, Status::Completed, 3))
        .await
        .expect("finish");
    // A success keeps the last error, as the delivery does.
    assert_eq!(
        event_state(&store, one.id).await,
        ("completed".into(), 3, Some("boom 2".into()))
    );
    drop(store);
}

/// An event with two deliveries is still settled from both (0013), under its lock:
/// one completed leaves it processing, both completed complete it. And an
/// outcome whose lease was lost changes neither the delivery nor its one-delivery
/// event, which the instance that holds the delivery now settles when it records
/// the outcome. (Before 0026 every event of the batch was settled again from the
/// table, so this one became `processing`; now it stays as the last outcome left
/// it, `pending` here, as a claim leaves an event.)
#[tokio::test]
async fn several_deliveries_settle_from_all_and_a_lost_lease_leaves_its_event_alone() {
    use crate::model::Status;
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let two = new_event("two", "{}", &["a", "b"]);
    let one = new_event("one", "{}", &["h"]);
    for e in [&two, &one] {
        store.insert_event(e.clone()).await.expect("insert");
    }
    let tasks = store
        .claim(3, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim")
        .tasks;
    assert_eq!(tasks.len(), 3);
    let of_two: Vec<_> = tasks.iter().filter(|t| t.event_id == two.id).collect();
    store
        .finish(settled_by(of_two[0], Status::Completed, 1))
        .await
        .expect("finish");
    assert_eq!(
        event_state(&store, two.id).await,
        ("processing".into(), 1, None)
    );
    store
        .finish(settled_by(of_two[1], Status::Completed, 1))
        .await
        .expect("finish");
    assert_eq!(
        event_state(&store, two.id).await,
        ("completed".into(), 1, None)
    );

    let lost = tasks
        .iter()
        .find(|t| t.event_id == one.id)
        .expect("claimed");
    sqlx::query("UPDATE deliveries SET locked_by = 'another instance' WHERE id = $1")
        .bind(lost.delivery_id)
        .execute(store.pool())
        .await
        .expect("taken over");
    store
        .finish(settled_by(lost, Status::Failed, 1))
        .await
        .expect("finish");
    let delivery: (String, i32) =
        sqlx::query_as("SELECT status, attempts FROM deliveries WHERE id = $1")
            .bind(lost.delivery_id)
            .fetch_one(store.pool())
            .await
            .expect("delivery");
    assert_eq!(delivery, ("processing".into(), 0));
    assert_eq!(
        event_state(&store, one.id).await,
        ("pending".into(), 0, None)
    );
    drop(store);
}

/// One clock (issue 13, item 4): a retry's due time is the database's `now()` plus
/// the delay the worker chose, whatever this instance's clock says. The instance's
/// clock is one hour ahead here: its `retry_after` (its now + 10 s) is stored as
/// the database's now + 10 s, not an hour and 10 s away.
#[tokio::test]
async fn retries_are_due_on_the_database_clock() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    store
        .pool()
        .execute(sqlx::raw_sql(
            "INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                                 status, created_at, updated_at)
             VALUES (gen_random_uuid(), 'k', 't', '{}', '-', 'pending', now(), now());
             INSERT INTO deliveries (id, event_id, handler, created_at, updated_at)
             SELECT gen_random_uuid(), id, 'h', now(), now() FROM events;",
        ))
        .await
        .expect("fill");
    let claimed = store
        .claim(1, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim")
        .tasks;
    assert_eq!(claimed.len(), 1);
    let skewed = crate::model::Timestamp(chrono::Utc::now() + chrono::Duration::hours(1));
    let finish = crate::model::Finish {
        ordered: false,
        delivery_id: claimed[0].delivery_id,
        event_id: claimed[0].event_id,
        status: crate::model::Status::Pending,
        attempts: 1,
        last_error: Some("503".to_owned()),
        retry_after: Some(crate::model::Timestamp(
            skewed.0 + chrono::Duration::seconds(10),
        )),
        attempt: None,
    };
    let recorded = super::finisher::record(store.pool(), &store.owner, &[&finish], skewed)
        .await
        .expect("record");
    assert_eq!(recorded, 1);
    let due_in: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM retry_after - now())::float8 FROM deliveries",
    )
    .fetch_one(store.pool())
    .await
    .expect("due");
    assert!(
        (8.0..=10.5).contains(&due_in),
        "due in {due_in} s on the database's clock"
    );
    drop(store);
}

/// A new event of type `t` with one delivery per handler (for the store tests and
/// the claimer's).
pub(crate) fn new_event(key: &str, payload: &str, handlers: &[&str]) -> crate::model::NewEvent {
    crate::model::NewEvent {
        id: uuid::Uuid::now_v7(),
        idempotency_key: key.into(),
        event_type: "t".into(),
        payload: payload.into(),
        payload_sha256: format!("sha-of-{payload}"),
        created_at: crate::model::Timestamp::now(),
        source: None,
        trace: None,
        deliveries: handlers
            .iter()
            .map(|h| crate::model::NewDelivery {
                id: uuid::Uuid::now_v7(),
                handler: (*h).into(),
                ordering_value: None,
            })
            .collect(),
        routing_version: 0,
        claim_lease: None,
    }
}

/// Claimed at intake: a delivery without an ordering value is stored `processing`
/// under this instance's lease (its `updated_at` is its creation: no claim wrote
/// it), an ordered one `pending` for the claim; the claim takes only the latter,
/// and the outcome of the former is recorded as any claimed delivery's.
#[tokio::test]
async fn deliveries_claimed_at_intake_are_stored_held_by_this_instance() {
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let mut event = new_event("k", "{}", &["free", "ordered"]);
    event.deliveries[1].ordering_value = Some("v".into());
    event.claim_lease = Some(std::time::Duration::from_secs(30));
    assert!(
        store
            .insert_event(event.clone())
            .await
            .expect("insert")
            .created
    );
    let rows = sqlx::query(
        "SELECT handler, status, locked_by,
                extract(epoch FROM locked_until - now())::float8 AS lease_left,
                updated_at = created_at AS unclaimed
         FROM deliveries ORDER BY handler",
    )
    .fetch_all(store.pool())
    .await
    .expect("deliveries");
    let row = |i: usize| {
        let r = &rows[i];
        (
            r.get::<String, _>("handler"),
            r.get::<String, _>("status"),
            r.get::<Option<String>, _>("locked_by"),
            r.get::<Option<f64>, _>("lease_left"),
            r.get::<bool, _>("unclaimed"),
        )
    };
    let (handler, status, owner, lease_left, unclaimed) = row(0);
    assert_eq!((handler.as_str(), status.as_str()), ("free", "processing"));
    assert_eq!(owner.as_deref(), Some(store.owner()));
    let lease_left = lease_left.expect("a lease");
    assert!((25.0..=30.0).contains(&lease_left), "{lease_left} s left");
    assert!(unclaimed, "no claim wrote it");
    let (handler, status, owner, lease_left, _) = row(1);
    assert_eq!((handler.as_str(), status.as_str()), ("ordered", "pending"));
    assert_eq!((owner, lease_left), (None, None));

    let claimed = store
        .claim(10, std::time::Duration::from_secs(30), &[])
        .await
        .expect("claim")
        .tasks;
    let handlers: Vec<&str> = claimed.iter().map(|t| t.handler.as_str()).collect();
    assert_eq!(handlers, ["ordered"]);
    for (handler, delivery) in [
        ("free", event.deliveries[0].id),
        ("ordered", claimed[0].delivery_id),
    ] {
        store
            .finish(crate::model::Finish {
                ordered: false,
                delivery_id: delivery,
                event_id: event.id,
                status: crate::model::Status::Completed,
                attempts: 1,
                last_error: None,
                retry_after: None,
                attempt: None,
            })
            .await
            .unwrap_or_else(|e| panic!("finish {handler}: {e}"));
    }
    let status: String = sqlx::query_scalar("SELECT status FROM events")
        .fetch_one(store.pool())
        .await
        .expect("event");
    assert_eq!(status, "completed");
}

/// Group commit keeps intake's answers: many events at once (one batch or a few),
/// one key sent three times in them (one event: one new, the same payload counted,
/// another payload refused), every other one new with its delivery.
#[tokio::test]
async fn a_batch_answers_each_event_as_one_at_a_time_did() {
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 4).await.expect("open");
    let mut calls = Vec::new();
    for n in 0..200 {
        let s = store.clone();
        calls.push(tokio::spawn(async move {
            s.insert_event(new_event(&format!("k{n}"), "{}", &["h"]))
                .await
        }));
    }
    let same = [
        new_event("dup", "{\"a\":1}", &["h"]),
        new_event("dup", "{\"a\":1}", &["h"]),
        new_event("dup", "{\"a\":2}", &["h"]),
    ];
    let dups: Vec<_> = same
        .into_iter()
        .map(|e| {
            let s = store.clone();
            tokio::spawn(async move { s.insert_event(e).await })
        })
        .collect();
    for call in calls {
        assert!(call.await.expect("task").expect("stored").created);
    }
    let mut answers = Vec::new();
    for d in dups {
        answers.push(d.await.expect("task").expect("stored"));
    }
    let created: Vec<_> = answers.iter().filter(|a| a.created).collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    let id = created[0].event.id;
    assert!(answers.iter().all(|a| a.event.id == id), "{answers:?}");
    let count = |sql: &str| {
        let pool = store.pool().clone();
        let sql = sql.to_owned();
        async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .expect("count")
        }
    };
    assert_eq!(count("SELECT count(*) FROM events").await, 201);
    assert_eq!(count("SELECT count(*) FROM deliveries").await, 201);
    // The retries with the stored payload were counted; the other payload was not.
    let stored: String =
        sqlx::query_scalar("SELECT payload FROM events WHERE idempotency_key = 'dup'")
            .fetch_one(store.pool())
            .await
            .expect("payload");
    let expected = if stored == "{\"a\":1}" { 2 } else { 1 };
    let received =
        count("SELECT received_count::int8 FROM events WHERE idempotency_key = 'dup'").await;
    assert_eq!(received, expected, "stored {stored}");
    drop(store);
}

/// An event routed before another instance changed the subscribers is refused
/// (nothing stored) with [`StoreError::StaleRouting`](crate::store::StoreError);
/// routed with the current version, it is stored.
#[tokio::test]
async fn an_event_routed_with_old_subscribers_is_refused() {
    use crate::store::{Store, StoreError};
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 2).await.expect("open");
    let (_, before) = store.routing().await.expect("routing");
    let now = crate::model::Timestamp::now();
    let subscriber = crate::model::Subscriber {
        name: "s".into(),
        event_types: vec!["t".into()],
        url: "https://example.com/h".into(),
        secret: None,
        ordering_key: None,
        max_attempts: None,
        backoff: None,
        max_in_flight: None,
        rate_limit: None,
        disable_after: None,
        filter: None,
        transform: None,
        active: true,
        created_at: now,
        updated_at: now,
    };
    assert!(store.insert_subscriber(subscriber).await.expect("insert"));
    let (subscribers, after) = store.routing().await.expect("routing");
    assert_eq!(subscribers.len(), 1);
    assert!(after > before, "{before} -> {after}");
    let mut stale = new_event("k", "{}", &[]);
    stale.routing_version = before;
    assert!(matches!(
        store.insert_event(stale.clone()).await,
        Err(StoreError::StaleRouting)
    ));
    let none: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert_eq!(none, 0);
    stale.routing_version = after;
    assert!(store.insert_event(stale).await.expect("stored").created);
    drop(store);
}

/// The attempt row is written with its outcome, and only while this instance holds
/// the lease: an outcome recorded after another instance took the delivery over
/// leaves no row (that instance runs and records the attempt).
#[tokio::test]
async fn attempts_are_recorded_only_with_an_outcome_that_is() {
    use crate::model::{Attempt, AttemptOutcome, Finish, Status};
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, claimed) = two_claimed_deliveries(&db).await;
    let finish = |task: &crate::model::DeliveryTask| Finish {
        ordered: false,
        delivery_id: task.delivery_id,
        event_id: task.event_id,
        status: Status::Completed,
        attempts: 1,
        last_error: None,
        retry_after: None,
        attempt: Some(Attempt {
            handler: task.handler.clone(),
            attempt: 1,
            started_at: chrono::Utc::now(),
            duration_ms: 7,
            outcome: AttemptOutcome::Completed,
            response_status: Some(204),
            response_body: None,
            request: None,
            error: None,
        }),
    };
    // The second delivery's lease went to another instance.
    sqlx::query("UPDATE deliveries SET locked_by = 'another' WHERE id = $1")
        .bind(claimed[1].delivery_id)
        .execute(store.pool())
        .await
        .expect("steal");
    store.finish(finish(&claimed[0])).await.expect("finish");
    store.finish(finish(&claimed[1])).await.expect("finish");
    let attempts = store
        .list_attempts(claimed[0].event_id)
        .await
        .expect("attempts");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].handler, claimed[0].handler);
    assert_eq!(attempts[0].response_status, Some(204));
    assert_eq!(attempts[0].duration_ms, 7);
    assert_eq!(attempts[0].outcome, AttemptOutcome::Completed);
    drop(store);
}

/// Retention takes an event's deliveries and attempts with it (migration 0012
/// dropped the cascading foreign keys; the purge deletes all three itself).
#[tokio::test]
async fn retention_removes_deliveries_and_attempts_with_their_event() {
    use crate::model::{Attempt, AttemptOutcome, Finish, Status, Timestamp};
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, claimed) = two_claimed_deliveries(&db).await;
    let event = claimed[0].event_id;
    for task in &claimed {
        let attempt = Attempt {
            handler: task.handler.clone(),
            attempt: 1,
            started_at: chrono::Utc::now(),
            duration_ms: 3,
            outcome: AttemptOutcome::Completed,
            response_status: None,
            response_body: None,
            request: None,
            error: None,
        };
        store
            .finish(Finish {
                ordered: false,
                delivery_id: task.delivery_id,
                event_id: event,
                status: Status::Completed,
                attempts: 1,
                last_error: None,
                retry_after: None,
                attempt: Some(attempt),
            })
            .await
            .expect("finish");
    }
    let rows = |table: &'static str| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {table} WHERE event_id = $1"
            )))
            .bind(event)
            .fetch_one(&pool)
            .await
            .expect("count")
        }
    };
    assert_eq!((rows("deliveries").await, rows("attempts").await), (2, 2));
    let future = Timestamp(chrono::Utc::now() + chrono::Duration::hours(1));
    assert_eq!(store.purge(future, 10).await.expect("purge"), 1);
    assert_eq!((rows("deliveries").await, rows("attempts").await), (0, 0));
    assert!(store.event(event).await.expect("event").is_none());
}

/// A young database gets its statistics from hookbox, not a minute later from
/// autovacuum: after a few thousand events the tables have been analysed (and the
/// claim's plan knows the deliveries are there).
#[tokio::test]
async fn young_tables_are_analysed_as_they_fill() {
    use crate::store::Store;
    let Some(db) = TestDb::new().await else {
        return;
    };
    let store = PgStore::open(&db.url, 4).await.expect("open");
    let analysed = || {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT analyze_count FROM pg_stat_user_tables \
                 WHERE relname = 'deliveries'",
            )
            .fetch_one(&pool)
            .await
            .expect("pg_stat_user_tables")
        }
    };
    let before = analysed().await;
    // Waves of 1,000 events a little over a second apart, until the table is
    // analysed: its change count reaches pg_stat_user_tables up to a second after
    // the commits, so the look at one thousand may still read too few.
    let mut inserted = 0;
    while analysed().await == before {
        assert!(
            inserted < 10_000,
            "deliveries not analysed after {inserted} events"
        );
        let mut calls = Vec::new();
        for n in inserted..inserted + 1_000 {
            let s = store.clone();
            calls.push(tokio::spawn(async move {
                s.insert_event(new_event(&format!("k{n}"), "{}", &["h"]))
                    .await
            }));
        }
        for call in calls {
            call.await.expect("task").expect("stored");
        }
        inserted += 1_000;
        tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    }
    let tuples: f32 =
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'deliveries'")
            .fetch_one(store.pool())
            .await
            .expect("pg_class");
    assert!(tuples >= 1_000.0, "reltuples {tuples}");
    // On a small sample: a histogram of at most 11 bounds (PostgreSQL's default
    // target would keep up to 101).
    let bounds: i32 = sqlx::query_scalar(
        "SELECT array_length(histogram_bounds::text::text[], 1) FROM pg_stats \
         WHERE tablename = 'deliveries' AND attname = 'seq'",
    )
    .fetch_one(store.pool())
    .await
    .expect("pg_stats");
    assert!(bounds <= 11, "{bounds} histogram bounds");
}

/// A migrated store whose tables were analysed while empty (the statistics the
/// finisher's cached plan meets in production), then given 512 events with one
/// delivery each, all claimed by this store: a full batch of outcomes to record.
async fn a_full_batch_claimed(db: &TestDb) -> (PgStore, Vec<crate::model::DeliveryTask>) {
    claimed_after(
        db,
        "ANALYZE;
         INSERT INTO events (id, idempotency_key, event_type, payload, payload_sha256,
                             status, created_at, updated_at)
         SELECT gen_random_uuid(), 'k' || g, 't', '{}', '-', 'pending', now(), now()
         FROM generate_series(1, 512) g;
         INSERT INTO deliveries (id, event_id, handler, created_at, updated_at)
         SELECT gen_random_uuid(), id, 'h', now(), now() FROM events;",
        512,
    )
    .await
}

/// A full batch of outcomes (512, on tables analysed while idle: the statistics
/// the finisher's cached plan meets in production) is recorded whole, and the
/// join planner setting the recording turns off for one statement (migration
/// 0025) is the caller's again afterwards, whatever it was.
#[tokio::test]
async fn a_full_batch_of_outcomes_is_recorded_and_the_planner_is_left_as_found() {
    use crate::model::{Attempt, AttemptOutcome, Finish, Status, Timestamp};
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, claimed) = a_full_batch_claimed(&db).await;
    let finishes: Vec<Finish> = claimed
        .iter()
        .map(|t| Finish {
            ordered: false,
            delivery_id: t.delivery_id,
            event_id: t.event_id,
            status: Status::Completed,
            attempts: 1,
            last_error: None,
            retry_after: None,
            attempt: Some(Attempt {
                handler: t.handler.clone(),
                attempt: 1,
                started_at: chrono::Utc::now(),
                duration_ms: 1,
                outcome: AttemptOutcome::Completed,
                response_status: None,
                response_body: None,
                request: None,
                error: None,
            }),
        })
        .collect();
    let batch: Vec<&Finish> = finishes.iter().collect();
    let recorded = super::finisher::record(store.pool(), &store.owner, &batch, Timestamp::now())
        .await
        .expect("record");
    assert_eq!(recorded, 512);
    let counts: (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM deliveries WHERE status = 'completed'),
                (SELECT count(*) FROM events WHERE status = 'completed'),
                (SELECT count(*) FROM attempts)",
    )
    .fetch_one(store.pool())
    .await
    .expect("counts");
    assert_eq!(counts, (512, 512, 512));

    let mut tx = store.pool().begin().await.expect("begin");
    for before in ["off", "on"] {
        tx.execute(sqlx::AssertSqlSafe(format!(
            "SET LOCAL enable_nestloop = {before}"
        )))
        .await
        .expect("set");
        let empty = "SELECT hookbox_finish_attempts('o', '{}', '{}', '{}', '{}', '{}', '{}', \
                     '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}')";
        let none: i32 = sqlx::query_scalar(empty)
            .fetch_one(&mut *tx)
            .await
            .expect("empty batch");
        assert_eq!(none, 0);
        let after: String = sqlx::query_scalar("SELECT current_setting('enable_nestloop')")
            .fetch_one(&mut *tx)
            .await
            .expect("setting");
        assert_eq!(after, before);
    }
    tx.rollback().await.expect("rollback");
    drop(store);
}

/// Recording a batch of outcomes joins the batch to its deliveries by hash, not
/// by a nested loop that reads the whole batch once per delivery (migration
/// 0025): the plan of the statement inside `hookbox_finish_attempts`, as its
/// cached generic plan runs it on tables analysed while idle, taken with
/// auto_explain through `psql` (the only client here that shows the notices it
/// sends).
#[tokio::test]
async fn recording_outcomes_reads_the_batch_once() {
    let Some(db) = TestDb::new().await else {
        return;
    };
    let (store, _claimed) = a_full_batch_claimed(&db).await;
    let n = "array_fill(1, ARRAY[512])";
    let none = |t: &str| format!("array_fill(NULL::{t}, ARRAY[512])");
    let record = format!(
        "SELECT hookbox_finish_attempts('{owner}', \
         ARRAY(SELECT id FROM deliveries ORDER BY id), \
         ARRAY(SELECT event_id FROM deliveries ORDER BY event_id), \
         array_fill('completed'::text, ARRAY[512]), {n}, {text}, {ts}, \
         array_fill('h'::text, ARRAY[512]), {n}, array_fill(now(), ARRAY[512]), \
         array_fill(1::bigint, ARRAY[512]), array_fill('completed'::text, ARRAY[512]), \
         {int}, {text}, {text}, {text})",
        owner = store.owner,
        text = none("text"),
        ts = none("timestamptz"),
        int = none("integer"),
    );
    let out = std::process::Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &db.url])
        .args(["-c", "LOAD 'auto_explain'"])
        .args(["-c", "SET auto_explain.log_min_duration = 0"])
        .args(["-c", "SET auto_explain.sample_rate = 1"])
        .args(["-c", "SET auto_explain.log_nested_statements = on"])
        .args(["-c", "SET auto_explain.log_analyze = on"])
        .args(["-c", "SET auto_explain.log_level = notice"])
        .args(["-c", "SET plan_cache_mode = force_generic_plan"])
        .args(["-c", &record])
        .output()
        .expect("psql (the PostgreSQL client) runs");
    let notices = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{notices}");
    assert!(
        notices.contains("Update on deliveries"),
        "auto_explain showed no plan of the update: {notices}"
    );
    let rescanned = notices
        .lines()
        .filter_map(|l| l.split("Rows Removed by Join Filter: ").nth(1))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    assert!(
        rescanned < 512,
        "the batch was read once per delivery ({rescanned} rows removed by a join filter): {notices}"
    );
    drop(store);
}
