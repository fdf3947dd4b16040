//! Which file a request names under a static mount, or none: the path is percent-decoded
//! segment by segment, and a segment that could leave the mount or name something other
//! than one path component (`..`, an encoded `/` or `\`, a NUL) refuses the whole request
//! (404), rather than being normalised into some other file.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use percent_encoding::percent_decode;

use crate::config::prefix_matches;

/// The file `raw_path` (as received, without the query) names under the route `prefix`
/// (normalised: starts with `/`, no trailing `/` unless it is `/`), relative to the mount;
/// None when `raw_path` is not under `prefix` or is refused. Empty and `.` segments are
/// skipped, as a file system would; the empty result names the mount itself.
pub(crate) fn resolve(prefix: &str, raw_path: &str) -> Option<PathBuf> {
    if !prefix_matches(prefix, raw_path) {
        return None; // `/static` does not cover `/statics`
    }
    let rest = &raw_path[prefix.len()..];
    let mut relative = PathBuf::new();
    for segment in rest.split('/') {
        let decoded: Vec<u8> = percent_decode(segment.as_bytes()).collect();
        match decoded.as_slice() {
            b"" | b"." => continue,
            b".." => return None,
            bytes if bytes.iter().any(|b| matches!(b, b'/' | b'\\' | 0)) => return None,
            bytes => relative.push(OsStr::from_bytes(bytes)),
        }
    }
    Some(relative)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(path: &str) -> Option<String> {
        resolve("/static", path).map(|p| p.to_string_lossy().into_owned())
    }

    #[test]
    fn plain_paths_resolve_under_the_mount() {
        assert_eq!(resolved("/static/app.js").as_deref(), Some("app.js"));
        assert_eq!(
            resolved("/static/css/site.css").as_deref(),
            Some("css/site.css")
        );
        assert_eq!(resolved("/static/a%20b.txt").as_deref(), Some("a b.txt"));
        assert_eq!(resolved("/static//./x").as_deref(), Some("x"));
        assert_eq!(resolved("/static").as_deref(), Some(""));
        assert_eq!(resolved("/static/").as_deref(), Some(""));
        assert_eq!(
            resolve("/", "/x/y")
                .map(|p| p.display().to_string())
                .as_deref(),
            Some("x/y")
        );
    }

    #[test]
    fn other_prefixes_are_not_ours() {
        assert_eq!(resolved("/statics/x"), None);
        assert_eq!(resolved("/other/x"), None);
    }

    #[test]
    fn traversal_and_smuggled_separators_are_refused() {
        for path in [
            "/static/../secret",
            "/static/a/../../secret",
            "/static/%2e%2e/secret",
            "/static/%2E%2E/secret",
            "/static/.%2e/secret",
            "/static/..%2fsecret",
            "/static/a%2fb",
            "/static/..%5csecret",
            "/static/a%5cb",
            "/static/a%00.txt",
            "/static/..",
        ] {
            assert_eq!(resolved(path), None, "{path}");
        }
    }

    #[test]
    fn a_dot_dot_inside_a_name_is_a_name() {
        assert_eq!(resolved("/static/a..b").as_deref(), Some("a..b"));
        assert_eq!(resolved("/static/...").as_deref(), Some("..."));
    }
}
