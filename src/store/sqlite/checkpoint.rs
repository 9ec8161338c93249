//! WAL checkpoints off the writer's path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its
//! threshold: that commit copies the WAL's pages into the database and (with
//! `synchronous=FULL`) fsyncs the file before it returns, and every request
//! waiting for the writer waits with it. At 20,000 events a second a checkpoint of
//! 10,000 pages came about once a second and held the writer tens of
//! milliseconds: the p99 of intake under `wrk`.
//!
//! So a checkpoint comes in two parts:
//!
//! 1. **The bulk**: a [`Checkpointer`] runs `PRAGMA wal_checkpoint(PASSIVE)` on a
//!    connection of its own. A passive checkpoint takes no lock a writer needs:
//!    commits go on appending to the WAL while it copies and fsyncs.
//! 2. **The rest**: the WAL starts again from its beginning only when a write
//!    transaction begins with every frame copied, which under steady writes a
//!    checkpoint beside them never sees. So once the bulk is copied the
//!    checkpointer raises a [`Finish`] flag, and the writer, between two batches
//!    (its callers answered), checkpoints what the commits added meanwhile — a
//!    few hundred frames — and its next transaction starts the WAL again. A
//!    reader in the middle of a read can hold either step back, so the writer
//!    ([`Finishing`]) tries again after each batch until it sees the WAL start
//!    again ([`MAX_TRIES`] at most), as SQLite's own automatic checkpoint tries
//!    after every commit; the checkpointer starts no bulk meanwhile.
//!
//! The writer's connection still checkpoints by itself as a backstop
//! ([`BACKSTOP_PAGES`]) should the checkpointer fall far behind or fail.
//!
//! The checkpointer's pace follows the WAL: it waits [`Pace::wait`] between
//! checkpoints, halving the wait while one finds more than [`MANY_FRAMES`] new
//! frames and doubling it while one finds fewer than [`FEW_FRAMES`], within
//! [`MIN_WAIT`]..[`MAX_WAIT`]: a busy WAL is copied about every [`MANY_FRAMES`]
//! frames (the pages commits rewrite are copied once per checkpoint, not once per
//! commit), and an idle one costs a statement every [`MAX_WAIT`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use sqlx::SqliteConnection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::warn;

/// WAL pages after which the writer's own commit checkpoints: only when the
/// [`Checkpointer`] falls this far behind (about 80 MB of WAL) — a burst after a
/// quiet spell, before the pace has caught up, or a checkpointer that fails.
pub(super) const BACKSTOP_PAGES: u32 = 20_000;

/// Frames found above which the next checkpoint comes sooner.
pub(super) const MANY_FRAMES: i64 = 10_000;

/// Frames found below which the next checkpoint comes later.
pub(super) const FEW_FRAMES: i64 = 2_500;

/// The shortest wait between checkpoints.
pub(super) const MIN_WAIT: Duration = Duration::from_millis(125);

/// The longest wait between checkpoints: at 40,000 frames a second (intake at its
/// peak here) a second's frames are twice the backstop, so not longer.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(1);

/// The wait between checkpoints, adjusted by what each found, within bounds.
///
/// ```ignore
/// let mut pace = Pace::default();
/// pace.found(0); // an idle WAL: later
/// assert!(pace.wait() > MIN_WAIT);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pace {
    wait: Duration,
    min: Duration,
    max: Duration,
}

impl Default for Pace {
    /// [`MIN_WAIT`] to begin with (the WAL file keeps the largest size it
    /// reaches, so the first cycle must not be a long one), within
    /// [`MIN_WAIT`]..[`MAX_WAIT`].
    fn default() -> Self {
        Self {
            wait: MIN_WAIT,
            min: MIN_WAIT,
            max: MAX_WAIT,
        }
    }
}

impl Pace {
    /// Always `wait` (for tests).
    #[cfg(test)]
    pub(super) fn fixed(wait: Duration) -> Self {
        Self {
            wait,
            min: wait,
            max: wait,
        }
    }

    /// How long to wait before the next checkpoint.
    pub(super) fn wait(self) -> Duration {
        self.wait
    }

    /// Adjusts the wait to a checkpoint that found `frames` new frames in the WAL.
    pub(super) fn found(&mut self, frames: i64) {
        if frames > MANY_FRAMES {
            self.wait = (self.wait / 2).max(self.min);
        } else if frames < FEW_FRAMES {
            self.wait = (self.wait * 2).min(self.max);
        }
    }

    /// After a failed checkpoint: the longest wait.
    fn failed(&mut self) {
        self.wait = self.max;
    }
}

/// Between the checkpointer and the writer: raised by the checkpointer when the
/// bulk of the WAL is copied, taken by the writer's [`Finishing`], lowered when
/// the writer is done; the checkpointer starts no bulk meanwhile (its copy would
/// keep the writer's transactions from starting the WAL again).
#[derive(Debug, Clone, Default)]
pub(super) struct Finish(Arc<AtomicU8>);

/// [`Finish`]'s states.
const IDLE: u8 = 0;
const ASKED: u8 = 1;
const UNDER_WAY: u8 = 2;

impl Finish {
    /// Asks the writer to finish a checkpoint.
    fn want(&self) {
        self.0.store(ASKED, Ordering::Release);
    }

    /// Whether a finish was asked for since the last call (it is then under way).
    fn take(&self) -> bool {
        self.0
            .compare_exchange(ASKED, UNDER_WAY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The writer is done with it.
    fn done(&self) {
        self.0.store(IDLE, Ordering::Release);
    }

    /// Whether the writer has yet to finish the last bulk.
    fn pending(&self) -> bool {
        self.0.load(Ordering::Acquire) != IDLE
    }
}

/// Tries of one finish at most (one between two batches) before the writer
/// leaves it to the next bulk.
pub(super) const MAX_TRIES: u32 = 32;

/// The writer's part of a checkpoint. Asked ([`Finish`]), it checkpoints what the
/// WAL gained since the bulk, and then, between each two batches, again until the
/// WAL has started from its beginning: a reader in the middle of a read can keep
/// a checkpoint from copying the newest frames, or the WAL from starting again,
/// and SQLite's own automatic checkpoint likewise tries after every commit.
pub(super) struct Finishing {
    asked: Finish,
    watch: Option<Watch>,
}

/// A finish under way: the frames its last try found (none yet if another
/// checkpoint held the lock), and how many tries it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Watch {
    frames: Option<i64>,
    tries: u32,
}

/// What a checkpoint reported: whether another held the checkpoint lock, the
/// frames in the WAL and the frames copied into the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Found {
    busy: bool,
    frames: i64,
    copied: i64,
}

impl Finishing {
    /// The writer's part of the checkpoints `asked` asks for.
    fn new(asked: Finish) -> Self {
        Self { asked, watch: None }
    }

    /// Runs between two batches: a try when one is asked for or under way.
    pub(super) async fn between_batches(&mut self, conn: &mut SqliteConnection) {
        let asked = self.asked.take();
        if !asked && self.watch.is_none() {
            return;
        }
        let watch = if asked { None } else { self.watch };
        self.watch = match checkpoint(conn).await {
            Ok(found) => next_try(watch, found),
            Err(e) => {
                warn!(error = %e, "finishing a WAL checkpoint failed");
                None
            }
        };
        if self.watch.is_none() {
            self.asked.done();
        }
    }
}

/// After a try that found `found`, the finish still under way, if any: done
/// once the WAL holds fewer frames than at the last try (it started again);
/// otherwise — frames left uncopied, another checkpoint running, or every frame
/// copied and the start not yet seen — another try after the next batch, up to
/// [`MAX_TRIES`].
pub(super) fn next_try(watch: Option<Watch>, found: Found) -> Option<Watch> {
    let tries = watch.map_or(0, |w| w.tries) + 1;
    let last = watch.and_then(|w| w.frames);
    if found.busy {
        // Nothing learnt (its figures are -1): what the last try found stands.
        return (tries < MAX_TRIES).then_some(Watch {
            frames: last,
            tries,
        });
    }
    let started_again = last.is_some_and(|frames| found.frames < frames);
    if started_again || tries >= MAX_TRIES {
        return None;
    }
    Some(Watch {
        frames: Some(found.frames),
        tries,
    })
}

/// The task that checkpoints the WAL; [`Checkpointer::stop`] ends it.
pub(super) struct Checkpointer {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Checkpointer {
    /// Starts checkpointing on `conn` (a read-write connection to the database)
    /// at `pace`, and answers the writer's part of its checkpoints with it.
    pub(super) fn start(conn: SqliteConnection, pace: Pace) -> (Self, Finishing) {
        let finish = Finish::default();
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(conn, finish.clone(), pace, stopped));
        (Self { stop, task }, Finishing::new(finish))
    }

    /// Stops the task and waits for it (a checkpoint under way finishes first).
    pub(super) async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn run(
    mut conn: SqliteConnection,
    finish: Finish,
    mut pace: Pace,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut last = 0;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            () = tokio::time::sleep(pace.wait()) => {}
        }
        if finish.pending() {
            continue; // the writer is finishing the last one
        }
        match passive(&mut conn).await {
            Ok(frames) => {
                let new = new_frames(last, frames);
                pace.found(new);
                last = frames;
                if new > 0 {
                    // Again: what the commits added during the first pass, so that
                    // the writer's part is smaller still.
                    let _ = passive(&mut conn).await;
                    finish.want();
                    // The next bulk comes once the writer is done, which is once the
                    // WAL started again (or the writer gave up): count all it finds
                    // as new. Counting from the frames seen now would take a WAL that
                    // started again and grew past them for one that barely grew, and
                    // slow the pace while the WAL grows (an hour's soak saw 214 MB).
                    last = 0;
                }
            }
            Err(e) => {
                // The writer's backstop checkpoints meanwhile.
                warn!(error = %e, "WAL checkpoint failed; retrying");
                pace.failed();
            }
        }
    }
}

/// The frames written since the last checkpoint, which found `last` in the WAL
/// (0 when a finish was asked for since: the WAL has started again): the WAL
/// holds its frames until the writer starts it again, so fewer than before means
/// it started again.
pub(super) fn new_frames(last: i64, frames: i64) -> i64 {
    if frames < last { frames } else { frames - last }
}

/// Runs one passive checkpoint and answers how many frames the WAL held.
pub(super) async fn passive(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    Ok(checkpoint(conn).await?.frames)
}

/// Runs one passive checkpoint and answers what it reported.
async fn checkpoint(conn: &mut SqliteConnection) -> Result<Found, sqlx::Error> {
    let (busy, frames, copied): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(conn)
        .await?;
    Ok(Found {
        busy: busy != 0,
        frames,
        copied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_wal_brings_checkpoints_sooner_and_an_idle_one_later() {
        let mut pace = Pace::default();
        assert_eq!(pace.wait(), MIN_WAIT);
        pace.found(0);
        assert_eq!(pace.wait(), Duration::from_millis(250));
        pace.found(MANY_FRAMES + 1);
        assert_eq!(pace.wait(), MIN_WAIT);
        for _ in 0..10 {
            pace.found(50_000);
        }
        assert_eq!(pace.wait(), MIN_WAIT);
        pace.found(5_000); // within the band: unchanged
        assert_eq!(pace.wait(), MIN_WAIT);
        for _ in 0..20 {
            pace.found(0);
        }
        assert_eq!(pace.wait(), MAX_WAIT);
    }

    /// Under steady writes a checkpoint beside them never finds every frame
    /// copied, so without the writer's finishing step the WAL would never start
    /// again and would hold everything written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_steady_writes_the_writers_finishing_step_lets_the_wal_start_again() {
        use sqlx::ConnectOptions as _;
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("wal.db");
        let opts = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal);
        let mut writer = opts
            .clone()
            .pragma("wal_autocheckpoint", "0")
            .connect()
            .await
            .expect("writer");
        sqlx::query("CREATE TABLE t (v BLOB)")
            .execute(&mut writer)
            .await
            .expect("table");
        let checkpoints = opts.connect().await.expect("checkpoint connection");
        let pace = Pace::fixed(Duration::from_millis(20));
        let (checkpointer, mut finishing) = Checkpointer::start(checkpoints, pace);
        // A row to a page, 64 MB in all: a cycle of the checkpointer and the
        // writer's finishing step is a few MB, so the WAL starts again many times.
        let row = vec![7_u8; 4000];
        let wal_path = dir.path().join("wal.db-wal");
        let started = wal_restarts(&wal_path);
        let mut written = 0_u64;
        while written < 64 << 20 {
            sqlx::query("INSERT INTO t (v) VALUES (?)")
                .bind(&row)
                .execute(&mut writer)
                .await
                .expect("insert");
            written += row.len() as u64;
            finishing.between_batches(&mut writer).await;
        }
        checkpointer.stop().await;
        // The WAL header's checkpoint sequence number goes up each time the WAL
        // starts again from its beginning. (The file's size is no measure: it
        // never shrinks, and one scheduling hiccup on a loaded machine let a cycle
        // grow it to 62 MB.)
        let restarts = wal_restarts(&wal_path) - started;
        assert!(
            restarts >= 1,
            "the WAL never started again in {written} bytes written"
        );
    }

    /// The checkpoint sequence number in a WAL file's header (bytes 12..16, big
    /// endian; SQLite's WAL format): how many times the WAL started again.
    fn wal_restarts(path: &std::path::Path) -> u32 {
        use std::io::Read as _;
        let mut header = [0_u8; 16];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut header))
            .expect("the WAL file's header");
        u32::from_be_bytes([header[12], header[13], header[14], header[15]])
    }

    fn found(frames: i64) -> Found {
        Found {
            busy: false,
            frames,
            copied: frames,
        }
    }

    #[test]
    fn a_finish_tries_until_the_wal_starts_again() {
        let watch = |frames, tries| Some(Watch { frames, tries });
        // Asked: every frame copied; see after the next batch whether it started.
        let first = next_try(None, found(9_000));
        assert_eq!(first, watch(Some(9_000), 1));
        // A reader kept it from starting again: more frames, try again.
        let second = next_try(first, found(9_020));
        assert_eq!(second, watch(Some(9_020), 2));
        // Frames left uncopied: try again.
        let partial = Found {
            busy: false,
            frames: 9_040,
            copied: 9_000,
        };
        let third = next_try(second, partial);
        assert_eq!(third, watch(Some(9_040), 3));
        // Another checkpoint held the lock (it reports -1): what the last try
        // found stands.
        let busy = Found {
            busy: true,
            frames: -1,
            copied: -1,
        };
        assert_eq!(next_try(third, busy), watch(Some(9_040), 4));
        // Fewer frames than at the last try: the WAL started again.
        assert_eq!(next_try(third, found(20)), None);
        // A first try that met the lock has nothing to compare with yet.
        let blocked = next_try(None, busy);
        assert_eq!(blocked, watch(None, 1));
        assert_eq!(next_try(blocked, found(20)), watch(Some(20), 2));
    }

    #[test]
    fn a_finish_gives_up_after_its_tries() {
        let mut watch = next_try(None, found(100));
        for n in 2..MAX_TRIES {
            watch = next_try(watch, found(100 + i64::from(n)));
            assert!(watch.is_some(), "try {n}");
        }
        assert_eq!(next_try(watch, found(1_000)), None);
    }

    #[test]
    fn frames_are_counted_from_the_last_checkpoint_or_from_a_restarted_wal() {
        assert_eq!(new_frames(0, 12_000), 12_000);
        assert_eq!(new_frames(12_000, 12_000), 0); // idle: nothing new
        assert_eq!(new_frames(12_000, 15_000), 3_000);
        assert_eq!(new_frames(12_000, 4_000), 4_000); // the WAL started again
    }
}
