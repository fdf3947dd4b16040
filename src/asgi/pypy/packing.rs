//! The byte packings PyPy's fast path uses to cross cpyext in one object: the `http` scope's
//! per-request fields (unpacked by python/ferrocorn/_pypy/scope.py) and the headers of an
//! `http.response.start` (packed by python/ferrocorn/_pypy/http.py). Pure Rust.

use http::{HeaderMap, Version};
use percent_encoding::percent_decode;

use crate::bridge::{LocalAddr, PendingRequest};
use crate::http::header_order::{marked_map, still_grouped};
use crate::http::headers::{response_header_name, response_header_value};

/// The `http` scope's per-request parts, NUL-separated: method, HTTP version, raw path,
/// decoded path (empty when it equals the raw path), query, client host, client port (both
/// empty without a peer), server host (the socket path on a Unix socket), server port (empty
/// on a Unix socket), then header name/value pairs. Building the scope dict from Rust took
/// 2.9 µs under PyPy, unpacking one packed object in JIT-compiled Python 0.7 µs.
///
/// None for what the packing does not carry (TLS, HTTP/2 and `TE: trailers`, whose scopes
/// have more extensions) and for a field holding a NUL, which would shift the others: the dict
/// builder (`asgi::scope`) makes those.
pub(crate) fn pack_scope(req: &PendingRequest) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(128 + req.head.headers.len() * 48);
    pack_scope_into(req, &mut out).then_some(out)
}

/// `pack_scope` appended to `out`; false, with `out` as it was, when the scope cannot be
/// packed. (The PyPy fast path packs a whole drain's requests into one buffer.)
pub(crate) fn pack_scope_into(req: &PendingRequest, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    let packed = pack_fields(req, out).is_some();
    if !packed {
        out.truncate(start);
    }
    packed
}

fn pack_fields(req: &PendingRequest, out: &mut Vec<u8>) -> Option<()> {
    let head = &req.head;
    let conn = &req.conn;
    if conn.tls.is_some() || head.version == Version::HTTP_2 || req.trailers {
        return None;
    }
    let start = out.len();
    let raw_path = head.uri.path().as_bytes();
    let decoded = percent_decode(raw_path).decode_utf8_lossy();
    let decoded = decoded.as_bytes();
    let query = head.uri.query().unwrap_or("").as_bytes();
    let mut fields = Fields { out, count: 0 };
    fields.push(head.method.as_str().as_bytes());
    fields.push(http_version(head.version).as_bytes());
    fields.push(raw_path);
    fields.push(if decoded == raw_path { b"" } else { decoded });
    fields.push(query);
    match conn.peer {
        Some(peer) => {
            fields.push(conn.peer_host.as_bytes());
            fields.push_port(peer.port());
        }
        None => {
            fields.push(b"");
            fields.push(b"");
        }
    }
    match &conn.local {
        LocalAddr::Tcp(local) => {
            fields.push(conn.local_host.as_bytes());
            fields.push_port(local.port());
        }
        LocalAddr::Unix(path) => {
            fields.push(path.as_bytes());
            fields.push(b"");
        }
    }
    for (name, value) in head.headers.iter() {
        fields.push(name.as_str().as_bytes());
        fields.push(value.as_bytes());
    }
    let count = fields.count;
    out.pop(); // the last field's separator
               // One pass over the whole packing instead of one per field: a NUL inside any field (a
               // decoded `%00` in the path; the parsers refuse it everywhere else) would shift the
               // fields after it, so the packing then does not carry this request.
    (memchr::memchr_iter(0, &out[start..]).count() + 1 == count).then_some(())
}

/// Fields appended to a packing, each followed by its separator, and counted.
struct Fields<'a> {
    out: &'a mut Vec<u8>,
    count: usize,
}

impl Fields<'_> {
    fn push(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
        self.out.push(0);
        self.count += 1;
    }

    /// A port in decimal, without the `String` that `to_string` would allocate.
    fn push_port(&mut self, port: u16) {
        let mut digits = [0u8; 5];
        let mut at = digits.len();
        let mut rest = port;
        loop {
            at -= 1;
            digits[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }
}

fn http_version(version: Version) -> &'static str {
    match version {
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

/// Headers packed as `count` pairs `name\0value\0name\0value`. None if the packing does not
/// check out (a NUL inside a name or value makes more fields than `2 * count`) or a header
/// is invalid: the caller falls back to the message itself, whose parse names the fault.
pub(crate) fn unpack_headers(packed: &[u8], count: usize) -> Option<HeaderMap> {
    let mut map = HeaderMap::with_capacity(count + 2);
    if count == 0 {
        return packed.is_empty().then_some(map);
    }
    let mut fields = packed.split(|&b| b == 0);
    let mut grouped = true;
    for _ in 0..count {
        let raw_name = fields.next()?;
        let name = response_header_name(raw_name).ok()?;
        let value = response_header_value(fields.next()?).ok()?;
        if map.append(name, value) && grouped {
            // A repeated name (made again rather than every name cloned for this look).
            let name = response_header_name(raw_name).ok()?;
            grouped = still_grouped(&map, &name, true);
        }
    }
    if fields.next().is_some() {
        return None;
    }
    if !grouped {
        // Rare: the app interleaved names; walked again (all valid now) for the order.
        let mut fields = packed.split(|&b| b == 0);
        let pairs = (0..count)
            .map(|_| {
                let name = response_header_name(fields.next()?).ok()?;
                let value = response_header_value(fields.next()?).ok()?;
                Some((name, value))
            })
            .collect::<Option<Vec<_>>>()?;
        return Some(marked_map(pairs));
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use super::*;
    use crate::bridge::ConnInfo;

    fn request(target: &str, headers: &[(&str, &[u8])], local: LocalAddr) -> PendingRequest {
        let mut builder = http::Request::builder().method("GET").uri(target);
        for (name, value) in headers {
            builder = builder.header(*name, http::HeaderValue::from_bytes(value).unwrap());
        }
        let (head, ()) = builder.body(()).unwrap().into_parts();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        PendingRequest::for_test(head, ConnInfo::new(Some(peer), local))
    }

    fn tcp() -> LocalAddr {
        LocalAddr::Tcp("127.0.0.1:8000".parse().unwrap())
    }

    fn fields(packed: &[u8]) -> Vec<&[u8]> {
        packed.split(|&b| b == 0).collect()
    }

    #[test]
    fn packs_the_fields_in_order() {
        let req = request("/a%20b?x=1", &[("host", b"h"), ("x-a", b"1")], tcp());
        let packed = pack_scope(&req).expect("packable");
        let expected: Vec<&[u8]> = vec![
            b"GET",
            b"1.1",
            b"/a%20b",
            b"/a b",
            b"x=1",
            b"127.0.0.1",
            b"40000",
            b"127.0.0.1",
            b"8000",
            b"host",
            b"h",
            b"x-a",
            b"1",
        ];
        assert_eq!(fields(&packed), expected);
    }

    #[test]
    fn an_undecoded_path_is_left_empty_and_a_unix_socket_has_no_port() {
        let req = request("/plain", &[], LocalAddr::Unix(Arc::from("/tmp/s.sock")));
        let packed = pack_scope(&req).expect("packable");
        let f = fields(&packed);
        assert_eq!(f[3], b"");
        assert_eq!(&f[7..9], [&b"/tmp/s.sock"[..], b""]);
        assert_eq!(f.len(), 9);
    }

    #[test]
    fn a_nul_after_decoding_is_not_packed() {
        let req = request("/a%00b", &[], tcp());
        assert!(pack_scope(&req).is_none());
    }

    #[test]
    fn unpacks_pairs_in_order() {
        let map = unpack_headers(
            b"content-type\0text/plain\0set-cookie\0a=1\0Set-Cookie\0b=2",
            3,
        )
        .expect("valid packing");
        assert_eq!(map.len(), 3);
        assert_eq!(map["content-type"], "text/plain");
        let cookies: Vec<_> = map.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
    }

    #[test]
    fn empty_packing_is_no_headers() {
        assert_eq!(unpack_headers(b"", 0).map(|m| m.len()), Some(0));
        // Fields where none were announced, or an empty name, are refused.
        assert!(unpack_headers(b"x\0y", 0).is_none());
        assert!(unpack_headers(b"", 1).is_none());
        // An empty value is a valid header.
        assert_eq!(unpack_headers(b"x-empty\0", 1).map(|m| m.len()), Some(1));
    }

    #[test]
    fn a_nul_inside_a_field_is_refused_not_realigned() {
        // ("a", "x\0b") and ("c", "d") packed: five fields for two pairs.
        assert!(unpack_headers(b"a\0x\0b\0c\0d", 2).is_none());
        // ("a", "x\0b") alone: three fields for one pair.
        assert!(unpack_headers(b"a\0x\0b", 1).is_none());
        // Too few fields.
        assert!(unpack_headers(b"a", 1).is_none());
    }

    #[test]
    fn invalid_names_and_values_are_refused() {
        assert!(unpack_headers(b"bad name\0v", 1).is_none());
        assert!(unpack_headers(b"x\0a\r\nSet-Cookie: y", 1).is_none());
    }
}
