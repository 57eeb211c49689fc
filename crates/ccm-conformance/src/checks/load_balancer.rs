//! `load_balancer.*`: what the service controller relies on.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use ccm_core::provider::{CloudError, LoadBalancer};
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};

use super::notes;
use crate::context::{
    Checked, Ctx, Stop, describe_err, fail, node_name, svc_name, unexpected, valid_dns_name,
};

/// The ingress entries, order-free, for comparing two statuses.
fn ingress(status: &LoadBalancerStatus) -> BTreeSet<String> {
    status
        .ingress
        .iter()
        .flatten()
        .map(|i| {
            format!(
                "{}{}",
                i.ip.as_deref()
                    .map(|ip| format!("ip {ip}"))
                    .unwrap_or_default(),
                i.hostname
                    .as_deref()
                    .map(|h| format!(" hostname {h}"))
                    .unwrap_or_default()
            )
            .trim()
            .to_owned()
        })
        .collect()
}

fn show(status: &LoadBalancerStatus) -> String {
    let ingress = ingress(status);
    if ingress.is_empty() {
        "a status with no ingress".into()
    } else {
        format!(
            "ingress [{}]",
            ingress.into_iter().collect::<Vec<_>>().join(", ")
        )
    }
}

fn arcs(nodes: &[&Node]) -> Vec<Arc<Node>> {
    nodes.iter().map(|n| Arc::new((*n).clone())).collect()
}

fn names(nodes: &[&Node]) -> Vec<String> {
    let mut names: Vec<String> = nodes.iter().map(|n| node_name(n).to_owned()).collect();
    names.sort();
    names
}

/// Asks `get_load_balancer` once (`when`: at which point of the check); returns the step, as
/// the check's messages name it, and the answer.
async fn get(
    ctx: &Ctx,
    lb: &dyn LoadBalancer,
    service: &Service,
    when: &str,
) -> Result<(String, Option<LoadBalancerStatus>), Stop> {
    let step = format!("get_load_balancer({}) {when}", svc_name(service));
    let found = ctx
        .call(step.clone(), lb.get_load_balancer(ctx.cluster(), service))
        .await?;
    Ok((step, found))
}

/// Asks `get_load_balancer` until it says what `want_exists` says, or the settle time is up.
async fn get_until(
    ctx: &Ctx,
    lb: &dyn LoadBalancer,
    service: &Service,
    step: String,
    want_exists: bool,
) -> Result<Option<LoadBalancerStatus>, Stop> {
    ctx.eventually(
        step.clone(),
        || lb.get_load_balancer(ctx.cluster(), service),
        |a| matches!(a, Ok(s) if s.is_some() == want_exists),
    )
    .await
    .map_err(|e| unexpected(&step, &e))
}

/// `ensure_load_balancer_deleted`, which may never answer `ImplementedElsewhere`.
async fn delete(ctx: &Ctx, lb: &dyn LoadBalancer, service: &Service, when: &str) -> Checked {
    let step = format!(
        "ensure_load_balancer_deleted({}), {when}",
        svc_name(service)
    );
    match ctx
        .raw(
            step.clone(),
            lb.ensure_load_balancer_deleted(ctx.cluster(), service),
        )
        .await
    {
        Ok(()) => Ok(None),
        Err(CloudError::ImplementedElsewhere) => fail!(
            "{step} returned ImplementedElsewhere, which it never may: the service controller \
             would keep the Service's finalizer"
        ),
        Err(CloudError::NotImplemented) => Err(Stop::NotImplemented(step)),
        Err(e) => fail!(
            "{step} returned {}: it must return Ok, or the Service's deletion is stuck behind its \
             finalizer",
            describe_err(&e)
        ),
    }
}

/// Fails unless `get_load_balancer` says, in time, that the deleted load balancer is gone.
async fn gone_after_delete(ctx: &Ctx, lb: &dyn LoadBalancer, service: &Service) -> Checked {
    let step = format!(
        "get_load_balancer({}) after ensure_load_balancer_deleted",
        svc_name(service)
    );
    if let Some(status) = get_until(ctx, lb, service, step.clone(), false).await? {
        fail!(
            "{step} still says it exists, with {}{}",
            show(&status),
            ctx.settled()
        );
    }
    Ok(None)
}

/// `TestCloud::list_load_balancers(cluster)`: `Err(why)` when the test cloud cannot tell.
async fn listed(ctx: &Ctx, cluster: &str) -> Result<Result<Vec<String>, String>, Stop> {
    ctx.optional(
        "TestCloud::list_load_balancers",
        ctx.shared.cloud.list_load_balancers(cluster),
    )
    .await
}

/// `TestCloud::load_balancer_nodes(service)` in the check's cluster, sorted and without
/// duplicates: `Err(why)` when the test cloud cannot tell.
async fn targets(
    ctx: &Ctx,
    service: &Service,
) -> Result<Result<Option<Vec<String>>, String>, Stop> {
    let got = ctx
        .optional(
            "TestCloud::load_balancer_nodes",
            ctx.shared.cloud.load_balancer_nodes(ctx.cluster(), service),
        )
        .await?;
    Ok(got.map(|nodes| {
        nodes.map(|mut nodes| {
            nodes.sort();
            nodes.dedup();
            nodes
        })
    }))
}

/// The load balancer names the cloud has beyond `before`, once settled on `done`.
async fn new_load_balancers(
    ctx: &Ctx,
    before: &[String],
    done: impl Fn(usize) -> bool,
) -> Result<Vec<String>, Stop> {
    new_load_balancers_in(ctx, ctx.cluster(), before, done).await
}

/// [`new_load_balancers`] of cluster `cluster`.
async fn new_load_balancers_in(
    ctx: &Ctx,
    cluster: &str,
    before: &[String],
    done: impl Fn(usize) -> bool,
) -> Result<Vec<String>, Stop> {
    let deadline = tokio::time::Instant::now() + ctx.options().settle_timeout;
    loop {
        let now = ctx
            .test_cloud(
                "TestCloud::list_load_balancers",
                ctx.shared.cloud.list_load_balancers(cluster),
            )
            .await?;
        let new: Vec<String> = now.into_iter().filter(|n| !before.contains(n)).collect();
        if done(new.len()) || tokio::time::Instant::now() >= deadline {
            return Ok(new);
        }
        tokio::time::sleep(ctx.options().poll_interval).await;
    }
}

pub(super) async fn get_false_before_ensure(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let service = ctx.service();
    let (step, found) = get(ctx, lb, &service, "before any ensure_load_balancer").await?;
    if let Some(status) = found {
        fail!(
            "{step} says it exists, with {}: only a load balancer ensure_load_balancer made may \
             exist, or the service controller deletes one it never made",
            show(&status)
        );
    }
    let nodes = ctx.pool(1).await?;
    ctx.ensure("", &service, &nodes).await?;
    let step = format!(
        "get_load_balancer({}) after ensure_load_balancer",
        svc_name(&service)
    );
    if get_until(ctx, lb, &service, step.clone(), true)
        .await?
        .is_none()
    {
        fail!(
            "{step} says it does not exist{}: the service controller would not delete it when \
             the Service goes",
            ctx.settled()
        );
    }
    delete(ctx, lb, &service, "after ensure_load_balancer").await?;
    gone_after_delete(ctx, lb, &service).await
}

pub(super) async fn ensure_is_idempotent(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let nodes = ctx.pool(1).await?;
    let service = ctx.service();
    let before = listed(ctx, ctx.cluster()).await?;
    let first = ctx.ensure("first", &service, &nodes).await?;
    let second = ctx.ensure("second", &service, &nodes).await?;
    if ingress(&first) != ingress(&second) {
        fail!(
            "the second ensure_load_balancer({}) with the same arguments returned {}, the first \
             {}: it must not make a new load balancer or change its address",
            svc_name(&service),
            show(&second),
            show(&first)
        );
    }
    let step = format!(
        "get_load_balancer({}) after two ensure_load_balancer calls",
        svc_name(&service)
    );
    let got = ctx
        .eventually(
            step.clone(),
            || lb.get_load_balancer(ctx.cluster(), &service),
            |a| matches!(a, Ok(Some(s)) if ingress(s) == ingress(&second)),
        )
        .await
        .map_err(|e| unexpected(&step, &e))?;
    match got {
        None => fail!("{step} says it does not exist{}", ctx.settled()),
        Some(s) if ingress(&s) != ingress(&second) => fail!(
            "{step} reports {}, but ensure_load_balancer returned {}{}",
            show(&s),
            show(&second),
            ctx.settled()
        ),
        Some(_) => {}
    }
    let mut note = Vec::new();
    match before {
        Ok(before) => {
            let new = new_load_balancers(ctx, &before, |n| n == 1).await?;
            if new.len() != 1 {
                fail!(
                    "after two ensure_load_balancer calls for one Service, the cloud has {} new \
                     load balancer(s) [{}]{}; expected exactly one",
                    new.len(),
                    new.join(", "),
                    ctx.settled()
                );
            }
        }
        Err(why) => note.push(format!("load balancers not counted: {why}")),
    }
    delete(ctx, lb, &service, "at the end").await?;
    Ok(notes(note))
}

/// Checks the Nodes the cloud says the load balancer targets, when the test cloud can tell.
async fn check_targets(
    ctx: &Ctx,
    service: &Service,
    want: &[&Node],
    after: &str,
) -> Result<Option<String>, Stop> {
    let want = names(want);
    let deadline = tokio::time::Instant::now() + ctx.options().settle_timeout;
    loop {
        let got = match targets(ctx, service).await? {
            Err(why) => return Ok(Some(format!("targets not verified: {why}"))),
            Ok(got) => got,
        };
        if got.as_ref() == Some(&want) {
            return Ok(None);
        }
        if tokio::time::Instant::now() >= deadline {
            match got {
                None => fail!(
                    "{after}, the cloud has no load balancer for {}{}",
                    svc_name(service),
                    ctx.settled()
                ),
                Some(got) => fail!(
                    "{after}, the load balancer sends traffic to [{}], not [{}]{}",
                    got.join(", "),
                    want.join(", "),
                    ctx.settled()
                ),
            }
        }
        tokio::time::sleep(ctx.options().poll_interval).await;
    }
}

pub(super) async fn update_with_new_nodes(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let pool = ctx.pool(2).await?;
    let (a, b) = (&pool[0], &pool[1]);
    let service = ctx.service();
    ctx.ensure("", &service, std::slice::from_ref(a)).await?;
    let mut note = Vec::new();
    note.extend(check_targets(ctx, &service, &[a], "after ensure_load_balancer with [a]").await?);

    for (set, label) in [(vec![a, b], "[a, b]"), (vec![b], "[b]")] {
        let what = format!(
            "update_load_balancer({}) with Nodes {label} = [{}]",
            svc_name(&service),
            names(&set).join(", ")
        );
        ctx.call(
            what.clone(),
            lb.update_load_balancer(ctx.cluster(), &service, &arcs(&set)),
        )
        .await?;
        check_targets(ctx, &service, &set, &format!("after {what}")).await?;
        let step = format!("get_load_balancer({}) after {what}", svc_name(&service));
        if get_until(ctx, lb, &service, step.clone(), true)
            .await?
            .is_none()
        {
            fail!("{step} says it does not exist{}", ctx.settled());
        }
    }
    delete(ctx, lb, &service, "at the end").await?;
    note.dedup();
    Ok(notes(note))
}

pub(super) async fn ensure_deleted_is_idempotent(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let nodes = ctx.pool(1).await?;
    let service = ctx.service();
    let before = listed(ctx, ctx.cluster()).await?;
    ctx.ensure("", &service, &nodes).await?;
    delete(ctx, lb, &service, "first call").await?;
    gone_after_delete(ctx, lb, &service).await?;
    delete(ctx, lb, &service, "second call, nothing left to delete").await?;
    match before {
        Ok(before) => {
            let left = new_load_balancers(ctx, &before, |n| n == 0).await?;
            if !left.is_empty() {
                fail!(
                    "the cloud still has load balancer(s) [{}] after ensure_load_balancer_deleted{}",
                    left.join(", "),
                    ctx.settled()
                );
            }
            Ok(None)
        }
        Err(why) => Ok(Some(format!("load balancers not counted: {why}"))),
    }
}

pub(super) async fn ensure_deleted_when_nothing_exists(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let service = ctx.service();
    delete(
        ctx,
        lb,
        &service,
        "for a Service that never had a load balancer",
    )
    .await?;
    let when = "for a Service that never had a load balancer";
    let (step, found) = get(ctx, lb, &service, when).await?;
    if let Some(status) = found {
        fail!("{step} says it exists, with {}", show(&status));
    }
    Ok(None)
}

pub(super) async fn status_has_valid_ingress(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let nodes = ctx.pool(1).await?;
    let service = ctx.service();
    let status = ctx.ensure("", &service, &nodes).await?;
    let step = format!("ensure_load_balancer({})", svc_name(&service));
    let entries = status.ingress.clone().unwrap_or_default();
    if entries.is_empty() {
        fail!(
            "{step} returned a status with no ingress: the Service would get no external address \
             (while the load balancer is provisioning, return CloudError::RetryAfter)"
        );
    }
    let mut problems = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let ip = entry.ip.as_deref().filter(|s| !s.is_empty());
        let hostname = entry.hostname.as_deref().filter(|s| !s.is_empty());
        if ip.is_none() && hostname.is_none() {
            problems.push(format!("ingress[{i}] has neither an ip nor a hostname"));
        }
        if let Some(ip) = ip
            && ip.parse::<IpAddr>().is_err()
        {
            problems.push(format!("ingress[{i}].ip {ip:?} is not an IP address"));
        }
        if let Some(h) = hostname
            && !valid_dns_name(h)
        {
            problems.push(format!("ingress[{i}].hostname {h:?} is not a DNS name"));
        }
        match (entry.ip_mode.as_deref(), ip) {
            (None, _) | (Some("VIP" | "Proxy"), Some(_)) => {}
            (Some(mode @ ("VIP" | "Proxy")), None) => {
                problems.push(format!("ingress[{i}] has ipMode {mode} but no ip"));
            }
            (Some(other), _) => problems.push(format!(
                "ingress[{i}].ipMode {other:?} is neither \"VIP\" nor \"Proxy\""
            )),
        }
    }
    if !problems.is_empty() {
        fail!(
            "{step} returned {}, which the API server rejects or clients cannot use: {}",
            show(&status),
            problems.join("; ")
        );
    }
    delete(ctx, lb, &service, "at the end").await?;
    Ok(None)
}

/// How a Service carrying a copy of another's annotations is made, in
/// [`copied_annotations_never_take_over`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Copied {
    /// In another namespace of the same cluster.
    OtherNamespace,
    /// In another cluster (same cloud account).
    OtherCluster,
    /// In another namespace, with every copied value made 100 kB long: a hint that cannot
    /// be resolved.
    Oversized,
}

impl Copied {
    fn describe(self) -> &'static str {
        match self {
            Self::OtherNamespace => {
                "a Service of another namespace carrying a copy of the first's annotations"
            }
            Self::OtherCluster => {
                "a Service of another cluster carrying a copy of the first's annotations"
            }
            Self::Oversized => {
                "a Service of another namespace carrying a copy of the first's annotations, each value \
                 made 100 kB long"
            }
        }
    }
}

/// What the first Service's load balancer looked like, to compare with after each step.
struct Victim {
    service: Service,
    status: LoadBalancerStatus,
    /// Its Nodes as the cloud sees them, when the test cloud can tell.
    hosts: Option<Vec<String>>,
    /// Its names in `TestCloud::list_load_balancers`, when the test cloud can tell.
    listed: Option<Vec<String>>,
}

/// Fails unless the victim's load balancer still exists with the same ingress and Nodes.
async fn unchanged(ctx: &Ctx, lb: &dyn LoadBalancer, victim: &Victim, after: &str) -> Checked {
    let step = format!(
        "get_load_balancer({}) after {after}",
        svc_name(&victim.service)
    );
    match ctx
        .call(
            step.clone(),
            lb.get_load_balancer(ctx.cluster(), &victim.service),
        )
        .await?
    {
        None => fail!(
            "{step} says it does not exist: the first Service's load balancer was deleted by \
             another Service"
        ),
        Some(s) if ingress(&s) != ingress(&victim.status) => fail!(
            "{step} reports {}, not {}: another Service changed the first's load balancer",
            show(&s),
            show(&victim.status)
        ),
        Some(_) => {}
    }
    if let Some(want) = &victim.hosts {
        // The test cloud answered when the victim was made; an error now is the set-up's.
        let got = targets(ctx, &victim.service)
            .await?
            .map_err(|why| Stop::Error(format!("TestCloud::load_balancer_nodes: {why}")))?;
        match got {
            None => fail!(
                "after {after}, the test cloud finds no load balancer for {}: another Service \
                 deleted or changed it",
                svc_name(&victim.service)
            ),
            Some(got) if &got != want => fail!(
                "after {after}, the first Service's load balancer sends traffic to [{}], not [{}]: \
                 another Service changed it",
                got.join(", "),
                want.join(", ")
            ),
            Some(_) => {}
        }
    }
    if let Some(names) = &victim.listed {
        let now = listed(ctx, ctx.cluster())
            .await?
            .map_err(|why| Stop::Error(format!("TestCloud::list_load_balancers: {why}")))?;
        if let Some(gone) = names.iter().find(|n| !now.contains(n)) {
            fail!(
                "after {after}, the cloud no longer lists the first Service's load balancer \
                 {gone}: another Service deleted or renamed it"
            );
        }
    }
    Ok(None)
}

/// A Service of `namespace` carrying `annotations`, with other ports than the first.
fn copy_of(ctx: &Ctx, namespace: &str, annotations: &BTreeMap<String, String>) -> Service {
    let mut service = ctx.service();
    service.metadata.namespace = Some(namespace.to_owned());
    service.metadata.annotations = (!annotations.is_empty()).then(|| annotations.clone());
    if let Some(port) = service
        .spec
        .as_mut()
        .and_then(|s| s.ports.as_mut())
        .and_then(|p| p.first_mut())
    {
        port.port = 81;
        port.name = Some("other".into());
    }
    service
}

/// One attempt on the victim's load balancer through a copy of its annotations.
async fn attempt(
    ctx: &Ctx,
    lb: &dyn LoadBalancer,
    victim: &Victim,
    how: Copied,
    annotations: &BTreeMap<String, String>,
    nodes: (&Node, &Node),
) -> Checked {
    let (a, b) = nodes;
    let cluster = match how {
        Copied::OtherCluster => format!("{}-other", ctx.cluster()),
        Copied::OtherNamespace | Copied::Oversized => ctx.cluster().to_owned(),
    };
    let annotations: BTreeMap<String, String> = match how {
        Copied::Oversized => annotations
            .iter()
            .map(|(k, v)| {
                let mut long = v.clone();
                while long.len() < 100_000 {
                    long.push_str(if v.is_empty() { "x" } else { v });
                }
                (k.clone(), long)
            })
            .collect(),
        Copied::OtherNamespace | Copied::OtherCluster => annotations.clone(),
    };
    let copy = copy_of(ctx, "ccm-conformance-other", &annotations);
    let who = how.describe();
    let mut note = Vec::new();

    // Ensure: refused with NotOwned, or the copy's own load balancer.
    let before = listed(ctx, &cluster).await?;
    let (step, answer) = ctx
        .ensure_in("", &cluster, &copy, std::slice::from_ref(b))
        .await?;
    let own = match answer {
        Ok(status) => {
            if let Ok(before) = &before {
                let new = new_load_balancers_in(ctx, &cluster, before, |n| n >= 1).await?;
                if new.is_empty() {
                    fail!(
                        "{step}, for {who}, returned {} but the cloud has no new load balancer{}: \
                         it used the first Service's instead of refusing with CloudError::NotOwned \
                         or making its own",
                        show(&status),
                        ctx.settled()
                    );
                }
            } else {
                note.push(format!(
                    "not verified that {who} got a load balancer of its own: load balancers not \
                     counted"
                ));
            }
            true
        }
        Err(e) if e.is_not_owned() => false,
        // A hint that is no valid value may also be refused as any bad annotation is.
        Err(CloudError::Provider { .. }) if how == Copied::Oversized => false,
        Err(CloudError::NotImplemented) => return Err(Stop::NotImplemented(step)),
        Err(e) => fail!(
            "{step}, for {who}, returned {}: a load balancer that is not the Service's is \
             refused with CloudError::NotOwned (the service controller reports it as such), or \
             the Service gets its own",
            describe_err(&e)
        ),
    };
    unchanged(ctx, lb, victim, &format!("{step} for {who}")).await?;

    // Update with other Nodes: whatever it answers, the first's stays as it was.
    let step = format!(
        "update_load_balancer({}) for {who}, with Nodes [{}]",
        svc_name(&copy),
        names(&[a, b]).join(", ")
    );
    let _ = ctx
        .raw(
            step.clone(),
            lb.update_load_balancer(&cluster, &copy, &arcs(&[a, b])),
        )
        .await;
    unchanged(ctx, lb, victim, &step).await?;

    // Get: never the first's status; never an error that would hold the deletion.
    let step = format!("get_load_balancer({}) for {who}", svc_name(&copy));
    match ctx
        .raw(step.clone(), lb.get_load_balancer(&cluster, &copy))
        .await
    {
        Ok(Some(s)) if !own => fail!(
            "{step} reports {} although ensure_load_balancer refused: it reports the first \
             Service's load balancer, which the service controller would then delete with this \
             one",
            show(&s)
        ),
        Ok(_) => {}
        Err(e) if e.is_not_owned() => {}
        Err(e) => fail!(
            "{step} returned {}: the service controller asks it before it deletes, so the \
             Service's deletion would be stuck behind its finalizer; a load balancer that is not \
             the Service's is Ok(None) or CloudError::NotOwned",
            describe_err(&e)
        ),
    }

    // Delete: Ok or NotOwned, and the first's is still there.
    let step = format!(
        "ensure_load_balancer_deleted({}) for {who}",
        svc_name(&copy)
    );
    match ctx
        .raw(
            step.clone(),
            lb.ensure_load_balancer_deleted(&cluster, &copy),
        )
        .await
    {
        Ok(()) => {}
        Err(e) if e.is_not_owned() => {}
        Err(e) => fail!(
            "{step} returned {}: the Service's deletion would be stuck behind its finalizer; \
             delete what is the Service's own and return Ok or CloudError::NotOwned",
            describe_err(&e)
        ),
    }
    unchanged(ctx, lb, victim, &step).await?;
    if own && let Ok(before) = &before {
        let left = new_load_balancers_in(ctx, &cluster, before, |n| n == 0).await?;
        if !left.is_empty() {
            fail!(
                "after {step}, the cloud still has its load balancer(s) [{}]{}",
                left.join(", "),
                ctx.settled()
            );
        }
    }
    Ok(super::notes(note))
}

pub(super) async fn copied_annotations_never_take_over(ctx: &Ctx) -> Checked {
    let lb = ctx.load_balancer()?;
    let pool = ctx.pool(2).await?;
    let (a, b) = (&pool[0], &pool[1]);
    let mut note = Vec::new();

    // The first Service, as the cluster shows it once its load balancer exists: with the
    // annotations the provider wrote (its load balancer's ID) or a user may set (a name).
    let first = ctx.service();
    let before = listed(ctx, ctx.cluster()).await?;
    let status = ctx.ensure("first", &first, std::slice::from_ref(a)).await?;
    let listed = match before {
        Ok(before) => Some(new_load_balancers(ctx, &before, |n| n >= 1).await?),
        Err(why) => {
            note.push(format!("load balancers not counted: {why}"));
            None
        }
    };
    let mut annotations = first.metadata.annotations.clone().unwrap_or_default();
    match ctx
        .optional(
            "TestCloud::load_balancer_annotations",
            ctx.shared
                .cloud
                .load_balancer_annotations(ctx.cluster(), &first),
        )
        .await?
    {
        Ok(written) => annotations.extend(written),
        Err(why) => note.push(format!(
            "only the Service's own annotations were copied: {why}"
        )),
    }
    let mut service = first.clone();
    service.metadata.annotations = (!annotations.is_empty()).then(|| annotations.clone());
    let hosts = match targets(ctx, &service).await? {
        Ok(hosts) => hosts,
        Err(why) => {
            note.push(format!("targets not verified: {why}"));
            None
        }
    };
    let victim = Victim {
        service,
        status,
        hosts,
        listed,
    };

    let mut copies = vec![Copied::OtherNamespace, Copied::OtherCluster];
    if annotations.is_empty() {
        note.push("no annotation to copy, so no oversized copy".into());
    } else {
        copies.push(Copied::Oversized);
    }
    for how in copies {
        if let Some(n) = attempt(ctx, lb, &victim, how, &annotations, (a, b)).await? {
            note.push(n);
        }
    }
    delete(ctx, lb, &victim.service, "at the end").await?;
    note.dedup();
    Ok(super::notes(note))
}
