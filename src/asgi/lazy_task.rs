//! Eager first steps on CPython 3.11-3.13, with the `asyncio.Task` set up only when it is
//! needed.
//!
//! 3.11 cannot start a task eagerly, and there an `asyncio.Task` per request is the largest
//! single cost of a small response (its `__init__` schedules a loop callback and adds the
//! task to asyncio's `WeakSet` of all tasks through Python code; callgrind: ~8k of ~49k
//! instructions per plaintext request). 3.12 and 3.13 can (`eager_start=True`: a handler that
//! never waits finishes inside `__init__`), but a real task is still built, registered,
//! swapped in as the current task and torn down for each request: the placeholder below cost
//! ~2,000 fewer instructions per plaintext request on 3.13 (callgrind, 16 connections:
//! 54,197 -> 52,140).
//!
//! So each request gets a `RequestTask` (`_request_task.py`, an `asyncio.Task`
//! subclass) that is allocated but not initialised, and made the current task while the
//! drain runs the app's first step in a copy of the context, as a task would. If the app
//! finishes in that step and nothing kept the task, no `asyncio.Task.__init__` ever runs.
//! Otherwise the same object is initialised (`asyncio.Task.__init__`), so code that saw
//! `current_task()` during the first step (anyio's cancel scopes, sniffio) keeps seeing the
//! same task afterwards:
//! - the app waits (yields a future): the task is initialised with the body, whose first
//!   step hands over what the app yielded (`Handoff`);
//! - the app finished but something holds the task: it is initialised and finishes at its
//!   first step, so its done callbacks run;
//! - during the first step, any `RequestTask` method that needs a real task (callbacks,
//!   cancellation, `get_coro`, `await`, repr, ...) initialises it first (`promote`).

use std::cell::RefCell;
use std::sync::Arc;

use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use super::runner::{AppRun, Handoff};

/// What the loop thread needs to start and initialise request tasks.
pub(crate) struct LazyTasks {
    request_task: Py<PyType>,
    /// `asyncio.Task.__init__`, called on an already allocated `RequestTask`.
    task_init: Py<PyAny>,
    enter_task: Py<PyAny>,
    leave_task: Py<PyAny>,
    event_loop: Py<PyAny>,
    name: Py<PyString>,
}

/// The request whose first step is running (there is at most one per thread: steps do not
/// nest).
struct EagerStep {
    tasks: Arc<LazyTasks>,
    task: Py<PyAny>,
    body: Py<AppRun>,
    context: Py<PyAny>,
    initialised: bool,
}

thread_local! {
    static EAGER: RefCell<Option<EagerStep>> = const { RefCell::new(None) };
}

impl LazyTasks {
    pub(crate) fn new(py: Python<'_>, event_loop: &Bound<'_, PyAny>, name: &str) -> PyResult<Self> {
        let asyncio = py.import("asyncio")?;
        let tasks = py.import("asyncio.tasks")?;
        let request_task = py
            .import("ferrocorn._request_task")?
            .getattr("RequestTask")?
            .cast_into::<PyType>()?
            .unbind();
        Ok(LazyTasks {
            request_task,
            task_init: asyncio.getattr("Task")?.getattr("__init__")?.unbind(),
            enter_task: tasks.getattr("_enter_task")?.unbind(),
            leave_task: tasks.getattr("_leave_task")?.unbind(),
            event_loop: event_loop.clone().unbind(),
            name: PyString::new(py, name).unbind(),
        })
    }

    /// Runs `body`'s first step now, under a placeholder task, and initialises that task
    /// only if the request outlives the step or something holds the task.
    pub(crate) fn start(self: &Arc<Self>, py: Python<'_>, body: Bound<'_, AppRun>) -> PyResult<()> {
        let task = self.allocate(py)?;
        // SAFETY: returns a new reference to a copy of the current context (or NULL with
        // an exception set).
        let context = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyContext_CopyCurrent())? };
        let loop_ = self.event_loop.bind(py);
        // SAFETY: `context` is a live Context object, entered and exited on this thread.
        if unsafe { ffi::PyContext_Enter(context.as_ptr()) } != 0 {
            return Err(PyErr::fetch(py));
        }
        if let Err(err) = self.enter_task.bind(py).call1((loop_, &task)) {
            // SAFETY: entered above.
            unsafe { ffi::PyContext_Exit(context.as_ptr()) };
            // Another task is current (the drain was called from inside one): no eager
            // step; the task runs the body from the start.
            drop(err);
            return self.initialise(py, &task, body.as_any(), &context);
        }
        EAGER.with(|slot| {
            *slot.borrow_mut() = Some(EagerStep {
                tasks: self.clone(),
                task: task.clone().unbind(),
                body: body.clone().unbind(),
                context: context.clone().unbind(),
                initialised: false,
            })
        });
        let step = body.get().step_eagerly(py);
        let eager = EAGER.with(|slot| slot.borrow_mut().take());
        let left = self.leave_task.bind(py).call1((loop_, &task)).map(drop);
        // SAFETY: entered above, on this thread.
        unsafe { ffi::PyContext_Exit(context.as_ptr()) };
        let initialised = eager.is_some_and(|e| e.initialised);
        left?;
        match step? {
            Some(yielded) => {
                body.get().set_handoff(Handoff::Yielded(yielded));
                if !initialised {
                    self.initialise(py, &task, body.as_any(), &context)?;
                }
            }
            None => {
                // Held elsewhere: someone may await the task or wait for its callbacks.
                // SAFETY: reading the reference count of a live object.
                let held = unsafe { ffi::Py_REFCNT(task.as_ptr()) } > 1;
                if initialised || held {
                    body.get().set_handoff(Handoff::Finished);
                    if !initialised {
                        self.initialise(py, &task, body.as_any(), &context)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A `RequestTask` with its memory zeroed and no `__init__` run.
    fn allocate<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let tp = self.request_task.bind(py).as_type_ptr();
        // SAFETY: `tp` is a heap type whose tp_alloc is set (a Python subclass of
        // asyncio.Task); the result is a new reference or NULL with an exception set.
        unsafe {
            let alloc = (*tp).tp_alloc.unwrap_or(ffi::PyType_GenericAlloc);
            Bound::from_owned_ptr_or_err(py, alloc(tp, 0))
        }
    }

    /// `asyncio.Task.__init__(task, body, loop=..., name=..., context=context)`: the task
    /// is now a real one, registered and scheduled to take its first step.
    fn initialise(
        &self,
        py: Python<'_>,
        task: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        context: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let kwargs = PyDict::new(py);
        kwargs.set_item(pyo3::intern!(py, "loop"), self.event_loop.bind(py))?;
        kwargs.set_item(pyo3::intern!(py, "name"), self.name.bind(py))?;
        kwargs.set_item(pyo3::intern!(py, "context"), context)?;
        self.task_init
            .bind(py)
            .call((task, body), Some(&kwargs))
            .map(drop)
    }
}

/// Called by `RequestTask` methods that need a real task: initialises `task` if it is the
/// placeholder of the first step running now. Any other task is left alone.
#[pyfunction]
pub(crate) fn promote_request_task(py: Python<'_>, task: &Bound<'_, PyAny>) -> PyResult<()> {
    let pending = EAGER.with(|slot| match slot.borrow().as_ref() {
        Some(step) if !step.initialised && step.task.bind(py).is(task) => Some((
            step.tasks.clone(),
            step.body.clone_ref(py),
            step.context.clone_ref(py),
        )),
        _ => None,
    });
    let Some((tasks, body, context)) = pending else {
        return Ok(());
    };
    tasks
        .initialise(py, task, body.bind(py).as_any(), context.bind(py))
        .map_err(|err| {
            PyRuntimeError::new_err(format!("cannot set up the request's asyncio.Task: {err}"))
        })?;
    EAGER.with(|slot| {
        if let Some(step) = slot.borrow_mut().as_mut() {
            step.initialised = true;
        }
    });
    Ok(())
}
