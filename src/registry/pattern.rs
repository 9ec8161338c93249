//! Event type patterns: exact names, or a prefix followed by a trailing `*`.

use std::fmt;

/// One `event_types` entry of a handler.
///
/// ```
/// use hookbox::registry::Pattern;
/// let p = Pattern::parse("invoice.*").expect("valid");
/// assert!(p.matches("invoice.paid"));
/// assert!(!p.matches("order.created"));
/// assert!(Pattern::parse("*").expect("valid").matches("anything"));
/// assert!(Pattern::parse("in*voice").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// Matches one event type.
    Exact(String),
    /// Matches every event type that starts with the prefix (`""` matches all).
    Prefix(String),
}

/// Why a pattern is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid event type pattern {pattern:?}: {reason}")]
pub struct PatternError {
    /// The pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Pattern {
    /// Parses `name` or `prefix*`. The rest must be a valid event type fragment.
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        let err = |reason| PatternError {
            pattern: text.to_owned(),
            reason,
        };
        let (body, prefix) = match text.strip_suffix('*') {
            Some(p) => (p, true),
            None => (text, false),
        };
        if body.contains('*') {
            return Err(err("`*` is only allowed at the end"));
        }
        if !prefix && body.is_empty() {
            return Err(err("empty pattern"));
        }
        if body.len() > 255 || !body.bytes().all(is_event_type_byte) {
            return Err(err(
                "only A-Z a-z 0-9 . _ : / - are allowed, at most 255 bytes",
            ));
        }
        Ok(if prefix {
            Self::Prefix(body.to_owned())
        } else {
            Self::Exact(body.to_owned())
        })
    }

    /// True when `event_type` is one this pattern routes.
    pub fn matches(&self, event_type: &str) -> bool {
        match self {
            Self::Exact(name) => name == event_type,
            Self::Prefix(prefix) => event_type.starts_with(prefix.as_str()),
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(name) => f.write_str(name),
            Self::Prefix(prefix) => write!(f, "{prefix}*"),
        }
    }
}

/// The bytes an event type may contain: `[A-Za-z0-9._:/-]`.
pub fn is_event_type_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-')
}
