//! `--ssl-ciphers`: names to rustls cipher suites. rustls only implements modern AEAD suites,
//! so this is a selection among those, not an OpenSSL cipher-string language.

use rustls::SupportedCipherSuite;

/// OpenSSL's names for the TLS 1.2 suites rustls implements (TLS 1.3 suites have none of
/// their own: OpenSSL uses the IANA names there).
const OPENSSL_NAMES: &[(&str, &str)] = &[
    (
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
    ),
    (
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
    ),
    (
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
    ),
    (
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        "ECDHE-RSA-CHACHA20-POLY1305",
    ),
];

/// rustls' name for a suite ("TLS13_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_…").
fn rustls_name(suite: &SupportedCipherSuite) -> String {
    let id = suite.suite();
    id.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{id:?}"))
}

/// Whether `name` (upper-cased) designates `suite` under any of its accepted spellings.
fn matches(suite: &SupportedCipherSuite, name: &str) -> bool {
    let canonical = rustls_name(suite);
    if name == canonical {
        return true;
    }
    // IANA spells the TLS 1.3 suites TLS_…, rustls TLS13_….
    if let Some(rest) = canonical.strip_prefix("TLS13_") {
        if name.strip_prefix("TLS_") == Some(rest) {
            return true;
        }
    }
    OPENSSL_NAMES
        .iter()
        .any(|(iana, openssl)| *iana == canonical && *openssl == name)
}

/// The suites `spec` names (separated by `:`, `,` or spaces), in the order given. Unknown
/// names are an error listing what is available.
pub(crate) fn select(
    spec: &str,
    available: &[SupportedCipherSuite],
) -> Result<Vec<SupportedCipherSuite>, String> {
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    for raw in spec.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        let name = raw.trim().to_ascii_uppercase();
        let Some(suite) = available.iter().find(|s| matches(s, &name)) else {
            let known: Vec<String> = available.iter().map(rustls_name).collect();
            return Err(format!(
                "unknown or unsupported cipher suite {raw:?} in --ssl-ciphers (available: {})",
                known.join(", ")
            ));
        };
        if !chosen.iter().any(|c| c.suite() == suite.suite()) {
            chosen.push(*suite);
        }
    }
    if chosen.is_empty() {
        return Err("--ssl-ciphers names no cipher suite".to_owned());
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<SupportedCipherSuite> {
        rustls::crypto::ring::default_provider().cipher_suites
    }

    #[test]
    fn accepts_rustls_iana_and_openssl_names() {
        let got = select(
            "TLS13_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256,ecdhe-rsa-aes256-gcm-sha384",
            &all(),
        )
        .unwrap();
        let names: Vec<String> = got.iter().map(rustls_name).collect();
        assert_eq!(
            names,
            [
                "TLS13_AES_128_GCM_SHA256",
                "TLS13_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
            ]
        );
    }

    #[test]
    fn rejects_unknown_names() {
        let err = select("TLS_AES_128_GCM_SHA256:RC4-MD5", &all()).unwrap_err();
        assert!(err.contains("RC4-MD5"), "{err}");
        assert!(select(" : ", &all()).is_err());
    }

    #[test]
    fn duplicates_collapse() {
        let got = select("TLS_AES_128_GCM_SHA256:TLS13_AES_128_GCM_SHA256", &all()).unwrap();
        assert_eq!(got.len(), 1);
    }
}
