//! One fetched item (a page's array element, a WebSocket message) becomes an event,
//! or is refused with a reason.
//!
//! The item's canonical JSON text (`crate::json`) is its payload; the manifest's
//! pointers find its id (`{name}:{id}` is the idempotency key), its type (prefixed),
//! its cursor value and, when configured, the source's sequence number and
//! timestamp. A value that a pointer finds must be a string or a number.

use chrono::DateTime;

use crate::inbox::{EventType, IdempotencyKey, Payload};
use crate::json;
use crate::model::Timestamp;

/// Where each value is found in an item: JSON pointers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fields {
    /// The item's id (required in every item).
    pub id: String,
    /// Its event type (required; the source's prefix is prepended).
    pub event_type: String,
    /// Its cursor value: the last committed item's is where the adapter resumes.
    pub cursor: String,
    /// The source's sequence number (optional).
    pub sequence: Option<String>,
    /// The source's timestamp (optional): RFC 3339 text, or Unix seconds (or
    /// milliseconds, past the year 2286 in seconds).
    pub emitted_at: Option<String>,
}

impl Default for Fields {
    /// `/id`, `/type`, the cursor at `/id`, no sequence, no timestamp.
    fn default() -> Self {
        Self {
            id: "/id".into(),
            event_type: "/type".into(),
            cursor: "/id".into(),
            sequence: None,
            emitted_at: None,
        }
    }
}

/// An item that is an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    /// `{name}:{id}`.
    pub key: IdempotencyKey,
    /// Prefix + the item's type.
    pub event_type: EventType,
    /// The item's canonical JSON text.
    pub payload: Payload,
    /// The JSON text of its cursor value, if it has one.
    pub cursor: Option<String>,
    /// The source's sequence number, if given and an integer.
    pub sequence: Option<i64>,
    /// The source's timestamp, if given and readable.
    pub emitted_at: Option<Timestamp>,
}

/// An item that cannot be an event: why, and its cursor value if it has one (the
/// cursor moves past it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// The problem code it is logged with: `invalid_body` (not JSON),
    /// `invalid_idempotency_key` (no usable id), `invalid_event_type`.
    pub code: &'static str,
    /// What is wrong (names the pointer; never a header value).
    pub detail: String,
    /// The JSON text of its cursor value, if it has one.
    pub cursor: Option<String>,
}

/// Reads one item (`text`, any JSON) of the source `name`.
pub(crate) fn read(fields: &Fields, name: &str, prefix: &str, text: &str) -> Result<Item, Refused> {
    let payload = json::canonical(text).map_err(|e| Refused {
        code: "invalid_body",
        detail: format!("the item is not JSON: {e}"),
        cursor: None,
    })?;
    let cursor = json::pointer(&payload, &fields.cursor)
        .filter(|c| *c != "null")
        .map(str::to_owned);
    let refuse = |code: &'static str, detail: String| Refused {
        code,
        detail,
        cursor: cursor.clone(),
    };
    let id = scalar(&payload, &fields.id).ok_or_else(|| {
        refuse(
            "invalid_idempotency_key",
            format!("no id (a string or number) at {}", fields.id),
        )
    })?;
    let key = IdempotencyKey::new(format!("{name}:{id}")).map_err(|why| {
        refuse(
            "invalid_idempotency_key",
            format!("{why} (the key is {{name}}:{{id}})"),
        )
    })?;
    let provider_type = scalar(&payload, &fields.event_type).ok_or_else(|| {
        refuse(
            "invalid_event_type",
            format!("no event type (a string) at {}", fields.event_type),
        )
    })?;
    let event_type = format!("{prefix}{provider_type}");
    let event_type = EventType::new(event_type.clone()).map_err(|why| {
        refuse(
            "invalid_event_type",
            format!("event type {event_type:?}: {why}"),
        )
    })?;
    let sequence = fields
        .sequence
        .as_deref()
        .and_then(|p| scalar(&payload, p))
        .and_then(|s| s.parse::<i64>().ok());
    let emitted_at = fields
        .emitted_at
        .as_deref()
        .and_then(|p| scalar(&payload, p))
        .and_then(|s| timestamp(&s));
    Ok(Item {
        key,
        event_type,
        payload: Payload::new(payload),
        cursor,
        sequence,
        emitted_at,
    })
}

/// The string or number at `pointer` (non-empty), as text.
fn scalar(payload: &str, pointer: &str) -> Option<String> {
    let literal = json::pointer(payload, pointer)?;
    let text = match literal.as_bytes().first()? {
        b'"' => json::string_value(literal)?,
        b'-' | b'0'..=b'9' => literal.to_owned(),
        _ => return None,
    };
    (!text.is_empty()).then_some(text)
}

/// RFC 3339 text, or Unix seconds (milliseconds when larger than 10^10).
fn timestamp(text: &str) -> Option<Timestamp> {
    if let Some(t) = Timestamp::parse(text) {
        return Some(t);
    }
    let n: f64 = text.parse().ok()?;
    let millis = if n.abs() > 1e10 { n } else { n * 1000.0 };
    if !millis.is_finite() || millis.abs() > 1e15 {
        return None;
    }
    DateTime::from_timestamp_millis(millis as i64).map(Timestamp)
}

/// The cursor as the query parameter carries it: a string's text, any other
/// value's JSON text.
pub(crate) fn cursor_param(cursor: &str) -> String {
    if cursor.starts_with('"') {
        if let Some(s) = json::string_value(cursor) {
            return s;
        }
    }
    cursor.to_owned()
}

/// The subscribe message: `template` with every `{cursor}` replaced by the JSON of
/// the cursor (`null` when there is none).
pub(crate) fn subscribe_message(template: &str, cursor: Option<&str>) -> String {
    template.replace("{cursor}", cursor.unwrap_or("null"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_module_example() {
        use crate::sources::pull::item::{Fields, read};

        let fields = Fields::default();
        let item = read(
            &fields,
            "ledger",
            "ledger.",
            r#"{"id": 7, "type": "entry.posted"}"#,
        )
        .unwrap();
        assert_eq!(item.key.as_str(), "ledger:7");
        assert_eq!(item.event_type.as_str(), "ledger.entry.posted");
        assert_eq!(item.cursor.as_deref(), Some("7"));
    }

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_cursor_param_example() {
        use crate::sources::pull::item::cursor_param;
        assert_eq!(cursor_param("\"c_9\""), "c_9");
        assert_eq!(cursor_param("42"), "42");
    }

    /// The example that was this item's doc test (the item is crate-private).
    #[test]
    fn the_subscribe_message_example() {
        use crate::sources::pull::item::subscribe_message;
        let t = r#"{"op": "subscribe", "after": {cursor}}"#;
        assert_eq!(
            subscribe_message(t, None),
            r#"{"op": "subscribe", "after": null}"#
        );
        assert_eq!(
            subscribe_message(t, Some("\"x\"")),
            r#"{"op": "subscribe", "after": "x"}"#
        );
    }

    fn fields() -> Fields {
        Fields {
            id: "/id".into(),
            event_type: "/kind".into(),
            cursor: "/pos".into(),
            sequence: Some("/seq".into()),
            emitted_at: Some("/at".into()),
        }
    }

    #[test]
    fn an_item_keeps_its_numbers_and_finds_every_field() {
        let item = read(
            &fields(),
            "s",
            "s.",
            r#"{"id": "a1", "kind": "x.y", "pos": {"p": 1}, "seq": 12, "at": "2026-11-25T10:00:00Z", "n": 1.50}"#,
        )
        .expect("an event");
        assert_eq!(item.key.as_str(), "s:a1");
        assert_eq!(item.event_type.as_str(), "s.x.y");
        assert_eq!(item.cursor.as_deref(), Some(r#"{"p":1}"#));
        assert_eq!(item.sequence, Some(12));
        assert_eq!(
            item.emitted_at.map(|t| t.to_rfc3339()).as_deref(),
            Some("2026-11-25T10:00:00.000Z")
        );
        assert!(
            item.payload.text().contains("\"n\":1.50"),
            "{}",
            item.payload.text()
        );
    }

    #[test]
    fn bad_items_are_refused_with_their_cursor() {
        let no_id = read(&fields(), "s", "s.", r#"{"kind": "x", "pos": 3}"#).expect_err("no id");
        assert_eq!(no_id.cursor.as_deref(), Some("3"));
        assert!(no_id.detail.contains("/id"), "{}", no_id.detail);
        let no_type = read(&fields(), "s", "s.", r#"{"id": 1, "pos": 4}"#).expect_err("no type");
        assert_eq!(no_type.cursor.as_deref(), Some("4"));
        let bad_type = read(
            &fields(),
            "s",
            "s.",
            r#"{"id": 1, "kind": "a b", "pos": 5}"#,
        )
        .expect_err("type");
        assert!(
            bad_type.detail.contains("event type"),
            "{}",
            bad_type.detail
        );
        let not_json = read(&fields(), "s", "s.", "{nope").expect_err("not JSON");
        assert_eq!(not_json.cursor, None);
    }

    #[test]
    fn timestamps_in_seconds_or_milliseconds() {
        let secs = timestamp("1764064800").expect("seconds");
        let millis = timestamp("1764064800000").expect("millis");
        assert_eq!(secs, millis);
        assert!(timestamp("soon").is_none());
        assert!(timestamp("1e300").is_none());
    }
}
