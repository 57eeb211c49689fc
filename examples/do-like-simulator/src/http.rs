//! The HTTP layer: the router, and the guards every request passes before a handler (same
//! origin only, the admin token, the API token, rate limits and injected faults, request
//! counting by route pattern).

use super::handlers::*;
use super::*;

pub(super) fn router(handle: SimulatorHandle) -> Router {
    let v2 = Router::new()
        .route("/v2/account", get(get_account))
        .route("/v2/regions", get(list_regions))
        .route("/v2/droplets", get(list_droplets).post(create_droplet))
        .route("/v2/droplets/{id}", get(get_droplet).delete(delete_droplet))
        .route("/v2/load_balancers", get(list_lbs).post(create_lb))
        .route(
            "/v2/load_balancers/{id}",
            get(get_lb).put(update_lb).delete(delete_lb),
        )
        // Anything else under /v2 (the routes extension when it is off): DigitalOcean's 404.
        .route("/v2/{*rest}", axum::routing::any(unknown_path));
    let v2 = if handle.shared.config.routes_extension {
        v2.route("/v2/x-routes", get(list_routes).post(create_route))
            .route("/v2/x-routes/{id}", axum::routing::delete(delete_route))
    } else {
        v2
    }
    .layer(middleware::from_fn_with_state(handle.clone(), gate));
    let admin = Router::new()
        .route("/admin/droplets", post(admin_create_droplet))
        .route(
            "/admin/droplets/{id}",
            axum::routing::delete(admin_delete_droplet),
        )
        .route(
            "/admin/droplets/{id}/power_off",
            post(admin_set_status("off")),
        )
        .route(
            "/admin/droplets/{id}/power_on",
            post(admin_set_status("active")),
        )
        .route("/admin/faults", put(admin_faults))
        .route("/admin/stats", get(admin_stats))
        .layer(middleware::from_fn_with_state(handle.clone(), admin_auth));
    v2.merge(admin)
        .layer(middleware::from_fn_with_state(
            handle.clone(),
            same_origin_only,
        ))
        .with_state(handle)
}

/// Refuses what a web page could send: a `Host` that does not name this simulator (DNS
/// rebinding), an `Origin` that is not its own, a `Sec-Fetch-Site` of another site.
async fn same_origin_only(State(h): State<SimulatorHandle>, req: Request, next: Next) -> Response {
    let port = h.shared.addr.port();
    let bound = h.shared.addr.ip();
    let is_own_host = |host: &str, port: u16| is_own_host(host, port, bound);
    let headers = req.headers();
    let text = |name| headers.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let host = text(header::HOST).or(req.uri().authority().map(|a| a.as_str()));
    let refusal = if !host.is_some_and(|host| is_own_host(host, port)) {
        Some(format!(
            "the Host header must be a loopback address or localhost with port {port}"
        ))
    } else if text(header::ORIGIN).is_some_and(|origin| {
        !origin
            .strip_prefix("http://")
            .is_some_and(|host| is_own_host(host, port))
    }) {
        Some("cross-origin requests are refused".to_owned())
    } else if text(HeaderName::from_static("sec-fetch-site"))
        .is_some_and(|site| site != "same-origin" && site != "none")
    {
        Some("requests sent by another site are refused".to_owned())
    } else {
        None
    };
    match refusal {
        Some(message) => {
            *h.inner().requests.entry("403".into()).or_default() += 1;
            error(StatusCode::FORBIDDEN, "forbidden", message)
        }
        None => next.run(req).await,
    }
}

/// Whether `host` (a `Host` header, or an origin without its scheme) is a loopback address,
/// `localhost` or the address the simulator is bound to, with `port` (a missing port is 80).
fn is_own_host(host: &str, port: u16, bound: IpAddr) -> bool {
    let (name, rest) = match host.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((ip, rest)) => (ip, rest),
            None => return false,
        },
        None => match host.find(':') {
            Some(colon) => host.split_at(colon),
            None => (host, ""),
        },
    };
    let port_ok = match rest {
        "" => port == 80,
        _ => rest
            .strip_prefix(':')
            .and_then(|p| p.parse::<u16>().ok())
            .is_some_and(|p| p == port),
    };
    let name_ok = name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip == bound);
    port_ok && name_ok
}

/// `Authorization: Bearer <admin token>` on `/admin`, when the simulator has an admin token.
async fn admin_auth(State(h): State<SimulatorHandle>, req: Request, next: Next) -> Response {
    if let Some(token) = &h.shared.config.admin_token
        && bearer(req.headers()) != Some(token.as_str())
    {
        *h.inner().requests.entry("401".into()).or_default() += 1;
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "The admin interface needs its own token.",
        );
    }
    next.run(req).await
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// Auth, rate limit, faults, counters and the request log for `/v2`.
async fn gate(State(h): State<SimulatorHandle>, req: Request, next: Next) -> Response {
    let arrived = h.shared.started.elapsed();
    let key = format!(
        "{} {}",
        method_key(req.method()),
        route_key(req.uri().path())
    );
    let shape = format!("{key}{}", query_shape(req.uri().query()));
    let cfg = &h.shared.config;
    let authorized = bearer(req.headers()) == Some(cfg.token.as_str());
    let (latency, verdict, remaining, reset) = {
        let mut inner = h.inner();
        // Per route only once authenticated; a request without the token counts as "401".
        if authorized {
            *inner.requests.entry(key.clone()).or_default() += 1;
            // Bounded: the keys are route patterns and at most MAX_QUERY_KEYS known names.
            *inner.shapes.entry(shape).or_default() += 1;
        }
        let now = now_ms();
        let window = cfg.rate_limit_window.as_millis().max(1) as u64;
        if now >= inner.window_start_ms + window {
            inner.window_start_ms = now;
            inner.window_count = 0;
        }
        inner.window_count += 1;
        let reset = (inner.window_start_ms + window).div_ceil(1000);
        let remaining = cfg.rate_limit.saturating_sub(inner.window_count);
        inner.rng ^= inner.rng << 13;
        inner.rng ^= inner.rng >> 7;
        inner.rng ^= inner.rng << 17;
        let roll = (inner.rng % 10_000) as f64 / 10_000.0;
        let verdict = if !authorized {
            Verdict::Unauthorized
        } else if inner.faults.burst_429 > 0 {
            inner.faults.burst_429 -= 1;
            Verdict::TooMany(inner.faults.retry_after_secs)
        } else if inner.faults.burst_503 > 0 {
            inner.faults.burst_503 -= 1;
            Verdict::Unavailable(inner.faults.retry_after_secs)
        } else if inner.window_count > cfg.rate_limit {
            Verdict::TooMany(
                (inner.window_start_ms + window)
                    .saturating_sub(now)
                    .div_ceil(1000),
            )
        } else if roll < inner.faults.error_rate {
            Verdict::ServerError
        } else if inner.faults.malformed > 0 {
            inner.faults.malformed -= 1;
            Verdict::Malformed
        } else {
            Verdict::Pass
        };
        match verdict {
            Verdict::Unauthorized => *inner.requests.entry("401".into()).or_default() += 1,
            Verdict::TooMany(_) => *inner.requests.entry("429".into()).or_default() += 1,
            Verdict::Unavailable(_) => *inner.requests.entry("503".into()).or_default() += 1,
            Verdict::ServerError => *inner.requests.entry("500".into()).or_default() += 1,
            _ => {}
        }
        (inner.faults.latency_ms, verdict, remaining, reset)
    };
    if latency > 0 {
        tokio::time::sleep(Duration::from_millis(latency)).await;
    }
    let mut resp = match verdict {
        Verdict::Unauthorized => error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Unable to authenticate you.",
        ),
        Verdict::TooMany(after) => with_retry_after(
            error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                "API Rate limit exceeded.",
            ),
            after,
        ),
        Verdict::Unavailable(after) => with_retry_after(
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                "The service is temporarily unavailable (injected).",
            ),
            after,
        ),
        Verdict::ServerError => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "Unexpected server-side error (injected).",
        ),
        Verdict::Malformed => (StatusCode::OK, Body::from("{\"droplets\": [tru")).into_response(),
        Verdict::Pass => next.run(req).await,
    };
    let headers: &mut HeaderMap = resp.headers_mut();
    for (name, value) in [
        ("ratelimit-limit", cfg.rate_limit.to_string()),
        ("ratelimit-remaining", remaining.to_string()),
        ("ratelimit-reset", reset.to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    }
    let mut inner = h.inner();
    if inner.log.len() >= REQUEST_LOG_LEN {
        inner.log.pop_front();
    }
    inner.log.push_back(RequestRecord {
        at: arrived,
        route: key,
        status: resp.status().as_u16(),
    });
    drop(inner);
    resp
}

fn with_retry_after(mut resp: Response, secs: u64) -> Response {
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    resp
}

enum Verdict {
    Pass,
    Unauthorized,
    TooMany(u64),
    Unavailable(u64),
    ServerError,
    Malformed,
}

/// `/v2/droplets/123` → `/v2/droplets/{id}`.
/// The route a `/v2` path matches, as the counters and the request log name it: one of the
/// simulator's routes with `{id}` for the variable segment, or `/v2/{other}`. Never the path
/// itself, so that the counters keep a bounded number of short keys however many paths
/// clients make up.
/// The query keys the shape of a request names, at most this many (more are `&…`).
const MAX_QUERY_KEYS: usize = 8;

/// A request's query as its shape: its keys, sorted, without values (`?name=&page=&per_page=`);
/// empty without a query. A key that is not a short lowercase name is `{other}`, so a client
/// cannot grow the counters without bound.
fn query_shape(query: Option<&str>) -> String {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return String::new();
    };
    let mut keys: Vec<&str> = query
        .split('&')
        .map(|pair| pair.split_once('=').map_or(pair, |(k, _)| k))
        .map(|k| {
            if !k.is_empty()
                && k.len() <= 32
                && k.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            {
                k
            } else {
                "{other}"
            }
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let more = keys.len() > MAX_QUERY_KEYS;
    keys.truncate(MAX_QUERY_KEYS);
    let mut shape = String::from("?");
    shape.push_str(
        &keys
            .iter()
            .map(|k| format!("{k}="))
            .collect::<Vec<_>>()
            .join("&"),
    );
    if more {
        shape.push_str("&…");
    }
    shape
}

fn route_key(path: &str) -> &'static str {
    const ROUTES: [&str; 10] = [
        "/v2/account",
        "/v2/regions",
        "/v2/certificates",
        "/v2/certificates/{id}",
        "/v2/droplets",
        "/v2/droplets/{id}",
        "/v2/load_balancers",
        "/v2/load_balancers/{id}",
        "/v2/x-routes",
        "/v2/x-routes/{id}",
    ];
    let path = path.trim_end_matches('/');
    ROUTES
        .into_iter()
        .find(|route| {
            let mut want = route.split('/');
            let mut have = path.split('/');
            loop {
                match (want.next(), have.next()) {
                    (None, None) => return true,
                    (Some("{id}"), Some(segment)) if !segment.is_empty() => {}
                    (Some(a), Some(b)) if a == b => {}
                    _ => return false,
                }
            }
        })
        .unwrap_or("/v2/{other}")
}

/// A request's method as the counters name it: the standard ones, or `OTHER` (an extension
/// method is any token a client likes).
fn method_key(method: &axum::http::Method) -> &'static str {
    ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
        .into_iter()
        .find(|m| *m == method.as_str())
        .unwrap_or("OTHER")
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::{is_own_host, query_shape, route_key};

    const LOOPBACK: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn own_hosts() {
        for host in [
            "127.0.0.1:8080",
            "127.9.0.1:8080",
            "localhost:8080",
            "LocalHost:8080",
            "[::1]:8080",
        ] {
            assert!(is_own_host(host, 8080, LOOPBACK), "{host}");
        }
        for host in [
            "127.0.0.1:8081",
            "127.0.0.1",
            "evil.example:8080",
            "localhost.evil.example:8080",
            "10.0.0.1:8080",
            "[::2]:8080",
            "[::1:8080",
            "::1:8080",
            "127.0.0.1:8080/x",
            "127.0.0.1:",
            "",
        ] {
            assert!(!is_own_host(host, 8080, LOOPBACK), "{host}");
        }
        assert!(is_own_host("localhost", 80, LOOPBACK));
        // Bound to an address of a test network: that address is the simulator's too.
        let bound = IpAddr::from([10, 88, 0, 1]);
        assert!(is_own_host("10.88.0.1:8080", 8080, bound));
        assert!(!is_own_host("10.88.0.2:8080", 8080, bound));
        assert!(!is_own_host("10.88.0.1:8080", 8080, LOOPBACK));
    }

    #[test]
    fn query_shapes_name_the_keys_only() {
        assert_eq!(query_shape(None), "");
        assert_eq!(query_shape(Some("")), "");
        assert_eq!(
            query_shape(Some("per_page=50&page=1&name=do-n1")),
            "?name=&page=&per_page="
        );
        assert_eq!(query_shape(Some("page=1&page=2")), "?page=");
        assert_eq!(
            query_shape(Some("X=1&a%20b=2&tag_name=k8s")),
            "?tag_name=&{other}="
        );
        let many: Vec<String> = (b'a'..=b'z').map(|c| format!("{}=1", c as char)).collect();
        assert_eq!(
            query_shape(Some(&many.join("&"))),
            "?a=&b=&c=&d=&e=&f=&g=&h=&…"
        );
    }

    #[test]
    fn route_keys() {
        assert_eq!(route_key("/v2/droplets"), "/v2/droplets");
        assert_eq!(route_key("/v2/droplets/"), "/v2/droplets");
        assert_eq!(route_key("/v2/droplets/12"), "/v2/droplets/{id}");
        assert_eq!(
            route_key("/v2/load_balancers/ab-c"),
            "/v2/load_balancers/{id}"
        );
        assert_eq!(route_key("/v2/x-routes/r1"), "/v2/x-routes/{id}");
        assert_eq!(route_key("/v2/account"), "/v2/account");
        assert_eq!(route_key("/v2/regions"), "/v2/regions");
        // Made-up paths share one key, however long or many.
        assert_eq!(
            route_key(&format!("/v2/{}", "a".repeat(60_000))),
            "/v2/{other}"
        );
        assert_eq!(route_key("/v2/droplets/12/extra"), "/v2/{other}");
        assert_eq!(route_key("/v2/droplets//"), "/v2/droplets");
        assert_eq!(route_key("/v2"), "/v2/{other}");
    }
}
