//! What one TLS connection negotiated, as plain data for the ASGI TLS extension. Computed
//! once per connection in tokio, read by the loop thread for each request's scope.

use std::sync::Arc;

use der::Decode;
use rustls::ServerConnection;
use rustls_pki_types::CertificateDer;
use x509_cert::Certificate;

use crate::tls::settings::pem_certificate;

#[derive(Debug)]
pub(crate) struct TlsInfo {
    /// The server's certificate (PEM), shared by every connection.
    pub(crate) server_cert: Arc<str>,
    /// The client's certificates as PEM, leaf first; empty when it sent none.
    pub(crate) client_cert_chain: Vec<String>,
    /// The client leaf's subject as an RFC 4514 string.
    pub(crate) client_cert_name: Option<String>,
    /// The TLS version number (0x0303 for TLS 1.2, 0x0304 for TLS 1.3).
    pub(crate) tls_version: Option<u16>,
    /// The IANA number of the negotiated cipher suite.
    pub(crate) cipher_suite: Option<u16>,
}

/// TLS 1.3's version number: QUIC runs no other (RFC 9001 §4.2).
const TLS13: u16 = 0x0304;

impl TlsInfo {
    pub(crate) fn new(conn: &ServerConnection, server_cert: Arc<str>) -> Self {
        let mut info = TlsInfo::from_chain(conn.peer_certificates().unwrap_or(&[]), server_cert);
        info.tls_version = conn.protocol_version().map(u16::from);
        info.cipher_suite = conn.negotiated_cipher_suite().map(|s| u16::from(s.suite()));
        info
    }

    /// A QUIC connection's: TLS 1.3 always; the cipher suite stays unknown (None), as quinn
    /// does not report which one the handshake chose.
    pub(crate) fn quic(chain: &[CertificateDer<'_>], server_cert: Arc<str>) -> Self {
        let mut info = TlsInfo::from_chain(chain, server_cert);
        info.tls_version = Some(TLS13);
        info
    }

    fn from_chain(chain: &[CertificateDer<'_>], server_cert: Arc<str>) -> Self {
        let client_cert_name = chain.first().and_then(|leaf| {
            // The handshake verified the certificate; should its subject still not decode
            // here, report no name rather than fail the connection.
            Certificate::from_der(leaf.as_ref())
                .ok()
                .map(|c| c.tbs_certificate.subject.to_string())
        });
        TlsInfo {
            server_cert,
            client_cert_chain: chain.iter().map(|c| pem_certificate(c.as_ref())).collect(),
            client_cert_name,
            tls_version: None,
            cipher_suite: None,
        }
    }
}
