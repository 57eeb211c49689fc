//! Health checks: the pass/fail state machine of one target (pure), and the probes that feed
//! it (a TCP connect, or an HTTP `GET` whose status must be 2xx or 3xx), as DigitalOcean's
//! load balancers run them: every `check_interval_seconds`, each probe given
//! `response_timeout_seconds`, a target turning healthy after `healthy_threshold` passes in a
//! row and unhealthy after `unhealthy_threshold` failures in a row.
//!
//! One difference on purpose: a target that has never been checked turns healthy at its
//! first pass, not after `healthy_threshold` of them, so a new load balancer carries traffic
//! after one interval instead of five (DigitalOcean's default takes 15 s, which only slows
//! tests down). After that the thresholds hold both ways.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What is probed, how often, and how many results in a row flip a target's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CheckSpec {
    /// `None` for TCP (a connect is a pass); `Some(path)` for HTTP.
    pub http_path: Option<String>,
    /// The port probed on each target.
    pub port: u16,
    /// Between probes.
    pub interval: Duration,
    /// For one probe (connect, request and status line).
    pub timeout: Duration,
    /// Passes in a row before an unhealthy target is healthy.
    pub healthy_threshold: u32,
    /// Failures in a row before a healthy target is unhealthy.
    pub unhealthy_threshold: u32,
}

impl CheckSpec {
    /// From the API's health check. `https` is probed as TCP: the simulator has no TLS
    /// client, and a target that accepts the connection is taken as up. Intervals and
    /// timeouts are clamped to DigitalOcean's 3..=300 s, thresholds to 2..=10.
    pub(crate) fn from_api(check: &ccm_do_like_cloud::api::HealthCheck) -> Self {
        let seconds = |s: u32| Duration::from_secs(u64::from(s.clamp(3, 300)));
        Self {
            http_path: (check.protocol == "http").then(|| {
                if check.path.starts_with('/') {
                    check.path.clone()
                } else {
                    "/".to_owned()
                }
            }),
            port: check.port,
            interval: seconds(check.check_interval_seconds),
            timeout: seconds(check.response_timeout_seconds),
            healthy_threshold: check.healthy_threshold.clamp(2, 10),
            unhealthy_threshold: check.unhealthy_threshold.clamp(2, 10),
        }
    }
}

/// One target's health: whether it gets traffic, and the current run of results.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Health {
    /// Whether the target gets new connections.
    pub healthy: bool,
    /// Whether any probe has passed yet.
    pub ever_passed: bool,
    passes: u32,
    failures: u32,
}

impl Health {
    /// Records one probe's result; returns whether the target is now healthy.
    pub(crate) fn record(&mut self, passed: bool, spec: &CheckSpec) -> bool {
        if passed {
            self.failures = 0;
            self.passes = self.passes.saturating_add(1);
            if !self.ever_passed || self.passes >= spec.healthy_threshold {
                self.healthy = true;
            }
            self.ever_passed = true;
        } else {
            self.passes = 0;
            self.failures = self.failures.saturating_add(1);
            if self.failures >= spec.unhealthy_threshold {
                self.healthy = false;
            }
        }
        self.healthy
    }

    /// Whether any probe has answered yet (passed or failed): before that, `healthy` false
    /// says nothing of the target.
    pub(crate) fn checked(&self) -> bool {
        self.ever_passed || self.failures > 0
    }
}

/// The longest status line read from an HTTP health endpoint.
const MAX_STATUS_LINE: usize = 1024;

/// One probe of `target` (its own deadline is the caller's): whether it passed.
pub(crate) async fn probe(spec: &CheckSpec, target: Ipv4Addr) -> bool {
    let addr = SocketAddr::from((target, spec.port));
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let Some(path) = &spec.http_path else {
        return true;
    };
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: do-like-lb-health-check\r\n\
         Connection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = Vec::with_capacity(128);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < MAX_STATUS_LINE {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    status_passes(&head)
}

/// Whether an HTTP answer's first bytes are a 2xx or 3xx status line.
pub(crate) fn status_passes(head: &[u8]) -> bool {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let version_ok = parts.next().is_some_and(|v| v.starts_with("HTTP/1."));
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    version_ok && code.is_some_and(|c| (200..400).contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CheckSpec {
        CheckSpec {
            http_path: None,
            port: 10256,
            interval: Duration::from_secs(3),
            timeout: Duration::from_secs(5),
            healthy_threshold: 3,
            unhealthy_threshold: 2,
        }
    }

    #[test]
    fn a_new_target_is_healthy_at_its_first_pass_then_thresholds_hold() {
        let spec = spec();
        let mut h = Health::default();
        assert!(!h.record(false, &spec), "never passed: not healthy");
        assert!(h.record(true, &spec), "first pass ever: healthy");
        assert!(h.record(false, &spec), "one failure of two: still healthy");
        assert!(!h.record(false, &spec), "two failures in a row: unhealthy");
        assert!(!h.record(true, &spec), "one pass of three");
        assert!(!h.record(true, &spec), "two passes of three");
        assert!(
            h.record(true, &spec),
            "three passes in a row: healthy again"
        );
    }

    #[test]
    fn a_pass_breaks_a_run_of_failures() {
        let spec = spec();
        let mut h = Health::default();
        h.record(true, &spec);
        h.record(false, &spec);
        h.record(true, &spec);
        assert!(h.record(false, &spec), "the failures were not in a row");
    }

    #[test]
    fn only_2xx_and_3xx_status_lines_pass() {
        assert!(status_passes(b"HTTP/1.1 200 OK\r\n"));
        assert!(status_passes(b"HTTP/1.0 302 Found\r\nLocation: /\r\n"));
        assert!(!status_passes(b"HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(!status_passes(b"HTTP/1.1 404 Not Found\r\n"));
        assert!(!status_passes(b"SSH-2.0-OpenSSH\r\n"));
        assert!(!status_passes(b""));
    }

    #[test]
    fn the_api_check_is_clamped_and_https_is_probed_as_tcp() {
        let api = |protocol: &str, path: &str| ccm_do_like_cloud::api::HealthCheck {
            protocol: protocol.into(),
            port: 31000,
            path: path.into(),
            check_interval_seconds: 0,
            response_timeout_seconds: 1000,
            healthy_threshold: 1,
            unhealthy_threshold: 50,
        };
        let http = CheckSpec::from_api(&api("http", "/healthz"));
        assert_eq!(http.http_path.as_deref(), Some("/healthz"));
        assert_eq!(http.interval, Duration::from_secs(3));
        assert_eq!(http.timeout, Duration::from_secs(300));
        assert_eq!((http.healthy_threshold, http.unhealthy_threshold), (2, 10));
        assert_eq!(
            CheckSpec::from_api(&api("http", "")).http_path.as_deref(),
            Some("/")
        );
        assert_eq!(CheckSpec::from_api(&api("https", "/x")).http_path, None);
        assert_eq!(CheckSpec::from_api(&api("tcp", "")).http_path, None);
    }
}
