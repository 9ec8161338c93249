//! A real HTTP receiver for delivery tests: an axum server on `127.0.0.1:0`, running
//! on its own tokio runtime in a background thread. It records every request
//! (arrival time and order, method, path, headers, body, the status it answered) and
//! answers as the test programs it: a queue of answers used first, then a default
//! answer, optionally replaced by a 500 with some probability.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// Sleep this long before answering.
    pub delay: Duration,
    /// A `Retry-After` header value.
    pub retry_after: Option<String>,
    pub body: String,
}

impl Answer {
    /// An immediate answer with this status and a short body.
    pub fn status(status: u16) -> Self {
        Self {
            status,
            delay: Duration::ZERO,
            retry_after: None,
            body: format!("receiver says {status}"),
        }
    }

    /// Sleeps `delay` before answering.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Adds `Retry-After: value`.
    pub fn retry_after(mut self, value: &str) -> Self {
        self.retry_after = Some(value.to_owned());
        self
    }

    /// Answers with this body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }
}

/// One request as it arrived (`Receiver::requests` keeps arrival order).
#[derive(Debug, Clone)]
pub struct Received {
    pub at: Instant,
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status the receiver chose to answer (sent after `Answer::delay`).
    pub answered: u16,
}

impl Received {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "delivered body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `webhook-id` header (the event id).
    pub fn webhook_id(&self) -> &str {
        self.header("webhook-id").expect("webhook-id header")
    }
}

struct Plan {
    queue: VecDeque<Answer>,
    default: Answer,
    fail_rate: f64,
    rng: fastrand::Rng,
}

struct Shared {
    plan: Mutex<Plan>,
    received: Mutex<Vec<Received>>,
    arrived: Condvar,
}

impl Shared {
    fn next_answer(&self) -> Answer {
        let mut plan = self.plan.lock().expect("plan");
        if let Some(answer) = plan.queue.pop_front() {
            return answer;
        }
        if plan.fail_rate > 0.0 && plan.rng.f64() < plan.fail_rate {
            return Answer::status(500).body("random failure");
        }
        plan.default.clone()
    }
}

/// The running receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:<port>` (no trailing slash).
    pub url: String,
    pub port: u16,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Receiver {
    /// Starts a receiver that answers 200 unless programmed otherwise.
    pub fn start() -> Self {
        let shared = Arc::new(Shared {
            plan: Mutex::new(Plan {
                queue: VecDeque::new(),
                default: Answer::status(200).body("ok"),
                fail_rate: 0.0,
                rng: fastrand::Rng::with_seed(7),
            }),
            received: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
        });
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let state = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("receiver runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("receiver bind");
                addr_tx
                    .send(listener.local_addr().expect("receiver addr"))
                    .expect("send receiver addr");
                let app = Router::new().fallback(handle).with_state(state);
                tokio::select! {
                    served = axum::serve(listener, app) => served.expect("receiver serve"),
                    _ = stop_rx => {}
                }
            });
            // Dropping the runtime cancels requests still sleeping.
            rt.shutdown_background();
        });
        let addr = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("receiver did not start");
        Self {
            url: format!("http://{addr}"),
            port: addr.port(),
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Queues answers, used in order before the default one.
    pub fn then(&self, answer: Answer) -> &Self {
        self.shared
            .plan
            .lock()
            .expect("plan")
            .queue
            .push_back(answer);
        self
    }

    /// The answer once the queue is empty.
    pub fn set_default(&self, answer: Answer) {
        self.shared.plan.lock().expect("plan").default = answer;
    }

    /// Once the queue is empty, answers 500 with probability `rate` (seeded).
    pub fn fail_randomly(&self, rate: f64, seed: u64) {
        let mut plan = self.shared.plan.lock().expect("plan");
        plan.fail_rate = rate;
        plan.rng = fastrand::Rng::with_seed(seed);
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.received.lock().expect("received").clone()
    }

    /// How many requests arrived so far.
    pub fn count(&self) -> usize {
        self.shared.received.lock().expect("received").len()
    }

    /// Waits until at least `n` requests arrived and returns all of them.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        let mut received = self.shared.received.lock().expect("received");
        while received.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the receiver got {} requests, expected {n}: {:?}",
                received.len(),
                received
                    .iter()
                    .map(|r| (r.path.clone(), r.answered))
                    .collect::<Vec<_>>()
            );
            received = self
                .shared
                .arrived
                .wait_timeout(received, left)
                .expect("received")
                .0;
        }
        received.clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let at = Instant::now();
    let answer = shared.next_answer();
    {
        let mut received = shared.received.lock().expect("received");
        received.push(Received {
            at,
            method,
            path: uri.path().to_owned(),
            headers,
            body,
            answered: answer.status,
        });
        shared.arrived.notify_all();
    }
    if !answer.delay.is_zero() {
        tokio::time::sleep(answer.delay).await;
    }
    let status = StatusCode::from_u16(answer.status).expect("status");
    let mut res = (status, answer.body).into_response();
    if let Some(v) = answer.retry_after {
        res.headers_mut().insert(
            "retry-after",
            HeaderValue::from_str(&v).expect("retry-after value"),
        );
    }
    res
}
