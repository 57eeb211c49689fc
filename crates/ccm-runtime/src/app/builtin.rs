//! The built-in controllers as [`Controller`] registrations: the four of Go's
//! `DefaultInitFuncConstructors` (names and aliases from Go's `names/controller_names.go`)
//! and the node-ipam controller Kubernetes' own `cloud-controller-manager` binary adds, the
//! capability each needs, and how each is built from the flags.

use ccm_provider::BoxError;

use super::controller::{Capability, Controller, ControllerContext, ControllerFuture};
use super::options::{ContentType, FlagError, Options};
use crate::controllers::node::{
    CloudNodeController, CloudNodeControllerConfig, uninitialized_nodes,
};
use crate::controllers::node_ipam::{MaskSizeFlags, NodeIpamConfig, NodeIpamController};
use crate::controllers::node_lifecycle::{NodeLifecycleController, NodeLifecycleControllerConfig};
use crate::controllers::route::{RouteConfigError, RouteController, RouteControllerConfig};
use crate::controllers::service::{
    ServiceController, ServiceControllerConfig, pending_load_balancers,
};
use crate::metrics::{NODES_UNINITIALIZED, SERVICE_LOAD_BALANCERS_PENDING};

/// The cloud-node controller's name.
pub const CLOUD_NODE_CONTROLLER: &str = "cloud-node-controller";
/// The cloud-node-lifecycle controller's name.
pub const CLOUD_NODE_LIFECYCLE_CONTROLLER: &str = "cloud-node-lifecycle-controller";
/// The service controller's name.
pub const SERVICE_LB_CONTROLLER: &str = "service-lb-controller";
/// The route controller's name.
pub const NODE_ROUTE_CONTROLLER: &str = "node-route-controller";
/// The node-ipam controller's name (Kubernetes' `kcmnames.NodeIpamController`).
pub const NODE_IPAM_CONTROLLER: &str = "node-ipam-controller";
/// The one `--cidr-allocator-type` supported.
pub const RANGE_ALLOCATOR: &str = "RangeAllocator";

/// The ServiceAccount of the cloud-node and cloud-node-lifecycle controllers under
/// `--use-service-account-credentials` (Go's `ClientName`: the two share it).
pub const NODE_CONTROLLER_ACCOUNT: &str = "node-controller";
/// The service controller's ServiceAccount under `--use-service-account-credentials`.
pub const SERVICE_CONTROLLER_ACCOUNT: &str = "service-controller";
/// The route controller's ServiceAccount under `--use-service-account-credentials`.
pub const ROUTE_CONTROLLER_ACCOUNT: &str = "route-controller";

/// The built-in controllers, in Go's order.
pub(crate) fn builtin_controllers() -> Vec<Controller> {
    vec![
        Controller::new(CLOUD_NODE_CONTROLLER, start_cloud_node)
            .with_alias("cloud-node")
            .with_service_account(NODE_CONTROLLER_ACCOUNT)
            .requires(Capability::Instances),
        Controller::new(CLOUD_NODE_LIFECYCLE_CONTROLLER, start_node_lifecycle)
            .with_alias("cloud-node-lifecycle")
            .with_service_account(NODE_CONTROLLER_ACCOUNT)
            .requires(Capability::Instances),
        Controller::new(SERVICE_LB_CONTROLLER, start_service)
            .with_alias("service")
            .with_service_account(SERVICE_CONTROLLER_ACCOUNT)
            .requires(Capability::LoadBalancer),
        Controller::new(NODE_ROUTE_CONTROLLER, start_route)
            .with_alias("route")
            .with_service_account(ROUTE_CONTROLLER_ACCOUNT)
            .requires(Capability::Routes)
            .only_if("--configure-cloud-routes", |o| o.configure_cloud_routes)
            .check_options(|o| route_config(o).map(drop)),
        // Off under `*`, unlike in Kubernetes' binary: CCMs built on `k8s.io/cloud-provider`
        // have no node-ipam controller and ignore `--allocate-node-cidrs`, so their manifests
        // must not start a second allocator beside kube-controller-manager's.
        Controller::new(NODE_IPAM_CONTROLLER, start_node_ipam)
            .with_alias("nodeipam")
            .with_service_account(NODE_CONTROLLER_ACCOUNT)
            .disabled_by_default()
            .only_if("--allocate-node-cidrs", |o| o.allocate_node_cidrs)
            .check_options(|o| node_ipam_config(o).map(drop)),
    ]
}

/// A count as a gauge's value.
fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The error when a capability checked by the registration is gone at start.
fn missing(capability: Capability) -> BoxError {
    format!("the provider no longer offers {capability}").into()
}

fn start_cloud_node(ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
    let o = &ctx.options;
    let config = CloudNodeControllerConfig::default()
        .with_workers(o.concurrent_node_syncs.unsigned_abs() as usize)
        .with_status_update_workers(o.concurrent_node_status_updates.unsigned_abs() as usize)
        .with_status_update_frequency(o.node_status_update_frequency)
        .with_metrics(ctx.manager_metrics.controllers().clone())
        .with_shadow(ctx.shadow(CLOUD_NODE_CONTROLLER))
        .with_node_ownership(ctx.node_ownership.clone())
        .with_protobuf_writes(o.kube_api_content_type == ContentType::Protobuf);
    let c = CloudNodeController::new(ctx.client.clone(), &ctx.provider, ctx.nodes.clone(), config)
        .ok_or_else(|| missing(Capability::Instances))?;
    ctx.manager_metrics
        .register_queue(c.queue().name(), c.queue().shared_metrics());
    let (nodes, ownership) = (ctx.nodes.clone(), ctx.node_ownership.clone());
    ctx.manager_metrics
        .register_cache_gauge(NODES_UNINITIALIZED, move || {
            gauge_value(uninitialized_nodes(&nodes, &ownership))
        });
    Ok(Box::pin(c.run(ctx.cancel.clone())))
}

fn start_node_lifecycle(ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
    let config = NodeLifecycleControllerConfig::default()
        .with_monitor_period(ctx.options.node_monitor_period)
        .with_deletion_guard(ctx.options.node_deletion_guard)
        .with_metrics(
            ctx.manager_metrics
                .controllers()
                .node_deletion_guard
                .clone(),
        )
        .with_shadow(ctx.shadow(CLOUD_NODE_LIFECYCLE_CONTROLLER))
        .with_node_ownership(ctx.node_ownership.clone());
    let c =
        NodeLifecycleController::new(ctx.client.clone(), &ctx.provider, ctx.nodes.clone(), config)
            .ok_or_else(|| missing(Capability::Instances))?;
    Ok(Box::pin(c.run(ctx.cancel.clone())))
}

fn start_service(ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
    let o = &ctx.options;
    let classes = o.load_balancer_classes()?;
    let config = ServiceControllerConfig::default()
        .with_load_balancer_classes(classes.clone())
        .with_conditions(o.service_conditions)
        .with_health_period(o.load_balancer_health_period)
        .with_metallb_sharing_key(o.metallb_allow_shared_ip)
        .with_workers(o.concurrent_service_syncs.unsigned_abs() as usize)
        .with_cluster_name(o.cluster_name.clone())
        .with_metrics(ctx.manager_metrics.controllers().clone())
        .with_shadow(ctx.shadow(SERVICE_LB_CONTROLLER))
        .with_node_ownership(ctx.node_ownership.clone());
    let c = ServiceController::new(
        ctx.client.clone(),
        &ctx.provider,
        ctx.services.clone(),
        ctx.nodes.clone(),
        config,
    )
    .ok_or_else(|| missing(Capability::LoadBalancer))?;
    ctx.manager_metrics
        .register_queue(c.queue().name(), c.queue().shared_metrics());
    let services = ctx.services.clone();
    ctx.manager_metrics
        .register_cache_gauge(SERVICE_LOAD_BALANCERS_PENDING, move || {
            gauge_value(pending_load_balancers(&services, &classes))
        });
    Ok(Box::pin(c.run(ctx.cancel.clone())))
}

fn start_route(ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
    let config = route_config(&ctx.options)?
        .with_metrics(ctx.manager_metrics.controllers().clone())
        .with_shadow(ctx.shadow(NODE_ROUTE_CONTROLLER))
        .with_node_ownership(ctx.node_ownership.clone());
    let c = RouteController::new(ctx.client.clone(), &ctx.provider, ctx.nodes.clone(), config)
        .ok_or_else(|| missing(Capability::Routes))?;
    Ok(Box::pin(c.run(ctx.cancel.clone())))
}

/// The node-ipam controller gives pod CIDRs to every Node, this cloud's or not
/// (`--node-provider-id-prefix` and `--node-selector` do not apply): the range allocator
/// calls no cloud, a Node of another cloud or bare metal needs a pod CIDR as much, and an
/// allocator that did not see every Node's CIDRs could give one twice.
fn start_node_ipam(ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
    let config = node_ipam_config(&ctx.options)?.with_shadow(ctx.shadow(NODE_IPAM_CONTROLLER));
    let metrics = ctx.manager_metrics.controllers().node_ipam.clone();
    let c = NodeIpamController::new(
        ctx.client.clone(),
        ctx.nodes.clone(),
        &config,
        Some(metrics),
    )?;
    ctx.manager_metrics
        .register_queue(c.queue().name(), c.queue().shared_metrics());
    Ok(Box::pin(c.run(ctx.cancel.clone())))
}

/// The node-ipam controller's settings from the flags; errors name the flag.
fn node_ipam_config(o: &Options) -> Result<NodeIpamConfig, FlagError> {
    if o.cidr_allocator_type != RANGE_ALLOCATOR {
        return Err(FlagError {
            flag: "--cidr-allocator-type",
            message: format!(
                "{:?}: only {RANGE_ALLOCATOR} is supported (CloudAllocator needs a cloud's own \
                 allocator)",
                o.cidr_allocator_type
            ),
        });
    }
    let masks = MaskSizeFlags {
        node_cidr_mask_size: o.node_cidr_mask_size,
        ipv4: o.node_cidr_mask_size_ipv4,
        ipv6: o.node_cidr_mask_size_ipv6,
    };
    NodeIpamConfig::new(&o.cluster_cidr, &o.service_cluster_ip_range, masks)
}

/// The route controller's settings from the flags; errors name the flag.
fn route_config(o: &Options) -> Result<RouteControllerConfig, FlagError> {
    let to_flag = |e: RouteConfigError| FlagError {
        flag: e.flag(),
        message: format!("{:?}: {}", e.value(), e.reason()),
    };
    RouteControllerConfig::new(o.cluster_name.clone(), &o.cluster_cidr)
        .and_then(|c| c.with_reconciliation_period(o.route_reconciliation_period))
        .map_err(to_flag)
}
