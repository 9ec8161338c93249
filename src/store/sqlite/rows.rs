//! How SQLite keeps each kind of column ([`RowExt`] for [`SqliteRow`]: uuids and
//! timestamps as TEXT), and loading deliveries to attach to events.

use sqlx::sqlite::{SqlitePool, SqliteRow};
use sqlx::{QueryBuilder, Row, Sqlite};
use uuid::Uuid;

use crate::model::{EventView, Timestamp};
use crate::store::StoreError;
use crate::store::rows::{DELIVERY_VIEW_COLUMNS, RowExt, attach, parse_time, parse_uuid};

pub(super) use crate::store::rows::{
    ATTEMPT_COLUMNS, ATTEMPT_ORDER, EVENT_COLUMNS, SUMMARY_COLUMNS, attempt, delivery_task,
    event_view, subscriber, summary,
};

/// `id` as SQLite keeps it: 36 characters, lower-case hex with hyphens. Written
/// straight into a string of its size (`to_string` went through `core::fmt`, about
/// six times the instructions), for the binds of every batch.
pub(super) fn id_text(id: &Uuid) -> String {
    id.hyphenated()
        .encode_lower(&mut Uuid::encode_buffer())
        .to_owned()
}

impl RowExt for SqliteRow {
    fn text(&self, col: &str) -> Result<&str, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_text(&self, col: &str) -> Result<Option<&str>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn int(&self, col: &str) -> Result<i64, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn long(&self, col: &str) -> Result<i64, StoreError> {
        self.int(col)
    }

    fn opt_int(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn opt_big(&self, col: &str) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn blob(&self, col: &str) -> Result<Vec<u8>, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn flag(&self, col: &str) -> Result<bool, StoreError> {
        Ok(self.try_get(col)?)
    }

    fn uuid(&self, col: &str) -> Result<Uuid, StoreError> {
        parse_uuid(col, self.text(col)?)
    }

    fn timestamp(&self, col: &str) -> Result<Timestamp, StoreError> {
        parse_time(col, self.text(col)?)
    }

    fn opt_timestamp(&self, col: &str) -> Result<Option<Timestamp>, StoreError> {
        self.opt_text(col)?.map(|t| parse_time(col, t)).transpose()
    }
}

/// Loads the deliveries of `events` (one query) and attaches them in handler order.
pub(super) async fn attach_deliveries(
    pool: &SqlitePool,
    events: &mut [EventView],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut qb = QueryBuilder::<Sqlite>::new(format!(
        "SELECT {DELIVERY_VIEW_COLUMNS} FROM deliveries WHERE event_id IN ("
    ));
    let mut list = qb.separated(", ");
    for e in events.iter() {
        list.push_bind(e.id.to_string());
    }
    qb.push(") ORDER BY handler");
    let rows = qb.build().fetch_all(pool).await?;
    attach(&rows, events)
}

#[cfg(test)]
mod tests {
    use super::id_text;
    use uuid::Uuid;

    /// The text is the one `Display` writes, which every stored id was written as.
    #[test]
    fn id_text_is_the_display_text() {
        for id in [Uuid::nil(), Uuid::max(), Uuid::now_v7(), Uuid::new_v4()] {
            assert_eq!(id_text(&id), id.to_string());
        }
    }
}
