//! Which addresses `web_fetch` may reach when `[web_fetch] block_private = true`.
//!
//! Only globally routable unicast addresses pass. The check runs on what the
//! connection really uses, not on the text of the URL:
//! - a host name is resolved by [`PublicOnly`], the client's DNS resolver, which drops
//!   every address that does not pass; a name with no address left fails. So
//!   `localhost`, a name in `/etc/hosts` and a public name whose DNS answers
//!   `127.0.0.1` are all refused, on the first hop and on every redirect, and the
//!   connection is made to exactly the addresses that were checked (no second lookup
//!   an attacker's DNS could answer differently);
//! - an IP literal never reaches a resolver, so [`check_literal`] checks it before the
//!   first request and in the redirect policy for every later hop. The URL parser has
//!   already turned `http://2130706433/` and `http://0x7f.1/` into `127.0.0.1`.
//!
//! IPv4-mapped (`::ffff:127.0.0.1`), IPv4-compatible, NAT64 and 6to4 IPv6 addresses are
//! judged by the IPv4 address inside them, which is where they lead.

use std::error::Error;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// A request the address policy (or the scheme and redirect rules) refused. It travels
/// inside reqwest's error, and [`super::describe`] finds it there to tell the model.
#[derive(Debug)]
pub(super) struct Refused(pub String);

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Refused {}

/// Why `ip` may not be reached, or `None` when it is a public address.
pub(super) fn blocked_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let kind = if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_private() {
        "a private address"
    } else if ip.is_link_local() {
        "a link-local address"
    } else if a == 0 {
        "an unspecified (\"this network\") address"
    } else if a == 100 && (64..128).contains(&b) {
        "a carrier-grade NAT (shared) address"
    } else if a == 192 && b == 0 && c == 0 {
        "an IETF protocol address"
    } else if ip.is_documentation() {
        "a documentation address"
    } else if a == 198 && (b == 18 || b == 19) {
        "a benchmarking address"
    } else if ip.is_multicast() {
        "a multicast address"
    } else if a >= 240 {
        "a reserved or broadcast address"
    } else {
        return None;
    };
    Some(kind)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4);
    }
    let segments = ip.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    let kind = if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_unspecified() {
        "an unspecified address"
    } else if segments[..6].iter().all(|&s| s == 0) {
        // IPv4-compatible `::a.b.c.d` (deprecated): it leads to the IPv4 address.
        return blocked_v4(embedded(segments[6], segments[7])).or(Some("a reserved address"));
    } else if segments[0] == 0x64 && segments[1] == 0xff9b && segments[2..6] == [0; 4] {
        // NAT64 `64:ff9b::/96`: the gateway connects to the IPv4 address inside.
        return blocked_v4(embedded(segments[6], segments[7]));
    } else if segments[0] == 0x2002 {
        // 6to4 `2002:a.b.c.d::/48`.
        return blocked_v4(embedded(segments[1], segments[2]));
    } else if segments[0] & 0xfe00 == 0xfc00 {
        "a unique-local address"
    } else if segments[0] & 0xffc0 == 0xfe80 {
        "a link-local address"
    } else if segments[0] & 0xffc0 == 0xfec0 {
        "a site-local address"
    } else if segments[0] & 0xff00 == 0xff00 {
        "a multicast address"
    } else if segments[0] == 0x2001 && segments[1] == 0x0db8 {
        "a documentation address"
    } else if segments[0] == 0x0100 && segments[1..4] == [0; 3] {
        "a discard address"
    } else if segments[0] == 0x2001 && segments[1] < 0x0200 {
        // IETF protocol assignments, Teredo among them (it tunnels to anywhere).
        "an IETF protocol address"
    } else {
        return None;
    };
    Some(kind)
}

/// Checks a URL whose host is an IP literal (names are checked when resolved).
pub(super) fn check_literal(url: &Url) -> Result<(), Refused> {
    let Some(host) = url.host_str() else {
        return Ok(());
    };
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    match literal.parse::<IpAddr>() {
        Ok(ip) => match blocked_kind(ip) {
            Some(kind) => Err(Refused(format!("{ip} is {kind}"))),
            None => Ok(()),
        },
        Err(_) => Ok(()),
    }
}

/// The DNS resolver of the client used with `block_private`: the system's resolver,
/// with every non-public address dropped.
pub(super) struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (public, blocked): (Vec<SocketAddr>, Vec<SocketAddr>) = found
                .into_iter()
                .partition(|addr| blocked_kind(addr.ip()).is_none());
            if public.is_empty()
                && let Some(first) = blocked.first()
            {
                let ip = first.ip();
                let kind = blocked_kind(ip).unwrap_or("not public");
                let refused = Refused(format!("{host} resolves to {ip}, {kind}"));
                return Err(Box::new(refused) as _);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(text: &str) -> bool {
        blocked_kind(text.parse().unwrap()).is_some()
    }

    #[test]
    fn non_public_addresses_are_blocked() {
        for ip in [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:c0a8:0101::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ] {
            assert!(blocked(ip), "{ip} should be blocked");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert!(!blocked(ip), "{ip} should pass");
        }
    }

    #[test]
    fn literals_in_urls_are_checked() {
        let check = |url: &str| check_literal(&Url::parse(url).unwrap()).map_err(|r| r.0);
        assert_eq!(
            check("http://127.0.0.1:8080/x").unwrap_err(),
            "127.0.0.1 is a loopback address"
        );
        assert_eq!(
            check("http://[::1]/").unwrap_err(),
            "::1 is a loopback address"
        );
        // The URL parser normalizes odd IPv4 spellings; the check sees the address.
        assert!(check("http://2130706433/").is_err());
        assert!(check("http://0x7f.1/").is_err());
        assert!(check("http://[::ffff:7f00:1]/").is_err());
        assert!(check("https://example.com/").is_ok(), "names wait for DNS");
        assert!(check("http://8.8.8.8/").is_ok());
    }

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused() {
        let name: Name = "localhost".parse().unwrap();
        let Err(err) = PublicOnly.resolve(name).await else {
            panic!("localhost resolved to a public address");
        };
        let refused = err.downcast_ref::<Refused>().expect("a Refused error");
        assert!(
            refused.0.starts_with("localhost resolves to ") && refused.0.contains("loopback"),
            "{}",
            refused.0
        );
    }
}
