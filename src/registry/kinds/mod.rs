//! The handler kinds a manifest can name: `http`, `exec` and `log`.

pub mod exec;
pub mod http;
pub mod keep_alive;
pub mod log;
pub mod outbound;
pub mod shaped;
pub mod shown;
