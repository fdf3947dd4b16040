//! Reading certificates and private keys from PEM files. Errors are one-line strings that
//! name the file, because they end up as the start-up error a user reads.

use std::path::Path;

use pkcs8::EncryptedPrivateKeyInfo;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {what} {}: {e}", path.display()))
}

/// Every certificate in a PEM file, in file order (leaf first for a chain).
pub(crate) fn load_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let data = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&data)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what} {} is not valid PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {} contains no PEM certificate",
            path.display()
        ));
    }
    Ok(certs)
}

/// The private key in a PEM file: PKCS#8, PKCS#1 (RSA) or SEC1 (EC), or an encrypted PKCS#8
/// key when `password` is given.
pub(crate) fn load_private_key(
    path: &Path,
    password: Option<&[u8]>,
) -> Result<PrivateKeyDer<'static>, String> {
    let data = read("key file", path)?;
    let shown = path.display();
    if let Some(block) = pem_block(&data, "ENCRYPTED PRIVATE KEY") {
        let Some(password) = password else {
            return Err(format!(
                "key file {shown} is encrypted: give its password (--ssl-keyfile-password)"
            ));
        };
        return decrypt_pkcs8(block, password).map_err(|e| format!("key file {shown}: {e}"));
    }
    if contains(&data, b"Proc-Type: 4,ENCRYPTED") {
        // OpenSSL's legacy PEM encryption (MD5-based key derivation): refuse with the fix.
        return Err(format!(
            "key file {shown} uses OpenSSL's legacy PEM encryption, which is not supported; \
             convert it with `openssl pkcs8 -topk8 -v2 aes-256-cbc`"
        ));
    }
    match PrivateKeyDer::from_pem_slice(&data) {
        Ok(key) => Ok(key),
        Err(pem::Error::NoItemsFound) => Err(format!(
            "key file {shown} contains no PEM private key (PKCS#8, PKCS#1 or SEC1)"
        )),
        Err(e) => Err(format!("key file {shown} is not valid PEM: {e}")),
    }
}

fn decrypt_pkcs8(block: &str, password: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    let (_, document) =
        der::Document::from_pem(block).map_err(|e| format!("invalid encrypted key: {e}"))?;
    let info = EncryptedPrivateKeyInfo::try_from(document.as_bytes())
        .map_err(|e| format!("invalid encrypted key: {e}"))?;
    // A wrong password shows up as bad padding or as garbage that is not a PKCS#8 key.
    let secret = info.decrypt(password).map_err(|_| {
        "cannot decrypt the key: wrong password (--ssl-keyfile-password) or an unsupported \
         encryption scheme"
            .to_owned()
    })?;
    Ok(PrivatePkcs8KeyDer::from(secret.as_bytes().to_vec()).into())
}

/// The first `-----BEGIN label-----` … `-----END label-----` block of a PEM file, as text.
fn pem_block<'a>(data: &'a [u8], label: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(data).ok()?;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)?;
    let stop = text[start..].find(&end)? + start + end.len();
    Some(&text[start..stop])
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_pem_block_among_others() {
        let text = b"junk\n-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\
                     -----BEGIN ENCRYPTED PRIVATE KEY-----\nBBBB\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let block = pem_block(text, "ENCRYPTED PRIVATE KEY").unwrap();
        assert!(block.starts_with("-----BEGIN ENCRYPTED"));
        assert!(block.ends_with("KEY-----"));
        assert!(block.contains("BBBB") && !block.contains("AAAA"));
        assert!(pem_block(text, "RSA PRIVATE KEY").is_none());
    }

    #[test]
    fn missing_files_name_the_path() {
        let err = load_certs("certificate file", Path::new("/nonexistent/c.pem")).unwrap_err();
        assert!(err.contains("/nonexistent/c.pem"), "{err}");
        let err = load_private_key(Path::new("/nonexistent/k.pem"), None).unwrap_err();
        assert!(err.contains("/nonexistent/k.pem"), "{err}");
    }
}
