//! An in-memory cloud for `ccm-core`: a complete provider with no network, for tests, demos
//! and benchmarks.
//!
//! [`FakeCloud`] implements every provider trait against state held in memory: instances
//! (which can be added, removed, powered off and on), load balancers and routes. Like Go's
//! `fake.Cloud` it records every call, can fail any method on demand and can add latency;
//! unlike it, it keeps per-instance answers, is safe to call from many tasks at once, and
//! caps its call log, so it serves benchmarks as well as tests.
//!
//! Its load balancers and routes are records: the address a Service gets leads nowhere.
//! The bundled cloud whose load balancers carry traffic is the DigitalOcean-like one (its
//! simulator's data plane, `docs/do-like-cloud.md`).
//!
//! ```
//! use std::sync::Arc;
//! use ccm_core::provider::{CloudProvider, resolve_instances};
//! use ccm_fake_cloud::{FakeCloud, FakeInstance, Method};
//! use k8s_openapi::api::core::v1::Node;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let cloud = Arc::new(FakeCloud::new());
//! cloud.add_instance(FakeInstance::new("worker-1").with_zone("zone-b", "region-2"));
//!
//! let provider: Arc<dyn CloudProvider> = cloud.clone();
//! let mut node = Node::default();
//! node.metadata.name = Some("worker-1".into());
//! let meta = resolve_instances(&provider).unwrap().instance_metadata(&node).await.unwrap().unwrap();
//! assert_eq!(meta.provider_id, "fake://worker-1");
//! assert_eq!(meta.zone, "zone-b");
//! assert_eq!(cloud.call_count(Method::InstanceMetadata), 1);
//! # }
//! ```
#![forbid(unsafe_code)]

mod config;
mod control;
mod instances;
mod load_balancer;
mod metrics;
mod routes;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use ccm_core::provider::{
    BoxError, CloudConfig, CloudError, CloudProvider, CloudResult, Clusters, InitContext,
    InstanceMetadata, Instances, LegacyInstances, LoadBalancer, ProviderRegistry, Route, Routes,
    Zones, node_address,
};
use k8s_openapi::api::core::v1::NodeAddress;

pub use self::config::{
    AddressConfig, FakeCloudConfig, InstanceConfig, InstanceDefaults, InstanceState, InstancesShape,
};
use self::control::Control;
pub use self::control::{Call, Fault, Method};
pub use self::load_balancer::{ANNOTATION_LOAD_BALANCER_NAME, FakeLoadBalancer};

/// The provider name, and the scheme of the fake cloud's provider IDs (`fake://<id>`).
pub const PROVIDER_NAME: &str = "fake";

/// How many calls the log keeps by default; older ones are dropped (counters are kept).
pub const DEFAULT_CALL_LOG_CAPACITY: usize = 100_000;

/// An instance of the fake cloud.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FakeInstance {
    /// The name of the Node it backs.
    pub name: String,
    /// The cloud ID, the `<id>` of `fake://<id>`.
    pub id: String,
    /// The instance type.
    pub instance_type: String,
    /// The zone.
    pub zone: String,
    /// The region.
    pub region: String,
    /// The addresses; empty means "let the cloud assign an InternalIP and a Hostname".
    pub addresses: Vec<NodeAddress>,
    /// Running or stopped.
    pub state: InstanceState,
    /// Additional labels for the Node.
    pub labels: BTreeMap<String, String>,
}

impl FakeInstance {
    /// A running instance named `name`, with ID `name` and the default type, zone and region.
    pub fn new(name: impl Into<String>) -> Self {
        let name = name.into();
        let defaults = InstanceDefaults::default();
        Self {
            id: name.clone(),
            name,
            instance_type: defaults.instance_type,
            zone: defaults.zone,
            region: defaults.region,
            addresses: Vec::new(),
            state: InstanceState::Running,
            labels: BTreeMap::new(),
        }
    }

    /// Sets the cloud ID.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the instance type.
    pub fn with_type(mut self, instance_type: impl Into<String>) -> Self {
        self.instance_type = instance_type.into();
        self
    }

    /// Sets the zone and region.
    pub fn with_zone(mut self, zone: impl Into<String>, region: impl Into<String>) -> Self {
        self.zone = zone.into();
        self.region = region.into();
        self
    }

    /// Sets the addresses.
    pub fn with_addresses(mut self, addresses: Vec<NodeAddress>) -> Self {
        self.addresses = addresses;
        self
    }

    /// Adds a label.
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Sets the state.
    pub fn with_state(mut self, state: InstanceState) -> Self {
        self.state = state;
        self
    }

    /// The provider ID, `fake://<id>`.
    pub fn provider_id(&self) -> String {
        format!("{PROVIDER_NAME}://{}", self.id)
    }
}

/// The mutable state of the cloud.
#[derive(Default)]
struct State {
    /// Instances by name.
    instances: BTreeMap<String, FakeInstance>,
    /// Instance names by ID.
    ids: HashMap<String, String>,
    /// Names removed while `nodes_are_instances` is on: they stay gone.
    gone: HashSet<String>,
    load_balancers: BTreeMap<String, FakeLoadBalancer>,
    /// Routes by (cluster, route name).
    routes: BTreeMap<(String, String), Route>,
    next_instance_ip: u32,
    next_ingress_ip: u32,
    duplicate_route_creates: u64,
    /// `update_load_balancer` calls that gave a load balancer the host set it had.
    redundant_load_balancer_updates: u64,
    /// The node list last given to a load balancer, shared by those given the same.
    last_lb_nodes: Option<Arc<Vec<String>>>,
    ingress_override: Option<String>,
    metadata_hook: Option<MetadataHook>,
    /// Nodes whose backends fail their load balancers' health checks.
    unhealthy_nodes: HashSet<String>,
    /// Load balancers are not shared by several Services.
    no_sharing: bool,
}

/// Rewrites the metadata the fake cloud answers for a Node; see
/// [`FakeCloud::set_metadata_hook`].
pub type MetadataHook = Arc<
    dyn Fn(
            &k8s_openapi::api::core::v1::Node,
            InstanceMetadata,
        ) -> CloudResult<Option<InstanceMetadata>>
        + Send
        + Sync,
>;

impl std::fmt::Debug for MetadataHookDebug<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(<hook>)"
        } else {
            "None"
        })
    }
}

struct MetadataHookDebug<'a>(&'a Option<MetadataHook>);

/// Which capabilities are offered; tests switch them.
#[derive(Clone, Copy, Debug)]
struct Settings {
    shape: InstancesShape,
    load_balancer: bool,
    routes: bool,
}

/// The in-memory cloud. See the [crate docs](crate).
#[derive(Debug)]
pub struct FakeCloud {
    nodes_are_instances: bool,
    defaults: InstanceDefaults,
    settings: Mutex<Settings>,
    state: Mutex<State>,
    control: Mutex<Control>,
    /// Registered by `initialize`, so only inside a controller manager.
    metrics: OnceLock<metrics::CloudMetrics>,
}

impl Default for FakeCloud {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeCloud {
    /// Publishes the load balancers to the metrics, when registered.
    fn load_balancers_changed(&self, state: &State) {
        if let Some(m) = self.metrics.get() {
            m.load_balancers_changed(&state.load_balancers);
        }
    }

    /// An empty cloud offering every capability, with `Instances` (v2).
    pub fn new() -> Self {
        Self {
            nodes_are_instances: false,
            defaults: InstanceDefaults::default(),
            settings: Mutex::new(Settings {
                shape: InstancesShape::V2,
                load_balancer: true,
                routes: true,
            }),
            state: Mutex::new(State::default()),
            control: Mutex::new(Control::new(DEFAULT_CALL_LOG_CAPACITY)),
            metrics: OnceLock::new(),
        }
    }

    /// A cloud where every Node name is an instance, created on first sight with the
    /// defaults (until [`remove_instance`](Self::remove_instance) removes it).
    pub fn nodes_are_instances() -> Self {
        Self {
            nodes_are_instances: true,
            ..Self::new()
        }
    }

    /// A cloud seeded from a parsed cloud-config.
    pub fn from_config(config: &FakeCloudConfig) -> Self {
        let cloud = Self {
            nodes_are_instances: config.nodes_are_instances,
            defaults: config.defaults.clone(),
            control: Mutex::new(Control::new(config.call_log_capacity)),
            ..Self::new()
        };
        cloud.set_instances_shape(config.instances_shape);
        cloud.set_latency(Duration::from_millis(config.latency_ms));
        for inst in &config.instances {
            cloud.add_instance(FakeInstance {
                name: inst.name.clone(),
                id: inst.id.clone().unwrap_or_else(|| inst.name.clone()),
                instance_type: inst
                    .instance_type
                    .clone()
                    .unwrap_or_else(|| config.defaults.instance_type.clone()),
                zone: inst
                    .zone
                    .clone()
                    .unwrap_or_else(|| config.defaults.zone.clone()),
                region: inst
                    .region
                    .clone()
                    .unwrap_or_else(|| config.defaults.region.clone()),
                addresses: inst
                    .addresses
                    .iter()
                    .flatten()
                    .map(|a| node_address(a.type_.clone(), a.address.clone()))
                    .collect(),
                state: inst.state,
                labels: inst.labels.clone(),
            });
        }
        cloud
    }

    /// The provider factory for a [`ProviderRegistry`]: reads the optional cloud-config.
    pub fn factory(config: Option<&CloudConfig>) -> Result<Arc<dyn CloudProvider>, BoxError> {
        let parsed = match config {
            Some(c) => FakeCloudConfig::parse(c)?,
            None => FakeCloudConfig::default(),
        };
        Ok(Arc::new(Self::from_config(&parsed)))
    }

    /// Registers the fake cloud as [`PROVIDER_NAME`].
    pub fn register(
        registry: &mut ProviderRegistry,
    ) -> Result<(), ccm_core::provider::RegistryError> {
        registry.register(PROVIDER_NAME, Self::factory).map(|_| ())
    }

    // ----- instances -----

    /// Adds an instance, or replaces the one of that name. Without addresses it gets an
    /// InternalIP from 10.0.0.0/8 and a Hostname.
    pub fn add_instance(&self, mut instance: FakeInstance) {
        let mut state = self.state.lock();
        if instance.addresses.is_empty() {
            instance.addresses = state.assign_addresses(&instance.name);
        }
        if let Some(old) = state.instances.remove(&instance.name) {
            state.ids.remove(&old.id);
        }
        state.gone.remove(&instance.name);
        state.ids.insert(instance.id.clone(), instance.name.clone());
        state.instances.insert(instance.name.clone(), instance);
    }

    /// Removes (terminates) the instance named `name`; routes to it become blackholes.
    /// Returns whether it existed.
    pub fn remove_instance(&self, name: &str) -> bool {
        let mut state = self.state.lock();
        let existed = match state.instances.remove(name) {
            Some(inst) => {
                state.ids.remove(&inst.id);
                true
            }
            None => false,
        };
        if self.nodes_are_instances {
            state.gone.insert(name.to_owned());
        }
        for route in state.routes.values_mut() {
            if route.target_node == name {
                route.blackhole = true;
            }
        }
        existed
    }

    /// Stops the instance named `name` (it still exists). Returns whether it exists.
    pub fn power_off(&self, name: &str) -> bool {
        self.set_state(name, InstanceState::Stopped)
    }

    /// Starts the instance named `name` again. Returns whether it exists.
    pub fn power_on(&self, name: &str) -> bool {
        self.set_state(name, InstanceState::Running)
    }

    fn set_state(&self, name: &str, to: InstanceState) -> bool {
        self.update_instance(name, |inst| inst.state = to)
    }

    /// Replaces the addresses of the instance named `name`. Returns whether it exists.
    pub fn set_addresses(&self, name: &str, addresses: Vec<NodeAddress>) -> bool {
        self.update_instance(name, |inst| inst.addresses = addresses)
    }

    /// Changes the instance named `name` with `change`. Returns whether it exists.
    fn update_instance(&self, name: &str, change: impl FnOnce(&mut FakeInstance)) -> bool {
        let mut state = self.state.lock();
        self.instance_mut(&mut state, name).map(change).is_some()
    }

    /// The instance named `name`.
    pub fn instance(&self, name: &str) -> Option<FakeInstance> {
        self.state.lock().instances.get(name).cloned()
    }

    /// Every instance, by name.
    pub fn instances(&self) -> Vec<FakeInstance> {
        self.state.lock().instances.values().cloned().collect()
    }

    /// The instance named `name`, created first if every Node name is an instance.
    fn instance_mut<'a>(&self, state: &'a mut State, name: &str) -> Option<&'a mut FakeInstance> {
        self.instance_mut_seen(state, name, None)
    }

    /// [`instance_mut`](Self::instance_mut), where an instance created for a Node takes the
    /// addresses the Node was seen with (`seen`, from its kubelet's `--node-ip`), as a real
    /// cloud reports the address of the machine a kubelet runs on; other instances get the
    /// next free address of 10.0.0.0/8.
    fn instance_mut_seen<'a>(
        &self,
        state: &'a mut State,
        name: &str,
        seen: Option<Vec<NodeAddress>>,
    ) -> Option<&'a mut FakeInstance> {
        if self.nodes_are_instances
            && !name.is_empty()
            && !state.instances.contains_key(name)
            && !state.gone.contains(name)
        {
            let addresses = match seen {
                Some(addresses) => addresses,
                None => state.assign_addresses(name),
            };
            let inst = FakeInstance {
                instance_type: self.defaults.instance_type.clone(),
                zone: self.defaults.zone.clone(),
                region: self.defaults.region.clone(),
                addresses,
                ..FakeInstance::new(name)
            };
            state.ids.insert(inst.id.clone(), name.to_owned());
            state.instances.insert(name.to_owned(), inst);
        }
        state.instances.get_mut(name)
    }

    /// The instance with cloud ID `id`; in nodes-are-instances mode IDs are names.
    fn instance_by_id(&self, state: &mut State, id: &str) -> Option<FakeInstance> {
        self.instance_by_id_seen(state, id, None)
    }

    /// [`instance_by_id`](Self::instance_by_id), creating it with the addresses a Node was
    /// seen with (see [`instance_mut_seen`](Self::instance_mut_seen)).
    fn instance_by_id_seen(
        &self,
        state: &mut State,
        id: &str,
        seen: Option<Vec<NodeAddress>>,
    ) -> Option<FakeInstance> {
        match state.ids.get(id).cloned() {
            Some(name) => state.instances.get(&name).cloned(),
            None if self.nodes_are_instances => self.instance_mut_seen(state, id, seen).cloned(),
            None => None,
        }
    }

    // ----- load balancers and routes -----

    /// Every load balancer.
    pub fn load_balancers(&self) -> Vec<FakeLoadBalancer> {
        self.state.lock().load_balancers.values().cloned().collect()
    }

    /// The load balancer named `name`.
    pub fn load_balancer(&self, name: &str) -> Option<FakeLoadBalancer> {
        self.state.lock().load_balancers.get(name).cloned()
    }

    /// Makes every ensured load balancer report this ingress IP (`None` to stop), to test
    /// how a controller handles a provider that answers nonsense.
    pub fn set_ingress_override(&self, ip: Option<String>) {
        self.state.lock().ingress_override = ip;
    }

    /// Makes the Node `name` fail (`healthy` false) or pass its load balancers' health
    /// checks: a load balancer none of whose Nodes passes is degraded
    /// ([`LoadBalancer::load_balancer_health`]).
    pub fn set_node_healthy(&self, name: &str, healthy: bool) {
        let mut state = self.state.lock();
        if healthy {
            state.unhealthy_nodes.remove(name);
        } else {
            state.unhealthy_nodes.insert(name.to_owned());
        }
    }

    /// Whether the cloud serves several Services from one load balancer
    /// ([`LoadBalancer::load_balancer_sharing`]); it does unless told otherwise. Members of
    /// a group must agree on the `fake.example.com/` annotations.
    pub fn set_sharing(&self, sharing: bool) {
        self.state.lock().no_sharing = !sharing;
    }

    /// Passes every answer of `Instances::instance_metadata` through `hook`, which may change
    /// it, drop it (`Ok(None)`) or fail; `None` removes the hook. For testing how a controller
    /// takes answers a real cloud might give: an empty provider ID, a bad address, no metadata.
    pub fn set_metadata_hook(&self, hook: Option<MetadataHook>) {
        self.state.lock().metadata_hook = hook;
    }

    pub(crate) fn metadata_hook(&self) -> Option<MetadataHook> {
        self.state.lock().metadata_hook.clone()
    }

    /// The routes of `cluster_name`, by name.
    pub fn routes(&self, cluster_name: &str) -> Vec<Route> {
        self.state
            .lock()
            .routes
            .iter()
            .filter(|((c, _), _)| c == cluster_name)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Puts a route into the table directly, as another tool would (it needs a name).
    pub fn insert_route(&self, cluster_name: &str, route: Route) {
        self.state
            .lock()
            .routes
            .insert((cluster_name.to_owned(), route.name.clone()), route);
    }

    /// How many `create_route` calls asked for a route the table already had.
    pub fn duplicate_route_creates(&self) -> u64 {
        self.state.lock().duplicate_route_creates
    }

    /// How many `update_load_balancer` calls gave a load balancer the host set it already
    /// had: the same map of Node name to provider ID (`spec.providerID`, empty when unset),
    /// the comparison both our CCM and Go's decide an update on, so the call was wasted.
    pub fn redundant_load_balancer_updates(&self) -> u64 {
        self.state.lock().redundant_load_balancer_updates
    }

    // ----- test controls -----

    /// Every call still in the log, oldest first.
    pub fn calls(&self) -> Vec<Call> {
        self.control.lock().calls()
    }

    /// How many calls of `method` were made since the last [`clear_calls`](Self::clear_calls).
    pub fn call_count(&self, method: Method) -> u64 {
        self.control.lock().count(method)
    }

    /// Call counts by method.
    pub fn call_counts(&self) -> BTreeMap<Method, u64> {
        self.control.lock().counts()
    }

    /// Clears the call log and counters.
    pub fn clear_calls(&self) {
        self.control.lock().clear_calls();
    }

    /// Fails every call of `method` with `fault` until [`clear_faults`](Self::clear_faults).
    pub fn inject(&self, method: Method, fault: Fault) {
        self.control.lock().inject(method, fault, None);
    }

    /// Fails the next `times` calls of `method` with `fault`.
    pub fn inject_times(&self, method: Method, fault: Fault, times: u64) {
        self.control.lock().inject(method, fault, Some(times));
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.control.lock().clear_faults();
    }

    /// Adds `latency` to every call.
    pub fn set_latency(&self, latency: Duration) {
        self.control.lock().latency = latency;
    }

    /// Sets which instance interface the cloud offers.
    pub fn set_instances_shape(&self, shape: InstancesShape) {
        self.settings.lock().shape = shape;
    }

    /// Offers or withdraws the load balancer capability.
    pub fn set_load_balancer_enabled(&self, enabled: bool) {
        self.settings.lock().load_balancer = enabled;
    }

    /// Offers or withdraws the routes capability.
    pub fn set_routes_enabled(&self, enabled: bool) {
        self.settings.lock().routes = enabled;
    }

    /// Records a call, waits the injected latency, and raises an injected fault.
    async fn call(&self, method: Method, target: &str) -> CloudResult<()> {
        let (fault, latency) = {
            let mut control = self.control.lock();
            (control.record(method, target), control.latency)
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        fault.map_or(Ok(()), Err)
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("instances", &self.instances.len())
            .field("load_balancers", &self.load_balancers.len())
            .field("routes", &self.routes.len())
            .field("metadata_hook", &MetadataHookDebug(&self.metadata_hook))
            .finish_non_exhaustive()
    }
}

impl State {
    fn assign_addresses(&mut self, name: &str) -> Vec<NodeAddress> {
        self.next_instance_ip += 1;
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 0, 0, 0)) + self.next_instance_ip);
        vec![
            node_address("InternalIP", ip.to_string()),
            node_address("Hostname", name),
        ]
    }
}

#[async_trait]
#[async_trait]
impl CloudProvider for FakeCloud {
    fn provider_name(&self) -> &str {
        PROVIDER_NAME
    }

    fn has_cluster_id(&self) -> bool {
        true
    }

    async fn initialize(&self, ctx: InitContext) -> CloudResult<()> {
        // Every leadership term initialises again with the same registry: register once.
        if self.metrics.get().is_none() {
            let metrics = metrics::CloudMetrics::register(&ctx.metrics);
            metrics.load_balancers_changed(&self.state.lock().load_balancers);
            let _ = self.metrics.set(metrics);
        }
        Ok(())
    }

    fn instances(&self) -> Option<&dyn Instances> {
        (self.settings.lock().shape == InstancesShape::V2).then_some(self as &dyn Instances)
    }

    fn legacy_instances(&self) -> Option<&dyn LegacyInstances> {
        (self.settings.lock().shape == InstancesShape::Legacy)
            .then_some(self as &dyn LegacyInstances)
    }

    fn zones(&self) -> Option<&dyn Zones> {
        Some(self)
    }

    fn load_balancer(&self) -> Option<&dyn LoadBalancer> {
        self.settings
            .lock()
            .load_balancer
            .then_some(self as &dyn LoadBalancer)
    }

    fn routes(&self) -> Option<&dyn Routes> {
        self.settings.lock().routes.then_some(self as &dyn Routes)
    }

    fn clusters(&self) -> Option<&dyn Clusters> {
        Some(self)
    }
}

#[async_trait]
impl Clusters for FakeCloud {
    async fn list_clusters(&self) -> CloudResult<Vec<String>> {
        self.call(Method::ListClusters, "").await?;
        let state = self.state.lock();
        let mut clusters: Vec<String> = state
            .load_balancers
            .values()
            .map(|lb| lb.cluster_name.clone())
            .chain(state.routes.keys().map(|(c, _)| c.clone()))
            .collect();
        clusters.sort();
        clusters.dedup();
        Ok(clusters)
    }

    async fn master(&self, cluster_name: &str) -> CloudResult<String> {
        self.call(Method::Master, cluster_name).await?;
        Err(CloudError::NotImplemented)
    }
}
