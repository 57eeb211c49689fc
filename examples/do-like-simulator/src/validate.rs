//! Checks of a load balancer request, as DigitalOcean's API makes them before it accepts one:
//! each failure is the message of a 422 `unprocessable_entity`. The rules follow the API
//! reference (required fields, enumerations, ranges, what excludes what); the wording is the
//! simulator's own, since the live API's exact messages could not be compared.
//!
//! UDP: a `udp` rule forwards to `udp` and only `udp` forwards to it (the reference: "If you
//! set the `entry_protocol` to `udp`, the `target_protocol` must be set to `udp`"); TCP and
//! UDP rules may share an entry port (DigitalOcean's CCM sends both for a Service port that
//! is TCP and UDP). A health check is `tcp`, `http` or `https`, never `udp` ("When using
//! UDP, the load balancer requires that you set up a health check with a port that uses TCP,
//! HTTP, or HTTPS"), and its port is any droplet port: it need not be a rule's target
//! (DigitalOcean's CCM checks kube-proxy on 10256, or a Service's health check node port).

use ccm_do_like_cloud::api::{
    ForwardingRule, HealthCheck, LB_TYPE_REGIONAL, LB_TYPE_REGIONAL_NETWORK, LbFirewall,
    LoadBalancerRequest, NETWORK_STACK_DUALSTACK, NETWORK_STACK_IPV4, StickySessions,
};

use crate::catalog;

const PROTOCOLS: [&str; 7] = ["http", "https", "http2", "http3", "tcp", "tls", "udp"];

/// `Ok` when DigitalOcean would accept `req` for a create or an update.
pub(crate) fn load_balancer(req: &LoadBalancerRequest) -> Result<(), String> {
    if req.name.is_empty() {
        return Err("name is required".into());
    }
    if req.name.len() > 255
        || !req
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        return Err("name must be at most 255 letters, digits, dashes and periods".into());
    }
    if req.region.is_empty() {
        return Err("region is required".into());
    }
    if catalog::region(&req.region).is_none() {
        return Err(format!("region {} is not available", req.region));
    }
    if let Some(s) = &req.size
        && slug_units(s).is_none()
    {
        return Err(format!(
            "size {s} is not valid: must be lb-small, lb-medium or lb-large"
        ));
    }
    if let Some(u) = req.size_unit
        && !(1..=100).contains(&u)
    {
        return Err(format!(
            "size_unit {u} is not valid: must be between 1 and 100"
        ));
    }
    // Both may be sent (godo's `AsRequest` copies both from an answer) when they agree.
    if let (Some(s), Some(u)) = (&req.size, req.size_unit)
        && slug_units(s) != Some(u)
    {
        return Err(format!(
            "size {s} and size_unit {u} disagree: set one of them"
        ));
    }
    if let Some(a) = &req.algorithm
        && a != "round_robin"
        && a != "least_connections"
    {
        return Err(format!(
            "algorithm {a} is not valid: must be round_robin or least_connections"
        ));
    }
    if req.forwarding_rules.is_empty() {
        return Err("at least one forwarding rule is required".into());
    }
    for (i, rule) in req.forwarding_rules.iter().enumerate() {
        forwarding_rule(rule).map_err(|m| format!("forwarding_rules[{i}]: {m}"))?;
    }
    let passthrough = req
        .forwarding_rules
        .iter()
        .filter(|r| r.x_passthrough)
        .count();
    if passthrough != 0 && passthrough != req.forwarding_rules.len() {
        return Err(
            "x_passthrough must be set on every forwarding rule or on none (the extension \
             forwards the load balancer's whole address)"
                .into(),
        );
    }
    match req.lb_type.as_deref() {
        None | Some(LB_TYPE_REGIONAL) => {}
        Some(LB_TYPE_REGIONAL_NETWORK) => {
            for (i, rule) in req.forwarding_rules.iter().enumerate() {
                network_rule(rule).map_err(|m| format!("forwarding_rules[{i}]: {m}"))?;
            }
        }
        Some(other) => {
            return Err(format!(
                "type {other:?} is not valid: must be {LB_TYPE_REGIONAL} or \
                 {LB_TYPE_REGIONAL_NETWORK} (this cloud has no GLOBAL load balancers)"
            ));
        }
    }
    // DigitalOcean accepts DUALSTACK for either type (its CCM asks for it for a
    // REGIONAL_NETWORK one when every node has IPv6); what the simulator can give it is the
    // data plane's business (crate docs), not the request's.
    match req.network_stack.as_deref() {
        None | Some(NETWORK_STACK_IPV4 | NETWORK_STACK_DUALSTACK) => {}
        Some(other) => {
            return Err(format!(
                "network_stack {:?} is not valid: must be {NETWORK_STACK_IPV4} or \
                 {NETWORK_STACK_DUALSTACK}",
                other.chars().take(64).collect::<String>()
            ));
        }
    }
    if let Some(hc) = &req.health_check {
        health_check(hc).map_err(|m| format!("health_check: {m}"))?;
    }
    if let Some(firewall) = &req.firewall {
        for (list, rules) in [("allow", &firewall.allow), ("deny", &firewall.deny)] {
            if rules.len() > MAX_FIREWALL_RULES {
                return Err(format!(
                    "firewall.{list}: at most {MAX_FIREWALL_RULES} rules"
                ));
            }
            for (i, rule) in rules.iter().enumerate() {
                LbFirewall::source(rule).map_err(|m| format!("firewall.{list}[{i}]: {m}"))?;
            }
        }
    }
    if let Some(s) = &req.sticky_sessions {
        sticky_sessions(s).map_err(|m| format!("sticky_sessions: {m}"))?;
    }
    if !req.droplet_ids.is_empty() && req.tag.as_deref().is_some_and(|t| !t.is_empty()) {
        return Err("droplet_ids and tag cannot both be specified".into());
    }
    for t in req.tags.iter().chain(&req.tag) {
        if t.is_empty()
            || t.len() > 255
            || !t
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'-' | b'_'))
        {
            return Err(format!(
                "tag {t:?} is not valid: at most 255 letters, digits, colons, dashes and underscores"
            ));
        }
    }
    Ok(())
}

/// The size units a size slug stands for.
pub(crate) fn slug_units(slug: &str) -> Option<u32> {
    match slug {
        "lb-small" => Some(1),
        "lb-medium" => Some(3),
        "lb-large" => Some(6),
        _ => None,
    }
}

fn forwarding_rule(rule: &ForwardingRule) -> Result<(), String> {
    for (field, protocol) in [
        ("entry_protocol", &rule.entry_protocol),
        ("target_protocol", &rule.target_protocol),
    ] {
        if !PROTOCOLS.contains(&protocol.as_str()) {
            return Err(format!(
                "{field} {protocol:?} is not valid: must be one of {}",
                PROTOCOLS.join(", ")
            ));
        }
    }
    for (field, port) in [
        ("entry_port", rule.entry_port),
        ("target_port", rule.target_port),
    ] {
        if port == 0 {
            return Err(format!("{field} must be between 1 and 65535"));
        }
    }
    let secure_entry = matches!(rule.entry_protocol.as_str(), "https" | "http2" | "http3");
    if rule.tls_passthrough && !rule.certificate_id.is_empty() {
        return Err("certificate_id and tls_passthrough cannot both be set".into());
    }
    if secure_entry && rule.certificate_id.is_empty() && !rule.tls_passthrough {
        return Err(format!(
            "entry_protocol {} needs a certificate_id or tls_passthrough",
            rule.entry_protocol
        ));
    }
    if !secure_entry && (rule.tls_passthrough || !rule.certificate_id.is_empty()) {
        return Err(format!(
            "certificate_id and tls_passthrough need an entry_protocol of https, http2 or \
             http3, not {}",
            rule.entry_protocol
        ));
    }
    if rule.x_passthrough {
        if !matches!(rule.entry_protocol.as_str(), "tcp" | "udp")
            || rule.target_protocol != rule.entry_protocol
        {
            return Err("with x_passthrough, both protocols must be tcp or both udp".into());
        }
        if rule.target_port != rule.entry_port {
            return Err("with x_passthrough, target_port must equal entry_port".into());
        }
    }
    if rule.tls_passthrough && rule.target_protocol != rule.entry_protocol {
        return Err("with tls_passthrough, target_protocol must equal entry_protocol".into());
    }
    let layer4 = |p: &str| matches!(p, "tcp" | "udp" | "tls");
    if layer4(&rule.entry_protocol) != layer4(&rule.target_protocol)
        || (rule.entry_protocol == "udp") != (rule.target_protocol == "udp")
    {
        return Err(format!(
            "entry_protocol {} cannot forward to target_protocol {}",
            rule.entry_protocol, rule.target_protocol
        ));
    }
    Ok(())
}

/// A rule of a `REGIONAL_NETWORK` load balancer, which passes packets through: TCP or UDP
/// on both sides, to the entry port (DigitalOcean's CCM sends exactly that).
fn network_rule(rule: &ForwardingRule) -> Result<(), String> {
    if !matches!(rule.entry_protocol.as_str(), "tcp" | "udp")
        || rule.target_protocol != rule.entry_protocol
    {
        return Err(format!(
            "a {LB_TYPE_REGIONAL_NETWORK} load balancer forwards tcp to tcp or udp to udp, not \
             {} to {}",
            rule.entry_protocol, rule.target_protocol
        ));
    }
    if rule.target_port != rule.entry_port {
        return Err(format!(
            "a {LB_TYPE_REGIONAL_NETWORK} load balancer forwards to the entry port: \
             target_port {} is not entry_port {}",
            rule.target_port, rule.entry_port
        ));
    }
    Ok(())
}

/// The most rules a firewall list takes.
const MAX_FIREWALL_RULES: usize = 1000;

/// The health check's own fields; its port is not compared with the rules' (module docs).
fn health_check(hc: &HealthCheck) -> Result<(), String> {
    if hc.protocol == "udp" {
        return Err(
            "protocol \"udp\" is not valid: a health check cannot be UDP; use tcp, http or \
             https on a TCP port"
                .into(),
        );
    }
    if !["tcp", "http", "https"].contains(&hc.protocol.as_str()) {
        return Err(format!(
            "protocol {:?} is not valid: must be tcp, http or https",
            hc.protocol
        ));
    }
    if hc.port == 0 {
        return Err("port must be between 1 and 65535".into());
    }
    if hc.protocol != "tcp" && !hc.path.is_empty() && !hc.path.starts_with('/') {
        return Err(format!("path {:?} must start with /", hc.path));
    }
    for (field, value, range) in [
        ("check_interval_seconds", hc.check_interval_seconds, 3..=300),
        (
            "response_timeout_seconds",
            hc.response_timeout_seconds,
            3..=300,
        ),
        ("healthy_threshold", hc.healthy_threshold, 2..=10),
        ("unhealthy_threshold", hc.unhealthy_threshold, 2..=10),
    ] {
        // Zero is absent: the API's default.
        if value != 0 && !range.contains(&value) {
            return Err(format!(
                "{field} {value} is not valid: must be between {} and {}",
                range.start(),
                range.end()
            ));
        }
    }
    Ok(())
}

fn sticky_sessions(s: &StickySessions) -> Result<(), String> {
    match s.kind.as_str() {
        "none" => Ok(()),
        "cookies" if s.cookie_name.is_empty() => {
            Err("cookie_name is required with type cookies".into())
        }
        "cookies" if s.cookie_ttl_seconds == 0 => {
            Err("cookie_ttl_seconds is required with type cookies".into())
        }
        "cookies" => Ok(()),
        // The extension: no cookie (module docs of the data plane).
        "x_client_ip" if !s.cookie_name.is_empty() || s.cookie_ttl_seconds != 0 => {
            Err("type x_client_ip takes no cookie_name or cookie_ttl_seconds".into())
        }
        "x_client_ip" => Ok(()),
        other => Err(format!(
            "type {other:?} is not valid: must be none, cookies or x_client_ip"
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The health check the provider sends by default: kube-proxy's `/healthz` on 10256,
    /// which no forwarding rule targets.
    pub(crate) fn kube_proxy_health_check() -> HealthCheck {
        HealthCheck {
            protocol: "http".into(),
            port: 10256,
            path: "/healthz".into(),
            check_interval_seconds: 3,
            response_timeout_seconds: 5,
            healthy_threshold: 5,
            unhealthy_threshold: 3,
        }
    }

    fn good() -> LoadBalancerRequest {
        LoadBalancerRequest {
            name: "example-lb-01".into(),
            region: "nyc1".into(),
            forwarding_rules: vec![ForwardingRule::new("tcp", 80, 30080)],
            ..LoadBalancerRequest::default()
        }
    }

    #[test]
    fn udp_rules_and_a_health_check_on_no_rules_port_are_accepted() {
        // What the provider sends for a DNS-like Service: TCP and UDP on one port, the
        // health check on kube-proxy's port, which no rule targets.
        let mut r = good();
        r.forwarding_rules = vec![
            ForwardingRule::new("udp", 53, 30053),
            ForwardingRule::new("tcp", 53, 30054),
        ];
        r.health_check = Some(kube_proxy_health_check());
        assert_eq!(load_balancer(&r), Ok(()));
        // UDP alone, checked over TCP on a port no rule targets.
        r.forwarding_rules.truncate(1);
        r.health_check.as_mut().unwrap().protocol = "tcp".into();
        r.health_check.as_mut().unwrap().port = 32000;
        assert_eq!(load_balancer(&r), Ok(()));
    }

    #[test]
    fn a_network_load_balancer_is_what_digitaloceans_ccm_asks_for() {
        // Its default: `REGIONAL_NETWORK`, each port to itself, TCP and UDP.
        let mut r = good();
        r.lb_type = Some(LB_TYPE_REGIONAL_NETWORK.into());
        r.forwarding_rules = vec![
            ForwardingRule::new("tcp", 80, 80),
            ForwardingRule::new("udp", 53, 53),
        ];
        r.health_check = Some(kube_proxy_health_check());
        assert_eq!(load_balancer(&r), Ok(()));
        // The same rules with the extension's flag too.
        for rule in &mut r.forwarding_rules {
            rule.x_passthrough = true;
        }
        assert_eq!(load_balancer(&r), Ok(()));
        r.lb_type = Some(LB_TYPE_REGIONAL.into());
        assert_eq!(load_balancer(&r), Ok(()));
    }

    #[test]
    fn what_digitalocean_refuses_is_refused() {
        assert_eq!(load_balancer(&good()), Ok(()));
        for stack in [NETWORK_STACK_IPV4, NETWORK_STACK_DUALSTACK] {
            let mut r = good();
            r.network_stack = Some(stack.into());
            assert_eq!(load_balancer(&r), Ok(()), "{stack}");
            // Also for a network load balancer, as DigitalOcean's CCM may ask.
            r.lb_type = Some(LB_TYPE_REGIONAL_NETWORK.into());
            r.forwarding_rules = vec![ForwardingRule::new("tcp", 80, 80)];
            assert_eq!(load_balancer(&r), Ok(()), "REGIONAL_NETWORK {stack}");
        }
        // Both sizes, when they agree, as godo's `AsRequest` sends them.
        let mut both = good();
        both.size = Some("lb-medium".into());
        both.size_unit = Some(3);
        assert_eq!(load_balancer(&both), Ok(()));
        type Change = fn(&mut LoadBalancerRequest);
        let cases: [(Change, &str); 23] = [
            (
                |r| r.lb_type = Some("GLOBAL".into()),
                "type \"GLOBAL\" is not valid: must be REGIONAL or REGIONAL_NETWORK",
            ),
            (
                |r| r.network_stack = Some("dualstack".into()),
                "network_stack \"dualstack\" is not valid: must be IPV4 or DUALSTACK",
            ),
            (
                // A network load balancer's rule to a node port: it forwards to the entry port.
                |r| r.lb_type = Some(LB_TYPE_REGIONAL_NETWORK.into()),
                "forwarding_rules[0]: a REGIONAL_NETWORK load balancer forwards to the entry \
                 port: target_port 30080 is not entry_port 80",
            ),
            (
                |r| {
                    r.lb_type = Some(LB_TYPE_REGIONAL_NETWORK.into());
                    r.forwarding_rules = vec![ForwardingRule::new("http", 80, 80)];
                },
                "forwarding_rules[0]: a REGIONAL_NETWORK load balancer forwards tcp to tcp or \
                 udp to udp, not http to http",
            ),
            (
                |r| {
                    r.firewall = Some(LbFirewall {
                        allow: vec!["cidr:10.0.0.0/8".into(), "10.1.2.3".into()],
                        deny: Vec::new(),
                    });
                },
                "firewall.allow[1]: \"10.1.2.3\" is not ip:<address>",
            ),
            (
                |r| {
                    r.firewall = Some(LbFirewall {
                        allow: Vec::new(),
                        deny: vec!["cidr:10.0.0.0/33".into()],
                    });
                },
                "firewall.deny[0]: \"cidr:10.0.0.0/33\" is not ip:<address>",
            ),
            (
                |r| {
                    r.forwarding_rules[0].x_passthrough = true;
                    r.forwarding_rules[0].target_port = r.forwarding_rules[0].entry_port + 1;
                },
                "forwarding_rules[0]: with x_passthrough, target_port must equal entry_port",
            ),
            (
                |r| {
                    r.forwarding_rules[0].x_passthrough = true;
                    r.forwarding_rules[0].entry_protocol = "http".into();
                    r.forwarding_rules[0].target_protocol = "http".into();
                },
                "forwarding_rules[0]: with x_passthrough, both protocols must be tcp or both udp",
            ),
            (
                |r| {
                    let mut second = r.forwarding_rules[0].clone();
                    second.entry_port += 1;
                    second.target_port = second.entry_port;
                    second.x_passthrough = true;
                    r.forwarding_rules.push(second);
                },
                "x_passthrough must be set on every forwarding rule or on none",
            ),
            (|r| r.region.clear(), "region is required"),
            (|r| r.region = "xyz9".into(), "region xyz9 is not available"),
            (|r| r.name.clear(), "name is required"),
            (
                |r| {
                    r.droplet_ids = vec![1];
                    r.tag = Some("web".into());
                },
                "droplet_ids and tag cannot both be specified",
            ),
            (
                |r| r.forwarding_rules.clear(),
                "at least one forwarding rule is required",
            ),
            (
                |r| r.forwarding_rules[0].entry_protocol = "smtp".into(),
                "forwarding_rules[0]: entry_protocol \"smtp\" is not valid",
            ),
            (
                |r| r.forwarding_rules[0].target_port = 0,
                "forwarding_rules[0]: target_port must be between 1 and 65535",
            ),
            (
                |r| {
                    r.forwarding_rules[0].entry_protocol = "https".into();
                    r.forwarding_rules[0].target_protocol = "http".into();
                },
                "forwarding_rules[0]: entry_protocol https needs a certificate_id or tls_passthrough",
            ),
            (
                |r| {
                    r.forwarding_rules[0].entry_protocol = "http".into();
                    r.forwarding_rules[0].target_protocol = "udp".into();
                },
                "forwarding_rules[0]: entry_protocol http cannot forward to target_protocol udp",
            ),
            (
                |r| r.forwarding_rules[0].target_protocol = "udp".into(),
                "forwarding_rules[0]: entry_protocol tcp cannot forward to target_protocol udp",
            ),
            (
                |r| {
                    r.health_check = Some(HealthCheck {
                        protocol: "udp".into(),
                        port: 30053,
                        ..HealthCheck::default()
                    });
                },
                "health_check: protocol \"udp\" is not valid: a health check cannot be UDP",
            ),
            (
                |r| {
                    r.size = Some("lb-small".into());
                    r.size_unit = Some(2);
                },
                "size lb-small and size_unit 2 disagree",
            ),
            (
                |r| {
                    r.health_check = Some(HealthCheck {
                        protocol: "http".into(),
                        port: 80,
                        check_interval_seconds: 1,
                        ..HealthCheck::default()
                    });
                },
                "health_check: check_interval_seconds 1 is not valid",
            ),
            (
                |r| {
                    r.sticky_sessions = Some(StickySessions {
                        kind: "cookies".into(),
                        ..StickySessions::default()
                    });
                },
                "sticky_sessions: cookie_name is required with type cookies",
            ),
        ];
        for (change, message) in cases {
            let mut r = good();
            change(&mut r);
            let got = load_balancer(&r).unwrap_err();
            assert!(
                got.starts_with(message),
                "{got:?} does not start with {message:?}"
            );
        }
    }
}
