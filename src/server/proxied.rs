//! Reading a PROXY protocol header off a new connection from a trusted peer, before TLS or
//! HTTP: the addresses it names become the connection's (`ConnInfo`), so the scope's
//! `client`/`server` and the access log show the proxied client. Runs in tokio, once per
//! connection, only with `--proxy-protocol` on.

use bytes::BytesMut;
use tokio::io::AsyncRead;

use crate::bridge::{ConnInfo, Event, LocalAddr, LogText, Wakeup};
use crate::proxy_protocol::{parse, Parsed, ProxyProtocol};
use crate::server::detect::{read_some, ReplayRewrite};

/// Reads the header and returns the stream with whatever came after it (read in the same
/// packets) to replay first; None when the connection is to close: no header where one is
/// required, a malformed one, or the peer left first (a debug line says which).
pub(crate) async fn read_header<S: AsyncRead + Unpin>(
    mut io: S,
    info: &mut ConnInfo,
    settings: &ProxyProtocol,
    wakeup: &Wakeup,
) -> Option<ReplayRewrite<S>> {
    let mut buf = BytesMut::new();
    loop {
        match parse(&buf, settings.versions) {
            Parsed::Incomplete => match read_some(&mut io, &mut buf).await {
                Ok(n) if n > 0 => {}
                _ => {
                    refuse(
                        info,
                        settings,
                        wakeup,
                        "the peer left before the header ended",
                    );
                    return None;
                }
            },
            Parsed::Absent => return Some(ReplayRewrite::with_prefix(io, buf.freeze())),
            Parsed::Header { len, addresses } => {
                let rest = buf.split_off(len);
                if let Some((client, server)) = addresses {
                    let socket_on_this_host = info.socket_on_this_host;
                    *info = ConnInfo::new(Some(client), LocalAddr::Tcp(server));
                    info.socket_on_this_host = socket_on_this_host;
                }
                return Some(ReplayRewrite::with_prefix(io, rest.freeze()));
            }
            Parsed::Invalid(reason) => {
                refuse(info, settings, wakeup, reason);
                return None;
            }
        }
    }
}

/// The debug line for a connection closed without a usable header.
pub(crate) fn refuse(info: &ConnInfo, settings: &ProxyProtocol, wakeup: &Wakeup, reason: &str) {
    if !settings.log_refusals {
        return;
    }
    let peer = match &info.peer {
        Some(peer) => crate::bridge::host_port(peer),
        None => "a Unix socket client".to_owned(),
    };
    let text = format!("PROXY protocol: closed the connection from {peer}: {reason}");
    wakeup.push(Event::Debug(Box::new(LogText(text))));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy_protocol::{TrustedPeers, Versions};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings(versions: Versions) -> ProxyProtocol {
        ProxyProtocol {
            versions,
            trusted: TrustedPeers::parse(&["*"]).unwrap(),
            timeout: Duration::from_secs(1),
            log_refusals: false,
        }
    }

    fn socket_info() -> ConnInfo {
        ConnInfo::new(
            Some("127.0.0.1:4000".parse().unwrap()),
            LocalAddr::Tcp("127.0.0.1:8000".parse().unwrap()),
        )
    }

    async fn run(chunks: &[&[u8]], versions: Versions) -> Option<(ConnInfo, Vec<u8>)> {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let wakeup = Wakeup::new().expect("an eventfd");
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for chunk in chunks {
                client.write_all(&chunk).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut info = socket_info();
        let replay = read_header(server, &mut info, &settings(versions), &wakeup).await;
        writer.await.unwrap();
        let mut rest = Vec::new();
        replay?.read_to_end(&mut rest).await.unwrap();
        Some((info, rest))
    }

    #[tokio::test]
    async fn takes_the_addresses_and_replays_what_follows() {
        let (info, rest) = run(
            &[
                b"PROXY TCP4 192.0.2.1 ",
                b"198.51.100.2 5",
                b"6324 443\r\nGET / HTTP/1.1\r\n",
            ],
            Versions::V1,
        )
        .await
        .unwrap();
        assert_eq!(info.peer, Some("192.0.2.1:56324".parse().unwrap()));
        assert_eq!(&*info.peer_host, "192.0.2.1");
        assert!(
            matches!(info.local, LocalAddr::Tcp(a) if a == "198.51.100.2:443".parse().unwrap())
        );
        assert_eq!(rest, b"GET / HTTP/1.1\r\n");
        // The socket's own peer (a proxy on this host) still decides `--sendfile auto`.
        assert!(info.socket_on_this_host);
    }

    #[tokio::test]
    async fn auto_serves_a_plain_connection_and_unknown_keeps_the_socket() {
        let (info, rest) = run(&[b"GET / HTTP/1.1\r\n\r\n"], Versions::Any)
            .await
            .unwrap();
        assert_eq!(rest, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(info.peer, socket_info().peer);
        let (info, rest) = run(&[b"PROXY UNKNOWN\r\nx"], Versions::Any).await.unwrap();
        assert_eq!((info.peer, rest), (socket_info().peer, b"x".to_vec()));
    }

    #[tokio::test]
    async fn closes_on_a_missing_malformed_or_truncated_header() {
        assert!(run(&[b"GET / HTTP/1.1\r\n\r\n"], Versions::V1)
            .await
            .is_none());
        assert!(run(&[b"PROXY TCP4 1.2.3.4\r\n"], Versions::V1)
            .await
            .is_none());
        assert!(run(&[b"PROXY TCP4 1.2.3.4 "], Versions::V1).await.is_none());
        assert!(run(&[], Versions::V2).await.is_none());
    }
}
