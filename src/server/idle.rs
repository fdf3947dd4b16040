//! The limits on an HTTP connection between requests: `--timeout-keep-alive` while idle,
//! `--header-read-timeout` from the first byte of a request head to its end. `drive` in
//! connection.rs asks `IdleRules::check` what to do whenever its timer fires.

use std::time::{Duration, Instant};

use crate::config::ServerConfig;
use crate::server::conn_state::IdleState;

/// How long a new connection may stay silent before its first bytes: the keep-alive idle
/// timeout, as for any idle connection, else the header read timeout.
pub(crate) fn first_bytes_timeout(config: &ServerConfig) -> Option<Duration> {
    earliest(config.timeout_keep_alive, config.header_read_timeout)
}

/// The sooner of two optional limits (None: no limit).
pub(crate) fn earliest<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Sleeps until `at`, or forever when there is nothing to wait for: the timer a connection
/// waits on beside its I/O (`connection::drive`, `park`, HTTP/3's idle deadline).
pub(crate) async fn sleep_until_or_never(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The limits on a connection while it has no request in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdleRules {
    /// Between requests (`--timeout-keep-alive`).
    keep_alive: Option<Duration>,
    /// From the first byte of a request head to its end (`--header-read-timeout`): HTTP/1.
    head: Option<Duration>,
    /// Before the first request has started.
    first_request: Option<Duration>,
}

/// What the idle timer found.
#[derive(Debug, PartialEq)]
pub(crate) enum IdleCheck {
    /// A limit between requests is up: shut down gracefully (HTTP/2: GOAWAY).
    Close,
    /// A request head took too long: drop the connection. hyper's graceful shutdown would
    /// wait for the head to complete, which is what the limit is against.
    Cut,
    LookAgainAt(Instant),
    Nothing,
}

impl IdleRules {
    pub(crate) fn http1(config: &ServerConfig) -> Self {
        IdleRules {
            keep_alive: config.timeout_keep_alive,
            head: config.header_read_timeout,
            first_request: first_bytes_timeout(config),
        }
    }

    /// HTTP/2 has no request heads to time: streams come and go over one connection.
    pub(crate) fn http2(config: &ServerConfig) -> Self {
        IdleRules {
            keep_alive: config.timeout_keep_alive,
            head: None,
            first_request: config.timeout_keep_alive,
        }
    }

    /// Whether the connection must close now, else when to look again. `idle`: None while a
    /// request is in flight.
    pub(crate) fn check(
        &self,
        idle: Option<IdleState>,
        started_a_request: bool,
        now: Instant,
    ) -> IdleCheck {
        let Some(idle) = idle else {
            // Nothing to enforce; look again within the shortest limit, in case it ends.
            let shortest = [self.keep_alive, self.head, self.first_request]
                .into_iter()
                .flatten()
                .min();
            return shortest.map_or(IdleCheck::Nothing, |d| IdleCheck::LookAgainAt(now + d));
        };
        let head_deadline = idle.head_started.zip(self.head).map(|(t, d)| t + d);
        if head_deadline.is_some_and(|d| d <= now) {
            return IdleCheck::Cut;
        }
        let deadline = match idle.head_started {
            Some(_) if head_deadline.is_some() => head_deadline,
            None if !started_a_request => self.first_request.map(|d| idle.since + d),
            _ => self.keep_alive.map(|d| idle.since + d),
        };
        if deadline.is_some_and(|d| d <= now) {
            return IdleCheck::Close;
        }
        // Until a head starts, look in at least once per head limit: one that starts between
        // two looks is then seen before its own limit is up, and cut on time.
        let look = match idle.head_started {
            None => self.head.map(|d| now + d),
            Some(_) => None,
        };
        earliest(deadline, look).map_or(IdleCheck::Nothing, IdleCheck::LookAgainAt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn rules(keep_alive: u64, head: u64) -> IdleRules {
        IdleRules {
            keep_alive: Some(S * keep_alive as u32),
            head: Some(S * head as u32),
            first_request: Some(S * keep_alive.min(head) as u32),
        }
    }

    fn idle(since: Instant, head_started: Option<Instant>) -> Option<IdleState> {
        Some(IdleState {
            since,
            head_started,
        })
    }

    #[test]
    fn an_idle_connection_is_held_to_keep_alive_not_to_the_head_limit() {
        // --timeout-keep-alive 75 behind a proxy that idles out at 60: the 30 s head limit
        // must not close a connection that sends nothing.
        let t0 = Instant::now();
        let r = rules(75, 30);
        assert_eq!(
            r.check(idle(t0, None), true, t0 + 31 * S),
            IdleCheck::LookAgainAt(t0 + 61 * S)
        );
        assert_eq!(
            r.check(idle(t0, None), true, t0 + 74 * S),
            IdleCheck::LookAgainAt(t0 + 75 * S)
        );
        assert_eq!(r.check(idle(t0, None), true, t0 + 75 * S), IdleCheck::Close);
    }

    #[test]
    fn a_started_head_gets_the_head_limit_from_its_first_byte() {
        let t0 = Instant::now();
        let r = rules(75, 30);
        let head = Some(t0 + 70 * S);
        // Past keep-alive, but the head started in time: it has until 70 + 30.
        assert_eq!(
            r.check(idle(t0, head), true, t0 + 80 * S),
            IdleCheck::LookAgainAt(t0 + 100 * S)
        );
        assert_eq!(r.check(idle(t0, head), true, t0 + 100 * S), IdleCheck::Cut);
        // A slow head on a short keep-alive is still cut at the head limit.
        let r = rules(5, 10);
        let head = Some(t0 + S);
        assert_eq!(
            r.check(idle(t0, head), true, t0 + 9 * S),
            IdleCheck::LookAgainAt(t0 + 11 * S)
        );
        assert_eq!(r.check(idle(t0, head), true, t0 + 11 * S), IdleCheck::Cut);
    }

    #[test]
    fn a_new_connection_must_start_within_the_shorter_limit() {
        let t0 = Instant::now();
        let r = rules(75, 30);
        assert_eq!(
            r.check(idle(t0, None), false, t0 + 29 * S),
            IdleCheck::LookAgainAt(t0 + 30 * S)
        );
        assert_eq!(
            r.check(idle(t0, None), false, t0 + 30 * S),
            IdleCheck::Close
        );
    }

    #[test]
    fn in_flight_nothing_closes_and_the_timer_looks_again_within_the_shortest_limit() {
        let t0 = Instant::now();
        assert_eq!(
            rules(75, 30).check(None, true, t0),
            IdleCheck::LookAgainAt(t0 + 30 * S)
        );
        let none = IdleRules {
            keep_alive: None,
            head: None,
            first_request: None,
        };
        assert_eq!(none.check(None, true, t0), IdleCheck::Nothing);
        assert_eq!(
            none.check(idle(t0, None), true, t0 + 1000 * S),
            IdleCheck::Nothing
        );
    }

    #[test]
    fn http2_has_no_head_limit() {
        let config = ServerConfig {
            timeout_keep_alive: Some(5 * S),
            header_read_timeout: Some(S),
            ..Default::default()
        };
        let r = IdleRules::http2(&config);
        let t0 = Instant::now();
        assert_eq!(
            r.check(idle(t0, Some(t0)), true, t0 + 2 * S),
            IdleCheck::LookAgainAt(t0 + 5 * S)
        );
    }
}
