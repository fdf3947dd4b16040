//! Building the rustls server configuration from the `--ssl-*` options.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::version::{TLS12, TLS13};
use rustls::{RootCertStore, ServerConfig, SupportedProtocolVersion};
use tokio_rustls::TlsAcceptor;

use crate::tls::{ciphers, keys};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClientAuth {
    /// Do not ask for a client certificate.
    None,
    /// Ask; a client without one is let in, a client with an invalid one is refused.
    Optional,
    /// A valid client certificate is required.
    Required,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MinVersion {
    Tls12,
    Tls13,
}

pub(crate) struct TlsOptions {
    pub(crate) certfile: PathBuf,
    /// None: the key is in `certfile` too.
    pub(crate) keyfile: Option<PathBuf>,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) ca_certs: Option<PathBuf>,
    pub(crate) client_auth: ClientAuth,
    pub(crate) min_version: MinVersion,
    pub(crate) ciphers: Option<String>,
}

/// A loaded, checked configuration. ALPN is left empty: it depends on `--http` and is set
/// when the server is assembled (`with_alpn`).
pub(crate) struct LoadedTls {
    pub(crate) config: Arc<ServerConfig>,
    /// The server's leaf certificate as PEM (for `extensions["tls"]["server_cert"]`).
    pub(crate) server_cert_pem: Arc<str>,
}

/// What the accept loop needs for TLS connections. The certificate can be replaced while
/// serving (a reload): each handshake takes the one current when it starts, and connections
/// established before keep theirs.
pub(crate) struct TlsServer {
    current: RwLock<Arc<TlsIdentity>>,
    /// The ALPN list every replacement gets (from `--http`).
    alpn: Vec<Vec<u8>>,
    /// A client that does not finish the handshake in time is dropped.
    pub(crate) handshake_timeout: Option<Duration>,
}

/// One loaded configuration: the acceptor and the certificate it presents.
pub(crate) struct TlsIdentity {
    pub(crate) acceptor: TlsAcceptor,
    pub(crate) server_cert_pem: Arc<str>,
}

impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// The configuration for a handshake starting now: one read lock per handshake, none
    /// per request.
    pub(crate) fn current(&self) -> Arc<TlsIdentity> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// New handshakes use `loaded` from now on. It comes with its own session-ticket keys:
    /// sessions from before cannot resume past the reload, so a changed CA bundle judges
    /// every client's certificate again.
    pub(crate) fn replace(&self, loaded: &LoadedTls) {
        let identity = Arc::new(loaded.identity(&self.alpn));
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = identity;
    }
}

impl LoadedTls {
    /// The server for a given ALPN list (most preferred first).
    pub(crate) fn with_alpn(
        &self,
        alpn: &[&[u8]],
        handshake_timeout: Option<Duration>,
    ) -> TlsServer {
        let alpn: Vec<Vec<u8>> = alpn.iter().map(|p| p.to_vec()).collect();
        TlsServer {
            current: RwLock::new(Arc::new(self.identity(&alpn))),
            alpn,
            handshake_timeout,
        }
    }

    fn identity(&self, alpn: &[Vec<u8>]) -> TlsIdentity {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.to_vec();
        TlsIdentity {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            server_cert_pem: self.server_cert_pem.clone(),
        }
    }
}

pub(crate) fn pem_certificate(der: &[u8]) -> String {
    // Encoding into a String cannot fail for a certificate-sized input; fall back to an
    // empty string rather than panicking.
    der::pem::encode_string("CERTIFICATE", der::pem::LineEnding::LF, der).unwrap_or_default()
}

fn client_verifier(
    opts: &TlsOptions,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, String> {
    if opts.client_auth == ClientAuth::None {
        return Ok(None);
    }
    let Some(ca_path) = &opts.ca_certs else {
        return Err(
            "client certificate verification (--ssl-cert-reqs) needs --ssl-ca-certs".to_owned(),
        );
    };
    let mut roots = RootCertStore::empty();
    for cert in keys::load_certs("CA file", ca_path)? {
        roots.add(cert).map_err(|e| {
            format!(
                "CA file {}: a certificate is not usable as a trust anchor: {e}",
                ca_path.display()
            )
        })?;
    }
    let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    let builder = if opts.client_auth == ClientAuth::Optional {
        builder.allow_unauthenticated()
    } else {
        builder
    };
    let verifier = builder
        .build()
        .map_err(|e| format!("cannot verify client certificates: {e}"))?;
    Ok(Some(verifier))
}

/// Reads every file and checks that the certificate and key match; errors are one line.
pub(crate) fn load(opts: &TlsOptions) -> Result<LoadedTls, String> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(spec) = &opts.ciphers {
        provider.cipher_suites = ciphers::select(spec, &provider.cipher_suites)?;
    }
    let provider = Arc::new(provider);
    let versions: &[&'static SupportedProtocolVersion] = match opts.min_version {
        MinVersion::Tls12 => &[&TLS13, &TLS12],
        MinVersion::Tls13 => &[&TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| format!("--ssl-ciphers and --ssl-min-version leave nothing usable: {e}"))?;
    let builder = match client_verifier(opts, &provider)? {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let certs = keys::load_certs("certificate file", &opts.certfile)?;
    let key_path = opts.keyfile.as_deref().unwrap_or(&opts.certfile);
    let key = keys::load_private_key(key_path, opts.password.as_deref())?;
    let server_cert_pem: Arc<str> = Arc::from(pem_certificate(&certs[0]));
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        format!(
            "certificate {} and key {} cannot be used together: {e}",
            opts.certfile.display(),
            key_path.display()
        )
    })?;
    // Stateless session tickets: clients resume (TLS 1.2 and 1.3) without a full handshake
    // and without the server keeping a cache per client.
    config.ticketer = rustls::crypto::ring::Ticketer::new()
        .map_err(|e| format!("cannot set up TLS session tickets: {e}"))?;
    Ok(LoadedTls {
        config: Arc::new(config),
        server_cert_pem,
    })
}
