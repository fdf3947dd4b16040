//! A response body read from a file (`http.response.pathsend`), as hyper asks for it.
//!
//! The file is opened and measured on the loop thread when the message arrives, so that a
//! missing or unreadable file fails `send()` before anything is sent. Its bytes are read one
//! `FILE_CHUNK` at a time and only when hyper wants the next frame: on the I/O thread when
//! the page cache holds the chunk (without ever waiting for the disk), else on tokio's
//! blocking pool. So a download holds one chunk in memory whatever the file size, and a slow
//! client slows the reading. The loop thread never reads it. A file that ends before the
//! size it had when opened (it shrank) aborts the response: the client never takes a
//! short body for a whole one.
//!
//! `http.response.zerocopysend` hands a descriptor instead of a path: the core sends a
//! duplicate of it (`FileSource::dup_span`), so the app may close its own as soon as
//! `send()` returns, and the duplicate closes when the body is dropped.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::bridge::file_spans;

/// Bytes read at a time. Each read is first tried on the calling (tokio) thread, from the
/// page cache only (`read_cached`); what the cache does not hold is read on the blocking
/// pool. A hop to the pool cost more than the read: a 50 KB pathsend ~9 µs of CPU and two
/// context switches per request on the pool's threads, a 5 MB one ~900 µs and 40 switches,
/// against ~33 µs per 256 KiB of copying from the cache on this thread.
pub(crate) const FILE_CHUNK: usize = 256 * 1024;

/// An open file and the part of it to send.
pub(crate) struct FileSource {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

/// Why a file cannot be sent (raised by `send()`, naming the path).
#[derive(Debug)]
pub(crate) enum OpenError {
    NotAbsolute,
    NotAFile,
    Io(io::Error),
}

/// Why a descriptor's span cannot be sent (`http.response.zerocopysend`; `send()` raises,
/// naming the key).
#[derive(Debug)]
pub(crate) enum SpanError {
    /// A pipe, socket, directory...: only regular files have a size to promise.
    NotAFile,
    /// `offset` lies past the end of the file (its size at the time).
    OffsetPastEnd {
        offset: u64,
        size: u64,
    },
    /// `offset + count` lies past the end of the file.
    CountPastEnd {
        offset: u64,
        count: u64,
        size: u64,
    },
    Io(io::Error),
}

impl FileSource {
    /// A span of the open file `fd` (the app's; it keeps it): `count` bytes from `offset`
    /// (None: the descriptor's current position), or to the end when `count` is None. The
    /// descriptor is duplicated (close-on-exec) and the span checked against the file's
    /// size now, so `send()` fails before anything goes out.
    pub(crate) fn dup_span(
        fd: RawFd,
        offset: Option<u64>,
        count: Option<u64>,
    ) -> Result<Self, SpanError> {
        // SAFETY: fcntl on any integer is sound; it fails with EBADF when fd is not open.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return Err(SpanError::Io(io::Error::last_os_error()));
        }
        // SAFETY: `dup` is a new descriptor that nothing else owns.
        let file = File::from(unsafe { OwnedFd::from_raw_fd(dup) });
        let meta = file.metadata().map_err(SpanError::Io)?;
        if !meta.is_file() {
            return Err(SpanError::NotAFile);
        }
        let size = meta.len();
        let offset = match offset {
            Some(offset) => offset,
            None => current_position(&file).map_err(SpanError::Io)?,
        };
        if offset > size {
            return Err(SpanError::OffsetPastEnd { offset, size });
        }
        let len = match count {
            None => size - offset,
            Some(count) if count > size - offset => {
                return Err(SpanError::CountPastEnd {
                    offset,
                    count,
                    size,
                })
            }
            Some(count) => count,
        };
        Ok(FileSource {
            file: Arc::new(file),
            offset,
            len,
        })
    }

    /// Opens `path` (absolute; a regular file) for the whole of it. Non-blocking open: a
    /// FIFO would otherwise block the loop thread until a writer appeared.
    pub(crate) fn open(path: &Path) -> Result<Self, OpenError> {
        if !path.is_absolute() {
            return Err(OpenError::NotAbsolute);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(OpenError::Io)?;
        let meta = file.metadata().map_err(OpenError::Io)?;
        if !meta.is_file() {
            return Err(OpenError::NotAFile);
        }
        Ok(FileSource {
            file: Arc::new(file),
            offset: 0,
            len: meta.len(),
        })
    }

    /// `len` bytes of an already open `file` from `offset` (the static route's ranges; the
    /// caller has checked that it is a regular file at least that long).
    pub(crate) fn open_range(file: File, offset: u64, len: u64) -> Self {
        FileSource {
            file: Arc::new(file),
            offset,
            len,
        }
    }

    /// Bytes that will be sent.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// The position a read on the descriptor would start at (shared by its duplicates).
fn current_position(file: &File) -> io::Result<u64> {
    // SAFETY: lseek on a descriptor we own; it moves nothing (SEEK_CUR by 0).
    let at = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_CUR) };
    if at < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(at as u64)
}

/// The file being sent: at most one read in flight.
pub(crate) struct FileBody {
    source: FileSource,
    reading: Option<JoinHandle<io::Result<Vec<u8>>>>,
    /// Spans go out as placeholders for sendfile(2) (bridge/file_spans.rs) rather than
    /// read: set only for a response the connection's I/O writes that way.
    by_placeholder: bool,
}

/// The file ended early or could not be read: the response is aborted.
pub(crate) struct FileFailed;

impl FileBody {
    pub(crate) fn new(source: FileSource) -> Self {
        FileBody {
            source,
            reading: None,
            by_placeholder: false,
        }
    }

    /// From now on, send spans as placeholders for sendfile(2) where they are long enough
    /// (server/service.rs decides: cleartext HTTP/1.1 with a Content-Length).
    pub(crate) fn send_by_placeholder(&mut self) {
        self.by_placeholder = true;
    }

    /// The next span as a placeholder, with the kernel asked to read it ahead (sendfile on
    /// a page-cache-cold file would otherwise wait for the disk on tokio's thread); None
    /// when it is too short or no placeholder is free.
    fn next_placeholder(&mut self) -> Option<Bytes> {
        let want = self.source.len.min(file_spans::SPAN_BYTES as u64) as usize;
        if want < file_spans::MIN_SPAN {
            return None;
        }
        let bytes = file_spans::placeholder(&self.source.file, self.source.offset, want)?;
        // Placeholders exist only where sendfile is used (Linux; file_spans::placeholder).
        #[cfg(all(target_os = "linux", not(feature = "portable")))]
        // SAFETY: advice on a descriptor the placeholder keeps open; it moves nothing.
        unsafe {
            libc::posix_fadvise(
                self.source.file.as_raw_fd(),
                self.source.offset as libc::off_t,
                want as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
        self.source.offset += want as u64;
        self.source.len -= want as u64;
        Some(bytes)
    }

    pub(crate) fn remaining(&self) -> u64 {
        self.source.len
    }

    pub(crate) fn is_end(&self) -> bool {
        self.source.len == 0 && self.reading.is_none()
    }

    /// A read's bytes become the next chunk; none at all means the file is shorter than
    /// when it was opened, which aborts the response.
    fn took(&mut self, data: Vec<u8>) -> Result<Bytes, FileFailed> {
        if data.is_empty() {
            return Err(FileFailed);
        }
        let n = data.len() as u64;
        self.source.offset += n;
        self.source.len -= n.min(self.source.len);
        Ok(Bytes::from(data))
    }

    /// The next chunk: a sendfile placeholder, or bytes read from the page cache on this
    /// thread or else on the blocking pool; None at the end.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, FileFailed>>> {
        loop {
            if let Some(reading) = &mut self.reading {
                let done = match Pin::new(reading).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                };
                self.reading = None;
                return Poll::Ready(Some(match done {
                    Ok(Ok(data)) => self.took(data),
                    _ => Err(FileFailed),
                }));
            }
            if self.source.len == 0 {
                return Poll::Ready(None);
            }
            if self.by_placeholder {
                if let Some(placeholder) = self.next_placeholder() {
                    return Poll::Ready(Some(Ok(placeholder)));
                }
            }
            let want = self.source.len.min(FILE_CHUNK as u64) as usize;
            if let Some(data) = read_cached(&self.source.file, self.source.offset, want) {
                return Poll::Ready(Some(self.took(data)));
            }
            let file = self.source.file.clone();
            let offset = self.source.offset;
            self.reading = Some(tokio::task::spawn_blocking(move || {
                read_at(&file, offset, want)
            }));
        }
    }
}

/// Up to `want` bytes at `offset` if the page cache holds them, without waiting for the disk:
/// `preadv2(RWF_NOWAIT)` (Linux 4.14+; buffered reads since 5.9). Empty at the end of the
/// file. None when the read would wait for the disk or the kernel or file system cannot
/// tell (EAGAIN, EOPNOTSUPP on older kernels, ENOSYS before 4.6...): the blocking pool reads
/// it then. The raw system call, not glibc's wrapper: that appeared in glibc 2.26, and a
/// wheel for glibc 2.17 (manylinux2014) would fail to load where it is missing.
#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn read_cached(file: &File, offset: u64, want: usize) -> Option<Vec<u8>> {
    // Not zeroed first: the kernel writes what is read, and only that much becomes the
    // vector's length (a 256 KiB memset cost about as much as a third of the read).
    let mut buf: Vec<u8> = Vec::with_capacity(want);
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: want,
    };
    // The kernel takes the offset as two longs, low then high; on 64-bit systems the low
    // one holds all of it (two half shifts, as one full-width shift would overflow).
    let half = usize::BITS / 2;
    let (low, high) = (
        offset as libc::c_ulong,
        (offset >> half >> half) as libc::c_ulong,
    );
    // SAFETY: one iovec over `buf`'s `want` bytes of capacity, which live and stay unmoved
    // across the call; the descriptor is open for as long as `file` is.
    let got = unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            file.as_raw_fd(),
            &iov as *const libc::iovec,
            1 as libc::c_int,
            low,
            high,
            libc::RWF_NOWAIT,
        )
    };
    let got = usize::try_from(got).ok()?.min(want);
    // SAFETY: the kernel initialised the first `got` bytes, within the capacity.
    unsafe { buf.set_len(got) };
    Some(buf)
}

/// Without preadv2 (macOS, the BSDs, the `portable` feature) nothing tells whether a read
/// would wait for the disk: every read goes to the blocking pool (`read_at`, pread).
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
fn read_cached(_file: &File, _offset: u64, _want: usize) -> Option<Vec<u8>> {
    None
}

/// Up to `want` bytes at `offset` (fewer only at the end of the file).
fn read_at(file: &File, offset: u64, want: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(bytes: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!(
            "ferrocorn-file-body-{}-{}",
            std::process::id(),
            bytes.len()
        ));
        let mut file = File::create(&path).expect("a temp file");
        file.write_all(bytes).expect("written");
        path
    }

    async fn drain(mut body: FileBody) -> Result<Vec<u8>, ()> {
        let mut out = Vec::new();
        loop {
            match std::future::poll_fn(|cx| body.poll_chunk(cx)).await {
                None => return Ok(out),
                Some(Ok(chunk)) => out.extend_from_slice(&chunk),
                Some(Err(FileFailed)) => return Err(()),
            }
        }
    }

    #[tokio::test]
    async fn sends_the_whole_file_in_chunks() {
        let data: Vec<u8> = (0..(FILE_CHUNK * 2 + 123))
            .map(|i| (i % 251) as u8)
            .collect();
        let path = temp_file(&data);
        let source = FileSource::open(&path).expect("opens");
        assert_eq!(source.len(), data.len() as u64);
        assert_eq!(drain(FileBody::new(source)).await, Ok(data));
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn a_file_that_shrinks_fails() {
        let path = temp_file(&[7u8; 1000]);
        let source = FileSource::open(&path).expect("opens");
        File::create(&path).expect("truncated");
        assert_eq!(drain(FileBody::new(source)).await, Err(()));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    fn a_small_cached_file_is_read_without_the_blocking_pool() {
        // No runtime here: a blocking-pool job would panic. The file was just written, so
        // the page cache holds it (RWF_NOWAIT reads of buffered files: Linux 5.9+).
        let data: Vec<u8> = (0..50_000).map(|i| (i % 253) as u8).collect();
        let path = temp_file(&data);
        let mut body = FileBody::new(FileSource::open(&path).expect("opens"));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match body.poll_chunk(&mut cx) {
            Poll::Ready(Some(Ok(chunk))) => assert_eq!(&chunk[..], &data[..]),
            _ => panic!("the cached file was not read at once"),
        }
        assert!(matches!(body.poll_chunk(&mut cx), Poll::Ready(None)));
        assert!(body.is_end());
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn a_span_of_a_duplicated_descriptor_outlives_the_original() {
        use std::io::{Seek, SeekFrom};
        use std::os::fd::AsRawFd;
        let data: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
        let path = temp_file(&data);
        let mut file = File::open(&path).expect("opens");
        let source = FileSource::dup_span(file.as_raw_fd(), Some(100), Some(300)).expect("span");
        file.seek(SeekFrom::Start(4000)).expect("seeks");
        let rest = FileSource::dup_span(file.as_raw_fd(), None, None).expect("to the end");
        drop(file);
        assert_eq!(
            drain(FileBody::new(source)).await,
            Ok(data[100..400].to_vec())
        );
        assert_eq!(drain(FileBody::new(rest)).await, Ok(data[4000..].to_vec()));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn spans_past_the_end_and_non_files_are_refused() {
        let path = temp_file(&[1u8; 10]);
        let file = File::open(&path).expect("opens");
        let fd = file.as_raw_fd();
        assert!(matches!(
            FileSource::dup_span(fd, Some(11), None),
            Err(SpanError::OffsetPastEnd {
                offset: 11,
                size: 10
            })
        ));
        assert!(matches!(
            FileSource::dup_span(fd, Some(4), Some(7)),
            Err(SpanError::CountPastEnd { count: 7, .. })
        ));
        assert!(matches!(FileSource::dup_span(fd, Some(10), None), Ok(s) if s.len() == 0));
        let (r, w) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        assert!(matches!(
            FileSource::dup_span(r.as_raw_fd(), None, None),
            Err(SpanError::NotAFile)
        ));
        drop((r, w));
        assert!(matches!(
            FileSource::dup_span(-1, None, None),
            Err(SpanError::Io(err)) if err.raw_os_error() == Some(libc::EBADF)
        ));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn relative_paths_directories_and_missing_files_are_refused() {
        assert!(matches!(
            FileSource::open(Path::new("relative/file")),
            Err(OpenError::NotAbsolute)
        ));
        assert!(matches!(
            FileSource::open(&std::env::temp_dir()),
            Err(OpenError::NotAFile)
        ));
        assert!(matches!(
            FileSource::open(Path::new("/nonexistent/ferrocorn/file")),
            Err(OpenError::Io(err)) if err.kind() == io::ErrorKind::NotFound
        ));
    }
}
