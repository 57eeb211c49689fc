//! The Service annotations the provider reads: DigitalOcean's own CCM's names
//! (`service.beta.kubernetes.io/do-loadbalancer-*`, `kubernetes.digitalocean.com/load-balancer-id`),
//! with the same values and defaults, so that Services written for DigitalOcean work
//! unchanged; the provider's first names (`do-like.example.com/load-balancer-*`) are read as
//! deprecated aliases when DigitalOcean's is absent. [`LbSettings::from_service`] turns them
//! into the load balancer's settings, a pure function; an invalid value is an error naming
//! the annotation as written (the service controller makes it a Warning Event).
//!
//! **The health check** is DigitalOcean's CCM's (`buildHealthCheck` and
//! `healthCheckPathAndPort` in `cloud-controller-manager/do/loadbalancers.go`, since its
//! v0.1.50, "Fix Load Balancer Health Checks", PR #724; documented in its
//! `docs/getting-started.md`, "Health check configuration"). It probes what Kubernetes
//! itself says about a node, not the application:
//! - `externalTrafficPolicy: Local` (a `LoadBalancer` Service with a `healthCheckNodePort`):
//!   `http` on the Service's `healthCheckNodePort`, path `/healthz` — kube-proxy answers 200
//!   there only on nodes with a ready endpoint of the Service (Kubernetes'
//!   `GetServiceHealthCheckPathPort`);
//! - otherwise (`Cluster`, the default): `http` on kube-proxy's health port
//!   [`KUBE_PROXY_HEALTH_PORT`] (10256), path `/healthz` — is the node's kube-proxy healthy.
//!
//! Either way the check does not depend on the Service's protocols, so a UDP-only Service
//! is checked the same way. Interval 3 s, timeout 5 s, healthy after 5 passes, unhealthy
//! after 3 failures; those four annotations always apply. The port, path and protocol
//! annotations take effect only when [`ANNOTATION_OVERRIDE_HEALTH_CHECK`] is present (any
//! value), as in DigitalOcean's CCM; without it they are ignored. With it: the port is the
//! node port of the Service port in [`ANNOTATION_HEALTH_CHECK_PORT`] (which must be TCP), by
//! default the first TCP port's; the protocol is [`ANNOTATION_HEALTH_CHECK_PROTOCOL`], by
//! default `http` with a path and `tcp` without. DigitalOcean's CCM also sends
//! `proxy_protocol: false` with its default check (kube-proxy does not speak PROXY); this
//! API's health check has no such field, and the simulator's checks never speak PROXY.

use ccm_core::provider::{CloudError, CloudResult, echo};
use k8s_openapi::api::core::v1::{Service, ServicePort};

use crate::api::{
    HealthCheck, LbFirewall, NETWORK_STACK_DUALSTACK, NETWORK_STACK_IPV4, StickySessions,
};

/// The LB's ID, used for lookup when present (only an LB this Service owns is used).
pub const ANNOTATION_LOAD_BALANCER_ID: &str = "kubernetes.digitalocean.com/load-balancer-id";
/// The provider's first name for [`ANNOTATION_LOAD_BALANCER_ID`]: read when that is absent,
/// removed with it, never written.
pub const LEGACY_ANNOTATION_LOAD_BALANCER_ID: &str = "do-like.example.com/load-balancer-id";
/// `tcp` (default), `http`, `https` or `http2`: the forwarding rules' protocol.
pub const ANNOTATION_PROTOCOL: &str = "service.beta.kubernetes.io/do-loadbalancer-protocol";
/// Comma-separated Service ports that speak `https` (with a certificate or passthrough);
/// default `443` when a certificate or passthrough is set.
pub const ANNOTATION_TLS_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-tls-ports";
/// The certificate terminating TLS on `https`/`http2` ports (the target is then `http`).
pub const ANNOTATION_CERTIFICATE_ID: &str =
    "service.beta.kubernetes.io/do-loadbalancer-certificate-id";
/// `true`: TLS on `https`/`http2` ports is passed through to the droplets.
pub const ANNOTATION_TLS_PASSTHROUGH: &str =
    "service.beta.kubernetes.io/do-loadbalancer-tls-passthrough";
/// Present (any value): [`ANNOTATION_HEALTH_CHECK_PATH`], [`ANNOTATION_HEALTH_CHECK_PROTOCOL`]
/// and [`ANNOTATION_HEALTH_CHECK_PORT`] replace the default health check (module docs).
pub const ANNOTATION_OVERRIDE_HEALTH_CHECK: &str =
    "service.beta.kubernetes.io/do-loadbalancer-override-health-check";
/// The health check's path (starts with `/`), with [`ANNOTATION_OVERRIDE_HEALTH_CHECK`] only;
/// makes the overridden check `http` by default.
pub const ANNOTATION_HEALTH_CHECK_PATH: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-path";
/// `tcp`, `http` or `https`, with [`ANNOTATION_OVERRIDE_HEALTH_CHECK`] only; default `http`
/// with a path, else `tcp`.
pub const ANNOTATION_HEALTH_CHECK_PROTOCOL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-protocol";
/// The (TCP) Service port whose node port is checked, with
/// [`ANNOTATION_OVERRIDE_HEALTH_CHECK`] only; default the first TCP port.
pub const ANNOTATION_HEALTH_CHECK_PORT: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-port";
/// Seconds between checks, 3..=300; default 3.
pub const ANNOTATION_HEALTH_CHECK_INTERVAL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-check-interval-seconds";
/// Seconds to wait for a check's answer, 3..=300; default 5.
pub const ANNOTATION_HEALTH_CHECK_TIMEOUT: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-response-timeout-seconds";
/// Passes before a droplet is healthy, 2..=10; default 5.
pub const ANNOTATION_HEALTH_CHECK_HEALTHY: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-healthy-threshold";
/// Failures before a droplet is unhealthy, 2..=10; default 3.
pub const ANNOTATION_HEALTH_CHECK_UNHEALTHY: &str =
    "service.beta.kubernetes.io/do-loadbalancer-healthcheck-unhealthy-threshold";
/// `round_robin` (default) or `least_connections`.
pub const ANNOTATION_ALGORITHM: &str = "service.beta.kubernetes.io/do-loadbalancer-algorithm";
/// `lb-small`, `lb-medium` or `lb-large` (not with [`ANNOTATION_SIZE_UNIT`]).
pub const ANNOTATION_SIZE_SLUG: &str = "service.beta.kubernetes.io/do-loadbalancer-size-slug";
/// The number of LB nodes, 1..=100 (not with [`ANNOTATION_SIZE_SLUG`]).
pub const ANNOTATION_SIZE_UNIT: &str = "service.beta.kubernetes.io/do-loadbalancer-size-unit";
/// `none` (default) or `cookies`.
pub const ANNOTATION_STICKY_SESSIONS_TYPE: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-type";
/// The cookie's name; required with `cookies`.
pub const ANNOTATION_STICKY_SESSIONS_COOKIE_NAME: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-cookie-name";
/// The cookie's lifetime in seconds (positive); required with `cookies`.
pub const ANNOTATION_STICKY_SESSIONS_COOKIE_TTL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-sticky-sessions-cookie-ttl";
/// `true`: HTTP on port 80 is redirected to HTTPS on 443.
pub const ANNOTATION_REDIRECT_HTTP_TO_HTTPS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-redirect-http-to-https";
/// `true`: the PROXY protocol is spoken to the droplets.
pub const ANNOTATION_ENABLE_PROXY_PROTOCOL: &str =
    "service.beta.kubernetes.io/do-loadbalancer-enable-proxy-protocol";
/// The load balancer firewall's allow rules, `ip:<address>` or `cidr:<network>/<len>`,
/// comma-separated; `spec.loadBalancerSourceRanges` takes precedence, as in DigitalOcean's
/// CCM (`buildFirewall`).
pub const ANNOTATION_ALLOW_RULES: &str = "service.beta.kubernetes.io/do-loadbalancer-allow-rules";
/// The load balancer firewall's deny rules, in the same form.
pub const ANNOTATION_DENY_RULES: &str = "service.beta.kubernetes.io/do-loadbalancer-deny-rules";
/// The load balancer's name, as DigitalOcean's CCM names it (`getLoadBalancerName`): at
/// most 255 letters, digits, `-` and `.`; default `a` + the Service's UID. The name proves
/// nothing about ownership (see the `load_balancer` module); it is only what the cloud shows.
pub const ANNOTATION_NAME: &str = "service.beta.kubernetes.io/do-loadbalancer-name";
/// A hostname put in the Service's status (`ingress[].hostname`) instead of the LB's
/// address, as DigitalOcean's CCM does for clients that must reach it by name (PROXY
/// protocol behind kube-proxy); lowercased.
pub const ANNOTATION_HOSTNAME: &str = "service.beta.kubernetes.io/do-loadbalancer-hostname";
/// `true`: the LB is left alone — ensure reports its status, update changes nothing, and
/// deletion keeps it (DigitalOcean's CCM's `do-loadbalancer-disown`; note its prefix).
pub const ANNOTATION_DISOWN: &str = "service.kubernetes.io/do-loadbalancer-disown";
/// Comma-separated Service ports whose rules speak `http` (not with the TLS or HTTP/2 ports).
pub const ANNOTATION_HTTP_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-http-ports";
/// Comma-separated Service ports whose rules speak `http2` (TLS as the TLS ports: a
/// certificate or passthrough).
pub const ANNOTATION_HTTP2_PORTS: &str = "service.beta.kubernetes.io/do-loadbalancer-http2-ports";
/// One Service port for an extra `http3` rule: refused, this cloud's load balancers have no
/// HTTP/3.
pub const ANNOTATION_HTTP3_PORT: &str = "service.beta.kubernetes.io/do-loadbalancer-http3-port";
/// A certificate by name: refused, this cloud's API has no certificates to look up (use
/// [`ANNOTATION_CERTIFICATE_ID`]).
pub const ANNOTATION_CERTIFICATE_NAME: &str =
    "service.beta.kubernetes.io/do-loadbalancer-certificate-name";
/// `true`/`false`: whether Let's Encrypt certificates get DNS records. This cloud makes no
/// DNS records, so either value is what happens.
pub const ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-disable-lets-encrypt-dns-records";
/// `true`: keep-alive connections to the droplets; refused, this cloud's load balancers
/// open one connection per client connection (`false` is accepted).
pub const ANNOTATION_ENABLE_BACKEND_KEEPALIVE: &str =
    "service.beta.kubernetes.io/do-loadbalancer-enable-backend-keepalive";
/// The HTTP idle timeout; refused unless it is DigitalOcean's default, 60: this cloud's load
/// balancers have no other.
pub const ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS: &str =
    "service.beta.kubernetes.io/do-loadbalancer-http-idle-timeout-seconds";
/// `REGIONAL` (proxying to node ports, the default here) or `REGIONAL_NETWORK` (packets
/// passed through to the Service's ports, kube-proxy taking them by the LB's address: the
/// simulator's passthrough rules); `GLOBAL` is refused, as DigitalOcean's CCM refuses it.
/// DigitalOcean's CCM defaults to `REGIONAL_NETWORK` and writes the type back to every
/// Service, so Services it served keep their type here.
pub const ANNOTATION_TYPE: &str = "service.beta.kubernetes.io/do-loadbalancer-type";
/// `EXTERNAL` (the default, and the only network of this cloud's load balancers); `INTERNAL`
/// is refused.
pub const ANNOTATION_NETWORK: &str = "service.beta.kubernetes.io/do-loadbalancer-network";
/// `IPV4` or `DUALSTACK`: the load balancer gets an IPv6 address too (the API's `ipv6`,
/// listed in the Service's ingress after the IPv4 one) and forwards from both to the
/// droplets' private IPv4 addresses, as DigitalOcean's `network_stack`. `DUALSTACK` only
/// with `REGIONAL` ([`ANNOTATION_TYPE`]): this cloud's network load balancers pass IPv4
/// packets only. Unset: a new load balancer's as DigitalOcean's CCM chooses it (`REGIONAL`:
/// `DUALSTACK`; `REGIONAL_NETWORK`: by the Nodes' addresses), an existing one's kept
/// (issue 66; docs/do-like-cloud.md, "DigitalOcean's defaults, field by field").
pub const ANNOTATION_NETWORK_STACK: &str =
    "service.beta.kubernetes.io/do-loadbalancer-network-stack";
/// A reserved (BYOIP) address for the LB: refused, this cloud has no reserved addresses.
pub const ANNOTATION_IP: &str = "service.beta.kubernetes.io/do-loadbalancer-ip";
/// A VPC subnet for the LB: refused, this cloud's VPCs have no subnets.
pub const ANNOTATION_SUBNET_UUID: &str = "service.beta.kubernetes.io/do-loadbalancer-subnet-uuid";
/// Whether DigitalOcean's CCM opens a NodePort Service's ports in its public-access
/// firewall. This cloud has no droplet firewall (node ports are reachable), so whatever
/// the value, what it asks for is what happens; nothing is read.
pub const ANNOTATION_FIREWALL_MANAGED: &str = "kubernetes.digitalocean.com/firewall-managed";

/// Every annotation DigitalOcean's CCM reads, as the provider treats it (docs/do-like-cloud.md
/// has the same table; a test checks both against the list taken from DigitalOcean's
/// source).
pub const DIGITALOCEAN_ANNOTATIONS: [&str; 39] = [
    ANNOTATION_LOAD_BALANCER_ID,
    ANNOTATION_NAME,
    ANNOTATION_PROTOCOL,
    ANNOTATION_HEALTH_CHECK_PATH,
    ANNOTATION_HEALTH_CHECK_PORT,
    ANNOTATION_HEALTH_CHECK_PROTOCOL,
    ANNOTATION_OVERRIDE_HEALTH_CHECK,
    ANNOTATION_HEALTH_CHECK_INTERVAL,
    ANNOTATION_HEALTH_CHECK_TIMEOUT,
    ANNOTATION_HEALTH_CHECK_UNHEALTHY,
    ANNOTATION_HEALTH_CHECK_HEALTHY,
    ANNOTATION_HTTP_PORTS,
    ANNOTATION_TLS_PORTS,
    ANNOTATION_HTTP2_PORTS,
    ANNOTATION_HTTP3_PORT,
    ANNOTATION_TLS_PASSTHROUGH,
    ANNOTATION_CERTIFICATE_ID,
    ANNOTATION_CERTIFICATE_NAME,
    ANNOTATION_HOSTNAME,
    ANNOTATION_ALGORITHM,
    ANNOTATION_SIZE_SLUG,
    ANNOTATION_SIZE_UNIT,
    ANNOTATION_STICKY_SESSIONS_TYPE,
    ANNOTATION_STICKY_SESSIONS_COOKIE_NAME,
    ANNOTATION_STICKY_SESSIONS_COOKIE_TTL,
    ANNOTATION_REDIRECT_HTTP_TO_HTTPS,
    ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS,
    ANNOTATION_ENABLE_PROXY_PROTOCOL,
    ANNOTATION_ENABLE_BACKEND_KEEPALIVE,
    ANNOTATION_DISOWN,
    ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS,
    ANNOTATION_DENY_RULES,
    ANNOTATION_ALLOW_RULES,
    ANNOTATION_TYPE,
    ANNOTATION_NETWORK,
    ANNOTATION_NETWORK_STACK,
    ANNOTATION_IP,
    ANNOTATION_SUBNET_UUID,
    ANNOTATION_FIREWALL_MANAGED,
];

/// The most firewall rules (allow and deny, each) a load balancer gets; a longer list is an
/// error.
const MAX_FIREWALL_RULES: usize = 100;

/// kube-proxy's health port (`--healthz-bind-address`'s default): `/healthz` there answers
/// 200 while the node's kube-proxy is healthy. The default health check of a Service whose
/// `externalTrafficPolicy` is `Cluster`, as in DigitalOcean's CCM (`kubeProxyHealthPort`).
pub const KUBE_PROXY_HEALTH_PORT: u16 = 10256;

/// The path of the default health checks, kube-proxy's on both of its health ports.
const HEALTHZ: &str = "/healthz";

/// The provider's first names, read as aliases of DigitalOcean's when those are absent.
pub const LEGACY_ALIASES: [(&str, &str); 4] = [
    (
        "do-like.example.com/load-balancer-protocol",
        ANNOTATION_PROTOCOL,
    ),
    (
        "do-like.example.com/load-balancer-healthcheck-path",
        ANNOTATION_HEALTH_CHECK_PATH,
    ),
    (
        "do-like.example.com/load-balancer-algorithm",
        ANNOTATION_ALGORITHM,
    ),
    (
        "do-like.example.com/load-balancer-size",
        ANNOTATION_SIZE_SLUG,
    ),
];

/// The longest annotation value read whole (a path, a certificate ID, a cookie name); a
/// longer one is refused, and quoted only by its start.
const MAX_VALUE: usize = 256;

/// The settings of a Service's load balancer that annotations choose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LbSettings {
    /// The default protocol of forwarding rules.
    pub protocol: String,
    /// Service ports that speak `https`.
    pub tls_ports: Vec<u16>,
    /// The certificate of `https`/`http2` rules.
    pub certificate_id: String,
    /// TLS passthrough on `https`/`http2` rules.
    pub tls_passthrough: bool,
    /// The health check, complete: its port is a node port (module docs).
    pub health_check: HealthCheck,
    pub algorithm: String,
    pub size: Option<String>,
    pub size_unit: Option<u32>,
    pub sticky_sessions: StickySessions,
    pub redirect_http_to_https: bool,
    pub enable_proxy_protocol: bool,
    /// The firewall; `None` without rules.
    pub firewall: Option<LbFirewall>,
    /// The LB's name from [`ANNOTATION_NAME`]; `None`: the Service's default name.
    pub name: Option<String>,
    /// [`ANNOTATION_HOSTNAME`], lowercased.
    pub hostname: Option<String>,
    /// Service ports whose rules speak `http` ([`ANNOTATION_HTTP_PORTS`]).
    pub http_ports: Vec<u16>,
    /// Service ports whose rules speak `http2` ([`ANNOTATION_HTTP2_PORTS`]).
    pub http2_ports: Vec<u16>,
    /// `REGIONAL_NETWORK` ([`ANNOTATION_TYPE`]): passthrough rules to the Service's ports.
    pub regional_network: bool,
    /// [`ANNOTATION_NETWORK_STACK`]'s value, `IPV4` or `DUALSTACK` (`DUALSTACK`: an IPv6
    /// address too); `None` when the Service does not say, and the provider chooses as
    /// DigitalOcean's CCM does for a new load balancer and keeps an existing one's.
    pub network_stack: Option<&'static str>,
}

/// Whether [`ANNOTATION_DISOWN`] is true: the provider leaves the Service's LB alone.
pub(crate) fn disowned(service: &Service) -> CloudResult<bool> {
    boolean(service, ANNOTATION_DISOWN)
}

/// An annotation this cloud cannot honour, refused with why (DigitalOcean's CCM would act on
/// it); absent or empty is fine.
fn refuse_if_set(service: &Service, key: &'static str, why: &str) -> CloudResult<()> {
    match text(service, key)? {
        None => Ok(()),
        Some((name, v)) => Err(invalid(name, v, why)),
    }
}

/// The annotations of DigitalOcean's that this cloud has no counterpart for: refused when
/// they ask for something else than what this cloud does (module docs of each constant).
fn refuse_what_this_cloud_lacks(service: &Service) -> CloudResult<()> {
    refuse_if_set(
        service,
        ANNOTATION_HTTP3_PORT,
        "this cloud's load balancers have no HTTP/3",
    )?;
    if text(service, ANNOTATION_CERTIFICATE_ID)?.is_none() {
        refuse_if_set(
            service,
            ANNOTATION_CERTIFICATE_NAME,
            &format!(
                "this cloud's API has no certificates to look up by name; set \
                 {ANNOTATION_CERTIFICATE_ID}"
            ),
        )?;
    }
    refuse_if_set(
        service,
        ANNOTATION_IP,
        "this cloud has no reserved (BYOIP) addresses",
    )?;
    refuse_if_set(
        service,
        ANNOTATION_SUBNET_UUID,
        "this cloud's VPCs have no subnets",
    )?;
    if boolean(service, ANNOTATION_ENABLE_BACKEND_KEEPALIVE)? {
        return Err(invalid(
            ANNOTATION_ENABLE_BACKEND_KEEPALIVE,
            "true",
            "this cloud's load balancers open one connection to a droplet per client \
             connection",
        ));
    }
    number(service, ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS, 60..=60, None).map_err(|_| {
        CloudError::msg(format!(
            "annotation {ANNOTATION_HTTP_IDLE_TIMEOUT_SECONDS}: this cloud's load balancers \
             have one HTTP idle timeout, 60 seconds"
        ))
    })?;
    boolean(service, ANNOTATION_DISABLE_LETS_ENCRYPT_DNS_RECORDS)?;
    one_of(service, ANNOTATION_NETWORK, &["EXTERNAL"], "EXTERNAL").map_err(|_| {
        CloudError::msg(format!(
            "annotation {ANNOTATION_NETWORK}: this cloud's load balancers are EXTERNAL only"
        ))
    })?;
    Ok(())
}

/// [`ANNOTATION_NAME`], checked as the API checks names.
pub(crate) fn lb_name(service: &Service) -> CloudResult<Option<String>> {
    let Some((name, v)) = text(service, ANNOTATION_NAME)? else {
        return Ok(None);
    };
    if v.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    {
        Ok(Some(v.to_owned()))
    } else {
        Err(invalid(name, v, "letters, digits, - and . only"))
    }
}

/// [`ANNOTATION_HOSTNAME`], lowercased and checked as a DNS name.
pub(crate) fn hostname(service: &Service) -> CloudResult<Option<String>> {
    let Some((name, v)) = text(service, ANNOTATION_HOSTNAME)? else {
        return Ok(None);
    };
    let v = v.to_ascii_lowercase();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if v.len() <= 253 && v.split('.').all(label_ok) {
        Ok(Some(v))
    } else {
        Err(invalid(
            name,
            &v,
            "must be a DNS name such as www.example.com",
        ))
    }
}

/// The value of annotation `key` (trimmed), or of its legacy alias when it is absent: the
/// name actually read and its value.
pub(crate) fn read<'a>(service: &'a Service, key: &'static str) -> Option<(&'static str, &'a str)> {
    let annotations = service.metadata.annotations.as_ref()?;
    if let Some(v) = annotations.get(key) {
        return Some((key, v.trim()));
    }
    let legacy = if key == ANNOTATION_LOAD_BALANCER_ID {
        Some(LEGACY_ANNOTATION_LOAD_BALANCER_ID)
    } else {
        LEGACY_ALIASES
            .iter()
            .find(|(_, new)| *new == key)
            .map(|(old, _)| *old)
    };
    legacy.and_then(|old| annotations.get(old).map(|v| (old, v.trim())))
}

/// A value quoted for an error: at most 64 bytes of it.
fn quoted(v: &str) -> String {
    format!("{:?}", echo::Echo::new(v, 64))
}

fn invalid(name: &str, value: &str, why: &str) -> CloudError {
    CloudError::msg(format!(
        "annotation {name}: invalid value {}; {why}",
        quoted(value)
    ))
}

/// A non-empty value of `key`, checked for length.
fn text<'a>(
    service: &'a Service,
    key: &'static str,
) -> CloudResult<Option<(&'static str, &'a str)>> {
    match read(service, key) {
        None | Some((_, "")) => Ok(None),
        Some((name, v)) if v.len() > MAX_VALUE => {
            Err(invalid(name, v, &format!("at most {MAX_VALUE} bytes")))
        }
        Some(found) => Ok(Some(found)),
    }
}

fn one_of(
    service: &Service,
    key: &'static str,
    allowed: &[&str],
    default: &str,
) -> CloudResult<String> {
    match text(service, key)? {
        None => Ok(default.to_owned()),
        Some((_, v)) if allowed.contains(&v) => Ok(v.to_owned()),
        Some((name, v)) => Err(invalid(
            name,
            v,
            &format!("allowed: {}", allowed.join(", ")),
        )),
    }
}

fn number(
    service: &Service,
    key: &'static str,
    range: std::ops::RangeInclusive<u32>,
    default: Option<u32>,
) -> CloudResult<Option<u32>> {
    match text(service, key)? {
        None => Ok(default),
        Some((name, v)) => match v.parse::<u32>() {
            Ok(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(invalid(
                name,
                v,
                &format!(
                    "must be a whole number from {} to {}",
                    range.start(),
                    range.end()
                ),
            )),
        },
    }
}

/// Go's `strconv.ParseBool` spellings, as DigitalOcean's CCM reads booleans; absent is false.
fn boolean(service: &Service, key: &'static str) -> CloudResult<bool> {
    match text(service, key)? {
        None => Ok(false),
        Some((_, "1" | "t" | "T" | "true" | "TRUE" | "True")) => Ok(true),
        Some((_, "0" | "f" | "F" | "false" | "FALSE" | "False")) => Ok(false),
        Some((name, v)) => Err(invalid(name, v, "must be true or false")),
    }
}

fn port_list(service: &Service, key: &'static str) -> CloudResult<Vec<u16>> {
    let Some((name, v)) = text(service, key)? else {
        return Ok(Vec::new());
    };
    let ports = service_ports(service);
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim) {
        match part.parse::<u16>() {
            Ok(p) if p > 0 && ports.contains(&p) => out.push(p),
            Ok(p) if p > 0 => {
                return Err(invalid(
                    name,
                    v,
                    &format!("port {p} is not a port of the Service"),
                ));
            }
            _ => {
                return Err(invalid(
                    name,
                    v,
                    "must be comma-separated port numbers (1..65535)",
                ));
            }
        }
    }
    Ok(out)
}

/// The Service's ports (`port`, not node ports).
fn service_ports(service: &Service) -> Vec<u16> {
    service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .filter_map(|p| u16::try_from(p.port).ok())
        .collect()
}

/// Whether Service port `p` is TCP (the API's default when unset).
fn is_tcp(p: &ServicePort) -> bool {
    p.protocol.as_deref().is_none_or(|proto| proto == "TCP")
}

/// The port of the default health check (module docs): the Service's `healthCheckNodePort`
/// when it is a `LoadBalancer` with `externalTrafficPolicy: Local` and has one, else
/// kube-proxy's [`KUBE_PROXY_HEALTH_PORT`]; as DigitalOcean's CCM's `healthCheckPathAndPort`
/// over Kubernetes' `GetServiceHealthCheckPathPort`. The path is [`HEALTHZ`] either way.
fn default_health_check_port(service: &Service) -> u16 {
    let Some(spec) = service.spec.as_ref() else {
        return KUBE_PROXY_HEALTH_PORT;
    };
    let local = spec.type_.as_deref() == Some("LoadBalancer")
        && spec.external_traffic_policy.as_deref() == Some("Local");
    match spec
        .health_check_node_port
        .and_then(|p| u16::try_from(p).ok())
    {
        Some(port) if local && port != 0 => port,
        _ => KUBE_PROXY_HEALTH_PORT,
    }
}

/// The node port checked when the health check is overridden: that of the Service port in
/// [`ANNOTATION_HEALTH_CHECK_PORT`], which must be TCP, else of the first TCP port
/// (DigitalOcean's CCM's `healthCheckPort`). Where a port number is both TCP and UDP, the TCP
/// one is meant (DigitalOcean's takes the first listed, and refuses it if that is UDP).
fn overridden_health_check_port(service: &Service) -> CloudResult<u16> {
    let ports: Vec<&ServicePort> = service
        .spec
        .iter()
        .flat_map(|s| s.ports.iter().flatten())
        .collect();
    let wanted = number(service, ANNOTATION_HEALTH_CHECK_PORT, 1..=65535, None)?;
    let chosen = match wanted {
        Some(n) => {
            let same: Vec<&ServicePort> = ports
                .iter()
                .copied()
                .filter(|p| u32::try_from(p.port) == Ok(n))
                .collect();
            let shown = n.to_string();
            match (same.iter().find(|p| is_tcp(p)), same.first()) {
                (Some(p), _) => *p,
                (None, Some(p)) => {
                    return Err(invalid(
                        ANNOTATION_HEALTH_CHECK_PORT,
                        &shown,
                        &format!(
                            "port {n} is {}; a health check cannot be UDP, only a TCP port is checked",
                            p.protocol.as_deref().unwrap_or_default()
                        ),
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        ANNOTATION_HEALTH_CHECK_PORT,
                        &shown,
                        &format!("port {n} is not a port of the Service"),
                    ));
                }
            }
        }
        None => match ports.iter().copied().find(|p| is_tcp(p)) {
            Some(p) => p,
            None => {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_OVERRIDE_HEALTH_CHECK}: the Service has no TCP port \
                     to health check (a health check cannot be UDP); add one and name it in \
                     {ANNOTATION_HEALTH_CHECK_PORT}, or remove the annotation"
                )));
            }
        },
    };
    match chosen.node_port.and_then(|p| u16::try_from(p).ok()) {
        Some(node_port) if node_port != 0 => Ok(node_port),
        _ => Err(CloudError::msg(format!(
            "port {} has no node port yet to health check",
            chosen.port
        ))),
    }
}

/// The protocol, port and path of an overridden health check (module docs); the path is
/// empty for `tcp`.
fn overridden_health_check(service: &Service) -> CloudResult<(String, u16, String)> {
    let path = match text(service, ANNOTATION_HEALTH_CHECK_PATH)? {
        None => None,
        Some((_, p)) if p.starts_with('/') && !p.contains(char::is_whitespace) => {
            Some(p.to_owned())
        }
        Some((name, p)) => {
            return Err(invalid(name, p, "a path starts with / and has no spaces"));
        }
    };
    let protocol = one_of(
        service,
        ANNOTATION_HEALTH_CHECK_PROTOCOL,
        &["tcp", "http", "https"],
        if path.is_some() { "http" } else { "tcp" },
    )?;
    let port = overridden_health_check_port(service)?;
    let path = if protocol == "tcp" {
        String::new()
    } else {
        path.unwrap_or_else(|| "/".to_owned())
    };
    Ok((protocol, port, path))
}

/// The Service's health check (module docs): the default, or the overridden one; the
/// interval, timeout and thresholds from their annotations either way.
fn health_check(service: &Service) -> CloudResult<HealthCheck> {
    let (protocol, port, path) = if read(service, ANNOTATION_OVERRIDE_HEALTH_CHECK).is_some() {
        overridden_health_check(service)?
    } else {
        (
            "http".to_owned(),
            default_health_check_port(service),
            HEALTHZ.to_owned(),
        )
    };
    let timing = |key, range, default| -> CloudResult<u32> {
        Ok(number(service, key, range, Some(default))?.unwrap_or(default))
    };
    Ok(HealthCheck {
        protocol,
        port,
        path,
        check_interval_seconds: timing(ANNOTATION_HEALTH_CHECK_INTERVAL, 3..=300, 3)?,
        response_timeout_seconds: timing(ANNOTATION_HEALTH_CHECK_TIMEOUT, 3..=300, 5)?,
        healthy_threshold: timing(ANNOTATION_HEALTH_CHECK_HEALTHY, 2..=10, 5)?,
        unhealthy_threshold: timing(ANNOTATION_HEALTH_CHECK_UNHEALTHY, 2..=10, 3)?,
    })
}

impl LbSettings {
    /// Reads every annotation of `service`; the first invalid one is the error.
    pub(crate) fn from_service(service: &Service) -> CloudResult<Self> {
        let protocol = one_of(
            service,
            ANNOTATION_PROTOCOL,
            &["tcp", "http", "https", "http2"],
            "tcp",
        )?;
        let certificate_id = text(service, ANNOTATION_CERTIFICATE_ID)?
            .map(|(_, v)| v.to_owned())
            .unwrap_or_default();
        let tls_passthrough = boolean(service, ANNOTATION_TLS_PASSTHROUGH)?;
        if !certificate_id.is_empty() && tls_passthrough {
            return Err(CloudError::msg(format!(
                "annotations {ANNOTATION_CERTIFICATE_ID} and {ANNOTATION_TLS_PASSTHROUGH}: \
                 set a certificate or TLS passthrough, not both"
            )));
        }
        refuse_what_this_cloud_lacks(service)?;
        let regional_network = match one_of(
            service,
            ANNOTATION_TYPE,
            &["REGIONAL", "REGIONAL_NETWORK"],
            "REGIONAL",
        ) {
            Ok(t) => t == "REGIONAL_NETWORK",
            Err(_) => {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_TYPE}: allowed: REGIONAL, REGIONAL_NETWORK \
                     (DigitalOcean's CCM refuses GLOBAL too)"
                )));
            }
        };
        let network_stack = network_stack(service)?;
        if network_stack == Some(NETWORK_STACK_DUALSTACK) && regional_network {
            return Err(CloudError::msg(format!(
                "annotation {ANNOTATION_NETWORK_STACK}: DUALSTACK needs \
                 {ANNOTATION_TYPE}: REGIONAL; this cloud's REGIONAL_NETWORK load balancers \
                 pass IPv4 packets only"
            )));
        }
        let http_ports = port_list(service, ANNOTATION_HTTP_PORTS)?;
        let http2_ports = port_list(service, ANNOTATION_HTTP2_PORTS)?;
        let mut tls_ports = port_list(service, ANNOTATION_TLS_PORTS)?;
        if tls_ports.is_empty()
            && (!certificate_id.is_empty() || tls_passthrough)
            && !http2_ports.contains(&443)
        {
            tls_ports.push(443);
        }
        for (a, a_ports, b, b_ports) in [
            (
                ANNOTATION_HTTP_PORTS,
                &http_ports,
                ANNOTATION_TLS_PORTS,
                &tls_ports,
            ),
            (
                ANNOTATION_HTTP_PORTS,
                &http_ports,
                ANNOTATION_HTTP2_PORTS,
                &http2_ports,
            ),
            (
                ANNOTATION_TLS_PORTS,
                &tls_ports,
                ANNOTATION_HTTP2_PORTS,
                &http2_ports,
            ),
        ] {
            if let Some(p) = a_ports.iter().find(|p| b_ports.contains(p)) {
                return Err(CloudError::msg(format!(
                    "annotations {a} and {b}: port {p} is in both"
                )));
            }
        }
        let secure = protocol == "https"
            || protocol == "http2"
            || read(service, ANNOTATION_TLS_PORTS).is_some()
            || !http2_ports.is_empty();
        if secure && certificate_id.is_empty() && !tls_passthrough {
            let name = if protocol == "https" || protocol == "http2" {
                ANNOTATION_PROTOCOL
            } else if !http2_ports.is_empty() {
                ANNOTATION_HTTP2_PORTS
            } else {
                ANNOTATION_TLS_PORTS
            };
            return Err(CloudError::msg(format!(
                "annotation {name}: TLS ports need {ANNOTATION_CERTIFICATE_ID} or \
                 {ANNOTATION_TLS_PASSTHROUGH}"
            )));
        }

        let health_check = health_check(service)?;

        let algorithm = one_of(
            service,
            ANNOTATION_ALGORITHM,
            &["round_robin", "least_connections"],
            "round_robin",
        )?;
        let size = match text(service, ANNOTATION_SIZE_SLUG)? {
            None => None,
            Some(_) => Some(one_of(
                service,
                ANNOTATION_SIZE_SLUG,
                &["lb-small", "lb-medium", "lb-large"],
                "",
            )?),
        };
        let size_unit = number(service, ANNOTATION_SIZE_UNIT, 1..=100, None)?;
        if size.is_some() && size_unit.is_some() {
            return Err(CloudError::msg(format!(
                "annotations {ANNOTATION_SIZE_SLUG} and {ANNOTATION_SIZE_UNIT}: set one, not both"
            )));
        }

        let sticky_type = one_of(
            service,
            ANNOTATION_STICKY_SESSIONS_TYPE,
            &["none", "cookies"],
            "none",
        )?;
        let sticky_sessions = if sticky_type == "cookies" {
            let Some((_, cookie_name)) = text(service, ANNOTATION_STICKY_SESSIONS_COOKIE_NAME)?
            else {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_STICKY_SESSIONS_COOKIE_NAME}: required with \
                     {ANNOTATION_STICKY_SESSIONS_TYPE}: cookies"
                )));
            };
            if !cookie_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(invalid(
                    ANNOTATION_STICKY_SESSIONS_COOKIE_NAME,
                    cookie_name,
                    "letters, digits, - and _ only",
                ));
            }
            let Some(ttl) = number(
                service,
                ANNOTATION_STICKY_SESSIONS_COOKIE_TTL,
                1..=u32::MAX,
                None,
            )?
            else {
                return Err(CloudError::msg(format!(
                    "annotation {ANNOTATION_STICKY_SESSIONS_COOKIE_TTL}: required with \
                     {ANNOTATION_STICKY_SESSIONS_TYPE}: cookies"
                )));
            };
            StickySessions {
                kind: sticky_type,
                cookie_name: cookie_name.to_owned(),
                cookie_ttl_seconds: ttl,
            }
        } else if service
            .spec
            .as_ref()
            .and_then(|s| s.session_affinity.as_deref())
            == Some("ClientIP")
        {
            // What DigitalOcean lacks and Kubernetes asks for (its e2e specs check it): each
            // client to one node, whose kube-proxy keeps it on one Pod. The DO-like API's
            // extension; a cookie annotation, when set, wins.
            StickySessions {
                kind: "x_client_ip".into(),
                cookie_name: String::new(),
                cookie_ttl_seconds: 0,
            }
        } else {
            StickySessions::default()
        };

        Ok(Self {
            protocol,
            tls_ports,
            certificate_id,
            tls_passthrough,
            health_check,
            algorithm,
            size,
            size_unit,
            sticky_sessions,
            redirect_http_to_https: boolean(service, ANNOTATION_REDIRECT_HTTP_TO_HTTPS)?,
            enable_proxy_protocol: boolean(service, ANNOTATION_ENABLE_PROXY_PROTOCOL)?,
            firewall: firewall(service)?,
            name: lb_name(service)?,
            hostname: hostname(service)?,
            http_ports,
            http2_ports,
            regional_network,
            network_stack,
        })
    }
}

/// [`ANNOTATION_NETWORK_STACK`]: `IPV4` or `DUALSTACK`, exactly as DigitalOcean spells
/// them (its CCM compares them case-sensitively too); `None` when absent.
fn network_stack(service: &Service) -> CloudResult<Option<&'static str>> {
    match text(service, ANNOTATION_NETWORK_STACK)? {
        None => Ok(None),
        Some((_, NETWORK_STACK_IPV4)) => Ok(Some(NETWORK_STACK_IPV4)),
        Some((_, NETWORK_STACK_DUALSTACK)) => Ok(Some(NETWORK_STACK_DUALSTACK)),
        Some((name, v)) => Err(invalid(
            name,
            v,
            &format!("allowed: {NETWORK_STACK_IPV4}, {NETWORK_STACK_DUALSTACK}"),
        )),
    }
}

/// The firewall DigitalOcean's CCM builds (`buildFirewall`): allow the
/// `loadBalancerSourceRanges` (as `cidr:` rules) or else the allow-rules annotation; deny
/// the deny-rules annotation. `None` when both lists are empty.
fn firewall(service: &Service) -> CloudResult<Option<LbFirewall>> {
    let ranges: Vec<String> = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default();
    if ranges.len() > MAX_FIREWALL_RULES {
        return Err(CloudError::msg(format!(
            "spec.loadBalancerSourceRanges: {} ranges; at most {MAX_FIREWALL_RULES}",
            ranges.len()
        )));
    }
    let allow = if ranges.is_empty() {
        firewall_rules(service, ANNOTATION_ALLOW_RULES)?
    } else {
        let mut allow = Vec::with_capacity(ranges.len());
        for range in &ranges {
            let rule = format!("cidr:{}", range.trim());
            if LbFirewall::source(&rule).is_err() {
                return Err(CloudError::msg(format!(
                    "spec.loadBalancerSourceRanges: {} is not a network like 10.0.0.0/24",
                    quoted(range)
                )));
            }
            allow.push(rule);
        }
        allow
    };
    let deny = firewall_rules(service, ANNOTATION_DENY_RULES)?;
    Ok((!allow.is_empty() || !deny.is_empty()).then_some(LbFirewall { allow, deny }))
}

/// The rules of the list annotation `key`, each checked.
fn firewall_rules(service: &Service, key: &'static str) -> CloudResult<Vec<String>> {
    const MAX_LIST: usize = 4096;
    let Some((name, value)) = read(service, key) else {
        return Ok(Vec::new());
    };
    if value.len() > MAX_LIST {
        return Err(invalid(name, value, &format!("at most {MAX_LIST} bytes")));
    }
    let rules: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect();
    if rules.len() > MAX_FIREWALL_RULES {
        return Err(invalid(
            name,
            value,
            &format!("at most {MAX_FIREWALL_RULES} rules"),
        ));
    }
    for rule in &rules {
        LbFirewall::source(rule).map_err(|why| invalid(name, rule, &why))?;
    }
    Ok(rules)
}

#[cfg(test)]
mod tests;
