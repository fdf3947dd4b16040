//! The PyPy fast path: HTTP requests run without one cpyext object per request.
//!
//! python/ferrocorn/_pypy/fast.py drains the queue itself, calling the `extern "C"` functions
//! below through cffi (which PyPy's JIT compiles into direct calls): `fc_drain` hands over
//! every request of a drain packed into one buffer (`packing`), each with a handle; the app's
//! `receive()`/`send()` pass that handle with plain bytes and integers; `fc_complete` /
//! `fc_fail` end the call. Behind the handle is the same `HttpProtocol` the CPython path
//! wraps in a Python object, and every transition is the same code (`protocol.rs`'s plain
//! operations), so both interpreters answer alike.
//!
//! What the fast path does not carry (WebSockets, the static route's events, log lines, and
//! requests it cannot pack: TLS, HTTP/2, trailers, a forwarding header with
//! `--proxy-headers`) stays queued for `Core.drain_slow`, the PyO3 dispatcher; so do the
//! messages `send()` does not take apart itself (`Core.fast_send`).
//!
//! Everything here runs on the loop thread. No function lets a panic out: each one catches
//! it and reports the request gone.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::StatusCode;

use super::packing::{pack_scope_into, unpack_headers};
use crate::asgi::loop_ctx::LoopCtx;
use crate::asgi::protocol::{HttpProtocol, RequestLine, Sent};
use crate::asgi::response::Incoming;
use crate::bridge::{Event, PendingRequest, Wakeup};
use crate::http::headers::has_forwarding_header;

/// Record kinds in `fc_drain`'s buffer.
const REQUEST: u8 = 1;
const RECEIVE: u8 = 2;
const SEND_DONE: u8 = 3;

/// `fc_drain`'s flag: events are waiting for `Core.drain_slow`.
const SLOW: i32 = 1;

/// `fc_receive`'s answers.
const RECV_WAIT: i32 = 0;
const RECV_LAST: i32 = 1;
const RECV_MORE: i32 = 2;
const RECV_DISCONNECT: i32 = 3;
/// Any function's answer for a handle that names no running request (it ended, or the
/// core closed).
const GONE: i32 = -1;

struct Slot {
    generation: u32,
    request: Option<FastRequest>,
}

struct FastRequest {
    /// Shared only so that `with_request` can call into Python without the lock held.
    proto: Arc<HttpProtocol>,
    /// What `fc_receive` last handed out, alive until the next call reads it.
    chunk: Bytes,
}

#[derive(Default)]
struct Requests {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The records of the drain in progress.
    out: Vec<u8>,
    closed: bool,
}

impl Requests {
    fn insert(&mut self, proto: HttpProtocol) -> u64 {
        let index = match self.free.pop() {
            Some(index) => index,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    request: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.request = Some(FastRequest {
            proto: Arc::new(proto),
            chunk: Bytes::new(),
        });
        (u64::from(slot.generation) << 32) | u64::from(index + 1)
    }

    fn get(&mut self, handle: u64) -> Option<&mut FastRequest> {
        let index = (handle & 0xffff_ffff) as usize;
        let slot = self.slots.get_mut(index.checked_sub(1)?)?;
        if u64::from(slot.generation) != handle >> 32 {
            return None;
        }
        slot.request.as_mut()
    }

    fn remove(&mut self, handle: u64) -> Option<FastRequest> {
        let index = (handle & 0xffff_ffff) as usize;
        let slot = self.slots.get_mut(index.checked_sub(1)?)?;
        if u64::from(slot.generation) != handle >> 32 {
            return None;
        }
        let request = slot.request.take()?;
        self.free.push(index as u32 - 1);
        Some(request)
    }

    /// Starts a record: its head is its length (u32, set by `close_record`), kind (u8),
    /// three pad bytes and handle (u64), all little-endian; a request's packed scope follows.
    fn record(&mut self, kind: u8, handle: u64) -> usize {
        let start = self.out.len();
        self.out.extend_from_slice(&[0; 4]);
        self.out.extend_from_slice(&[kind, 0, 0, 0]);
        self.out.extend_from_slice(&handle.to_le_bytes());
        start
    }

    fn close_record(&mut self, start: usize) {
        let len = (self.out.len() - start) as u32;
        self.out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    }
}

/// One core's fast path: its requests and the events left for the PyO3 dispatcher.
pub(crate) struct FastPath {
    requests: Mutex<Requests>,
    slow: Mutex<VecDeque<Event>>,
    ctx: Arc<LoopCtx>,
    wakeup: Arc<Wakeup>,
    /// `--proxy-headers`: requests with a forwarding header take the slow path, whose
    /// dispatcher picks the call that rewrites their scope.
    forwarded_call: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FastPath {
    /// A fast path that lives as long as the process: Python holds its address, and a call
    /// after the core closed must still find it (and answer `GONE`).
    pub(crate) fn leak(
        ctx: Arc<LoopCtx>,
        wakeup: Arc<Wakeup>,
        forwarded_call: bool,
    ) -> &'static Self {
        Box::leak(Box::new(FastPath {
            requests: Mutex::new(Requests::default()),
            slow: Mutex::new(VecDeque::new()),
            ctx,
            wakeup,
            forwarded_call,
        }))
    }

    pub(crate) fn address(&'static self) -> usize {
        self as *const Self as usize
    }

    /// The events `Core.drain_slow` dispatches, in order.
    pub(crate) fn take_slow(&self) -> VecDeque<Event> {
        std::mem::take(&mut *lock(&self.slow))
    }

    /// The request behind `handle`, for `Core.fast_send`: `f` runs without the lock held,
    /// since it calls into Python (which might call back into the fast path).
    pub(crate) fn with_request<R>(
        &self,
        handle: u64,
        f: impl FnOnce(&HttpProtocol) -> R,
    ) -> Option<R> {
        let proto = lock(&self.requests).get(handle).map(|r| r.proto.clone())?;
        Some(f(&proto))
    }

    /// The core closed: requests still running end as failed (hyper is gone anyway), and
    /// every later call answers `GONE`.
    pub(crate) fn close(&self) {
        let mut requests = lock(&self.requests);
        requests.closed = true;
        let running: Vec<FastRequest> = requests
            .slots
            .iter_mut()
            .filter_map(|slot| slot.request.take())
            .collect();
        drop(requests);
        for request in running {
            request.proto.fail_plain();
        }
        lock(&self.slow).clear();
    }

    fn drain(&self, first: bool) -> (*const u8, usize, i32) {
        let relay = &self.ctx.relay;
        if first {
            self.wakeup.reset();
            relay.begin_batch();
        }
        let mut requests = lock(&self.requests);
        requests.out.clear();
        if requests.closed {
            return (requests.out.as_ptr(), 0, 0);
        }
        let mut slow = lock(&self.slow);
        while let Some(event) = self.wakeup.pop() {
            match event {
                Event::Request(req) => {
                    if let Err(req) = self.admit(&mut requests, req) {
                        slow.push_back(Event::Request(req));
                    }
                }
                Event::Receive(ex) => {
                    let handle = ex.state().fast_handle;
                    match handle {
                        0 => slow.push_back(Event::Receive(ex)),
                        _ => {
                            let at = requests.record(RECEIVE, handle);
                            requests.close_record(at);
                        }
                    }
                }
                Event::SendDone(ex) => {
                    let handle = ex.state().fast_handle;
                    match handle {
                        0 => slow.push_back(Event::SendDone(ex)),
                        _ => {
                            let at = requests.record(SEND_DONE, handle);
                            requests.close_record(at);
                        }
                    }
                }
                other => slow.push_back(other),
            }
        }
        // No early hand-over of wakes while Python works through the records (relay.rs):
        // `fc_last` says when it reaches the last one.
        relay.set_more_queued(true);
        let flags = if slow.is_empty() { 0 } else { SLOW };
        (requests.out.as_ptr(), requests.out.len(), flags)
    }

    /// A request for the fast path: packed into the drain's buffer with its new handle.
    /// Err when it takes the slow path.
    fn admit(
        &self,
        requests: &mut Requests,
        req: Box<PendingRequest>,
    ) -> Result<(), Box<PendingRequest>> {
        if self.forwarded_call && has_forwarding_header(&req.head.headers) {
            return Err(req);
        }
        let at = requests.record(REQUEST, 0);
        if !pack_scope_into(&req, &mut requests.out) {
            requests.out.truncate(at);
            return Err(req);
        }
        requests.close_record(at);
        let line = RequestLine::of(&req, self.ctx.access_log.as_ref());
        let exchange = req.exchange.clone();
        let proto = HttpProtocol::new(
            exchange.clone(),
            self.ctx.clone(),
            line,
            self.ctx.relay.join_batch(),
        );
        let handle = requests.insert(proto);
        requests.out[at + 8..at + 16].copy_from_slice(&handle.to_le_bytes());
        exchange.state().fast_handle = handle;
        Ok(())
    }
}

/// `f` with the fast path at `fp`, any panic caught and answered with `on_panic`.
///
/// # Safety
/// `fp` is an address `FastPath::address` gave (the fast path is never freed).
unsafe fn guarded<R>(fp: *const FastPath, on_panic: R, f: impl FnOnce(&FastPath) -> R) -> R {
    if fp.is_null() {
        return on_panic;
    }
    // SAFETY: the caller passes an address of a leaked, never freed `FastPath`.
    let fast = unsafe { &*fp };
    catch_unwind(AssertUnwindSafe(|| f(fast))).unwrap_or(on_panic)
}

/// A byte slice from C, empty for a null pointer.
///
/// # Safety
/// `ptr` points to `len` readable bytes, or is null.
unsafe fn slice<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: as the caller promises.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// Takes everything queued: `*data`/`*len` the records (valid until the next call), the
/// return value `SLOW` when `Core.drain_slow` has events to dispatch. `first`: the first call
/// of this wake-up (it resets the wake-up and starts the batch).
///
/// # Safety
/// `fp` from `Core.fast_path()`; `data` and `len` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_drain(
    fp: *const FastPath,
    first: i32,
    data: *mut *const u8,
    len: *mut usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    let (ptr, n, flags) = unsafe { guarded(fp, (std::ptr::null(), 0, 0), |f| f.drain(first != 0)) };
    if !data.is_null() && !len.is_null() {
        // SAFETY: the caller passes writable pointers.
        unsafe {
            *data = ptr;
            *len = n;
        }
    }
    flags
}

/// Python has reached the drain's last record: from here a completed batch hands its wakes
/// to tokio at once (relay.rs).
///
/// # Safety
/// `fp` from `Core.fast_path()`.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_last(fp: *const FastPath) {
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, (), |f| {
            let more = !f.wakeup.is_empty() || !lock(&f.slow).is_empty();
            f.ctx.relay.set_more_queued(more);
        })
    }
}

/// The drain is over (every record handled).
///
/// # Safety
/// `fp` from `Core.fast_path()`.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_drain_end(fp: *const FastPath) {
    // SAFETY: forwarded from the caller.
    unsafe { guarded(fp, (), |f| f.ctx.relay.end_batch()) }
}

/// `receive()`: `RECV_LAST`/`RECV_MORE` with the body at `*data`/`*len` (valid until the
/// next call for this request), `RECV_DISCONNECT`, `RECV_WAIT` (armed: a `RECEIVE` record
/// follows the next change), or `GONE`.
///
/// # Safety
/// `fp` from `Core.fast_path()`; `data` and `len` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_receive(
    fp: *const FastPath,
    handle: u64,
    data: *mut *const u8,
    len: *mut usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, GONE, |f| {
            let mut requests = lock(&f.requests);
            let Some(request) = requests.get(handle) else {
                return GONE;
            };
            let (code, chunk) = match request.proto.receive_plain() {
                Incoming::Request(chunk, more) => (if more { RECV_MORE } else { RECV_LAST }, chunk),
                Incoming::Disconnect => (RECV_DISCONNECT, Bytes::new()),
                Incoming::Wait => (RECV_WAIT, Bytes::new()),
            };
            request.chunk = chunk;
            if !data.is_null() && !len.is_null() {
                *data = request.chunk.as_ptr();
                *len = request.chunk.len();
            }
            code
        })
    }
}

/// `http.response.start`: `status` and `count` headers packed `name\0value\0...`
/// (`unpack_headers`). A `Sent` code, or `GONE`.
///
/// # Safety
/// `fp` from `Core.fast_path()`; `headers` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_send_start(
    fp: *const FastPath,
    handle: u64,
    status: u32,
    headers: *const u8,
    len: usize,
    count: usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    let packed = unsafe { slice(headers, len) };
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, GONE, |f| {
            let Some(headers) = unpack_headers(packed, count) else {
                return Sent::Fault as i32;
            };
            let Some(status) = u16::try_from(status)
                .ok()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .filter(|s| (200..=599).contains(&s.as_u16()))
            else {
                return Sent::Fault as i32;
            };
            let mut requests = lock(&f.requests);
            match requests.get(handle) {
                Some(request) => request.proto.send_start_plain(status, headers) as i32,
                None => GONE,
            }
        })
    }
}

/// `http.response.body` with `len` bytes at `body`. A `Sent` code, or `GONE`.
///
/// # Safety
/// `fp` from `Core.fast_path()`; `body` points to `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_send_body(
    fp: *const FastPath,
    handle: u64,
    body: *const u8,
    len: usize,
    more_body: i32,
) -> i32 {
    // SAFETY: forwarded from the caller.
    let body = unsafe { slice(body, len) };
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, GONE, |f| {
            let mut requests = lock(&f.requests);
            match requests.get(handle) {
                Some(request) => request.proto.send_body_plain(body, more_body != 0) as i32,
                None => GONE,
            }
        })
    }
}

/// The app returned: 1 with a protocol fault's text at `*text`/`*len` (static) for the
/// error log, 0 without, `GONE`. The handle is void afterwards.
///
/// # Safety
/// `fp` from `Core.fast_path()`; `text` and `len` writable.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_complete(
    fp: *const FastPath,
    handle: u64,
    text: *mut *const u8,
    len: *mut usize,
) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, GONE, |f| {
            let Some(request) = lock(&f.requests).remove(handle) else {
                return GONE;
            };
            request.proto.ex.state().fast_handle = 0;
            match request.proto.complete_plain() {
                Some(fault) => {
                    if !text.is_null() && !len.is_null() {
                        *text = fault.as_ptr();
                        *len = fault.len();
                    }
                    1
                }
                None => 0,
            }
        })
    }
}

/// The app raised, was cancelled, or could not be started. 0, or `GONE`. The handle is
/// void afterwards.
///
/// # Safety
/// `fp` from `Core.fast_path()`.
#[no_mangle]
pub unsafe extern "C" fn ferrocorn_fast_fail(fp: *const FastPath, handle: u64) -> i32 {
    // SAFETY: forwarded from the caller.
    unsafe {
        guarded(fp, GONE, |f| {
            let Some(request) = lock(&f.requests).remove(handle) else {
                return GONE;
            };
            request.proto.ex.state().fast_handle = 0;
            request.proto.fail_plain();
            0
        })
    }
}
