//! The benchmark suite's hyper floor: a plain hyper HTTP/1.1 server, no Python, that answers
//! the routes of `benchmarks/app.py` (and of the framework apps in `benchmarks/fw_app.py`) with
//! the same bodies and headers. Its CPU time per request is the network/HTTP part of the
//! "floor" in the report: what a request costs with hyper and nothing else.
//!
//! Settings as ferrocorn's (src/server/connection.rs, listener.rs, runtime.rs): one tokio
//! current-thread runtime, TCP_NODELAY on accepted sockets, backlog 2048, hyper http1 with
//! keep-alive, no half-close, 64 KiB max header size, no header-read timer, hyper's cached
//! `date` header, `pipeline_flush(false)`, mimalloc; and `server: ferrocorn` on every response,
//! as ferrocorn adds it.
//!
//!     floor --host 127.0.0.1 --port 8000 [--app app|starlette|fastapi|files] [--files DIR]
//!
//! `--app` picks which app's responses to mimic (`app`, the default: benchmarks/app.py).
//!
//! `--app files --files DIR` mimics benchmarks/file_app.py (the `file-*` scenarios): Starlette's
//! `FileResponse` for `GET /files/NAME`, that is the bytes of DIR/NAME with the headers
//! FileResponse sends, in its order: `content-type` guessed from the name (a small table of
//! common extensions; `application/octet-stream` for `.bin` and anything else), `accept-ranges`,
//! `content-length`, `last-modified` and `etag`, the last two made once per file from its
//! stat: the same date as Starlette's `formatdate(st_mtime)`, and an etag of the same length
//! as its MD5 hex (other digits), so every header has the same size. `GET /plaintext` answers as
//! Starlette's PlainTextResponse (the suite's readiness probe), anything else Starlette's 404.
//! The bodies are held in memory: every regular file of DIR of at most 64 MiB is read once at
//! start-up; a larger one is never loaded and answers 404. No Range support (wrk sends none).

use std::collections::HashMap;
use std::convert::Infallible;
use std::hash::{BuildHasher, RandomState};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{
    HeaderValue, ACCEPT_RANGES, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, ETAG, LAST_MODIFIED, SERVER,
};
use http::{Method, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BACKLOG: u32 = 2048;
const MAX_HEADER_SIZE: usize = 64 * 1024;

const PLAINTEXT: &[u8] = b"Hello, World!";
const JSON: &[u8] = br#"{"message": "Hello, World!"}"#; // json.dumps's default separators
const CHUNK_SIZE: usize = 64 * 1024;
static CHUNK: [u8; CHUNK_SIZE] = [b's'; CHUNK_SIZE];
static TEN_KIB: [u8; 10240] = [b'x'; 10240];
const DEFAULT_STREAM_SIZE: usize = 1024 * 1024;

const TEXT: HeaderValue = HeaderValue::from_static("text/plain");
const TEXT_UTF8: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const APP_JSON: HeaderValue = HeaderValue::from_static("application/json");
const OCTET: HeaderValue = HeaderValue::from_static("application/octet-stream");
const SERVER_NAME: HeaderValue = HeaderValue::from_static("ferrocorn");
const BYTES: HeaderValue = HeaderValue::from_static("bytes");
const GET_HEAD: HeaderValue = HeaderValue::from_static("GET, HEAD");

/// `--app files`: a file larger than this is never loaded (it answers 404).
const MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq)]
enum App {
    /// benchmarks/app.py: content-type, then content-length
    Plain,
    /// Starlette's PlainTextResponse: content-length, then content-type with a charset
    Starlette,
    /// FastAPI's JSONResponse for the pydantic model of benchmarks/fw_app.py (Starlette's
    /// header order too)
    FastApi,
    /// benchmarks/file_app.py: Starlette's FileResponse for the files of `--files DIR`
    Files,
}

/// One file of `--files DIR`, read at start-up, with the header values Starlette's
/// FileResponse sends for it.
struct FileEntry {
    body: Bytes,
    content_type: HeaderValue,
    content_length: HeaderValue,
    last_modified: HeaderValue,
    etag: HeaderValue,
}

/// `--app files`: file name -> its entry (set once in main, before serving).
static FILES: OnceLock<HashMap<String, FileEntry>> = OnceLock::new();

/// A response body: whole, streamed in 64 KiB pieces (`/stream`), or the request body
/// relayed piece by piece with no length, so chunked (`/echo`, as app.py streams it back).
enum FloorBody {
    Full(Option<Bytes>),
    Stream { remaining: usize },
    Echo(Incoming),
}

impl Body for FloorBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            FloorBody::Full(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            FloorBody::Stream { remaining } => {
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                let n = (*remaining).min(CHUNK_SIZE);
                *remaining -= n;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&CHUNK[..n])))))
            }
            FloorBody::Echo(incoming) => loop {
                match Pin::new(&mut *incoming).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                        Ok(data) if data.is_empty() => continue,
                        Ok(data) => return Poll::Ready(Some(Ok(Frame::data(data)))),
                        Err(_trailers) => continue, // app.py does not echo trailers
                    },
                    other => return other,
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            FloorBody::Full(data) => data.is_none(),
            FloorBody::Stream { remaining } => *remaining == 0,
            FloorBody::Echo(incoming) => incoming.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FloorBody::Full(data) => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            FloorBody::Stream { remaining } => SizeHint::with_exact(*remaining as u64),
            // Unknown length: chunked, like app.py's streamed echo.
            FloorBody::Echo(_) => SizeHint::default(),
        }
    }
}

fn respond(app: App, status: StatusCode, ctype: HeaderValue, body: Bytes) -> Response<FloorBody> {
    let len = HeaderValue::from(body.len());
    let mut resp = Response::new(FloorBody::Full(Some(body)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    if app != App::Plain {
        // Starlette's Response (FastAPI's JSONResponse too) sets content-length first.
        h.insert(CONTENT_LENGTH, len);
        h.insert(CONTENT_TYPE, ctype);
    } else {
        h.insert(CONTENT_TYPE, ctype);
        h.insert(CONTENT_LENGTH, len);
    }
    h.insert(SERVER, SERVER_NAME); // hyper adds `date` after it
    resp
}

fn not_found(app: App) -> Response<FloorBody> {
    match app {
        App::FastApi => respond(
            app,
            StatusCode::NOT_FOUND,
            APP_JSON,
            Bytes::from_static(br#"{"detail":"Not Found"}"#),
        ),
        App::Starlette | App::Files => respond(
            app,
            StatusCode::NOT_FOUND,
            TEXT_UTF8,
            Bytes::from_static(b"Not Found"),
        ),
        App::Plain => respond(
            app,
            StatusCode::NOT_FOUND,
            TEXT,
            Bytes::from_static(b"Not Found"),
        ),
    }
}

/// The same JSON FastAPI writes for `GET /items/{item_id}` (benchmarks/fw_app.py).
fn fastapi_item(item_id: i64) -> Bytes {
    Bytes::from(format!(
        r#"{{"item_id":{item_id},"name":"Item {item_id}","price":9.99,"tags":["bench","floor"]}}"#
    ))
}

/// FileResponse's answer for a loaded file: its headers in Starlette's order (content-type,
/// accept-ranges, content-length, last-modified, etag), then `server`.
fn file_response(file: &FileEntry) -> Response<FloorBody> {
    let mut resp = Response::new(FloorBody::Full(Some(file.body.clone())));
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, file.content_type.clone());
    h.insert(ACCEPT_RANGES, BYTES);
    h.insert(CONTENT_LENGTH, file.content_length.clone());
    h.insert(LAST_MODIFIED, file.last_modified.clone());
    h.insert(ETAG, file.etag.clone());
    h.insert(SERVER, SERVER_NAME);
    resp
}

/// benchmarks/file_app.py's routes: `/files/{name}` (GET and HEAD, as a Starlette Route for a
/// function allows; hyper sends no body for HEAD) and `/plaintext`.
fn files_app(req: &Request<Incoming>) -> Response<FloorBody> {
    let app = App::Files;
    let path = req.uri().path();
    if path == "/plaintext" {
        return respond(
            app,
            StatusCode::OK,
            TEXT_UTF8,
            Bytes::from_static(PLAINTEXT),
        );
    }
    let Some(name) = path.strip_prefix("/files/") else {
        return not_found(app);
    };
    // Only plain names are loaded (none with '/' or a leading '.'): anything else is not found.
    let Some(file) = FILES.get().and_then(|files| files.get(name)) else {
        return not_found(app);
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        // Starlette's 405: PlainTextResponse with the `allow` header first.
        const BODY: &[u8] = b"Method Not Allowed";
        let mut resp = Response::new(FloorBody::Full(Some(Bytes::from_static(BODY))));
        *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        let h = resp.headers_mut();
        h.insert(ALLOW, GET_HEAD);
        h.insert(CONTENT_LENGTH, HeaderValue::from(BODY.len()));
        h.insert(CONTENT_TYPE, TEXT_UTF8);
        h.insert(SERVER, SERVER_NAME);
        return resp;
    }
    file_response(file)
}

/// Python's `mimetypes.guess_type(name)[0]` for common extensions (Starlette's FileResponse
/// guesses its content-type so), with the charset Starlette adds to `text/*`;
/// `application/octet-stream` for anything else, as FileResponse falls back to.
fn guess_content_type(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map_or(String::new(), |(_, e)| e.to_ascii_lowercase());
    match ext.as_str() {
        "txt" => "text/plain; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "ico" => "image/vnd.microsoft.icon",
        "wasm" => "application/wasm",
        _ => "application/octet-stream", // `.bin` too
    }
}

/// `--app files`: every regular file of `dir` of at most MAX_FILE_SIZE, read into memory with
/// the headers FileResponse would send for it (Starlette's `set_stat_headers`).
fn load_files(dir: &Path) -> Result<HashMap<String, FileEntry>, String> {
    let err = |e: std::io::Error| format!("--files {}: {e}", dir.display());
    let mut files = HashMap::new();
    for entry in std::fs::read_dir(dir).map_err(err)? {
        let entry = entry.map_err(err)?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if name.starts_with('.') {
            continue; // file_app.py answers 404 for these
        }
        let path = entry.path();
        // Follows symlinks, as the os.stat of FileResponse does.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE_SIZE {
            eprintln!(
                "floor: {} not loaded ({} bytes > 64 MiB): answered 404",
                path.display(),
                meta.len()
            );
            continue;
        }
        let body = std::fs::read(&path).map_err(err)?;
        if body.len() as u64 != meta.len() {
            return Err(format!("{} changed while it was read", path.display()));
        }
        // Starlette's etag is the MD5 of "<st_mtime>-<size>" in hex: the same length here
        // (two 64-bit hashes of the same facts), not the same digits; a floor needs the
        // bytes on the wire, not the digest.
        let stamp = (meta.mtime(), meta.mtime_nsec(), meta.len());
        let etag = format!(
            "{:016x}{:016x}",
            RandomState::new().hash_one(stamp),
            RandomState::new().hash_one(stamp)
        );
        let modified = meta.modified().map_err(err)?;
        let value = |s: String| HeaderValue::from_str(&s).map_err(|e| e.to_string());
        files.insert(
            name.clone(),
            FileEntry {
                body: Bytes::from(body),
                content_type: HeaderValue::from_static(guess_content_type(&name)),
                content_length: HeaderValue::from(meta.len()),
                // email.utils.formatdate(usegmt=True) is this IMF-fixdate form.
                last_modified: value(httpdate::fmt_http_date(modified))?,
                etag: value(format!("\"{etag}\""))?,
            },
        );
    }
    Ok(files)
}

fn stream_size(query: Option<&str>) -> Option<usize> {
    for part in query.unwrap_or("").split('&') {
        if let Some(v) = part.strip_prefix("size=") {
            return v.parse().ok();
        }
    }
    Some(DEFAULT_STREAM_SIZE)
}

async fn handle(app: App, req: Request<Incoming>) -> Result<Response<FloorBody>, Infallible> {
    let path = req.uri().path();
    let resp = match app {
        App::Plain => match path {
            "/plaintext" => respond(app, StatusCode::OK, TEXT, Bytes::from_static(PLAINTEXT)),
            "/json" => respond(app, StatusCode::OK, APP_JSON, Bytes::from_static(JSON)),
            "/10k" => respond(app, StatusCode::OK, TEXT, Bytes::from_static(&TEN_KIB)),
            "/echo" => {
                let mut resp = Response::new(FloorBody::Echo(req.into_body()));
                let h = resp.headers_mut();
                h.insert(CONTENT_TYPE, OCTET);
                h.insert(SERVER, SERVER_NAME);
                resp
            }
            "/stream" => match stream_size(req.uri().query()) {
                Some(size) => {
                    let mut resp = Response::new(FloorBody::Stream { remaining: size });
                    let h = resp.headers_mut();
                    h.insert(CONTENT_TYPE, OCTET);
                    h.insert(CONTENT_LENGTH, HeaderValue::from(size));
                    h.insert(SERVER, SERVER_NAME);
                    resp
                }
                None => respond(
                    app,
                    StatusCode::BAD_REQUEST,
                    TEXT,
                    Bytes::from_static(b"bad size"),
                ),
            },
            "/sleep" => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                respond(app, StatusCode::OK, TEXT, Bytes::from_static(b"slept"))
            }
            _ => not_found(app),
        },
        App::Starlette => match path {
            "/plaintext" => respond(
                app,
                StatusCode::OK,
                TEXT_UTF8,
                Bytes::from_static(PLAINTEXT),
            ),
            _ => not_found(app),
        },
        App::FastApi => match path.strip_prefix("/items/") {
            Some(id) if req.method() == Method::GET => match id.parse::<i64>() {
                Ok(id) => respond(app, StatusCode::OK, APP_JSON, fastapi_item(id)),
                Err(_) => respond(
                    app,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    APP_JSON,
                    Bytes::from_static(br#"{"detail":"item_id is not an integer"}"#),
                ),
            },
            _ if path == "/plaintext" => {
                // fw_app.py's FastAPI app has it too (the suite's readiness probe).
                respond(
                    app,
                    StatusCode::OK,
                    TEXT_UTF8,
                    Bytes::from_static(PLAINTEXT),
                )
            }
            _ => not_found(app),
        },
        App::Files => files_app(&req),
    };
    Ok(resp)
}

fn http1_builder() -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        .half_close(false)
        .max_header_size(MAX_HEADER_SIZE)
        .header_read_timeout(None)
        .auto_date_header(true)
        .pipeline_flush(false);
    builder
}

fn parse_args() -> Result<(SocketAddr, App, Option<PathBuf>), String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = "8000".to_string();
    let mut app = App::Plain;
    let mut files_dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--host" => host = value()?,
            "--port" => port = value()?,
            "--app" => {
                app = match value()?.as_str() {
                    "app" => App::Plain,
                    "starlette" => App::Starlette,
                    "fastapi" => App::FastApi,
                    "files" => App::Files,
                    other => return Err(format!("unknown --app {other:?}")),
                }
            }
            "--files" => files_dir = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                return Err("usage: floor [--host H] [--port P] \
                     [--app app|starlette|fastapi|files] [--files DIR]"
                    .into())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let addr = format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("bad address {host}:{port}: {e}"))?;
    match (app, &files_dir) {
        (App::Files, None) => return Err("--app files needs --files DIR".into()),
        (App::Files, Some(_)) | (_, None) => {}
        (_, Some(_)) => return Err("--files goes with --app files only".into()),
    }
    Ok((addr, app, files_dir))
}

fn main() {
    let (addr, app, files_dir) = match parse_args() {
        Ok(v) => v,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    if let Some(dir) = files_dir {
        match load_files(&dir) {
            Ok(files) => {
                eprintln!(
                    "floor: {} file(s) of {} in memory",
                    files.len(),
                    dir.display()
                );
                let _ = FILES.set(files);
            }
            Err(msg) => {
                eprintln!("{msg}");
                std::process::exit(2);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async move {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .expect("socket");
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket.bind(addr).expect("bind");
        let listener = socket.listen(BACKLOG).expect("listen");
        eprintln!("floor (hyper) listening on http://{addr}");
        let builder = http1_builder();
        loop {
            let (stream, _peer) = match listener.accept().await {
                Ok(v) => v,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await; // EMFILE and such
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let conn = builder.serve_connection(
                TokioIo::new(stream),
                service_fn(move |req| handle(app, req)),
            );
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    });
}
