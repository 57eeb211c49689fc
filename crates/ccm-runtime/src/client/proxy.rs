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
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine;
use ccm_provider::BoxError;
use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpStream;

use super::ClientConfigError;
use super::auth::{ExecIdentity, IdentityGeneration};

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
#[derive(Clone, Debug)]
pub(crate) enum ProxyChoice {
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
            Self::Always(proxy) => Some(proxy),
            Self::Environment(env) => env.for_server(server),
        }
    }
}

/// The environment's proxies, parsed, and Go's rules for when to use them
/// ([`ccm_provider::proxy::EnvProxy`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct EnvProxy {
    rules: ccm_provider::proxy::EnvProxy,
    https: Option<ProxyUrl>,
    http: Option<ProxyUrl>,
}

impl EnvProxy {
    /// Reads `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (each, if empty, by its lower-case
    /// name).
    pub(crate) fn from_env() -> Result<Self, ClientConfigError> {
        Self::from_rules(ccm_provider::proxy::EnvProxy::from_env())
    }

    /// Parses the proxies of `rules`. Go ignores a value it cannot parse (the client then
    /// connects directly); so do we, with a warning. A scheme we cannot speak (`https`) is
    /// an error: Go would use that proxy, and bypassing it could reach what it guards.
    pub(crate) fn from_rules(
        rules: ccm_provider::proxy::EnvProxy,
    ) -> Result<Self, ClientConfigError> {
        let parse = |value: Option<(&'static str, &str)>| match value {
            None => Ok(None),
            Some((name, v)) => match ProxyUrl::parse(v, name) {
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
            https: parse(rules.https_proxy())?,
            http: parse(rules.http_proxy())?,
            rules,
        })
    }

    /// The proxy for `server` by Go's rules.
    fn for_server(&self, server: &Uri) -> Option<&ProxyUrl> {
        let scheme = server.scheme_str()?;
        self.rules
            .proxy_for(scheme, server.host()?, server.port_u16())?;
        match scheme {
            "https" => self.https.as_ref(),
            _ => self.http.as_ref(),
        }
    }
}

/// The connector under TLS: a TCP connection to the server, or a `CONNECT` tunnel to it
/// through the proxy [`ProxyChoice`] picks for it.
/// Each connection is marked with the generation of the exec plugin's client certificate
/// current when it was made ([`IdentityGeneration`], in its responses' extensions), for
/// the connections of a replaced certificate to be retired.
#[derive(Clone)]
pub(crate) struct ProxyConnector {
    http: HttpConnector,
    choice: ProxyChoice,
    identity: Option<Arc<ExecIdentity>>,
}

impl ProxyConnector {
    pub(crate) fn new(
        http: HttpConnector,
        choice: ProxyChoice,
        identity: Option<Arc<ExecIdentity>>,
    ) -> Self {
        Self {
            http,
            choice,
            identity,
        }
    }
}

/// A connection, and the client certificate generation it was made with.
pub(crate) struct Marked {
    inner: TokioIo<TcpStream>,
    generation: Option<u64>,
}

impl Connection for Marked {
    fn connected(&self) -> Connected {
        let connected = self.inner.connected();
        match self.generation {
            Some(generation) => connected.extra(IdentityGeneration(generation)),
            None => connected,
        }
    }
}

impl hyper::rt::Read for Marked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Marked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tower::Service<Uri> for ProxyConnector {
    type Response = Marked;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower::Service::<Uri>::poll_ready(&mut self.http, cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let generation = self.identity.as_ref().map(|i| i.generation());
        let mark = move |inner| Marked { inner, generation };
        let Some(proxy) = self.choice.for_server(&dst).cloned() else {
            let connecting = tower::Service::call(&mut self.http, dst);
            return Box::pin(async move { connecting.await.map(mark).map_err(Into::into) });
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
            return Box::pin(async move { connecting.await.map(mark).map_err(|e| through(&e)) });
        }
        let mut tunnel = Tunnel::new(proxy.uri.clone(), self.http.clone());
        if let Some(auth) = &proxy.auth {
            tunnel = tunnel.with_auth(auth.clone());
        }
        let connecting = tower::Service::call(&mut tunnel, dst);
        Box::pin(async move { connecting.await.map(mark).map_err(|e| through(&e)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environments_proxy_is_chosen_by_gos_rules() {
        let env = |https: &str, no_proxy: &str| {
            EnvProxy::from_rules(ccm_provider::proxy::EnvProxy::from_values(
                Some(https),
                None,
                Some(no_proxy),
            ))
        };
        let proxied = |env: &EnvProxy, server: &str| {
            env.for_server(&server.parse().unwrap())
                .map(ToString::to_string)
        };
        let with = env("http://u:pa55word@proxy.example:3128", "10.0.0.0/8").unwrap();
        assert_eq!(
            proxied(&with, "https://api.example:6443").as_deref(),
            Some("http://u:(password)@proxy.example:3128")
        );
        assert_eq!(proxied(&with, "https://10.96.0.1"), None);
        assert_eq!(proxied(&with, "https://127.0.0.1:6443"), None);
        // What Go cannot parse it ignores; a scheme we cannot speak stops the client.
        let ignored = env("http://%zz", "").unwrap();
        assert_eq!(proxied(&ignored, "https://api.example"), None);
        let refused = env("https://u:pa55word@proxy.example", "").unwrap_err();
        assert_eq!(refused.field(), "HTTPS_PROXY");
        assert!(!refused.to_string().contains("pa55word"), "{refused}");
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
