//! WebSocket echo servers for one question (issue 36 item 4): what does a 1 MiB message cost
//! over HTTP/2 when the session reads h2's `RecvStream` `Bytes` and hands `Bytes` to
//! `SendStream::send_data` directly, against hyper's upgraded HTTP/2 stream (what ferrocorn
//! runs today) and against HTTP/1.1 over the TCP socket?
//!
//!     ws_h2_direct --mode h1|hyper|direct --port P [--no-batch] [--no-app-copy] [--piece BYTES]
//!
//! * `h1`: an HTTP/1.1 upgrade (the fixed answer to ws_bench.py's fixed key), then the echo
//!   on the `TcpStream`.
//! * `hyper`: hyper 1.x's HTTP/2 server with extended CONNECT (RFC 8441), the echo on
//!   `hyper::upgrade::on`'s `Upgraded`, written in 256 KiB pieces as ferrocorn's `WsWriter`
//!   does on a transport without vectored writes (`--piece`).
//! * `direct`: `h2::server` with extended CONNECT, the echo on the stream's `RecvStream` /
//!   `SendStream` (capacity released as consumed, reserved before sending).
//!
//! Both HTTP/2 servers use ferrocorn's default settings (windows 1 MiB / 2 MiB, frames of
//! 16 KiB, 100 streams, header list 64 KiB) and its socket batching (`batch.rs`, a copy of
//! `server/h2_batch.rs`; `--no-batch` to leave it out). One current-thread tokio runtime,
//! mimalloc, as one ferrocorn worker.
//!
//! The echo does what the server does for a binary message: parse the frame's header,
//! unmask the payload into one contiguous owned buffer (the ASGI app gets one `bytes`), and
//! write the header and the payload back unmasked. No Python, but by default (not with
//! `--no-app-copy`) the copies ferrocorn makes for it: the unmasked payload into the app's
//! `bytes`, the answer out of the app's `bytes`. Over h2 directly the DATA pieces would be
//! copied (and unmasked) straight into the app's `bytes`, so there the first is the copy
//! out of h2's buffers. What the transports share cancels in a difference between them.

// ferrocorn's own socket batching under h2, the same source file, so that both HTTP/2
// servers here batch their socket I/O as ferrocorn does.
#[path = "../../../src/server/h2_batch.rs"]
mod batch;

// ferrocorn's WebSocket frame code (its masking is what the echo uses).
#[allow(dead_code)]
#[path = "../../../src/ws/frame.rs"]
mod frame;
use frame::apply_mask;

/// What `h2_batch.rs` takes from ferrocorn's `cork` module.
mod cork {
    pub(crate) fn no_wake() -> std::task::Waker {
        std::task::Waker::noop().clone()
    }
}

use std::future::poll_fn;
use std::io;

use bytes::{BufMut, Bytes};
use http::{Method, Request, Response, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// ferrocorn's `Http2Settings::default()`.
const STREAM_WINDOW: u32 = 1024 * 1024;
const CONNECTION_WINDOW: u32 = 2 * 1024 * 1024;
const MAX_FRAME: u32 = 16 * 1024;
const MAX_STREAMS: u32 = 100;
const MAX_HEADER_LIST: u32 = 64 * 1024;

/// Room in front of a payload for the server frame's header (at most 10 bytes).
const HEAD_ROOM: usize = 10;
/// ferrocorn's `WsReader` read chunk.
const READ_CHUNK: usize = 16 * 1024;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    H1,
    Hyper,
    Direct,
}

#[derive(Clone, Copy)]
struct Opts {
    mode: Mode,
    batch: bool,
    piece: usize,
    app_copy: bool,
}

fn main() -> io::Result<()> {
    let mut mode = None;
    let mut port = 0u16;
    let mut batch = true;
    let mut piece = 256 * 1024;
    let mut app_copy = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("h1") => Some(Mode::H1),
                    Some("hyper") => Some(Mode::Hyper),
                    Some("direct") => Some(Mode::Direct),
                    _ => None,
                }
            }
            "--port" => port = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            "--no-batch" => batch = false,
            "--no-app-copy" => app_copy = false,
            "--piece" => piece = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            _ => return Err(io::Error::other(format!("unknown argument {arg}"))),
        }
    }
    let Some(mode) = mode else {
        return Err(io::Error::other("--mode h1|hyper|direct"));
    };
    let opts = Opts {
        mode,
        batch,
        piece,
        app_copy,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        println!("listening on {}", listener.local_addr()?.port());
        loop {
            let (tcp, _) = listener.accept().await?;
            tcp.set_nodelay(true)?;
            tokio::spawn(async move {
                let _ = serve(tcp, opts).await;
            });
        }
    })
}

async fn serve(tcp: TcpStream, opts: Opts) -> io::Result<()> {
    match (opts.mode, opts.batch) {
        (Mode::H1, _) => serve_h1(tcp, opts).await,
        (Mode::Hyper, true) => serve_hyper(batch::Batched::new(tcp), opts).await,
        (Mode::Hyper, false) => serve_hyper(tcp, opts).await,
        (Mode::Direct, true) => serve_direct(batch::Batched::new(tcp), opts).await,
        (Mode::Direct, false) => serve_direct(tcp, opts).await,
    }
}

// ------------------------------------------------------------------------------ HTTP/1.1

async fn serve_h1(tcp: TcpStream, opts: Opts) -> io::Result<()> {
    let mut io = BufReader::with_capacity(READ_CHUNK, tcp);
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = io.read_u8().await?;
        head.push(byte);
        if head.len() > 8192 {
            return Err(io::Error::other("request head too long"));
        }
    }
    // ws_bench.py always sends the RFC 6455 sample key, whose accept value this is.
    io.write_all(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
    )
    .await?;
    io.flush().await?;
    echo_io(io, 0, opts.app_copy).await
}

// ------------------------------------------------------------------------------ hyper h2

async fn serve_hyper<S>(io: S, opts: Opts) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |mut req: Request<hyper::body::Incoming>| async move {
        let connect = req.method() == Method::CONNECT
            && req.extensions().get::<hyper::ext::Protocol>().is_some();
        if !connect {
            let mut refused = Response::new(http_body_util_empty());
            *refused.status_mut() = StatusCode::BAD_REQUEST;
            return Ok::<_, io::Error>(refused);
        }
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            if let Ok(upgraded) = on_upgrade.await {
                let io = BufReader::with_capacity(READ_CHUNK, TokioIo::new(upgraded));
                let _ = echo_io(io, opts.piece, opts.app_copy).await;
            }
        });
        Ok(Response::new(http_body_util_empty()))
    });
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .max_concurrent_streams(MAX_STREAMS)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .enable_connect_protocol();
    builder
        .serve_connection(TokioIo::new(io), service)
        .await
        .map_err(io::Error::other)
}

/// An empty response body (hyper's `Empty` lives in http-body-util; a `String` will do).
fn http_body_util_empty() -> String {
    String::new()
}

// ------------------------------------------------------------------------------ h2 direct

async fn serve_direct<S>(io: S, opts: Opts) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut connection = h2::server::Builder::new()
        .max_concurrent_streams(MAX_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .enable_connect_protocol()
        .handshake::<_, Bytes>(io)
        .await
        .map_err(io::Error::other)?;
    // This task drives the connection (its socket I/O happens in `accept`); each stream is a
    // task of its own, as hyper runs them.
    while let Some(accepted) = connection.accept().await {
        let (req, respond) = accepted.map_err(io::Error::other)?;
        tokio::spawn(async move {
            let _ = direct_stream(req, respond, opts.app_copy).await;
        });
    }
    Ok(())
}

async fn direct_stream(
    req: Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    app_copy: bool,
) -> Result<(), h2::Error> {
    let connect =
        req.method() == Method::CONNECT && req.extensions().get::<h2::ext::Protocol>().is_some();
    if !connect {
        let mut refused = Response::new(());
        *refused.status_mut() = StatusCode::BAD_REQUEST;
        respond.send_response(refused, true)?;
        return Ok(());
    }
    let mut send = respond.send_response(Response::new(()), false)?;
    let mut recv = Chunks {
        stream: req.into_body(),
        current: Bytes::new(),
    };
    loop {
        let mut head = [0u8; 14];
        if !recv.fill(&mut head[..2]).await? {
            return Ok(());
        }
        let (opcode, len, extra) = frame_len(&head);
        recv.fill(&mut head[2..2 + extra + 4]).await?;
        let (len, mask) = length_and_mask(&head, len, extra);
        if opcode == 0x8 {
            send.send_data(Bytes::new(), true)?;
            return Ok(());
        }
        // The payload into one owned buffer, unmasked piece by piece while each piece is hot
        // in the cache; h2's DATA payloads are `Bytes` slices of its read buffer.
        let mut message = Vec::with_capacity(HEAD_ROOM + len);
        message.resize(HEAD_ROOM, 0);
        while message.len() < HEAD_ROOM + len {
            let piece = recv.take(HEAD_ROOM + len - message.len()).await?;
            let start = message.len();
            message.extend_from_slice(&piece);
            apply_mask(&mut message[start..], mask, start - HEAD_ROOM);
        }
        // With `app_copy` (ferrocorn's case), `message` stands for the app's `bytes` (the
        // pieces would be copied straight into it) and the app's answer is copied out of it.
        let message = if app_copy {
            copy_out(&message[HEAD_ROOM..])
        } else {
            message
        };
        let mut out = Bytes::from(framed(message, opcode, len));
        // Handed to h2 as it grants capacity (its send buffer is bounded), no copy: each
        // piece is a slice of `out`.
        while !out.is_empty() {
            send.reserve_capacity(out.len());
            let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
                Some(granted) => granted?,
                None => return Ok(()),
            };
            if granted == 0 {
                continue;
            }
            send.send_data(out.split_to(granted.min(out.len())), false)?;
        }
    }
}

/// The stream's DATA payloads, consumed a piece at a time.
struct Chunks {
    stream: h2::RecvStream,
    current: Bytes,
}

impl Chunks {
    /// Up to `most` bytes; an error at the end of the stream.
    async fn take(&mut self, most: usize) -> Result<Bytes, h2::Error> {
        while self.current.is_empty() {
            match self.stream.data().await {
                Some(data) => {
                    let data = data?;
                    // Consumed as soon as taken: the window reopens while we copy.
                    let _ = self.stream.flow_control().release_capacity(data.len());
                    self.current = data;
                }
                None => return Err(h2::Error::from(h2::Reason::CANCEL)),
            }
        }
        Ok(self.current.split_to(most.min(self.current.len())))
    }

    /// Fills `out`; false when the stream ended before its first byte.
    async fn fill(&mut self, out: &mut [u8]) -> Result<bool, h2::Error> {
        let mut filled = 0;
        while filled < out.len() {
            let piece = match self.take(out.len() - filled).await {
                Ok(piece) => piece,
                Err(_) if filled == 0 => return Ok(false),
                Err(e) => return Err(e),
            };
            out[filled..filled + piece.len()].copy_from_slice(&piece);
            filled += piece.len();
        }
        Ok(true)
    }
}

// ------------------------------------------------------------------------------ the echo

/// The echo over a byte stream (TCP, or hyper's upgraded stream): the payload is read into
/// its buffer, unmasked in place, and written back from it with its header in front (in
/// `piece`-sized writes, 0 for one).
async fn echo_io<S>(mut io: BufReader<S>, piece: usize, app_copy: bool) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let mut head = [0u8; 14];
        match io.read_exact(&mut head[..2]).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let (opcode, len, extra) = frame_len(&head);
        io.read_exact(&mut head[2..2 + extra + 4]).await?;
        let (len, mask) = length_and_mask(&head, len, extra);
        if opcode == 0x8 {
            io.shutdown().await?;
            return Ok(());
        }
        let mut message = Vec::with_capacity(HEAD_ROOM + len);
        message.resize(HEAD_ROOM, 0);
        while message.len() < HEAD_ROOM + len {
            // Exactly the payload's room: reads never go past it (the BufReader reads the
            // socket straight into it once its own buffer is empty).
            let want = HEAD_ROOM + len - message.len();
            if io.read_buf(&mut (&mut message).limit(want)).await? == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
        apply_mask(&mut message[HEAD_ROOM..], mask, 0);
        let message = if app_copy {
            // ferrocorn copies the unmasked payload into the app's `bytes`, and the app's
            // answer out of its `bytes`.
            let app = std::hint::black_box(message[HEAD_ROOM..].to_vec());
            copy_out(&app)
        } else {
            message
        };
        let message = framed(message, opcode, len);
        let step = if piece == 0 { message.len() } else { piece };
        for part in message.chunks(step) {
            io.write_all(part).await?;
        }
        io.flush().await?;
    }
}

/// The app's answer copied into a buffer of ours, with room for the frame's header.
fn copy_out(app: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD_ROOM + app.len());
    out.resize(HEAD_ROOM, 0);
    out.extend_from_slice(app);
    out
}

/// The opcode, the 7-bit length and how many extended length bytes follow.
fn frame_len(head: &[u8; 14]) -> (u8, usize, usize) {
    let len = (head[1] & 0x7f) as usize;
    let extra = match len {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    (head[0] & 0x0f, len, extra)
}

/// The server frame: its header written into the room in front of the payload, the room
/// before it cut off (a shift of at most 10 bytes' start, no copy of the payload).
fn framed(mut message: Vec<u8>, opcode: u8, len: usize) -> Vec<u8> {
    let mut header = [0u8; HEAD_ROOM];
    header[0] = 0x80 | opcode;
    let header_len = if len < 126 {
        header[1] = len as u8;
        2
    } else if len < 1 << 16 {
        header[1] = 126;
        header[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        4
    } else {
        header[1] = 127;
        header[2..10].copy_from_slice(&(len as u64).to_be_bytes());
        10
    };
    let start = HEAD_ROOM - header_len;
    message[start..HEAD_ROOM].copy_from_slice(&header[..header_len]);
    if start > 0 {
        // A Vec cannot drop its front without moving: this only happens for payloads under
        // 64 KiB (header shorter than 10 bytes).
        message.drain(..start);
    }
    message
}

/// The payload length and masking key of a client frame whose whole header is in `head`
/// (`len`, `extra`: what `frame_len` read from its first two bytes).
fn length_and_mask(head: &[u8; 14], len: usize, extra: usize) -> (usize, [u8; 4]) {
    let len = match extra {
        0 => len,
        2 => u16::from_be_bytes([head[2], head[3]]) as usize,
        _ => u64::from_be_bytes(head[2..10].try_into().unwrap_or_default()) as usize,
    };
    let mask: [u8; 4] = head[2 + extra..6 + extra].try_into().unwrap_or_default();
    (len, mask)
}
