//! The static route's file-system work, run on tokio's blocking pool: find the file a
//! request names (refusing one outside the mount: the open file's real path is checked),
//! pick its precompressed sibling, read its validators from the open descriptor, apply the
//! preconditions and the range, and read a small file at once, noting what it saw of each
//! path for the cache (`cache.rs`). Plain data in, plain data out; no response is built
//! here. `answer_cached` makes the same answer from a cached file.

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::header::RANGE;
use http::HeaderMap;

use super::cache::{CachedFile, Seen, Stamp};
use crate::http::static_files::conditional::{evaluate, Precondition, Validators};
use crate::http::static_files::encoding::Precompressed;
use crate::http::static_files::mime::content_type;
use crate::http::static_files::range::{parse_range, RangeAsk};

/// Files up to this are read whole by the lookup (one blocking-pool job per request); larger
/// ones stream through `FileBody`, one chunk at a time. The same bound as a `FileBody`
/// chunk: either way a response holds at most this much of a file. Also the largest file
/// the cache keeps.
pub(crate) const INLINE_LIMIT: u64 = 256 * 1024;

/// What the lookup needs of the request.
pub(crate) struct Ask {
    /// The canonical mount.
    pub(crate) mount: PathBuf,
    /// The mount joined with the path under it (http/static_files/path.rs checked it).
    pub(crate) named: PathBuf,
    /// `--static-path-index`.
    pub(crate) index: Option<String>,
    pub(crate) follow_symlinks: bool,
    /// Whether the request path ends with `/` (a directory's index is served only then).
    pub(crate) slash: bool,
    /// The acceptable precompressed codings, best first.
    pub(crate) codings: Vec<Precompressed>,
    pub(crate) headers: HeaderMap,
    pub(crate) is_head: bool,
    /// Whether to make a `CachedFile` of a small file sent whole.
    pub(crate) for_cache: bool,
}

/// What the lookup found, and the file to cache, if it made one.
pub(crate) struct Found {
    pub(crate) lookup: Lookup,
    pub(crate) to_cache: Option<CachedFile>,
}

pub(crate) enum Lookup {
    /// No such file, a directory, something else than a regular file, or outside the
    /// mount: all 404, told apart by nothing.
    Missing,
    /// A directory with an index file, asked for without the trailing `/`.
    AddSlash,
    File(FileAnswer),
}

pub(crate) struct FileAnswer {
    pub(crate) content_type: &'static str,
    pub(crate) coding: Option<Precompressed>,
    pub(crate) etag: String,
    pub(crate) last_modified: String,
    pub(crate) reply: Reply,
}

pub(crate) enum Reply {
    NotModified,
    PreconditionFailed,
    /// 416; the representation's size.
    Unsatisfiable(u64),
    /// 200 (`range` None) or 206.
    Send {
        range: Option<(u64, u64)>,
        size: u64,
        body: Content,
    },
}

/// The bytes to send.
pub(crate) enum Content {
    /// HEAD: none, `len` announced.
    Head(u64),
    Read(Bytes),
    /// Streamed by `FileBody`: the open file, offset, length.
    Stream(File, u64, u64),
}

/// What the request's headers make of a representation (before any byte is read).
enum Decision {
    NotModified,
    PreconditionFailed,
    Unsatisfiable(u64),
    /// `len` bytes from `start`; `range` for a 206.
    Send {
        range: Option<(u64, u64)>,
        start: u64,
        len: u64,
    },
}

/// Runs the lookup; an I/O error on the way is a 404 too (the client learns nothing more of
/// the file system than that the file is not served).
pub(crate) fn look_up(ask: Ask) -> Found {
    let mut seen = Vec::new();
    match look_up_file(&ask, &mut seen) {
        Ok((lookup, data)) => {
            let to_cache = match (&lookup, data) {
                (Lookup::File(file), Some((validators, data))) => Some(CachedFile {
                    seen,
                    content_type: file.content_type,
                    coding: file.coding,
                    etag: file.etag.clone(),
                    last_modified: file.last_modified.clone(),
                    validators,
                    data,
                }),
                _ => None,
            };
            Found { lookup, to_cache }
        }
        Err(_) => Found {
            lookup: Lookup::Missing,
            to_cache: None,
        },
    }
}

/// The same answer as a lookup would give for a file the cache holds (whose paths the
/// caller found unchanged).
pub(crate) fn answer_cached(file: &CachedFile, headers: &HeaderMap, is_head: bool) -> FileAnswer {
    let size = file.validators.size;
    let reply = match decide(headers, is_head, &file.etag, &file.validators) {
        Decision::NotModified => Reply::NotModified,
        Decision::PreconditionFailed => Reply::PreconditionFailed,
        Decision::Unsatisfiable(size) => Reply::Unsatisfiable(size),
        Decision::Send { range, start, len } => Reply::Send {
            range,
            size,
            body: if is_head {
                Content::Head(len)
            } else {
                Content::Read(file.data.slice(start as usize..(start + len) as usize))
            },
        },
    };
    FileAnswer {
        content_type: file.content_type,
        coding: file.coding,
        etag: file.etag.clone(),
        last_modified: file.last_modified.clone(),
        reply,
    }
}

/// The whole file's bytes, when the lookup read them for the cache.
type Whole = Option<(Validators, Bytes)>;

fn look_up_file(ask: &Ask, seen: &mut Vec<(PathBuf, Seen)>) -> io::Result<(Lookup, Whole)> {
    let mut named = ask.named.clone();
    let Some(mut opened) = open_inside(ask, &named, seen) else {
        return Ok((Lookup::Missing, None));
    };
    if ask.slash && !opened.meta.is_dir() {
        return Ok((Lookup::Missing, None)); // `file/` names a directory, as a file system says
    }
    if opened.meta.is_dir() {
        let Some(index) = &ask.index else {
            return Ok((Lookup::Missing, None));
        };
        if !ask.slash {
            return Ok((Lookup::AddSlash, None));
        }
        named = named.join(index);
        match open_inside(ask, &named, seen) {
            Some(index) => opened = index,
            None => return Ok((Lookup::Missing, None)),
        }
    }
    if !opened.meta.is_file() {
        return Ok((Lookup::Missing, None));
    }
    let (coding, Opened { file, meta, .. }) = match sibling(ask, &opened.real, seen) {
        Some((coding, sibling)) => (Some(coding), sibling),
        None => (None, opened),
    };
    let validators = Validators {
        size: meta.len(),
        modified: meta.modified()?,
        inode: meta.ino(),
    };
    let etag = validators.etag(coding.map_or("", Precompressed::etag_suffix));
    let decision = decide(&ask.headers, ask.is_head, &etag, &validators);
    let size = validators.size;
    // A small file sent whole or in part is read whole for the cache (one read either way).
    let whole = match decision {
        Decision::Send { .. }
            if ask.for_cache
                && !ask.is_head
                && size <= INLINE_LIMIT
                && CachedFile::settled(&validators) =>
        {
            Some(read_exact_at(&file, 0, size)?)
        }
        _ => None,
    };
    let reply = match decision {
        Decision::NotModified => Reply::NotModified,
        Decision::PreconditionFailed => Reply::PreconditionFailed,
        Decision::Unsatisfiable(size) => Reply::Unsatisfiable(size),
        Decision::Send { range, start, len } => {
            let body = if ask.is_head {
                Content::Head(len)
            } else if let Some(data) = &whole {
                Content::Read(data.slice(start as usize..(start + len) as usize))
            } else if len <= INLINE_LIMIT {
                Content::Read(read_exact_at(&file, start, len)?)
            } else {
                Content::Stream(file, start, len)
            };
            Reply::Send { range, size, body }
        }
    };
    let answer = FileAnswer {
        content_type: content_type(&named),
        coding,
        last_modified: validators.last_modified(),
        etag,
        reply,
    };
    Ok((Lookup::File(answer), whole.map(|data| (validators, data))))
}

/// A file opened inside the mount, with what its descriptor says.
struct Opened {
    file: File,
    /// From the descriptor: what is sent is what was checked.
    meta: Metadata,
    real: PathBuf,
}

/// `path` opened, if it exists and the file opened lies inside the mount (or symlinks may
/// leave it). The check is on the descriptor's own path (`/proc/self/fd`), so a symlink
/// swapped in after a check cannot redirect the open; missing, unreadable, a loop, too
/// long: not served, whatever the reason. What it saw goes to `seen`: the descriptor's own
/// metadata when it opened, else the path's (a file missing when opened is `Missing`, so one
/// that appears afterwards is seen as a change).
fn open_inside(ask: &Ask, path: &Path, seen: &mut Vec<(PathBuf, Seen)>) -> Option<Opened> {
    let file = match open(path) {
        Ok(file) => file,
        Err(err) => {
            let now = if err.kind() == io::ErrorKind::NotFound {
                Seen::Missing
            } else {
                Seen::now(path)
            };
            seen.push((path.to_owned(), now));
            return None;
        }
    };
    let meta = file.metadata().ok();
    seen.push((
        path.to_owned(),
        meta.as_ref()
            .map_or(Seen::Missing, |m| Seen::Present(Stamp::of(m))),
    ));
    let meta = meta?;
    let real = real_path(&file, path)?;
    if !ask.follow_symlinks && !real.starts_with(&ask.mount) {
        return None;
    }
    Some(Opened { file, meta, real })
}

/// The path the kernel has for an open file, or (without /proc mounted) `path` canonicalized.
#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn real_path(file: &File, path: &Path) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .ok()
        .or_else(|| std::fs::canonicalize(path).ok())
}

/// Without /proc (macOS, the BSDs, the `portable` feature): the path canonicalized, taken
/// only if it names the very file opened (same device and inode), so a symlink swapped in
/// between the open and this check still cannot redirect what is served.
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
fn real_path(file: &File, path: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).ok()?;
    let opened = file.metadata().ok()?;
    let named = std::fs::metadata(&real).ok()?;
    (opened.dev() == named.dev() && opened.ino() == named.ino()).then_some(real)
}

/// The first acceptable precompressed sibling of `real` that is a regular file inside the
/// mount; none for a file that is itself compressed.
fn sibling(
    ask: &Ask,
    real: &Path,
    seen: &mut Vec<(PathBuf, Seen)>,
) -> Option<(Precompressed, Opened)> {
    if ask.codings.is_empty() {
        return None;
    }
    let ext = real.extension().and_then(|e| e.to_str()).unwrap_or("");
    if ext.eq_ignore_ascii_case("gz") || ext.eq_ignore_ascii_case("br") {
        return None;
    }
    ask.codings.iter().find_map(|&coding| {
        let mut name = real.as_os_str().to_owned();
        name.push(coding.suffix());
        open_inside(ask, Path::new(&name), seen)
            .filter(|sibling| sibling.meta.is_file())
            .map(|sibling| (coding, sibling))
    })
}

/// Non-blocking: opening a FIFO must not hold the blocking thread; never a controlling
/// terminal.
fn open(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// The preconditions, then the range.
fn decide(headers: &HeaderMap, is_head: bool, etag: &str, validators: &Validators) -> Decision {
    let range_applies = match evaluate(headers, etag, validators) {
        Precondition::NotModified => return Decision::NotModified,
        Precondition::Failed => return Decision::PreconditionFailed,
        Precondition::Proceed { range_applies } => range_applies,
    };
    let size = validators.size;
    // Range is defined for GET only (RFC 9110 §14.2): a HEAD gets the whole file's headers.
    let asked = match headers.get(RANGE) {
        Some(value) if range_applies && !is_head => parse_range(value.as_bytes(), size),
        _ => RangeAsk::Whole,
    };
    match asked {
        RangeAsk::Whole => Decision::Send {
            range: None,
            start: 0,
            len: size,
        },
        RangeAsk::Part { start, len } => Decision::Send {
            range: Some((start, len)),
            start,
            len,
        },
        RangeAsk::Unsatisfiable => Decision::Unsatisfiable(size),
    }
}

/// Exactly `len` bytes at `offset`; a file that ends sooner (it shrank) is an error.
fn read_exact_at(file: &File, offset: u64, len: u64) -> io::Result<Bytes> {
    let mut buf = vec![0u8; len as usize];
    file.read_exact_at(&mut buf, offset)?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree(PathBuf);

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tree(name: &str) -> Tree {
        let base =
            std::env::temp_dir().join(format!("ferrocorn-static-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("root/dir")).expect("dirs");
        std::fs::write(base.join("root/a.txt"), b"hello").expect("a file");
        std::fs::write(base.join("root/a.txt.gz"), b"gz").expect("a sibling");
        std::fs::write(base.join("root/dir/index.html"), b"<p>").expect("an index");
        std::fs::write(base.join("secret"), b"secret").expect("outside");
        symlink(base.join("secret"), base.join("root/out")).expect("a symlink");
        symlink(base.join("root/a.txt"), base.join("root/in")).expect("a symlink");
        Tree(std::fs::canonicalize(base).expect("canonical"))
    }

    fn ask(tree: &Tree, relative: &str) -> Ask {
        Ask {
            mount: tree.0.join("root"),
            named: tree.0.join("root").join(relative),
            index: None,
            follow_symlinks: false,
            slash: false,
            codings: Vec::new(),
            headers: HeaderMap::new(),
            is_head: false,
            for_cache: false,
        }
    }

    fn found(ask: Ask) -> Lookup {
        look_up(ask).lookup
    }

    fn body(found: Lookup) -> Option<Vec<u8>> {
        match found {
            Lookup::File(FileAnswer {
                reply:
                    Reply::Send {
                        body: Content::Read(data),
                        ..
                    },
                ..
            }) => Some(data.to_vec()),
            _ => None,
        }
    }

    #[test]
    fn files_inside_are_read_and_symlinks_out_refused() {
        let t = tree("inside");
        assert_eq!(
            body(found(ask(&t, "a.txt"))).as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(body(found(ask(&t, "in"))).as_deref(), Some(&b"hello"[..]));
        assert!(matches!(found(ask(&t, "out")), Lookup::Missing));
        assert!(matches!(found(ask(&t, "missing")), Lookup::Missing));
        assert!(matches!(found(ask(&t, "a.txt/x")), Lookup::Missing));
        let follow = Ask {
            follow_symlinks: true,
            ..ask(&t, "out")
        };
        assert_eq!(body(found(follow)).as_deref(), Some(&b"secret"[..]));
    }

    #[test]
    fn directories_are_404_unless_an_index_is_set() {
        let t = tree("dirs");
        assert!(matches!(found(ask(&t, "dir")), Lookup::Missing));
        let index = |slash| Ask {
            index: Some("index.html".into()),
            slash,
            ..ask(&t, "dir")
        };
        assert!(matches!(found(index(false)), Lookup::AddSlash));
        assert_eq!(body(found(index(true))).as_deref(), Some(&b"<p>"[..]));
    }

    #[test]
    fn the_accepted_sibling_is_served() {
        let t = tree("sibling");
        let gz = Ask {
            codings: vec![Precompressed::Brotli, Precompressed::Gzip],
            ..ask(&t, "a.txt")
        };
        match found(gz) {
            Lookup::File(answer) => {
                assert_eq!(answer.coding, Some(Precompressed::Gzip));
                assert_eq!(answer.content_type, "text/plain; charset=utf-8");
                assert!(answer.etag.ends_with("-gz\""));
            }
            _ => panic!("the sibling is found"),
        }
    }

    #[test]
    fn a_settled_small_file_is_offered_to_the_cache_with_what_was_seen() {
        let t = tree("cache");
        let young = look_up(Ask {
            for_cache: true,
            ..ask(&t, "a.txt")
        });
        assert!(young.to_cache.is_none(), "just written: not kept");
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for name in ["root/a.txt", "root/a.txt.gz"] {
            File::options()
                .write(true)
                .open(t.0.join(name))
                .and_then(|f| f.set_modified(old))
                .expect("an old mtime");
        }
        let headers = {
            let mut h = HeaderMap::new();
            h.insert(RANGE, "bytes=1-2".parse().expect("a value"));
            h
        };
        let asked = Ask {
            for_cache: true,
            codings: vec![Precompressed::Brotli, Precompressed::Gzip],
            headers: headers.clone(),
            ..ask(&t, "a.txt")
        };
        let found = look_up(asked);
        let cached = found.to_cache.expect("kept");
        // The gzip sibling won; the brotli one was looked for and missing.
        assert_eq!(cached.coding, Some(Precompressed::Gzip));
        assert_eq!(&cached.data[..], b"gz");
        let seen: Vec<_> = cached.seen.iter().map(|(p, s)| (p.clone(), *s)).collect();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1], (t.0.join("root/a.txt.br"), Seen::Missing));
        assert!(cached.is_current());
        // The cached answer is the lookup's: a 206 of one byte of the sibling.
        match answer_cached(&cached, &headers, false).reply {
            Reply::Send {
                range: Some((1, 1)),
                size: 2,
                body: Content::Read(data),
            } => assert_eq!(&data[..], b"z"),
            _ => panic!("a 206 from the cache"),
        }
        match answer_cached(&cached, &HeaderMap::new(), true).reply {
            Reply::Send {
                range: None,
                body: Content::Head(2),
                ..
            } => {}
            _ => panic!("a HEAD from the cache"),
        }
    }
}
