//! Parking idle HTTP/1.1 connections. A keep-alive connection that has been quiet for
//! `PARK_AFTER` gives back hyper's connection — its 8 KiB read and write buffers (a touched
//! page each) and its state — and waits for the client's next bytes holding no buffer at all.
//! Those bytes start a new hyper connection on the same stream. An idle connection then costs
//! its task, its stream and a few small shared records instead of ~11 KiB.
//!
//! The I/O half is in `cork.rs` (hyper is handed an end of stream without the socket being
//! read or shut down); `connection::serve_connection` loops between hyper and `wait_parked`.
//! TLS connections are not parked: rustls treats an end of stream without close_notify as an
//! error, and its own buffers dominate there anyway.

use std::cell::Cell;
use std::time::{Duration, Instant};

use tokio::io::AsyncRead;
use tokio::sync::watch;

use crate::server::conn_state::{ConnCtx, IdleState};
use crate::server::detect::ReplayRewrite;
use crate::server::idle::{earliest, sleep_until_or_never, IdleCheck, IdleRules};
use crate::server::Lifecycle;

/// How long a connection must be idle before it parks. Traffic on a busy keep-alive connection
/// comes far more often and never parks; a connection that wakes from parking pays for one
/// hyper connection set-up (a few microseconds), nothing against a second of silence.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// `PARK_AFTER`, or the milliseconds `FERROCORN_PARK_AFTER_MS` gives (read once): the
/// black-box tests of parking set a fraction of a second so that they need not sleep through
/// seconds for each connection to park. Not a user setting: the default is not worth tuning.
pub(crate) fn park_after() -> Duration {
    static AFTER: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *AFTER.get_or_init(|| {
        std::env::var("FERROCORN_PARK_AFTER_MS")
            .ok()
            .and_then(|ms| ms.parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map_or(PARK_AFTER, Duration::from_millis)
    })
}

/// How soon after a connection parked the memory it freed is handed back to the OS.
/// mimalloc keeps freed pages resident until it purges them, which it does lazily, on later
/// allocator work of the same thread: a server whose connections have all gone quiet would keep
/// them. So each parked connection sees to it that a collect runs on its thread after it parked
/// (`release_freed_memory`); connections parked before one ran share it, so a thread collects at
/// most once per `RELEASE_AFTER` however many connections park. A forced collect measured up to
/// 2.2 ms with 10,000 connections open: under 0.5% of the I/O thread, a pause of that length
/// at most twice a second while connections keep parking.
const RELEASE_AFTER: Duration = Duration::from_millis(500);

thread_local! {
    /// When this thread last handed freed pages back.
    static RELEASED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Returns the pages freed up to `since` on this thread to the OS, unless that happened already.
fn release_freed_memory(since: Instant) {
    RELEASED_AT.with(|released| {
        if released.get().is_some_and(|at| at >= since) {
            return;
        }
        // SAFETY: mi_collect takes no pointers; forcing it purges free pages now instead of at
        // the next allocation after the purge delay.
        unsafe { libmimalloc_sys::mi_collect(true) };
        released.set(Some(Instant::now()));
    });
}

/// When an idle connection is due to park: `after` past the later of going idle and the last
/// declined attempt (hyper still had bytes to write). None once the client has started its
/// next request head: that is hyper's to read.
pub(crate) fn park_due(
    idle: &IdleState,
    after: Duration,
    declined_at: Option<Instant>,
) -> Option<Instant> {
    if idle.head_started.is_some() {
        return None;
    }
    let from = declined_at.map_or(idle.since, |at| at.max(idle.since));
    Some(from + after)
}

/// Waits, parked, until the client sends its next bytes (kept in `io` to replay; true) or the
/// connection should close: the client closed or failed, an idle limit is up, or the server
/// is draining (a parked connection has been quiet for `PARK_AFTER`, the drain's grace for a
/// next request: it closes then, unless its next bytes have just arrived, which are served).
pub(crate) async fn wait_parked<S: AsyncRead + Unpin>(
    io: &mut ReplayRewrite<S>,
    ctx: &ConnCtx,
    rules: IdleRules,
    lifecycle: &mut watch::Receiver<Lifecycle>,
) -> bool {
    if io.has_replay() {
        return true;
    }
    let parked_at = Instant::now();
    let mut release_at = Some(parked_at + RELEASE_AFTER);
    loop {
        if *lifecycle.borrow_and_update() >= Lifecycle::Draining {
            // Bytes already there are a request on its way: served (with `Connection:
            // close`), not closed unread. A read that would wait is not waited for.
            return tokio::select! {
                biased;
                read = io.refill() => matches!(read, Ok(true)),
                () = std::future::ready(()) => false,
            };
        }
        let now = Instant::now();
        if release_at.is_some_and(|at| at <= now) {
            release_freed_memory(parked_at);
            release_at = None;
        }
        let next = match rules.check(ctx.idle_state(), true, now) {
            IdleCheck::Close | IdleCheck::Cut => return false,
            IdleCheck::LookAgainAt(at) => Some(at),
            IdleCheck::Nothing => None,
        };
        let timer = sleep_until_or_never(earliest(next, release_at));
        tokio::select! {
            read = io.refill() => return matches!(read, Ok(true)),
            changed = lifecycle.changed() => {
                if changed.is_err() {
                    return false;
                }
            }
            () = timer => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parks_a_quiet_connection_after_the_delay_but_not_once_a_head_started() {
        let t0 = Instant::now();
        let after = Duration::from_secs(1);
        let quiet = IdleState {
            since: t0,
            head_started: None,
        };
        assert_eq!(park_due(&quiet, after, None), Some(t0 + after));
        let started = IdleState {
            since: t0,
            head_started: Some(t0),
        };
        assert_eq!(park_due(&started, after, None), None);
    }

    #[test]
    fn a_declined_park_is_tried_again_a_delay_later() {
        let t0 = Instant::now();
        let after = Duration::from_secs(1);
        let idle = IdleState {
            since: t0,
            head_started: None,
        };
        let declined = t0 + 3 * after;
        assert_eq!(
            park_due(&idle, after, Some(declined)),
            Some(declined + after)
        );
        // A decline from before the connection last went idle does not count.
        let later = IdleState {
            since: t0 + 5 * after,
            head_started: None,
        };
        assert_eq!(
            park_due(&later, after, Some(declined)),
            Some(t0 + 6 * after)
        );
    }
}
