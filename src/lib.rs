//! # hookbox
//!
//! A webhook inbox and delivery service: it accepts webhooks over HTTP, persists
//! every one before answering, deduplicates by idempotency key, sheds load with 429,
//! and hands every event to the handlers registered for its type, with retries,
//! backoff and dead letters.
//!
//! The binary (`hookbox serve`) is a thin shell over this library. A Rust user can
//! embed the pieces:
//!
//! - [`layers`]: tower layers that work around *any* HTTP service — backpressure,
//!   idempotency keys, metrics, request ids and tracing;
//! - [`store`]: the [`Store`](store::Store) trait and its SQLite implementation with
//!   group commit, and (feature `postgres`) the PostgreSQL one that several
//!   instances share;
//! - [`queue`], [`registry`], [`worker`]: the processing side; [`dispatch`] and
//!   [`claims`]: how work reaches the workers on each backend;
//! - [`app::serve`]: the whole service; [`server`]: its HTTP front door (timeouts,
//!   header size, connection limit).
//!
//! ```no_run
//! use hookbox::{app, config::Config, registry::Registry};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_pairs([("BIND_ADDR", "127.0.0.1:8000"), ("DB_PATH", "/tmp/hookbox.db")])?;
//! app::serve(config, Registry::default(), None, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod claims;
pub mod config;
pub mod dispatch;
pub mod inbox;
pub mod json;
pub mod layers;
pub mod model;
pub mod ordering;
pub mod queue;
pub mod registry;
pub mod retention;
pub mod retry;
pub mod server;
pub mod signing;
pub mod sources;
pub mod ssrf;
pub mod store;
pub mod telemetry;
pub mod timer;
pub mod worker;
