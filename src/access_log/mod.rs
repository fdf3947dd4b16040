//! The default access-log line, written by the core (ARCHITECTURE.md, "Access log").
//!
//! With the default logging configuration, the line uvicorn prints
//! (`INFO:     127.0.0.1:5000 - "GET / HTTP/1.1" 200`) is formatted here and handed to the
//! `sink`, whose thread writes it; Python's logging is never entered for it. With
//! `--log-format json` the line is `json`'s object instead. Any other configuration keeps
//! the Python path (python/ferrocorn/_access_fastpath.py decides).

pub(crate) mod json;
pub(crate) mod sink;

use std::io::Write;
use std::net::SocketAddr;

/// `DefaultFormatter`'s "%(levelprefix)s %(message)s" for INFO, plain and coloured (green).
const PREFIX: &[u8] = b"INFO:     ";
const PREFIX_COLOURED: &[u8] = b"\x1b[32mINFO\x1b[0m:     ";

/// Who the line names as the client.
pub(crate) enum Client<'a> {
    /// The socket's peer; `None` for Unix sockets (printed as nothing, as in Python).
    Peer(Option<SocketAddr>),
    /// The client the proxy headers named (`--proxy-headers`), already as text.
    Text(&'a str),
}

/// The request, as the line shows it.
pub(crate) struct Line<'a> {
    pub(crate) client: Client<'a>,
    pub(crate) method: &'a str,
    /// Path with query, as received.
    pub(crate) target: &'a str,
    /// "1.0", "1.1" or "2".
    pub(crate) version: &'a str,
    pub(crate) status: u16,
}

impl Line<'_> {
    /// Appends the line and its newline: byte for byte what
    /// `logging.getLogger("ferrocorn.access").info('%s - "%s %s HTTP/%s" %d', ...)` prints
    /// through the default handler.
    pub(crate) fn write_to(&self, buf: &mut Vec<u8>, colour: bool) {
        buf.extend_from_slice(if colour { PREFIX_COLOURED } else { PREFIX });
        self.write_client(buf);
        buf.extend_from_slice(b" - \"");
        buf.extend_from_slice(self.method.as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(self.target.as_bytes());
        buf.extend_from_slice(b" HTTP/");
        buf.extend_from_slice(self.version.as_bytes());
        buf.extend_from_slice(b"\" ");
        let _ = write!(buf, "{}", self.status);
        buf.push(b'\n');
    }

    /// The client as the line shows it: "host:port", or nothing for a Unix socket.
    pub(crate) fn write_client(&self, buf: &mut Vec<u8>) {
        match &self.client {
            // `write!` into a Vec cannot fail.
            Client::Peer(Some(addr)) => {
                let _ = write!(buf, "{}:{}", addr.ip().to_canonical(), addr.port());
            }
            Client::Peer(None) => {}
            Client::Text(text) => buf.extend_from_slice(text.as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(line: &Line<'_>, colour: bool) -> String {
        let mut buf = Vec::new();
        line.write_to(&mut buf, colour);
        String::from_utf8(buf).expect("ASCII")
    }

    fn get(client: Client<'_>) -> Line<'_> {
        Line {
            client,
            method: "GET",
            target: "/a?b=1",
            version: "1.1",
            status: 200,
        }
    }

    #[test]
    fn default_line_matches_the_python_format() {
        let peer = "127.0.0.1:5000".parse().ok();
        assert_eq!(
            render(&get(Client::Peer(peer)), false),
            "INFO:     127.0.0.1:5000 - \"GET /a?b=1 HTTP/1.1\" 200\n"
        );
    }

    #[test]
    fn coloured_prefix_is_only_the_level() {
        let line = render(&get(Client::Text("10.0.0.1:1")), true);
        assert_eq!(
            line,
            "\x1b[32mINFO\x1b[0m:     10.0.0.1:1 - \"GET /a?b=1 HTTP/1.1\" 200\n"
        );
    }

    #[test]
    fn unix_socket_client_is_empty_and_ipv4_mapped_is_canonical() {
        assert_eq!(
            render(&get(Client::Peer(None)), false),
            "INFO:      - \"GET /a?b=1 HTTP/1.1\" 200\n"
        );
        let mapped = "[::ffff:10.1.2.3]:80".parse().ok();
        assert!(render(&get(Client::Peer(mapped)), false).contains(" 10.1.2.3:80 - "));
        let v6 = "[::1]:8080".parse().ok();
        assert!(render(&get(Client::Peer(v6)), false).contains(" ::1:8080 - "));
    }
}
