//! The static route's cache of small files (`--static-path-cache-size`): a file of up to
//! `lookup::INLINE_LIMIT` that was served whole is kept in memory with what the lookup saw
//! of every path it looked at, and the next request for it is answered on the connection's
//! own thread: a `stat` of each of those paths, and the bytes from memory, instead of a
//! blocking-pool job that opens, checks and reads the file again.
//!
//! An entry is used only while every path it saw still stats the same (device, inode,
//! size, mtime, ctime, mode; or still missing), so a replaced, modified, renamed, chmod-ed
//! or deleted file, a new precompressed sibling, or a symlink turned to another file, is
//! looked up afresh at once. That makes the cache exactly as fresh as the `ETag` (built
//! from the same inode, mtime and size); files modified in the last `YOUNG` are never kept,
//! since the kernel's coarse mtime can miss a second write within one tick.
//!
//! Bounded in bytes (each entry counted with its paths); when full, arbitrary entries go.

use std::collections::HashMap;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use crate::http::static_files::conditional::Validators;
use crate::http::static_files::encoding::Precompressed;

/// Files modified more recently than this are not kept (see the module comment).
const YOUNG: Duration = Duration::from_secs(2);

/// What an entry costs besides its bytes and paths (the map slot, the strings).
const ENTRY_OVERHEAD: usize = 256;

/// One request's file: the same path, the same trailing-slash form, the same acceptable
/// precompressed codings give the same answer while the files are unchanged.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct CacheKey {
    pub(crate) named: PathBuf,
    pub(crate) slash: bool,
    pub(crate) codings: Vec<Precompressed>,
}

/// What `stat` says of a path, as far as the answer depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Could not be stat-ed (missing, not a directory on the way, no permission).
    Missing,
    Present(Stamp),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    /// Changes on chmod, chown, rename and link count changes, which mtime does not show.
    ctime: (i64, i64),
    mode: u32,
}

impl Stamp {
    pub(crate) fn of(meta: &Metadata) -> Self {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
        }
    }
}

impl Seen {
    /// The path as it stands (following symlinks, as opening it does).
    pub(crate) fn now(path: &std::path::Path) -> Self {
        match std::fs::metadata(path) {
            Ok(meta) => Seen::Present(Stamp::of(&meta)),
            Err(_) => Seen::Missing,
        }
    }
}

/// A file answer the lookup made, kept whole.
#[derive(Debug)]
pub(crate) struct CachedFile {
    /// Every path the lookup looked at, in order, and what it saw.
    pub(crate) seen: Vec<(PathBuf, Seen)>,
    pub(crate) content_type: &'static str,
    pub(crate) coding: Option<Precompressed>,
    pub(crate) etag: String,
    pub(crate) last_modified: String,
    pub(crate) validators: Validators,
    /// The whole representation (`validators.size` bytes).
    pub(crate) data: Bytes,
}

impl CachedFile {
    /// Whether the file may be kept at all (not modified within `YOUNG`).
    pub(crate) fn settled(validators: &Validators) -> bool {
        SystemTime::now()
            .duration_since(validators.modified)
            .is_ok_and(|age| age >= YOUNG)
    }

    /// Whether every path still stats as the lookup saw it: a `stat` per path, on the
    /// calling thread (metadata of files just served, which the kernel has at hand).
    pub(crate) fn is_current(&self) -> bool {
        self.seen
            .iter()
            .all(|(path, seen)| Seen::now(path) == *seen)
    }

    fn cost(&self) -> usize {
        let paths: usize = self.seen.iter().map(|(p, _)| p.as_os_str().len()).sum();
        self.data.len() + paths + ENTRY_OVERHEAD
    }
}

pub(crate) struct StaticCache {
    /// Bytes the entries may take together; 0: no cache.
    limit: usize,
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    map: HashMap<CacheKey, Arc<CachedFile>>,
    bytes: usize,
}

impl StaticCache {
    pub(crate) fn new(limit: usize) -> Self {
        StaticCache {
            limit,
            inner: Mutex::new(Entries::default()),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.limit > 0
    }

    /// The entries; a panic elsewhere while holding the lock leaves them consistent (every
    /// change below is a single map operation and its byte count).
    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn get(&self, key: &CacheKey) -> Option<Arc<CachedFile>> {
        self.entries().map.get(key).cloned()
    }

    /// Keeps `file` for `key`, making room by dropping other entries; a file larger than an
    /// eighth of the limit is not kept (a few large files would crowd out every small one).
    pub(crate) fn insert(&self, key: CacheKey, file: CachedFile) {
        let cost = file.cost();
        if cost > self.limit / 8 {
            return;
        }
        let mut entries = self.entries();
        if let Some(old) = entries.map.remove(&key) {
            entries.bytes -= old.cost();
        }
        while entries.bytes + cost > self.limit {
            let Some(victim) = entries.map.keys().next().cloned() else {
                break;
            };
            if let Some(old) = entries.map.remove(&victim) {
                entries.bytes -= old.cost();
            }
        }
        entries.bytes += cost;
        entries.map.insert(key, Arc::new(file));
    }

    /// Drops `stale` (if `key` still holds that very entry: another request may have put a
    /// fresh one there meanwhile).
    pub(crate) fn forget(&self, key: &CacheKey, stale: &Arc<CachedFile>) {
        let mut entries = self.entries();
        if entries
            .map
            .get(key)
            .is_some_and(|held| Arc::ptr_eq(held, stale))
        {
            if let Some(old) = entries.map.remove(key) {
                entries.bytes -= old.cost();
            }
        }
    }

    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.entries().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn file(len: usize) -> CachedFile {
        CachedFile {
            seen: vec![("/nowhere/at/all".into(), Seen::Missing)],
            content_type: "text/plain",
            coding: None,
            etag: "\"x\"".into(),
            last_modified: String::new(),
            validators: Validators {
                size: len as u64,
                modified: UNIX_EPOCH,
                inode: 1,
            },
            data: Bytes::from(vec![7u8; len]),
        }
    }

    fn key(name: &str) -> CacheKey {
        CacheKey {
            named: name.into(),
            slash: false,
            codings: Vec::new(),
        }
    }

    #[test]
    fn the_limit_holds_and_large_files_are_not_kept() {
        let cache = StaticCache::new(64 * 1024);
        for i in 0..100 {
            cache.insert(key(&format!("/f{i}")), file(4000));
            assert!(cache.held_bytes() <= 64 * 1024);
        }
        assert!(cache.get(&key("/f99")).is_some());
        cache.insert(key("/big"), file(9000)); // over an eighth of the limit
        assert!(cache.get(&key("/big")).is_none());
    }

    #[test]
    fn replacing_and_forgetting_keep_the_count() {
        let cache = StaticCache::new(1 << 20);
        cache.insert(key("/a"), file(100));
        cache.insert(key("/a"), file(200));
        let held = cache.get(&key("/a")).expect("kept");
        assert_eq!(held.data.len(), 200);
        let before = cache.held_bytes();
        cache.forget(&key("/a"), &Arc::new(file(200))); // another entry: kept
        assert_eq!(cache.held_bytes(), before);
        cache.forget(&key("/a"), &held);
        assert_eq!(cache.held_bytes(), 0);
        assert!(cache.get(&key("/a")).is_none());
    }

    #[test]
    fn an_entry_is_current_while_its_paths_stat_the_same() {
        let dir = std::env::temp_dir().join(format!("ferrocorn-cache-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a dir");
        let path = dir.join("f.txt");
        std::fs::write(&path, b"one").expect("written");
        let mut entry = file(3);
        entry.seen = vec![
            (path.clone(), Seen::now(&path)),
            (dir.join("f.txt.gz"), Seen::Missing),
        ];
        assert!(entry.is_current());
        std::fs::write(dir.join("f.txt.gz"), b"gz").expect("a sibling");
        assert!(!entry.is_current(), "a new sibling is seen");
        std::fs::remove_file(dir.join("f.txt.gz")).expect("removed");
        assert!(entry.is_current());
        std::fs::remove_file(&path).expect("removed");
        std::fs::write(&path, b"three").expect("replaced");
        assert!(!entry.is_current(), "a replaced file is seen");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn young_files_are_not_kept() {
        let fresh = Validators {
            size: 1,
            modified: SystemTime::now(),
            inode: 1,
        };
        assert!(!CachedFile::settled(&fresh));
        let old = Validators {
            modified: UNIX_EPOCH,
            ..fresh
        };
        assert!(CachedFile::settled(&old));
    }
}
