//! What a check works with: the provider, the test cloud, the options, names, and the
//! clean-up list (crate-private).
//!
//! A [`Ctx`] is made per check and shared with the runner, so that after a timeout or a
//! panic the runner still knows which call the check was waiting for and what it must clean
//! up. [`Stop`] is how a check ends early; every provider answer is classified here so the
//! checks read as the contract they verify.

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use ccm_core::provider::{
    CloudError, CloudProvider, CloudResult, Instances, LoadBalancer, Route, Routes,
    resolve_instances,
};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::report::Outcome;
use crate::{Options, TestCloud, TestCloudError};

/// How a check ends early.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The contract is broken; what was observed.
    Fail(String),
    /// The check cannot run; why.
    Skip(String),
    /// This call returned `NotImplemented`.
    NotImplemented(String),
    /// The test set-up failed.
    Error(String),
}

/// What a check returns: a note on success.
pub(crate) type Checked = Result<Option<String>, Stop>;

pub(crate) fn outcome(result: Checked) -> Outcome {
    match result {
        Ok(note) => Outcome::Passed { note },
        Err(Stop::Fail(message)) => Outcome::Failed { message },
        Err(Stop::Skip(reason)) => Outcome::Skipped { reason },
        Err(Stop::NotImplemented(call)) => Outcome::NotImplemented { call },
        Err(Stop::Error(message)) => Outcome::Errored { message },
    }
}

/// Failing with a formatted message: `fail!("...", args)`.
macro_rules! fail {
    ($($arg:tt)*) => { return Err($crate::context::Stop::Fail(format!($($arg)*))) };
}
pub(crate) use fail;

/// A random-enough number without a dependency: std's per-instance hasher keys.
pub(crate) fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

/// The error's kind and text, for a failure message.
pub(crate) fn describe_err(e: &CloudError) -> String {
    match e {
        CloudError::NotImplemented => "NotImplemented".into(),
        CloudError::InstanceNotFound => "InstanceNotFound".into(),
        CloudError::ImplementedElsewhere => "ImplementedElsewhere".into(),
        CloudError::RetryAfter { message, after } => format!("RetryAfter({after:?}): {message}"),
        CloudError::Provisioning { message, after } => {
            format!("Provisioning({after:?}): {message}")
        }
        other if other.is_not_owned() => format!("NotOwned: {other}"),
        other => format!("Provider error: {}", other.chain_to_string()),
    }
}

/// A `Provider` error whose text says "not implemented": the kind is what the controllers
/// look at, so this is a broken contract.
pub(crate) fn says_not_implemented(e: &CloudError) -> bool {
    if e.is_not_implemented() {
        return false;
    }
    let text = e.chain_to_string().to_ascii_lowercase();
    [
        "not implemented",
        "unimplemented",
        "not_implemented",
        "notimplemented",
    ]
    .iter()
    .any(|s| text.contains(s))
}

/// `Node "n" (spec.providerID "p")`, for messages.
pub(crate) fn describe_node(node: &Node) -> String {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match spec_provider_id(node) {
        Some(id) => format!("Node {name:?} (spec.providerID {id:?})"),
        None => format!("Node {name:?} (no spec.providerID)"),
    }
}

/// An RFC 1123 DNS name (letters of either case): dot-separated labels of letters, digits
/// and `-`, 1 to 63 characters each, not starting or ending with `-`; 253 characters at most.
pub(crate) fn valid_dns_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

pub(crate) use ccm_core::provider::{node_name, node_provider_id as spec_provider_id};

pub(crate) fn with_provider_id(node: &Node, provider_id: &str) -> Node {
    let mut node = node.clone();
    node.spec.get_or_insert_with(NodeSpec::default).provider_id = Some(provider_id.to_owned());
    node
}

/// Something a check made, to remove when it ends however it ends.
enum Cleanup {
    Instance(Box<Node>),
    /// The load balancer of a Service, in a cluster.
    LoadBalancer(String, Box<Service>),
    Route {
        cluster: String,
        cidr: String,
    },
}

/// State of one run, shared by its checks.
pub(crate) struct Shared {
    pub(crate) provider: Arc<dyn CloudProvider>,
    pub(crate) cloud: Arc<dyn TestCloud>,
    pub(crate) options: Options,
    run_id: String,
    counter: AtomicU32,
    seed: u32,
    /// Instances for load balancers and routes to point at, made on first use, deleted at
    /// the end of the run.
    pool: tokio::sync::Mutex<Vec<Node>>,
}

impl Shared {
    pub(crate) fn new(
        provider: Arc<dyn CloudProvider>,
        cloud: Arc<dyn TestCloud>,
        options: Options,
    ) -> Self {
        let random = random_u64();
        Self {
            provider,
            cloud,
            options,
            run_id: format!("{:06x}", random & 0xff_ffff),
            counter: AtomicU32::new(0),
            seed: (random >> 32) as u32,
            pool: tokio::sync::Mutex::new(Vec::new()),
        }
    }

    fn next(&self) -> u32 {
        self.counter.fetch_add(1, Ordering::Relaxed)
    }

    /// A new name, unique in the run: `<prefix>-<run id>-<n>`.
    pub(crate) fn unique_name(&self) -> String {
        format!(
            "{}-{}-{}",
            self.options.name_prefix,
            self.run_id,
            self.next()
        )
    }

    /// Deletes the pool's instances; returns what failed.
    pub(crate) async fn delete_pool(&self) -> Vec<String> {
        let nodes = std::mem::take(&mut *self.pool.lock().await);
        let mut errors = Vec::new();
        for node in nodes {
            let deleted = tokio::time::timeout(
                self.options.check_timeout,
                self.cloud.delete_instance(&node),
            )
            .await;
            match deleted {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(format!(
                    "TestCloud::delete_instance({:?}): {e}",
                    node_name(&node)
                )),
                Err(_) => errors.push(format!(
                    "TestCloud::delete_instance({:?}) timed out",
                    node_name(&node)
                )),
            }
        }
        errors
    }
}

/// What one check works with.
pub(crate) struct Ctx {
    pub(crate) shared: Arc<Shared>,
    step: Mutex<String>,
    cleanups: Mutex<Vec<Cleanup>>,
}

impl Ctx {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self {
            shared,
            step: Mutex::new("starting".into()),
            cleanups: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn provider(&self) -> &dyn CloudProvider {
        &*self.shared.provider
    }

    pub(crate) fn options(&self) -> &Options {
        &self.shared.options
    }

    pub(crate) fn cluster(&self) -> &str {
        &self.shared.options.cluster_name
    }

    /// The call the check is making now, for a timeout or panic message.
    pub(crate) fn step(&self) -> String {
        self.step.lock().clone()
    }

    pub(crate) fn set_step(&self, step: impl Into<String>) {
        *self.step.lock() = step.into();
    }

    // ----- provider calls -----

    /// Makes a provider call and returns its raw answer.
    pub(crate) async fn raw<T>(
        &self,
        step: impl Into<String>,
        call: impl Future<Output = CloudResult<T>>,
    ) -> CloudResult<T> {
        self.set_step(step);
        call.await
    }

    /// Makes a provider call whose error ends the check: `NotImplemented` as such, anything
    /// else as a failure naming the call.
    pub(crate) async fn call<T>(
        &self,
        step: impl Into<String>,
        call: impl Future<Output = CloudResult<T>>,
    ) -> Result<T, Stop> {
        let step = step.into();
        self.set_step(step.clone());
        call.await.map_err(|e| unexpected(&step, &e))
    }

    /// Asks until `done` holds for the answer or [`Options::settle_timeout`] has passed, and
    /// returns the last answer.
    pub(crate) async fn eventually<T, F, Fut>(
        &self,
        step: impl Into<String>,
        mut call: F,
        done: impl Fn(&CloudResult<T>) -> bool,
    ) -> CloudResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = CloudResult<T>>,
    {
        self.set_step(step);
        let deadline = tokio::time::Instant::now() + self.options().settle_timeout;
        loop {
            let answer = call().await;
            if done(&answer) || tokio::time::Instant::now() >= deadline {
                return answer;
            }
            tokio::time::sleep(self.options().poll_interval).await;
        }
    }

    /// `" (after waiting up to 5s)"` when settling is on, for messages.
    pub(crate) fn settled(&self) -> String {
        let settle = self.options().settle_timeout;
        if settle.is_zero() {
            String::new()
        } else {
            format!(" (after waiting up to {settle:?})")
        }
    }

    // ----- capabilities -----

    /// The provider's instances as the controllers see them, own or adapted.
    pub(crate) fn instances(&self) -> Result<Arc<dyn Instances>, Stop> {
        self.set_step("resolve_instances");
        resolve_instances(&self.shared.provider).ok_or_else(|| {
            Stop::Skip(
                "the provider supports neither Instances nor LegacyInstances (instances() and \
                 legacy_instances() return None)"
                    .into(),
            )
        })
    }

    /// Whether the controllers reach instances through the legacy adapter.
    pub(crate) fn is_legacy(&self) -> bool {
        self.provider().instances().is_none() && self.provider().legacy_instances().is_some()
    }

    pub(crate) fn load_balancer(&self) -> Result<&dyn LoadBalancer, Stop> {
        self.set_step("load_balancer()");
        self.provider().load_balancer().ok_or_else(|| {
            Stop::Skip("the provider has no LoadBalancer (load_balancer() returns None)".into())
        })
    }

    pub(crate) fn routes(&self) -> Result<&dyn Routes, Stop> {
        self.set_step("routes()");
        self.provider()
            .routes()
            .ok_or_else(|| Stop::Skip("the provider has no Routes (routes() returns None)".into()))
    }

    // ----- the test cloud -----

    /// A test-cloud call: unsupported skips the check, a failure is a set-up error.
    pub(crate) async fn test_cloud<T>(
        &self,
        step: impl Into<String>,
        call: impl Future<Output = Result<T, TestCloudError>>,
    ) -> Result<T, Stop> {
        let step = step.into();
        self.set_step(step.clone());
        call.await.map_err(|e| match e {
            TestCloudError::Unsupported(why) => Stop::Skip(format!("{step}: {why}")),
            other => Stop::Error(format!(
                "{step} failed: {}",
                ccm_core::provider::display_chain(&other)
            )),
        })
    }

    /// An optional test-cloud call: `Ok(None)` when unsupported, with the reason.
    pub(crate) async fn optional<T>(
        &self,
        step: impl Into<String>,
        call: impl Future<Output = Result<T, TestCloudError>>,
    ) -> Result<Result<T, String>, Stop> {
        match self.test_cloud(step, call).await {
            Ok(v) => Ok(Ok(v)),
            Err(Stop::Skip(why)) => Ok(Err(why)),
            Err(other) => Err(other),
        }
    }

    /// A new running instance under a name of this run, and that name.
    async fn new_instance(&self) -> Result<(String, Node), Stop> {
        let name = self.shared.unique_name();
        let call = self.shared.cloud.create_instance(&name);
        let step = format!("TestCloud::create_instance({name:?})");
        let node = self.test_cloud(step, call).await?;
        Ok((name, node))
    }

    /// A new running instance, deleted when the check ends.
    pub(crate) async fn create_instance(&self) -> Result<Node, Stop> {
        let (name, node) = self.new_instance().await?;
        if node_name(&node) != name {
            return Err(Stop::Error(format!(
                "TestCloud::create_instance({name:?}) returned a Node named {:?}",
                node_name(&node)
            )));
        }
        self.cleanups
            .lock()
            .push(Cleanup::Instance(Box::new(node.clone())));
        Ok(node)
    }

    pub(crate) async fn stop_instance(&self, node: &Node) -> Result<(), Stop> {
        self.test_cloud(
            format!("TestCloud::stop_instance({:?})", node_name(node)),
            self.shared.cloud.stop_instance(node),
        )
        .await
    }

    pub(crate) async fn start_instance(&self, node: &Node) -> Result<Result<(), String>, Stop> {
        self.optional(
            format!("TestCloud::start_instance({:?})", node_name(node)),
            self.shared.cloud.start_instance(node),
        )
        .await
    }

    pub(crate) async fn delete_instance(&self, node: &Node) -> Result<(), Stop> {
        self.test_cloud(
            format!("TestCloud::delete_instance({:?})", node_name(node)),
            self.shared.cloud.delete_instance(node),
        )
        .await?;
        self.cleanups
            .lock()
            .retain(|c| !matches!(c, Cleanup::Instance(n) if node_name(n) == node_name(node)));
        Ok(())
    }

    /// The provider ID the cloud-node controller would give `node`: its own, else the one
    /// `instance_metadata` answers. `None` when neither says (errors included: the checks
    /// that use this verify something else).
    pub(crate) async fn known_provider_id(
        &self,
        instances: &dyn Instances,
        node: &Node,
    ) -> Option<String> {
        if let Some(id) = spec_provider_id(node) {
            return Some(id.to_owned());
        }
        let step = format!("instance_metadata({})", describe_node(node));
        match self.raw(step, instances.instance_metadata(node)).await {
            Ok(Some(meta)) if !meta.provider_id.is_empty() => Some(meta.provider_id),
            _ => None,
        }
    }

    /// The forms in which the controllers see `node`: as registered, and, when that has no
    /// provider ID, after the cloud-node controller set one.
    pub(crate) async fn node_forms(
        &self,
        instances: &dyn Instances,
        node: &Node,
    ) -> Vec<(&'static str, Node)> {
        let mut forms = vec![("as registered", node.clone())];
        if spec_provider_id(node).is_none()
            && let Some(id) = self.known_provider_id(instances, node).await
        {
            forms.push((
                "with the spec.providerID cloud-node sets",
                with_provider_id(node, &id),
            ));
        }
        forms
    }

    /// `n` instances for load balancers and routes, shared by the run's checks, with the
    /// provider ID cloud-node would set.
    pub(crate) async fn pool(&self, n: usize) -> Result<Vec<Node>, Stop> {
        let mut pool = self.shared.pool.lock().await;
        while pool.len() < n {
            let (_, node) = self.new_instance().await?;
            let node = match resolve_instances(&self.shared.provider) {
                Some(instances) if spec_provider_id(&node).is_none() => {
                    match self.known_provider_id(&*instances, &node).await {
                        Some(id) => with_provider_id(&node, &id),
                        None => node,
                    }
                }
                _ => node,
            };
            pool.push(node);
        }
        Ok(pool[..n].to_vec())
    }

    /// A new UID (a version-4 UUID), as the API server gives objects.
    pub(crate) fn uid(&self) -> String {
        let n = u64::from(self.shared.next());
        let r = random_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            self.shared.seed,
            n & 0xffff,
            (r >> 52) & 0xfff,
            (r >> 40) & 0xfff,
            (r ^ n) & 0xffff_ffff_ffff
        )
    }

    // ----- load balancers -----

    /// A Service of `type: LoadBalancer` no load balancer exists for yet.
    pub(crate) fn service(&self) -> Service {
        let n = self.shared.next();
        let mut svc = Service::default();
        svc.metadata.name = Some(self.shared.unique_name());
        svc.metadata.namespace = Some("ccm-conformance".into());
        svc.metadata.uid = Some(self.uid());
        svc.spec = Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                protocol: Some("TCP".into()),
                port: 80,
                target_port: Some(IntOrString::Int(8080)),
                node_port: Some(30000 + (n % 2000) as i32),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        });
        svc
    }

    /// Calls `ensure_load_balancer` as the service controller does: again after a
    /// `RetryAfter`, skipping the check on `ImplementedElsewhere`. The load balancer is
    /// deleted when the check ends.
    pub(crate) async fn ensure(
        &self,
        what: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<k8s_openapi::api::core::v1::LoadBalancerStatus, Stop> {
        let cluster = self.cluster().to_owned();
        let (step, answer) = self.ensure_in(what, &cluster, service, nodes).await?;
        match answer {
            Ok(status) => Ok(status),
            Err(CloudError::ImplementedElsewhere) => Err(Stop::Skip(format!(
                "{step} returned ImplementedElsewhere: another controller owns the load \
                 balancer of the test Service, so there is nothing to check"
            ))),
            Err(e) => Err(unexpected(&step, &e)),
        }
    }

    /// Calls `ensure_load_balancer` in `cluster` as the service controller does, again after
    /// a `RetryAfter`, and returns the step's description and the first other answer. The
    /// load balancer is deleted when the check ends.
    pub(crate) async fn ensure_in(
        &self,
        what: &str,
        cluster: &str,
        service: &Service,
        nodes: &[Node],
    ) -> Result<
        (
            String,
            CloudResult<k8s_openapi::api::core::v1::LoadBalancerStatus>,
        ),
        Stop,
    > {
        let lb = self.load_balancer()?;
        {
            let mut cleanups = self.cleanups.lock();
            let known = cleanups.iter().any(|c| {
                matches!(c, Cleanup::LoadBalancer(c, s) if c == cluster && s.metadata.uid == service.metadata.uid)
            });
            if !known {
                cleanups.push(Cleanup::LoadBalancer(
                    cluster.to_owned(),
                    Box::new(service.clone()),
                ));
            }
        }
        let nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        let in_cluster = if cluster == self.cluster() {
            String::new()
        } else {
            format!(" in cluster {cluster:?}")
        };
        let step = format!(
            "{what} ensure_load_balancer({}, {} node(s)){in_cluster}",
            svc_name(service),
            nodes.len()
        )
        .trim_start()
        .to_owned();
        loop {
            match self
                .raw(
                    step.clone(),
                    lb.ensure_load_balancer(cluster, service, &nodes),
                )
                .await
            {
                Err(
                    CloudError::RetryAfter { after, .. } | CloudError::Provisioning { after, .. },
                ) => {
                    // The service controller calls again after exactly `after`; the check's
                    // timeout bounds the wait.
                    self.set_step(format!("{step}: waiting {after:?} after RetryAfter"));
                    tokio::time::sleep(after.max(Duration::from_millis(10))).await;
                }
                answer => return Ok((step, answer)),
            }
        }
    }

    // ----- routes -----

    /// The `i`-th /24 inside [`Options::route_cidr`], offset by the run so that two runs do
    /// not collide.
    pub(crate) fn route_cidr(&self) -> Result<String, Stop> {
        let (base, prefix) = parse_cidr(&self.options().route_cidr).map_err(Stop::Error)?;
        let slots = 1u32 << (24 - prefix);
        let slot = self.shared.seed.wrapping_add(self.shared.next()) % slots;
        let net = u32::from(base) + (slot << 8);
        Ok(format!("{}/24", Ipv4Addr::from(net)))
    }

    /// Creates a route, removed when the check ends.
    pub(crate) async fn create_route(
        &self,
        cluster: &str,
        name_hint: &str,
        route: &Route,
    ) -> Result<(), Stop> {
        let routes = self.routes()?;
        self.cleanups.lock().push(Cleanup::Route {
            cluster: cluster.to_owned(),
            cidr: route.destination_cidr.clone(),
        });
        self.call(
            format!(
                "create_route({cluster:?}, {name_hint:?}, {} -> {:?})",
                route.destination_cidr, route.target_node
            ),
            routes.create_route(cluster, name_hint, route),
        )
        .await
    }

    // ----- clean-up -----

    /// Removes what the check made, newest first; returns what failed.
    pub(crate) async fn cleanup(&self) -> Vec<String> {
        let items = std::mem::take(&mut *self.cleanups.lock());
        let mut errors = Vec::new();
        for item in items.into_iter().rev() {
            let timeout = self.options().check_timeout;
            match item {
                Cleanup::Instance(node) => {
                    let what = format!("TestCloud::delete_instance({:?})", node_name(&node));
                    match tokio::time::timeout(timeout, self.shared.cloud.delete_instance(&node))
                        .await
                    {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => errors.push(format!("{what}: {e}")),
                        Err(_) => errors.push(format!("{what} timed out")),
                    }
                }
                Cleanup::LoadBalancer(cluster, service) => {
                    let Some(lb) = self.provider().load_balancer() else {
                        continue;
                    };
                    let what = format!("ensure_load_balancer_deleted({})", svc_name(&service));
                    match tokio::time::timeout(
                        timeout,
                        lb.ensure_load_balancer_deleted(&cluster, &service),
                    )
                    .await
                    {
                        // NotOwned: nothing of the Service's is left (another's was not
                        // touched).
                        Ok(Ok(())) => {}
                        Ok(Err(e)) if e.is_not_owned() => {}
                        Ok(Err(e)) => errors.push(format!("{what}: {}", describe_err(&e))),
                        Err(_) => errors.push(format!("{what} timed out")),
                    }
                }
                Cleanup::Route { cluster, cidr } => {
                    let Some(routes) = self.provider().routes() else {
                        continue;
                    };
                    let what = format!("removing the route for {cidr} in cluster {cluster:?}");
                    let removed = tokio::time::timeout(timeout, async {
                        for route in routes.list_routes(&cluster).await? {
                            if route.destination_cidr == cidr {
                                routes.delete_route(&cluster, &route).await?;
                            }
                        }
                        Ok::<_, CloudError>(())
                    })
                    .await;
                    match removed {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => errors.push(format!("{what}: {}", describe_err(&e))),
                        Err(_) => errors.push(format!("{what} timed out")),
                    }
                }
            }
        }
        errors
    }
}

/// The failure for an error no contract allows here.
pub(crate) fn unexpected(step: &str, e: &CloudError) -> Stop {
    if e.is_not_implemented() {
        Stop::NotImplemented(step.to_owned())
    } else if says_not_implemented(e) {
        Stop::Fail(format!(
            "{step} returned a Provider error that says it is not implemented ({}); return \
             CloudError::NotImplemented, the kind the controllers branch on",
            e.chain_to_string()
        ))
    } else {
        Stop::Fail(format!("{step} failed: {}", describe_err(e)))
    }
}

pub(crate) fn svc_name(service: &Service) -> String {
    format!(
        "Service {}/{}",
        service.metadata.namespace.as_deref().unwrap_or_default(),
        service.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Parses an IPv4 CIDR with a prefix of at most /24.
fn parse_cidr(cidr: &str) -> Result<(Ipv4Addr, u32), String> {
    let invalid = |why: &str| format!("Options::route_cidr {cidr:?} {why}");
    let (ip, prefix) = cidr
        .split_once('/')
        .ok_or_else(|| invalid("is not of the form a.b.c.d/n"))?;
    let ip: Ipv4Addr = ip
        .parse()
        .map_err(|_| invalid("has no valid IPv4 address"))?;
    let prefix: u32 = prefix
        .parse()
        .map_err(|_| invalid("has no valid prefix length"))?;
    if prefix > 24 {
        return Err(invalid("must have a prefix of at most /24"));
    }
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    Ok((Ipv4Addr::from(u32::from(ip) & mask), prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs() {
        assert_eq!(
            parse_cidr("10.253.7.9/16"),
            Ok((Ipv4Addr::new(10, 253, 0, 0), 16))
        );
        assert_eq!(
            parse_cidr("10.1.2.0/24"),
            Ok((Ipv4Addr::new(10, 1, 2, 0), 24))
        );
        assert!(parse_cidr("10.1.2.0/25").is_err());
        assert!(parse_cidr("fd00::/64").is_err());
        assert!(parse_cidr("10.0.0.0").is_err());
    }

    #[test]
    fn dns_names() {
        for ok in [
            "node-1",
            "ip-10-0-0-1.ec2.internal",
            "LB-1.example.com",
            "a",
        ] {
            assert!(valid_dns_name(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a..b",
            "a b",
            "under_score",
            "http://x",
            &"x".repeat(64),
        ] {
            assert!(!valid_dns_name(bad), "{bad}");
        }
    }

    #[test]
    fn not_implemented_in_words() {
        assert!(says_not_implemented(&CloudError::msg(
            "Not implemented yet"
        )));
        assert!(says_not_implemented(&CloudError::provider(
            "zones",
            std::io::Error::other("unimplemented")
        )));
        assert!(!says_not_implemented(&CloudError::NotImplemented));
        assert!(!says_not_implemented(&CloudError::msg("quota exceeded")));
    }
}
