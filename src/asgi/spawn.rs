//! How one app call becomes an asyncio task: the runner it runs inside (`Runner`) and the
//! way the task is created (`TaskSpawner`).

use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(not(PyPy))]
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

#[cfg(not(PyPy))]
use crate::asgi::lazy_task::LazyTasks;
use crate::asgi::runner::AppRun;

/// What every request task's name is made of (`task_name`).
const TASK_NAME: &str = "ferrocorn.app";

/// The name of the tasks of a new core's app calls: "ferrocorn.app" for the process's first
/// core, "ferrocorn.app-<n>" for the n-th. A graceful shutdown finds the app calls still
/// running by this name (server.py), so each core's is its own: a server sharing its event
/// loop with another one waits for, and cancels, only its own.
pub(crate) fn task_name() -> String {
    static CORES: AtomicUsize = AtomicUsize::new(0);
    match CORES.fetch_add(1, Ordering::Relaxed) {
        0 => TASK_NAME.to_owned(),
        n => format!("{TASK_NAME}-{}", n + 1),
    }
}

/// What each app call runs inside, the *runner*: it awaits `app(scope, receive, send)` and
/// reports the outcome to the request's protocol object. The built-in one is `AppRun`
/// (Rust); the features that need Python around the call (access log, metrics, proxy
/// headers) pass a Python runner, called as `runner(app, scope, proto)`
/// (python/ferrocorn/_asgi.py `select_runner`).
pub(crate) enum Runner {
    Builtin,
    Python(Py<PyAny>),
}

impl Runner {
    pub(crate) fn new(py: Python<'_>, runner: Py<PyAny>) -> Self {
        if runner.bind(py).is(py.get_type::<AppRun>()) {
            Runner::Builtin
        } else {
            Runner::Python(runner)
        }
    }

    /// The coroutine-like object a task runs for this call.
    pub(crate) fn make<'py>(
        &self,
        py: Python<'py>,
        app: &Py<PyAny>,
        scope: Bound<'py, PyDict>,
        proto: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wrapper = match self {
            Runner::Builtin => None,
            #[cfg(PyPy)]
            Runner::Python(runner) => {
                return crate::asgi::pypy::python_runner(py, runner, app, scope, proto)
            }
            #[cfg(not(PyPy))]
            Runner::Python(runner) => Some(runner.clone_ref(py)),
        };
        let body = AppRun::new(app.clone_ref(py), wrapper, scope.into_any().unbind(), proto);
        Ok(Bound::new(py, body)?.into_any())
    }
}

/// `task.set_name(name)` on a task from a custom factory. Called directly rather than
/// through `create_task(coro, name=...)`, whose Python-level handling of the name cost each
/// request ~1,700 instructions (callgrind). A task type without a working `set_name` keeps
/// its own name: the request still runs, only a graceful shutdown does not wait for it.
fn name_task(task: &Bound<'_, PyAny>, name: &Bound<'_, PyString>) {
    let py = task.py();
    let _ = task.call_method1(pyo3::intern!(py, "set_name"), (name,));
}

/// The CPython versions whose `asyncio.Task` the lazy request task (lazy_task.rs) is known
/// to work with: their C `Task` can be allocated without `__init__` and initialised later,
/// and `_enter_task`/`_leave_task` keep the current task in a per-loop table. 3.14 changed
/// how tasks are tracked (per-thread lists, the current task in the thread state): it uses
/// `eager_start`, as do free-threaded builds (the "held elsewhere" check reads a reference
/// count).
#[cfg(not(any(PyPy, Py_GIL_DISABLED)))]
const LAZY_TASK_VERSIONS: [(u8, u8); 3] = [(3, 11), (3, 12), (3, 13)];

/// How a runner becomes a task: a lazily set-up task on CPython 3.11-3.13 (the first step
/// runs in the drain, and the `asyncio.Task` is set up only if the request waits: see
/// lazy_task.rs), `asyncio.Task` directly elsewhere (eagerly on Python 3.12+, so a handler
/// that never waits still finishes inside the drain), or a custom task factory through
/// `loop.create_task`. (PyPy starts most requests through `pypy::Starter` instead.)
pub(crate) enum TaskSpawner {
    /// `loop.create_task(coro)`, when the loop has a task factory, then `task.set_name`.
    CreateTask {
        create_task: Py<PyAny>,
        name: Py<PyString>,
    },
    /// `asyncio.Task(coro, **kwargs)`: the loop, and `eager_start` on 3.12+.
    Task {
        task_type: Py<PyAny>,
        kwargs: Py<PyDict>,
    },
    /// CPython 3.11-3.13: the first step runs now; `fallback` is for runners that are not
    /// `AppRun`.
    #[cfg(not(PyPy))]
    Lazy {
        tasks: Arc<LazyTasks>,
        fallback: Box<TaskSpawner>,
    },
}

impl TaskSpawner {
    /// The best way to start tasks named `name` on `event_loop`. `has_factory`: the loop has
    /// a custom task factory, which is then used.
    pub(crate) fn for_loop(
        py: Python<'_>,
        event_loop: &Bound<'_, PyAny>,
        has_factory: bool,
        name: &str,
    ) -> PyResult<Self> {
        let version = py.version_info();
        let version = (version.major, version.minor);
        let eager_start = version >= (3, 12);
        // `asyncio.Task(coro, loop=loop)` skips the loop's create_task wrapper (measurably
        // cheaper per request under uvloop); passing the loop spares the running-loop lookup,
        // which costs a getpid() syscall per task on CPython 3.11. A custom task factory
        // (tracing tools, apps embedding `Server.serve()`) is honoured on every Python: its
        // tasks come from `loop.create_task`, not eager unless the factory makes them so.
        // A name given spares the "Task-<n>" formatting asyncio does per task (1.27 -> 1.11
        // µs per asyncio.Task under uvloop, timeit); it also says what the task is, and it is
        // how a graceful shutdown finds the app calls still running (server.py), so the
        // tasks of a custom factory carry it too.
        let plain = if !has_factory {
            let kwargs = PyDict::new(py);
            kwargs.set_item("loop", event_loop)?;
            kwargs.set_item("name", name)?;
            if eager_start {
                kwargs.set_item("eager_start", true)?;
            }
            TaskSpawner::Task {
                task_type: py.import("asyncio")?.getattr("Task")?.unbind(),
                kwargs: kwargs.unbind(),
            }
        } else {
            TaskSpawner::CreateTask {
                create_task: event_loop.getattr("create_task")?.unbind(),
                name: PyString::new(py, name).unbind(),
            }
        };
        #[cfg(not(any(PyPy, Py_GIL_DISABLED)))]
        if LAZY_TASK_VERSIONS.contains(&version) && !has_factory {
            return Ok(TaskSpawner::Lazy {
                tasks: Arc::new(LazyTasks::new(py, event_loop, name)?),
                fallback: Box::new(plain),
            });
        }
        Ok(plain)
    }

    pub(crate) fn spawn(&self, py: Python<'_>, coro: Bound<'_, PyAny>) -> PyResult<()> {
        match self {
            TaskSpawner::CreateTask { create_task, name } => {
                let task = create_task.bind(py).call1((coro,))?;
                name_task(&task, name.bind(py));
                task
            }
            TaskSpawner::Task { task_type, kwargs } => {
                task_type.bind(py).call((coro,), Some(kwargs.bind(py)))?
            }
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
