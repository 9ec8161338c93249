//! The writer's rounds, timed. A round is one pass of the writer's loop: the
//! batch's transaction, the refusals for the rejected log, the solo writes
//! (retention's deletes, replays, …) and a WAL checkpoint's finish. Every request
//! that reaches the writer meanwhile waits for the round to end, so a round that
//! takes [`SLOW`] or longer is logged at `warn` with what each part took: a stall
//! seen from outside (a soak's minute of high p99, say) then names its part, or
//! shows that the writer was not where the time went.

use std::time::{Duration, Instant};

use tracing::warn;

/// A round at least this long is logged.
pub(super) const SLOW: Duration = Duration::from_secs(1);

/// The parts of a round, in the order the writer runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// The batch's transaction, `COMMIT` included.
    Batch,
    /// The refusals kept in the rejected log.
    Rejected,
    /// The solo writes.
    Solos,
    /// The writer's part of a WAL checkpoint.
    Checkpoint,
}

/// How long each [`Part`] of one round took so far.
#[derive(Debug)]
pub(super) struct Round {
    started: Instant,
    lapped: Instant,
    took: [Duration; 4],
    batch: usize,
    solos: usize,
}

impl Round {
    /// A round of `batch` batched writes and `solos` solo writes, begun now.
    pub(super) fn begin(batch: usize, solos: usize) -> Self {
        Self::begun_at(Instant::now(), batch, solos)
    }

    fn begun_at(started: Instant, batch: usize, solos: usize) -> Self {
        Self {
            started,
            lapped: started,
            took: [Duration::ZERO; 4],
            batch,
            solos,
        }
    }

    /// `part` ended now: it took the time since the last part ended.
    pub(super) fn lap(&mut self, part: Part) {
        let now = Instant::now();
        self.took[part as usize] += now.saturating_duration_since(self.lapped);
        self.lapped = now;
    }

    /// The whole round's time, when it was [`SLOW`].
    fn slow(&self) -> Option<Duration> {
        let total = self.lapped.saturating_duration_since(self.started);
        (total >= SLOW).then_some(total)
    }

    /// Logs the round if it was slow.
    pub(super) fn end(self) {
        if let Some(total) = self.slow() {
            let ms = |part: Part| self.took[part as usize].as_millis();
            warn!(
                took_ms = total.as_millis(),
                batch_ms = ms(Part::Batch),
                rejected_ms = ms(Part::Rejected),
                solos_ms = ms(Part::Solos),
                checkpoint_ms = ms(Part::Checkpoint),
                batch = self.batch,
                solos = self.solos,
                "a write round was slow: every write waited behind it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_is_slow_from_one_second_and_each_part_keeps_its_own_time() {
        let long_ago = Instant::now() - Duration::from_millis(1_500);
        let mut round = Round::begun_at(long_ago, 3, 1);
        round.lap(Part::Batch);
        std::thread::sleep(Duration::from_millis(20));
        round.lap(Part::Solos);
        round.lap(Part::Checkpoint);
        let total = round.slow().expect("1.5 s is slow");
        assert!(total >= Duration::from_millis(1_520), "{total:?}");
        assert!(round.took[Part::Batch as usize] >= Duration::from_millis(1_500));
        let solos = round.took[Part::Solos as usize];
        assert!(solos >= Duration::from_millis(20) && solos < Duration::from_millis(1_000));
        assert_eq!(round.took[Part::Rejected as usize], Duration::ZERO);

        let mut quick = Round::begin(1, 0);
        quick.lap(Part::Batch);
        assert_eq!(quick.slow(), None);
    }
}
