//! The app's response header order across field names, on HTTP/1.1 (ASGI: "order must be
//! preserved in the HTTP response").
//!
//! hyper writes a response's `HeaderMap`, which groups the values of a name together: an app
//! sending `set-cookie: a`, `x-mid: m`, `set-cookie: b` would get `a`, `b`, `m` on the wire.
//! Most responses are already grouped (each name's values one after another) and go out as
//! they are. For the few that are not, the map that leaves the loop carries a marker as its
//! first field, whose value is the app's sequence of names; hyper writes it as the first
//! line after the status line, and the connection's write side (`server::detect`) cuts the
//! marker out and puts the lines in the app's order (`reorder_head`). Nothing else changes:
//! hyper's own lines (`content-length`, `date`, ...) and the server's (`server`,
//! `--header`) come after the app's, as hyper writes them. HTTP/2 and HTTP/3 responses drop
//! the marker (`strip_marker`): their field order across names is HPACK/QPACK's business.
//! `MARKERS_MADE` keeps all of this at one relaxed load per response while no app has ever
//! sent interleaved headers.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};

/// More names than this and the order is left to hyper (grouped): a head that long is
/// someone's mistake, and reordering it would cost in proportion to its square.
pub(crate) const MAX_ORDERED: usize = 256;

/// Set once a marker was ever made in this process.
static MARKERS_MADE: AtomicBool = AtomicBool::new(false);

/// The marker's name: fixed prefix, random per process, so that no app or client header can
/// be taken for it.
pub(crate) fn marker_name() -> &'static HeaderName {
    static NAME: OnceLock<HeaderName> = OnceLock::new();
    NAME.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let name = format!("x-ferrocorn-order-{:016x}", hasher.finish());
        HeaderName::from_bytes(name.as_bytes())
            .unwrap_or(HeaderName::from_static("x-ferrocorn-order"))
    })
}

/// Whether a map built in this order is grouped (each name's values adjacent), told one
/// append at a time: `appended_existing` is what `HeaderMap::append` returned.
pub(crate) fn still_grouped(map: &HeaderMap, name: &HeaderName, appended_existing: bool) -> bool {
    // A name seen before must be the last new name the map took (the map keeps first
    // insertions in order); only duplicates pay for the look.
    !appended_existing || map.keys().last() == Some(name)
}

/// The map for `pairs` (in the app's order, not grouped): the marker first, then the pairs.
pub(crate) fn marked_map(pairs: Vec<(HeaderName, HeaderValue)>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(pairs.len() + 3);
    if let Some(sequence) = name_sequence(&pairs) {
        MARKERS_MADE.store(true, Ordering::Relaxed);
        map.insert(marker_name().clone(), sequence);
    }
    for (name, value) in pairs {
        map.append(name, value);
    }
    map
}

/// The marker's value: the names in order, space-separated (tokens: always a valid value).
/// None past `MAX_ORDERED` names.
fn name_sequence(pairs: &[(HeaderName, HeaderValue)]) -> Option<HeaderValue> {
    if pairs.len() > MAX_ORDERED {
        return None;
    }
    let names: Vec<&str> = pairs.iter().map(|(name, _)| name.as_str()).collect();
    HeaderValue::from_str(&names.join(" ")).ok()
}

/// Whether `headers` carries a marker (one relaxed load while none was ever made).
#[inline]
pub(crate) fn is_marked(headers: &HeaderMap) -> bool {
    MARKERS_MADE.load(Ordering::Relaxed) && headers.contains_key(marker_name())
}

/// For protocols that do not reorder: takes the marker out.
#[inline]
pub(crate) fn strip_marker(headers: &mut HeaderMap) {
    if MARKERS_MADE.load(Ordering::Relaxed) {
        headers.remove(marker_name());
    }
}

/// Where the marker line starts in `buf` (the offset of its name, just after a CRLF).
pub(crate) fn find_marker(buf: &[u8]) -> Option<usize> {
    let name = marker_name().as_str().as_bytes();
    // At the start: the write before ended just before the marker line.
    if buf.starts_with(name) && buf.get(name.len()) == Some(&b':') {
        return Some(0);
    }
    let mut from = 0;
    while let Some(at) = find(&buf[from..], b"\r\n").map(|i| from + i + 2) {
        if buf[at..].starts_with(name) && buf.get(at + name.len()) == Some(&b':') {
            return Some(at);
        }
        from = at;
    }
    None
}

/// `block` starts with the marker line and runs to the end of the head (its blank line
/// included, when `complete`). Returns the bytes to write in its place and how many bytes
/// of `block` they replace: the lines in the app's order, without the marker. None if the
/// block has no whole marker line (the caller writes it as it is).
pub(crate) fn reorder_head(block: &[u8]) -> Option<(Vec<u8>, usize)> {
    let marker_end = find(block, b"\r\n")? + 2;
    let Some(head_end) = find(block, b"\r\n\r\n").map(|i| i + 4) else {
        // Not the whole head here (cannot be with hyper's single head buffer): drop the
        // marker line only.
        return Some((Vec::new(), marker_end));
    };
    let marker = &block[..marker_end - 2];
    let sequence = marker
        .iter()
        .position(|&b| b == b':')
        .map_or(&[][..], |colon| marker[colon + 1..].trim_ascii());
    // The header lines after the marker, each without its CRLF; the head's last CRLF (the
    // blank line) is written back at the end.
    let lines_bytes = if head_end - 2 > marker_end {
        &block[marker_end..head_end - 4]
    } else {
        &[][..]
    };
    // Field lines hold no CR or LF (hyper's own, and the app's, refused at `send()`).
    let lines: Vec<&[u8]> = if lines_bytes.is_empty() {
        Vec::new()
    } else {
        lines_bytes
            .split(|&b| b == b'\n')
            .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
            .collect()
    };
    let mut used = vec![false; lines.len()];
    let mut out = Vec::with_capacity(head_end - marker_end);
    for name in sequence.split(|&b| b == b' ').filter(|n| !n.is_empty()) {
        let taken = lines.iter().enumerate().find(|(i, line)| {
            !used[*i]
                && line.len() > name.len()
                && line[..name.len()].eq_ignore_ascii_case(name)
                && line[name.len()] == b':'
        });
        if let Some((i, line)) = taken {
            used[i] = true;
            out.extend_from_slice(line);
            out.extend_from_slice(b"\r\n");
        }
    }
    for (line, _) in lines.iter().zip(&used).filter(|(_, used)| !**used) {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Some((out, head_end))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&'static str, &'static str)]) -> Vec<(HeaderName, HeaderValue)> {
        list.iter()
            .map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
            .collect()
    }

    /// hyper's encoding of a map, as far as the order goes: the status line, the map's
    /// fields as the map iterates them, then what hyper adds.
    fn hyper_head(map: &HeaderMap, added: &str) -> Vec<u8> {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for (name, value) in map {
            head.extend_from_slice(name.as_str().as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(added.as_bytes());
        head.extend_from_slice(b"\r\n");
        head
    }

    fn rewrite(head: &[u8]) -> Vec<u8> {
        let at = find_marker(head).expect("marker");
        let (out, replaced) = reorder_head(&head[at..]).expect("reordered");
        [&head[..at], &out[..], &head[at + replaced..]].concat()
    }

    #[test]
    fn grouped_detection() {
        let mut map = HeaderMap::new();
        let mut grouped = true;
        for (name, value) in pairs(&[("a", "1"), ("a", "2"), ("b", "3")]) {
            let existed = map.append(name.clone(), value);
            grouped &= still_grouped(&map, &name, existed);
        }
        assert!(grouped);
        let existed = map.append(HeaderName::from_static("a"), HeaderValue::from_static("4"));
        assert!(!still_grouped(&map, &HeaderName::from_static("a"), existed));
    }

    #[test]
    fn puts_lines_back_in_the_apps_order() {
        let app = [
            ("set-cookie", "a=1"),
            ("x-mid", "m"),
            ("set-cookie", "b=2"),
            ("content-type", "text/plain"),
            ("x-mid", "n"),
        ];
        let map = marked_map(pairs(&app));
        assert!(is_marked(&map));
        let head = hyper_head(
            &map,
            "server: ferrocorn\r\ncontent-length: 2\r\ndate: x\r\n",
        );
        let out = String::from_utf8(rewrite(&head)).unwrap();
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nset-cookie: a=1\r\nx-mid: m\r\nset-cookie: b=2\r\n\
             content-type: text/plain\r\nx-mid: n\r\nserver: ferrocorn\r\n\
             content-length: 2\r\ndate: x\r\n\r\n"
        );
        let marker_line = marker_name().as_str().len()
            + ": set-cookie x-mid set-cookie content-type x-mid\r\n".len();
        assert_eq!(out.len(), head.len() - marker_line);
    }

    #[test]
    fn a_line_hyper_dropped_or_merged_is_skipped() {
        // hyper merges transfer-encoding values into one line and may drop a field.
        let block = b"x-ferrocorn-order-0: transfer-encoding x-a transfer-encoding x-b\r\n\
                      transfer-encoding: gzip, chunked\r\nx-a: 1\r\n\r\nBODY";
        let (out, replaced) = reorder_head(block).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "transfer-encoding: gzip, chunked\r\nx-a: 1\r\n\r\n"
        );
        assert_eq!(&block[replaced..], b"BODY");
    }

    #[test]
    fn without_the_heads_end_only_the_marker_goes() {
        let block = b"x-ferrocorn-order-0: a b a\r\na: 1\r\n";
        let (out, replaced) = reorder_head(block).unwrap();
        assert!(out.is_empty());
        assert_eq!(&block[replaced..], b"a: 1\r\n");
        assert!(reorder_head(b"x-ferrocorn-order-0: a").is_none());
    }

    #[test]
    fn the_marker_is_found_only_as_a_line() {
        let name = marker_name().as_str();
        let head = format!("HTTP/1.1 200 OK\r\nx: {name}: a\r\n{name}: a\r\na: 1\r\n\r\n");
        let at = find_marker(head.as_bytes()).unwrap();
        assert_eq!(&head[at..at + name.len()], name);
        assert!(head[..at].ends_with("a\r\n"));
        assert!(find_marker(b"HTTP/1.1 200 OK\r\nx: y\r\n\r\n").is_none());
    }

    #[test]
    fn too_many_names_are_left_grouped() {
        let many: Vec<_> = (0..=MAX_ORDERED)
            .map(|i| {
                let name = if i % 2 == 0 { "a" } else { "b" };
                (HeaderName::from_static(name), HeaderValue::from(i))
            })
            .collect();
        assert!(!marked_map(many).contains_key(marker_name()));
    }

    #[test]
    fn strip_removes_the_marker() {
        let mut map = marked_map(pairs(&[("a", "1"), ("b", "2"), ("a", "3")]));
        strip_marker(&mut map);
        assert_eq!(map.len(), 3);
        assert!(!is_marked(&map));
    }
}
