//! The access line of `--log-format json`: one JSON object per line, with the fields of
//! python/ferrocorn/jsonlog.py's access records, in the same order and under the same names
//! (the Python path writes the same object when the core does not write the lines).
//!
//! Only built when the JSON format is on: the request headers it names are picked out of
//! the head at dispatch (`RequestFields::from_headers`), the bytes and duration read when
//! the app call ends; the text line pays for none of it.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};

use super::{Client, Line};

/// The request headers the JSON line shows, kept from the head (cheap clones: the values
/// share the bytes hyper read).
#[derive(Default)]
pub(crate) struct RequestFields {
    user_agent: Option<HeaderValue>,
    request_id: Option<HeaderValue>,
    traceparent: Option<HeaderValue>,
}

impl RequestFields {
    /// The first `User-Agent`, `X-Request-ID` and `traceparent` of the head.
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        RequestFields {
            user_agent: headers.get(http::header::USER_AGENT).cloned(),
            request_id: headers.get("x-request-id").cloned(),
            traceparent: headers.get("traceparent").cloned(),
        }
    }
}

/// What the app call's end adds to the request's `Line`.
pub(crate) struct JsonLine<'a> {
    pub(crate) line: &'a Line<'a>,
    /// Response body bytes sent.
    pub(crate) bytes: u64,
    /// Seconds from the request's arrival to the end of the app call.
    pub(crate) duration: f64,
    pub(crate) fields: Option<&'a RequestFields>,
}

impl JsonLine<'_> {
    /// Appends the object and its newline; `now` is the record's timestamp.
    pub(crate) fn write_to(&self, buf: &mut Vec<u8>, now: SystemTime) {
        let line = self.line;
        buf.extend_from_slice(b"{\"timestamp\":\"");
        write_timestamp(buf, now);
        buf.extend_from_slice(
            b"\",\"level\":\"INFO\",\"logger\":\"ferrocorn.access\",\"message\":\"",
        );
        // The text line's message (access_log::Line without the level prefix), escaped.
        write_client_escaped(buf, &line.client);
        buf.extend_from_slice(b" - \\\"");
        escape_str(buf, line.method);
        buf.push(b' ');
        escape_str(buf, line.target);
        buf.extend_from_slice(b" HTTP/");
        escape_str(buf, line.version);
        let _ = write!(buf, "\\\" {}\",\"client\":\"", line.status);
        write_client_escaped(buf, &line.client);
        let (path, query) = match line.target.split_once('?') {
            Some((path, query)) => (path, query),
            None => (line.target, ""),
        };
        buf.extend_from_slice(b"\",\"method\":\"");
        escape_str(buf, line.method);
        buf.extend_from_slice(b"\",\"path\":\"");
        escape_str(buf, path);
        buf.extend_from_slice(b"\",\"query\":\"");
        escape_str(buf, query);
        buf.extend_from_slice(b"\",\"http_version\":\"");
        escape_str(buf, line.version);
        // `write!` into a Vec cannot fail.
        let _ = write!(
            buf,
            "\",\"status\":{},\"bytes\":{},\"duration\":{:.6}",
            line.status,
            self.bytes,
            if self.duration.is_finite() {
                self.duration
            } else {
                0.0
            }
        );
        let fields = self.fields;
        buf.extend_from_slice(b",\"user_agent\":");
        write_header(buf, fields.and_then(|f| f.user_agent.as_ref()));
        buf.extend_from_slice(b",\"request_id\":");
        write_header(buf, fields.and_then(|f| f.request_id.as_ref()));
        buf.extend_from_slice(b",\"trace_id\":");
        match fields
            .and_then(|f| f.traceparent.as_ref())
            .and_then(|v| trace_id(v.as_bytes()))
        {
            Some(id) => {
                buf.push(b'"');
                buf.extend_from_slice(id);
                buf.push(b'"');
            }
            None => buf.extend_from_slice(b"null"),
        }
        buf.extend_from_slice(b"}\n");
    }
}

fn write_client_escaped(buf: &mut Vec<u8>, client: &Client<'_>) {
    match client {
        // An address and a port: nothing to escape.
        Client::Peer(Some(addr)) => {
            let _ = write!(buf, "{}:{}", addr.ip().to_canonical(), addr.port());
        }
        Client::Peer(None) => {}
        Client::Text(text) => escape_str(buf, text),
    }
}

/// A header value as a JSON string (its bytes read as latin-1, as the scope gives them to
/// Python), or `null` when the request had none.
fn write_header(buf: &mut Vec<u8>, value: Option<&HeaderValue>) {
    let Some(value) = value else {
        buf.extend_from_slice(b"null");
        return;
    };
    buf.push(b'"');
    for &byte in value.as_bytes() {
        escape_char(buf, char::from(byte));
    }
    buf.push(b'"');
}

/// `text`'s characters inside a JSON string: ASCII output, so any line stays one line.
fn escape_str(buf: &mut Vec<u8>, text: &str) {
    for c in text.chars() {
        escape_char(buf, c);
    }
}

fn escape_char(buf: &mut Vec<u8>, c: char) {
    match c {
        '"' => buf.extend_from_slice(b"\\\""),
        '\\' => buf.extend_from_slice(b"\\\\"),
        ' '..='~' => buf.push(c as u8),
        _ => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(buf, "\\u{unit:04x}");
            }
        }
    }
}

/// The 32-hex trace-id of a valid W3C `traceparent` (`version-traceid-parentid-flags`,
/// lowercase hex, neither id all zeros, version `ff` invalid, version `00` exactly four
/// fields), else `None`.
pub(crate) fn trace_id(value: &[u8]) -> Option<&[u8]> {
    let value = value.trim_ascii();
    let mut parts = value.split(|&b| b == b'-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let parent = parts.next()?;
    let flags = parts.next()?;
    let more = parts.next().is_some();
    let hex = |part: &[u8], len: usize| {
        part.len() == len && part.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let zeros = |part: &[u8]| part.iter().all(|&b| b == b'0');
    let valid = hex(version, 2)
        && version != b"ff"
        && !(version == b"00" && more)
        && hex(trace, 32)
        && !zeros(trace)
        && hex(parent, 16)
        && !zeros(parent)
        && hex(flags, 2);
    valid.then_some(trace)
}

/// `now` in UTC as `2026-01-02T03:04:05.678Z` (jsonlog.py `timestamp`: milliseconds
/// truncated, as Python's `LogRecord.msecs`).
fn write_timestamp(buf: &mut Vec<u8>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_date(secs / 86_400);
    let of_day = secs % 86_400;
    let _ = write!(
        buf,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        since.subsec_millis()
    );
}

/// (year, month, day) of the proleptic Gregorian calendar, `days` after 1970-01-01: counted
/// in 400-year eras (146 097 days each) of years that start on 1 March, so the leap day is
/// the last day of its year.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted / 146_097;
    let day_of_era = shifted % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn render(line: &Line<'_>, fields: Option<&RequestFields>) -> String {
        let mut buf = Vec::new();
        let json = JsonLine {
            line,
            bytes: 12,
            duration: 0.25,
            fields,
        };
        json.write_to(
            &mut buf,
            UNIX_EPOCH + Duration::from_millis(1_767_323_045_678),
        );
        String::from_utf8(buf).expect("ASCII")
    }

    fn get<'a>(client: Client<'a>, target: &'a str) -> Line<'a> {
        Line {
            client,
            method: "GET",
            target,
            version: "1.1",
            status: 200,
        }
    }

    #[test]
    fn line_has_every_field_in_order() {
        let peer = "127.0.0.1:5000".parse().ok();
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", HeaderValue::from_static("curl/8"));
        headers.insert("x-request-id", HeaderValue::from_static("abc"));
        headers.insert(
            "traceparent",
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let fields = RequestFields::from_headers(&headers);
        assert_eq!(
            render(&get(Client::Peer(peer), "/a?b=1"), Some(&fields)),
            concat!(
                r#"{"timestamp":"2026-01-02T03:04:05.678Z","level":"INFO","#,
                r#""logger":"ferrocorn.access","#,
                r#""message":"127.0.0.1:5000 - \"GET /a?b=1 HTTP/1.1\" 200","#,
                r#""client":"127.0.0.1:5000","method":"GET","path":"/a","query":"b=1","#,
                r#""http_version":"1.1","status":200,"bytes":12,"duration":0.250000,"#,
                r#""user_agent":"curl/8","request_id":"abc","#,
                r#""trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn absent_headers_are_null_and_text_is_escaped() {
        let line = render(&get(Client::Text("a\"b\\é"), "/x"), None);
        assert!(line.contains(r#""client":"a\"b\\\u00e9""#), "{line}");
        assert!(line.contains(r#""query":"""#), "{line}");
        let tail = "\"user_agent\":null,\"request_id\":null,\"trace_id\":null}\n";
        assert!(line.ends_with(tail), "{line}");
        let mut headers = HeaderMap::new();
        let raw = HeaderValue::from_bytes(b"x\xe9\"y").expect("obs-text is allowed");
        headers.insert("user-agent", raw);
        let fields = RequestFields::from_headers(&headers);
        let line = render(&get(Client::Peer(None), "/"), Some(&fields));
        assert!(line.contains(r#""user_agent":"x\u00e9\"y""#), "{line}");
        assert!(line.contains(r#""client":"""#), "{line}");
    }

    #[test]
    fn trace_id_only_from_a_valid_traceparent() {
        let id = b"4bf92f3577b34da6a3ce929d0e0e4736";
        let good = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(trace_id(good), Some(&id[..]));
        let future = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra";
        assert_eq!(trace_id(future), Some(&id[..]));
        for bad in [
            &b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"[..],
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            b"",
        ] {
            assert_eq!(trace_id(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(11_016), (2000, 2, 29));
        assert_eq!(civil_date(11_017), (2000, 3, 1));
        assert_eq!(civil_date(20_454), (2026, 1, 1));
        assert_eq!(civil_date(47_540), (2100, 2, 28));
        assert_eq!(civil_date(47_541), (2100, 3, 1));
    }
}
