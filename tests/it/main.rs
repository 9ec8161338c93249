//! hookbox's integration tests: one binary (one link step), one module per area.
//! They run the real `hookbox` binary on port 0 against a real SQLite file in a
//! temporary directory, and (tests named `…::postgres`, and `instances`) against a
//! database of their own on the local PostgreSQL server, dropped afterwards.

#![allow(unreachable_pub, clippy::unwrap_used)]

mod attempts;
mod browser;
mod compose;
mod config;
mod console;
mod delivery;
mod destinations;
mod docs;
mod durability;
mod erase;
mod filters;
mod frontdoor;
mod guard;
mod hangup;
mod harness;
mod instances;
mod intake;
mod layers;
mod library;
mod memory;
mod openapi;
mod otlp;
mod pgrestart;
mod processing;
mod pull;
mod receiver;
mod recent_keys;
mod sealing;
mod security;
mod sources;
mod status;
mod store;
mod tracing;
mod transforms;
