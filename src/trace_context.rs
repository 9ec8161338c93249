//! W3C Trace Context (level 1) for events: the `traceparent` (and `tracestate`)
//! a sender gives at intake is kept with the event, or a new trace is started;
//! each delivery attempt is a child span of it, propagated as `traceparent` to an
//! http receiver and as `TRACEPARENT` to an exec child (SPEC §13).
//!
//! A `traceparent` is valid when it is exactly `00-<32 hex>-<16 hex>-<2 hex>` in
//! lower case, with a trace id and a parent id that are not all zeros; anything
//! else (version `ff` or another version, upper case, wrong lengths, zero ids) is
//! ignored and a new trace is started. A `tracestate` is kept only beside a valid
//! `traceparent`, and only up to 512 bytes of visible ASCII (the W3C limit).
//!
//! ```
//! use hookbox::trace_context::TraceContext;
//!
//! let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
//! let event = TraceContext::accept(Some(given), Some("vendor=1"));
//! assert_eq!(event.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! assert_ne!(event.span_id(), "00f067aa0ba902b7", "hookbox's intake is a span of its own");
//! let attempt = event.child();
//! assert_eq!(attempt.trace_id(), event.trace_id());
//! assert!(attempt.traceparent().starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"));
//! assert_eq!(attempt.tracestate(), Some("vendor=1"));
//! // Invalid: a new trace.
//! let fresh = TraceContext::accept(Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), None);
//! assert_ne!(fresh.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
//! ```

use std::time::SystemTime;

/// The longest `tracestate` kept.
const MAX_TRACESTATE: usize = 512;

/// Where an intake span began: the sender's span (its parent, when the request
/// carried a valid `traceparent`) and the time. Known only at intake; not stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Began {
    parent: Option<String>,
    at: SystemTime,
}

/// A position in a trace: its trace id, a span id, the flags, and the vendors'
/// `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: String,
    span_id: String,
    flags: String,
    tracestate: Option<String>,
    began: Option<Began>,
}

impl TraceContext {
    /// The event's context at intake: a span of hookbox's own in the sender's
    /// trace when `traceparent` is valid, else a new trace (sampled).
    pub fn accept(traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        let at = SystemTime::now();
        match traceparent.and_then(|t| Some((parse(t)?, t))) {
            Some(((trace_id, flags), text)) => Self {
                trace_id,
                span_id: random_hex(8),
                flags,
                tracestate: tracestate.and_then(kept_state),
                began: Some(Began {
                    parent: Some(text.trim_matches([' ', '\t'])[36..52].to_owned()),
                    at,
                }),
            },
            None => Self {
                trace_id: random_hex(16),
                span_id: random_hex(8),
                flags: "01".into(),
                tracestate: None,
                began: Some(Began { parent: None, at }),
            },
        }
    }

    /// A stored context (`traceparent` as [`TraceContext::traceparent`] wrote it);
    /// `None` when it is missing or not valid.
    pub fn stored(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let text = traceparent?;
        let (trace_id, flags) = parse(text)?;
        Some(Self {
            trace_id,
            span_id: text[36..52].to_owned(),
            flags,
            tracestate: tracestate.and_then(kept_state),
            began: None,
        })
    }

    /// A child span: the same trace, a new span id (one per attempt).
    pub fn child(&self) -> Self {
        Self {
            span_id: random_hex(8),
            began: None,
            ..self.clone()
        }
    }

    /// The sender's span, parent of hookbox's intake span: known only for a
    /// context made by [`TraceContext::accept`] from a valid `traceparent`.
    pub fn parent_span_id(&self) -> Option<&str> {
        self.began.as_ref()?.parent.as_deref()
    }

    /// When [`TraceContext::accept`] made this context (the intake span's start);
    /// `None` for a stored context or a child.
    pub fn began_at(&self) -> Option<SystemTime> {
        self.began.as_ref().map(|b| b.at)
    }

    /// Whether the trace is sampled (flag `01`): only sampled spans are exported.
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.flags, 16).is_ok_and(|f| f & 1 == 1)
    }

    /// The 32-hex trace id.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// The 16-hex span id.
    pub fn span_id(&self) -> &str {
        &self.span_id
    }

    /// `00-<trace id>-<span id>-<flags>`.
    pub fn traceparent(&self) -> String {
        format!("00-{}-{}-{}", self.trace_id, self.span_id, self.flags)
    }

    /// The vendors' `tracestate`, as the sender gave it.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// The trace id and flags of a valid level-1 `traceparent`.
fn parse(text: &str) -> Option<(String, String)> {
    let text = text.trim_matches([' ', '\t']);
    let b = text.as_bytes();
    if b.len() != 55 || !text.starts_with("00-") || b[35] != b'-' || b[52] != b'-' {
        return None;
    }
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    let (trace, parent, flags) = (&text[3..35], &text[36..52], &text[53..55]);
    let zero = |s: &str| s.bytes().all(|c| c == b'0');
    (lower_hex(trace) && lower_hex(parent) && lower_hex(flags) && !zero(trace) && !zero(parent))
        .then(|| (trace.to_owned(), flags.to_owned()))
}

/// A `tracestate` worth keeping: at most 512 bytes of visible ASCII.
fn kept_state(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()
        && text.len() <= MAX_TRACESTATE
        && text.bytes().all(|c| (0x20..0x7f).contains(&c)))
    .then(|| text.to_owned())
}

/// `bytes` random bytes as lower-case hex, never all zeros. Trace and span ids
/// need to be unique, not secret: the thread's fast generator (seeded from the
/// OS) serves, with no system call on the intake path.
fn random_hex(bytes: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    loop {
        let mut text = String::with_capacity(bytes * 2);
        let mut any = false;
        for _ in 0..bytes {
            let b = fastrand::u8(..);
            any |= b != 0;
            text.push(char::from(HEX[usize::from(b >> 4)]));
            text.push(char::from(HEX[usize::from(b & 15)]));
        }
        if any {
            return text;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn the_w3c_rules_for_a_valid_traceparent() {
        let good = format!("00-{TRACE}-00f067aa0ba902b7-01");
        let kept = TraceContext::accept(Some(&good), None);
        assert_eq!(kept.trace_id(), TRACE);
        assert_eq!(kept.parent_span_id(), Some("00f067aa0ba902b7"));
        let unsampled = format!("00-{TRACE}-00f067aa0ba902b7-00");
        assert!(!TraceContext::accept(Some(&unsampled), None).sampled());
        for bad in [
            format!("ff-{TRACE}-00f067aa0ba902b7-01"),
            format!("01-{TRACE}-00f067aa0ba902b7-01"),
            format!("00-{}-00f067aa0ba902b7-01", TRACE.to_uppercase()),
            format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32)),
            format!("00-{TRACE}-0000000000000000-01"),
            format!("00-{TRACE}-00f067aa0ba902b-01"),
            format!("00-{TRACE}-00f067aa0ba902b7-01-extra"),
            format!("00-{TRACE}-00f067aa0ba902b7-0g"),
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01".to_owned(),
            String::new(),
        ] {
            let t = TraceContext::accept(Some(&bad), Some("a=b"));
            assert_ne!(t.trace_id(), TRACE, "{bad}");
            assert_eq!(
                t.tracestate(),
                None,
                "{bad}: no tracestate without a valid parent"
            );
            assert!(
                parse(&t.traceparent()).is_some(),
                "a new trace is itself valid"
            );
        }
    }

    #[test]
    fn stored_contexts_round_trip_and_children_share_the_trace() {
        let t = TraceContext::accept(None, None);
        assert_eq!((t.trace_id().len(), t.span_id().len()), (32, 16));
        let back = TraceContext::stored(Some(&t.traceparent()), None).expect("valid");
        assert_eq!(back.traceparent(), t.traceparent());
        assert_eq!((back.began_at(), t.parent_span_id()), (None, None));
        assert!(t.began_at().is_some() && t.sampled());
        let c = t.child();
        assert_eq!(c.trace_id(), t.trace_id());
        assert_ne!(c.span_id(), t.span_id());
        assert_eq!(TraceContext::stored(Some("junk"), None), None);
        assert_eq!(kept_state(&"a".repeat(513)), None);
        assert_eq!(kept_state("k=v\u{7}"), None);
    }
}
