//! What the byte-stream adapters over a multiplexed request stream share (a WebSocket over
//! HTTP/2, `h2::ws_io`, and over HTTP/3, `h3::ws_io`): reading out of the DATA payload
//! received last, and gathering a vectored write into the one payload it is sent as.

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::ReadBuf;

/// Moves as much of `chunk` as `buf` has room for into it.
pub(crate) fn read_out(chunk: &mut Bytes, buf: &mut ReadBuf<'_>) {
    let n = chunk.len().min(buf.remaining());
    buf.put_slice(&chunk[..n]);
    chunk.advance(n);
}

/// The first `limit` bytes of `bufs`, in order, as one payload (a WebSocket frame's header
/// and payload in one DATA frame).
pub(crate) fn gather(bufs: &[std::io::IoSlice<'_>], limit: usize) -> Bytes {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut data = BytesMut::with_capacity(total.min(limit));
    for buf in bufs {
        let room = limit - data.len();
        if room == 0 {
            break;
        }
        data.extend_from_slice(&buf[..buf.len().min(room)]);
    }
    data.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::IoSlice;

    #[test]
    fn gather_takes_the_slices_in_order_up_to_the_limit() {
        let bufs = [IoSlice::new(b"head"), IoSlice::new(b"payload")];
        assert_eq!(gather(&bufs, 100), Bytes::from_static(b"headpayload"));
        assert_eq!(gather(&bufs, 6), Bytes::from_static(b"headpa"));
        assert_eq!(gather(&bufs, 4), Bytes::from_static(b"head"));
        assert!(gather(&[], 10).is_empty());
    }

    #[test]
    fn read_out_moves_what_fits_and_keeps_the_rest() {
        let mut chunk = Bytes::from_static(b"abcdef");
        let mut room = [0u8; 4];
        let mut buf = ReadBuf::new(&mut room);
        read_out(&mut chunk, &mut buf);
        assert_eq!(buf.filled(), b"abcd");
        assert_eq!(chunk, Bytes::from_static(b"ef"));
    }
}
