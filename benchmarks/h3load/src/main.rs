//! h3load: `h3load --port P --ca ca.pem [--host 127.0.0.1] [--name localhost] [--path /]
//! [--connections C] [--streams S] [--duration SECS]`. C connections, each keeping S
//! requests in flight, for the given time; prints requests, failures and req/s as one JSON
//! line. Bodies are read and dropped (their lengths counted); a request counts as done
//! when its whole response was read, well formed, with status 200. The HTTP/3 framing is
//! wire.rs, on quinn's streams directly. With `H3LOAD_STATS` set in the environment, each
//! connection's quinn statistics (datagrams, frames by type, rtt, cwnd, congestion events)
//! go to stderr at the end: where a stall would show (STREAMS_BLOCKED, DATA_BLOCKED, losses).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

mod wire;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    host: String,
    port: u16,
    name: String,
    ca: String,
    path: String,
    connections: usize,
    streams: usize,
    duration: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        host: "127.0.0.1".into(),
        port: 0,
        name: "localhost".into(),
        ca: String::new(),
        path: "/".into(),
        connections: 4,
        streams: 16,
        duration: Duration::from_secs(5),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("bad value for {flag}: {value}");
        match flag.as_str() {
            "--host" => args.host = value.clone(),
            "--port" => args.port = value.parse().map_err(|_| bad())?,
            "--name" => args.name = value.clone(),
            "--ca" => args.ca = value.clone(),
            "--path" => args.path = value.clone(),
            "--connections" => args.connections = value.parse().map_err(|_| bad())?,
            "--streams" => args.streams = value.parse().map_err(|_| bad())?,
            "--duration" => {
                let secs: f64 = value.parse().map_err(|_| bad())?;
                args.duration = Duration::from_secs_f64(secs)
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.port == 0 || args.ca.is_empty() {
        return Err("--port and --ca are required".into());
    }
    Ok(args)
}

fn client_config(ca: &str) -> Result<quinn::ClientConfig, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(ca).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    Ok(quinn::ClientConfig::new(Arc::new(crypto)))
}

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    bytes: AtomicU64,
}

async fn one_connection(
    endpoint: quinn::Endpoint,
    addr: SocketAddr,
    args: Arc<Args>,
    deadline: Instant,
    counts: Arc<Counts>,
) -> Result<(), String> {
    let conn = endpoint
        .connect(addr, &args.name)
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    // Our control stream: its type and an empty SETTINGS frame (every setting at its
    // default, so no dynamic QPACK table). It stays open while the connection lives:
    // closing it is a connection error (RFC 9114 section 6.2.1).
    let mut control = conn.open_uni().await.map_err(|e| e.to_string())?;
    let mut prelude = Vec::new();
    for v in [wire::STREAM_CONTROL, wire::FRAME_SETTINGS, 0] {
        wire::quic_varint::put(&mut prelude, v);
    }
    control
        .write_all(&prelude)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(drain_peer_streams(conn.clone()));
    let authority = format!("{}:{}", args.name, args.port);
    let request = Bytes::from(wire::request_headers_frame(&authority, &args.path));
    let mut tasks = Vec::new();
    for _ in 0..args.streams {
        let conn = conn.clone();
        let request = request.clone();
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            let mut reader = wire::ResponseReader::default();
            while Instant::now() < deadline {
                reader.reset();
                match one_request(&conn, &request, &mut reader).await {
                    Ok(()) => {
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                        counts.bytes.fetch_add(reader.body_bytes, Ordering::Relaxed);
                    }
                    Err(()) => {
                        counts.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    if std::env::var_os("H3LOAD_STATS").is_some() {
        eprintln!("{:#?}", conn.stats());
    }
    conn.close(H3_NO_ERROR.into(), b"");
    drop(control);
    Ok(())
}

const H3_NO_ERROR: u32 = 0x100;

/// One GET on a new request stream: the HEADERS frame, the stream's end, then the whole
/// response read; Ok only for a well-formed response with status 200.
async fn one_request(
    conn: &quinn::Connection,
    request: &Bytes,
    reader: &mut wire::ResponseReader,
) -> Result<(), ()> {
    let (mut send, mut recv) = conn.open_bi().await.map_err(drop)?;
    send.write_chunk(request.clone()).await.map_err(drop)?;
    send.finish().map_err(drop)?;
    while let Some(chunk) = recv.read_chunk(usize::MAX, true).await.map_err(drop)? {
        reader.feed(&chunk.bytes).map_err(drop)?;
    }
    match reader.finish() {
        Ok(200) => Ok(()),
        _ => Err(()),
    }
}

/// The server's unidirectional streams (its control stream, QPACK encoder and decoder
/// streams) are read and dropped: with no dynamic table there is nothing in them this
/// client acts on, and leaving them unread would hold the server's stream credit.
async fn drain_peer_streams(conn: quinn::Connection) {
    while let Ok(mut recv) = conn.accept_uni().await {
        tokio::spawn(
            async move { while let Ok(Some(_)) = recv.read_chunk(usize::MAX, true).await {} },
        );
    }
}

fn main() {
    let args = match parse_args() {
        Ok(args) => Arc::new(args),
        Err(e) => {
            eprintln!("h3load: {e}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let config = match client_config(&args.ca) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("h3load: {e}");
                std::process::exit(2);
            }
        };
        let addr: SocketAddr = format!("{}:{}", args.host, args.port)
            .parse()
            .expect("an IP address for --host");
        let mut endpoint =
            quinn::Endpoint::client("0.0.0.0:0".parse().expect("an address")).expect("a socket");
        endpoint.set_default_client_config(config);
        let counts = Arc::new(Counts::default());
        let started = Instant::now();
        let deadline = started + args.duration;
        let mut conns = Vec::new();
        for _ in 0..args.connections {
            conns.push(tokio::spawn(one_connection(
                endpoint.clone(),
                addr,
                args.clone(),
                deadline,
                counts.clone(),
            )));
        }
        let mut errors = Vec::new();
        for conn in conns {
            if let Ok(Err(e)) = conn.await {
                errors.push(e);
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let ok = counts.ok.load(Ordering::Relaxed);
        println!(
            "{{\"requests\": {ok}, \"failed\": {}, \"bytes\": {}, \"seconds\": {elapsed:.3}, \"rps\": {:.1}, \"connection_errors\": {:?}}}",
            counts.failed.load(Ordering::Relaxed),
            counts.bytes.load(Ordering::Relaxed),
            ok as f64 / elapsed,
            errors,
        );
        endpoint.close(0u32.into(), b"");
    });
}
