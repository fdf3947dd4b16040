//! Parsing a PROXY protocol header (v1: one text line; v2: a binary block), bounded: v1 is
//! at most 107 bytes, v2 at most 16 + 65535. The parser only looks at the bytes given and
//! says how long the header is: the bytes after it belong to TLS or HTTP.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which headers `--proxy-protocol` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Versions {
    V1,
    V2,
    /// Either, or none at all (the connection is then served as it is).
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// More bytes are needed to decide.
    Incomplete,
    /// A header of `len` bytes. `addresses` is (client, server); None keeps the socket's own
    /// (v1 UNKNOWN, v2 LOCAL, and families without IP addresses).
    Header {
        len: usize,
        addresses: Option<(SocketAddr, SocketAddr)>,
    },
    /// No header (`Versions::Any` only): the bytes are the connection's own.
    Absent,
    /// What is wrong, for the debug line.
    Invalid(&'static str),
}

const V1_PREFIX: &[u8] = b"PROXY ";
/// The longest v1 line, CRLF included (the specification's bound).
const V1_MAX: usize = 107;
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
const V2_FIXED: usize = 16;

pub(crate) fn parse(buf: &[u8], versions: Versions) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    if versions != Versions::V2 && starts_like(buf, V1_PREFIX) {
        return if buf.len() < V1_PREFIX.len() {
            Parsed::Incomplete
        } else {
            parse_v1(buf)
        };
    }
    if versions != Versions::V1 && starts_like(buf, V2_SIGNATURE) {
        return if buf.len() < V2_SIGNATURE.len() {
            Parsed::Incomplete
        } else {
            parse_v2(buf)
        };
    }
    match versions {
        Versions::Any => Parsed::Absent,
        Versions::V1 => Parsed::Invalid("no PROXY v1 header"),
        Versions::V2 => Parsed::Invalid("no PROXY v2 header"),
    }
}

/// Whether `buf` and `signature` agree on their common length.
fn starts_like(buf: &[u8], signature: &[u8]) -> bool {
    let n = buf.len().min(signature.len());
    buf[..n] == signature[..n]
}

/// `PROXY TCP4 192.0.2.1 192.0.2.2 56324 443\r\n`, `PROXY TCP6 ...`, `PROXY UNKNOWN ...\r\n`.
fn parse_v1(buf: &[u8]) -> Parsed {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Parsed::Invalid("a v1 header longer than 107 bytes")
        } else {
            Parsed::Incomplete
        };
    };
    if newline == 0 || window[newline - 1] != b'\r' {
        return Parsed::Invalid("a v1 header not ending in CRLF");
    }
    let len = newline + 1;
    let Ok(line) = std::str::from_utf8(&window[V1_PREFIX.len()..newline - 1]) else {
        return Parsed::Invalid("a v1 header that is not ASCII");
    };
    let mut fields = line.split(' ');
    let family = fields.next().unwrap_or("");
    if family == "UNKNOWN" {
        // Whatever follows is to be ignored.
        return Parsed::Header {
            len,
            addresses: None,
        };
    }
    let want_v6 = match family {
        "TCP4" => false,
        "TCP6" => true,
        _ => return Parsed::Invalid("a v1 header with an unknown protocol"),
    };
    let fields: Vec<&str> = fields.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Parsed::Invalid("a v1 header without exactly two addresses and two ports");
    };
    let (Some(src), Some(dst)) = (v1_address(src, want_v6), v1_address(dst, want_v6)) else {
        return Parsed::Invalid("a v1 header with an invalid address");
    };
    let (Some(sport), Some(dport)) = (v1_port(sport), v1_port(dport)) else {
        return Parsed::Invalid("a v1 header with an invalid port");
    };
    Parsed::Header {
        len,
        addresses: Some((SocketAddr::new(src, sport), SocketAddr::new(dst, dport))),
    }
}

fn v1_address(text: &str, v6: bool) -> Option<IpAddr> {
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// Decimal digits only (`u16::from_str` would take a sign), no leading zero.
fn v1_port(text: &str) -> Option<u16> {
    let digits_only =
        !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    if !digits_only || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// The 16-byte fixed part (signature, version and command, family, length), the addresses,
/// then TLVs, which are skipped.
fn parse_v2(buf: &[u8]) -> Parsed {
    if buf.len() < V2_FIXED {
        return Parsed::Incomplete;
    }
    let version_command = buf[12];
    if version_command >> 4 != 2 {
        return Parsed::Invalid("a v2 header of an unknown version");
    }
    let local = match version_command & 0x0f {
        0 => true,
        1 => false,
        _ => return Parsed::Invalid("a v2 header with an unknown command"),
    };
    let family = buf[13];
    let len = V2_FIXED + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if buf.len() < len {
        return Parsed::Incomplete;
    }
    let block = &buf[V2_FIXED..len];
    let transport = family & 0x0f;
    if transport > 2 {
        return Parsed::Invalid("a v2 header with an unknown transport");
    }
    let addresses = match family >> 4 {
        0 | 3 => None, // UNSPEC, UNIX: no IP addresses to take
        1 => {
            let Some(a) = block.get(..12) else {
                return Parsed::Invalid("a v2 IPv4 header too short for its addresses");
            };
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]));
            let port = |at: usize| u16::from_be_bytes([a[at], a[at + 1]]);
            Some((
                SocketAddr::new(ip(0), port(8)),
                SocketAddr::new(ip(4), port(10)),
            ))
        }
        2 => {
            let Some(a) = block.get(..36) else {
                return Parsed::Invalid("a v2 IPv6 header too short for its addresses");
            };
            let ip = |at: usize| {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&a[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(octets))
            };
            let port = |at: usize| u16::from_be_bytes([a[at], a[at + 1]]);
            Some((
                SocketAddr::new(ip(0), port(32)),
                SocketAddr::new(ip(16), port(34)),
            ))
        }
        _ => return Parsed::Invalid("a v2 header with an unknown address family"),
    };
    // LOCAL: the proxy's own connection (a health check); UNSPEC transport: no addresses.
    let addresses = addresses.filter(|_| !local && transport != 0);
    Parsed::Header { len, addresses }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(src: &str, dst: &str) -> Option<(SocketAddr, SocketAddr)> {
        Some((src.parse().unwrap(), dst.parse().unwrap()))
    }

    fn header(buf: &[u8], versions: Versions) -> (usize, Option<(SocketAddr, SocketAddr)>) {
        match parse(buf, versions) {
            Parsed::Header { len, addresses } => (len, addresses),
            other => panic!("{other:?}"),
        }
    }

    fn v2(command: u8, family: u8, block: &[u8]) -> Vec<u8> {
        let mut out = V2_SIGNATURE.to_vec();
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&(block.len() as u16).to_be_bytes());
        out.extend_from_slice(block);
        out
    }

    #[test]
    fn v1_tcp4_tcp6_and_unknown() {
        let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\nGET /";
        assert_eq!(
            header(line, Versions::V1),
            (line.len() - 5, addrs("192.0.2.1:56324", "198.51.100.2:443"))
        );
        let line = b"PROXY TCP6 2001:db8::1 ::1 1 65535\r\n";
        assert_eq!(
            header(line, Versions::Any),
            (line.len(), addrs("[2001:db8::1]:1", "[::1]:65535"))
        );
        let line = b"PROXY UNKNOWN ffff::1 whatever\r\n";
        assert_eq!(header(line, Versions::V1), (line.len(), None));
        assert_eq!(header(b"PROXY UNKNOWN\r\n", Versions::V1), (15, None));
    }

    #[test]
    fn v1_waits_for_its_line_within_the_bound() {
        for n in 1..40 {
            let line = b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n";
            assert_eq!(
                parse(&line[..n.min(line.len() - 1)], Versions::V1),
                Parsed::Incomplete
            );
        }
        let mut long = b"PROXY UNKNOWN ".to_vec();
        long.resize(V1_MAX, b'x');
        assert!(matches!(parse(&long, Versions::V1), Parsed::Invalid(_)));
        long.truncate(V1_MAX - 1);
        assert_eq!(parse(&long, Versions::V1), Parsed::Incomplete);
        long.truncate(V1_MAX - 2);
        long.extend_from_slice(b"\r\n");
        assert_eq!(header(&long, Versions::V1), (V1_MAX, None));
    }

    #[test]
    fn v1_rejects_malformed_lines() {
        for bad in [
            &b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n"[..],
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n",
            b"PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n",
            b"PROXY TCP4 ::1 ::1 1 2\r\n",
            b"PROXY TCP6 1.2.3.4 1.2.3.4 1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n",
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
            b"PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n",
            b"PROXY \xff\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            assert!(
                matches!(parse(bad, Versions::V1), Parsed::Invalid(_)),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse(b"PROXY UNKNOWN\r\n", Versions::V2),
            Parsed::Invalid(_)
        ));
    }

    #[test]
    fn v2_addresses_local_and_tlvs() {
        let mut block = vec![192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb];
        let plain = v2(1, 0x11, &block);
        assert_eq!(
            header(&plain, Versions::V2),
            (28, addrs("192.0.2.1:56324", "198.51.100.2:443"))
        );
        // TLVs (here PP2_TYPE_AUTHORITY, "example.com") are skipped; bytes after stay.
        block.extend_from_slice(&[0x02, 0x00, 0x0b]);
        block.extend_from_slice(b"example.com");
        let mut with_tlv = v2(1, 0x11, &block);
        let len = with_tlv.len();
        with_tlv.extend_from_slice(b"\x16\x03\x01");
        assert_eq!(header(&with_tlv, Versions::Any).0, len);
        let mut six = [0u8; 36];
        six[15] = 1;
        six[16] = 0x20;
        six[17] = 0x01;
        six[33] = 80;
        six[35] = 8;
        assert_eq!(
            header(&v2(1, 0x21, &six), Versions::V2),
            (52, addrs("[::1]:80", "[2001::]:8"))
        );
        // LOCAL, UNSPEC and UNIX keep the socket's addresses.
        assert_eq!(header(&v2(0, 0x11, &block), Versions::V2).1, None);
        assert_eq!(header(&v2(1, 0x00, &[]), Versions::V2), (16, None));
        assert_eq!(header(&v2(1, 0x31, &[0; 216]), Versions::V2).1, None);
    }

    #[test]
    fn v2_waits_for_its_length_and_rejects_bad_fields() {
        let full = v2(1, 0x11, &[1; 12]);
        for n in 1..full.len() {
            assert_eq!(parse(&full[..n], Versions::V2), Parsed::Incomplete, "{n}");
        }
        for (command, family, block) in [
            (2u8, 0x11u8, &[1u8; 12][..]),
            (1, 0x11, &[1; 11][..]),
            (1, 0x21, &[1; 12][..]),
            (1, 0x41, &[][..]),
            (1, 0x13, &[1; 12][..]),
        ] {
            let bad = v2(command, family, block);
            assert!(
                matches!(parse(&bad, Versions::V2), Parsed::Invalid(_)),
                "{bad:?}"
            );
        }
        let mut version_3 = full.clone();
        version_3[12] = 0x31;
        assert!(matches!(
            parse(&version_3, Versions::V2),
            Parsed::Invalid(_)
        ));
        assert!(matches!(parse(&full, Versions::V1), Parsed::Invalid(_)));
    }

    #[test]
    fn auto_tells_headers_from_plain_connections() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n", Versions::Any), Parsed::Absent);
        assert_eq!(parse(b"PUT / HTTP/1.1\r\n", Versions::Any), Parsed::Absent);
        assert_eq!(parse(b"PRI * HTTP/2.0\r\n", Versions::Any), Parsed::Absent);
        assert_eq!(
            parse(b"\x16\x03\x01\x02\x00", Versions::Any),
            Parsed::Absent
        );
        assert_eq!(parse(b"\r\n\r\n\0", Versions::Any), Parsed::Incomplete);
        assert_eq!(parse(b"PROX", Versions::Any), Parsed::Incomplete);
        assert!(matches!(
            parse(b"PROXY JUNK\r\n", Versions::Any),
            Parsed::Invalid(_)
        ));
        assert_eq!(parse(b"", Versions::Any), Parsed::Incomplete);
    }
}
