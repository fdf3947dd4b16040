//! TLS with rustls (ring provider): loading certificates and keys, building the server
//! config, and describing each handshake for the ASGI TLS extension. Nothing here touches
//! Python except `pyconfig`, the class Python uses to load a configuration at start-up.

pub mod ciphers;
pub mod info;
pub mod keys;
pub mod pyconfig;
pub mod settings;

pub use info::TlsInfo;
pub use settings::{ClientAuth, MinVersion, TlsOptions, TlsServer};
