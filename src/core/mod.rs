//! `Core`: one worker's server, as Python drives it: built from the `Config` (`options`),
//! it owns the tokio runtime and the listeners, starts, stops accepting, drains and closes.
//! What happens per request is the dispatcher's (asgi/dispatch.rs) and the tokio side's.

pub(crate) mod options;
pub(crate) mod probes;
mod seconds;
pub(crate) mod tls_config;

use std::collections::HashMap;
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::access_log::sink::AccessSink;
use crate::asgi::access::AccessLog;
use crate::asgi::dispatch::{AppCall, Dispatcher};
use crate::asgi::loop_ctx::LoopCtx;
use crate::asgi::spawn::Runner;
use crate::bridge::Wakeup;
use crate::server::{accept_loop, IoRuntime, Lifecycle, Listener, ServerShared, Unavailable};
use options::Options;
use tls_config::TlsConfig;

enum PendingListener {
    Tcp(std::net::TcpListener),
    /// `--http3`: the UDP socket at the TCP listener's address.
    Quic(std::net::UdpSocket),
    Unix(std::os::unix::net::UnixListener, Arc<str>),
}

/// How long `stop_accepting` waits for the accept loops (they stop at their next poll; this
/// only bounds a runtime that is stuck).
const ACCEPT_LOOPS_STOP_LIMIT: Duration = Duration::from_secs(5);

/// How long a client may remember that HTTP/3 is served (RFC 7838 `ma`, seconds).
const ALT_SVC_MAX_AGE: u32 = 86_400;

/// `Alt-Svc: h3=":PORT"; ma=...` (RFC 9114 §3.1.1): HTTP/3 on the same host, that UDP port.
fn alt_svc(port: u16) -> (http::HeaderName, http::HeaderValue) {
    let value = format!("h3=\":{port}\"; ma={ALT_SVC_MAX_AGE}");
    (
        http::header::ALT_SVC,
        http::HeaderValue::from_str(&value).unwrap_or(http::HeaderValue::from_static("clear")),
    )
}

/// The loop callback that hands batched wake-ups to tokio (see relay.rs).
#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
struct RelayFlush(Arc<crate::bridge::WakeRelay>);

#[pymethods]
impl RelayFlush {
    fn __call__(&self) {
        self.0.flush();
    }
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub(crate) struct Core {
    /// Turns what tokio queues into app calls (loop side).
    dispatcher: Dispatcher,
    event_loop: Py<PyAny>,
    shared: Arc<ServerShared>,
    runtime: Mutex<Option<IoRuntime>>,
    listeners: Mutex<Vec<PendingListener>>,
    /// `--http3`'s endpoint once started, for certificate reloads.
    quic: Mutex<Option<quinn::Endpoint>>,
    started: Mutex<bool>,
    /// Listeners adopted while serving (`adopt_tcp`), by id: dropping the sender releases one.
    adopted: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<()>>>,
    next_adopted: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    fn take_runtime(&self) -> Option<IoRuntime> {
        lock(&self.runtime).take()
    }

    /// The eventfd callback: `drain`, or on PyPy with the default runner the fast path's
    /// Python drain (python/ferrocorn/_pypy/fast.py).
    fn reader<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        #[cfg(PyPy)]
        {
            let dispatcher = &slf.get().dispatcher;
            if let (Some(fast), Some((start, app, runner))) =
                (dispatcher.fast(), dispatcher.fast_start())
            {
                let py = slf.py();
                return py.import("ferrocorn._pypy.fast")?.call_method1(
                    "reader",
                    (
                        slf,
                        fast.address(),
                        start.bind(py),
                        app.bind(py),
                        runner.bind(py),
                    ),
                );
            }
        }
        slf.getattr("drain")
    }
}

/// PyPy's fast path, called by python/ferrocorn/_pypy/fast.py.
#[cfg(PyPy)]
#[pymethods]
impl Core {
    /// Dispatch the events the fast path's drain left to the PyO3 dispatcher.
    fn drain_slow(&self, py: Python<'_>) {
        self.dispatcher.drain_slow(py);
    }

    /// `send(message)` of a fast-path request, for the messages the fast path does not take
    /// apart itself: the awaitable, None when the message must wait for room (a `SEND_DONE`
    /// record follows), ClientDisconnected when the request is gone.
    fn fast_send(
        &self,
        py: Python<'_>,
        handle: u64,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<Py<PyAny>> {
        let fast = self
            .dispatcher
            .fast()
            .ok_or_else(|| PyRuntimeError::new_err("this core has no fast path"))?;
        fast.with_request(handle, |proto| proto.deliver_unparked(py, message))
            .unwrap_or_else(|| Err(crate::asgi::waiters::client_disconnected()))
    }
}

#[pymethods]
impl Core {
    /// `runner`: what each app call runs inside (asgi/spawn.rs `Runner`); `config`: the
    /// Python `Config`, read through `options::Options`; the `forwarded_*` pair serves
    /// requests that carry a forwarding header (`--proxy-headers`); `access_log`: (fd,
    /// colour, json) when the core writes the default access line to that descriptor itself
    /// (asgi/access.rs), None when the runner logs through Python or nothing is logged.
    #[new]
    /// `http3_port`: the UDP port `--http3` serves on, which responses on TCP advertise.
    #[pyo3(signature = (app, event_loop, runner, config, *, forwarded_app=None, forwarded_runner=None, state=None, access_log=None, http3_port=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        event_loop: Py<PyAny>,
        runner: Py<PyAny>,
        config: Options,
        forwarded_app: Option<Py<PyAny>>,
        forwarded_runner: Option<Py<PyAny>>,
        state: Option<Py<PyDict>>,
        access_log: Option<(i32, bool, bool)>,
        http3_port: Option<u16>,
    ) -> PyResult<Self> {
        let mut server_config = config.server_config(py)?;
        if let Some(port) = http3_port {
            // With the server's own headers (http/responses.rs): nothing to pay when off.
            server_config.extra_headers.push(alt_svc(port));
        }
        let server_config = Arc::new(server_config);
        let wakeup = Arc::new(Wakeup::new().map_err(|e| PyOSError::new_err(e.to_string()))?);
        let parked = wakeup.clone();
        let runtime = IoRuntime::start(config.runtime_threads.max(1), move || parked.flush())
            .map_err(|e| PyOSError::new_err(format!("cannot start the I/O runtime: {e}")))?;
        let access_log = match access_log {
            Some((fd, colour, json)) => Some(AccessLog::new(
                AccessSink::start(fd).map_err(|e| {
                    PyOSError::new_err(format!("cannot start the access-log writer: {e}"))
                })?,
                colour,
                json,
            )),
            None => None,
        };
        let loop_ref = event_loop.bind(py);
        let shared = Arc::new(ServerShared::new(server_config.clone(), wakeup.clone()));
        let ctx = Arc::new(LoopCtx {
            create_future: loop_ref.getattr("create_future")?.unbind(),
            runtime: runtime.handle().clone(),
            config: server_config,
            relay: shared.relay.clone(),
            done: {
                let done = loop_ref.call_method0("create_future")?;
                done.call_method1("set_result", (py.None(),))?;
                done.unbind()
            },
            access_log,
        });
        let plain = AppCall {
            app,
            runner: Runner::new(py, runner),
        };
        let forwarded = forwarded_app
            .zip(forwarded_runner)
            .map(|(app, runner)| AppCall {
                app,
                runner: Runner::new(py, runner),
            });
        let dispatcher = Dispatcher::new(
            py,
            loop_ref,
            plain,
            forwarded,
            (&config.root_path, state),
            ctx,
            wakeup,
        )?;
        Ok(Core {
            dispatcher,
            event_loop,
            shared,
            runtime: Mutex::new(Some(runtime)),
            listeners: Mutex::new(Vec::new()),
            quic: Mutex::new(None),
            started: Mutex::new(false),
            adopted: Mutex::new(HashMap::new()),
            next_adopted: AtomicU64::new(1),
        })
    }

    /// Takes ownership of `fd`, a bound and listening TCP socket.
    fn listen_tcp(&self, fd: i32) -> PyResult<()> {
        // SAFETY: the caller hands over a listening socket it no longer uses.
        let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        lock(&self.listeners).push(PendingListener::Tcp(listener));
        Ok(())
    }

    /// Takes ownership of `fd`, a bound UDP socket HTTP/3 is served on (`--http3`).
    fn listen_udp(&self, fd: i32) -> PyResult<()> {
        // SAFETY: as for listen_tcp.
        let socket = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
        socket.set_nonblocking(true)?;
        lock(&self.listeners).push(PendingListener::Quic(socket));
        Ok(())
    }

    /// Takes ownership of `fd`, a bound and listening Unix socket at `path`.
    fn listen_unix(&self, fd: i32, path: &str) -> PyResult<()> {
        // SAFETY: as for listen_tcp.
        let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        lock(&self.listeners).push(PendingListener::Unix(listener, Arc::from(path)));
        Ok(())
    }

    /// Takes ownership of `fd`, a listening TCP socket, and accepts on it beside the others
    /// from now on, until `release_listener` with the id returned (or the stop). The supervisor
    /// hands a live worker the socket of a slot whose worker died, until its replacement serves.
    fn adopt_tcp(&self, fd: i32) -> PyResult<u64> {
        // SAFETY: as for listen_tcp.
        let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        // Counted before the check: a `stop_accepting` from here on waits for this loop too.
        let registered = self.shared.track_accept_loop();
        if !*lock(&self.started) || *self.shared.lifecycle.borrow() >= Lifecycle::StopAccepting {
            return Err(PyRuntimeError::new_err("the server core is not serving"));
        }
        let runtime = lock(&self.runtime);
        let Some(runtime) = runtime.as_ref() else {
            return Err(PyRuntimeError::new_err("the server core is closed"));
        };
        let handle = runtime.handle();
        let _enter = handle.enter();
        let listener = Listener::Tcp(tokio::net::TcpListener::from_std(listener)?);
        let (release, released) = tokio::sync::oneshot::channel();
        let id = self.next_adopted.fetch_add(1, Ordering::Relaxed);
        lock(&self.adopted).insert(id, release);
        handle.spawn(accept_loop(
            listener,
            self.shared.clone(),
            registered,
            Some(released),
        ));
        Ok(id)
    }

    /// Stops accepting on the listener `adopt_tcp` returned `listener_id` for, and closes this
    /// process's descriptor of it (its queue stays with the other holders). False when unknown.
    fn release_listener(&self, listener_id: u64) -> bool {
        lock(&self.adopted).remove(&listener_id).is_some()
    }

    fn start(slf: &Bound<'_, Self>) -> PyResult<()> {
        let this = slf.get();
        let mut started = lock(&this.started);
        if *started {
            return Err(PyRuntimeError::new_err(
                "the server core is already started",
            ));
        }
        let runtime = lock(&this.runtime);
        let Some(runtime) = runtime.as_ref() else {
            return Err(PyRuntimeError::new_err("the server core is closed"));
        };
        let handle = runtime.handle();
        let _enter = handle.enter();
        let mut listeners = Vec::new();
        for pending in lock(&this.listeners).drain(..) {
            listeners.push(match pending {
                PendingListener::Tcp(l) => Listener::Tcp(tokio::net::TcpListener::from_std(l)?),
                PendingListener::Unix(l, path) => {
                    Listener::Unix(tokio::net::UnixListener::from_std(l)?, path)
                }
                PendingListener::Quic(socket) => {
                    let endpoint = crate::server::h3_endpoint(socket, &this.shared)
                        .map_err(PyValueError::new_err)?;
                    *lock(&this.quic) = Some(endpoint.clone());
                    Listener::Quic(endpoint)
                }
            });
        }
        this.event_loop
            .bind(slf.py())
            .call_method1("add_reader", (this.shared.wakeup.fd(), Self::reader(slf)?))?;
        // Wake-ups of connection tasks from this thread are batched from here on.
        crate::bridge::mark_loop_thread();
        let relay = this.shared.relay.clone();
        handle.spawn(relay.clone().run());
        let flush = Py::new(slf.py(), RelayFlush(relay.clone()))?;
        relay.set_scheduler(
            this.event_loop
                .bind(slf.py())
                .getattr("call_soon")?
                .unbind(),
            flush.into_any(),
        );
        for listener in listeners {
            let registered = this.shared.track_accept_loop();
            handle.spawn(accept_loop(listener, this.shared.clone(), registered, None));
        }
        *started = true;
        Ok(())
    }

    /// The logging configuration changed while serving: the core's access lines go to
    /// `callback(client, method, path, http_version, status)` from now on.
    fn divert_access_log(&self, py: Python<'_>, callback: Py<PyAny>) {
        if let Some(log) = self.dispatcher.access_log() {
            py.detach(|| log.flush());
            log.divert(callback);
        }
    }

    /// Static responses (the core's `--static-path-*` route) are told to
    /// `callback(client, method, path, http_version, status, bytes, seconds, logged)` from
    /// now on, for the metrics and a Python-logged access line (`logged`: the core wrote it).
    fn on_static_served(&self, callback: Py<PyAny>) {
        self.dispatcher.on_static_served(callback);
    }

    /// The eventfd callback (asgi/dispatch.rs).
    fn drain(&self, py: Python<'_>) {
        self.dispatcher.drain(py);
    }

    /// Closes the listeners, and returns once the accept loops have stopped: a connection
    /// accepted after `active_connections()` was read would otherwise be dropped unanswered.
    fn stop_accepting(&self, py: Python<'_>) {
        self.shared.set_lifecycle(Lifecycle::StopAccepting);
        let shared = &self.shared;
        py.detach(|| shared.wait_accept_loops_ended(ACCEPT_LOOPS_STOP_LIMIT));
    }

    fn shutdown(&self) {
        self.shared.set_lifecycle(Lifecycle::Draining);
    }

    fn active_connections(&self) -> usize {
        self.shared.active_connections()
    }

    /// The name of the asyncio task of every app call this core starts: a graceful
    /// shutdown waits for the tasks of that name (server.py).
    fn app_task_name(&self) -> &str {
        self.dispatcher.task_name()
    }

    /// New TLS handshakes present `tls` from now on; connections already established keep
    /// the certificate they were set up with. A server without TLS cannot take one.
    fn reload_tls(&self, tls: &TlsConfig) -> PyResult<()> {
        match &self.shared.config.tls {
            Some(server) => {
                server.replace(&tls.loaded);
                match lock(&self.quic).as_ref() {
                    Some(endpoint) => crate::server::h3_reload(endpoint, &self.shared)
                        .map_err(PyValueError::new_err),
                    None => Ok(()),
                }
            }
            None => Err(PyValueError::new_err(
                "this server does not serve TLS: nothing to reload",
            )),
        }
    }

    /// What the network side counts for `--metrics`, read on a scrape: requests waiting in
    /// the admission queue now, the server's own 503s by reason, failed TLS handshakes.
    fn server_counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let shared = &self.shared;
        let unavailable = PyDict::new(py);
        for reason in Unavailable::ALL {
            unavailable.set_item(reason.label(), shared.unavailable.get(reason))?;
        }
        let counts = PyDict::new(py);
        counts.set_item("requests_queued", shared.requests_queued())?;
        counts.set_item("responses_503", unavailable)?;
        counts.set_item("tls_handshake_failures", shared.tls_handshake_failures())?;
        Ok(counts)
    }

    /// Requests received since start (for `--limit-max-requests`).
    fn total_requests(&self) -> u64 {
        self.shared.requests_total()
    }

    /// Hands the loop thread's freed memory back to the system (the server calls it once a
    /// second). Response bodies are copied out of Python on this thread and freed where
    /// hyper lets go of them, on tokio's: mimalloc returns such pages to their owner thread
    /// only when it allocates again, so after a burst (clients that stalled on large
    /// responses, say) an idle loop thread would keep them for good.
    fn release_memory(&self) {
        // SAFETY: mi_collect takes no pointers; it runs on (and for) the calling thread.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.relay.flush();
        self.shared.set_lifecycle(Lifecycle::Closing);
        if std::mem::take(&mut *lock(&self.started)) {
            let _ = self
                .event_loop
                .bind(py)
                .call_method1("remove_reader", (self.shared.wakeup.fd(),));
        }
        if let Some(mut runtime) = self.take_runtime() {
            py.detach(move || runtime.stop());
        }
        // Requests queued but never dispatched: drop them here, with the GIL.
        self.dispatcher.discard_queued();
        // Every access line so far reaches stdout before close() returns.
        if let Some(log) = self.dispatcher.access_log() {
            py.detach(|| log.close());
        }
        Ok(())
    }
}
