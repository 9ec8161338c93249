//! Tower layers that make up hookbox's HTTP front, each usable around any tower
//! service (see `examples/layers.rs`):
//!
//! - [`backpressure`]: 429 + `Retry-After` from a shared load signal;
//! - [`idempotency`]: `Idempotency-Key` handling over a pluggable store;
//! - [`metrics`]: request counts and durations by matched route;
//! - [`trace`]: request ids and tracing spans (tower-http underneath).
//!
//! Order matters. hookbox stacks them, outermost first: request id → trace →
//! metrics → (per route) backpressure → idempotency → handler, so a shed request is
//! still counted and traced, and sheds before its body is even read.

pub mod backpressure;
pub mod idempotency;
pub mod metrics;
pub mod trace;
