//! The SSRF guard: http handlers and subscribers may not reach loopback, private,
//! link-local (cloud metadata at 169.254.169.254), CGNAT, multicast, broadcast or
//! unspecified addresses, nor the IPv6 ranges that tunnel to IPv4 (NAT64
//! `64:ff9b::/96`, 6to4 `2002::/16`, Teredo `2001::/32`), unless `ALLOWED_TARGETS`
//! lists the network. The HTTP clients use no proxy (see
//! [`crate::registry::kinds::outbound`]), so these checks see the real target.
//!
//! Literal addresses are checked in the URL ([`TargetGuard::check_url`]); host names
//! are checked on every address DNS returns, at delivery time, by the HTTP client's
//! resolver ([`TargetGuard::allowed_addrs`], behind [`reqwest::dns::Resolve`] and
//! hyper's resolver), so a name that
//! later resolves to an internal address is refused too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Not `http` or `https`.
    #[error("only http:// and https:// URLs can be delivered to")]
    Scheme,
    /// The URL has no host.
    #[error("the URL has no host")]
    NoHost,
    /// A forbidden address.
    #[error("{0} is a private, loopback, link-local or otherwise internal address; {HINT}")]
    Forbidden(IpAddr),
    /// Every address the name resolves to is forbidden.
    #[error("{0} resolves only to internal addresses; {HINT}")]
    ForbiddenName(String),
}

/// What a refusal tells the operator to do.
const HINT: &str = "to deliver there, list its network in ALLOWED_TARGETS \
     (ALLOWED_TARGETS=127.0.0.0/8,::1/128 for a receiver on this machine) and restart";

/// The address policy, shared by the HTTP client and the subscribers API.
#[derive(Debug, Clone, Default)]
pub struct TargetGuard {
    allowed: Vec<IpNet>,
}

impl TargetGuard {
    /// A guard that lets `allowed` networks through although internal.
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// Ok when `ip` may be reached.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), TargetError> {
        if is_internal(ip) && !self.allowed.iter().any(|n| n.contains(&ip)) {
            Err(TargetError::Forbidden(ip))
        } else {
            Ok(())
        }
    }

    /// Checks the scheme, and the host when it is a literal address or a name
    /// that always means this machine (`localhost`, `*.localhost`: RFC 6761), so
    /// that such a target is refused when it is configured rather than at every
    /// delivery. Other names are checked on every address DNS returns, when
    /// delivering.
    pub fn check_url(&self, url: &Url) -> Result<(), TargetError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(TargetError::Scheme);
        }
        match url.host() {
            None => Err(TargetError::NoHost),
            Some(url::Host::Ipv4(ip)) => self.check_ip(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check_ip(IpAddr::V6(ip)),
            Some(url::Host::Domain(name)) if is_localhost(name) => {
                let loopback = [Ipv4Addr::LOCALHOST.into(), Ipv6Addr::LOCALHOST.into()];
                if loopback.iter().any(|ip| self.check_ip(*ip).is_ok()) {
                    Ok(())
                } else {
                    Err(TargetError::ForbiddenName(name.to_owned()))
                }
            }
            Some(url::Host::Domain(_)) => Ok(()),
        }
    }
}

impl TargetGuard {
    /// The addresses `host` resolves to that may be reached; an error when there
    /// are none ([`TargetError::ForbiddenName`]) or the lookup failed. Both
    /// delivery clients resolve through it.
    pub async fn allowed_addrs(
        &self,
        host: &str,
    ) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let found = tokio::net::lookup_host((host, 0)).await?;
        let allowed: Vec<SocketAddr> = found.filter(|a| self.check_ip(a.ip()).is_ok()).collect();
        if allowed.is_empty() {
            return Err(Box::new(TargetError::ForbiddenName(host.to_owned())));
        }
        Ok(allowed)
    }
}

impl Resolve for TargetGuard {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.clone();
        Box::pin(async move {
            let allowed = guard.allowed_addrs(name.as_str()).await?;
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// `localhost` or a name under it, which resolve to loopback addresses only.
fn is_localhost(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// True for every address a webhook must not reach by default.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_unspecified()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240 // reserved
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated)
        || ip.segments()[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible ::a.b.c.d
        || (first == 0x64 && ip.segments()[1] == 0xff9b) // NAT64: the well-known 64:ff9b::/96 and local-use 64:ff9b:1::/48
        || first == 0x2002 // 6to4 2002::/16: embeds an IPv4 address
        || (first == 0x2001 && ip.segments()[1] == 0) // Teredo 2001::/32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::ssrf::TargetGuard;
        let guard = TargetGuard::new(vec!["127.0.0.0/8".parse().expect("cidr")]);
        assert!(guard.check_ip("127.0.0.1".parse().expect("ip")).is_ok());
        assert!(
            guard
                .check_ip("169.254.169.254".parse().expect("ip"))
                .is_err()
        );
        assert!(guard.check_ip("93.184.216.34".parse().expect("ip")).is_ok());
    }

    #[test]
    fn localhost_is_refused_when_configured_unless_loopback_is_allowed() {
        let url = |u: &str| Url::parse(u).expect("url");
        let closed = TargetGuard::default();
        for u in [
            "http://localhost:9000/hook",
            "http://LocalHost./x",
            "https://api.localhost/x",
        ] {
            let err = closed.check_url(&url(u)).expect_err(u);
            assert!(
                err.to_string().contains("ALLOWED_TARGETS=127.0.0.0/8"),
                "{err}"
            );
        }
        assert!(closed.check_url(&url("http://localhost.example/x")).is_ok());
        let open = TargetGuard::new(vec!["127.0.0.0/8".parse().expect("cidr")]);
        assert!(open.check_url(&url("http://localhost:9000/hook")).is_ok());
    }

    #[test]
    fn internal_addresses_are_refused() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001::1",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(is_internal(ip), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2003::1",
            "172.32.0.1",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(!is_internal(ip), "{ip}");
        }
    }

    #[test]
    fn urls_are_checked_on_scheme_and_literal_host() {
        let guard = TargetGuard::default();
        let url = |s: &str| Url::parse(s).expect("url");
        assert_eq!(
            guard.check_url(&url("ftp://example.com/")),
            Err(TargetError::Scheme)
        );
        assert!(
            guard
                .check_url(&url("http://169.254.169.254/latest"))
                .is_err()
        );
        assert!(guard.check_url(&url("http://[::1]:8080/")).is_err());
        assert!(guard.check_url(&url("https://example.com/hook")).is_ok());
        let open = TargetGuard::new(vec!["127.0.0.0/8".parse().expect("cidr")]);
        assert!(open.check_url(&url("http://127.0.0.1:9/")).is_ok());
        assert!(open.check_url(&url("http://10.0.0.1/")).is_err());
    }

    #[tokio::test]
    async fn names_that_resolve_inside_are_refused() {
        let guard = TargetGuard::default();
        let name: Name = "localhost".parse().expect("name");
        assert!(guard.resolve(name).await.is_err());
        let open = TargetGuard::new(vec![
            "127.0.0.0/8".parse().expect("cidr"),
            "::1/128".parse().expect("cidr"),
        ]);
        let name: Name = "localhost".parse().expect("name");
        assert!(open.resolve(name).await.is_ok());
    }
}
