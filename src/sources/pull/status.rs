//! What a pull source's adapter is doing, as `GET /sources` and the metrics show it.
//!
//! The state is this instance's: `running` (fetching, or waiting for the next poll
//! or message), `backing_off` (after a failure, until the next try), `paused` (the
//! queue is full: nothing is read until there is room), `standby` (PostgreSQL:
//! another instance runs this source), `stopped` (shutting down). The cursor shown
//! is the committed one, read from the database.

use std::sync::Mutex;

use serde::Serialize;
use tokio::sync::Notify;

use crate::model::Timestamp;
use crate::store::pull::CursorRow;
use crate::telemetry::names;

/// An adapter's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Fetching, or waiting for the next poll or message.
    Running,
    /// Waiting after a failure before the next try.
    BackingOff,
    /// Not reading: the queue is full.
    Paused,
    /// Another instance runs this source (PostgreSQL).
    Standby,
    /// Not started yet, or shut down.
    Stopped,
}

/// A pull source's live status.
#[derive(Debug)]
pub struct PullStatus {
    name: String,
    inner: Mutex<Inner>,
    /// Woken by `POST /sources/{name}/reset`: the adapter reloads its cursor.
    pub(crate) reset: Notify,
}

#[derive(Debug)]
struct Inner {
    state: State,
    last_error: Option<String>,
    last_error_at: Option<Timestamp>,
    last_success_at: Option<Timestamp>,
    /// The source's timestamp of the last committed item that had one.
    emitted_at: Option<Timestamp>,
}

/// The pull part of a `GET /sources` entry.
#[derive(Debug, Clone, Serialize)]
pub struct PullView {
    /// The upstream URL without credentials or query.
    pub url: String,
    /// The committed cursor (`null`: from the beginning), as the JSON text it was
    /// committed with: a number is shown exactly, never rounded.
    pub cursor: Box<serde_json::value::RawValue>,
    /// When the cursor was last committed or reset.
    pub cursor_updated_at: Option<Timestamp>,
    /// `running`, `backing_off`, `paused`, `standby` or `stopped`.
    pub state: State,
    /// The latest failure (a fetch, an answer, a commit), kept after recovery.
    pub last_error: Option<String>,
    /// When it happened.
    pub last_error_at: Option<Timestamp>,
    /// The latest successful fetch or read.
    pub last_success_at: Option<Timestamp>,
    /// Now minus the source's timestamp of the last committed item (when items
    /// carry one).
    pub cursor_lag_seconds: Option<f64>,
}

impl PullStatus {
    /// A stopped adapter of the source `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            inner: Mutex::new(Inner {
                state: State::Stopped,
                last_error: None,
                last_error_at: None,
                last_success_at: None,
                emitted_at: None,
            }),
            reset: Notify::new(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.inner().state
    }

    /// Moves to `state`; `hookbox_source_up` is 1 while running or paused (connected
    /// or polling without error), else 0.
    pub fn set_state(&self, state: State) {
        self.inner().state = state;
        let up = if matches!(state, State::Running | State::Paused) {
            1.0
        } else {
            0.0
        };
        metrics::gauge!(names::SOURCE_UP, "source" => self.name.clone()).set(up);
    }

    /// A failure: kept as the last error, and the state becomes `backing_off`.
    pub fn failed(&self, error: &str) {
        {
            let mut inner = self.inner();
            inner.last_error = Some(error.to_owned());
            inner.last_error_at = Some(Timestamp::now());
        }
        self.set_state(State::BackingOff);
    }

    /// A fetch or read that worked: the state becomes `running`.
    pub fn succeeded(&self) {
        self.inner().last_success_at = Some(Timestamp::now());
        if self.state() != State::Running {
            self.set_state(State::Running);
        }
    }

    /// A commit whose last timestamped item said `emitted_at`.
    pub fn committed(&self, emitted_at: Option<Timestamp>) {
        if let Some(at) = emitted_at {
            self.inner().emitted_at = Some(at);
        }
        self.update_lag();
    }

    /// Sets `hookbox_source_cursor_lag_seconds` from the last committed timestamp.
    pub fn update_lag(&self) {
        if let Some(lag) = self.lag() {
            metrics::gauge!(names::SOURCE_CURSOR_LAG, "source" => self.name.clone()).set(lag);
        }
    }

    fn lag(&self) -> Option<f64> {
        let at = self.inner().emitted_at?;
        let ms = Timestamp::now().millis() - at.millis();
        Some(ms.max(0) as f64 / 1000.0)
    }

    /// The entry's pull part, with the committed cursor `row` (if one is stored).
    pub fn view(&self, url: String, row: Option<&CursorRow>) -> PullView {
        let lag = self.lag();
        let inner = self.inner();
        PullView {
            url,
            cursor: row
                .and_then(|r| r.cursor.clone())
                .and_then(|c| serde_json::value::RawValue::from_string(c).ok())
                .unwrap_or_else(null),
            cursor_updated_at: row.and_then(|r| r.updated_at),
            state: inner.state,
            last_error: inner.last_error.clone(),
            last_error_at: inner.last_error_at,
            last_success_at: inner.last_success_at,
            cursor_lag_seconds: lag,
        }
    }
}

/// JSON `null`, as a raw value.
fn null() -> Box<serde_json::value::RawValue> {
    serde_json::value::RawValue::from_string("null".to_owned())
        .unwrap_or_else(|_| unreachable!("null is JSON"))
}
