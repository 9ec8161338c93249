//! What the console's overview and dead-letter pages read: counts by status, each
//! handler's deliveries, a per-minute series of the last hour, and dead letters
//! under a filter. The SQL, the filter and the decoding of the rows (over
//! `RowExt`) are written here once; each backend only runs them with its own
//! binds (`sqlite/overview.rs`, `postgres/overview.rs`), and says how a minute is
//! cut out of a timestamp column (`series_sql`): text on one, `timestamptz` on
//! the other.
//!
//! What the series counts (docs/operating.md):
//! - *received*: events created in that minute;
//! - *completed*: events now `completed` whose last change fell in that minute,
//!   among those created in the last two hours (an event that took longer than an
//!   hour between its arrival and its completion is not in the series);
//! - *dead-lettered*: deliveries now `failed` whose last change fell in that
//!   minute (a dead letter replayed since is no longer counted).

use chrono::DateTime;
use uuid::Uuid;

use crate::model::{DeadLetter, Status, Timestamp};
use crate::store::rows::{self, RowExt};
use crate::store::{Page, ReplayFilter, StoreError};

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

/// Events by status.
pub(super) const EVENTS_BY_STATUS: &str =
    "SELECT status, COUNT(*) AS n FROM events GROUP BY status";

/// Deliveries by handler and status, with their attempts.
pub(super) const DELIVERIES_BY_HANDLER: &str = "SELECT handler, status, COUNT(*) AS n, \
     CAST(COALESCE(SUM(attempts), 0) AS BIGINT) AS attempts \
     FROM deliveries GROUP BY handler, status";

/// The per-minute series' query, with `minute(column)` the backend's expression
/// for the minute holding a timestamp column (as a timestamp column). Binds: `$1`
/// the v7 floor of the series' start, `$2` that of an hour earlier, `$3` the
/// series' start.
pub(super) fn series_sql(minute: impl Fn(&str) -> String) -> String {
    let (created, updated) = (minute("created_at"), minute("updated_at"));
    format!(
        "SELECT 'r' AS series, {created} AS minute, COUNT(*) AS n \
           FROM events WHERE id >= $1 GROUP BY 2 \
         UNION ALL \
         SELECT 'c', {updated}, COUNT(*) \
           FROM events WHERE id >= $2 AND status = 'completed' AND updated_at >= $3 \
           GROUP BY 2 \
         UNION ALL \
         SELECT 'd', {updated}, COUNT(*) \
           FROM deliveries WHERE status = 'failed' AND updated_at >= $3 GROUP BY 2"
    )
}

/// The series' start for `now`, and the start of the hour before it (the oldest
/// events whose completion may fall in the series).
pub(super) fn series_window(now: Timestamp) -> (Timestamp, Timestamp) {
    let start = series_start(now);
    (start, Timestamp(start.0 - chrono::Duration::hours(1)))
}

fn count(row: &impl RowExt, col: &str) -> Result<u64, StoreError> {
    Ok(u64::try_from(row.long(col)?).unwrap_or(0))
}

fn status(row: &impl RowExt) -> Result<Status, StoreError> {
    let text = row.text("status")?;
    Status::parse(text).ok_or_else(|| StoreError::Corrupt(format!("status {text:?}")))
}

/// The overview from the rows of [`EVENTS_BY_STATUS`], [`DELIVERIES_BY_HANDLER`]
/// and [`series_sql`] for the series starting at `start`.
pub(super) fn assemble<R: RowExt>(
    start: Timestamp,
    by_status: &[R],
    by_handler: &[R],
    series: &[R],
) -> Result<Overview, StoreError> {
    let mut events = StatusCounts::default();
    for row in by_status {
        events.add(status(row)?, count(row, "n")?);
    }
    let by_handler = by_handler
        .iter()
        .map(|r| {
            Ok((
                r.text("handler")?.to_owned(),
                status(r)?,
                count(r, "n")?,
                count(r, "attempts")?,
            ))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let mut counted = Vec::with_capacity(series.len());
    for r in series {
        let which = match r.text("series")? {
            "r" => Series::Received,
            "c" => Series::Completed,
            _ => Series::DeadLettered,
        };
        counted.push((r.timestamp("minute")?, which, count(r, "n")?));
    }
    Ok(Overview {
        events,
        handlers: handlers(by_handler),
        minutes: lay_out(start, counted),
    })
}

/// What the dead-letter queries bind, in the backend's types.
pub(super) trait FilterBinds {
    /// Appends SQL text.
    fn sql(&mut self, text: &str);
    /// Appends a bound uuid.
    fn uuid(&mut self, id: Uuid);
    /// Appends a bound text.
    fn text(&mut self, text: &str);
    /// Appends a bound timestamp.
    fn time(&mut self, at: Timestamp);
    /// Appends a bound integer.
    fn int(&mut self, n: i64);
}

/// The dead letters' columns and join, before [`push_filter`].
pub(super) const DEAD_LETTERS_FROM: &str = "SELECT d.id, d.handler, d.status, d.attempts, \
     d.last_error, d.updated_at, e.id AS event_id, e.idempotency_key, e.event_type, \
     e.status AS event_status, e.created_at, e.payload \
     FROM deliveries d JOIN events e ON e.id = d.event_id";

/// Their count, before [`push_filter`].
pub(super) const DEAD_LETTERS_COUNT: &str =
    "SELECT COUNT(*) AS n FROM deliveries d JOIN events e ON e.id = d.event_id";

/// `WHERE` conditions selecting the failed deliveries `d` of events `e` that
/// `filter` names — the same selection as the replay.
pub(super) fn push_filter(q: &mut impl FilterBinds, filter: &ReplayFilter) {
    q.sql(" WHERE d.status = 'failed'");
    if let Some(event) = filter.event {
        q.sql(" AND e.id = ");
        q.uuid(event);
    }
    if let Some(t) = &filter.event_type {
        q.sql(" AND e.event_type = ");
        q.text(t);
    }
    if let Some(before) = filter.before {
        q.sql(" AND e.created_at < ");
        q.time(before);
    }
    if let Some(h) = &filter.handler {
        q.sql(" AND d.handler = ");
        q.text(h);
    }
}

/// After [`DEAD_LETTERS_FROM`] and [`push_filter`]: the page before the dead
/// letter `before`, newest first, one more than `limit` (to know whether there is
/// a next page).
pub(super) fn push_page(q: &mut impl FilterBinds, limit: u32, before: Option<Uuid>) {
    if let Some(before) = before {
        q.sql(" AND d.id < ");
        q.uuid(before);
    }
    q.sql(" ORDER BY d.id DESC LIMIT ");
    q.int(i64::from(limit) + 1);
}

/// The page of dead letters from the rows [`push_page`] asked for.
pub(super) fn dead_letter_page(
    fetched: &[impl RowExt],
    limit: u32,
) -> Result<Page<DeadLetter>, StoreError> {
    let mut items = fetched
        .iter()
        .map(rows::dead_letter)
        .collect::<Result<Vec<_>, _>>()?;
    let next_cursor = crate::store::cut_page(&mut items, limit, |x| x.id);
    Ok(Page { items, next_cursor })
}

/// The count from the row of [`DEAD_LETTERS_COUNT`].
pub(super) fn dead_letter_count(row: &impl RowExt) -> Result<u64, StoreError> {
    count(row, "n")
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
        let at = |s: &str| Timestamp::parse(&format!("{s}:00Z")).expect("minute");
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
