//! A destination's flow control (docs/handlers.md, "Destinations"): how many
//! attempts it may run at once, how fast it may start them, and when a destination
//! that keeps failing is disabled.
//!
//! ```
//! use std::time::Duration;
//! use hookbox::registry::flow::{FlowControl, RateLimit};
//!
//! let rate: RateLimit = "600/m".parse().expect("a rate");
//! assert_eq!(rate.interval(), Duration::from_millis(100));
//! assert_eq!(rate.to_string(), "600/m");
//! assert!("50/d".parse::<RateLimit>().is_err());
//! assert_eq!(FlowControl::default().max_in_flight, 8);
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Attempts one destination runs at once unless told otherwise.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 8;

/// The most attempts one destination may be allowed to run at once.
pub const MAX_MAX_IN_FLIGHT: u32 = 10_000;

/// One destination's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowControl {
    /// Attempts running at once for this destination (at least 1).
    pub max_in_flight: u32,
    /// Attempts started per period, spread evenly; `None`: unlimited.
    pub rate_limit: Option<RateLimit>,
    /// A destination failing without a success for this long is disabled.
    pub disable_after: Option<Duration>,
}

impl Default for FlowControl {
    fn default() -> Self {
        Self {
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            rate_limit: None,
            disable_after: None,
        }
    }
}

impl FlowControl {
    /// Builds the limits from a manifest's or subscriber's optional fields; an error
    /// names the field.
    pub fn from_fields(
        max_in_flight: Option<i64>,
        rate_limit: Option<&str>,
        disable_after: Option<&str>,
    ) -> Result<Self, (&'static str, String)> {
        let mut flow = Self::default();
        if let Some(n) = max_in_flight {
            flow.max_in_flight = u32::try_from(n)
                .ok()
                .filter(|n| (1..=MAX_MAX_IN_FLIGHT).contains(n))
                .ok_or_else(|| {
                    (
                        "max_in_flight",
                        format!("{n}: expected a whole number from 1 to {MAX_MAX_IN_FLIGHT}"),
                    )
                })?;
        }
        if let Some(text) = rate_limit {
            flow.rate_limit = Some(
                text.parse()
                    .map_err(|e: RateError| ("rate_limit", format!("{text:?}: {e}")))?,
            );
        }
        if let Some(text) = disable_after {
            let d = crate::config::parse_limited_duration(text)
                .map_err(|e| ("disable_after", format!("{text:?}: {e}")))?;
            if d.is_zero() {
                return Err((
                    "disable_after",
                    format!("{text:?}: expected a duration above 0"),
                ));
            }
            flow.disable_after = Some(d);
        }
        Ok(flow)
    }
}

impl FlowControl {
    /// This instance's part of the limits when `instances` share them (several
    /// instances on one PostgreSQL database): `max_in_flight` divided, rounded
    /// up, and the rate's spacing multiplied, so that together they keep the
    /// limits.
    ///
    /// ```
    /// use std::time::Duration;
    /// use hookbox::registry::flow::FlowControl;
    ///
    /// let flow = FlowControl::from_fields(Some(8), Some("50/s"), None).expect("valid");
    /// let half = flow.shared(2);
    /// assert_eq!(half.max_in_flight, 4);
    /// assert_eq!(half.rate_limit.expect("rate").interval(), Duration::from_millis(40));
    /// assert_eq!(flow.shared(1), flow);
    /// ```
    pub fn shared(&self, instances: u32) -> FlowControl {
        let n = instances.max(1);
        if n == 1 {
            return self.clone();
        }
        FlowControl {
            max_in_flight: self.max_in_flight.div_ceil(n).max(1),
            rate_limit: self.rate_limit.map(|r| RateLimit {
                count: r.count,
                period: r.period * n,
            }),
            disable_after: self.disable_after,
        }
    }
}

/// `N/s`, `N/m` or `N/h`: at most one start every period/N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Starts per period (at least 1).
    pub count: u32,
    /// The period: one second, minute or hour.
    pub period: Duration,
}

/// Why a rate limit was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    /// Not `N/s`, `N/m` or `N/h`.
    #[error("expected a rate like \"50/s\", \"600/m\" or \"1000/h\"")]
    Unparsable,
    /// `0/…`, or more than a million a second.
    #[error("expected from 1 to 1000000 per second")]
    OutOfRange,
}

impl RateLimit {
    /// The even spacing between two starts.
    pub fn interval(&self) -> Duration {
        self.period / self.count.max(1)
    }
}

impl FromStr for RateLimit {
    type Err = RateError;

    fn from_str(text: &str) -> Result<Self, RateError> {
        let (count, unit) = text.trim().split_once('/').ok_or(RateError::Unparsable)?;
        let period = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(RateError::Unparsable),
        };
        let count: u32 = count.trim().parse().map_err(|_| RateError::Unparsable)?;
        if count == 0 || u64::from(count) > 1_000_000 * period.as_secs() {
            return Err(RateError::OutOfRange);
        }
        Ok(Self { count, period })
    }
}

impl fmt::Display for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = match self.period.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        };
        write!(f, "{}/{unit}", self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_and_space_evenly() {
        let r: RateLimit = "50/s".parse().expect("rate");
        assert_eq!(r.interval(), Duration::from_millis(20));
        let r: RateLimit = "1000/h".parse().expect("rate");
        assert_eq!(r.interval(), Duration::from_millis(3600));
        for bad in ["", "50", "/s", "x/s", "-1/s", "0/s", "5/d", "2000000/s"] {
            assert!(bad.parse::<RateLimit>().is_err(), "{bad:?}");
        }
        assert!("1000000/s".parse::<RateLimit>().is_ok());
    }

    #[test]
    fn fields_are_checked_and_named() {
        assert_eq!(
            FlowControl::from_fields(Some(0), None, None).map_err(|e| e.0),
            Err("max_in_flight")
        );
        assert_eq!(
            FlowControl::from_fields(None, Some("fast"), None).map_err(|e| e.0),
            Err("rate_limit")
        );
        assert_eq!(
            FlowControl::from_fields(None, None, Some("0s")).map_err(|e| e.0),
            Err("disable_after")
        );
        let flow = FlowControl::from_fields(Some(2), Some("20/s"), Some("72h")).expect("valid");
        assert_eq!(flow.max_in_flight, 2);
        assert_eq!(flow.disable_after, Some(Duration::from_secs(72 * 3600)));
    }
}
