//! The QUIC endpoint's accept loop. Stopping to accept must not close the UDP socket (the
//! connections still open use it): the endpoint refuses new connections from then on, and
//! lives until its last connection ends.

use std::sync::Arc;

use crate::server::h3::connection::serve_connection;
use crate::server::h3::quic_config;
use crate::server::{AcceptLoopGuard, Lifecycle, ServerShared};

/// The endpoint on `socket` (bound by Python at the TCP listener's host and port), or why
/// it cannot serve.
pub(crate) fn endpoint(
    socket: std::net::UdpSocket,
    shared: &ServerShared,
) -> Result<quinn::Endpoint, String> {
    let config = &shared.config;
    let (Some(tls), Some(settings)) = (&config.tls, &config.http3) else {
        return Err("HTTP/3 needs TLS (--ssl-certfile) and --http3".to_owned());
    };
    let server = quic_config::server_config(tls, config, settings.max_concurrent_streams)?;
    let runtime = quinn::default_runtime().ok_or("HTTP/3 needs the tokio runtime")?;
    quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        Some(server),
        socket,
        runtime,
    )
    .map_err(|e| format!("cannot serve HTTP/3 on the UDP socket: {e}"))
}

/// New QUIC handshakes present the certificate `TlsServer` holds now (a reload); the
/// connections established keep theirs. Not once the endpoint stopped accepting.
pub(crate) fn reload(endpoint: &quinn::Endpoint, shared: &ServerShared) -> Result<(), String> {
    let config = &shared.config;
    let (Some(tls), Some(settings)) = (&config.tls, &config.http3) else {
        return Ok(());
    };
    if *shared.lifecycle.borrow() >= Lifecycle::StopAccepting {
        return Ok(());
    }
    let server = quic_config::server_config(tls, config, settings.max_concurrent_streams)?;
    endpoint.set_server_config(Some(server));
    Ok(())
}

pub(crate) async fn accept_loop(
    endpoint: quinn::Endpoint,
    shared: Arc<ServerShared>,
    _registered: AcceptLoopGuard,
) {
    let Ok(local) = endpoint.local_addr() else {
        return;
    };
    let mut lifecycle = shared.lifecycle.subscribe();
    loop {
        if *lifecycle.borrow_and_update() >= Lifecycle::StopAccepting {
            endpoint.set_server_config(None);
            return;
        }
        tokio::select! {
            changed = lifecycle.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { return };
                let Some(tls) = &shared.config.tls else { return };
                let cert = tls.current().server_cert_pem.clone();
                tokio::spawn(serve_connection(incoming, local, cert, shared.clone()));
            }
        }
    }
}
