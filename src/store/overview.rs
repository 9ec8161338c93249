//! What the console's overview and dead-letter pages read: counts by status, each
//! handler's deliveries, a per-minute series of the last hour, and dead letters
//! under a filter. The types are shared; each backend runs its own SQL
//! (`sqlite/overview.rs`, `postgres/overview.rs`), since minutes are cut out of
//! text timestamps on one and `timestamptz` on the other.
//!
//! What the series counts (docs/operating.md):
//! - *received*: events created in that minute;
//! - *completed*: events now `completed` whose last change fell in that minute,
//!   among those created in the last two hours (an event that took longer than an
//!   hour between its arrival and its completion is not in the series);
//! - *dead-lettered*: deliveries now `failed` whose last change fell in that
//!   minute (a dead letter replayed since is no longer counted).

use chrono::{DateTime, NaiveDateTime, Utc};
use uuid::Uuid;

use crate::model::{Status, Timestamp};

/// How many minutes the series spans.
pub const SERIES_MINUTES: usize = 60;

/// Events by status, over the whole table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// `pending`.
    pub pending: u64,
    /// `processing`.
    pub processing: u64,
    /// `completed`.
    pub completed: u64,
    /// `failed`.
    pub failed: u64,
}

impl StatusCounts {
    /// Adds `n` events of `status`.
    pub fn add(&mut self, status: Status, n: u64) {
        match status {
            Status::Pending => self.pending += n,
            Status::Processing => self.processing += n,
            Status::Completed => self.completed += n,
            Status::Failed => self.failed += n,
        }
    }

    /// Every event on record.
    pub fn total(&self) -> u64 {
        self.pending + self.processing + self.completed + self.failed
    }
}

/// One handler's deliveries on record, by status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandlerCounts {
    /// The handler's name.
    pub handler: String,
    /// Its deliveries by status.
    pub deliveries: StatusCounts,
    /// Attempts made by all of them (successful ones included).
    pub attempts: u64,
}

impl HandlerCounts {
    /// Completed deliveries among finished ones (completed or dead-lettered), or
    /// `None` when none has finished.
    ///
    /// ```
    /// use hookbox::store::overview::{HandlerCounts, StatusCounts};
    /// let h = HandlerCounts {
    ///     handler: "billing".into(),
    ///     deliveries: StatusCounts { completed: 3, failed: 1, ..Default::default() },
    ///     attempts: 9,
    /// };
    /// assert_eq!(h.success_rate(), Some(0.75));
    /// ```
    pub fn success_rate(&self) -> Option<f64> {
        let finished = self.deliveries.completed + self.deliveries.failed;
        (finished > 0).then(|| self.deliveries.completed as f64 / finished as f64)
    }
}

/// One minute of the series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minute {
    /// The minute's start.
    pub start: Timestamp,
    /// Events received.
    pub received: u64,
    /// Events completed.
    pub completed: u64,
    /// Deliveries dead-lettered.
    pub dead_lettered: u64,
}

/// What the console's overview shows of the database.
#[derive(Debug, Clone, Default)]
pub struct Overview {
    /// Events by status.
    pub events: StatusCounts,
    /// Deliveries per handler, by name.
    pub handlers: Vec<HandlerCounts>,
    /// The last [`SERIES_MINUTES`] minutes, oldest first, the current one last.
    pub minutes: Vec<Minute>,
}

/// Which of the series a counted row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Series {
    /// Events received.
    Received,
    /// Events completed.
    Completed,
    /// Deliveries dead-lettered.
    DeadLettered,
}

/// The first minute of the series that ends with the minute holding `now`.
pub(crate) fn series_start(now: Timestamp) -> Timestamp {
    let minute = now.millis().div_euclid(60_000) - (SERIES_MINUTES as i64 - 1);
    Timestamp(DateTime::from_timestamp_millis(minute * 60_000).unwrap_or(now.0))
}

/// The smallest UUID v7 of the millisecond `t`: ids at or above it were created at
/// `t` or later (v7 ids sort by time), so a range on the primary key finds them.
pub(crate) fn v7_floor(t: Timestamp) -> Uuid {
    let ms = u64::try_from(t.millis()).unwrap_or(0);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    Uuid::from_bytes(bytes)
}

/// Parses a minute cut from a stored text timestamp (`2026-11-25T22:44`).
pub(crate) fn parse_minute(text: &str) -> Option<Timestamp> {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
        .ok()
        .map(|t| Timestamp(DateTime::<Utc>::from_naive_utc_and_offset(t, Utc)))
}

/// Lays counted rows (minute, series, count) out as [`SERIES_MINUTES`] minutes
/// from `start`; rows outside the window are ignored.
pub(crate) fn lay_out(
    start: Timestamp,
    rows: impl IntoIterator<Item = (Timestamp, Series, u64)>,
) -> Vec<Minute> {
    let first = start.millis().div_euclid(60_000);
    let mut minutes: Vec<Minute> = (0..SERIES_MINUTES as i64)
        .map(|i| Minute {
            start: Timestamp(
                DateTime::from_timestamp_millis((first + i) * 60_000).unwrap_or(start.0),
            ),
            received: 0,
            completed: 0,
            dead_lettered: 0,
        })
        .collect();
    for (at, series, n) in rows {
        let Ok(i) = usize::try_from(at.millis().div_euclid(60_000) - first) else {
            continue;
        };
        let Some(m) = minutes.get_mut(i) else {
            continue;
        };
        match series {
            Series::Received => m.received += n,
            Series::Completed => m.completed += n,
            Series::DeadLettered => m.dead_lettered += n,
        }
    }
    minutes
}

/// Folds (handler, status, count, attempts) rows into per-handler counts, by name.
pub(crate) fn handlers(
    rows: impl IntoIterator<Item = (String, Status, u64, u64)>,
) -> Vec<HandlerCounts> {
    let mut by_name: std::collections::BTreeMap<String, HandlerCounts> = Default::default();
    for (handler, status, n, attempts) in rows {
        let h = by_name
            .entry(handler.clone())
            .or_insert_with(|| HandlerCounts {
                handler,
                ..HandlerCounts::default()
            });
        h.deliveries.add(status, n);
        h.attempts += attempts;
    }
    by_name.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v7_floor_sorts_below_every_id_of_its_millisecond_and_above_older_ones() {
        let t = Timestamp::now();
        let floor = v7_floor(t);
        let now = Uuid::now_v7();
        assert!(floor <= now);
        assert!(
            floor.to_string() <= now.to_string(),
            "text order too (SQLite)"
        );
        let older = v7_floor(Timestamp(t.0 - chrono::Duration::milliseconds(1)));
        assert!(older < floor);
    }

    #[test]
    fn rows_land_in_their_minute_and_outside_rows_are_dropped() {
        let now = Timestamp::parse("2026-11-25T22:44:57.123Z").expect("time");
        let start = series_start(now);
        assert_eq!(start.to_rfc3339(), "2026-11-25T21:45:00.000Z");
        let at = |s: &str| parse_minute(s).expect("minute");
        let minutes = lay_out(
            start,
            [
                (at("2026-11-25T21:45"), Series::Received, 2),
                (at("2026-11-25T22:44"), Series::Completed, 3),
                (at("2026-11-25T22:44"), Series::DeadLettered, 1),
                (at("2026-11-25T21:44"), Series::Received, 100),
                (at("2026-11-25T22:45"), Series::Received, 100),
            ],
        );
        assert_eq!(minutes.len(), SERIES_MINUTES);
        assert_eq!(minutes[0].received, 2);
        assert_eq!(minutes[59].completed, 3);
        assert_eq!(minutes[59].dead_lettered, 1);
        let total: u64 = minutes.iter().map(|m| m.received).sum();
        assert_eq!(total, 2);
    }
}
