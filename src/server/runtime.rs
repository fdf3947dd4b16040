//! The tokio runtime that runs on background thread(s), never holding the GIL.

use std::io;
use std::thread::JoinHandle;

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

use crate::bridge::mark_io_thread;

pub(crate) struct IoRuntime {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl IoRuntime {
    /// `threads == 1` runs a current-thread runtime on one dedicated thread (no work-stealing
    /// overhead; the loop thread has the other core); more threads use the multi-thread one.
    /// `on_park` runs whenever a runtime thread is about to park (no task left to run).
    pub(crate) fn start(
        threads: usize,
        on_park: impl Fn() + Send + Sync + 'static,
    ) -> io::Result<Self> {
        let runtime = if threads <= 1 {
            Builder::new_current_thread()
                .enable_all()
                .on_thread_park(on_park)
                .build()?
        } else {
            Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("ferrocorn-io")
                .on_thread_start(mark_io_thread)
                .on_thread_park(on_park)
                .enable_all()
                .build()?
        };
        let handle = runtime.handle().clone();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ferrocorn-io".into())
            .spawn(move || {
                mark_io_thread();
                // Either a stop message or the sender being dropped ends the runtime.
                let _ = runtime.block_on(stop_rx);
                // Dropping the runtime cancels every remaining task (connections).
                drop(runtime);
            })?;
        Ok(IoRuntime {
            handle,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    pub(crate) fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stop the runtime and wait for its thread. Call without the GIL held.
    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        self.stop();
    }
}
