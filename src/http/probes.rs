//! The health probes' HTTP rules (`--health-port`): which answer a request head gets. Plain
//! bytes in, plain bytes out; the listener that reads and writes them is
//! `server/probes.rs`. Deliberately tiny: one request per connection, no body, no
//! keep-alive, so nothing a client sends can make it hold more than one bounded head.

/// The longest request head the probe port reads; a longer one gets 431.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

/// Where a head ends, if it has: the index just past the blank line (CRLF CRLF, or a bare
/// LF LF, which curl never sends but hand-written probes do).
pub(crate) fn head_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// The response to a complete request head, given whether the server is ready.
pub(crate) fn answer(head: &[u8], ready: bool) -> Vec<u8> {
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let line = head[..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&head[..line_end]);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return response(400, "bad request\n", false);
    };
    if !version.starts_with(b"HTTP/1.") || method.is_empty() || target.is_empty() {
        return response(400, "bad request\n", false);
    }
    let head_only = match method {
        b"GET" => false,
        b"HEAD" => true,
        _ => return response(405, "method not allowed\n", false),
    };
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match path {
        b"/livez" => response(200, "ok\n", head_only),
        b"/readyz" if ready => response(200, "ready\n", head_only),
        b"/readyz" => response(503, "not ready\n", head_only),
        _ => response(404, "not found\n", head_only),
    }
}

/// The answer to a head longer than `MAX_HEAD`.
pub(crate) fn head_too_large() -> Vec<u8> {
    response(431, "request header fields too large\n", false)
}

fn response(status: u16, body: &str, head_only: bool) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\ncache-control: no-store\r\n{allow}connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(out: &[u8]) -> &[u8] {
        &out[9..12]
    }

    #[test]
    fn livez_is_always_ok() {
        let out = answer(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n", false);
        assert_eq!(status(&out), b"200");
        assert!(out.ends_with(b"\r\n\r\nok\n"));
    }

    #[test]
    fn readyz_follows_the_state() {
        assert_eq!(
            status(&answer(b"GET /readyz HTTP/1.1\r\n\r\n", true)),
            b"200"
        );
        assert_eq!(
            status(&answer(b"GET /readyz HTTP/1.0\r\n\r\n", false)),
            b"503"
        );
        assert_eq!(
            status(&answer(b"GET /readyz?verbose HTTP/1.1\r\n\r\n", true)),
            b"200"
        );
    }

    #[test]
    fn head_has_no_body_but_the_length() {
        let out = answer(b"HEAD /livez HTTP/1.1\r\n\r\n", true);
        assert!(out.ends_with(
            b"content-length: 3\r\ncache-control: no-store\r\nconnection: close\r\n\r\n"
        ));
    }

    #[test]
    fn other_paths_methods_and_garbage() {
        assert_eq!(
            status(&answer(b"GET /metrics HTTP/1.1\r\n\r\n", true)),
            b"404"
        );
        assert_eq!(
            status(&answer(b"GET /livez/ HTTP/1.1\r\n\r\n", true)),
            b"404"
        );
        let post = answer(b"POST /livez HTTP/1.1\r\n\r\n", true);
        assert_eq!(status(&post), b"405");
        assert!(post.windows(16).any(|w| w == b"Allow: GET, HEAD"));
        assert_eq!(status(&answer(b"GET /livez\r\n\r\n", true)), b"400");
        assert_eq!(
            status(&answer(b"GET /livez HTTP/2.0\r\n\r\n", true)),
            b"400"
        );
        assert_eq!(
            status(&answer(b"GET  /livez HTTP/1.1\r\n\r\n", true)),
            b"400"
        );
        assert_eq!(status(&answer(b"\x00\xff\r\n\r\n", true)), b"400");
        assert_eq!(status(&head_too_large()), b"431");
    }

    #[test]
    fn heads_end_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), Some(24));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nA: b\r\n"), None);
        assert_eq!(head_end(b""), None);
    }
}
