//! A forward proxy on loopback for tests of clients behind a corporate proxy: it takes
//! `CONNECT host:port` tunnels (HTTPS) and absolute-form requests (`GET http://host/…`,
//! plain HTTP), records each with its `Proxy-Authorization`, and sends it to the loopback
//! address that the test mapped the host to: a name that resolves nowhere (`kubernetes.test`)
//! reaches a server of the test, and no connection ever leaves loopback (a host that is not
//! mapped is answered `502`). A plain-HTTP request is sent on with the `Host` of the address
//! it goes to, one request a connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request the proxy took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proxied {
    /// `CONNECT` or the request's method.
    pub method: String,
    /// `host:port` the client asked for.
    pub target: String,
    /// The `Proxy-Authorization` header, if any.
    pub authorization: Option<String>,
}

/// A running proxy; it stops when dropped.
pub struct ForwardProxy {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Proxied>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ForwardProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ForwardProxy {
    /// Starts a proxy on `127.0.0.1` that sends each `host:port` of `routes` to its
    /// loopback address.
    ///
    /// # Panics
    ///
    /// If a route leads off loopback, or no port can be bound.
    pub async fn start(routes: &[(&str, SocketAddr)]) -> Self {
        let routes: HashMap<String, SocketAddr> = routes
            .iter()
            .map(|(host, addr)| {
                assert!(addr.ip().is_loopback(), "{addr} is not a loopback address");
                (host.to_ascii_lowercase(), *addr)
            })
            .collect();
        let routes = Arc::new(routes);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local address");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&seen);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let routes = Arc::clone(&routes);
                let recorded = Arc::clone(&recorded);
                tokio::spawn(async move {
                    let _ = serve(client, &routes, &recorded).await;
                });
            }
        });
        Self { addr, seen, task }
    }

    /// `http://127.0.0.1:<port>`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://user:password@127.0.0.1:<port>`.
    #[must_use]
    pub fn url_with(&self, user: &str, password: &str) -> String {
        format!("http://{user}:{password}@{}", self.addr)
    }

    /// What it took so far.
    #[must_use]
    pub fn seen(&self) -> Vec<Proxied> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The most of a request's head read.
const MAX_HEAD: usize = 64 * 1024;

async fn serve(
    mut client: TcpStream,
    routes: &HashMap<String, SocketAddr>,
    seen: &Mutex<Vec<Proxied>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if head.len() > MAX_HEAD {
            return Ok(());
        }
        let n = client.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let rest = head.split_off(end);
    let text = String::from_utf8_lossy(&head).into_owned();
    let mut lines = text.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let uri = request_line.next().unwrap_or_default().to_owned();
    let version = request_line.next().unwrap_or("HTTP/1.1").to_owned();
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let authorization = headers.iter().find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_owned())
    });
    let (target, path) = if method == "CONNECT" {
        (uri.clone(), String::new())
    } else {
        let Some(rest) = uri.strip_prefix("http://") else {
            return client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let authority = if authority.contains(':') {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        (
            authority,
            if path.is_empty() {
                "/".to_owned()
            } else {
                path.to_owned()
            },
        )
    };
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Proxied {
            method: method.clone(),
            target: target.clone(),
            authorization,
        });
    let Some(addr) = routes.get(&target.to_ascii_lowercase()) else {
        return client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
    };
    let mut upstream = TcpStream::connect(addr).await?;
    if method == "CONNECT" {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        upstream.write_all(&rest).await?;
    } else {
        // One request a connection: the request in origin form, `Connection: close`.
        let mut forwarded = format!("{method} {path} {version}\r\n");
        for header in &headers {
            let name = header.split(':').next().unwrap_or_default();
            if ![
                "proxy-authorization",
                "proxy-connection",
                "connection",
                "host",
            ]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
            {
                forwarded.push_str(header);
                forwarded.push_str("\r\n");
            }
        }
        // The address it is sent to, as the server would see a request to itself (a
        // simulator refuses a `Host` that is not its own, against DNS rebinding).
        forwarded.push_str(&format!("Host: {addr}\r\nConnection: close\r\n\r\n"));
        upstream.write_all(forwarded.as_bytes()).await?;
        upstream.write_all(&rest).await?;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}
