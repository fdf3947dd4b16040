//! An `Instant` that can be stored and read without a lock: the per-request time stamps a
//! connection's task writes and its keep-alive timer reads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What the stamps count from: the first stamp taken in the process.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// A moment, as nanoseconds since `epoch()` (u64 nanoseconds last ~584 years).
pub(crate) struct Stamp(AtomicU64);

impl Stamp {
    pub(crate) fn now() -> Self {
        Stamp(AtomicU64::new(Self::nanos_now()))
    }

    fn nanos_now() -> u64 {
        let since = Instant::now().saturating_duration_since(epoch());
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    }

    pub(crate) fn set_now(&self) {
        self.0.store(Self::nanos_now(), Ordering::Relaxed);
    }

    pub(crate) fn get(&self) -> Instant {
        epoch() + Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_moment_it_was_set() {
        let before = Instant::now();
        let stamp = Stamp::now();
        let after = Instant::now();
        // Rounding to whole nanoseconds can put it at most 1 ns either side.
        let got = stamp.get();
        assert!(got + Duration::from_nanos(1) >= before && got <= after + Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(5));
        stamp.set_now();
        assert!(stamp.get() >= got + Duration::from_millis(5));
    }
}
