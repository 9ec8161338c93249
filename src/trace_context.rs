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

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

/// The longest `tracestate` kept.
const MAX_TRACESTATE: usize = 512;

/// Whether intake spans are timed ([`time_intake_spans`]).
static TIMED: AtomicBool = AtomicBool::new(false);

/// From now on, [`TraceContext::accept`] reads the clock for the intake span's
/// start (the OTLP exporter asks for it; without it nothing reads the time).
pub fn time_intake_spans() {
    TIMED.store(true, Ordering::Relaxed);
}

/// Lower-case hex digits of a fixed length: a trace id (32), a span id (16) or
/// the flags (2), kept inline so that making or cloning a context allocates
/// nothing but its `tracestate`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Hex<const N: usize>([u8; N]);

impl<const N: usize> Hex<N> {
    /// `text` when it is exactly `N` lower-case hex digits, not all zeros.
    fn parse(text: &str) -> Option<Self> {
        let bytes: [u8; N] = text.as_bytes().try_into().ok()?;
        let hex = bytes
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c));
        (hex && bytes.iter().any(|c| *c != b'0')).then_some(Self(bytes))
    }

    /// `N / 2` random bytes as hex, never all zeros. Trace and span ids need to
    /// be unique, not secret: the thread's fast generator (seeded from the OS)
    /// serves, with no system call on the intake path.
    fn random() -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        loop {
            let mut out = [b'0'; N];
            // One draw of the generator per 16 digits.
            for digits in out.chunks_mut(16) {
                let mut bits = fastrand::u64(..);
                for d in digits {
                    *d = DIGITS[(bits & 15) as usize];
                    bits >>= 4;
                }
            }
            if out.iter().any(|c| *c != b'0') {
                return Self(out);
            }
        }
    }

    fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl<const N: usize> fmt::Debug for Hex<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an intake span began: the sender's span (its parent, when the request
/// carried a valid `traceparent`) and the time. Known only at intake; not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Began {
    parent: Option<Hex<16>>,
    at: SystemTime,
}

/// A position in a trace: its trace id, a span id, the flags, and the vendors'
/// `tracestate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: Hex<32>,
    span_id: Hex<16>,
    flags: [u8; 2],
    tracestate: Option<String>,
    began: Option<Began>,
}

impl TraceContext {
    /// The event's context at intake: a span of hookbox's own in the sender's
    /// trace when `traceparent` is valid, else a new trace (sampled).
    pub fn accept(traceparent: Option<&str>, tracestate: Option<&str>) -> Self {
        // The start of the intake span: read only when spans are exported.
        let at = if TIMED.load(Ordering::Relaxed) {
            SystemTime::now()
        } else {
            SystemTime::UNIX_EPOCH
        };
        match traceparent.and_then(parse) {
            Some(given) => Self {
                span_id: Hex::random(),
                tracestate: tracestate.and_then(kept_state),
                began: Some(Began {
                    parent: Some(given.span_id),
                    at,
                }),
                ..given
            },
            None => Self {
                trace_id: Hex::random(),
                span_id: Hex::random(),
                flags: *b"01",
                tracestate: None,
                began: Some(Began { parent: None, at }),
            },
        }
    }

    /// A stored context (`traceparent` as [`TraceContext::traceparent`] wrote it);
    /// `None` when it is missing or not valid.
    pub fn stored(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        Some(Self {
            tracestate: tracestate.and_then(kept_state),
            ..parse(traceparent?)?
        })
    }

    /// A child span: the same trace, a new span id (one per attempt).
    pub fn child(&self) -> Self {
        Self {
            span_id: Hex::random(),
            began: None,
            ..self.clone()
        }
    }

    /// The sender's span, parent of hookbox's intake span: known only for a
    /// context made by [`TraceContext::accept`] from a valid `traceparent`.
    pub fn parent_span_id(&self) -> Option<&str> {
        self.began.as_ref()?.parent.as_ref().map(Hex::as_str)
    }

    /// When [`TraceContext::accept`] made this context (the intake span's start;
    /// the Unix epoch unless [`time_intake_spans`] was called); `None` for a
    /// stored context or a child.
    pub fn began_at(&self) -> Option<SystemTime> {
        self.began.as_ref().map(|b| b.at)
    }

    /// Whether the trace is sampled (flag `01`): only sampled spans are exported.
    pub fn sampled(&self) -> bool {
        // The low bit of the flags' second hex digit.
        matches!(
            self.flags[1],
            b'1' | b'3' | b'5' | b'7' | b'9' | b'b' | b'd' | b'f'
        )
    }

    /// The 32-hex trace id.
    pub fn trace_id(&self) -> &str {
        self.trace_id.as_str()
    }

    /// The 16-hex span id.
    pub fn span_id(&self) -> &str {
        self.span_id.as_str()
    }

    /// `00-<trace id>-<span id>-<flags>`.
    pub fn traceparent(&self) -> String {
        let mut text = String::with_capacity(55);
        text.push_str("00-");
        text.push_str(self.trace_id.as_str());
        text.push('-');
        text.push_str(self.span_id.as_str());
        text.push('-');
        text.push(char::from(self.flags[0]));
        text.push(char::from(self.flags[1]));
        text
    }

    /// The vendors' `tracestate`, as the sender gave it.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// A valid level-1 `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`, lower case,
/// non-zero ids), without a `tracestate`.
fn parse(text: &str) -> Option<TraceContext> {
    let text = text.trim_matches([' ', '\t']);
    let b = text.as_bytes();
    // ASCII first: slicing at byte offsets below must not split a character.
    if b.len() != 55
        || !text.is_ascii()
        || !text.starts_with("00-")
        || b[35] != b'-'
        || b[52] != b'-'
    {
        return None;
    }
    let flags = &b[53..55];
    if !flags
        .iter()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
    {
        return None;
    }
    Some(TraceContext {
        trace_id: Hex::parse(&text[3..35])?,
        span_id: Hex::parse(&text[36..52])?,
        flags: [flags[0], flags[1]],
        tracestate: None,
        began: None,
    })
}

/// A `tracestate` worth keeping: at most 512 bytes of visible ASCII.
fn kept_state(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()
        && text.len() <= MAX_TRACESTATE
        && text.bytes().all(|c| (0x20..0x7f).contains(&c)))
    .then(|| text.to_owned())
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
            format!("00-é{}-00f067aa0ba902b7-01", &TRACE[..30]),
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
