//! The loop side of the hand-off: the eventfd callback drains what tokio queued, builds each
//! scope and protocol object and starts each app call (ARCHITECTURE.md, hot path steps 2–4).

use std::sync::{Arc, OnceLock};

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::asgi::access;
use crate::asgi::errors::{log_debug, log_error, log_warning};
use crate::asgi::loop_ctx::LoopCtx;
use crate::asgi::protocol::{HttpProtocol, RequestLine};
use crate::asgi::scope::ScopeFactory;
use crate::asgi::spawn::{task_name, Runner, TaskSpawner};
use crate::asgi::websocket::WebSocketProtocol;
use crate::bridge::{host_port, Event, PendingRequest, PendingWebSocket, Served, Wakeup};
use crate::http::headers::has_forwarding_header;

/// The app and the runner it is called in.
pub(crate) struct AppCall {
    pub(crate) app: Py<PyAny>,
    pub(crate) runner: Runner,
}

pub(crate) struct Dispatcher {
    plain: AppCall,
    /// The call that applies proxy headers, used only for requests that carry a forwarding
    /// header (so the rest pay nothing for `--proxy-headers`).
    forwarded: Option<AppCall>,
    spawner: TaskSpawner,
    #[cfg(PyPy)]
    pypy: Option<crate::asgi::pypy::Starter>,
    /// PyPy with the default runner: requests go through the cffi fast path
    /// (asgi/pypy/fast.rs), this dispatcher gets only what it leaves.
    #[cfg(PyPy)]
    fast: Option<&'static crate::asgi::pypy::fast::FastPath>,
    scope: ScopeFactory,
    ctx: Arc<LoopCtx>,
    wakeup: Arc<Wakeup>,
    /// The name of every task this dispatcher starts (spawn.rs `task_name`).
    task_name: String,
    /// `callback(client, method, path, http_version, status, bytes, seconds, logged)` per
    /// static response (`Core.on_static_served`): the metrics, and the access line when the
    /// core does not write it (`logged` False).
    served: OnceLock<Py<PyAny>>,
}

impl Dispatcher {
    pub(crate) fn new(
        py: Python<'_>,
        event_loop: &Bound<'_, PyAny>,
        plain: AppCall,
        forwarded: Option<AppCall>,
        (root_path, state): (&str, Option<Py<PyDict>>),
        ctx: Arc<LoopCtx>,
        wakeup: Arc<Wakeup>,
    ) -> PyResult<Self> {
        let has_factory = !event_loop.call_method0("get_task_factory")?.is_none();
        let task_name = task_name();
        #[cfg(PyPy)]
        let pypy = crate::asgi::pypy::Starter::for_loop(
            py,
            event_loop,
            has_factory,
            (root_path, state.as_ref()),
            &task_name,
        )?;
        #[cfg(PyPy)]
        let fast = match (&pypy, &plain.runner) {
            (Some(_), Runner::Python(runner))
                if runner
                    .bind(py)
                    .is(py.import("ferrocorn._asgi")?.getattr("run_asgi")?) =>
            {
                Some(crate::asgi::pypy::fast::FastPath::leak(
                    ctx.clone(),
                    wakeup.clone(),
                    forwarded.is_some(),
                ))
            }
            _ => None,
        };
        Ok(Dispatcher {
            plain,
            forwarded,
            spawner: TaskSpawner::for_loop(py, event_loop, has_factory, &task_name)?,
            #[cfg(PyPy)]
            pypy,
            #[cfg(PyPy)]
            fast,
            scope: ScopeFactory::new(py, root_path, state)?,
            ctx,
            wakeup,
            task_name,
            served: OnceLock::new(),
        })
    }

    /// The name of the tasks of the app calls (what a graceful shutdown waits for).
    pub(crate) fn task_name(&self) -> &str {
        &self.task_name
    }

    /// The eventfd callback: dispatch everything tokio queued since the last wake-up.
    pub(crate) fn drain(&self, py: Python<'_>) {
        let relay = &self.ctx.relay;
        self.wakeup.reset();
        relay.begin_batch();
        while let Some(event) = self.wakeup.pop() {
            relay.set_more_queued(!self.wakeup.is_empty());
            self.handle(py, event);
        }
        relay.end_batch();
    }

    fn handle(&self, py: Python<'_>, event: Event) {
        let result = match event {
            Event::Request(req) => self.dispatch(py, *req),
            Event::Receive(ex) => HttpProtocol::on_receive_event(py, &ex),
            Event::SendDone(ex) => HttpProtocol::on_send_done(py, &ex),
            Event::WebSocket(req) => self.dispatch_websocket(py, *req),
            Event::WsReceive(ex) => WebSocketProtocol::on_receive_event(py, &ex),
            Event::WsSendDone(ex) => WebSocketProtocol::on_send_done(py, &ex),
            Event::Warning(message) => log_warning(py, message.0.as_str()),
            Event::Debug(message) => log_debug(py, message.0.as_str()),
            Event::Served(served) => self.served(py, &served),
        };
        if let Err(err) = result {
            log_error(py, "Error while dispatching a request", Some(err));
        }
    }

    /// PyPy's fast path, when this dispatcher has one (`ferrocorn._pypy.fast`).
    #[cfg(PyPy)]
    pub(crate) fn fast(&self) -> Option<&'static crate::asgi::pypy::fast::FastPath> {
        self.fast
    }

    /// PyPy: the (start, app, runner) the fast path's Python drain starts requests with.
    #[cfg(PyPy)]
    pub(crate) fn fast_start(&self) -> Option<(&Py<PyAny>, &Py<PyAny>, &Py<PyAny>)> {
        match (&self.pypy, &self.plain.runner) {
            (Some(pypy), Runner::Python(runner)) => {
                Some((pypy.start_fn(), &self.plain.app, runner))
            }
            _ => None,
        }
    }

    /// PyPy: dispatch what the fast path's drain left (inside that drain's batch).
    #[cfg(PyPy)]
    pub(crate) fn drain_slow(&self, py: Python<'_>) {
        let Some(fast) = self.fast else {
            return;
        };
        let relay = &self.ctx.relay;
        let mut events = fast.take_slow();
        while let Some(event) = events.pop_front() {
            relay.set_more_queued(!events.is_empty() || !self.wakeup.is_empty());
            self.handle(py, event);
        }
    }

    /// Where static responses are told from now on (see `served`; set once).
    pub(crate) fn on_static_served(&self, callback: Py<PyAny>) {
        let _ = self.served.set(callback);
    }

    /// A static response: its access line (the core's, when it writes them) and the
    /// Python callback (metrics; the line when Python's logging writes it).
    fn served(&self, py: Python<'_>, served: &Served) -> PyResult<()> {
        let log = self.ctx.access_log.as_ref();
        if let Some(log) = log {
            access::record_served(log, served);
        }
        let Some(callback) = self.served.get() else {
            return Ok(());
        };
        let client = served.peer.as_ref().map(host_port).unwrap_or_default();
        let args = (
            client,
            served.method.as_str(),
            access::target_text(&served.uri),
            access::version_text(served.version),
            served.status,
            served.bytes,
            served.duration,
            log.is_some(),
        );
        callback.call1(py, args).map(drop)
    }

    /// The core's access log, when it writes one.
    pub(crate) fn access_log(&self) -> Option<&crate::asgi::access::AccessLog> {
        self.ctx.access_log.as_ref()
    }

    /// Drop what is still queued (the core is closing), with the GIL.
    pub(crate) fn discard_queued(&self) {
        while self.wakeup.pop().is_some() {}
        #[cfg(PyPy)]
        if let Some(fast) = self.fast {
            fast.close();
        }
    }

    fn dispatch(&self, py: Python<'_>, req: PendingRequest) -> PyResult<()> {
        let line = RequestLine::of(&req, self.ctx.access_log.as_ref());
        let proto = Bound::new(
            py,
            HttpProtocol::new(
                req.exchange.clone(),
                self.ctx.clone(),
                line,
                self.ctx.relay.join_batch(),
            ),
        )?;
        let call = self.pick(&req.head.headers);
        #[cfg(PyPy)]
        if let Some(started) = self
            .pypy_start(call)
            .and_then(|(pypy, pair)| pypy.start_packed(py, pair, &req, &proto))
        {
            if started.is_err() {
                proto.get().fail_internal();
            }
            return started;
        }
        let scope = self.scope.build(py, &req);
        let started = self.start(py, call, scope, proto.as_any());
        if started.is_err() {
            proto.get().fail_internal();
        }
        started
    }

    fn dispatch_websocket(&self, py: Python<'_>, req: PendingWebSocket) -> PyResult<()> {
        let proto = Bound::new(
            py,
            WebSocketProtocol::new(
                req.exchange.clone(),
                self.ctx.clone(),
                req.head.uri.clone(),
                req.conn.peer,
                req.head.version,
                access::request_fields(self.ctx.access_log.as_ref(), &req.head.headers),
            ),
        )?;
        let scope = self.scope.build_websocket(py, &req);
        let call = self.pick(&req.head.headers);
        let started = self.start(py, call, scope, proto.as_any());
        if started.is_err() {
            proto.get().fail_internal();
        }
        started
    }

    /// Create the app call inside its runner and start it as a task.
    fn start(
        &self,
        py: Python<'_>,
        call: &AppCall,
        scope: PyResult<Bound<'_, PyDict>>,
        proto: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let scope = scope?;
        #[cfg(PyPy)]
        if let Some((pypy, pair)) = self.pypy_start(call) {
            return pypy.start(py, pair, &scope, proto);
        }
        let body = call.runner.make(py, &call.app, scope, proto)?;
        self.spawner.spawn(py, body)
    }

    /// PyPy: the starter and the call's (app, runner), when the call starts through it (a
    /// Python runner on a loop without a task factory).
    #[cfg(PyPy)]
    #[allow(clippy::type_complexity)]
    fn pypy_start<'a>(
        &'a self,
        call: &'a AppCall,
    ) -> Option<(
        &'a crate::asgi::pypy::Starter,
        (&'a Py<PyAny>, &'a Py<PyAny>),
    )> {
        match (&self.pypy, &call.runner) {
            (Some(pypy), Runner::Python(runner)) => Some((pypy, (&call.app, runner))),
            _ => None,
        }
    }

    /// The plain call, or the proxy-headers one when the request carries a forwarding
    /// header.
    fn pick(&self, headers: &http::HeaderMap) -> &AppCall {
        match &self.forwarded {
            Some(call) if has_forwarding_header(headers) => call,
            _ => &self.plain,
        }
    }
}
