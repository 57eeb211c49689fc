//! Loopback networking for tests: a free port to give a process under test
//! ([`free_port`]) or servers of the test's own ([`free_port_on`]), and a minimal plain-HTTP `GET` to read its endpoints ([`http_get`]) or
//! any server a connected stream reaches ([`http_get_over`]).
//!
//! ```no_run
//! # async fn demo() {
//! let port = ccm_test::net::free_port();
//! // … start a controller manager with `--secure-port={port}` and `--insecure-serving` …
//! let (status, body) = ccm_test::net::http_get(port, "/readyz").await;
//! assert_eq!((status, body.trim()), (200, "ok"));
//! # }
//! ```

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// How long [`http_get`] and [`http_get_over`] wait for a whole response.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// A port on 127.0.0.1 that nothing listens on now (the system picked it, and it was
/// released at once), for a process under test to listen on.
///
/// # Panics
///
/// When no port can be bound on 127.0.0.1.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("cannot find a free port on 127.0.0.1: {e}"))
}

/// A port that nothing listens on now, over TCP or UDP, at any of `addresses` (loopback
/// addresses such as 127.0.0.1 and 127.0.0.2): for a test that runs servers of its own at
/// the same port on several addresses.
///
/// # Panics
///
/// When no port can be bound on 127.0.0.1.
pub fn free_port_on(addresses: &[Ipv4Addr]) -> u16 {
    loop {
        let port = free_port();
        let free = addresses.iter().all(|&ip| {
            TcpListener::bind((ip, port)).is_ok() && UdpSocket::bind((ip, port)).is_ok()
        });
        if free {
            return port;
        }
    }
}

/// [`free_port`], with the error.
pub(crate) fn try_free_port() -> std::io::Result<u16> {
    Ok(
        TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?
            .local_addr()?
            .port(),
    )
}

/// `GET path` over plain HTTP/1.0 on 127.0.0.1:`port`: (status, body); or (0, why) when
/// nothing answers there within [`HTTP_TIMEOUT`] (the server is not up yet, or not any
/// more), so that a test can poll it with [`eventually`](crate::eventually).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let get = async {
        let stream = tokio::net::TcpStream::connect(address).await?;
        exchange(stream, "localhost", path).await
    };
    answer(get).await.unwrap_or_else(|why| (0, why))
}

/// `GET path` over plain HTTP/1.0 on `stream` (connected to the server: through a
/// [`Cluster`](crate::Cluster)'s network, say), with `Host: host`: (status, body), or why
/// there is no answer (an I/O error, or none within [`HTTP_TIMEOUT`]). The status is 0 when
/// the answer is not HTTP.
pub async fn http_get_over<S>(stream: S, host: &str, path: &str) -> Result<(u16, String), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    answer(exchange(stream, host, path)).await
}

/// The (status, body) of the response `get` reads, or why there is none within
/// [`HTTP_TIMEOUT`].
async fn answer(
    get: impl Future<Output = std::io::Result<String>>,
) -> Result<(u16, String), String> {
    match tokio::time::timeout(HTTP_TIMEOUT, get).await {
        Ok(Ok(response)) => Ok(parse_response(&response)),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {HTTP_TIMEOUT:?}")),
    }
}

/// Writes `GET path` (HTTP/1.0, `Host: host`) and reads the whole response, as text.
pub(crate) async fn exchange<S>(mut stream: S, host: &str, path: &str) -> std::io::Result<String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let request = format!("GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// The status (0 if there is none) and the body of an HTTP/1.x response.
pub(crate) fn parse_response(response: &str) -> (u16, String) {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let status = head
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    (status, body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_its_status_and_body() {
        assert_eq!(
            parse_response("HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nok\n"),
            (200, "ok\n".to_owned())
        );
        assert_eq!(
            parse_response("HTTP/1.1 404 Not Found\r\n\r\n"),
            (404, String::new())
        );
        assert_eq!(parse_response("garbage"), (0, String::new()));
        assert_eq!(parse_response(""), (0, String::new()));
    }

    #[tokio::test]
    async fn a_get_reads_the_whole_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 1024];
            let n = stream.read(&mut request).await.unwrap();
            let request = String::from_utf8_lossy(&request[..n]).into_owned();
            stream
                .write_all(b"HTTP/1.0 200 OK\r\n\r\nhello")
                .await
                .unwrap();
            request
        });
        assert_eq!(http_get(port, "/x?y").await, (200, "hello".to_owned()));
        assert_eq!(
            server.await.unwrap(),
            "GET /x?y HTTP/1.0\r\nHost: localhost\r\n\r\n"
        );
    }

    #[test]
    fn a_port_free_on_several_addresses_is_free_on_each() {
        let addresses = [Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)];
        let port = free_port_on(&addresses);
        for ip in addresses {
            let _tcp = TcpListener::bind((ip, port)).unwrap();
            let _udp = UdpSocket::bind((ip, port)).unwrap();
        }
    }

    #[tokio::test]
    async fn nothing_listening_is_status_0() {
        let port = free_port();
        let (status, why) = http_get(port, "/").await;
        assert_eq!(status, 0);
        assert!(!why.is_empty());
    }
}
