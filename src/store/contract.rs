//! The [`Store`] contract, driven on both backends by one test: what an
//! implementation must do, whichever database is behind it. The SQLite store runs
//! on a file of its own; the PostgreSQL store on a database of its own on the
//! server named by `HOOKBOX_TEST_PG` (unset: that half is skipped, with one line).
//!
//! Deliveries are taken before their outcome is recorded as workers take them: on
//! SQLite with [`Store::start`], on PostgreSQL by a [`ClaimStore::claim`] (its
//! `finish` records only what this instance holds).

use crate::trace_context::TraceContext;
use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use super::{ClaimStore, ListQuery, ReplayFilter, Store};
use crate::model::{
    Attempt, AttemptOutcome, Finish, NewDelivery, NewEvent, Status, Subscriber, Timestamp,
};

/// A store under test, and how its worker takes a delivery.
struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
    claims: Option<Arc<dyn ClaimStore>>,
}

impl Backend {
    /// Takes `delivery` of `event` as a worker would before running it (on
    /// PostgreSQL the oldest due delivery, which the contract arranges it to be).
    async fn take(&self, delivery: Uuid, event: Uuid) {
        match &self.claims {
            Some(claims) => {
                let claimed = claims
                    .claim(1, Duration::from_secs(60), &[])
                    .await
                    .expect("claim");
                assert!(
                    claimed.tasks.iter().any(|t| t.delivery_id == delivery),
                    "{}: {delivery} not claimed",
                    self.name
                );
            }
            None => self.store.start(delivery, event).await.expect("start"),
        }
    }

    /// Waits (generously: the machine is loaded) until `event` has `status`; the
    /// settles of some stores return before their commit.
    async fn await_status(&self, event: Uuid, status: Status) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = self
                .store
                .event(event)
                .await
                .expect("event")
                .map(|e| e.status);
            if now == Some(status) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: event {event} is {now:?}, not {status:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn new_event(key: &str, payload: &str, handlers: &[&str]) -> NewEvent {
    NewEvent {
        id: Uuid::now_v7(),
        idempotency_key: key.into(),
        event_type: "order.created".into(),
        payload: payload.into(),
        payload_sha256: format!("sha-of-{payload}"),
        created_at: Timestamp::now(),
        source: None,
        trace: Some(crate::trace_context::TraceContext::accept(
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("vendor=1"),
        )),
        routing_version: 0,
        claim_lease: None,
        deliveries: handlers
            .iter()
            .map(|h| NewDelivery {
                id: Uuid::now_v7(),
                handler: (*h).into(),
                ordering_value: None,
            })
            .collect(),
    }
}

/// An outcome of `delivery` with `attempts` attempts made: a retry due a second ago,
/// an error `boom {attempts}` unless it completed, no attempt row.
pub(super) fn outcome(delivery: Uuid, event: Uuid, status: Status, attempts: u32) -> Finish {
    let past = Timestamp(Timestamp::now().0 - chrono::Duration::seconds(1));
    Finish {
        ordered: false,
        delivery_id: delivery,
        event_id: event,
        status,
        attempts,
        last_error: (status != Status::Completed).then(|| format!("boom {attempts}")),
        retry_after: (status == Status::Pending).then_some(past),
        attempt: None,
    }
}

fn subscriber(name: &str, url: &str) -> Subscriber {
    Subscriber {
        name: name.into(),
        event_types: vec!["order.*".into()],
        url: url.into(),
        secret: Some("s3cret".into()),
        ordering_key: None,
        max_attempts: Some(3),
        backoff: Some(vec!["1s".into(), "5s".into()]),
        max_in_flight: Some(2),
        rate_limit: Some("20/s".into()),
        disable_after: Some("72h".into()),
        filter: Some(serde_json::json!({"payload": {"total": {"$gt": 100}}})),
        transform: Some("function handler(w) { return w; }".into()),
        active: true,
        created_at: Timestamp::now(),
        updated_at: Timestamp::now(),
    }
}

/// Intake: a new key is stored, a retry (same type and payload) is counted on the
/// event holding the key, another payload under the key changes nothing.
async fn intake(b: &Backend) -> NewEvent {
    let first = new_event("key-a", r#"{"n":1}"#, &["h1"]);
    let stored = b.store.insert_event(first.clone()).await.expect("insert");
    assert!(stored.created, "{}", b.name);
    assert_eq!(stored.event.id, first.id);
    assert_eq!(stored.event.status, Status::Pending);
    assert_eq!(stored.event.received_count, 1);
    assert!(
        b.store.recent_key("key-a").is_none(),
        "{}: a new key is remembered from its first retry on, not before",
        b.name
    );

    let retry = new_event("key-a", r#"{"n":1}"#, &["h1"]);
    let again = b.store.insert_event(retry.clone()).await.expect("retry");
    assert!(!again.created, "{}", b.name);
    assert_eq!(again.event.id, first.id, "{}", b.name);
    assert_eq!(again.event.received_count, 2, "{}", b.name);

    let other = new_event("key-a", r#"{"n":2}"#, &["h1"]);
    let conflict = b.store.insert_event(other).await.expect("conflict");
    assert!(!conflict.created);
    assert_eq!(conflict.event.id, first.id);
    assert_eq!(conflict.event.payload_sha256, first.payload_sha256);
    assert_eq!(
        conflict.event.received_count, 2,
        "{}: a 422 is not counted",
        b.name
    );

    let found = b.store.find_key("key-a").await.expect("find");
    assert_eq!(found.map(|s| (s.id, s.received_count)), Some((first.id, 2)));
    assert!(
        b.store
            .find_key("no-such-key")
            .await
            .expect("find")
            .is_none()
    );

    let view = b.store.event(first.id).await.expect("event").expect("some");
    assert_eq!(view.idempotency_key, "key-a");
    assert_eq!(
        view.trace_id.as_deref(),
        Some("4bf92f3577b34da6a3ce929d0e0e4736"),
        "{}: the trace is kept",
        b.name
    );
    let task = b
        .store
        .delivery_task(first.deliveries[0].id)
        .await
        .expect("task")
        .expect("some");
    let place = |t: &Option<TraceContext>| {
        t.as_ref()
            .map(|t| (t.traceparent(), t.tracestate().map(str::to_owned)))
    };
    assert_eq!(
        place(&task.trace),
        place(&first.trace),
        "{}: a worker gets the event's trace",
        b.name
    );
    assert_eq!(view.event_type, "order.created");
    assert_eq!(view.status, Status::Pending);
    assert_eq!(view.created_at, first.created_at, "{}", b.name);
    assert_eq!(view.last_received_at, retry.created_at, "{}", b.name);
    assert_eq!(view.received_count, 2);
    assert_eq!(view.attempts, 0);
    assert_eq!(view.deliveries.len(), 1);
    assert_eq!(view.deliveries[0].handler, "h1");
    assert_eq!(view.deliveries[0].status, Status::Pending);
    let by_key = b.store.event_by_key("key-a").await.expect("by key");
    assert_eq!(by_key.map(|v| v.id), Some(first.id));
    assert!(
        b.store
            .event(Uuid::now_v7())
            .await
            .expect("event")
            .is_none()
    );
    first
}

/// Listing: newest first, filtered, paged with a cursor.
async fn listing(b: &Backend, first: &NewEvent) -> NewEvent {
    let unrouted = new_event("key-b", "{}", &[]);
    b.store
        .insert_event(unrouted.clone())
        .await
        .expect("insert");
    let waiting = new_event("key-c", "{}", &["h1", "h2"]);
    b.store.insert_event(waiting.clone()).await.expect("insert");
    b.await_status(unrouted.id, Status::Completed).await;

    let page = |limit, before| ListQuery {
        limit,
        before,
        ..ListQuery::default()
    };
    let one = b.store.list_events(&page(2, None)).await.expect("list");
    let ids: Vec<Uuid> = one.items.iter().map(|e| e.id).collect();
    assert_eq!(ids, [waiting.id, unrouted.id], "{}", b.name);
    assert_eq!(one.items[0].deliveries.len(), 2);
    let cursor = one.next_cursor.expect("a next page");
    let before = Some(cursor.parse().expect("uuid cursor"));
    let two = b.store.list_events(&page(2, before)).await.expect("list");
    let ids: Vec<Uuid> = two.items.iter().map(|e| e.id).collect();
    assert_eq!(ids, [first.id], "{}", b.name);
    assert_eq!(two.next_cursor, None);

    let completed = ListQuery {
        status: Some(Status::Completed),
        ..page(10, None)
    };
    let done = b.store.list_events(&completed).await.expect("list");
    assert_eq!(done.items.len(), 1);
    assert_eq!(done.items[0].id, unrouted.id);
    let pending = |limit, before| ListQuery {
        status: Some(Status::Pending),
        ..page(limit, before)
    };
    let unfinished = b.store.list_events(&pending(10, None)).await.expect("list");
    let ids: Vec<Uuid> = unfinished.items.iter().map(|e| e.id).collect();
    assert_eq!(ids, [waiting.id, first.id], "{}", b.name);
    let older = b.store.list_events(&pending(1, Some(waiting.id))).await;
    let ids: Vec<Uuid> = older.expect("list").items.iter().map(|e| e.id).collect();
    assert_eq!(ids, [first.id], "{}", b.name);
    let typed = ListQuery {
        event_type: Some("other.type".into()),
        ..page(10, None)
    };
    assert!(
        b.store
            .list_events(&typed)
            .await
            .expect("list")
            .items
            .is_empty()
    );
    waiting
}

/// Outcomes: a retry, a dead letter, a replay, then success.
async fn outcomes(b: &Backend, first: &NewEvent) {
    let (d, e) = (first.deliveries[0].id, first.id);
    let task = b.store.delivery_task(d).await.expect("task").expect("some");
    assert_eq!(
        (task.event_id, task.handler.as_str(), task.attempts),
        (e, "h1", 0)
    );
    assert_eq!(&*task.payload, r#"{"n":1}"#);
    assert_eq!(task.idempotency_key, "key-a");

    b.take(d, e).await;
    b.store
        .finish(outcome(d, e, Status::Pending, 1))
        .await
        .expect("finish");
    let view = b.store.event(e).await.expect("event").expect("some");
    assert_eq!(view.status, Status::Processing, "{}: a retry waits", b.name);
    assert_eq!(view.attempts, 1);
    assert_eq!(view.last_error.as_deref(), Some("boom 1"));
    assert_eq!(view.deliveries[0].attempts, 1);
    assert!(view.deliveries[0].retry_after.is_some());

    b.take(d, e).await;
    b.store
        .finish(outcome(d, e, Status::Failed, 2))
        .await
        .expect("finish");
    b.await_status(e, Status::Failed).await;
    let dead = b.store.dead_letters(10, None).await.expect("dead letters");
    assert_eq!(dead.items.len(), 1, "{}", b.name);
    let letter = &dead.items[0];
    assert_eq!((letter.id, letter.attempts), (d, 2));
    assert_eq!(letter.last_error.as_deref(), Some("boom 2"));
    assert_eq!(letter.event.id, e);
    assert_eq!(letter.event.status, Status::Failed);
    assert_eq!(letter.event.payload.get(), r#"{"n":1}"#);
    assert_eq!(dead.next_cursor, None);

    let none = ReplayFilter {
        handler: Some("no-such-handler".into()),
        ..ReplayFilter::default()
    };
    assert!(b.store.replay(none).await.expect("replay").is_empty());
    let only = ReplayFilter {
        event: Some(e),
        ..ReplayFilter::default()
    };
    let replayed = b.store.replay(only).await.expect("replay");
    assert_eq!(replayed.len(), 1);
    assert_eq!((replayed[0].delivery, replayed[0].event), (d, e));
    assert_eq!(replayed[0].retry_after, None);
    b.await_status(e, Status::Processing).await;
    let dead = b.store.dead_letters(10, None).await.expect("dead letters");
    assert!(dead.items.is_empty(), "{}", b.name);

    b.take(d, e).await;
    let mut last = outcome(d, e, Status::Completed, 3);
    last.attempt = Some(Attempt {
        handler: first.deliveries[0].handler.clone(),
        attempt: 3,
        started_at: chrono::Utc::now(),
        duration_ms: 5,
        outcome: AttemptOutcome::Completed,
        response_status: Some(200),
        response_body: Some(r#"{"ok":true}"#.to_owned()),
        request: Some(r#"{"method":"PUT"}"#.to_owned()),
        error: None,
    });
    b.store.finish(last).await.expect("finish");
    b.await_status(e, Status::Completed).await;
    let view = b.store.event(e).await.expect("event").expect("some");
    assert_eq!(view.attempts, 3);
    assert_eq!(view.deliveries[0].status, Status::Completed);
    let history = b.store.list_attempts(e).await.expect("attempts");
    assert_eq!(history.len(), 1, "{}", b.name);
    assert_eq!(history[0].response_status, Some(200), "{}", b.name);
    assert_eq!(
        history[0].request.as_deref(),
        Some(r#"{"method":"PUT"}"#),
        "{}",
        b.name
    );
    assert_eq!(
        history[0].response_body.as_deref(),
        Some(r#"{"ok":true}"#),
        "{}: what the receiver said is kept",
        b.name
    );
}

/// Recovery's view, settling, the gauges and retention.
async fn bookkeeping(b: &Backend, first: &NewEvent, waiting: &NewEvent) {
    let left = b.store.unfinished().await.expect("unfinished");
    let mut left_ids: Vec<Uuid> = left.deliveries.iter().map(|d| d.delivery).collect();
    left_ids.sort();
    let mut waiting_ids: Vec<Uuid> = waiting.deliveries.iter().map(|d| d.id).collect();
    waiting_ids.sort();
    assert_eq!(left_ids, waiting_ids, "{}", b.name);
    assert!(left.deliveries.iter().all(|d| d.event == waiting.id));
    assert!(left.unsettled.is_empty());

    b.store.settle(waiting.id).await.expect("settle");
    b.await_status(waiting.id, Status::Pending).await;

    let stats = b.store.stats().await.expect("stats");
    assert_eq!(stats.pending_events, 1, "{}", b.name);
    assert_eq!(stats.dead_letters, 0);
    assert_eq!(stats.oldest_pending, Some(waiting.created_at), "{}", b.name);

    let past = Timestamp(first.created_at.0 - chrono::Duration::hours(1));
    assert_eq!(b.store.purge(past, 100).await.expect("purge"), 0);
    let future = Timestamp(Timestamp::now().0 + chrono::Duration::hours(1));
    assert_eq!(b.store.purge(future, 1).await.expect("purge"), 1);
    assert_eq!(b.store.purge(future, 100).await.expect("purge"), 1);
    assert!(b.store.event(first.id).await.expect("event").is_none());
    // Its deliveries and attempts went with it.
    let gone = first.deliveries[0].id;
    assert!(b.store.delivery_task(gone).await.expect("task").is_none());
    assert!(
        b.store
            .list_attempts(first.id)
            .await
            .expect("attempts")
            .is_empty()
    );
    assert!(b.store.find_key("key-b").await.expect("find").is_none());
    assert!(b.store.event(waiting.id).await.expect("event").is_some());
}

/// Subscribers: insert, list, update, delete, each refusing what does not apply.
async fn subscribers(b: &Backend) {
    let mut s = subscriber("billing", "http://127.0.0.1:9/hook");
    assert!(b.store.insert_subscriber(s.clone()).await.expect("insert"));
    assert!(!b.store.insert_subscriber(s.clone()).await.expect("taken"));
    let minimal = Subscriber {
        secret: None,
        max_attempts: None,
        backoff: None,
        max_in_flight: None,
        rate_limit: None,
        disable_after: None,
        filter: None,
        transform: None,
        active: false,
        ..subscriber("audit", "http://127.0.0.1:9/audit")
    };
    assert!(
        b.store
            .insert_subscriber(minimal.clone())
            .await
            .expect("insert")
    );
    assert_eq!(
        b.store.subscribers().await.expect("list"),
        [minimal.clone(), s.clone()],
        "{}",
        b.name
    );

    s.url = "http://127.0.0.1:9/other".into();
    s.ordering_key = Some("customer".into());
    s.updated_at = Timestamp::now();
    assert!(b.store.update_subscriber(s.clone()).await.expect("update"));
    let unknown = subscriber("nobody", "http://127.0.0.1:9/");
    assert!(!b.store.update_subscriber(unknown).await.expect("update"));
    let listed = b.store.subscribers().await.expect("list");
    assert_eq!(listed.get(1), Some(&s), "{}", b.name);
    assert_eq!(
        b.store.subscriber("billing").await.expect("one"),
        Some(s.clone())
    );
    assert_eq!(b.store.subscriber("nobody").await.expect("one"), None);
    pages(b, &[minimal.clone(), s.clone()]).await;

    assert!(b.store.delete_subscriber("billing").await.expect("delete"));
    assert!(!b.store.delete_subscriber("billing").await.expect("delete"));
    assert_eq!(b.store.subscribers().await.expect("list"), [minimal]);
}

/// Pages of subscribers: byte order whatever the database's collation (`Zed`
/// before `audit`; `billing` and `audit` are `stored`), a page after a name holds
/// only names after it, and no page holds more than asked.
async fn pages(b: &Backend, stored: &[Subscriber]) {
    let upper = subscriber("Zed", "http://127.0.0.1:9/zed");
    assert!(
        b.store
            .insert_subscriber(upper.clone())
            .await
            .expect("insert")
    );
    let names = |page: Vec<Subscriber>| page.into_iter().map(|s| s.name).collect::<Vec<_>>();
    let all = b.store.subscribers_page(None, 10).await.expect("page");
    assert_eq!(names(all), ["Zed", "audit", "billing"], "{}", b.name);
    let first = b.store.subscribers_page(None, 2).await.expect("page");
    assert_eq!(names(first), ["Zed", "audit"], "{}", b.name);
    let rest = b
        .store
        .subscribers_page(Some("audit"), 2)
        .await
        .expect("page");
    assert_eq!(rest, stored[1..], "{}", b.name);
    let after_last = b.store.subscribers_page(Some("billing"), 2).await;
    assert!(after_last.expect("page").is_empty(), "{}", b.name);
    // A NUL byte (PostgreSQL's text cannot hold one) names no subscriber and
    // errs nowhere: a cursor with one pages as the names before it.
    let cut = b.store.subscribers_page(Some("audit\0x"), 2).await;
    assert_eq!(cut.expect("page"), stored[1..], "{}", b.name);
    assert_eq!(b.store.subscriber("audit\0").await.expect("one"), None);
    let (none, _) = b.store.subscriber_routing("audit\0").await.expect("one");
    assert_eq!(none, None, "{}", b.name);
    assert!(!b.store.delete_subscriber("audit\0").await.expect("delete"));
    assert!(b.store.delete_subscriber("Zed").await.expect("delete"));
}

/// The recent keys: the SQLite store answers a key retried lately (`intake`'s retry
/// and 422) from memory as the table holds it and counts a retry answered so (a
/// read right after shows it); the PostgreSQL store keeps none.
async fn recent_keys(b: &Backend, first: &NewEvent) {
    let known = b.store.recent_key("key-a");
    if b.claims.is_some() {
        assert!(known.is_none(), "{}: no recent keys", b.name);
        return;
    }
    let known = known.expect("key-a was retried just now");
    assert_eq!((known.id, known.status), (first.id, Status::Pending));
    assert_eq!(known.payload_sha256, first.payload_sha256);
    assert_eq!(known.event_type, first.event_type);
    assert!(b.store.recent_key("no-such-key").is_none());
    let at = Timestamp::now();
    b.store.count_retry(first.id, at).await.expect("count");
    let view = b.store.event(first.id).await.expect("event").expect("some");
    assert_eq!((view.received_count, view.last_received_at), (3, at));
}

/// After its outcomes the key is forgotten or holds the current status; after
/// retention deleted the event it is forgotten.
async fn recent_keys_follow(b: &Backend, status: Option<Status>) {
    let now = b.store.recent_key("key-a").map(|s| s.status);
    assert!(now.is_none() || now == status, "{}: {now:?}", b.name);
}

/// The whole contract, in order, on one fresh store.
async fn contract(b: Backend) {
    let first = intake(&b).await;
    recent_keys(&b, &first).await;
    let waiting = listing(&b, &first).await;
    outcomes(&b, &first).await;
    recent_keys_follow(&b, Some(Status::Completed)).await;
    bookkeeping(&b, &first, &waiting).await;
    recent_keys_follow(&b, None).await;
    subscribers(&b).await;
    console_reads(&b).await;
}

/// Takes every delivery of `taken` as workers would (on PostgreSQL by claiming
/// everything due, since older deliveries of other steps are still pending).
async fn take_all(b: &Backend, taken: &[(Uuid, Uuid)]) {
    match &b.claims {
        Some(claims) => {
            let claimed = claims
                .claim(100, Duration::from_secs(60), &[])
                .await
                .expect("claim");
            for (d, _) in taken {
                assert!(
                    claimed.tasks.iter().any(|t| t.delivery_id == *d),
                    "{}: {d} not claimed",
                    b.name
                );
            }
        }
        None => {
            for (d, e) in taken {
                b.store.start(*d, *e).await.expect("start");
            }
        }
    }
}

/// The console's reads: the overview's counts and series, payloads, the source
/// filter of the listing, dead letters under a filter and their count.
async fn console_reads(b: &Backend) {
    let mut from_gh = new_event("console-1", r#"{"a":1}"#, &["hc"]);
    from_gh.event_type = "console.a".into();
    from_gh.source = Some("gh".into());
    let mut mixed = new_event("console-2", "{}", &["hc", "hd"]);
    mixed.event_type = "console.b".into();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut dead = new_event("console-3", "{}", &["hd"]);
    dead.event_type = "console.b".into();
    dead.created_at = Timestamp(mixed.created_at.0 + chrono::Duration::milliseconds(5));
    // Routed with the subscribers as they are now (earlier steps changed them).
    let (_, version) = b.store.routing().await.expect("routing");
    for e in [&mut from_gh, &mut mixed, &mut dead] {
        e.routing_version = version;
    }
    for e in [&from_gh, &mixed, &dead] {
        b.store.insert_event(e.clone()).await.expect("insert");
    }
    let all: Vec<(Uuid, Uuid)> = [&from_gh, &mixed, &dead]
        .iter()
        .flat_map(|e| e.deliveries.iter().map(|d| (d.id, e.id)))
        .collect();
    take_all(b, &all).await;
    for (i, (d, e)) in all.iter().enumerate() {
        // hc completes (first try); hd dead-letters on its second attempt.
        let handler_is_hc = i < 2;
        let finish = if handler_is_hc {
            outcome(*d, *e, Status::Completed, 1)
        } else {
            outcome(*d, *e, Status::Failed, 2)
        };
        b.store.finish(finish).await.expect("finish");
    }
    b.await_status(from_gh.id, Status::Completed).await;
    b.await_status(mixed.id, Status::Failed).await;
    b.await_status(dead.id, Status::Failed).await;

    let seen = b.store.overview(Timestamp::now()).await.expect("overview");
    let n = b.name;
    assert_eq!(seen.events.completed, 1, "{n}: {:?}", seen.events);
    assert_eq!(seen.events.failed, 2, "{n}");
    assert_eq!(seen.events.pending + seen.events.processing, 1, "{n}");
    let handler = |name: &str| {
        seen.handlers
            .iter()
            .find(|h| h.handler == name)
            .cloned()
            .unwrap_or_else(|| panic!("{n}: no {name} in {:?}", seen.handlers))
    };
    let (hc, hd) = (handler("hc"), handler("hd"));
    assert_eq!((hc.deliveries.completed, hc.attempts), (2, 2), "{n}");
    assert_eq!(hc.success_rate(), Some(1.0));
    assert_eq!((hd.deliveries.failed, hd.attempts), (2, 4), "{n}");
    assert_eq!(hd.success_rate(), Some(0.0));
    assert_eq!(handler("h1").success_rate(), None, "{n}: nothing finished");
    assert_eq!(seen.minutes.len(), super::overview::SERIES_MINUTES);
    let sum = |f: fn(&super::overview::Minute) -> u64| seen.minutes.iter().map(f).sum::<u64>();
    assert_eq!(
        sum(|m| m.received),
        4,
        "{n}: the waiting event and three new"
    );
    assert_eq!(sum(|m| m.completed), 1, "{n}");
    assert_eq!(sum(|m| m.dead_lettered), 2, "{n}");
    let later = Timestamp(Timestamp::now().0 + chrono::Duration::hours(2));
    let quiet = b.store.overview(later).await.expect("overview");
    assert_eq!(quiet.minutes.iter().map(|m| m.received).sum::<u64>(), 0);
    assert_eq!(quiet.events, seen.events, "{n}: counts are not windowed");

    let payload = b.store.payload(from_gh.id).await.expect("payload");
    assert_eq!(payload.as_deref(), Some(r#"{"a":1}"#), "{n}");
    assert!(
        b.store
            .payload(Uuid::now_v7())
            .await
            .expect("payload")
            .is_none()
    );
    let sourced = ListQuery {
        source: Some("gh".into()),
        limit: 10,
        ..ListQuery::default()
    };
    let page = b.store.list_events(&sourced).await.expect("list");
    let ids: Vec<Uuid> = page.items.iter().map(|e| e.id).collect();
    assert_eq!(ids, [from_gh.id], "{n}");

    let count = |filter: ReplayFilter| async move {
        b.store.count_dead_letters(&filter).await.expect("count")
    };
    let by_handler = ReplayFilter {
        handler: Some("hd".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(count(ReplayFilter::default()).await, 2, "{n}");
    assert_eq!(count(by_handler.clone()).await, 2, "{n}");
    let by_other_type = ReplayFilter {
        event_type: Some("console.a".into()),
        ..ReplayFilter::default()
    };
    assert_eq!(count(by_other_type).await, 0, "{n}");
    let older = ReplayFilter {
        before: Some(dead.created_at),
        ..ReplayFilter::default()
    };
    assert_eq!(count(older.clone()).await, 1, "{n}: only the mixed event's");
    let one = b
        .store
        .dead_letters_where(&by_handler, 1, None)
        .await
        .expect("page");
    assert_eq!(one.items.len(), 1);
    assert_eq!(one.items[0].event.id, dead.id, "{n}: newest first");
    let cursor = one.next_cursor.expect("next").parse().expect("uuid");
    let two = b
        .store
        .dead_letters_where(&by_handler, 1, Some(cursor))
        .await
        .expect("page");
    assert_eq!(two.items[0].event.id, mixed.id, "{n}");
    assert_eq!(two.next_cursor, None);
    let listed = b
        .store
        .dead_letters_where(&older, 10, None)
        .await
        .expect("page");
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].event.id, mixed.id);
    let replayed = b.store.replay(older).await.expect("replay");
    assert_eq!(replayed.len(), 1, "{n}: replay selects what the count said");
    assert_eq!(count(ReplayFilter::default()).await, 1, "{n}");
    // Paged: a page after the last one's id is empty; the first holds the rest.
    let all = ReplayFilter::default();
    let last = b
        .store
        .replay_page(&all, Some(Uuid::max()), 10)
        .await
        .expect("page");
    assert!(last.is_empty(), "{n}: nothing after the largest id");
    let page = b.store.replay_page(&all, None, 1).await.expect("page");
    assert_eq!(page.len(), 1, "{n}: at most the limit");
    assert_eq!(count(ReplayFilter::default()).await, 0, "{n}");
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract() {
    let dir = tempfile::tempdir().expect("dir");
    let store = super::sqlite::SqliteStore::open(
        &dir.path().join("contract.db"),
        crate::config::SqliteSynchronous::Normal,
    )
    .await
    .expect("open");
    contract(Backend {
        name: "sqlite",
        store: Arc::new(store),
        claims: None,
    })
    .await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_postgres_store_keeps_the_contract() {
    let Some(db) = super::postgres::tests::TestDb::new().await else {
        return;
    };
    let store = Arc::new(
        super::postgres::PgStore::open(&db.url, 4)
            .await
            .expect("open"),
    );
    contract(Backend {
        name: "postgres",
        store: store.clone(),
        claims: Some(store),
    })
    .await;
}
