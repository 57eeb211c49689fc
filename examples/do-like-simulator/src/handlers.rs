//! The handlers of `/v2` (droplets, load balancers, the routes extension) and `/admin`,
//! each a thin function over the shared state: paging, checks, the wire types.

use super::*;

#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    page: Option<usize>,
    per_page: Option<usize>,
    tag_name: Option<String>,
    /// Droplets only: those of this exact name (DigitalOcean's CCM finds a Node's droplet
    /// with `GET /v2/droplets?name=`).
    name: Option<String>,
}

pub(super) async fn unknown_path() -> Response {
    not_found()
}

/// A list answer: one page of `items` under `key`, with DigitalOcean's `links.pages` (absolute
/// URLs: `first` and `prev` from the second page, `next` and `last` before the last) and
/// `meta.total`.
pub(super) fn page<T: Serialize>(
    h: &SimulatorHandle,
    key: &str,
    path: &str,
    items: Vec<T>,
    q: &PageQuery,
) -> Response {
    let per_page = q.per_page.unwrap_or(20).clamp(1, 200);
    let page = q.page.unwrap_or(1).max(1);
    let total = items.len();
    let pages = total.div_ceil(per_page).max(1);
    let slice: Vec<T> = items
        .into_iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .collect();
    let url = |n: usize| {
        format!(
            "http://{}{path}?page={n}&per_page={per_page}",
            h.shared.addr
        )
    };
    let links = Links {
        pages: Pages {
            first: (page > 1).then(|| url(1)),
            prev: (page > 1).then(|| url((page - 1).min(pages))),
            next: (page < pages).then(|| url(page + 1)),
            last: (page < pages).then(|| url(pages)),
        },
    };
    let meta = Meta {
        total: total as u64,
    };
    Json(json!({key: slice, "links": links, "meta": meta})).into_response()
}

pub(super) async fn list_droplets(
    State(h): State<SimulatorHandle>,
    Query(q): Query<PageQuery>,
) -> Response {
    let items: Vec<Droplet> = h
        .droplets()
        .into_iter()
        .filter(|d| q.tag_name.as_ref().is_none_or(|t| d.tags.contains(t)))
        .filter(|d| q.name.as_ref().is_none_or(|n| d.name == *n))
        .collect();
    page(&h, "droplets", "/v2/droplets", items, &q)
}

/// `GET /v2/regions`: every region of the catalog (DigitalOcean's CCM checks its `REGION`
/// against this list at start-up, and exits when the answer is not a region list).
pub(super) async fn list_regions(
    State(h): State<SimulatorHandle>,
    Query(q): Query<PageQuery>,
) -> Response {
    let items: Vec<_> = catalog::REGIONS
        .iter()
        .filter_map(|(slug, _)| catalog::region(slug))
        .collect();
    page(&h, "regions", "/v2/regions", items, &q)
}

/// `GET /v2/account`: the account the token belongs to, active (DigitalOcean's CCM asks it
/// as its health check). One account: the simulator has one token.
pub(super) async fn get_account() -> Response {
    Json(json!({"account": catalog::account()})).into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct CreateDroplet {
    name: String,
    #[serde(default)]
    size: Option<String>,
    #[serde(default)]
    region: Option<String>,
    /// Admin only: the private address of a machine that exists (see
    /// [`SimulatorHandle::create_droplet_at`]); `POST /v2/droplets` refuses it.
    #[serde(default)]
    private_ip_address: Option<std::net::Ipv4Addr>,
    /// Admin only: the public IPv6 address of a machine that exists, unique-local
    /// (`fd00::/8`; see [`SimulatorHandle::create_droplet_with`]); `POST /v2/droplets`
    /// refuses it.
    #[serde(default)]
    ipv6_address: Option<std::net::Ipv6Addr>,
}

pub(super) fn make_droplet(h: &SimulatorHandle, body: CreateDroplet) -> Response {
    if body.name.is_empty() {
        return unprocessable("name is required");
    }
    if let Some(ip) = body.ipv6_address
        && ip.octets()[0] != 0xfd
    {
        return unprocessable(format!(
            "ipv6_address {ip} is not unique-local: a droplet's given IPv6 address must be \
             in fd00::/8"
        ));
    }
    let d = h.create_droplet_with(
        &body.name,
        body.size.as_deref().unwrap_or("s-2vcpu-4gb"),
        body.region.as_deref().unwrap_or("nyc1"),
        body.private_ip_address,
        body.ipv6_address,
    );
    (StatusCode::ACCEPTED, Json(json!({"droplet": d}))).into_response()
}

/// `POST /v2/droplets`: DigitalOcean requires a known region and size (the image is not
/// simulated and not required).
pub(super) async fn create_droplet(
    State(h): State<SimulatorHandle>,
    bytes: axum::body::Bytes,
) -> Response {
    let b: CreateDroplet = match body(&bytes) {
        Ok(b) => b,
        Err(m) => return bad_request(m),
    };
    if b.private_ip_address.is_some() {
        return unprocessable("private_ip_address is not an attribute of a droplet request");
    }
    if b.ipv6_address.is_some() {
        return unprocessable("ipv6_address is not an attribute of a droplet request");
    }
    match b.region.as_deref() {
        None | Some("") => return unprocessable("region is required"),
        Some(r) if catalog::region(r).is_none() => {
            return unprocessable(format!("region {r} is not available"));
        }
        Some(_) => {}
    }
    match b.size.as_deref() {
        None | Some("") => return unprocessable("size is required"),
        Some(s) if catalog::size(s).is_none() => {
            return unprocessable(format!("size {s} is not available"));
        }
        Some(_) => {}
    }
    make_droplet(&h, b)
}

pub(super) async fn admin_create_droplet(
    State(h): State<SimulatorHandle>,
    Json(b): Json<CreateDroplet>,
) -> Response {
    make_droplet(&h, b)
}

pub(super) async fn get_droplet(
    State(h): State<SimulatorHandle>,
    Path(id): Path<String>,
) -> Response {
    let Ok(id) = id.parse::<u64>() else {
        return not_found();
    };
    match h.inner().data.droplets.get(&id) {
        Some(d) => Json(json!({"droplet": d})).into_response(),
        None => not_found(),
    }
}

pub(super) async fn delete_droplet(
    State(h): State<SimulatorHandle>,
    Path(id): Path<String>,
) -> Response {
    match id.parse::<u64>() {
        Ok(id) if h.delete_droplet(id) => StatusCode::NO_CONTENT.into_response(),
        _ => not_found(),
    }
}

pub(super) async fn admin_delete_droplet(
    State(h): State<SimulatorHandle>,
    p: Path<String>,
) -> Response {
    delete_droplet(State(h), p).await
}

/// The handler of `POST /admin/droplets/{id}/power_off` (`status` "off") or `…/power_on`
/// ("active"): the droplet's status becomes `status`; 204, or 404 without such a droplet.
pub(super) fn admin_set_status(
    status: &'static str,
) -> impl Fn(State<SimulatorHandle>, Path<u64>) -> std::future::Ready<Response>
+ Clone
+ Send
+ Sync
+ 'static {
    move |State(h), Path(id)| {
        std::future::ready(if h.set_droplet_status(id, status) {
            StatusCode::NO_CONTENT.into_response()
        } else {
            not_found()
        })
    }
}

pub(super) async fn admin_faults(
    State(h): State<SimulatorHandle>,
    Json(f): Json<Faults>,
) -> Response {
    h.set_faults(f);
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn admin_stats(State(h): State<SimulatorHandle>) -> Response {
    let health: BTreeMap<String, Vec<serde_json::Value>> = h
        .shared
        .health
        .lock()
        .iter()
        .map(|(id, targets)| {
            let targets = targets
                .iter()
                .map(|(ip, healthy)| {
                    json!({"ip": ip.to_string(), "healthy": healthy.unwrap_or(false),
                           "checked": healthy.is_some()})
                })
                .collect();
            (id.clone(), targets)
        })
        .collect();
    Json(json!({
        "requests": h.request_counts(),
        "request_shapes": h.request_shapes(),
        "load_balancer_targets": health,
    }))
    .into_response()
}

/// The load balancer `req` describes, as the API shows it: the region as an object, and
/// what the request leaves out filled in as DigitalOcean does (a size unit, the round-robin
/// algorithm, a TCP health check on port 80, no sticky sessions, the region's VPC). `id`,
/// `ip`, `ipv6`, `status` and `created_at` come from `was` (an update) or start afresh.
pub(super) fn lb_object(
    id: String,
    req: LoadBalancerRequest,
    was: Option<&LoadBalancerObject>,
) -> LoadBalancerObject {
    let region = catalog::region(&req.region).unwrap_or_default();
    let size_unit = req
        .size_unit
        .or_else(|| req.size.as_deref().and_then(validate::slug_units))
        .or(Some(1));
    LoadBalancerObject {
        id,
        name: req.name,
        ip: was.map(|w| w.ip.clone()).unwrap_or_default(),
        ipv6: was.map(|w| w.ipv6.clone()).unwrap_or_default(),
        size: req.size,
        size_unit,
        status: was.map_or_else(|| "new".to_owned(), |w| w.status.clone()),
        created_at: was.map_or_else(|| catalog::rfc3339(now_ms()), |w| w.created_at.clone()),
        algorithm: req.algorithm.unwrap_or_else(|| "round_robin".into()),
        vpc_uuid: req
            .vpc_uuid
            .unwrap_or_else(|| catalog::vpc_uuid(&region.slug)),
        region,
        forwarding_rules: req.forwarding_rules,
        health_check: Some(req.health_check.unwrap_or(HealthCheck {
            protocol: "tcp".into(),
            port: 80,
            path: String::new(),
            check_interval_seconds: 10,
            response_timeout_seconds: 5,
            healthy_threshold: 5,
            unhealthy_threshold: 3,
        })),
        sticky_sessions: Some(req.sticky_sessions.unwrap_or_default()),
        droplet_ids: req.droplet_ids,
        tag: req.tag.unwrap_or_default(),
        tags: req.tags,
        redirect_http_to_https: req.redirect_http_to_https,
        enable_proxy_protocol: req.enable_proxy_protocol,
        firewall: req
            .firewall
            .filter(|f| !f.allow.is_empty() || !f.deny.is_empty()),
        lb_type: req
            .lb_type
            .or_else(|| was.map(|w| w.lb_type.clone()))
            .unwrap_or_else(|| ccm_do_like_cloud::api::LB_TYPE_REGIONAL.to_owned()),
        network_stack: req
            .network_stack
            .or_else(|| {
                was.map(|w| w.network_stack.clone())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| ccm_do_like_cloud::api::NETWORK_STACK_IPV4.to_owned()),
        // Added to each answer (`SimulatorHandle::shown`), never stored.
        x_droplet_health: None,
    }
}

pub(super) async fn list_lbs(
    State(h): State<SimulatorHandle>,
    Query(q): Query<PageQuery>,
) -> Response {
    page(
        &h,
        "load_balancers",
        "/v2/load_balancers",
        h.shown_load_balancers(),
        &q,
    )
}

/// The body of a request that creates or updates a load balancer, checked as DigitalOcean
/// checks it: refused with 400 when it is not a load balancer, 422 when DigitalOcean would
/// not accept it.
pub(super) struct CheckedLb(LoadBalancerRequest);

impl<S: Send + Sync> axum::extract::FromRequest<S> for CheckedLb {
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(IntoResponse::into_response)?;
        let b: LoadBalancerRequest = body(&bytes).map_err(bad_request)?;
        validate::load_balancer(&b).map_err(unprocessable)?;
        Ok(Self(b))
    }
}

pub(super) async fn create_lb(
    State(h): State<SimulatorHandle>,
    CheckedLb(b): CheckedLb,
) -> Response {
    let mut inner = h.inner();
    inner.data.next_id += 1;
    let id = format!("4de7ac8b-495b-4884-9a69-{:012x}", inner.data.next_id);
    let lb = lb_object(id.clone(), b, None);
    inner.data.load_balancers.insert(id.clone(), lb.clone());
    let at = now_ms() + h.shared.config.lb_activation_delay.as_millis() as u64;
    inner.data.lb_activate_at.insert(id, at);
    activate_due(&mut inner.data, h.ranges());
    h.persist(&inner);
    let lb = inner.data.load_balancers.get(&lb.id).cloned().unwrap_or(lb);
    drop(inner);
    let lb = h.shown_one(lb);
    (StatusCode::ACCEPTED, Json(json!({"load_balancer": lb}))).into_response()
}

pub(super) async fn get_lb(State(h): State<SimulatorHandle>, Path(id): Path<String>) -> Response {
    let mut inner = h.inner();
    activate_due(&mut inner.data, h.ranges());
    let Some(lb) = inner.data.load_balancers.get(&id).cloned() else {
        return not_found();
    };
    drop(inner);
    Json(json!({"load_balancer": h.shown_one(lb)})).into_response()
}

pub(super) async fn update_lb(
    State(h): State<SimulatorHandle>,
    Path(id): Path<String>,
    CheckedLb(b): CheckedLb,
) -> Response {
    let mut inner = h.inner();
    activate_due(&mut inner.data, h.ranges());
    let Some(lb) = inner.data.load_balancers.get_mut(&id) else {
        return not_found();
    };
    if lb.region.slug != b.region {
        return unprocessable("the region of a load balancer cannot be changed");
    }
    // An update that names no type (or network stack) keeps the load balancer's, which
    // its rules must fit.
    let mut b = b;
    if b.lb_type.is_none() || b.network_stack.is_none() {
        if b.lb_type.is_none() {
            b.lb_type = Some(lb.lb_type.clone()).filter(|t| !t.is_empty());
        }
        if b.network_stack.is_none() {
            b.network_stack = Some(lb.network_stack.clone()).filter(|t| !t.is_empty());
        }
        if let Err(message) = validate::load_balancer(&b) {
            return unprocessable(&message);
        }
    }
    *lb = lb_object(id.clone(), b, Some(lb));
    // A new network stack: an IPv6 address given or taken at once.
    activate_due(&mut inner.data, h.ranges());
    let Some(lb) = inner.data.load_balancers.get(&id).cloned() else {
        return not_found();
    };
    h.persist(&inner);
    drop(inner);
    Json(json!({"load_balancer": h.shown_one(lb)})).into_response()
}

pub(super) async fn delete_lb(
    State(h): State<SimulatorHandle>,
    Path(id): Path<String>,
) -> Response {
    let mut inner = h.inner();
    inner.data.lb_activate_at.remove(&id);
    if inner.data.load_balancers.remove(&id).is_none() {
        return not_found();
    }
    h.persist(&inner);
    StatusCode::NO_CONTENT.into_response()
}

pub(super) async fn list_routes(
    State(h): State<SimulatorHandle>,
    Query(q): Query<PageQuery>,
) -> Response {
    page(&h, "routes", "/v2/x-routes", h.routes(), &q)
}

pub(super) async fn create_route(
    State(h): State<SimulatorHandle>,
    bytes: axum::body::Bytes,
) -> Response {
    let mut r: XRoute = match body(&bytes) {
        Ok(r) => r,
        Err(m) => return bad_request(m),
    };
    let Some(destination) = crate::route_table::normalise(&r.destination) else {
        return unprocessable(format!(
            "destination {:?} is not a CIDR (an address with its host bits zero, a prefix \
             length)",
            r.destination
        ));
    };
    r.destination = destination;
    let mut inner = h.inner();
    if !inner.data.droplets.values().any(|d| d.name == r.target) {
        return unprocessable(format!(
            "target {:?}: no droplet of that name exists",
            r.target
        ));
    }
    if let Some(existing) = inner
        .data
        .routes
        .values()
        .find(|e| e.destination == r.destination)
    {
        return error(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "a route to {} exists (id {})",
                existing.destination, existing.id
            ),
        );
    }
    inner.data.next_id += 1;
    r.id = inner.data.next_id;
    inner.data.routes.insert(r.id, r.clone());
    h.persist(&inner);
    (StatusCode::CREATED, Json(json!({"route": r}))).into_response()
}

pub(super) async fn delete_route(
    State(h): State<SimulatorHandle>,
    Path(id): Path<String>,
) -> Response {
    let mut inner = h.inner();
    let Ok(id) = id.parse::<u64>() else {
        return not_found();
    };
    if inner.data.routes.remove(&id).is_none() {
        return not_found();
    }
    h.persist(&inner);
    StatusCode::NO_CONTENT.into_response()
}
