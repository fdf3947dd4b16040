//! TLS with rustls (ring provider): loading certificates and keys, building the server
//! config, and describing each handshake for the ASGI TLS extension. No Python: the class
//! Python loads a configuration through is `core::tls_config`.

pub(crate) mod ciphers;
pub(crate) mod info;
pub(crate) mod keys;
pub(crate) mod settings;

pub(crate) use info::TlsInfo;
pub(crate) use settings::TlsServer;
