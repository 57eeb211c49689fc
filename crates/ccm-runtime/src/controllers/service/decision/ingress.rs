//! The load balancer's address as the Service's status shows it: the ingress list written
//! to `status.loadBalancer.ingress`, read back, and a provider's answer checked with the
//! API server's rules before it is written ([`validate_ingress`]), so a list the API server
//! would refuse is a failed sync with a clear message, not a failed write.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};

use crate::controllers::is_dns1123_subdomain;

/// Checks a provider's ingress list before it is written to `status.loadBalancer.ingress`,
/// with the API server's rules: each entry has an IP or a hostname; an IP is an IP; a
/// hostname is a DNS-1123 subdomain and not an IP; `ipMode` is `VIP` or `Proxy` and needs
/// an IP; ports are 1-65535 with protocol TCP, UDP or SCTP.
pub(crate) fn validate_ingress(ingress: &[LoadBalancerIngress]) -> Result<(), String> {
    for (i, entry) in ingress.iter().enumerate() {
        let ip = entry.ip.as_deref().filter(|s| !s.is_empty());
        let hostname = entry.hostname.as_deref().filter(|s| !s.is_empty());
        if ip.is_none() && hostname.is_none() {
            return Err(format!("ingress[{i}] has neither an IP nor a hostname"));
        }
        if let Some(ip) = ip
            && ip.parse::<IpAddr>().is_err()
        {
            return Err(format!("ingress[{i}].ip {ip:?} is not a valid IP address"));
        }
        if let Some(host) = hostname {
            if host.parse::<IpAddr>().is_ok() {
                return Err(format!(
                    "ingress[{i}].hostname {host:?} must be a DNS name, not an IP address"
                ));
            }
            if !is_dns1123_subdomain(host) {
                return Err(format!(
                    "ingress[{i}].hostname {host:?} is not a valid DNS-1123 subdomain"
                ));
            }
        }
        if let Some(mode) = entry.ip_mode.as_deref() {
            if mode != "VIP" && mode != "Proxy" {
                return Err(format!(
                    "ingress[{i}].ipMode {mode:?} is not one of \"VIP\", \"Proxy\""
                ));
            }
            if ip.is_none() {
                return Err(format!("ingress[{i}].ipMode needs ingress[{i}].ip"));
            }
        }
        for port in entry.ports.iter().flatten() {
            if !(1..=65535).contains(&port.port) {
                return Err(format!(
                    "ingress[{i}] port {} is not between 1 and 65535",
                    port.port
                ));
            }
            if !matches!(port.protocol.as_str(), "TCP" | "UDP" | "SCTP") {
                return Err(format!(
                    "ingress[{i}] port {} has protocol {:?}, not TCP, UDP or SCTP",
                    port.port, port.protocol
                ));
            }
        }
    }
    Ok(())
}

/// The Service's current ingress list.
pub(crate) fn ingress(service: &Service) -> &[LoadBalancerIngress] {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_deref())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerStatus, PortStatus, ServiceStatus};

    use super::super::fixtures::{ing, lb_service};
    use super::*;

    #[test]
    fn ingress_validation_accepts_ips_and_hostnames() {
        assert_eq!(validate_ingress(&[]), Ok(()));
        assert_eq!(
            validate_ingress(&[
                ing(Some("203.0.113.7"), None),
                ing(Some("2001:db8::1"), None),
                ing(None, Some("lb-1.example.com")),
                ing(Some("10.0.0.1"), Some("both.example.com")),
            ]),
            Ok(())
        );
        let mut proxied = with_port("10.0.0.1", 443, "TCP");
        proxied.ip_mode = Some("Proxy".into());
        assert_eq!(validate_ingress(&[proxied]), Ok(()));
    }

    /// An entry for `ip` with one port status.
    fn with_port(ip: &str, port: i32, protocol: &str) -> LoadBalancerIngress {
        let mut entry = ing(Some(ip), None);
        entry.ports = Some(vec![PortStatus {
            port,
            protocol: protocol.into(),
            error: None,
        }]);
        entry
    }

    #[test]
    fn ingress_validation_refuses_what_the_api_server_would() {
        let bad = |e: LoadBalancerIngress| validate_ingress(&[ing(Some("1.2.3.4"), None), e]);
        for entry in [
            ing(None, None),
            ing(Some(""), Some("")),
            ing(Some("not-an-ip"), None),
            ing(Some("300.1.1.1"), None),
            ing(Some("010.1.1.1"), None),
            ing(Some(" 1.2.3.4"), None),
            ing(None, Some("1.2.3.4")),
            ing(None, Some("Upper.example.com")),
            ing(None, Some("-bad.example.com")),
            ing(None, Some("a..b")),
            ing(None, Some(&"x".repeat(64))),
            LoadBalancerIngress {
                ip_mode: Some("Proxy".into()),
                hostname: Some("h.example.com".into()),
                ..LoadBalancerIngress::default()
            },
            LoadBalancerIngress {
                ip: Some("1.2.3.4".into()),
                ip_mode: Some("Magic".into()),
                ..LoadBalancerIngress::default()
            },
            with_port("1.2.3.4", 0, "TCP"),
            with_port("1.2.3.4", 80, "HTTP"),
        ] {
            let err = bad(entry.clone()).expect_err(&format!("{entry:?}"));
            assert!(err.starts_with("ingress[1]"), "{err}");
        }
    }

    #[test]
    fn ingress_reads_the_status() {
        let mut s = lb_service();
        assert!(ingress(&s).is_empty());
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![ing(Some("1.2.3.4"), None)]),
            }),
            ..ServiceStatus::default()
        });
        assert_eq!(ingress(&s).len(), 1);
    }
}
