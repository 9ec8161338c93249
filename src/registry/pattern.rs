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

/// The longest event type or idempotency key, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Why `t` is not a valid event type (empty, over [`MAX_NAME_BYTES`], or outside
/// `[A-Za-z0-9._:/-]`), or `None` when it is one.
///
/// ```
/// use hookbox::registry::event_type_error;
/// assert_eq!(event_type_error("order.created"), None);
/// assert!(event_type_error("order created").is_some());
/// ```
pub fn event_type_error(t: &str) -> Option<&'static str> {
    if t.is_empty() {
        Some("event_type must not be empty")
    } else if t.len() > MAX_NAME_BYTES {
        Some("event_type must be at most 255 bytes")
    } else if !t.bytes().all(is_event_type_byte) {
        Some("event_type may only contain A-Z a-z 0-9 . _ : / -")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One valid event type fragment.
    const NAME: &str = "[A-Za-z0-9._:/-]{1,40}";

    proptest! {

        #![proptest_config(crate::test_cases::cases(256))]
        /// Any text either parses or is refused; it never panics, and what parses
        /// prints back as written.
        #[test]
        fn any_text_parses_or_is_refused(text in "\\PC{0,60}") {
            if let Ok(p) = Pattern::parse(&text) {
                prop_assert_eq!(p.to_string(), text);
            }
        }

        /// A valid name is an exact pattern matching only itself.
        #[test]
        fn exact_names_match_only_themselves(name in NAME, other in NAME) {
            let p = Pattern::parse(&name).expect("valid");
            prop_assert_eq!(&p, &Pattern::Exact(name.clone()));
            prop_assert!(p.matches(&name));
            prop_assert_eq!(p.matches(&other), name == other);
        }

        /// `prefix*` matches exactly the event types that start with the prefix.
        #[test]
        fn prefixes_match_what_starts_with_them(prefix in "[A-Za-z0-9._:/-]{0,20}", rest in "[A-Za-z0-9._:/-]{0,20}", other in NAME) {
            let p = Pattern::parse(&format!("{prefix}*")).expect("valid");
            let joined = format!("{prefix}{rest}");
            prop_assert!(p.matches(&joined));
            prop_assert_eq!(p.matches(&other), other.starts_with(&prefix));
        }

        /// A byte outside `[A-Za-z0-9._:/-]`, or a `*` before the end, is refused.
        #[test]
        fn bad_bytes_and_inner_stars_are_refused(
            head in "[a-z]{0,10}",
            bad in "[^A-Za-z0-9._:/*-]",
            tail in "[a-z]{0,10}",
        ) {
            let with_bad = format!("{head}{bad}{tail}");
            let inner_star = format!("{head}*{tail}x");
            prop_assert!(Pattern::parse(&with_bad).is_err());
            prop_assert!(Pattern::parse(&(with_bad + "*")).is_err());
            prop_assert!(Pattern::parse(&inner_star).is_err());
        }

        /// Names over 255 bytes are refused, with or without the star.
        #[test]
        fn long_names_are_refused(len in 256usize..400) {
            let name = "a".repeat(len);
            let starred = format!("{name}*");
            prop_assert!(Pattern::parse(&name).is_err());
            prop_assert!(Pattern::parse(&starred).is_err());
        }
    }
}
