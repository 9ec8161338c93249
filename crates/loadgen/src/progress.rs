//! The live progress line on stderr.

use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the progress line is redrawn.
pub(crate) const PROGRESS_TICK: Duration = Duration::from_millis(250);

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub(crate) fn progress_bar(length: u64, template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(Some(length), ProgressDrawTarget::stderr());
    bar.set_style(style);
    bar
}

/// What a progress bar counts: the responses so far.
pub(crate) trait Counted: Send + Sync + 'static {
    /// Responses received so far.
    fn responses(&self) -> u64;
}

/// Redraws `bar` every [`PROGRESS_TICK`] until aborted: position from `position`,
/// message from the response counter and the rate over the last tick.
pub(crate) fn spawn_progress<S: Counted>(
    bar: ProgressBar,
    shared: Arc<S>,
    started: Instant,
    position: fn(&S, Instant) -> u64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(PROGRESS_TICK);
        let (mut last_count, mut last_at) = (0_u64, Instant::now());
        loop {
            ticker.tick().await;
            let count = shared.responses();
            let now = Instant::now();
            let rate = (count - last_count) as f64 / now.duration_since(last_at).as_secs_f64();
            (last_count, last_at) = (count, now);
            bar.set_position(position(&shared, started));
            bar.set_message(format!(
                "{:>5.1}s  {count} requests  {rate:.0} req/s",
                started.elapsed().as_secs_f64()
            ));
        }
    })
}
