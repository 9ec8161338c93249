//! # hookbox
//!
//! A webhook inbox and delivery service: it accepts webhooks over HTTP, persists
//! every one before answering, deduplicates by idempotency key, sheds load with 429,
//! and hands every event to the handlers registered for its type, with retries,
//! backoff and dead letters.
//!
//! The binary (`hookbox serve`) is a thin shell over this library. What a Rust user
//! embeds:
//!
//! - [`app`], the app builder: [`App::bind`](app::App::bind) opens the store and
//!   binds the address, [`App::run`](app::App::run) serves until a shutdown future
//!   resolves and drains; [`app::serve`] does both; [`app::load_registry`] reads
//!   handler manifests the way the binary does.
//! - [`config`]: [`Config`](config::Config), the settings (defaults < file <
//!   environment), built in code with [`Config::from_pairs`](config::Config::from_pairs).
//! - [`registry`]: which handlers receive which event types —
//!   [`Registry::builder`](registry::Registry::builder) with
//!   [`handler_fn`](registry::handler_fn) for handlers written in Rust, each with its
//!   [`retry::Policy`]; manifests fill the same registry with http, exec and log
//!   handlers.
//! - [`model`]: the records a handler and the API see — [`Status`](model::Status),
//!   [`Timestamp`](model::Timestamp), events, deliveries, subscribers, dead letters.
//! - [`store`]: the [`Store`](store::Store) trait and its SQLite implementation with
//!   group commit, and (feature `postgres`) the PostgreSQL one that several
//!   instances share.
//! - [`layers`]: tower layers that work around *any* HTTP service — backpressure,
//!   idempotency keys, metrics, request ids and tracing (`cargo run --example
//!   layers` puts them around a small payments API).
//! - [`sources`]: source manifests (`sources::manifest::load_dir`), for
//!   [`App::bind_with_sources`](app::App::bind_with_sources).
//! - [`telemetry`]: logging and the Prometheus recorder, as the binary sets them up.
//!
//! The rest is how the service is built, and internal to the crate (see
//! docs/architecture.md): the inbox (the one path in), the HTTP API and the
//! console, processing (the queue, the window or the claims, destinations' lanes,
//! the workers), the HTTP front door.
//!
//! ```no_run
//! use hookbox::{app, config::Config};
//! use hookbox::registry::{Event, HandlerError, Registry, handler_fn};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let config = Config::from_pairs([("BIND_ADDR", "127.0.0.1:8000"), ("DB_PATH", "/tmp/hookbox.db")])?;
//! let registry = Registry::builder()
//!     .route("order.*", handler_fn(|event: Event| async move {
//!         println!("order event {}", event.id);
//!         Ok::<(), HandlerError>(())
//!     }))
//!     .build()?;
//! app::serve(config, registry, None, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await?;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub(crate) mod api;
pub mod app;
pub mod config;
pub(crate) mod console;
#[cfg(test)]
mod fuzz;
pub(crate) mod guard;
pub(crate) mod idempotency_cache;
pub(crate) mod inbox;
pub(crate) mod json;
pub(crate) mod lifecycle;
/// hookbox's HTTP layers, from the stand-alone `hookbox-layers` crate
/// (crates/hookbox-layers): the same paths as before it moved out.
pub use hookbox_layers as layers;
pub mod model;
pub(crate) mod operator;
pub(crate) mod processing;
pub(crate) mod redact;
pub mod registry;
pub(crate) mod retention;
pub mod retry;
pub mod sealing;
pub(crate) mod server;
pub(crate) mod signing;
pub mod sources;
pub(crate) mod ssrf;
pub(crate) mod state;
pub mod store;
pub mod telemetry;
#[cfg(test)]
mod test_cases;
pub mod trace_context;
pub(crate) mod trace_export;
pub mod transform;
