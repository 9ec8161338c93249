//! `intake-floor`: the group-commit intake prototype, rebuilt as a reference.
//!
//! Issue 28 asks that hookbox's intake be at least 1.1× the prototype it grew
//! from, measured in one interleaved run. This binary is that prototype's shape,
//! kept beside hookbox so that anyone can reproduce the ratio: the floor that
//! hookbox's intake has to beat.
//!
//! - one axum handler, `POST /webhooks`: the body must be a JSON object with a
//!   string `event_type` (400 otherwise); its `payload` member is stored as sent
//!   (`null` when absent); the key is the `Idempotency-Key` header (the event's
//!   own id without one);
//! - one writer ([`writer`]): a tokio task owning the one SQLite connection
//!   (`journal_mode=WAL`, `synchronous=FULL`), which takes every row waiting (up
//!   to [`writer::MAX_BATCH`]), writes them in one transaction with one multi-row
//!   `INSERT … ON CONFLICT(idempotency_key) DO NOTHING`, commits (one fsync), and
//!   only then answers each request through its oneshot channel;
//! - the answer: 202 `{"id": …, "status": "pending"}` after the commit, 200
//!   `{"id": <stored id>, "status": "duplicate"}` for a key already stored, 503 if
//!   the commit failed; `GET /ready` answers 200.
//!
//! What it omits, on purpose (hookbox does all of it, and pays for it): the
//! validation's depth (the event type's characters and length, the key's bounds,
//! `Content-Type`, members given twice, the payload's canonical form and hash, so
//! a retry with another payload is not told apart: it is a duplicate), routing to
//! handlers and the deliveries it creates, metrics and tracing, the queue's 429
//! backpressure, and the guards against hostile clients (header and body
//! timeouts, connection limits; the body limit is axum's default 2 MB).
//!
//! Settings, from the environment: `BIND_ADDR` (default `127.0.0.1:8100`; port 0
//! picks a free one) and `DB_PATH` (default `./floor.db`, created with its
//! table). It prints `intake-floor: listening on http://ADDR` on stderr once it
//! accepts requests. SIGTERM's default action stops it: every 202 it sent was
//! committed first.
//!
//! ```text
//! cargo build --release -p intake-floor
//! BIND_ADDR=127.0.0.1:8100 DB_PATH=/tmp/floor.db target/release/intake-floor
//! target/release/loadgen ingest --url http://127.0.0.1:8100 --duration 10s --connections 64
//! scripts/bench.sh floor          # hookbox and the floor, interleaved, 3 rounds
//! ```
//!
//! `scripts/bench.sh floor` (see its header) builds this binary with hookbox and
//! loadgen, runs each server on a fresh database in turn under `loadgen ingest`
//! (and `wrk`, if installed), and prints req/s, p99 and CPU per request of both
//! and the ratio of the medians; docs/benchmarks.md ("Intake floor") has the
//! figures measured so far.

mod intake;
mod writer;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use tokio::net::TcpListener;

/// The same allocator as hookbox, so that the ratio compares the intake paths.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Error type of startup: anything printable.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The two settings, read from the environment.
struct Settings {
    /// `BIND_ADDR`: where the server listens.
    bind_addr: SocketAddr,
    /// `DB_PATH`: the SQLite file.
    db_path: PathBuf,
}

impl Settings {
    /// Reads `BIND_ADDR` and `DB_PATH`, with their defaults.
    fn from_env() -> Result<Self, BoxError> {
        let bind = std::env::var("BIND_ADDR").unwrap_or_else(|_| "127.0.0.1:8100".to_owned());
        let bind_addr = bind
            .parse()
            .map_err(|err| format!("invalid BIND_ADDR {bind:?}: {err}"))?;
        let db_path = std::env::var_os("DB_PATH").map_or_else(|| "floor.db".into(), PathBuf::from);
        Ok(Self { bind_addr, db_path })
    }
}

/// What `intake-floor` answers to any argument (it takes none: a `--help` must
/// not start a server on `./floor.db`).
const USAGE: &str = "usage: [BIND_ADDR=127.0.0.1:8100] [DB_PATH=./floor.db] intake-floor\n\
     (no arguments; settings from the environment; see crates/intake-floor)";

#[tokio::main]
async fn main() -> ExitCode {
    if std::env::args_os().len() > 1 {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("intake-floor: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the database, starts the writer, and serves until the process stops.
async fn run() -> Result<(), BoxError> {
    let settings = Settings::from_env()?;
    let conn = writer::open(&settings.db_path).await?;
    let queue = writer::spawn(conn);
    let listener = TcpListener::bind(settings.bind_addr).await?;
    eprintln!(
        "intake-floor: listening on http://{}",
        listener.local_addr()?
    );
    axum::serve(listener, intake::router(queue)).await?;
    Ok(())
}
