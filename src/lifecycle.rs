//! Readiness and shutdown: two flags that the probes, intake and the background
//! tasks read.

use std::sync::atomic::{AtomicBool, Ordering};

/// Readiness and shutdown flags shared by the API and the background tasks.
#[derive(Debug, Default)]
pub struct Lifecycle {
    ready: AtomicBool,
    draining: AtomicBool,
}

impl Lifecycle {
    /// True once startup recovery is complete.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// True once shutdown has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Startup recovery is complete: `/ready` turns 200.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Shutdown has begun: `/ready` and intake answer 503.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::lifecycle::Lifecycle;

        let lifecycle = Lifecycle::default();
        assert!(!lifecycle.is_ready() && !lifecycle.is_draining());
    }
}
