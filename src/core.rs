//! `Core`: one worker's server. Owns the tokio runtime, the listeners and the loop-side
//! dispatch that turns queued requests into app tasks.

use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

#[cfg(not(PyPy))]
use crate::asgi::lazy_task::LazyTasks;
use crate::asgi::protocol::{HttpProtocol, LoopCtx, RequestLine};
use crate::asgi::runner::AppRun;
use crate::asgi::scope::ScopeFactory;
use crate::asgi::websocket::WebSocketProtocol;
use crate::config::{Http2Settings, HttpMode, ServerConfig};
use crate::errors::{log_error, log_warning};
use crate::http::headers::{response_header_name, response_header_value};
use crate::runtime::IoRuntime;
use crate::server::connection::alpn_protocols;
use crate::server::listener::{accept_loop, Listener};
use crate::server::request::{PendingRequest, PendingWebSocket};
use crate::server::{Lifecycle, ServerShared};
use crate::tls::pyconfig::TlsConfig;
use crate::wakeup::{Event, Wakeup};
use crate::ws::WsConfig;

enum PendingListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, Arc<str>),
}

/// How a task body becomes a task: `asyncio.Task` directly (eagerly on Python 3.12+, so
/// a handler that never waits finishes inside the drain), a lazily set-up task on CPython
/// 3.11 (same effect, see lazy_task.rs), or a custom task factory through `loop.create_task`.
enum TaskSpawner {
    /// `loop.create_task`, when the loop has a task factory.
    CreateTask(Py<PyAny>),
    /// `asyncio.Task(coro, **kwargs)`: the loop, and `eager_start` on 3.12+.
    Task {
        task_type: Py<PyAny>,
        kwargs: Py<PyDict>,
    },
    /// CPython 3.11: the first step runs now; `fallback` is for bodies that are not
    /// `AppRun`.
    #[cfg(not(PyPy))]
    Lazy {
        tasks: Arc<LazyTasks>,
        fallback: Box<TaskSpawner>,
    },
    /// PyPy: `start(wrapper, app, scope, proto)` from `_request_task.pypy_starter`, the
    /// same idea in Python (one call into Python per request); `fallback` for the rest.
    #[cfg(PyPy)]
    PyPyStart {
        start: Py<PyAny>,
        fallback: Box<TaskSpawner>,
    },
}

impl TaskSpawner {
    fn spawn(&self, py: Python<'_>, coro: Bound<'_, PyAny>) -> PyResult<()> {
        match self {
            TaskSpawner::CreateTask(create_task) => create_task.bind(py).call1((coro,))?,
            TaskSpawner::Task { task_type, kwargs } => {
                task_type.bind(py).call((coro,), Some(kwargs.bind(py)))?
            }
            #[cfg(PyPy)]
            TaskSpawner::PyPyStart { fallback, .. } => return fallback.spawn(py, coro),
            #[cfg(not(PyPy))]
            TaskSpawner::Lazy { tasks, fallback } => {
                return match coro.cast_into::<AppRun>() {
                    Ok(body) => tasks.start(py, body),
                    Err(err) => fallback.spawn(py, err.into_inner()),
                };
            }
        };
        Ok(())
    }
}

/// What each app call runs inside: the built-in `AppRun`, or a Python wrapper (access log,
/// metrics, proxy headers) called as `wrapper(app, scope, proto)`.
enum TaskBody {
    Builtin,
    Wrapper(Py<PyAny>),
}

impl TaskBody {
    fn new(py: Python<'_>, run_asgi: Py<PyAny>) -> Self {
        if run_asgi.bind(py).is(py.get_type::<AppRun>()) {
            TaskBody::Builtin
        } else {
            TaskBody::Wrapper(run_asgi)
        }
    }

    fn make<'py>(
        &self,
        py: Python<'py>,
        app: &Py<PyAny>,
        scope: Bound<'py, PyDict>,
        proto: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wrapper = match self {
            TaskBody::Builtin => None,
            // On PyPy the Python coroutine is cheaper than stepping it from Rust.
            TaskBody::Wrapper(wrapper) if cfg!(PyPy) => {
                return wrapper.bind(py).call1((app.bind(py), scope, proto));
            }
            TaskBody::Wrapper(wrapper) => Some(wrapper.clone_ref(py)),
        };
        let body = AppRun::new(app.clone_ref(py), wrapper, scope.into_any().unbind(), proto);
        Ok(Bound::new(py, body)?.into_any())
    }
}

/// The name of every request's task.
const TASK_NAME: &str = "ferrocorn.app";

/// How long `stop_accepting` waits for the accept loops (they stop at their next poll; this
/// only bounds a runtime that is stuck).
const ACCEPT_LOOPS_STOP_LIMIT: Duration = Duration::from_secs(5);

/// The loop callback that hands batched wake-ups to tokio (see relay.rs).
#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
struct RelayFlush(Arc<crate::relay::WakeRelay>);

#[pymethods]
impl RelayFlush {
    fn __call__(&self) {
        self.0.flush();
    }
}

#[pyclass(frozen, module = "ferrocorn._ferrocorn")]
pub struct Core {
    app: Py<PyAny>,
    event_loop: Py<PyAny>,
    run_asgi: TaskBody,
    /// The (app, wrapper) pair that applies proxy headers, used only for requests that carry
    /// a forwarding header (so the rest pay nothing for `--proxy-headers`).
    forwarded: Option<(Py<PyAny>, TaskBody)>,
    spawner: TaskSpawner,
    scope: ScopeFactory,
    ctx: Arc<LoopCtx>,
    shared: Arc<ServerShared>,
    runtime: Mutex<Option<IoRuntime>>,
    listeners: Mutex<Vec<PendingListener>>,
    started: Mutex<bool>,
}

fn extra_headers(
    headers: &Bound<'_, PyList>,
) -> PyResult<Vec<(http::HeaderName, http::HeaderValue)>> {
    let mut out = Vec::with_capacity(headers.len());
    for item in headers.iter() {
        let (name, value): (Vec<u8>, Vec<u8>) = item.extract()?;
        let name = response_header_name(&name).map_err(|_| {
            PyValueError::new_err(format!(
                "invalid header name {:?}",
                String::from_utf8_lossy(&name)
            ))
        })?;
        let value = response_header_value(&value)
            .map_err(|_| PyValueError::new_err(format!("invalid value for header {name}")))?;
        out.push((name, value));
    }
    Ok(out)
}

/// `Forwarded` or any `X-Forwarded-*` header. One pass over the names (requests carry few)
/// is cheaper than five hash lookups.
fn has_forwarding_header(headers: &http::HeaderMap) -> bool {
    headers.keys().any(|name| {
        let name = name.as_str().as_bytes();
        name == b"forwarded" || name.starts_with(b"x-forwarded-")
    })
}

/// A timeout in seconds from Python: None or 0 disables it.
pub(crate) fn seconds(name: &str, value: Option<f64>) -> PyResult<Option<Duration>> {
    match value {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(PyValueError::new_err(format!(
            "{name} must be a non-negative number of seconds, got {t}"
        ))),
    }
}

fn http_mode(value: &str) -> PyResult<HttpMode> {
    match value {
        "auto" => Ok(HttpMode::Auto),
        "1" | "1.1" => Ok(HttpMode::Http1),
        "2" => Ok(HttpMode::Http2),
        other => Err(PyValueError::new_err(format!(
            "invalid http {other:?}: expected \"auto\", \"1\" or \"2\""
        ))),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Core {
    fn dispatch(&self, py: Python<'_>, req: PendingRequest) -> PyResult<()> {
        let line = RequestLine {
            method: req.head.method.clone(),
            uri: req.head.uri.clone(),
            version: req.head.version,
            peer: req.conn.peer,
        };
        let proto = Bound::new(
            py,
            HttpProtocol::new(
                req.exchange.clone(),
                self.ctx.clone(),
                line,
                self.shared.relay.join_batch(),
            ),
        )?;
        #[cfg(PyPy)]
        if let Some(started) = self.start_packed(py, &req, &proto) {
            if started.is_err() {
                proto.get().fail_internal();
            }
            return started;
        }
        let scope = self.scope.build(py, &req);
        let started = self.start_app(py, scope, &req.head.headers, proto.as_any());
        if started.is_err() {
            proto.get().fail_internal();
        }
        started
    }

    /// PyPy: hand `start` the packed scope, which it unpacks in Python (scope.rs `pack`).
    /// None when the request does not go through `start` (checked before packing) or its
    /// scope cannot be packed.
    #[cfg(PyPy)]
    fn start_packed(
        &self,
        py: Python<'_>,
        req: &PendingRequest,
        proto: &Bound<'_, HttpProtocol>,
    ) -> Option<PyResult<()>> {
        let (app, body) = self.pick_app(&req.head.headers);
        let (start, wrapper) = self.pypy_start(body)?;
        let packed = self.scope.pack(py, req)?;
        let args = (wrapper.bind(py), app.bind(py), packed, proto);
        Some(start.bind(py).call1(args).map(drop))
    }

    /// PyPy: `_request_task.pypy_starter`'s `start` and the app's Python wrapper, when
    /// requests are started through it (no task factory on the loop, a Python task body).
    #[cfg(PyPy)]
    fn pypy_start<'a>(&'a self, body: &'a TaskBody) -> Option<(&'a Py<PyAny>, &'a Py<PyAny>)> {
        match (&self.spawner, body) {
            (TaskSpawner::PyPyStart { start, .. }, TaskBody::Wrapper(wrapper)) => {
                Some((start, wrapper))
            }
            _ => None,
        }
    }

    /// Create the app coroutine inside its task wrapper and start it as a task.
    fn start_app(
        &self,
        py: Python<'_>,
        scope: PyResult<Bound<'_, PyDict>>,
        headers: &http::HeaderMap,
        proto: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (app, body) = self.pick_app(headers);
        #[cfg(PyPy)]
        if let Some((start, wrapper)) = self.pypy_start(body) {
            let args = (wrapper.bind(py), app.bind(py), scope?, proto);
            return start.bind(py).call1(args).map(drop);
        }
        let body = body.make(py, app, scope?, proto)?;
        self.spawner.spawn(py, body)
    }

    /// The plain pair, or the proxy-headers pair when the request carries a forwarding
    /// header.
    fn pick_app(&self, headers: &http::HeaderMap) -> (&Py<PyAny>, &TaskBody) {
        match &self.forwarded {
            Some((app, run_asgi)) if has_forwarding_header(headers) => (app, run_asgi),
            _ => (&self.app, &self.run_asgi),
        }
    }

    fn dispatch_websocket(&self, py: Python<'_>, req: PendingWebSocket) -> PyResult<()> {
        let proto = Bound::new(
            py,
            WebSocketProtocol::new(
                req.exchange.clone(),
                self.ctx.clone(),
                req.head.uri.clone(),
                req.conn.peer,
            ),
        )?;
        let scope = self.scope.build_websocket(py, &req);
        let started = self.start_app(py, scope, &req.head.headers, proto.as_any());
        if started.is_err() {
            proto.get().fail_internal();
        }
        started
    }

    fn take_runtime(&self) -> Option<IoRuntime> {
        lock(&self.runtime).take()
    }
}

#[pymethods]
impl Core {
    #[new]
    #[pyo3(signature = (
        app, event_loop, run_asgi, *, forwarded_app=None, forwarded_run_asgi=None, state=None, root_path="", server_header=true,
        date_header=true, headers=None, http1_max_header_size=65536, http1_max_headers=100,
        body_preread_limit=65536, header_read_timeout=Some(30.0), keep_alive=true,
        keep_alive_timeout=Some(5.0), limit_concurrency=None,
        limit_request_body=Some(crate::config::DEFAULT_LIMIT_REQUEST_BODY),
        timeout_request_body=Some(60.0),
        limit_request_line=Some(crate::config::DEFAULT_LIMIT_REQUEST_LINE), runtime_threads=1,
        eager_tasks=None, tls=None, http="auto", http2_max_concurrent_streams=100,
        http2_initial_stream_window_size=1048576, http2_initial_connection_window_size=2097152,
        http2_max_frame_size=16384, http2_max_header_list_size=65536,
        http2_keep_alive_interval=None, http2_keep_alive_timeout=20.0, ws=true,
        ws_max_size=16777216, ws_max_queue=32, ws_ping_interval=Some(20.0),
        ws_ping_timeout=Some(20.0), ws_per_message_deflate=true
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        event_loop: Py<PyAny>,
        run_asgi: Py<PyAny>,
        forwarded_app: Option<Py<PyAny>>,
        forwarded_run_asgi: Option<Py<PyAny>>,
        state: Option<Py<PyDict>>,
        root_path: &str,
        server_header: bool,
        date_header: bool,
        headers: Option<Bound<'_, PyList>>,
        http1_max_header_size: usize,
        http1_max_headers: usize,
        body_preread_limit: u64,
        header_read_timeout: Option<f64>,
        keep_alive: bool,
        keep_alive_timeout: Option<f64>,
        limit_concurrency: Option<usize>,
        limit_request_body: Option<u64>,
        timeout_request_body: Option<f64>,
        limit_request_line: Option<usize>,
        runtime_threads: usize,
        eager_tasks: Option<bool>,
        tls: Option<PyRef<'_, TlsConfig>>,
        http: &str,
        http2_max_concurrent_streams: u32,
        http2_initial_stream_window_size: u32,
        http2_initial_connection_window_size: u32,
        http2_max_frame_size: u32,
        http2_max_header_list_size: u32,
        http2_keep_alive_interval: Option<f64>,
        http2_keep_alive_timeout: f64,
        ws: bool,
        ws_max_size: usize,
        ws_max_queue: usize,
        ws_ping_interval: Option<f64>,
        ws_ping_timeout: Option<f64>,
        ws_per_message_deflate: bool,
    ) -> PyResult<Self> {
        let header_read_timeout = seconds("header_read_timeout", header_read_timeout)?;
        let keep_alive_timeout = seconds("keep_alive_timeout", keep_alive_timeout)?;
        let http = http_mode(http)?;
        let http2 = Http2Settings {
            max_concurrent_streams: http2_max_concurrent_streams,
            initial_stream_window_size: http2_initial_stream_window_size,
            initial_connection_window_size: http2_initial_connection_window_size,
            max_frame_size: http2_max_frame_size,
            max_header_list_size: http2_max_header_list_size,
            keep_alive_interval: seconds("http2_keep_alive_interval", http2_keep_alive_interval)?,
            keep_alive_timeout: seconds(
                "http2_keep_alive_timeout",
                Some(http2_keep_alive_timeout),
            )?
            .unwrap_or(Http2Settings::default().keep_alive_timeout),
        };
        let tls = tls.map(|t| {
            Arc::new(
                t.loaded
                    .with_alpn(alpn_protocols(http), t.handshake_timeout),
            )
        });
        let config = Arc::new(ServerConfig {
            server_header,
            date_header,
            extra_headers: match headers {
                Some(h) => extra_headers(&h)?,
                None => Vec::new(),
            },
            max_header_size: http1_max_header_size,
            max_headers: http1_max_headers,
            body_preread_limit,
            header_read_timeout,
            keep_alive,
            keep_alive_timeout,
            limit_concurrency,
            limit_request_body: limit_request_body.filter(|&n| n > 0),
            request_body_timeout: seconds("timeout_request_body", timeout_request_body)?,
            limit_request_line: limit_request_line.filter(|&n| n > 0),
            http,
            http2,
            tls,
            ws: WsConfig {
                enabled: ws,
                max_size: ws_max_size,
                max_queue: ws_max_queue,
                ping_interval: seconds("ws_ping_interval", ws_ping_interval)?,
                ping_timeout: seconds("ws_ping_timeout", ws_ping_timeout)?,
                per_message_deflate: ws_per_message_deflate,
            },
        });
        let wakeup = Arc::new(Wakeup::new().map_err(|e| PyOSError::new_err(e.to_string()))?);
        let parked = wakeup.clone();
        let runtime = IoRuntime::start(runtime_threads.max(1), move || parked.flush())
            .map_err(|e| PyOSError::new_err(format!("cannot start the I/O runtime: {e}")))?;

        let loop_ref = event_loop.bind(py);
        let version = py.version_info();
        let version = (version.major, version.minor);
        let eager = eager_tasks.unwrap_or(true);
        let eager_start = eager && version >= (3, 12);
        let has_factory = !loop_ref.call_method0("get_task_factory")?.is_none();
        // `asyncio.Task(coro, loop=loop)` skips the loop's create_task wrapper (measurably
        // cheaper per request under uvloop); passing the loop spares the running-loop lookup,
        // which costs a getpid() syscall per task on CPython 3.11. Eager tasks (3.12+) are
        // always built this way; otherwise a custom task factory must be honoured.
        let plain = if eager_start || !has_factory {
            let kwargs = PyDict::new(py);
            kwargs.set_item("loop", loop_ref)?;
            // A name given spares the "Task-<n>" formatting asyncio does per task (1.27 -> 1.11
            // µs per asyncio.Task under uvloop, timeit); it also says what the task is.
            kwargs.set_item("name", TASK_NAME)?;
            if eager_start {
                kwargs.set_item("eager_start", true)?;
            }
            TaskSpawner::Task {
                task_type: py.import("asyncio")?.getattr("Task")?.unbind(),
                kwargs: kwargs.unbind(),
            }
        } else {
            TaskSpawner::CreateTask(loop_ref.getattr("create_task")?.unbind())
        };
        #[cfg(not(PyPy))]
        let spawner = if eager && version == (3, 11) && !has_factory {
            TaskSpawner::Lazy {
                tasks: Arc::new(LazyTasks::new(py, loop_ref, TASK_NAME)?),
                fallback: Box::new(plain),
            }
        } else {
            plain
        };
        #[cfg(PyPy)]
        let spawner = if eager && !has_factory {
            TaskSpawner::PyPyStart {
                start: py
                    .import("ferrocorn._request_task")?
                    .call_method1(
                        "pypy_starter",
                        (loop_ref, root_path, state.as_ref().map(|s| s.bind(py))),
                    )?
                    .unbind(),
                fallback: Box::new(plain),
            }
        } else {
            plain
        };
        let shared = Arc::new(ServerShared::new(config.clone(), wakeup));
        let ctx = Arc::new(LoopCtx {
            create_future: loop_ref.getattr("create_future")?.unbind(),
            runtime: runtime.handle().clone(),
            config: config.clone(),
            relay: shared.relay.clone(),
            done: {
                let done = loop_ref.call_method0("create_future")?;
                done.call_method1("set_result", (py.None(),))?;
                done.unbind()
            },
        });
        Ok(Core {
            app,
            event_loop,
            run_asgi: TaskBody::new(py, run_asgi),
            forwarded: forwarded_app
                .zip(forwarded_run_asgi)
                .map(|(app, run_asgi)| (app, TaskBody::new(py, run_asgi))),
            spawner,
            scope: ScopeFactory::new(py, root_path, state)?,
            ctx,
            shared,
            runtime: Mutex::new(Some(runtime)),
            listeners: Mutex::new(Vec::new()),
            started: Mutex::new(false),
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

    /// Takes ownership of `fd`, a bound and listening Unix socket at `path`.
    fn listen_unix(&self, fd: i32, path: &str) -> PyResult<()> {
        // SAFETY: as for listen_tcp.
        let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(fd) };
        listener.set_nonblocking(true)?;
        lock(&self.listeners).push(PendingListener::Unix(listener, Arc::from(path)));
        Ok(())
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
            });
        }
        this.event_loop.bind(slf.py()).call_method1(
            "add_reader",
            (this.shared.wakeup.fd(), slf.getattr("drain")?),
        )?;
        // Wake-ups of connection tasks from this thread are batched from here on.
        crate::relay::mark_loop_thread();
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
            handle.spawn(accept_loop(listener, this.shared.clone(), registered));
        }
        *started = true;
        Ok(())
    }

    /// The eventfd callback: dispatch everything tokio queued since the last wake-up.
    fn drain(&self, py: Python<'_>) {
        self.shared.wakeup.reset();
        self.shared.relay.begin_batch();
        while let Some(event) = self.shared.wakeup.pop() {
            self.shared
                .relay
                .set_more_queued(!self.shared.wakeup.is_empty());
            let result = match event {
                Event::Request(req) => self.dispatch(py, *req),
                Event::Receive(ex) => HttpProtocol::on_receive_event(py, &ex),
                Event::SendDone(ex) => HttpProtocol::on_send_done(py, &ex),
                Event::WebSocket(req) => self.dispatch_websocket(py, *req),
                Event::WsReceive(ex) => WebSocketProtocol::on_receive_event(py, &ex),
                Event::WsSendDone(ex) => WebSocketProtocol::on_send_done(py, &ex),
                Event::Warning(message) => log_warning(py, message.0.as_str()),
            };
            if let Err(err) = result {
                log_error(py, "Error while dispatching a request", Some(err));
            }
        }
        self.shared.relay.end_batch();
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

    /// Requests received since start (for `--limit-max-requests`).
    fn total_requests(&self) -> u64 {
        self.shared.requests_total()
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
        while self.shared.wakeup.pop().is_some() {}
        Ok(())
    }
}
