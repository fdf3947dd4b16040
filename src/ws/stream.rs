//! Messages over the upgraded connection: `WsReader` turns client frames into messages
//! (unmasking, reassembly, UTF-8 checks, decompression, size limits) and `WsWriter` turns
//! messages into server frames (compression, one write per frame). Over a transport of owned
//! chunks (`WsTransport::takes_owned`: an HTTP/2 stream) a large binary message goes both
//! ways without a copy of ours: received as the chunks themselves (`MaskedPayload`), sent
//! as slices of the app's bytes.
//!
//! Neither owns the socket: the session passes it in, so one task can wait for a message
//! and, once the wait ends, write on the same socket. `WsReader::read` is cancel-safe (all
//! progress lives in the reader, the only await is a read into its buffer), which is what
//! lets the session race it against other events in `select!`.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::ws::deflate::{Deflater, Inflater};
use crate::ws::frame::{
    apply_mask, encode_header, parse_close, parse_header, FrameHeader, OpCode, Violation,
    MAX_SERVER_HEADER,
};
use crate::ws::utf8::Utf8Validator;

/// What the reader hands the session.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming {
    /// A text message; the bytes are valid UTF-8.
    Text(Bytes),
    Binary(Bytes),
    /// A large binary message as a transport of owned chunks delivered it, still masked
    /// (`WsReader::read_from`).
    BinaryMasked(MaskedPayload),
    Ping(Bytes),
    Pong(Bytes),
    /// The peer's close frame: its code and reason, None when it carried no code.
    Close(Option<(u16, String)>),
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// The peer broke the protocol: fail the connection with this close code.
    Violation(Violation),
    /// EOF or an I/O error: the connection is gone.
    Lost,
}

/// Smaller payloads are copied out of the read buffer, which then stays unshared and is
/// reused; larger ones are split off it without a copy.
const SPLIT_MIN: usize = 4096;
/// How much room a read gets when no large frame is pending.
const READ_CHUNK: usize = 16 * 1024;
/// The most room reserved for a frame on the word of its header alone.
const TRUSTED_RESERVE: usize = 1 << 20;

const INVALID_UTF8: Violation = Violation::invalid_data("invalid UTF-8 in a text message");

/// A binary message's payload as a transport that hands over owned chunks (an HTTP/2
/// stream's DATA payloads) delivered it: the chunks kept as they came, still masked, and
/// unmasked only as they are copied into the app's `bytes` (`unmask_into`). Over HTTP/2 that
/// copy is the only one: gathering the chunks into a buffer of ours first would be another
/// pass over the whole message.
#[derive(Debug, PartialEq, Eq)]
pub struct MaskedPayload {
    /// The payload's start, unmasked already (what the read buffer held when it began).
    head: Bytes,
    /// The rest, masked; the first at payload offset `head.len()`.
    chunks: Vec<Bytes>,
    mask: [u8; 4],
    len: usize,
}

impl MaskedPayload {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload, unmasked, into `out` (which is `len()` bytes long).
    pub fn unmask_into(&self, out: &mut [u8]) {
        let mut at = self.head.len();
        if let Some(dst) = out.get_mut(..at) {
            dst.copy_from_slice(&self.head);
        }
        for chunk in &self.chunks {
            let end = at + chunk.len();
            if let Some(dst) = out.get_mut(at..end) {
                dst.copy_from_slice(chunk);
                apply_mask(dst, self.mask, at);
            }
            at = end;
        }
    }
}

/// A binary message being gathered as owned chunks (see `MaskedPayload`).
struct Gathering {
    head: Bytes,
    chunks: Vec<Bytes>,
    /// Small pieces joined (still masked) until they make a chunk of `PIECE_MIN`: a client
    /// sending a message in tiny DATA frames must not make us keep a `Bytes` (and the
    /// read buffer it pins) per handful of bytes.
    small: BytesMut,
    mask: [u8; 4],
    len: usize,
    have: usize,
}

impl Gathering {
    fn push(&mut self, piece: Bytes) {
        if piece.len() < PIECE_MIN {
            self.small.extend_from_slice(&piece);
            if self.small.len() >= PIECE_MIN {
                self.chunks.push(self.small.split().freeze());
            }
            return;
        }
        if !self.small.is_empty() {
            self.chunks.push(self.small.split().freeze());
        }
        self.chunks.push(piece);
    }
}

/// Pieces smaller than this are copied together rather than kept as they came.
const PIECE_MIN: usize = 4096;

/// Binary frames at least this large are gathered as chunks over a transport that hands
/// them over owned; smaller ones are copied into the read buffer as before.
const GATHER_MIN: usize = 64 * 1024;

/// The frame whose payload is being received.
struct PartialFrame {
    header: FrameHeader,
    len: usize,
    /// Payload bytes (at the start of the read buffer) already unmasked.
    done: usize,
    /// Feed the payload to the UTF-8 validator as it arrives (uncompressed text).
    check_utf8: bool,
}

/// A fragmented message being reassembled.
struct Fragmented {
    text: bool,
    compressed: bool,
    /// The message so far (inflated, when compressed).
    data: Vec<u8>,
    /// Payload bytes received on the wire, bounded by `max_size` too.
    wire_len: usize,
    /// Empty non-final fragments so far: they cost a frame each and carry nothing.
    empty_fragments: u32,
}

/// Empty fragments one message may have before the connection is closed with 1008: a
/// client sending them endlessly would keep the server busy without a message ever ending
/// (no library sends more than one or two).
const MAX_EMPTY_FRAGMENTS: u32 = 1000;

pub struct WsReader {
    buf: BytesMut,
    max_size: usize,
    inflater: Option<Inflater>,
    frame: Option<PartialFrame>,
    message: Option<Fragmented>,
    utf8: Utf8Validator,
    gathering: Option<Gathering>,
}

impl WsReader {
    /// `inflater` is set when permessage-deflate was agreed.
    pub fn new(max_size: usize, inflater: Option<Inflater>) -> Self {
        WsReader {
            buf: BytesMut::with_capacity(READ_CHUNK),
            max_size,
            inflater,
            frame: None,
            message: None,
            utf8: Utf8Validator::default(),
            gathering: None,
        }
    }

    /// The next message or control frame from a session's transport: as owned chunks when
    /// it hands them over (`WsTransport::takes_owned`), else read into the buffer.
    pub(crate) async fn read_from<R: WsTransport>(
        &mut self,
        io: &mut R,
    ) -> Result<Incoming, ReadError> {
        if io.takes_owned() {
            self.read_chunks(io).await
        } else {
            self.read(io).await
        }
    }

    /// `read` over owned chunks: a large binary message's payload is kept as the chunks
    /// themselves (`MaskedPayload`), everything else goes through the buffer. Cancel-safe
    /// like `read`: a chunk, once taken, is filed before the next await.
    async fn read_chunks<R: WsTransport>(&mut self, io: &mut R) -> Result<Incoming, ReadError> {
        loop {
            match &self.gathering {
                Some(gathering) if gathering.have >= gathering.len => {
                    return Ok(self.gathered());
                }
                Some(_) => {}
                None => {
                    if let Some(incoming) = self.parse().map_err(ReadError::Violation)? {
                        return Ok(incoming);
                    }
                    if self.start_gathering() {
                        continue;
                    }
                }
            }
            let chunk = poll_fn(|cx| Pin::new(&mut *io).poll_read_chunk(cx)).await;
            let Ok(Some(mut chunk)) = chunk else {
                return Err(ReadError::Lost);
            };
            if let Some(gathering) = &mut self.gathering {
                let take = (gathering.len - gathering.have).min(chunk.len());
                gathering.push(chunk.split_to(take));
                gathering.have += take;
            }
            // What follows the gathered payload (the next frame's start), or a chunk of a
            // frame that is not gathered.
            if !chunk.is_empty() {
                self.buf.extend_from_slice(&chunk);
            }
        }
    }

    /// Whether the frame just begun is gathered as chunks: a whole (unfragmented,
    /// uncompressed) binary message of at least `GATHER_MIN` bytes, of which the buffer
    /// holds only payload, unmasked by `parse` already.
    fn start_gathering(&mut self) -> bool {
        let Some(frame) = &self.frame else {
            return false;
        };
        let whole_binary = frame.header.opcode == OpCode::Binary
            && frame.header.fin
            && !frame.header.rsv1
            && self.message.is_none();
        if !whole_binary || frame.len < GATHER_MIN || frame.done != self.buf.len() {
            return false;
        }
        let head = self.buf.split().freeze();
        self.gathering = Some(Gathering {
            have: head.len(),
            head,
            chunks: Vec::new(),
            small: BytesMut::new(),
            mask: frame.header.mask,
            len: frame.len,
        });
        self.frame = None;
        true
    }

    fn gathered(&mut self) -> Incoming {
        match self.gathering.take() {
            Some(mut g) => Incoming::BinaryMasked(MaskedPayload {
                head: g.head,
                chunks: {
                    if !g.small.is_empty() {
                        g.chunks.push(g.small.split().freeze());
                    }
                    g.chunks
                },
                mask: g.mask,
                len: g.len,
            }),
            None => Incoming::Binary(Bytes::new()),
        }
    }

    /// The next message or control frame.
    pub(crate) async fn read<R: AsyncRead + Unpin>(
        &mut self,
        io: &mut R,
    ) -> Result<Incoming, ReadError> {
        loop {
            if let Some(incoming) = self.parse().map_err(ReadError::Violation)? {
                return Ok(incoming);
            }
            // A large frame gets room for its whole payload at once (no regrowing and
            // copying), up to TRUSTED_RESERVE; beyond that the room grows with the bytes that
            // actually arrive, so a header alone cannot make us reserve --ws-max-size.
            let wanted = match &self.frame {
                Some(frame) => {
                    let remaining = frame.len.saturating_sub(self.buf.len());
                    remaining.min(TRUSTED_RESERVE.max(self.buf.len())).max(1)
                }
                None => READ_CHUNK,
            };
            // Room the buffer already has is used as it is: asking for more than the rest of
            // a frame needs (a whole READ_CHUNK for its last few bytes, say) would move the
            // frame received so far to a new allocation. Small transports' reads (an HTTP/2
            // stream hands over one DATA frame at a time) end a large frame that way.
            if self.buf.capacity() - self.buf.len() < wanted {
                self.buf.reserve(wanted.max(READ_CHUNK));
            }
            match io.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return Err(ReadError::Lost),
                Ok(_) => {}
            }
        }
    }

    /// Add bytes as if read from the socket (for tests and the fuzz target; `read` does
    /// this itself).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Whatever complete message or control frame the buffered bytes hold. After an error
    /// the reader must not be used again.
    pub fn next_buffered(&mut self) -> Result<Option<Incoming>, Violation> {
        self.parse()
    }

    fn parse(&mut self) -> Result<Option<Incoming>, Violation> {
        loop {
            let frame = match &mut self.frame {
                Some(frame) => frame,
                None => {
                    let Some((header, at)) = parse_header(&self.buf, self.inflater.is_some())?
                    else {
                        return Ok(None);
                    };
                    let frame = self.start_frame(header)?;
                    self.buf.advance(at);
                    self.frame.insert(frame)
                }
            };
            let available = frame.len.min(self.buf.len());
            if available > frame.done {
                let fresh = &mut self.buf[frame.done..available];
                apply_mask(fresh, frame.header.mask, frame.done);
                if frame.check_utf8 {
                    // Fail fast: invalid text is refused at the first impossible byte, even
                    // in the middle of a frame.
                    self.utf8.feed(fresh).map_err(|_| INVALID_UTF8)?;
                }
                frame.done = available;
            }
            if frame.done < frame.len {
                return Ok(None);
            }
            let (header, len) = (frame.header, frame.len);
            self.frame = None;
            if let Some(incoming) = self.finish_frame(header, len)? {
                return Ok(Some(incoming));
            }
        }
    }

    /// The checks that need the message state, once a header is in.
    fn start_frame(&mut self, header: FrameHeader) -> Result<PartialFrame, Violation> {
        let len = usize::try_from(header.len).map_err(|_| Violation::too_big())?;
        let check_utf8 = match header.opcode {
            OpCode::Close | OpCode::Ping | OpCode::Pong => false,
            OpCode::Text | OpCode::Binary => {
                if self.message.is_some() {
                    return Err(Violation::protocol(
                        "new data frame in the middle of a fragmented message",
                    ));
                }
                if len > self.max_size {
                    return Err(Violation::too_big());
                }
                let text = header.opcode == OpCode::Text;
                if !header.fin {
                    self.message = Some(Fragmented {
                        text,
                        compressed: header.rsv1,
                        data: Vec::new(),
                        wire_len: 0,
                        empty_fragments: 0,
                    });
                }
                self.utf8.reset();
                text && !header.rsv1
            }
            OpCode::Continuation => {
                let Some(message) = &self.message else {
                    return Err(Violation::protocol("continuation frame without a message"));
                };
                if len > self.max_size - message.wire_len {
                    return Err(Violation::too_big());
                }
                message.text && !message.compressed
            }
        };
        Ok(PartialFrame {
            header,
            len,
            done: 0,
            check_utf8,
        })
    }

    /// The frame's whole (unmasked) payload is at the start of the buffer.
    fn finish_frame(
        &mut self,
        header: FrameHeader,
        len: usize,
    ) -> Result<Option<Incoming>, Violation> {
        let text = header.opcode == OpCode::Text;
        match header.opcode {
            OpCode::Ping => Ok(Some(Incoming::Ping(self.take_payload(len)))),
            OpCode::Pong => Ok(Some(Incoming::Pong(self.take_payload(len)))),
            OpCode::Close => {
                let close = parse_close(&self.buf[..len]);
                self.buf.advance(len);
                close.map(|c| Some(Incoming::Close(c)))
            }
            OpCode::Text | OpCode::Binary if header.fin => {
                let data = if header.rsv1 {
                    let mut out = Vec::new();
                    let inflater = self.inflater.as_mut().ok_or(NOT_NEGOTIATED)?;
                    inflater.inflate(&self.buf[..len], &mut out, self.max_size)?;
                    self.buf.advance(len);
                    inflater.finish(&mut out, self.max_size)?;
                    if text {
                        self.utf8.feed(&out).map_err(|_| INVALID_UTF8)?;
                    }
                    Bytes::from(out)
                } else {
                    self.take_payload(len)
                };
                if text {
                    self.utf8.finish().map_err(|_| INVALID_UTF8)?;
                    Ok(Some(Incoming::Text(data)))
                } else {
                    Ok(Some(Incoming::Binary(data)))
                }
            }
            OpCode::Text | OpCode::Binary | OpCode::Continuation => {
                let Some(message) = self.message.as_mut() else {
                    return Err(Violation::protocol("continuation frame without a message"));
                };
                message.wire_len += len;
                if len == 0 && !header.fin {
                    message.empty_fragments += 1;
                    if message.empty_fragments > MAX_EMPTY_FRAGMENTS {
                        return Err(Violation::policy("too many empty fragments"));
                    }
                }
                let payload = &self.buf[..len];
                if message.compressed {
                    let inflater = self.inflater.as_mut().ok_or(NOT_NEGOTIATED)?;
                    let before = message.data.len();
                    inflater.inflate(payload, &mut message.data, self.max_size)?;
                    if header.fin {
                        inflater.finish(&mut message.data, self.max_size)?;
                    }
                    if message.text {
                        // Checked fragment by fragment, to fail as early as possible.
                        self.utf8
                            .feed(&message.data[before..])
                            .map_err(|_| INVALID_UTF8)?;
                    }
                } else {
                    // Already UTF-8-checked as it arrived.
                    message.data.extend_from_slice(payload);
                }
                self.buf.advance(len);
                if !header.fin {
                    return Ok(None);
                }
                let Some(message) = self.message.take() else {
                    return Ok(None);
                };
                let data = Bytes::from(message.data);
                if message.text {
                    self.utf8.finish().map_err(|_| INVALID_UTF8)?;
                    Ok(Some(Incoming::Text(data)))
                } else {
                    Ok(Some(Incoming::Binary(data)))
                }
            }
        }
    }

    fn take_payload(&mut self, len: usize) -> Bytes {
        if len >= SPLIT_MIN {
            self.buf.split_to(len).freeze()
        } else {
            let payload = Bytes::copy_from_slice(&self.buf[..len]);
            self.buf.advance(len);
            payload
        }
    }
}

/// RSV1 is refused by `parse_header` unless an inflater exists; this only keeps the code
/// free of unwraps.
const NOT_NEGOTIATED: Violation = Violation::protocol("RSV1 set without an extension");

/// Frames up to this size are copied next to their header and written in one call; larger
/// ones go out with a vectored write of header and payload.
const COPY_MAX: usize = 16 * 1024;
/// Scratch buffers larger than this are released after use rather than kept per connection.
const KEEP_MAX: usize = 64 * 1024;
/// On a transport without vectored writes, the most bytes of a large payload in one write:
/// a transport that copies each write into an allocation of its own then has that copy
/// still in cache when it sends it, and allocates (and faults in) no megabyte-sized buffer
/// per message.
const PIECE_MAX: usize = 256 * 1024;

/// The socket a WebSocket session runs on. A transport that frames owned `Bytes` itself (an
/// HTTP/2 stream: h2 sends a `Bytes` as DATA frames without copying it) takes a large
/// message's payload as it is, instead of as a slice that it would have to copy.
pub(crate) trait WsTransport: AsyncRead + AsyncWrite + Unpin {
    /// Whether `poll_write_owned` saves a copy over `poll_write`, and `poll_read_chunk`
    /// one over `poll_read`.
    fn takes_owned(&self) -> bool {
        false
    }

    /// The next piece received, owned; None at the end of the stream.
    fn poll_read_chunk(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<Option<Bytes>>> {
        let mut room = vec![0u8; READ_CHUNK];
        let mut buf = tokio::io::ReadBuf::new(&mut room);
        ready!(self.as_mut().poll_read(cx, &mut buf))?;
        let n = buf.filled().len();
        if n == 0 {
            return Poll::Ready(Ok(None));
        }
        room.truncate(n);
        Poll::Ready(Ok(Some(Bytes::from(room))))
    }

    /// Writes some of `data`, advancing it past what was taken.
    fn poll_write_owned(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &mut Bytes,
    ) -> Poll<io::Result<()>> {
        let n = ready!(self.as_mut().poll_write(cx, data))?;
        if n == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        data.advance(n);
        Poll::Ready(Ok(()))
    }
}

pub(crate) struct WsWriter {
    deflater: Option<Deflater>,
    compressed: Vec<u8>,
    scratch: Vec<u8>,
}

impl WsWriter {
    pub(crate) fn new(deflater: Option<Deflater>) -> Self {
        WsWriter {
            deflater,
            compressed: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Send one text or binary message as a single frame, compressed when agreed.
    pub(crate) async fn message<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        text: bool,
        payload: &[u8],
    ) -> io::Result<()> {
        let opcode = if text { OpCode::Text } else { OpCode::Binary };
        // RFC 7692 lets each message choose; we compress every one, small ones included:
        // with context takeover even short repetitive messages shrink, and some clients
        // (kosoku 0.1.0) mishandle uncompressed text on a compressed connection.
        if let Some(deflater) = &mut self.deflater {
            if deflater.compress(payload, &mut self.compressed).is_ok() {
                let result =
                    write_frame(io, &mut self.scratch, opcode, true, &self.compressed).await;
                if self.compressed.capacity() > KEEP_MAX {
                    self.compressed = Vec::new();
                }
                return result;
            }
        }
        write_frame(io, &mut self.scratch, opcode, false, payload).await
    }

    /// `message` for a payload the caller owns: over a transport that takes owned bytes
    /// (`WsTransport::takes_owned`) a large uncompressed one goes out without a copy, as
    /// its header and then the payload itself.
    pub(crate) async fn message_owned<W: WsTransport>(
        &mut self,
        io: &mut W,
        text: bool,
        payload: Bytes,
    ) -> io::Result<()> {
        if self.deflater.is_some() || payload.len() <= COPY_MAX || !io.takes_owned() {
            return self.message(io, text, &payload).await;
        }
        let opcode = if text { OpCode::Text } else { OpCode::Binary };
        let mut head = [0u8; MAX_SERVER_HEADER];
        let n = encode_header(&mut head, true, false, opcode, payload.len());
        write_owned(io, Bytes::copy_from_slice(&head[..n])).await?;
        write_owned(io, payload).await?;
        io.flush().await
    }

    /// Send a ping, pong or close frame (payload at most 125 bytes).
    pub(crate) async fn control<W: AsyncWrite + Unpin>(
        &mut self,
        io: &mut W,
        opcode: OpCode,
        payload: &[u8],
    ) -> io::Result<()> {
        write_frame(io, &mut self.scratch, opcode, false, payload).await
    }
}

async fn write_frame<W: AsyncWrite + Unpin>(
    io: &mut W,
    scratch: &mut Vec<u8>,
    opcode: OpCode,
    rsv1: bool,
    payload: &[u8],
) -> io::Result<()> {
    let mut head = [0u8; MAX_SERVER_HEADER];
    let n = encode_header(&mut head, true, rsv1, opcode, payload.len());
    if payload.len() <= COPY_MAX {
        scratch.clear();
        scratch.extend_from_slice(&head[..n]);
        scratch.extend_from_slice(payload);
        io.write_all(scratch).await?;
    } else if io.is_write_vectored() {
        write_all_vectored(io, &head[..n], payload).await?;
    } else {
        // A transport without vectored writes (an HTTP/2 stream) would send the header
        // alone, as a DATA frame and a socket write of its own: it goes with the payload's
        // first bytes instead.
        let (first, rest) = payload.split_at(COPY_MAX);
        scratch.clear();
        scratch.extend_from_slice(&head[..n]);
        scratch.extend_from_slice(first);
        io.write_all(scratch).await?;
        for piece in rest.chunks(PIECE_MAX) {
            io.write_all(piece).await?;
        }
    }
    io.flush().await
}

async fn write_owned<W: WsTransport>(io: &mut W, mut data: Bytes) -> io::Result<()> {
    while !data.is_empty() {
        poll_fn(|cx| Pin::new(&mut *io).poll_write_owned(cx, &mut data)).await?;
    }
    Ok(())
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    io: &mut W,
    mut head: &[u8],
    mut body: &[u8],
) -> io::Result<()> {
    while !head.is_empty() {
        let n = io
            .write_vectored(&[IoSlice::new(head), IoSlice::new(body)])
            .await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        if n < head.len() {
            head = &head[n..];
        } else {
            body = &body[n - head.len()..];
            head = &[];
        }
    }
    io.write_all(body).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::deflate::DeflateParams;

    /// A masked client frame.
    fn frame(fin: bool, rsv1: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let b0 = (u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode;
        crate::ws::frame::masked_client_frame(b0, payload, [0xA5, 0x01, 0x7E, 0x33])
    }

    fn reader(deflate: bool) -> WsReader {
        let inflater = deflate.then(|| Inflater::new(&DeflateParams::default()));
        WsReader::new(1 << 20, inflater)
    }

    /// Everything the reader makes of `wire`, fed `step` bytes at a time.
    fn read_all(
        reader: &mut WsReader,
        wire: &[u8],
        step: usize,
    ) -> Vec<Result<Incoming, Violation>> {
        let mut out = Vec::new();
        for piece in wire.chunks(step.max(1)) {
            reader.feed(piece);
            loop {
                match reader.next_buffered() {
                    Ok(Some(incoming)) => out.push(Ok(incoming)),
                    Ok(None) => break,
                    Err(v) => {
                        out.push(Err(v));
                        return out;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn reassembles_fragments_with_interleaved_control_frames() {
        let mut wire = frame(false, false, 1, "héllo ".as_bytes());
        wire.extend(frame(true, false, 9, b"ping!"));
        wire.extend(frame(false, false, 0, &[0xC3])); // half of "é"
        wire.extend(frame(true, false, 0, &[0xA9]));
        wire.extend(frame(true, false, 2, &[0u8; 5000]));
        for step in [1, 3, 64, 100_000] {
            let got = read_all(&mut reader(false), &wire, step);
            assert_eq!(
                got,
                vec![
                    Ok(Incoming::Ping(Bytes::from_static(b"ping!"))),
                    Ok(Incoming::Text(Bytes::from("héllo é"))),
                    Ok(Incoming::Binary(Bytes::from(vec![0u8; 5000]))),
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn invalid_utf8_fails_before_the_frame_ends() {
        let mut payload = b"valid start ".to_vec();
        payload.extend_from_slice(b"\xf4\x90\x80\x80");
        payload.extend_from_slice(&[b'x'; 1000]);
        let wire = frame(true, false, 1, &payload);
        let mut r = reader(false);
        // Only the header and the first part of the payload: already refused.
        let got = read_all(&mut r, &wire[..8 + 20], 5);
        assert_eq!(got, vec![Err(INVALID_UTF8)]);
        // A valid prefix split at the end of a message is refused at the end.
        let wire = frame(true, false, 1, b"abc\xe2\x82");
        assert_eq!(
            read_all(&mut reader(false), &wire, 100),
            vec![Err(INVALID_UTF8)]
        );
    }

    #[test]
    fn message_order_violations() {
        let cont = frame(true, false, 0, b"x");
        let got = read_all(&mut reader(false), &cont, 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1002));
        let mut wire = frame(false, false, 1, b"a");
        wire.extend(frame(true, false, 1, b"b"));
        let got = read_all(&mut reader(false), &wire, 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1002));
        let close1 = frame(true, false, 8, &[3]);
        let got = read_all(&mut reader(false), &close1, 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1002));
    }

    #[test]
    fn endless_empty_fragments_are_a_policy_violation() {
        let mut wire = frame(false, false, 1, b"");
        for _ in 0..MAX_EMPTY_FRAGMENTS - 1 {
            wire.extend(frame(false, false, 0, b""));
        }
        wire.extend(frame(true, false, 0, b"ok"));
        let got = read_all(&mut reader(false), &wire, 100);
        assert_eq!(got, vec![Ok(Incoming::Text(Bytes::from_static(b"ok")))]);
        let mut wire = frame(false, false, 1, b"");
        for _ in 0..MAX_EMPTY_FRAGMENTS {
            wire.extend(frame(false, false, 0, b""));
        }
        let got = read_all(&mut reader(false), &wire, 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1008));
    }

    #[test]
    fn size_limit_counts_fragments() {
        let mut r = WsReader::new(100, None);
        let got = read_all(&mut r, &frame(true, false, 2, &[1; 101]), 1000);
        assert_eq!(got, vec![Err(Violation::too_big())]);
        let mut r = WsReader::new(100, None);
        let mut wire = frame(false, false, 2, &[1; 60]);
        wire.extend(frame(true, false, 0, &[1; 41]));
        assert_eq!(
            read_all(&mut r, &wire, 1000),
            vec![Err(Violation::too_big())]
        );
        let mut r = WsReader::new(100, None);
        let mut wire = frame(false, false, 2, &[1; 60]);
        wire.extend(frame(true, false, 0, &[1; 40]));
        assert_eq!(
            read_all(&mut r, &wire, 1000),
            vec![Ok(Incoming::Binary(Bytes::from(vec![1; 100])))]
        );
    }

    #[test]
    fn compressed_messages_single_and_fragmented() {
        let mut deflater = Deflater::new(&DeflateParams::default()).unwrap();
        let text = "compressible text ".repeat(100);
        let mut compressed = Vec::new();
        deflater.compress(text.as_bytes(), &mut compressed).unwrap();
        let mut wire = frame(true, true, 1, &compressed);
        deflater.compress(text.as_bytes(), &mut compressed).unwrap();
        let (a, b) = compressed.split_at(compressed.len() / 2);
        wire.extend(frame(false, true, 1, a));
        wire.extend(frame(true, false, 0, b));
        wire.extend(frame(true, false, 1, b"plain"));
        for step in [1, 7, 100_000] {
            let got = read_all(&mut reader(true), &wire, step);
            assert_eq!(
                got,
                vec![
                    Ok(Incoming::Text(Bytes::from(text.clone()))),
                    Ok(Incoming::Text(Bytes::from(text.clone()))),
                    Ok(Incoming::Text(Bytes::from_static(b"plain"))),
                ]
            );
        }
        // RSV1 without the extension, or on a continuation.
        let got = read_all(&mut reader(false), &frame(true, true, 1, b"x"), 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1002));
        let mut wire = frame(false, true, 2, b"x");
        wire.extend(frame(true, true, 0, b"y"));
        let got = read_all(&mut reader(true), &wire, 100);
        assert_eq!(got[0].as_ref().map_err(|v| v.code), Err(1002));
    }

    #[test]
    fn compressed_bomb_is_1009_and_bad_text_1007() {
        let mut deflater = Deflater::new(&DeflateParams::default()).unwrap();
        let mut compressed = Vec::new();
        deflater
            .compress(&vec![b'a'; 2 << 20], &mut compressed)
            .unwrap();
        let got = read_all(
            &mut reader(true),
            &frame(true, true, 2, &compressed),
            1 << 20,
        );
        assert_eq!(got, vec![Err(Violation::too_big())]);
        let mut deflater = Deflater::new(&DeflateParams::default()).unwrap();
        deflater.compress(&[0xFF; 100], &mut compressed).unwrap();
        let got = read_all(
            &mut reader(true),
            &frame(true, true, 1, &compressed),
            1 << 20,
        );
        assert_eq!(got, vec![Err(INVALID_UTF8)]);
    }

    #[tokio::test]
    async fn a_header_alone_does_not_reserve_the_whole_frame() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let mut r = WsReader::new(64 << 20, None);
        let mut header = vec![0x82, 0x80 | 127];
        header.extend_from_slice(&(32u64 << 20).to_be_bytes());
        header.extend_from_slice(&[1, 2, 3, 4]);
        header.extend_from_slice(&[0; 100]);
        client.write_all(&header).await.unwrap();
        // Nothing more comes: the read stays pending, and dropping it (as select! does)
        // keeps what was parsed.
        let pending =
            tokio::time::timeout(std::time::Duration::from_millis(50), r.read(&mut server)).await;
        assert!(pending.is_err());
        assert_eq!(
            r.frame.as_ref().map(|f| (f.len, f.done)),
            Some((32 << 20, 100))
        );
        assert!(r.buf.capacity() <= TRUSTED_RESERVE + READ_CHUNK);
    }

    #[tokio::test]
    async fn reads_and_writes_over_a_socket() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        let big = vec![7u8; 100_000];
        let echo = tokio::spawn(async move {
            let mut r = WsReader::new(1 << 20, None);
            let mut w = WsWriter::new(None);
            while let Ok(m) = r.read(&mut server).await {
                match m {
                    Incoming::Binary(b) => w.message(&mut server, false, &b).await.unwrap(),
                    Incoming::Text(t) => w.message(&mut server, true, &t).await.unwrap(),
                    _ => break,
                }
            }
            r.read(&mut server).await
        });
        client
            .write_all(&frame(true, false, 2, &big))
            .await
            .unwrap();
        client
            .write_all(&frame(true, false, 1, b"hi"))
            .await
            .unwrap();
        let mut echoed = vec![0u8; 10 + big.len() + 4];
        client.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed[..10], &[0x82, 127, 0, 0, 0, 0, 0, 1, 0x86, 0xA0]);
        assert_eq!(&echoed[10..10 + big.len()], &big[..]);
        assert_eq!(&echoed[10 + big.len()..], &[0x81, 2, b'h', b'i']);
        drop(client);
        assert_eq!(echo.await.unwrap(), Err(ReadError::Lost));
    }

    /// Hands out its bytes `step` at a time and notes where in memory each piece landed.
    struct Trickle {
        wire: Vec<u8>,
        step: usize,
        landed: Vec<usize>,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let this = self.get_mut();
            if this.wire.is_empty() {
                // Nothing more for now (the test's timeout ends the wait).
                return std::task::Poll::Pending;
            }
            let n = this.step.min(this.wire.len()).min(buf.remaining());
            let start = buf.filled().len();
            buf.put_slice(&this.wire[..n]);
            this.landed.push(buf.filled()[start..].as_ptr() as usize);
            this.wire.drain(..n);
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_large_frame_read_in_small_pieces_stays_where_it_landed() {
        // An HTTP/2 stream hands over one 16 KiB DATA frame per read, the WebSocket header
        // in the first: the frame's last few bytes must not move what came before them to
        // a new allocation.
        let big = vec![9u8; 1 << 20];
        let step = 16 * 1024;
        let mut io = Trickle {
            wire: frame(true, false, 2, &big),
            step,
            landed: Vec::new(),
        };
        let mut r = WsReader::new(2 << 20, None);
        assert_eq!(
            r.read(&mut io).await,
            Ok(Incoming::Binary(Bytes::from(big)))
        );
        // The first piece came before the header was known; from the second on, the room
        // for the whole frame was there.
        let pieces = (14 + (1usize << 20)).div_ceil(step);
        assert_eq!(io.landed.len(), pieces);
        for (i, at) in io.landed.iter().enumerate().skip(1) {
            assert_eq!(
                *at,
                io.landed[1] + (i - 1) * step,
                "piece {i} landed elsewhere"
            );
        }
    }

    /// Records each write; no vectored writes.
    #[derive(Default)]
    struct PlainWrites(Vec<Vec<u8>>);

    impl AsyncWrite for PlainWrites {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            data: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            self.get_mut().0.push(data.to_vec());
            std::task::Poll::Ready(Ok(data.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl WsTransport for PlainWrites {}

    impl AsyncRead for PlainWrites {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            _buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A transport that works in owned bytes, as an HTTP/2 stream does: it hands over the
    /// given `chunks`, then the end, and takes writes `grant` bytes at a time, keeping what
    /// it was handed in `taken`.
    struct Owned {
        chunks: std::collections::VecDeque<Bytes>,
        grant: usize,
        taken: Vec<Bytes>,
    }

    impl Owned {
        fn reading(chunks: std::collections::VecDeque<Bytes>) -> Self {
            Owned {
                chunks,
                grant: usize::MAX,
                taken: Vec::new(),
            }
        }

        fn writing(grant: usize) -> Self {
            Owned {
                chunks: Default::default(),
                grant,
                taken: Vec::new(),
            }
        }
    }

    impl AsyncRead for Owned {
        /// Never used: the reader takes the chunks themselves.
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            _buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Err(io::ErrorKind::Unsupported.into()))
        }
    }

    impl AsyncWrite for Owned {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            data: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            self.get_mut().taken.push(Bytes::copy_from_slice(data));
            std::task::Poll::Ready(Ok(data.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    impl WsTransport for Owned {
        fn takes_owned(&self) -> bool {
            true
        }

        fn poll_read_chunk(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<Option<Bytes>>> {
            std::task::Poll::Ready(Ok(self.get_mut().chunks.pop_front()))
        }

        fn poll_write_owned(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
            data: &mut Bytes,
        ) -> std::task::Poll<io::Result<()>> {
            let this = self.get_mut();
            let piece = data.split_to(this.grant.min(data.len()));
            this.taken.push(piece);
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn unmasked(payload: &MaskedPayload) -> Vec<u8> {
        let mut out = vec![0u8; payload.len()];
        payload.unmask_into(&mut out);
        out
    }

    #[tokio::test]
    async fn over_owned_chunks_a_large_binary_message_is_kept_as_the_chunks() {
        let big: Vec<u8> = (0..200_003u32).map(|i| (i * 7) as u8).collect();
        let medium = vec![0x5Au8; 5_000];
        let wire = [
            frame(true, false, 0x2, &big),
            frame(true, false, 0x1, b"after"),
            frame(true, false, 0x2, &medium),
        ]
        .concat();
        // DATA-frame-sized chunks: the first holds the header and the payload's start, one
        // holds the payload's end and the next frames.
        let chunks = wire.chunks(16_384).map(Bytes::copy_from_slice).collect();
        let mut io = Owned::reading(chunks);
        let mut r = reader(false);
        match r.read_from(&mut io).await {
            Ok(Incoming::BinaryMasked(payload)) => {
                assert_eq!(payload.len(), big.len());
                assert_eq!(unmasked(&payload), big);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r.read_from(&mut io).await,
            Ok(Incoming::Text(Bytes::from_static(b"after")))
        );
        // Below GATHER_MIN: through the buffer, as before.
        assert_eq!(
            r.read_from(&mut io).await,
            Ok(Incoming::Binary(Bytes::from(medium)))
        );
        assert_eq!(r.read_from(&mut io).await, Err(ReadError::Lost));
    }

    #[tokio::test]
    async fn over_owned_chunks_tiny_pieces_are_joined() {
        let big: Vec<u8> = (0..100_000u32).map(|i| (i * 13) as u8).collect();
        let wire = frame(true, false, 0x2, &big);
        // The header and some payload, then the rest 7 bytes at a time, one large piece in
        // the middle.
        let mut chunks: std::collections::VecDeque<Bytes> = std::collections::VecDeque::new();
        chunks.push_back(Bytes::copy_from_slice(&wire[..100]));
        let mut at = 100;
        let mut large_sent = false;
        while at < wire.len() {
            let large = at >= 50_000 && !large_sent;
            large_sent |= large;
            let n = if large { 20_000 } else { 7 };
            let end = (at + n).min(wire.len());
            chunks.push_back(Bytes::copy_from_slice(&wire[at..end]));
            at = end;
        }
        let mut io = Owned::reading(chunks);
        let mut r = reader(false);
        match r.read_from(&mut io).await {
            Ok(Incoming::BinaryMasked(payload)) => {
                assert_eq!(unmasked(&payload), big);
                // Joined into pieces of at least PIECE_MIN (but the last, and the large one's
                // neighbours), not one per 7 bytes.
                assert!(
                    payload.chunks.len() < 100_000 / PIECE_MIN + 4,
                    "{}",
                    payload.chunks.len()
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn over_owned_chunks_text_and_fragments_still_go_through_the_buffer() {
        let text = "é".repeat(40_000);
        let part: Vec<u8> = vec![1u8; 70_000];
        let wire = [
            frame(true, false, 0x1, text.as_bytes()),
            frame(false, false, 0x2, &part),
            frame(true, false, 0x0, &part),
        ]
        .concat();
        let chunks = wire.chunks(10_000).map(Bytes::copy_from_slice).collect();
        let mut io = Owned::reading(chunks);
        let mut r = reader(false);
        assert_eq!(
            r.read_from(&mut io).await,
            Ok(Incoming::Text(Bytes::from(text)))
        );
        assert_eq!(
            r.read_from(&mut io).await,
            Ok(Incoming::Binary(Bytes::from([part.clone(), part].concat())))
        );
    }

    #[tokio::test]
    async fn an_owned_large_payload_goes_out_as_slices_of_itself() {
        let big = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<u8>>());
        let mut io = Owned::writing(30_000);
        let mut w = WsWriter::new(None);
        w.message_owned(&mut io, false, big.clone()).await.unwrap();
        // The header alone, then the payload in the pieces granted, none of them copied.
        assert_eq!(&io.taken[0][..], &[0x82, 127, 0, 0, 0, 0, 0, 1, 0x86, 0xA0]);
        let pieces = &io.taken[1..];
        assert_eq!(
            pieces.iter().map(Bytes::len).collect::<Vec<_>>(),
            [30_000, 30_000, 30_000, 10_000]
        );
        let mut at = 0;
        for piece in pieces {
            assert_eq!(piece.as_ptr(), big[at..].as_ptr());
            at += piece.len();
        }
    }

    #[tokio::test]
    async fn an_owned_small_or_compressed_payload_is_written_as_before() {
        let small = Bytes::from_static(b"hello");
        let mut io = Owned::writing(usize::MAX);
        let mut w = WsWriter::new(None);
        w.message_owned(&mut io, true, small).await.unwrap();
        assert_eq!(io.taken.len(), 1);
        assert_eq!(&io.taken[0][..], b"\x81\x05hello");
        // A transport that takes no owned bytes gets the same frame as `message` writes.
        let big = Bytes::from(vec![7u8; 50_000]);
        let mut plain = PlainWrites::default();
        w.message_owned(&mut plain, false, big.clone())
            .await
            .unwrap();
        let mut expected = PlainWrites::default();
        w.message(&mut expected, false, &big).await.unwrap();
        assert_eq!(plain.0, expected.0);
    }

    #[tokio::test]
    async fn without_vectored_writes_the_header_goes_with_the_first_bytes() {
        let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut io = PlainWrites::default();
        let mut w = WsWriter::new(None);
        w.message(&mut io, false, &big).await.unwrap();
        assert_eq!(io.0.len(), 2);
        assert_eq!(io.0[0].len(), 10 + COPY_MAX);
        assert_eq!(&io.0[0][..10], &[0x82, 127, 0, 0, 0, 0, 0, 1, 0x86, 0xA0]);
        assert_eq!([&io.0[0][10..], &io.0[1][..]].concat(), big);
    }

    #[tokio::test]
    async fn without_vectored_writes_a_large_payload_goes_in_bounded_pieces() {
        let big: Vec<u8> = (0..(COPY_MAX + 2 * PIECE_MAX + 5) as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        let mut io = PlainWrites::default();
        let mut w = WsWriter::new(None);
        w.message(&mut io, false, &big).await.unwrap();
        let sizes: Vec<usize> = io.0.iter().map(Vec::len).collect();
        assert_eq!(sizes, vec![10 + COPY_MAX, PIECE_MAX, PIECE_MAX, 5]);
        assert_eq!(io.0.concat()[10..], big[..]);
    }
}
