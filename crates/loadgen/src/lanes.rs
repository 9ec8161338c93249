//! `isolation` and `rate`: destinations' lanes, measured at receivers of loadgen's
//! own (docs/benchmarks in the README).
//!
//! - `isolation`: a fast destination's delivery latency (its post to its arrival),
//!   p50/p99 alone, then beside ten destinations that answer after 2 s with a
//!   backlog each and one that never answers.
//! - `rate`: N subscribers limited to R/s each; deliveries per second in all over a
//!   window, and the most any one of them got in one second.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode, Uri};
use serde_json::{Value, json};

use crate::BoxError;
use crate::admin::Admin;
use crate::cli::{IsolationArgs, RateArgs};
use crate::conn::{Target, check_reachable};
use crate::post::{Posting, event_body, post_counted};
use crate::report::{percentile, print_table};

/// Arrivals at the lanes receiver: when each (path, `webhook-id`) first came.
#[derive(Default)]
struct Arrivals {
    seen: Mutex<HashMap<(String, String), Instant>>,
}

impl Arrivals {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Instant>> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `/slow…` answers after 2 s; anything else at once. Records every arrival.
async fn receive(
    axum::extract::State(arrivals): axum::extract::State<Arc<Arrivals>>,
    uri: Uri,
    headers: hyper::HeaderMap,
    _body: bytes::Bytes,
) -> StatusCode {
    let id = headers
        .get("webhook-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    arrivals
        .lock()
        .entry((uri.path().to_owned(), id))
        .or_insert_with(Instant::now);
    if uri.path().starts_with("/slow") {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    StatusCode::OK
}

/// Starts the receiver; its address.
async fn start(arrivals: Arc<Arrivals>) -> Result<std::net::SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(receive).with_state(arrivals);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

/// A listener that accepts connections and never answers.
async fn start_silent() -> Result<std::net::SocketAddr, BoxError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    Ok(addr)
}

async fn admin(url: &str, token: Option<&str>) -> Result<Admin, BoxError> {
    let target = Arc::new(Target::resolve(url).await?);
    check_reachable(&target).await?;
    Admin::new(target, token)
}

/// Creates a subscriber with `extra` fields; an error unless 201.
async fn subscribe(
    admin: &mut Admin,
    name: &str,
    event_type: &str,
    url: &str,
    extra: Value,
) -> Result<(), BoxError> {
    let mut body = json!({"name": name, "event_types": [event_type], "url": url});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    admin.delete(name).await?;
    let (status, text) = admin
        .send(Method::POST, "/subscribers", Some(&body))
        .await?;
    if status != StatusCode::CREATED {
        return Err(format!("creating subscriber {name}: {status}: {}", text.trim()).into());
    }
    Ok(())
}

/// Posts `samples` events of `bench.iso.fast`, one at a time, `gap` apart, and
/// returns each one's latency from its post to its arrival (microseconds: the
/// commit, the 202 and the delivery race, so the post is the start).
async fn sample_latency(
    admin: &mut Admin,
    arrivals: &Arrivals,
    samples: u64,
    gap: Duration,
) -> Result<Vec<u32>, BoxError> {
    let mut accepted = Vec::new();
    for n in 0..samples {
        let body = json!({"event_type": "bench.iso.fast", "payload": {"n": n}});
        let at = Instant::now();
        let (status, text) = admin.send(Method::POST, "/webhooks", Some(&body)).await?;
        if status != StatusCode::ACCEPTED {
            return Err(format!("POST /webhooks answered {status}: {}", text.trim()).into());
        }
        let id: Value = serde_json::from_str(&text)?;
        accepted.push((id["id"].as_str().unwrap_or("").to_owned(), at));
        tokio::time::sleep(gap).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut got: Vec<u32> = {
            let seen = arrivals.lock();
            accepted
                .iter()
                .filter_map(|(id, at)| {
                    seen.get(&("/fast".to_owned(), id.clone())).map(|t| {
                        u32::try_from(t.saturating_duration_since(*at).as_micros())
                            .unwrap_or(u32::MAX)
                    })
                })
                .collect()
        };
        if got.len() == accepted.len() || Instant::now() > deadline {
            got.sort_unstable();
            return Ok(got);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Microseconds as milliseconds with two decimals.
fn ms(v: Option<u32>) -> String {
    v.map_or("-".to_owned(), |v| {
        format!("{:.2}ms", f64::from(v) / 1000.0)
    })
}

/// `isolation`.
pub(crate) async fn run_isolation(args: IsolationArgs) -> Result<ExitCode, BoxError> {
    let arrivals = Arc::new(Arrivals::default());
    let recv = start(Arc::clone(&arrivals)).await?;
    let silent = start_silent().await?;
    let mut admin = admin(&args.url, args.admin_token.as_deref()).await?;
    let names: Vec<String> = (0..args.slow).map(|i| format!("iso-slow-{i}")).collect();
    subscribe(
        &mut admin,
        "iso-fast",
        "bench.iso.fast",
        &format!("http://{recv}/fast"),
        json!({}),
    )
    .await?;
    let gap = Duration::from_millis(args.gap_ms);
    let alone = sample_latency(&mut admin, &arrivals, args.samples, gap).await?;
    for (i, name) in names.iter().enumerate() {
        subscribe(
            &mut admin,
            name,
            &format!("bench.iso.slow.{i}"),
            &format!("http://{recv}/slow/{i}"),
            json!({}),
        )
        .await?;
    }
    subscribe(
        &mut admin,
        "iso-silent",
        "bench.iso.silent",
        &format!("http://{silent}/"),
        json!({}),
    )
    .await?;
    let mut types: Vec<String> = (0..args.slow)
        .map(|i| format!("bench.iso.slow.{i}"))
        .collect();
    types.push("bench.iso.silent".to_owned());
    let run_id = uuid::Uuid::now_v7().to_string();
    let bodies = types
        .iter()
        .map(|t| event_body(t, &run_id, 1024))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let plan = Posting {
        total: args.backlog * (args.slow + 1),
        deadline: started + Duration::from_secs(300),
        connections: 16,
    };
    post_counted(&admin.target, run_id, bodies, &plan, started, "backlog").await?;
    // Every slow lane full and the silent one hanging before measuring.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let beside = sample_latency(&mut admin, &arrivals, args.samples, gap).await?;
    for name in names
        .iter()
        .map(String::as_str)
        .chain(["iso-fast", "iso-silent"])
    {
        let _ = admin.delete(name).await;
    }
    let p99 = |v: &[u32]| percentile(v, 99.0);
    let ratio = match (p99(&alone), p99(&beside)) {
        (Some(a), Some(b)) if a > 0 => format!("{:.2}", f64::from(b) / f64::from(a)),
        _ => "-".to_owned(),
    };
    print_table(&[
        ("mode", "isolation".to_owned()),
        ("samples", format!("{}/{}", beside.len(), args.samples)),
        ("alone p50", ms(percentile(&alone, 50.0))),
        ("alone p99", ms(p99(&alone))),
        ("beside p50", ms(percentile(&beside, 50.0))),
        ("beside p99", ms(p99(&beside))),
        ("p99 ratio", ratio),
        ("slow backlog", format!("{} x {}", args.slow, args.backlog)),
    ]);
    Ok(if beside.len() as u64 == args.samples {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The fewest deliveries still pending for any destination named `prefix…`
/// (`GET /destinations`).
async fn least_pending(admin: &mut Admin, prefix: &str) -> Result<u64, BoxError> {
    let (status, text) = admin.send(Method::GET, "/destinations", None).await?;
    if status != StatusCode::OK {
        return Err(format!("GET /destinations answered {status}: {}", text.trim()).into());
    }
    let list: Value = serde_json::from_str(&text)?;
    Ok(list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|d| d["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
                .filter_map(|d| d["pending"].as_u64())
                .min()
                .unwrap_or(0)
        })
        .unwrap_or(0))
}

/// `rate`.
pub(crate) async fn run_rate(args: RateArgs) -> Result<ExitCode, BoxError> {
    let arrivals = Arc::new(Arrivals::default());
    let recv = start(Arc::clone(&arrivals)).await?;
    let mut admin = admin(&args.url, args.admin_token.as_deref()).await?;
    let limit = format!("{}/s", args.limit);
    for i in 0..args.subscribers {
        subscribe(
            &mut admin,
            &format!("rate-{i}"),
            &format!("bench.rate.{i}"),
            &format!("http://{recv}/r{i}"),
            json!({"rate_limit": limit}),
        )
        .await?;
    }
    // Enough for the window after posting (which delivers meanwhile) ends.
    let per = args.limit * (args.seconds + 45);
    let run_id = uuid::Uuid::now_v7().to_string();
    let bodies = (0..args.subscribers)
        .map(|i| event_body(&format!("bench.rate.{i}"), &run_id, 256))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let plan = Posting {
        total: per * args.subscribers,
        deadline: started + Duration::from_secs(300),
        connections: 32,
    };
    post_counted(&admin.target, run_id, bodies, &plan, started, "rate").await?;
    // Measure a window that starts once posting is done (every lane busy).
    // The window: what every subscriber still has waiting at its limit, at most
    // `--seconds` (a subscriber that runs dry would count as a shortfall).
    let least = least_pending(&mut admin, "rate-").await?;
    let secs = args.seconds.min(least / args.limit.max(1)).max(1);
    let window = Duration::from_secs(secs);
    let from = Instant::now();
    tokio::time::sleep(window).await;
    let to = from + window;
    let seen: Vec<(String, Instant)> = arrivals
        .lock()
        .iter()
        .map(|((path, _), at)| (path.clone(), *at))
        .collect();
    for i in 0..args.subscribers {
        let _ = admin.delete(&format!("rate-{i}")).await;
    }
    let in_window = seen.iter().filter(|(_, t)| *t >= from && *t < to).count();
    let mut worst = 0usize;
    let mut per_path: HashMap<&str, Vec<Instant>> = HashMap::new();
    for (path, t) in &seen {
        per_path.entry(path.as_str()).or_default().push(*t);
    }
    for times in per_path.values_mut() {
        times.sort_unstable();
        for (i, t) in times.iter().enumerate() {
            let in_second = times[i..]
                .iter()
                .take_while(|u| **u < *t + Duration::from_secs(1))
                .count();
            worst = worst.max(in_second);
        }
    }
    let total = in_window as f64 / window.as_secs_f64();
    let target = (args.limit * args.subscribers) as f64;
    print_table(&[
        ("mode", "rate".to_owned()),
        ("subscribers", args.subscribers.to_string()),
        ("limit", limit),
        ("window", format!("{secs}s")),
        ("deliveries/s", format!("{total:.1}")),
        ("of target", format!("{:.1}%", total / target * 100.0)),
        ("most in 1 s (one sub)", worst.to_string()),
    ]);
    Ok(ExitCode::SUCCESS)
}
