//! Unit tests of `annotations`.

use super::*;

#[test]
fn client_ip_affinity_asks_for_client_ip_stickiness_unless_cookies_are_set() {
    let mut affine = svc(&[]);
    affine.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    assert_eq!(
        LbSettings::from_service(&affine)
            .unwrap()
            .sticky_sessions
            .kind,
        "x_client_ip"
    );
    affine.metadata.annotations = Some(
        [
            (ANNOTATION_STICKY_SESSIONS_TYPE, "cookies"),
            (ANNOTATION_STICKY_SESSIONS_COOKIE_NAME, "c"),
            (ANNOTATION_STICKY_SESSIONS_COOKIE_TTL, "60"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    assert_eq!(
        LbSettings::from_service(&affine)
            .unwrap()
            .sticky_sessions
            .kind,
        "cookies"
    );
    assert_eq!(
        LbSettings::from_service(&svc(&[]))
            .unwrap()
            .sticky_sessions
            .kind,
        "none"
    );
}

#[test]
fn source_ranges_or_allow_rules_and_deny_rules_make_the_firewall() {
    assert_eq!(firewall(&svc(&[])).unwrap(), None);
    let mut ranges = svc(&[(ANNOTATION_ALLOW_RULES, "ip:1.2.3.4")]);
    ranges.spec.as_mut().unwrap().load_balancer_source_ranges =
        Some(vec!["10.244.1.5/32".into(), " 10.88.0.0/24".into()]);
    assert_eq!(
        firewall(&ranges).unwrap(),
        Some(LbFirewall {
            allow: vec!["cidr:10.244.1.5/32".into(), "cidr:10.88.0.0/24".into()],
            deny: Vec::new(),
        }),
        "the source ranges win over the allow annotation"
    );
    let rules = svc(&[
        (ANNOTATION_ALLOW_RULES, "ip:1.2.3.4, cidr:10.0.0.0/8"),
        (ANNOTATION_DENY_RULES, "cidr:10.1.0.0/16"),
    ]);
    assert_eq!(
        firewall(&rules).unwrap(),
        Some(LbFirewall {
            allow: vec!["ip:1.2.3.4".into(), "cidr:10.0.0.0/8".into()],
            deny: vec!["cidr:10.1.0.0/16".into()],
        })
    );
    let bad = svc(&[(ANNOTATION_DENY_RULES, "cidr:10.1.0.0/16,10.2.0.0/16")]);
    let err = firewall(&bad).unwrap_err().to_string();
    assert!(
        err.contains(ANNOTATION_DENY_RULES) && err.contains("10.2.0.0/16"),
        "{err}"
    );
    let many = vec!["ip:10.0.0.1"; MAX_FIREWALL_RULES + 1].join(",");
    let err = firewall(&svc(&[(ANNOTATION_ALLOW_RULES, &many)]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("at most 100 rules"), "{err}");
    let mut bad_range = svc(&[]);
    bad_range.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec!["10.0.0.0/99".into()]);
    let err = firewall(&bad_range).unwrap_err().to_string();
    assert!(err.contains("spec.loadBalancerSourceRanges"), "{err}");
}

fn svc(annotations: &[(&str, &str)]) -> Service {
    let mut s: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "LoadBalancer", "ports": [
            {"port": 80, "nodePort": 30080}, {"port": 443, "nodePort": 30443}
        ]}
    }))
    .unwrap();
    s.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    s
}

/// A Service with `ports` (`(port, protocol, node port)`) and the rest of its spec from
/// `spec` (JSON).
fn svc_with(ports: &[(i32, &str, i32)], spec: serde_json::Value) -> Service {
    let mut s = svc(&[]);
    let mut v = serde_json::to_value(s.spec.take().unwrap()).unwrap();
    v["ports"] = ports
        .iter()
        .map(|(port, protocol, node_port)| {
            serde_json::json!({"port": port, "protocol": protocol, "nodePort": node_port})
        })
        .collect();
    for (k, val) in spec.as_object().unwrap() {
        v[k] = val.clone();
    }
    s.spec = Some(serde_json::from_value(v).unwrap());
    s
}

fn annotate(mut s: Service, annotations: &[(&str, &str)]) -> Service {
    let map = s.metadata.annotations.get_or_insert_default();
    for (k, v) in annotations {
        map.insert((*k).to_owned(), (*v).to_owned());
    }
    s
}

fn healthz(port: u16) -> HealthCheck {
    HealthCheck {
        protocol: "http".into(),
        port,
        path: "/healthz".into(),
        check_interval_seconds: 3,
        response_timeout_seconds: 5,
        healthy_threshold: 5,
        unhealthy_threshold: 3,
    }
}

#[test]
fn defaults_are_digitaloceans() {
    let s = LbSettings::from_service(&svc(&[])).unwrap();
    assert_eq!(s.protocol, "tcp");
    assert!(s.tls_ports.is_empty());
    assert_eq!(s.health_check, healthz(KUBE_PROXY_HEALTH_PORT));
    assert_eq!(s.algorithm, "round_robin");
    assert_eq!((s.size.as_deref(), s.size_unit), (None, None));
    assert_eq!(s.sticky_sessions, StickySessions::default());
    assert!(!s.redirect_http_to_https && !s.enable_proxy_protocol);
}

#[test]
fn the_default_health_check_asks_kube_proxy_about_the_node_or_its_endpoints() {
    let ports = [(80, "TCP", 30080)];
    let local = serde_json::json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000});
    for (spec, port) in [
        // Local: the health check node port, which answers for the node's endpoints.
        (local.clone(), 32000),
        // Cluster (explicit or not), or Local before a health check node port: kube-proxy.
        (
            serde_json::json!({"externalTrafficPolicy": "Cluster"}),
            10256,
        ),
        (serde_json::json!({}), 10256),
        (serde_json::json!({"externalTrafficPolicy": "Local"}), 10256),
        (
            serde_json::json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 0}),
            10256,
        ),
        // Only a LoadBalancer Service's counts, as in Kubernetes' NeedsHealthCheck.
        (
            serde_json::json!({"type": "NodePort", "externalTrafficPolicy": "Local",
                               "healthCheckNodePort": 32000}),
            10256,
        ),
    ] {
        let s = svc_with(&ports, spec.clone());
        assert_eq!(health_check(&s).unwrap(), healthz(port), "{spec}");
    }
    // The Service's protocols do not matter: a UDP-only Service is checked the same way.
    assert_eq!(
        health_check(&svc_with(&[(53, "UDP", 30053)], local)).unwrap(),
        healthz(32000)
    );
    assert_eq!(
        health_check(&svc_with(&[(53, "UDP", 30053)], serde_json::json!({}))).unwrap(),
        healthz(10256)
    );
}

#[test]
fn port_path_and_protocol_apply_only_with_the_override_annotation() {
    let chosen = [
        (ANNOTATION_HEALTH_CHECK_PATH, "/ready"),
        (ANNOTATION_HEALTH_CHECK_PORT, "443"),
        (ANNOTATION_HEALTH_CHECK_PROTOCOL, "https"),
        (ANNOTATION_HEALTH_CHECK_INTERVAL, "10"),
    ];
    // Without it, ignored (not even checked), as by DigitalOcean's CCM; timings apply.
    let s = svc(&chosen);
    assert_eq!(
        health_check(&s).unwrap(),
        HealthCheck {
            check_interval_seconds: 10,
            ..healthz(10256)
        }
    );
    let ignored = svc(&[(ANNOTATION_HEALTH_CHECK_PORT, "9999")]);
    assert_eq!(health_check(&ignored).unwrap(), healthz(10256));
    // With it (any value, even empty): the Service port's node port, path, protocol.
    for value in ["", "true"] {
        let s = annotate(svc(&chosen), &[(ANNOTATION_OVERRIDE_HEALTH_CHECK, value)]);
        assert_eq!(
            health_check(&s).unwrap(),
            HealthCheck {
                protocol: "https".into(),
                port: 30443,
                path: "/ready".into(),
                check_interval_seconds: 10,
                ..healthz(0)
            }
        );
    }
    // Overridden with nothing else: TCP on the first TCP port's node port.
    let s = svc_with(
        &[(53, "UDP", 30053), (80, "TCP", 30080)],
        serde_json::json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000}),
    );
    let s = annotate(s, &[(ANNOTATION_OVERRIDE_HEALTH_CHECK, "")]);
    assert_eq!(
        health_check(&s).unwrap(),
        HealthCheck {
            protocol: "tcp".into(),
            port: 30080,
            path: String::new(),
            ..healthz(0)
        }
    );
    // A path alone makes it HTTP.
    let s = annotate(s, &[(ANNOTATION_HEALTH_CHECK_PATH, "/up")]);
    assert_eq!(
        health_check(&s).unwrap(),
        HealthCheck {
            port: 30080,
            path: "/up".into(),
            ..healthz(0)
        }
    );
}

#[test]
fn an_overridden_health_check_cannot_be_udp() {
    let over = [(ANNOTATION_OVERRIDE_HEALTH_CHECK, "")];
    // A UDP-only Service has nothing to check once overridden.
    let e = health_check(&annotate(
        svc_with(&[(53, "UDP", 30053)], serde_json::json!({})),
        &over,
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(ANNOTATION_OVERRIDE_HEALTH_CHECK) && e.contains("no TCP port"),
        "{e}"
    );
    // Naming a UDP port is refused...
    let mixed = svc_with(
        &[(53, "UDP", 30053), (8080, "TCP", 30880)],
        serde_json::json!({}),
    );
    let e = health_check(&annotate(
        mixed.clone(),
        &[over[0], (ANNOTATION_HEALTH_CHECK_PORT, "53")],
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!("annotation {ANNOTATION_HEALTH_CHECK_PORT}"))
            && e.contains("cannot be UDP"),
        "{e}"
    );
    // ...unless the number is also a TCP port: that one is checked.
    let dns = svc_with(
        &[(53, "UDP", 30053), (53, "TCP", 30054)],
        serde_json::json!({}),
    );
    let s = annotate(dns, &[over[0], (ANNOTATION_HEALTH_CHECK_PORT, "53")]);
    assert_eq!(health_check(&s).unwrap().port, 30054);
    // A TCP port without a node port yet cannot be checked.
    let s = annotate(svc_with(&[(80, "TCP", 0)], serde_json::json!({})), &over);
    let e = health_check(&s).unwrap_err().to_string();
    assert!(e.contains("no node port yet"), "{e}");
}

#[test]
fn every_annotation_is_read() {
    let s = LbSettings::from_service(&svc(&[
        (ANNOTATION_PROTOCOL, "http"),
        (ANNOTATION_CERTIFICATE_ID, "cert-1"),
        (ANNOTATION_OVERRIDE_HEALTH_CHECK, "true"),
        (ANNOTATION_HEALTH_CHECK_PATH, "/healthz"),
        (ANNOTATION_HEALTH_CHECK_PORT, "443"),
        (ANNOTATION_HEALTH_CHECK_INTERVAL, "10"),
        (ANNOTATION_HEALTH_CHECK_TIMEOUT, "4"),
        (ANNOTATION_HEALTH_CHECK_HEALTHY, "2"),
        (ANNOTATION_HEALTH_CHECK_UNHEALTHY, "10"),
        (ANNOTATION_ALGORITHM, "least_connections"),
        (ANNOTATION_SIZE_UNIT, "3"),
        (ANNOTATION_STICKY_SESSIONS_TYPE, "cookies"),
        (ANNOTATION_STICKY_SESSIONS_COOKIE_NAME, "DO-LB"),
        (ANNOTATION_STICKY_SESSIONS_COOKIE_TTL, "300"),
        (ANNOTATION_REDIRECT_HTTP_TO_HTTPS, "true"),
        (ANNOTATION_ENABLE_PROXY_PROTOCOL, "T"),
    ]))
    .unwrap();
    assert_eq!(
        s.tls_ports,
        [443],
        "a certificate makes 443 https by default"
    );
    assert_eq!(s.certificate_id, "cert-1");
    assert_eq!(
        s.health_check,
        HealthCheck {
            protocol: "http".into(),
            port: 30443,
            path: "/healthz".into(),
            check_interval_seconds: 10,
            response_timeout_seconds: 4,
            healthy_threshold: 2,
            unhealthy_threshold: 10,
        }
    );
    assert_eq!(s.size_unit, Some(3));
    assert_eq!(s.sticky_sessions.cookie_ttl_seconds, 300);
    assert!(s.redirect_http_to_https && s.enable_proxy_protocol);
}

#[test]
fn legacy_names_are_aliases_and_digitaloceans_win() {
    let s = LbSettings::from_service(&svc(&[
        (
            "do-like.example.com/load-balancer-algorithm",
            "least_connections",
        ),
        ("do-like.example.com/load-balancer-size", "lb-large"),
        ("do-like.example.com/load-balancer-protocol", "tcp"),
        (ANNOTATION_PROTOCOL, "http"),
    ]))
    .unwrap();
    assert_eq!(s.algorithm, "least_connections");
    assert_eq!(s.size.as_deref(), Some("lb-large"));
    assert_eq!(s.protocol, "http");
    // An error names the annotation as written.
    let e = LbSettings::from_service(&svc(&[(
        "do-like.example.com/load-balancer-protocol",
        "udp",
    )]))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("annotation do-like.example.com/load-balancer-protocol: invalid value \"udp\""),
        "{e}"
    );
}

#[test]
fn bad_values_name_their_annotation() {
    for (key, value) in [
        (ANNOTATION_PROTOCOL, "udp"),
        (ANNOTATION_TLS_PORTS, "8443"),
        (ANNOTATION_TLS_PORTS, "443,x"),
        (ANNOTATION_TLS_PASSTHROUGH, "yes"),
        (ANNOTATION_HEALTH_CHECK_PATH, "healthz"),
        (ANNOTATION_HEALTH_CHECK_PROTOCOL, "udp"),
        (ANNOTATION_HEALTH_CHECK_PORT, "8080"),
        (ANNOTATION_HEALTH_CHECK_INTERVAL, "1"),
        (ANNOTATION_HEALTH_CHECK_TIMEOUT, "301"),
        (ANNOTATION_HEALTH_CHECK_HEALTHY, "11"),
        (ANNOTATION_HEALTH_CHECK_UNHEALTHY, "-3"),
        (ANNOTATION_ALGORITHM, "random"),
        (ANNOTATION_SIZE_SLUG, "huge"),
        (ANNOTATION_SIZE_UNIT, "0"),
        (ANNOTATION_STICKY_SESSIONS_TYPE, "ip"),
        (ANNOTATION_REDIRECT_HTTP_TO_HTTPS, "yes"),
        (ANNOTATION_ENABLE_PROXY_PROTOCOL, "on"),
    ] {
        // Overridden, so that the health check's port, path and protocol are read.
        let e = LbSettings::from_service(&svc(&[
            (key, value),
            (ANNOTATION_OVERRIDE_HEALTH_CHECK, ""),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!("annotation {key}")),
            "{key}={value}: {e}"
        );
    }
    // Pairs that exclude each other, and what is required together.
    for (pairs, named) in [
        (
            &[
                (ANNOTATION_SIZE_SLUG, "lb-small"),
                (ANNOTATION_SIZE_UNIT, "2"),
            ][..],
            ANNOTATION_SIZE_UNIT,
        ),
        (
            &[
                (ANNOTATION_CERTIFICATE_ID, "c"),
                (ANNOTATION_TLS_PASSTHROUGH, "true"),
            ][..],
            ANNOTATION_TLS_PASSTHROUGH,
        ),
        (
            &[(ANNOTATION_PROTOCOL, "https")][..],
            ANNOTATION_CERTIFICATE_ID,
        ),
        (
            &[(ANNOTATION_STICKY_SESSIONS_TYPE, "cookies")][..],
            ANNOTATION_STICKY_SESSIONS_COOKIE_NAME,
        ),
        (
            &[
                (ANNOTATION_STICKY_SESSIONS_TYPE, "cookies"),
                (ANNOTATION_STICKY_SESSIONS_COOKIE_NAME, "c"),
            ][..],
            ANNOTATION_STICKY_SESSIONS_COOKIE_TTL,
        ),
    ] {
        let e = LbSettings::from_service(&svc(pairs))
            .unwrap_err()
            .to_string();
        assert!(e.contains(named), "{pairs:?}: {e}");
    }
    // A long value is quoted by its start only.
    let e = LbSettings::from_service(&svc(&[(ANNOTATION_CERTIFICATE_ID, &"c".repeat(100_000))]))
        .unwrap_err()
        .to_string();
    assert!(e.len() < 400, "{e}");
}

#[test]
fn what_this_cloud_lacks_is_refused_naming_the_annotation_and_why() {
    /// Annotations, the one the error names, and a word of why.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case<'_>; 11] = [
        (
            &[(ANNOTATION_HTTP3_PORT, "443")],
            ANNOTATION_HTTP3_PORT,
            "HTTP/3",
        ),
        (
            &[(ANNOTATION_CERTIFICATE_NAME, "web")],
            ANNOTATION_CERTIFICATE_NAME,
            "by name",
        ),
        (&[(ANNOTATION_IP, "203.0.113.7")], ANNOTATION_IP, "BYOIP"),
        (
            &[(ANNOTATION_SUBNET_UUID, "s-1")],
            ANNOTATION_SUBNET_UUID,
            "subnets",
        ),
        (
            &[(ANNOTATION_ENABLE_BACKEND_KEEPALIVE, "true")],
            ANNOTATION_ENABLE_BACKEND_KEEPALIVE,
            "per client",
        ),
        (
            &[(ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS, "120")],
            ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS,
            "60 seconds",
        ),
        (
            &[(ANNOTATION_NETWORK, "INTERNAL")],
            ANNOTATION_NETWORK,
            "EXTERNAL only",
        ),
        (
            &[(ANNOTATION_NETWORK_STACK, "dualstack")],
            ANNOTATION_NETWORK_STACK,
            "allowed: IPV4, DUALSTACK",
        ),
        (
            &[(ANNOTATION_NETWORK_STACK, "IPV6")],
            ANNOTATION_NETWORK_STACK,
            "allowed: IPV4, DUALSTACK",
        ),
        (
            &[
                (ANNOTATION_NETWORK_STACK, "DUALSTACK"),
                (ANNOTATION_TYPE, "REGIONAL_NETWORK"),
            ],
            ANNOTATION_NETWORK_STACK,
            "pass IPv4 packets only",
        ),
        (
            &[(ANNOTATION_TYPE, "GLOBAL")],
            ANNOTATION_TYPE,
            "refuses GLOBAL",
        ),
    ];
    for (annotations, name, why) in cases {
        let err = LbSettings::from_service(&svc(annotations))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(name) && err.contains(why),
            "{annotations:?}: {err}"
        );
    }
    // What this cloud does anyway is accepted: the defaults, spelled out.
    LbSettings::from_service(&svc(&[
        (ANNOTATION_ENABLE_BACKEND_KEEPALIVE, "false"),
        (ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS, "60"),
        (ANNOTATION_NETWORK, "EXTERNAL"),
        (ANNOTATION_NETWORK_STACK, "IPV4"),
        (ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS, "true"),
        (ANNOTATION_TYPE, "REGIONAL"),
        (ANNOTATION_FIREWALL_MANAGED, "false"),
        // A name is looked up only without an ID, as in DigitalOcean's CCM.
        (ANNOTATION_CERTIFICATE_ID, "cert-1"),
        (ANNOTATION_CERTIFICATE_NAME, "web"),
    ]))
    .unwrap();
    let err =
        LbSettings::from_service(&svc(&[(ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS, "no")]))
            .unwrap_err();
    assert!(
        err.to_string()
            .contains(ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS)
    );
}

#[test]
fn name_hostname_type_and_port_protocols_are_read_and_checked() {
    let s = LbSettings::from_service(&svc(&[
        (ANNOTATION_NAME, "web.prod-1"),
        (ANNOTATION_HOSTNAME, "WWW.Example.com"),
        (ANNOTATION_TYPE, "REGIONAL_NETWORK"),
        (ANNOTATION_HTTP_PORTS, "80"),
        (ANNOTATION_HTTP2_PORTS, "443"),
        (ANNOTATION_CERTIFICATE_ID, "cert-1"),
    ]))
    .unwrap();
    assert_eq!(s.name.as_deref(), Some("web.prod-1"));
    assert_eq!(s.hostname.as_deref(), Some("www.example.com"));
    assert!(s.regional_network);
    assert_eq!((s.http_ports, s.http2_ports), (vec![80], vec![443]));
    assert!(
        s.tls_ports.is_empty(),
        "443 is HTTP/2, not the default TLS port"
    );
    let defaults = LbSettings::from_service(&svc(&[])).unwrap();
    assert_eq!((defaults.name, defaults.hostname), (None, None));
    assert!(!defaults.regional_network);

    for (annotations, name) in [
        (&[(ANNOTATION_NAME, "web/../x")][..], ANNOTATION_NAME),
        (
            &[(ANNOTATION_HOSTNAME, "-bad-.example.com")],
            ANNOTATION_HOSTNAME,
        ),
        (&[(ANNOTATION_HOSTNAME, "a..b")], ANNOTATION_HOSTNAME),
        (&[(ANNOTATION_HTTP_PORTS, "81")], ANNOTATION_HTTP_PORTS),
        // HTTP/2 needs a certificate or passthrough, as TLS ports do.
        (&[(ANNOTATION_HTTP2_PORTS, "443")], ANNOTATION_HTTP2_PORTS),
        (&[(ANNOTATION_DISOWN, "maybe")], ANNOTATION_DISOWN),
    ] {
        let result = LbSettings::from_service(&svc(annotations))
            .and_then(|_| disowned(&svc(annotations)).map(|_| ()));
        let err = result.unwrap_err().to_string();
        assert!(err.contains(name), "{annotations:?}: {err}");
    }
    // A port in two protocol lists is refused, naming both.
    let err = LbSettings::from_service(&svc(&[
        (ANNOTATION_HTTP_PORTS, "80,443"),
        (ANNOTATION_TLS_PORTS, "443"),
        (ANNOTATION_CERTIFICATE_ID, "cert-1"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(ANNOTATION_HTTP_PORTS)
            && err.contains(ANNOTATION_TLS_PORTS)
            && err.contains("443"),
        "{err}"
    );
    assert!(disowned(&svc(&[(ANNOTATION_DISOWN, "true")])).unwrap());
    assert!(!disowned(&svc(&[])).unwrap());
}

/// The list taken from DigitalOcean's source (`tests/data/digitalocean-annotations.txt`),
/// the provider's table and docs/do-like-cloud.md's table are the same annotations, and each
/// row of the docs names a test that exists.
#[test]
fn every_digitalocean_annotation_is_in_the_provider_and_the_docs() {
    let theirs: std::collections::BTreeSet<&str> =
        include_str!("../../tests/data/digitalocean-annotations.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
    let ours: std::collections::BTreeSet<&str> = DIGITALOCEAN_ANNOTATIONS.into_iter().collect();
    assert_eq!(ours.len(), DIGITALOCEAN_ANNOTATIONS.len(), "no duplicates");
    assert_eq!(theirs, ours);

    let docs = include_str!("../../../../docs/do-like-cloud.md");
    let table = docs
        .split("<!-- digitalocean-annotations -->")
        .nth(1)
        .expect("docs/do-like-cloud.md marks its annotation table");
    let sources = [
        include_str!("tests.rs"),
        include_str!("../load_balancer.rs"),
        include_str!("../../tests/provider.rs"),
    ];
    let mut documented = std::collections::BTreeSet::new();
    for row in table.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let test = cells[3].trim_matches('`');
        assert!(
            sources.iter().any(|s| s.contains(&format!("fn {test}("))),
            "{name}: no test named {test:?}"
        );
        assert!(documented.insert(name), "{name} twice");
    }
    assert_eq!(documented, ours.iter().copied().collect());
}

#[test]
fn the_network_stack_is_read_as_asked_or_left_to_the_provider() {
    let stack = |annotations: &[(&str, &str)]| {
        LbSettings::from_service(&svc(annotations))
            .unwrap()
            .network_stack
    };
    assert_eq!(
        stack(&[]),
        None,
        "not asked: chosen by type and Nodes, or kept as found (load_balancer.rs)"
    );
    assert_eq!(stack(&[(ANNOTATION_NETWORK_STACK, "IPV4")]), Some("IPV4"));
    assert_eq!(
        stack(&[(ANNOTATION_NETWORK_STACK, "")]),
        None,
        "empty is absent"
    );
    assert_eq!(
        stack(&[(ANNOTATION_NETWORK_STACK, "DUALSTACK")]),
        Some("DUALSTACK")
    );
    assert_eq!(
        stack(&[
            (ANNOTATION_NETWORK_STACK, "DUALSTACK"),
            (ANNOTATION_TYPE, "REGIONAL"),
        ]),
        Some("DUALSTACK")
    );
    let long = "D".repeat(300);
    let err = LbSettings::from_service(&svc(&[(ANNOTATION_NETWORK_STACK, long.as_str())]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(ANNOTATION_NETWORK_STACK) && err.len() < 400,
        "{err}"
    );
}
