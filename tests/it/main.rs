//! hookbox's integration tests: one binary (one link step), one module per area.
//! They run the real `hookbox` binary on port 0 against a real SQLite file in a
//! temporary directory.

#![allow(unreachable_pub, clippy::unwrap_used)]

mod config;
mod delivery;
mod durability;
mod harness;
mod intake;
mod layers;
mod library;
mod processing;
mod receiver;
mod status;
