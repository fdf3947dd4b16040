//! The static route's file-system work, run on tokio's blocking pool: find the file a
//! request names (refusing one outside the mount: the open file's real path is checked), pick its precompressed sibling, read its
//! validators from the open descriptor, apply the preconditions and the range, and read a
//! small file at once. Plain data in, plain data out; no response is built here.

use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::header::RANGE;
use http::HeaderMap;

use crate::http::static_files::conditional::{evaluate, Precondition, Validators};
use crate::http::static_files::encoding::Precompressed;
use crate::http::static_files::mime::content_type;
use crate::http::static_files::range::{parse_range, RangeAsk};

/// Files up to this are read whole by the lookup (one blocking-pool job per request); larger
/// ones stream through `FileBody`, one chunk at a time. The same bound as a `FileBody`
/// chunk: either way a response holds at most this much of a file.
pub(crate) const INLINE_LIMIT: u64 = 256 * 1024;

/// What the lookup needs of the request.
pub(crate) struct Ask {
    /// The canonical mount.
    pub(crate) mount: PathBuf,
    /// Under the mount (http/static_files/path.rs checked it).
    pub(crate) relative: PathBuf,
    /// `--static-path-index`.
    pub(crate) index: Option<String>,
    pub(crate) follow_symlinks: bool,
    /// Whether the request path ends with `/` (a directory's index is served only then).
    pub(crate) slash: bool,
    /// The acceptable precompressed codings, best first.
    pub(crate) codings: Vec<Precompressed>,
    pub(crate) headers: HeaderMap,
    pub(crate) is_head: bool,
}

/// What the lookup found.
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

/// Runs the lookup; an I/O error on the way is a 404 too (the client learns nothing more of
/// the file system than that the file is not served).
pub(crate) fn look_up(ask: Ask) -> Lookup {
    look_up_file(&ask).unwrap_or(Lookup::Missing)
}

fn look_up_file(ask: &Ask) -> io::Result<Lookup> {
    let mut named = ask.mount.join(&ask.relative);
    let Some(mut opened) = open_inside(ask, &named) else {
        return Ok(Lookup::Missing);
    };
    if ask.slash && !opened.meta.is_dir() {
        return Ok(Lookup::Missing); // `file/` names a directory, as a file system says
    }
    if opened.meta.is_dir() {
        let Some(index) = &ask.index else {
            return Ok(Lookup::Missing);
        };
        if !ask.slash {
            return Ok(Lookup::AddSlash);
        }
        named = named.join(index);
        match open_inside(ask, &named) {
            Some(index) => opened = index,
            None => return Ok(Lookup::Missing),
        }
    }
    if !opened.meta.is_file() {
        return Ok(Lookup::Missing);
    }
    let (coding, Opened { file, meta, .. }) = match sibling(ask, &opened.real) {
        Some((coding, sibling)) => (Some(coding), sibling),
        None => (None, opened),
    };
    let validators = Validators {
        size: meta.len(),
        modified: meta.modified()?,
        inode: meta.ino(),
    };
    let etag = validators.etag(coding.map_or("", Precompressed::etag_suffix));
    let reply = reply(ask, file, &etag, &validators)?;
    Ok(Lookup::File(FileAnswer {
        content_type: content_type(&named),
        coding,
        last_modified: validators.last_modified(),
        etag,
        reply,
    }))
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
/// long: not served, whatever the reason.
fn open_inside(ask: &Ask, path: &Path) -> Option<Opened> {
    let file = open(path).ok()?;
    let real = real_path(&file).or_else(|| std::fs::canonicalize(path).ok())?;
    if !ask.follow_symlinks && !real.starts_with(&ask.mount) {
        return None;
    }
    let meta = file.metadata().ok()?;
    Some(Opened { file, meta, real })
}

/// The path the kernel has for an open file (None without /proc).
fn real_path(file: &File) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

/// The first acceptable precompressed sibling of `real` that is a regular file inside the
/// mount; none for a file that is itself compressed.
fn sibling(ask: &Ask, real: &Path) -> Option<(Precompressed, Opened)> {
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
        open_inside(ask, Path::new(&name))
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

fn reply(ask: &Ask, file: File, etag: &str, validators: &Validators) -> io::Result<Reply> {
    let range_applies = match evaluate(&ask.headers, etag, validators) {
        Precondition::NotModified => return Ok(Reply::NotModified),
        Precondition::Failed => return Ok(Reply::PreconditionFailed),
        Precondition::Proceed { range_applies } => range_applies,
    };
    let size = validators.size;
    // Range is defined for GET only (RFC 9110 §14.2): a HEAD gets the whole file's headers.
    let asked = match ask.headers.get(RANGE) {
        Some(value) if range_applies && !ask.is_head => parse_range(value.as_bytes(), size),
        _ => RangeAsk::Whole,
    };
    let (range, start, len) = match asked {
        RangeAsk::Whole => (None, 0, size),
        RangeAsk::Part { start, len } => (Some((start, len)), start, len),
        RangeAsk::Unsatisfiable => return Ok(Reply::Unsatisfiable(size)),
    };
    let body = if ask.is_head {
        Content::Head(len)
    } else if len <= INLINE_LIMIT {
        Content::Read(read_exact_at(&file, start, len)?)
    } else {
        Content::Stream(file, start, len)
    };
    Ok(Reply::Send { range, size, body })
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
            relative: relative.into(),
            index: None,
            follow_symlinks: false,
            slash: false,
            codings: Vec::new(),
            headers: HeaderMap::new(),
            is_head: false,
        }
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
            body(look_up(ask(&t, "a.txt"))).as_deref(),
            Some(&b"hello"[..])
        );
        assert_eq!(body(look_up(ask(&t, "in"))).as_deref(), Some(&b"hello"[..]));
        assert!(matches!(look_up(ask(&t, "out")), Lookup::Missing));
        assert!(matches!(look_up(ask(&t, "missing")), Lookup::Missing));
        assert!(matches!(look_up(ask(&t, "a.txt/x")), Lookup::Missing));
        let follow = Ask {
            follow_symlinks: true,
            ..ask(&t, "out")
        };
        assert_eq!(body(look_up(follow)).as_deref(), Some(&b"secret"[..]));
    }

    #[test]
    fn directories_are_404_unless_an_index_is_set() {
        let t = tree("dirs");
        assert!(matches!(look_up(ask(&t, "dir")), Lookup::Missing));
        let index = |slash| Ask {
            index: Some("index.html".into()),
            slash,
            ..ask(&t, "dir")
        };
        assert!(matches!(look_up(index(false)), Lookup::AddSlash));
        assert_eq!(body(look_up(index(true))).as_deref(), Some(&b"<p>"[..]));
    }

    #[test]
    fn the_accepted_sibling_is_served() {
        let t = tree("sibling");
        let gz = Ask {
            codings: vec![Precompressed::Brotli, Precompressed::Gzip],
            ..ask(&t, "a.txt")
        };
        match look_up(gz) {
            Lookup::File(answer) => {
                assert_eq!(answer.coding, Some(Precompressed::Gzip));
                assert_eq!(answer.content_type, "text/plain; charset=utf-8");
                assert!(answer.etag.ends_with("-gz\""));
            }
            _ => panic!("the sibling is found"),
        }
    }
}
