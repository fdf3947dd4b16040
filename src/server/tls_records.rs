//! Few TLS records per response: every write into rustls becomes at least one record (a
//! header, a tag, and for the reader a decryption each), and hyper's HTTP/1 writes arrive in
//! pieces when the write side rewrites them (`server::http10`'s status line, `server::reorder`'s
//! head): an HTTP/1.0 response went out as four records. This wrapper, over the TLS stream
//! of an HTTP/1 connection, gathers writes up to one record's worth and hands them to rustls
//! at hyper's flush, which hyper makes after each response and each streamed chunk.
//!
//! Once the connection stops being HTTP/1 request/response traffic (HTTP/2, a WebSocket
//! after the upgrade: `IoSignals::disable_corking`), writes pass straight through: their
//! writers frame and flush for themselves.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::cork::IoSignals;

/// A TLS record's most plaintext (RFC 8446 §5.1, RFC 5246 §6.2.1).
const RECORD: usize = 1 << 14;

pub(crate) struct Gathered<T> {
    inner: T,
    signals: Arc<IoSignals>,
    held: Vec<u8>,
    /// Bytes of `held` rustls has taken.
    written: usize,
}

impl<T> Gathered<T> {
    pub(crate) fn new(inner: T, signals: Arc<IoSignals>) -> Self {
        Gathered {
            inner,
            signals,
            held: Vec::new(),
            written: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> Gathered<T> {
    /// Hands what is held to rustls. Ready(Ok) once empty.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.held.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Gathered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Gathered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let through = this.signals.corking_disabled();
        if !through && this.held.len() + buf.len() <= RECORD {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        ready!(this.poll_drain(cx))?;
        if !through && buf.len() < RECORD {
            this.held.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        // Nothing kept between responses: an idle connection holds no buffer here.
        this.held = Vec::new();
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn pieces_go_out_as_one_write_at_the_flush() {
        let signals = Arc::new(IoSignals::default());
        let mut io = Gathered::new(Writes::default(), signals);
        for piece in [&b"HTTP/1."[..], b"1", b" 200 OK\r\n\r\n", b"body"] {
            io.write_all(piece).await.unwrap();
        }
        assert!(io.inner.0.is_empty());
        io.flush().await.unwrap();
        assert_eq!(io.inner.0, vec![b"HTTP/1.1 200 OK\r\n\r\nbody".to_vec()]);
    }

    #[tokio::test]
    async fn a_record_at_most_and_large_writes_pass() {
        let signals = Arc::new(IoSignals::default());
        let mut io = Gathered::new(Writes::default(), signals);
        io.write_all(&[b'a'; 100]).await.unwrap();
        io.write_all(&vec![b'b'; RECORD]).await.unwrap();
        io.flush().await.unwrap();
        let sizes: Vec<usize> = io.inner.0.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![100, RECORD]);
    }

    #[tokio::test]
    async fn nothing_is_held_once_corking_is_off() {
        let signals = Arc::new(IoSignals::default());
        signals.disable_corking();
        let (mut client, server) = tokio::io::duplex(64);
        let mut io = Gathered::new(server, signals);
        io.write_all(b"frame").await.unwrap();
        let mut buf = [0u8; 8];
        let n = client.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"frame");
    }
}
