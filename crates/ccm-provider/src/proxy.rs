//! Which proxy a request goes through, chosen from the environment as Go's
//! `http.ProxyFromEnvironment` chooses it, so that a CCM swapped for a Go one behind the
//! same corporate proxy reaches the same servers the same way: `HTTPS_PROXY` for an
//! `https` URL and `HTTP_PROXY` for an `http` one (either name in lower case when the
//! upper-case one is empty; no `ALL_PROXY`), never for `localhost` or a loopback address,
//! and not for a host that `NO_PROXY` names: `*` (every host); a host, which matches its
//! subdomains too; `.domain` or `*.domain` (subdomains only); an IP; a CIDR; each with or
//! without `:port` (the URL's port, or its scheme's default, must then match).
//!
//! The Kubernetes client of `ccm-core` chooses its proxy so (unless the kubeconfig names a
//! `proxy-url`), and a provider's HTTP client should too. With reqwest:
//!
//! ```
//! use ccm_core::provider::proxy::EnvProxy;
//!
//! let env = EnvProxy::from_values(Some("http://proxy.corp:3128"), None, Some(".internal"));
//! assert_eq!(env.proxy_for("https", "api.cloud.example", None), Some("http://proxy.corp:3128"));
//! assert_eq!(env.proxy_for("https", "api.internal", Some(443)), None);
//! assert_eq!(env.proxy_for("https", "127.0.0.1", Some(8443)), None);
//! // reqwest::Client::builder().no_proxy().proxy(reqwest::Proxy::custom(move |url| {
//! //     env.proxy_for(url.scheme(), url.host_str()?, url.port()).map(str::to_owned)
//! // }))
//! ```
//!
//! The values are kept as written (a proxy URL may hold a user and password: [`EnvProxy`]'s
//! `Debug` leaves them out); the caller parses the one it is given.

use std::fmt;
use std::net::IpAddr;

/// The proxies of the environment and the hosts that bypass them; see the
/// [module documentation](self).
#[derive(Clone, Default)]
pub struct EnvProxy {
    https: Option<(&'static str, String)>,
    http: Option<(&'static str, String)>,
    no_proxy: NoProxy,
}

impl fmt::Debug for EnvProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |v: &Option<(&'static str, String)>| v.as_ref().map(|(name, _)| *name);
        f.debug_struct("EnvProxy")
            .field("https", &name(&self.https))
            .field("http", &name(&self.http))
            .finish_non_exhaustive()
    }
}

impl EnvProxy {
    /// Reads `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (each by its lower-case name when
    /// the upper-case one is empty), as Go reads them once per process.
    #[must_use]
    pub fn from_env() -> Self {
        let var = |upper: &'static str, lower: &'static str| {
            [upper, lower].into_iter().find_map(|name| {
                std::env::var(name)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (name, v))
            })
        };
        let no_proxy = var("NO_PROXY", "no_proxy").map(|(_, v)| v);
        Self {
            https: var("HTTPS_PROXY", "https_proxy"),
            http: var("HTTP_PROXY", "http_proxy"),
            no_proxy: NoProxy::parse(no_proxy.as_deref().unwrap_or_default()),
        }
    }

    /// The rules of these values, as if they were `HTTPS_PROXY`, `HTTP_PROXY` and
    /// `NO_PROXY`.
    #[must_use]
    pub fn from_values(https: Option<&str>, http: Option<&str>, no_proxy: Option<&str>) -> Self {
        let value = |name: &'static str, v: Option<&str>| {
            v.filter(|v| !v.trim().is_empty())
                .map(|v| (name, v.to_owned()))
        };
        Self {
            https: value("HTTPS_PROXY", https),
            http: value("HTTP_PROXY", http),
            no_proxy: NoProxy::parse(no_proxy.unwrap_or_default()),
        }
    }

    /// The proxy for a request to `host` (a name or an IP, IPv6 with or without brackets)
    /// on `port` (`None`: the scheme's default) by `scheme` (`https` or `http`; any other
    /// goes direct), as written in the environment; `None` to connect directly.
    #[must_use]
    pub fn proxy_for(&self, scheme: &str, host: &str, port: Option<u16>) -> Option<&str> {
        let (proxy, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "https" => (self.https.as_ref()?, 443),
            "http" => (self.http.as_ref()?, 80),
            _ => return None,
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host == "localhost" {
            return None;
        }
        let ip = host.parse::<IpAddr>().ok();
        if ip.is_some_and(|ip| ip.is_loopback()) {
            return None;
        }
        let port = port.unwrap_or(default_port);
        (!self.no_proxy.matches(&host, port, ip)).then_some(proxy.1.as_str())
    }

    /// The `HTTPS_PROXY` value and the variable it came from.
    #[must_use]
    pub fn https_proxy(&self) -> Option<(&'static str, &str)> {
        self.https.as_ref().map(|(name, v)| (*name, v.as_str()))
    }

    /// The `HTTP_PROXY` value and the variable it came from.
    #[must_use]
    pub fn http_proxy(&self) -> Option<(&'static str, &str)> {
        self.http.as_ref().map(|(name, v)| (*name, v.as_str()))
    }
}

/// `NO_PROXY`, parsed as Go's `httpproxy` parses it.
#[derive(Clone, Debug, Default)]
struct NoProxy {
    /// `*`: every host.
    all: bool,
    ips: Vec<(IpAddr, Option<u16>)>,
    cidrs: Vec<(IpAddr, u8)>,
    /// A domain with a leading dot, its port, and whether the domain itself matches too
    /// (an entry written without the leading dot).
    domains: Vec<(String, Option<u16>, bool)>,
}

impl NoProxy {
    fn parse(list: &str) -> Self {
        let mut no = Self::default();
        for entry in list.split(',') {
            let entry = entry.trim().to_ascii_lowercase();
            if entry.is_empty() {
                continue;
            }
            if entry == "*" {
                return Self {
                    all: true,
                    ..Self::default()
                };
            }
            if let Some(cidr) = parse_cidr(&entry) {
                no.cidrs.push(cidr);
                continue;
            }
            let (host, port) = split_host_port(&entry);
            if host.is_empty() {
                continue; // malformed: Go ignores it
            }
            if let Ok(ip) = host.parse::<IpAddr>() {
                no.ips.push((ip, port));
                continue;
            }
            let host = host.strip_prefix('*').unwrap_or(host);
            let (domain, itself) = match host.strip_prefix('.') {
                Some(_) => (host.to_owned(), false),
                None => (format!(".{host}"), true),
            };
            no.domains.push((domain, port, itself));
        }
        no
    }

    fn matches(&self, host: &str, port: u16, ip: Option<IpAddr>) -> bool {
        if self.all {
            return true;
        }
        let port_ok = |p: &Option<u16>| p.is_none_or(|p| p == port);
        if let Some(ip) = ip {
            if self.ips.iter().any(|(i, p)| *i == ip && port_ok(p)) {
                return true;
            }
            if self.cidrs.iter().any(|&(net, len)| in_cidr(ip, net, len)) {
                return true;
            }
        }
        self.domains.iter().any(|(domain, p, itself)| {
            (host.ends_with(domain.as_str()) || (*itself && host == &domain[1..])) && port_ok(p)
        })
    }
}

/// `host:port`, `[v6]:port` or a bare host; a port that is not a number leaves the entry
/// whole (as Go's `SplitHostPort` then fails and the entry is taken as a host).
fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((host, after)) = rest.split_once(']')
    {
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok());
        return (host, port);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn parse_cidr(entry: &str) -> Option<(IpAddr, u8)> {
    let (ip, len) = entry.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((ip, len))
}

fn in_cidr(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_proxy_is_read_as_go_reads_it() {
        let p = Some("http://proxy.example:3128");
        let cases = [
            // (NO_PROXY, scheme, host, port, proxied)
            ("", "https", "api.example", Some(6443), true),
            ("", "https", "127.0.0.1", Some(6443), false),
            ("", "https", "[::1]", Some(6443), false),
            ("", "https", "::1", None, false),
            ("", "https", "localhost", Some(6443), false),
            ("", "https", "LocalHost", None, false),
            ("", "https", "127.9.9.9", None, false),
            ("api.example", "https", "api.example", Some(6443), false),
            ("api.example", "https", "x.api.example", Some(6443), false),
            (".api.example", "https", "api.example", Some(6443), true),
            (".api.example", "https", "x.api.example", Some(6443), false),
            ("*.api.example", "https", "api.example", Some(6443), true),
            ("*.api.example", "https", "x.api.example", None, false),
            ("example", "https", "api.example", None, false),
            ("xample", "https", "api.example", None, true),
            (
                "api.example:6443",
                "https",
                "api.example",
                Some(6443),
                false,
            ),
            ("api.example:443", "https", "api.example", Some(6443), true),
            ("api.example:443", "https", "api.example", None, false),
            ("10.0.0.0/8", "https", "10.96.0.1", Some(443), false),
            ("10.0.0.0/8", "https", "11.0.0.1", Some(443), true),
            ("10.96.0.1", "https", "10.96.0.1", Some(443), false),
            ("10.96.0.1:6443", "https", "10.96.0.1", Some(443), true),
            ("fd00::/8", "https", "[fd00::1]", Some(443), false),
            ("[fd00::1]:443", "https", "fd00::1", None, false),
            (" foo , API.EXAMPLE ", "https", "api.example", None, false),
            ("*", "https", "api.example", None, false),
            ("foo,*", "https", "api.example", None, false),
            ("10.0.0.0/8", "https", "api.example", None, true),
            ("", "ftp", "api.example", None, false),
        ];
        for (no_proxy, scheme, host, port, want) in cases {
            let env = EnvProxy::from_values(p, None, Some(no_proxy));
            assert_eq!(
                env.proxy_for(scheme, host, port).is_some(),
                want,
                "NO_PROXY={no_proxy:?} {scheme}://{host}:{port:?}"
            );
        }
        // No HTTPS_PROXY: direct; an http URL takes HTTP_PROXY only, and no fallback.
        let none = EnvProxy::from_values(None, None, None);
        assert_eq!(none.proxy_for("https", "api.example", None), None);
        let https = EnvProxy::from_values(p, None, None);
        assert_eq!(https.proxy_for("http", "api.example", None), None);
        let http = EnvProxy::from_values(None, Some("proxy:3128"), None);
        assert_eq!(
            http.proxy_for("http", "api.example", None),
            Some("proxy:3128")
        );
        assert_eq!(http.proxy_for("https", "api.example", None), None);
    }

    #[test]
    fn debug_never_shows_a_proxy_url() {
        let env = EnvProxy::from_values(Some("http://u:pa55word@proxy:3128"), None, None);
        let shown = format!("{env:?}");
        assert!(!shown.contains("pa55word"), "{shown}");
        assert!(shown.contains("HTTPS_PROXY"), "{shown}");
    }
}
