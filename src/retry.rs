//! The retry policy, as pure functions: how long to wait before the next attempt,
//! and whether a failed attempt is retried or dead-lettered (docs/states.md).
//!
//! ```
//! use std::time::Duration;
//! use hookbox::retry::{Backoff, Decision, Failure, Policy};
//!
//! let policy = Policy {
//!     max_attempts: 3,
//!     backoff: Backoff::Exponential { base: Duration::from_secs(5), max: Duration::from_secs(300) },
//!     timeout: Duration::from_secs(30),
//!     max_delay: Duration::from_secs(300),
//! };
//! // The first failure waits about 5 s (±20%), the second about 10 s, the third gives up.
//! let Decision::Retry { after } = policy.decide(1, &Failure::retryable("boom"), 0.0) else { panic!() };
//! assert_eq!(after, Duration::from_secs(5));
//! assert!(matches!(policy.decide(3, &Failure::retryable("boom"), 0.0), Decision::DeadLetter));
//! assert!(matches!(policy.decide(1, &Failure::permanent("400"), 0.0), Decision::DeadLetter));
//! ```

use std::time::Duration;

use crate::config::MAX_DURATION;

/// The shortest wait before a retry, whatever a schedule says (`backoff =
/// ["0s"]` would otherwise retry in a tight loop).
pub const MIN_DELAY: Duration = Duration::from_millis(100);

/// How the delay before the next attempt grows.
#[derive(Debug, Clone, PartialEq)]
pub enum Backoff {
    /// `min(base · 2^(attempts-1), max)`.
    Exponential {
        /// The first delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
    /// An explicit schedule: the n-th retry waits `steps[n-1]`; the last one repeats.
    Schedule(Vec<Duration>),
}

impl Backoff {
    /// The delay after `attempts` failed attempts (1 = after the first), before
    /// jitter; never under [`MIN_DELAY`].
    pub fn delay(&self, attempts: u32) -> Duration {
        self.step(attempts).max(MIN_DELAY)
    }

    fn step(&self, attempts: u32) -> Duration {
        let n = attempts.max(1);
        match self {
            Self::Exponential { base, max } => {
                let factor = 2u32.checked_pow(n - 1).unwrap_or(u32::MAX);
                base.checked_mul(factor).unwrap_or(*max).min(*max)
            }
            Self::Schedule(steps) => {
                let i = usize::try_from(n - 1).unwrap_or(usize::MAX);
                steps
                    .get(i)
                    .or(steps.last())
                    .copied()
                    .unwrap_or(Duration::ZERO)
            }
        }
    }

    /// The longest delay this backoff produces (caps a handler's `Retry-After`).
    pub fn max_delay(&self) -> Duration {
        match self {
            Self::Exponential { max, .. } => *max,
            Self::Schedule(steps) => steps.iter().copied().max().unwrap_or(Duration::ZERO),
        }
    }
}

/// One handler's retry settings (manifest overrides over the global settings).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Attempts before dead-letter (at least 1).
    pub max_attempts: u32,
    /// Delay growth.
    pub backoff: Backoff,
    /// One attempt's limit.
    pub timeout: Duration,
    /// The longest wait a handler's `Retry-After` can impose (`RETRY_MAX_DELAY`, or
    /// the backoff's own longest step if that is longer).
    pub max_delay: Duration,
}

/// Why an attempt failed, as far as the policy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Shown as `last_error`.
    pub message: String,
    /// Retrying cannot help (HTTP 4xx, exit code 65): dead-letter at once.
    pub permanent: bool,
    /// The handler asked to wait at least this long (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// A failure worth retrying.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
            retry_after: None,
        }
    }

    /// A failure that dead-letters at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            permanent: true,
            ..Self::retryable(message)
        }
    }
}

/// What happens after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Back to `pending`, due after this delay.
    Retry {
        /// The delay, jitter applied.
        after: Duration,
    },
    /// `failed`: a dead letter.
    DeadLetter,
}

impl Policy {
    /// Decides after the `attempts`-th attempt failed. `jitter` in `[-1, 1]` scales
    /// the ±20% spread (pass [`jitter`] in production, `0.0` in tests). A handler's
    /// `Retry-After` replaces the computed delay, capped by the policy's max delay
    /// and spread up to 20% later (never sooner); a `Retry-After` of zero waits the
    /// backoff step instead.
    /// No delay exceeds [`MAX_DURATION`] (30 days), whatever a policy built in code
    /// says: the retry timer cannot hold a job years ahead.
    pub fn decide(&self, attempts: u32, failure: &Failure, jitter: f64) -> Decision {
        if failure.permanent || attempts >= self.max_attempts {
            return Decision::DeadLetter;
        }
        let after = match failure.retry_after.filter(|d| !d.is_zero()) {
            Some(asked) => spread(
                asked.min(self.max_delay.max(self.backoff.max_delay())),
                jitter.abs(),
            ),
            None => spread(self.backoff.delay(attempts), jitter).max(MIN_DELAY),
        };
        Decision::Retry {
            after: after.min(MAX_DURATION),
        }
    }
}

/// A uniformly random jitter factor in `[-1, 1]`.
pub fn jitter() -> f64 {
    fastrand::f64() * 2.0 - 1.0
}

/// `delay · (1 + 0.2 · jitter)`.
fn spread(delay: Duration, jitter: f64) -> Duration {
    delay.mul_f64((1.0 + 0.2 * jitter.clamp(-1.0, 1.0)).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(base: u64, max: u64) -> Backoff {
        Backoff::Exponential {
            base: Duration::from_secs(base),
            max: Duration::from_secs(max),
        }
    }

    fn policy(max_attempts: u32, backoff: Backoff) -> Policy {
        Policy {
            max_attempts,
            backoff,
            timeout: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }

    #[test]
    fn exponential_doubles_and_caps() {
        let b = exp(5, 300);
        let secs: Vec<u64> = (1..=8).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(secs, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(b.delay(200), Duration::from_secs(300), "no overflow");
    }

    #[test]
    fn schedules_repeat_their_last_step() {
        let b = Backoff::Schedule(vec![Duration::from_secs(5), Duration::from_secs(30)]);
        assert_eq!(b.delay(1), Duration::from_secs(5));
        assert_eq!(b.delay(2), Duration::from_secs(30));
        assert_eq!(b.delay(9), Duration::from_secs(30));
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let p = policy(5, exp(10, 300));
        for j in [-1.0, -0.5, 0.0, 0.7, 1.0, 5.0] {
            let Decision::Retry { after } = p.decide(1, &Failure::retryable("x"), j) else {
                panic!("should retry");
            };
            assert!(
                after >= Duration::from_secs(8) && after <= Duration::from_secs(12),
                "{after:?}"
            );
        }
        for _ in 0..1000 {
            assert!((-1.0..=1.0).contains(&jitter()));
        }
    }

    #[test]
    fn exhaustion_and_permanent_failures_dead_letter() {
        let p = policy(3, exp(1, 10));
        assert!(matches!(
            p.decide(2, &Failure::retryable("x"), 0.0),
            Decision::Retry { .. }
        ));
        assert_eq!(
            p.decide(3, &Failure::retryable("x"), 0.0),
            Decision::DeadLetter
        );
        assert_eq!(
            p.decide(1, &Failure::permanent("x"), 0.0),
            Decision::DeadLetter
        );
        let once = policy(1, exp(1, 10));
        assert_eq!(
            once.decide(1, &Failure::retryable("x"), 0.0),
            Decision::DeadLetter
        );
    }

    #[test]
    fn no_step_is_shorter_than_the_floor() {
        let p = policy(5, Backoff::Schedule(vec![Duration::ZERO]));
        for j in [-1.0, 0.0, 1.0] {
            let Decision::Retry { after } = p.decide(1, &Failure::retryable("x"), j) else {
                panic!("should retry");
            };
            assert!(
                after >= MIN_DELAY && after <= MIN_DELAY.mul_f64(1.2),
                "{after:?}"
            );
        }
    }

    #[test]
    fn no_delay_is_longer_than_30_days() {
        let years = Duration::from_secs(100_000_000);
        let p = policy(5, Backoff::Schedule(vec![years]));
        assert_eq!(
            p.decide(1, &Failure::retryable("x"), 1.0),
            Decision::Retry {
                after: MAX_DURATION
            }
        );
        let mut f = Failure::retryable("429");
        f.retry_after = Some(years);
        assert_eq!(
            p.decide(1, &f, 0.0),
            Decision::Retry {
                after: MAX_DURATION
            }
        );
    }

    #[test]
    fn retry_after_is_honoured_but_capped() {
        let schedule = policy(5, Backoff::Schedule(vec![Duration::from_millis(50)]));
        let mut f = Failure::retryable("429");
        f.retry_after = Some(Duration::from_secs(2));
        assert_eq!(
            schedule.decide(1, &f, 0.0),
            Decision::Retry {
                after: Duration::from_secs(2)
            },
            "a short schedule does not cut Retry-After down"
        );
        let p = policy(5, exp(1, 60));
        let mut f = Failure::retryable("429");
        f.retry_after = Some(Duration::from_secs(7));
        assert_eq!(
            p.decide(1, &f, -1.0),
            Decision::Retry {
                after: Duration::from_secs(7).mul_f64(1.2)
            },
            "spread later, never sooner"
        );
        f.retry_after = Some(Duration::ZERO);
        assert_eq!(
            p.decide(3, &f, 0.0),
            Decision::Retry {
                after: Duration::from_secs(4)
            },
            "Retry-After: 0 waits the backoff step"
        );
        f.retry_after = Some(Duration::from_secs(3600));
        assert_eq!(
            p.decide(1, &f, 0.0),
            Decision::Retry {
                after: Duration::from_secs(60)
            }
        );
    }
}
