//! Cleartext HTTP/2 with prior knowledge (h2c): a client that speaks HTTP/2 without asking
//! starts with the fixed connection preface. Read the first bytes, compare, and hand them
//! back to whichever protocol hyper then runs.

use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::bridge::is_placeholder;
use crate::server::conn_state::ConnCtx;
use crate::server::http10::{HeadWriter, Next};
use crate::server::reorder::{OrderWriter, Step};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How much the first read may take. Most HTTP/1.1 request heads fit, so hyper usually gets
/// the whole first request from this buffer.
const FIRST_READ: usize = 4096;

/// An I/O stream that replays bytes already read from it, and on HTTP/1 connections
/// rewrites hyper's output: it puts marked response heads in the app's header order
/// (`server::reorder`), gives HTTP/1.0 requests' responses an `HTTP/1.1` status line
/// (`server::http10`) and writes the app's 103 Early Hints in order (`server::early_hints`),
/// once `rewrite_http1_output` switched that on.
pub(crate) struct ReplayRewrite<S> {
    prefix: Bytes,
    inner: S,
    rewriters: Option<Box<Http1Rewriters>>,
}

/// The HTTP/1 output rewriters' state: what the service announces, and the rewriters.
struct Http1Rewriters {
    ctx: Arc<ConnCtx>,
    http10: HeadWriter,
    order: OrderWriter,
}

impl<S> ReplayRewrite<S> {
    pub(crate) fn new(inner: S) -> Self {
        ReplayRewrite {
            prefix: Bytes::new(),
            inner,
            rewriters: None,
        }
    }

    /// A stream whose first bytes, `prefix`, were already read from `inner`.
    pub(crate) fn with_prefix(inner: S, prefix: Bytes) -> Self {
        ReplayRewrite {
            prefix,
            inner,
            rewriters: None,
        }
    }

    /// HTTP/1: rewrite the responses `ctx`'s service announces: HTTP/1.0 requests'
    /// (`server::http10`) and marked heads (`server::reorder`). Boxed: the room is taken
    /// only on HTTP/1 connections.
    pub(crate) fn rewrite_http1_output(&mut self, ctx: Arc<ConnCtx>) {
        self.rewriters = Some(Box::new(Http1Rewriters {
            ctx,
            http10: HeadWriter::default(),
            order: OrderWriter::default(),
        }));
    }

    /// Puts bytes read from the stream back in front of what is left to replay.
    pub(crate) fn unread(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.prefix = if self.prefix.is_empty() {
            bytes
        } else {
            let mut joined = BytesMut::with_capacity(bytes.len() + self.prefix.len());
            joined.extend_from_slice(&bytes);
            joined.extend_from_slice(&self.prefix);
            joined.freeze()
        };
    }

    pub(crate) fn has_replay(&self) -> bool {
        !self.prefix.is_empty()
    }
}

impl<S: AsyncRead + Unpin> ReplayRewrite<S> {
    /// Waits for the stream's next bytes, holding no buffer meanwhile, and keeps them to
    /// replay; false at the end of the stream. Cancel-safe: a read completes within one poll.
    pub(crate) async fn refill(&mut self) -> io::Result<bool> {
        let mut buf = BytesMut::new();
        let n = read_some(&mut self.inner, &mut buf).await?;
        self.unread(buf.freeze());
        Ok(n > 0)
    }
}

/// Reads until the bytes either diverge from the HTTP/2 preface or complete it. Returns the
/// stream (with those bytes to replay) and whether it is HTTP/2; None when the client closed
/// without sending anything.
pub(crate) async fn sniff<S: AsyncRead + Unpin>(
    mut io: S,
) -> io::Result<Option<(ReplayRewrite<S>, bool)>> {
    let mut buf = BytesMut::new();
    let http2 = loop {
        if read_some(&mut io, &mut buf).await? == 0 {
            if buf.is_empty() {
                return Ok(None);
            }
            break false; // A truncated head: hyper's HTTP/1 parser answers it.
        }
        let n = buf.len().min(PREFACE.len());
        if buf[..n] != PREFACE[..n] {
            break false;
        }
        if n == PREFACE.len() {
            break true;
        }
    };
    Ok(Some((ReplayRewrite::with_prefix(io, buf.freeze()), http2)))
}

/// One read into a buffer on the stack, appending what came to `buf`: a connection waiting
/// for its first bytes then holds no read buffer (each of thousands of idle pre-connections
/// kept 4 KiB), and what is kept for replay is only as large as what was read.
pub(crate) fn read_some<'a, S: AsyncRead + Unpin>(
    io: &'a mut S,
    buf: &'a mut BytesMut,
) -> impl Future<Output = io::Result<usize>> + 'a {
    std::future::poll_fn(move |cx| {
        let mut space = [MaybeUninit::<u8>::uninit(); FIRST_READ];
        let mut read = ReadBuf::uninit(&mut space);
        ready!(Pin::new(&mut *io).poll_read(cx, &mut read))?;
        buf.extend_from_slice(read.filled());
        Poll::Ready(Ok(read.filled().len()))
    })
}

impl<S: AsyncRead + Unpin> AsyncRead for ReplayRewrite<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                // An advanced-to-the-end `Bytes` still holds its allocation: let it go.
                this.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        match (&read, &this.rewriters) {
            // The client's end of stream, on an HTTP/1 connection: held while a complete
            // request still owes its response (see `ConnCtx::hold_eof`).
            (Poll::Ready(Ok(())), Some(rewriters))
                if buf.filled().len() == before && buf.remaining() > 0 =>
            {
                rewriters.ctx.hold_eof(cx).map(Ok)
            }
            _ => read,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ReplayRewrite<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(rewriters) = this.rewriters.as_mut() {
            if rewriters.is_rewriting() {
                return rewriters.poll_write(&mut this.inner, cx, buf);
            }
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(rewriters) = this.rewriters.as_mut() {
            if rewriters.is_rewriting() {
                // Followed: one slice at a time (a partial write hyper resumes).
                let buf = bufs
                    .iter()
                    .find(|b| !b.is_empty())
                    .map_or(&[][..], |b| &b[..]);
                return rewriters.poll_write(&mut this.inner, cx, buf);
            }
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(rewriters) = this.rewriters.as_mut() {
            ready!(rewriters.poll_output(&mut this.inner, cx))?;
            // hyper flushes only with its own buffer empty: earlier responses are out, so
            // the request in flight's `103 Early Hints` go now (server::early_hints).
            if rewriters.ctx.early_hints.is_pending() {
                let inner = &mut this.inner;
                ready!(rewriters
                    .ctx
                    .early_hints
                    .poll_write_with(|buf| Pin::new(&mut *inner).poll_write(cx, buf)))?;
            }
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(rewriters) = this.rewriters.as_mut() {
            ready!(rewriters.poll_output(&mut this.inner, cx))?;
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

impl Http1Rewriters {
    /// Whether hyper's bytes go through the rewriters (one or two relaxed loads per write).
    #[inline]
    fn is_rewriting(&self) -> bool {
        self.ctx.reordered.is_expected() || self.order.has_output() || self.ctx.http10.is_active()
    }

    /// hyper's `buf`: a reordered head's bytes go out first; a marked head is taken in.
    fn poll_write<S: AsyncWrite + Unpin>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_output(inner, cx))?;
        // A sendfile placeholder (`bridge::file_spans`) is a body, never read: its memory
        // has no read access.
        if buf.is_empty() || !self.ctx.reordered.is_expected() || is_placeholder(buf) {
            return poll_write_out(inner, cx, buf, &self.ctx, &mut self.http10);
        }
        match self.order.step(buf, &self.ctx.reordered) {
            Step::Plain(n) => poll_write_out(inner, cx, &buf[..n], &self.ctx, &mut self.http10),
            Step::Taken(n) => {
                // Taken: written as far as hyper knows. What the socket does not take now
                // goes before anything else (and on flush).
                if let Poll::Ready(Err(e)) = self.poll_output(inner, cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(n))
            }
        }
    }

    /// Writes the reordered head still pending; Ready when there is none left.
    fn poll_output<S: AsyncWrite + Unpin>(
        &mut self,
        inner: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        while self.order.has_output() {
            let out = self.order.output();
            match ready!(poll_write_out(inner, cx, out, &self.ctx, &mut self.http10))? {
                0 => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                n => self.order.sent(n),
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// Bytes in the order they go out, through the HTTP/1.0 status-line rewriter when it is on.
fn poll_write_out<S: AsyncWrite + Unpin>(
    inner: &mut S,
    cx: &mut Context<'_>,
    buf: &[u8],
    ctx: &ConnCtx,
    http10: &mut HeadWriter,
) -> Poll<io::Result<usize>> {
    if ctx.http10.is_active() {
        return poll_write_rewritten(inner, cx, buf, ctx, http10);
    }
    Pin::new(inner).poll_write(cx, buf)
}

/// A write on a connection whose HTTP/1.0 responses are rewritten: hyper's bytes, cut at each
/// head's and body's end, with the version byte of each such head written as `1`.
fn poll_write_rewritten<S: AsyncWrite + Unpin>(
    inner: &mut S,
    cx: &mut Context<'_>,
    buf: &[u8],
    ctx: &ConnCtx,
    writer: &mut HeadWriter,
) -> Poll<io::Result<usize>> {
    if buf.is_empty() {
        return Pin::new(inner).poll_write(cx, buf);
    }
    match writer.next(buf, &ctx.http10) {
        Next::Plain(n) => {
            let written = ready!(Pin::new(inner).poll_write(cx, &buf[..n]))?;
            writer.wrote(&buf[..written], &ctx.http10);
            Poll::Ready(Ok(written))
        }
        Next::Patch => {
            let written = ready!(Pin::new(inner).poll_write(cx, b"1"))?;
            if written == 1 {
                writer.wrote(&buf[..1], &ctx.http10);
            }
            Poll::Ready(Ok(written))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn detect(chunks: &[&[u8]]) -> Option<(Vec<u8>, bool)> {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        for chunk in chunks {
            client.write_all(chunk).await.unwrap();
        }
        drop(client);
        let (mut replay, http2) = sniff(server).await.unwrap()?;
        let mut all = Vec::new();
        replay.read_to_end(&mut all).await.unwrap();
        Some((all, http2))
    }

    #[tokio::test]
    async fn tells_http2_from_http1_and_replays_everything() {
        let rt = detect(&[b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"])
            .await
            .unwrap();
        assert!(rt.1);
        assert_eq!(rt.0.len(), PREFACE.len() + 2);
        let rt = detect(&[b"GET / HTTP/1.1\r\n\r\n"]).await.unwrap();
        assert_eq!(rt, (b"GET / HTTP/1.1\r\n\r\n".to_vec(), false));
        // "P" could start either; "PRI * HTTP/1" diverges late.
        let rt = detect(&[b"PRI * HTTP/1.1\r\n\r\n"]).await.unwrap();
        assert!(!rt.1);
        assert!(detect(&[]).await.is_none());
    }

    #[tokio::test]
    async fn refill_keeps_the_next_bytes_in_front_of_the_stream() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut replay = ReplayRewrite::new(server);
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        assert!(replay.refill().await.unwrap());
        assert!(replay.has_replay());
        replay.unread(Bytes::from_static(b">"));
        client.write_all(b"\r\n").await.unwrap();
        drop(client);
        let mut all = Vec::new();
        replay.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, b">GET / HTTP/1.1\r\n\r\n");
        assert!(!replay.refill().await.unwrap(), "end of stream");
    }

    #[tokio::test]
    async fn waits_for_a_split_preface() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(async move { sniff(server).await.unwrap().map(|(_, h2)| h2) });
        client.write_all(&PREFACE[..5]).await.unwrap();
        tokio::task::yield_now().await;
        client.write_all(&PREFACE[5..]).await.unwrap();
        assert_eq!(task.await.unwrap(), Some(true));
    }
}
