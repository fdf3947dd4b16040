//! The peers whose PROXY header is believed: `--forwarded-allow-ips` as IP networks.

use std::net::{IpAddr, SocketAddr};

/// One network: an address and how many leading bits must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                masked(u32::from(net).into(), self.prefix, 32)
                    == masked(u32::from(ip).into(), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                masked(u128::from(net), self.prefix, 128)
                    == masked(u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// The top `prefix` bits of a `width`-bit address.
fn masked(bits: u128, prefix: u8, width: u32) -> u128 {
    let prefix = u32::from(prefix).min(width);
    if prefix == 0 {
        return 0;
    }
    bits >> (width - prefix)
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct TrustedPeers {
    /// `*`: every peer, Unix socket peers included.
    all: bool,
    networks: Vec<Network>,
}

impl TrustedPeers {
    /// From entries such as `*`, `10.0.0.0/8`, `::1/128` (as Python's `TrustedHosts` lists
    /// them for socket peers); an error names the entry.
    pub(crate) fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut peers = TrustedPeers::default();
        for entry in entries {
            let entry = entry.as_ref().trim();
            if entry == "*" {
                peers.all = true;
                continue;
            }
            let (addr, prefix) = entry.split_once('/').unwrap_or((entry, ""));
            let addr: IpAddr = addr
                .trim_matches(|c| c == '[' || c == ']')
                .parse()
                .map_err(|_| format!("{entry:?} is not an IP address or network"))?;
            let addr = addr.to_canonical();
            let width = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = if prefix.is_empty() {
                width
            } else {
                prefix
                    .parse::<u8>()
                    .ok()
                    .filter(|&p| p <= width)
                    .ok_or_else(|| format!("{entry:?} has an invalid prefix length"))?
            };
            peers.networks.push(Network { addr, prefix });
        }
        Ok(peers)
    }

    /// Whether a connection from `peer` (None: a Unix socket peer, trusted only with `*`, as
    /// for proxy headers) may send a PROXY header.
    pub(crate) fn trusts(&self, peer: Option<&SocketAddr>) -> bool {
        if self.all {
            return true;
        }
        let Some(peer) = peer else {
            return false;
        };
        let ip = peer.ip().to_canonical();
        self.networks.iter().any(|net| net.contains(ip))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn matches_addresses_and_networks() {
        let trusted = TrustedPeers::parse(&["127.0.0.1", "10.0.0.0/8", "fd00::/8"]).unwrap();
        assert!(trusted.trusts(Some(&peer("127.0.0.1:5000"))));
        assert!(!trusted.trusts(Some(&peer("127.0.0.2:5000"))));
        assert!(trusted.trusts(Some(&peer("10.200.3.4:1"))));
        assert!(!trusted.trusts(Some(&peer("11.0.0.1:1"))));
        assert!(trusted.trusts(Some(&peer("[fd12::1]:1"))));
        assert!(!trusted.trusts(Some(&peer("[fe80::1]:1"))));
        // A dual-stack socket reports IPv4 peers as mapped IPv6 addresses.
        assert!(trusted.trusts(Some(&peer("[::ffff:127.0.0.1]:80"))));
        assert!(!trusted.trusts(None), "a Unix socket peer needs *");
    }

    #[test]
    fn star_trusts_everyone_and_zero_prefixes_match_their_family() {
        let all = TrustedPeers::parse(&["*"]).unwrap();
        assert!(all.trusts(None));
        assert!(all.trusts(Some(&peer("8.8.8.8:53"))));
        let v4 = TrustedPeers::parse(&["0.0.0.0/0"]).unwrap();
        assert!(v4.trusts(Some(&peer("8.8.8.8:53"))));
        assert!(!v4.trusts(Some(&peer("[2001:db8::1]:53"))));
        assert!(!TrustedPeers::parse::<&str>(&[])
            .unwrap()
            .trusts(Some(&peer("1.1.1.1:1"))));
    }

    #[test]
    fn bad_entries_are_named() {
        assert!(TrustedPeers::parse(&["10.0.0.0/33"])
            .unwrap_err()
            .contains("10.0.0.0/33"));
        assert!(TrustedPeers::parse(&["proxy.example"]).is_err());
    }
}
