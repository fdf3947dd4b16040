//! h3load: `h3load --port P --ca ca.pem [--host 127.0.0.1] [--name localhost] [--path /]
//! [--connections C] [--streams S] [--duration SECS]`. C connections, each keeping S
//! requests in flight, for the given time; prints requests, failures and req/s as one JSON
//! line. Bodies are read and dropped. With `H3LOAD_STATS` set in the environment, each
//! connection's quinn statistics (datagrams, frames by type, rtt, cwnd, congestion events)
//! go to stderr at the end: where a stall would show (STREAMS_BLOCKED, DATA_BLOCKED, losses).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Buf;

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
    let quic = conn.clone();
    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let uri: http::Uri = format!("https://{}:{}{}", args.name, args.port, args.path)
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    let mut tasks = Vec::new();
    for _ in 0..args.streams {
        let mut sender = sender.clone();
        let uri = uri.clone();
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let req = http::Request::get(uri.clone()).body(()).unwrap_or_default();
                let result = async {
                    let mut stream = sender.send_request(req).await.ok()?;
                    stream.finish().await.ok()?;
                    let resp = stream.recv_response().await.ok()?;
                    let mut n = 0u64;
                    while let Some(chunk) = stream.recv_data().await.ok()? {
                        n += chunk.remaining() as u64;
                    }
                    (resp.status() == 200).then_some(n)
                }
                .await;
                match result {
                    Some(n) => {
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                        counts.bytes.fetch_add(n, Ordering::Relaxed);
                    }
                    None => {
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
        eprintln!("{:#?}", quic.stats());
    }
    Ok(())
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
