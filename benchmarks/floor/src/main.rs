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
//!     floor --host 127.0.0.1 --port 8000 [--app app|starlette|fastapi]
//!
//! `--app` picks which app's responses to mimic (`app`, the default: benchmarks/app.py).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, SERVER};
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

#[derive(Clone, Copy, PartialEq, Eq)]
enum App {
    /// benchmarks/app.py: content-type, then content-length
    Plain,
    /// Starlette's PlainTextResponse: content-length, then content-type with a charset
    Starlette,
    /// FastAPI's JSONResponse for the pydantic model of benchmarks/fw_app.py (Starlette's
    /// header order too)
    FastApi,
}

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
        App::Starlette => respond(
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

fn parse_args() -> Result<(SocketAddr, App), String> {
    let mut host = "127.0.0.1".to_string();
    let mut port = "8000".to_string();
    let mut app = App::Plain;
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
                    other => return Err(format!("unknown --app {other:?}")),
                }
            }
            "-h" | "--help" => {
                return Err(
                    "usage: floor [--host H] [--port P] [--app app|starlette|fastapi]".into(),
                )
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let addr = format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("bad address {host}:{port}: {e}"))?;
    Ok((addr, app))
}

fn main() {
    let (addr, app) = match parse_args() {
        Ok(v) => v,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
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
