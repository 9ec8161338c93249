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
//!
//! The rest is how the service is built: [`inbox`] commits and hands work to
//! processing, [`api`] holds the routes and [`state`] what they share, [`server`] the HTTP front door (timeouts,
//! header size, connection limit). Processing itself — the queue, retry timer,
//! ordering gate, PostgreSQL claims and the workers — is internal to the crate.
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

pub mod api;
pub mod app;
pub mod config;
pub mod console;
pub(crate) mod idempotency_cache;
pub mod inbox;
pub mod json;
pub mod lifecycle;
/// hookbox's HTTP layers, from the stand-alone `hookbox-layers` crate
/// (crates/hookbox-layers): the same paths as before it moved out.
pub use hookbox_layers as layers;
pub mod model;
pub(crate) mod operator;
pub(crate) mod processing;
pub mod redact;
pub mod registry;
pub mod retention;
pub mod retry;
pub mod server;
pub mod signing;
pub mod sources;
pub mod ssrf;
pub mod state;
pub mod store;
pub mod telemetry;
