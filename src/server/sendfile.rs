//! The innermost I/O of a TCP connection: where a placeholder slice (bridge/file_spans.rs)
//! that hyper asks to write becomes sendfile(2) from the file to the socket, on this tokio
//! thread, without the GIL and without the bytes passing through user space. Ordinary
//! slices are written as they were; a slice of the placeholder region that is no longer
//! registered fails the write, which aborts the connection, so placeholder addresses can
//! never turn into bytes on the wire.
//!
//! A write never mixes the two: ordinary slices before a placeholder go out first (a partial
//! write, which hyper resumes), then the placeholder on its own call. The socket is
//! non-blocking: sendfile's EAGAIN waits for write readiness like any write.

use std::io::{self, IoSlice};
use std::os::fd::RawFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::bridge::{file_spans_in_use, lookup_file_span, Lookup};

/// Bytes one sendfile call may move: a large file goes out in several calls, each a
/// partial write, so other connections on the thread get their turn in between.
#[cfg(all(target_os = "linux", not(feature = "portable")))]
const SENDFILE_MAX: usize = 2 << 20;

pub(crate) struct SendFile {
    inner: TcpStream,
}

impl SendFile {
    pub(crate) fn new(inner: TcpStream) -> Self {
        SendFile { inner }
    }

    /// Up to `len` bytes of `fd` from `offset`, straight to the socket.
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        fd: RawFd,
        offset: u64,
        len: usize,
    ) -> Poll<io::Result<usize>> {
        use std::os::fd::AsRawFd;
        let socket = self.inner.as_raw_fd();
        loop {
            std::task::ready!(self.inner.poll_write_ready(cx))?;
            let sent = self.inner.try_io(tokio::io::Interest::WRITABLE, || {
                let mut at = offset as libc::off_t;
                // SAFETY: both descriptors are open (the placeholder being written keeps
                // the file open); `at` is a valid off_t the call updates.
                let n = unsafe { libc::sendfile(socket, fd, &mut at, len.min(SENDFILE_MAX)) };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(n as usize)
            });
            return Poll::Ready(match sent {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => Err(err),
                // The file ends before the span: it shrank after the response started.
                Ok(0) => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file is shorter than the response body announced",
                )),
                Ok(n) => Ok(n),
            });
        }
    }

    /// No placeholder is made without Linux's sendfile (`file_spans::region`): one that
    /// reached here anyway is refused like a stale one, never written.
    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    fn poll_sendfile(
        &self,
        _cx: &mut Context<'_>,
        _fd: RawFd,
        _offset: u64,
        _len: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(stale()))
    }

    fn poll_placeholder(&self, cx: &mut Context<'_>, lookup: Lookup) -> Poll<io::Result<usize>> {
        match lookup {
            Lookup::Span { fd, offset, len } => self.poll_sendfile(cx, fd, offset, len),
            Lookup::Plain | Lookup::Stale => Poll::Ready(Err(stale())),
        }
    }
}

fn stale() -> io::Error {
    io::Error::other("a file placeholder reached the socket unregistered")
}

impl AsyncRead for SendFile {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendFile {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match lookup_file_span(buf) {
            Lookup::Plain => Pin::new(&mut this.inner).poll_write(cx, buf),
            other => this.poll_placeholder(cx, other),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !file_spans_in_use() {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        let mut plain = bufs.len();
        let mut first = Lookup::Plain;
        for (i, buf) in bufs.iter().enumerate() {
            if buf.is_empty() {
                continue;
            }
            let lookup = lookup_file_span(buf);
            if lookup != Lookup::Plain {
                plain = i;
                first = lookup;
                break;
            }
        }
        if plain > 0 || first == Lookup::Plain {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, &bufs[..plain]);
        }
        this.poll_placeholder(cx, first)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
