//! Placeholder bytes that stand for a span of a file, so that hyper can carry a file body
//! on cleartext HTTP/1.1 while the bytes themselves go from the page cache to the socket
//! with sendfile(2), never through user space.
//!
//! hyper owns a connection's writes and takes a body as `Bytes` frames; with its vectored
//! ("queue") write strategy it hands each frame, uncopied, to the I/O's
//! `poll_write_vectored`. A file span goes to hyper as a placeholder: a `Bytes` whose
//! addresses lie in a region reserved here and whose slot records the descriptor and the
//! offset. The region is mapped PROT_NONE: it holds no memory, and anything that would
//! read it (copy it into a buffer, encrypt it) faults instead of sending zeros. The
//! connection's innermost I/O (server/sendfile.rs) recognises a slice in the region and
//! sends the span with sendfile(2) in its place; a slice in the region whose slot is no
//! longer registered is an error that aborts the connection, never bytes sent. Only
//! responses the service knows to be written that way get placeholders (server/service.rs).

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;

/// The longest span one placeholder stands for (one slot of address space).
pub(crate) const SPAN_BYTES: usize = 8 << 20;

/// Placeholders alive at once, process-wide (8 GiB of address space, no memory). When all
/// are taken, file bodies are read as before.
const SLOTS: usize = 1024;

/// Spans shorter than this are read instead: a write that small may be held back and
/// copied by the write coalescing (server/cork.rs `MAX_CORKED`), and sendfile saves little.
pub(crate) const MIN_SPAN: usize = 64 * 1024 + 1;

struct Slot {
    fd: AtomicI32,
    offset: AtomicU64,
    len: AtomicUsize,
}

struct Region {
    base: usize,
    free: Mutex<Vec<u32>>,
    slots: Box<[Slot]>,
}

static REGION: OnceLock<Option<Region>> = OnceLock::new();

/// Without Linux's sendfile (macOS and the BSDs have another signature; the `portable`
/// feature) no placeholder is ever made: file bodies are read and written.
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
fn region() -> Option<&'static Region> {
    None
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn region() -> Option<&'static Region> {
    REGION
        .get_or_init(|| {
            let size = SLOTS * SPAN_BYTES;
            // SAFETY: a fresh anonymous mapping that nothing else uses; PROT_NONE and
            // MAP_NORESERVE reserve address space only.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if base == libc::MAP_FAILED {
                return None;
            }
            let slots = (0..SLOTS)
                .map(|_| Slot {
                    fd: AtomicI32::new(-1),
                    offset: AtomicU64::new(0),
                    len: AtomicUsize::new(0),
                })
                .collect();
            Some(Region {
                base: base as usize,
                free: Mutex::new((0..SLOTS as u32).rev().collect()),
                slots,
            })
        })
        .as_ref()
}

/// A placeholder's owner: its slot, and the file kept open while the placeholder lives.
struct Placeholder {
    region: &'static Region,
    slot: u32,
    len: usize,
    _file: Arc<File>,
}

impl AsRef<[u8]> for Placeholder {
    fn as_ref(&self) -> &[u8] {
        let start = self.region.base + self.slot as usize * SPAN_BYTES;
        // SAFETY: the range lies inside the reserved region (len <= SPAN_BYTES). Nothing
        // reads it: `Bytes` only moves the pointer, hyper only passes it on as an IoSlice,
        // and the I/O below replaces it with sendfile (a read would fault, PROT_NONE).
        unsafe { std::slice::from_raw_parts(start as *const u8, self.len) }
    }
}

impl Drop for Placeholder {
    fn drop(&mut self) {
        let slot = &self.region.slots[self.slot as usize];
        slot.fd.store(-1, Ordering::Release);
        let mut free = self.region.free.lock().unwrap_or_else(|p| p.into_inner());
        free.push(self.slot);
    }
}

/// A placeholder for `len` bytes (MIN_SPAN..=SPAN_BYTES) of `file` from `offset`; None when
/// the region could not be reserved or every slot is taken (the caller reads instead).
pub(crate) fn placeholder(file: &Arc<File>, offset: u64, len: usize) -> Option<Bytes> {
    debug_assert!((MIN_SPAN..=SPAN_BYTES).contains(&len));
    let region = region()?;
    let slot = region
        .free
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop()?;
    let entry = &region.slots[slot as usize];
    entry.offset.store(offset, Ordering::Relaxed);
    entry.len.store(len, Ordering::Relaxed);
    entry.fd.store(file.as_raw_fd(), Ordering::Release);
    Some(Bytes::from_owner(Placeholder {
        region,
        slot,
        len,
        _file: file.clone(),
    }))
}

/// What a slice the I/O is asked to write is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Ordinary bytes.
    Plain,
    /// A placeholder's bytes: send `len` bytes of `fd` from `offset` instead.
    Span { fd: RawFd, offset: u64, len: usize },
    /// In the region but not a live placeholder's range: must never be written.
    Stale,
}

/// Whether the region exists: before any placeholder was made, no slice can be one.
#[inline]
pub(crate) fn in_use() -> bool {
    matches!(REGION.get(), Some(Some(_)))
}

/// Whether `bytes` lies in the placeholder region (live or not): such bytes must never be
/// copied (server/cork.rs does not hold them).
#[inline]
pub(crate) fn is_placeholder(bytes: &[u8]) -> bool {
    lookup(bytes) != Lookup::Plain
}

/// What the slice `bytes` is.
#[inline]
pub(crate) fn lookup(bytes: &[u8]) -> Lookup {
    let Some(Some(region)) = REGION.get() else {
        return Lookup::Plain;
    };
    let at = bytes.as_ptr() as usize;
    let Some(into) = at.checked_sub(region.base) else {
        return Lookup::Plain;
    };
    if into >= SLOTS * SPAN_BYTES {
        return Lookup::Plain;
    }
    let slot = &region.slots[into / SPAN_BYTES];
    let within = into % SPAN_BYTES;
    let fd = slot.fd.load(Ordering::Acquire);
    if fd < 0 || within + bytes.len() > slot.len.load(Ordering::Relaxed) {
        return Lookup::Stale;
    }
    Lookup::Span {
        fd,
        offset: slot.offset.load(Ordering::Relaxed) + within as u64,
        len: bytes.len(),
    }
}

// Placeholders exist only with Linux's sendfile (`region`).
#[cfg(all(test, target_os = "linux", not(feature = "portable")))]
mod tests {
    use super::*;

    #[test]
    fn a_placeholder_maps_back_to_its_span_until_dropped() {
        let file = Arc::new(File::open("/dev/null").expect("opens"));
        let placeholder = placeholder(&file, 1000, MIN_SPAN + 10).expect("a slot");
        assert!(in_use());
        assert_eq!(
            lookup(&placeholder),
            Lookup::Span {
                fd: file.as_raw_fd(),
                offset: 1000,
                len: MIN_SPAN + 10
            }
        );
        // hyper advances through a frame it wrote in part.
        let rest = placeholder.slice(300..);
        assert_eq!(
            lookup(&rest),
            Lookup::Span {
                fd: file.as_raw_fd(),
                offset: 1300,
                len: MIN_SPAN - 290
            }
        );
        assert_eq!(lookup(b"ordinary bytes"), Lookup::Plain);
        let (start, len) = (placeholder.as_ptr() as usize, placeholder.len());
        drop((placeholder, rest));
        // SAFETY: a slice into the reserved region that is only compared, never read.
        let stale = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
        assert_eq!(lookup(stale), Lookup::Stale);
    }
}
