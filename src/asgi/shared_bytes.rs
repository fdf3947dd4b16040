//! A response body's `bytes` handed to tokio without copying it: the buffer of a Python
//! `bytes` object is immutable and lives as long as the object, so a `Bytes` can own a
//! reference to the object and point into it.
//!
//! Small bodies are still copied: the reference is released on an I/O thread, where PyO3
//! queues the decref for the next time the loop thread enters the extension — a lock and a
//! queue entry, which only pays off once the copy it saves is larger.

use bytes::Bytes;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Below this many bytes the body is copied (the copy is cheaper than the deferred decref).
const SHARE_FROM: usize = 4096;

struct PyBytesOwner {
    /// Keeps the buffer alive (and unchanged: `bytes` are immutable).
    _object: Py<PyBytes>,
    ptr: *const u8,
    len: usize,
}

// SAFETY: the pointer is into the buffer `_object` owns; the object is immutable and kept alive
// by this owner, so reading it from any thread, without the GIL, is sound. `Py<T>` itself is
// Send + Sync (a drop without the GIL is deferred by PyO3).
unsafe impl Send for PyBytesOwner {}
unsafe impl Sync for PyBytesOwner {}

impl AsRef<[u8]> for PyBytesOwner {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see the Send/Sync note: `ptr` and `len` describe the live, immutable buffer.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The body of `bytes`: shared when large, copied when small.
pub fn body_from_bytes(bytes: &Bound<'_, PyBytes>) -> Bytes {
    let data = bytes.as_bytes();
    if data.len() < SHARE_FROM {
        return Bytes::copy_from_slice(data);
    }
    Bytes::from_owner(PyBytesOwner {
        ptr: data.as_ptr(),
        len: data.len(),
        _object: bytes.clone().unbind(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_and_copied_bodies_read_the_same_bytes() {
        Python::initialize();
        Python::attach(|py| {
            let small = PyBytes::new(py, b"hello");
            assert_eq!(&body_from_bytes(&small)[..], b"hello");
            let large_data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
            let large = PyBytes::new(py, &large_data);
            let body = body_from_bytes(&large);
            assert_eq!(body.as_ptr(), large.as_bytes().as_ptr(), "not copied");
            drop(large);
            // The Bytes keeps the object alive on its own.
            assert_eq!(&body[..], &large_data[..]);
            let tail = body.slice(50_000..);
            drop(body);
            assert_eq!(&tail[..], &large_data[50_000..]);
        });
    }
}
