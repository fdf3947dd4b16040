//! A response body read from a file (`http.response.pathsend`), as hyper asks for it.
//!
//! The file is opened and measured on the loop thread when the message arrives, so that a
//! missing or unreadable file fails `send()` before anything is sent. Its bytes are read on
//! tokio's blocking pool, one `FILE_CHUNK` at a time and only when hyper wants the next
//! frame, so a download holds one chunk in memory whatever the file size, and a slow
//! client slows the reading. The loop thread never reads it. A file that ends before the
//! size it had when opened (it shrank) aborts the response: the client never takes a
//! short body for a whole one.

use std::fs::File;
use std::future::Future;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::task::JoinHandle;

/// Bytes read per blocking-pool job.
const FILE_CHUNK: usize = 256 * 1024;

/// An open file and the part of it to send.
pub(crate) struct FileSource {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

/// Why a file cannot be sent (raised by `send()`, naming the path).
#[derive(Debug)]
pub(crate) enum OpenError {
    NotAbsolute,
    NotAFile,
    Io(io::Error),
}

impl FileSource {
    /// Opens `path` (absolute; a regular file) for the whole of it. Non-blocking open: a
    /// FIFO would otherwise block the loop thread until a writer appeared.
    pub(crate) fn open(path: &Path) -> Result<Self, OpenError> {
        if !path.is_absolute() {
            return Err(OpenError::NotAbsolute);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(OpenError::Io)?;
        let meta = file.metadata().map_err(OpenError::Io)?;
        if !meta.is_file() {
            return Err(OpenError::NotAFile);
        }
        Ok(FileSource {
            file: Arc::new(file),
            offset: 0,
            len: meta.len(),
        })
    }

    /// `len` bytes of an already open `file` from `offset` (the static route's ranges; the
    /// caller has checked that it is a regular file at least that long).
    pub(crate) fn open_range(file: File, offset: u64, len: u64) -> Self {
        FileSource {
            file: Arc::new(file),
            offset,
            len,
        }
    }

    /// Bytes that will be sent.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// The file being sent: at most one read in flight.
pub(crate) struct FileBody {
    source: FileSource,
    reading: Option<JoinHandle<io::Result<Vec<u8>>>>,
}

/// The file ended early or could not be read: the response is aborted.
pub(crate) struct FileFailed;

impl FileBody {
    pub(crate) fn new(source: FileSource) -> Self {
        FileBody {
            source,
            reading: None,
        }
    }

    pub(crate) fn remaining(&self) -> u64 {
        self.source.len
    }

    pub(crate) fn is_end(&self) -> bool {
        self.source.len == 0 && self.reading.is_none()
    }

    /// The next chunk, read on the blocking pool; None at the end.
    pub(crate) fn poll_chunk(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, FileFailed>>> {
        loop {
            if let Some(reading) = &mut self.reading {
                let done = match Pin::new(reading).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(done) => done,
                };
                self.reading = None;
                return Poll::Ready(Some(match done {
                    Ok(Ok(data)) if !data.is_empty() => {
                        let n = data.len() as u64;
                        self.source.offset += n;
                        self.source.len -= n.min(self.source.len);
                        Ok(Bytes::from(data))
                    }
                    // Empty: the file is shorter than when it was opened.
                    _ => Err(FileFailed),
                }));
            }
            if self.source.len == 0 {
                return Poll::Ready(None);
            }
            let want = self.source.len.min(FILE_CHUNK as u64) as usize;
            let file = self.source.file.clone();
            let offset = self.source.offset;
            self.reading = Some(tokio::task::spawn_blocking(move || {
                read_at(&file, offset, want)
            }));
        }
    }
}

/// Up to `want` bytes at `offset` (fewer only at the end of the file).
fn read_at(file: &File, offset: u64, want: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(bytes: &[u8]) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!(
            "ferrocorn-file-body-{}-{}",
            std::process::id(),
            bytes.len()
        ));
        let mut file = File::create(&path).expect("a temp file");
        file.write_all(bytes).expect("written");
        path
    }

    async fn drain(mut body: FileBody) -> Result<Vec<u8>, ()> {
        let mut out = Vec::new();
        loop {
            match std::future::poll_fn(|cx| body.poll_chunk(cx)).await {
                None => return Ok(out),
                Some(Ok(chunk)) => out.extend_from_slice(&chunk),
                Some(Err(FileFailed)) => return Err(()),
            }
        }
    }

    #[tokio::test]
    async fn sends_the_whole_file_in_chunks() {
        let data: Vec<u8> = (0..(FILE_CHUNK * 2 + 123))
            .map(|i| (i % 251) as u8)
            .collect();
        let path = temp_file(&data);
        let source = FileSource::open(&path).expect("opens");
        assert_eq!(source.len(), data.len() as u64);
        assert_eq!(drain(FileBody::new(source)).await, Ok(data));
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn a_file_that_shrinks_fails() {
        let path = temp_file(&[7u8; 1000]);
        let source = FileSource::open(&path).expect("opens");
        File::create(&path).expect("truncated");
        assert_eq!(drain(FileBody::new(source)).await, Err(()));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn relative_paths_directories_and_missing_files_are_refused() {
        assert!(matches!(
            FileSource::open(Path::new("relative/file")),
            Err(OpenError::NotAbsolute)
        ));
        assert!(matches!(
            FileSource::open(&std::env::temp_dir()),
            Err(OpenError::NotAFile)
        ));
        assert!(matches!(
            FileSource::open(Path::new("/nonexistent/ferrocorn/file")),
            Err(OpenError::Io(err)) if err.kind() == io::ErrorKind::NotFound
        ));
    }
}
