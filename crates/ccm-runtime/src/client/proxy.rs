//! The proxy a client reaches its API server through, chosen as client-go chooses it: the
//! kubeconfig's `proxy-url` for every request, else the environment as Go's
//! `http.ProxyFromEnvironment` reads it (`HTTPS_PROXY` for an `https` server, `HTTP_PROXY`
//! for an `http` one, either name in lower case too; never for `localhost` or a loopback
//! address; not for a server that `NO_PROXY` names by host, domain, IP or CIDR, with or
//! without a port). Through an `http://` proxy a connection is an HTTP `CONNECT` tunnel,
//! carrying the proxy URL's user and password as `Proxy-Authorization`; through a
//! `socks5://` one, a SOCKS5 connection (user and password authentication), the proxy
//! resolving the server's name. An `https://` proxy (TLS to the proxy itself) is refused,
//! naming the field. A proxy's password is never printed: [`ProxyUrl`]'s `Display` leaves
//! it out.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use ccm_provider::BoxError;
use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::ClientConfigError;

/// A proxy: where it is, how it is spoken to, and its credentials.
#[derive(Clone)]
pub(crate) struct ProxyUrl {
    /// `http://host:port` (for SOCKS too: the address the connection is made to), with
    /// neither user nor password.
    uri: Uri,
    /// `http` (a `CONNECT` tunnel), `socks5` or `socks5h` (the proxy resolves the server's
    /// name either way, as Go's dialer does).
    scheme: &'static str,
    /// `Basic` credentials from the URL's user and password, marked sensitive.
    auth: Option<HeaderValue>,
    /// The user and password, for SOCKS and to describe; never printed.
    credentials: Option<(String, String)>,
}

impl fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let authority = self.uri.authority().map_or("", |a| a.as_str());
        let scheme = self.scheme;
        match &self.credentials {
            Some((user, _)) => write!(f, "{scheme}://{user}:(password)@{authority}"),
            None => write!(f, "{scheme}://{authority}"),
        }
    }
}

impl fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl ProxyUrl {
    /// Parses a proxy URL as Go does (a value without a scheme is taken as `http://`),
    /// from `source` (an environment variable or `cluster.proxy-url`, named in errors).
    /// Only `http://` proxies are supported. Errors never repeat the value: it may hold a
    /// password.
    pub(crate) fn parse(value: &str, source: &'static str) -> Result<Self, ClientConfigError> {
        let value = value.trim();
        let with_scheme = if value.contains("://") {
            value.to_owned()
        } else {
            format!("http://{value}")
        };
        let invalid = |why: &str| {
            ClientConfigError::new(
                source,
                format!(
                    "is not a usable proxy URL: {why} (the value is not repeated here: it may hold a password)"
                ),
            )
        };
        let (scheme, rest) = with_scheme
            .split_once("://")
            .ok_or_else(|| invalid("no scheme"))?;
        let (scheme, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "http" => ("http", 80),
            "socks5" => ("socks5", 1080),
            "socks5h" => ("socks5h", 1080),
            _ => {
                return Err(invalid(&format!(
                    "the {:?} scheme is not supported, only http:// (a CONNECT tunnel) and \
                     socks5://",
                    ccm_provider::echo::echo(scheme)
                )));
            }
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let (userinfo, host_port) = match authority.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, authority),
        };
        if host_port.is_empty() {
            return Err(invalid("no host"));
        }
        let has_port = host_port
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
            && !host_port.ends_with(']');
        let host_port = if has_port {
            host_port.to_owned()
        } else {
            format!("{host_port}:{default_port}")
        };
        let uri = format!("http://{host_port}")
            .parse::<Uri>()
            .map_err(|_| invalid("the host and port cannot be parsed"))?;
        let (credentials, auth) = match userinfo {
            None => (None, None),
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let user = percent_decode(user).ok_or_else(|| invalid("a bad %-escape"))?;
                let password = percent_decode(password).ok_or_else(|| invalid("a bad %-escape"))?;
                let basic =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                let mut header = HeaderValue::from_str(&format!("Basic {basic}"))
                    .map_err(|_| invalid("the user or password is not valid in a header"))?;
                header.set_sensitive(true);
                (Some((user, password)), Some(header))
            }
        };
        Ok(Self {
            uri,
            scheme,
            auth,
            credentials,
        })
    }
}

impl ProxyUrl {
    /// `http://host:port`, and the user and password sent to it: for
    /// [`ClientUse`](super::ClientUse), never for a log.
    pub(crate) fn described(&self) -> super::ProxyUse {
        let authority = self.uri.authority().map_or("", |a| a.as_str());
        super::ProxyUse {
            url: format!("{}://{authority}", self.scheme),
            credentials: self.credentials.clone(),
        }
    }
}

/// `%XX` escapes decoded, as Go's `url.Parse` decodes a URL's user and password.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// How a client chooses its proxy.
#[derive(Clone, Debug, Default)]
pub(crate) enum ProxyChoice {
    /// No proxy, ever.
    #[default]
    Direct,
    /// The kubeconfig's `proxy-url`: every request, whatever its host (client-go's
    /// `http.ProxyURL`).
    Always(ProxyUrl),
    /// The environment's, by Go's rules ([`EnvProxy`]).
    Environment(Box<EnvProxy>),
}

impl ProxyChoice {
    /// The choice for a configuration whose `proxy-url` is `kubeconfig` (`None`: read the
    /// environment).
    pub(crate) fn new(kubeconfig: Option<&Uri>) -> Result<Self, ClientConfigError> {
        match kubeconfig {
            Some(uri) => Ok(Self::Always(ProxyUrl::parse(
                &uri.to_string(),
                "cluster.proxy-url",
            )?)),
            None => EnvProxy::from_env().map(|env| Self::Environment(Box::new(env))),
        }
    }

    /// The proxy for a request to `server`, or `None` to connect directly.
    pub(crate) fn for_server(&self, server: &Uri) -> Option<&ProxyUrl> {
        match self {
            Self::Direct => None,
            Self::Always(proxy) => Some(proxy),
            Self::Environment(env) => env.for_server(server),
        }
    }
}

/// The proxies of the environment and the hosts that bypass them, as Go's
/// `httpproxy.FromEnvironment` reads them.
#[derive(Clone, Debug, Default)]
pub(crate) struct EnvProxy {
    https: Option<ProxyUrl>,
    http: Option<ProxyUrl>,
    no_proxy: NoProxy,
}

impl EnvProxy {
    /// Reads `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (each, if empty, by its lower-case
    /// name).
    pub(crate) fn from_env() -> Result<Self, ClientConfigError> {
        let var = |upper: &'static str, lower: &'static str| {
            [upper, lower].into_iter().find_map(|name| {
                std::env::var(name)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| (name, v))
            })
        };
        Self::from_values(
            var("HTTPS_PROXY", "https_proxy"),
            var("HTTP_PROXY", "http_proxy"),
            var("NO_PROXY", "no_proxy").map(|(_, v)| v).as_deref(),
        )
    }

    /// The proxies `https` and `http` (each with the variable it came from) and the
    /// `no_proxy` list.
    pub(crate) fn from_values(
        https: Option<(&'static str, String)>,
        http: Option<(&'static str, String)>,
        no_proxy: Option<&str>,
    ) -> Result<Self, ClientConfigError> {
        // Go ignores a value it cannot parse (the client then connects directly); so do
        // we, with a warning. A scheme we cannot speak (`https`, `socks5`) is an error:
        // Go would use that proxy, and bypassing it could reach what it guards.
        let parse = |value: Option<(&'static str, String)>| match value {
            None => Ok(None),
            Some((name, v)) => match ProxyUrl::parse(&v, name) {
                Ok(url) => Ok(Some(url)),
                Err(e)
                    if v.split_once("://")
                        .is_some_and(|(scheme, _)| !scheme.eq_ignore_ascii_case("http")) =>
                {
                    Err(e)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring the proxy, as Go does");
                    Ok(None)
                }
            },
        };
        Ok(Self {
            https: parse(https)?,
            http: parse(http)?,
            no_proxy: NoProxy::parse(no_proxy.unwrap_or_default()),
        })
    }

    /// Go's `proxyForURL`: the proxy of the server's scheme, unless the server is
    /// `localhost`, a loopback address or named by `NO_PROXY`.
    fn for_server(&self, server: &Uri) -> Option<&ProxyUrl> {
        let (proxy, default_port) = match server.scheme_str() {
            Some("https") => (self.https.as_ref()?, 443),
            Some("http") => (self.http.as_ref()?, 80),
            _ => return None,
        };
        let host = server.host()?.trim_start_matches('[').trim_end_matches(']');
        let host = host.to_ascii_lowercase();
        let port = server.port_u16().unwrap_or(default_port);
        if host == "localhost" {
            return None;
        }
        let ip = host.parse::<IpAddr>().ok();
        if ip.is_some_and(|ip| ip.is_loopback()) {
            return None;
        }
        (!self.no_proxy.matches(&host, port, ip)).then_some(proxy)
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

/// The connector under TLS: a TCP connection to the server, or a `CONNECT` tunnel to it
/// through the proxy [`ProxyChoice`] picks for it.
#[derive(Clone)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    choice: ProxyChoice,
}

impl ProxyConnector {
    pub(crate) fn new(http: HttpConnector, choice: ProxyChoice) -> Self {
        Self { http, choice }
    }
}

impl tower::Service<Uri> for ProxyConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let Some(proxy) = self.choice.for_server(&dst).cloned() else {
            let connecting = tower::Service::call(&mut self.http, dst);
            return Box::pin(async move { connecting.await.map_err(Into::into) });
        };
        let shown = proxy.to_string();
        let through = move |e: &dyn std::error::Error| -> BoxError {
            format!("through the proxy {shown}: {e}").into()
        };
        if proxy.scheme.starts_with("socks5") {
            let mut socks = SocksV5::new(proxy.uri.clone(), self.http.clone()).local_dns(false);
            if let Some((user, password)) = &proxy.credentials {
                socks = socks.with_auth(user.clone(), password.clone());
            }
            let connecting = tower::Service::call(&mut socks, dst);
            return Box::pin(async move { connecting.await.map_err(|e| through(&e)) });
        }
        let mut tunnel = Tunnel::new(proxy.uri.clone(), self.http.clone());
        if let Some(auth) = &proxy.auth {
            tunnel = tunnel.with_auth(auth.clone());
        }
        let connecting = tower::Service::call(&mut tunnel, dst);
        Box::pin(async move { connecting.await.map_err(|e| through(&e)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(https: Option<&str>, no_proxy: &str) -> EnvProxy {
        EnvProxy::from_values(
            https.map(|v| ("HTTPS_PROXY", v.to_owned())),
            None,
            Some(no_proxy),
        )
        .unwrap()
    }

    fn proxied(env: &EnvProxy, server: &str) -> bool {
        env.for_server(&server.parse().unwrap()).is_some()
    }

    #[test]
    fn no_proxy_is_read_as_go_reads_it() {
        let p = Some("http://proxy.example:3128");
        let cases = [
            // (NO_PROXY, server, proxied)
            ("", "https://api.example:6443", true),
            ("", "https://127.0.0.1:6443", false),
            ("", "https://[::1]:6443", false),
            ("", "https://localhost:6443", false),
            ("", "https://127.9.9.9", false),
            ("api.example", "https://api.example:6443", false),
            ("api.example", "https://x.api.example:6443", false),
            (".api.example", "https://api.example:6443", true),
            (".api.example", "https://x.api.example:6443", false),
            ("*.api.example", "https://api.example:6443", true),
            ("*.api.example", "https://x.api.example", false),
            ("example", "https://api.example", false),
            ("xample", "https://api.example", true),
            ("api.example:6443", "https://api.example:6443", false),
            ("api.example:443", "https://api.example:6443", true),
            ("api.example:443", "https://api.example", false),
            ("10.0.0.0/8", "https://10.96.0.1:443", false),
            ("10.0.0.0/8", "https://11.0.0.1:443", true),
            ("10.96.0.1", "https://10.96.0.1:443", false),
            ("10.96.0.1:6443", "https://10.96.0.1:443", true),
            ("fd00::/8", "https://[fd00::1]:443", false),
            ("[fd00::1]:443", "https://[fd00::1]", false),
            (" foo , API.EXAMPLE ", "https://api.example", false),
            ("*", "https://api.example", false),
            ("10.0.0.0/8", "https://api.example", true),
        ];
        for (no_proxy, server, want) in cases {
            assert_eq!(
                proxied(&env(p, no_proxy), server),
                want,
                "NO_PROXY={no_proxy:?} server {server}"
            );
        }
        // No HTTPS_PROXY: direct; an http server takes HTTP_PROXY only.
        assert!(!proxied(&env(None, ""), "https://api.example"));
        assert!(!proxied(&env(p, ""), "http://api.example"));
        let http_only =
            EnvProxy::from_values(None, Some(("HTTP_PROXY", "proxy:3128".into())), None).unwrap();
        assert!(proxied(&http_only, "http://api.example"));
        assert!(!proxied(&http_only, "https://api.example"));
    }

    #[test]
    fn a_proxy_url_never_shows_its_password() {
        let url =
            ProxyUrl::parse("http://us%40er:pa55word@127.0.0.1:3128/", "HTTPS_PROXY").unwrap();
        assert_eq!(url.to_string(), "http://us@er:(password)@127.0.0.1:3128");
        let socks = ProxyUrl::parse("socks5h://u:pa55word@127.0.0.1", "HTTPS_PROXY").unwrap();
        assert_eq!(socks.to_string(), "socks5h://u:(password)@127.0.0.1:1080");
        assert!(!format!("{url:?}").contains("pa55word"));
        let auth = url.auth.as_ref().unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(
            auth,
            &format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("us@er:pa55word")
            )
        );
        // Go's default scheme and port.
        let bare = ProxyUrl::parse("proxy.example", "HTTPS_PROXY").unwrap();
        assert_eq!(bare.to_string(), "http://proxy.example:80");
        for bad in [
            "https://user:pa55word@127.0.0.1:3128",
            "socks4://user:pa55word@127.0.0.1:1080",
            "http://user:pa55word@",
            "http://user:pa55word%zz@127.0.0.1:1",
        ] {
            let e = ProxyUrl::parse(bad, "HTTPS_PROXY").unwrap_err();
            assert_eq!(e.field(), "HTTPS_PROXY");
            assert!(!e.to_string().contains("pa55word"), "{e}");
        }
    }
}
