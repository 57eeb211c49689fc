//! `capabilities.*`: how the provider says what it does not do.

use ccm_core::provider::{CloudError, CloudResult};
use k8s_openapi::api::core::v1::Node;

use super::notes;
use crate::context::{Checked, Ctx, Stop, describe_err, says_not_implemented};

/// The answers to the harmless questions asked of one capability.
struct Probe {
    capability: &'static str,
    answers: Vec<(String, CloudResult<()>)>,
}

impl Probe {
    fn new(capability: &'static str) -> Self {
        Self {
            capability,
            answers: Vec::new(),
        }
    }

    async fn ask<T>(
        &mut self,
        ctx: &Ctx,
        call: String,
        answer: impl std::future::Future<Output = CloudResult<T>>,
    ) {
        let answer = ctx.raw(call.clone(), answer).await.map(|_| ());
        self.answers.push((call, answer));
    }
}

/// Asks every capability the provider offers a question about something that does not exist,
/// and looks at how "not implemented" comes back.
pub(super) async fn not_implemented_reported_as_such(ctx: &Ctx) -> Checked {
    let provider = ctx.provider();
    let cluster = ctx.cluster();
    let absent = format!("{}-absent", ctx.shared.unique_name());
    let mut absent_node = Node::default();
    absent_node.metadata.name = Some(absent.clone());
    let absent_id = format!("{}://{absent}", provider.provider_name());
    let mut probes = Vec::new();

    ctx.set_step("instances()");
    if let Some(i) = provider.instances() {
        let mut p = Probe::new("instances");
        let n = &absent_node;
        p.ask(
            ctx,
            format!("Instances::instance_exists({absent:?})"),
            i.instance_exists(n),
        )
        .await;
        p.ask(
            ctx,
            format!("Instances::instance_shutdown({absent:?})"),
            i.instance_shutdown(n),
        )
        .await;
        p.ask(
            ctx,
            format!("Instances::instance_metadata({absent:?})"),
            i.instance_metadata(n),
        )
        .await;
        probes.push(p);
    }
    ctx.set_step("legacy_instances()");
    if let Some(l) = provider.legacy_instances() {
        let mut p = Probe::new("legacy_instances");
        let (name, id) = (absent.as_str(), absent_id.as_str());
        p.ask(
            ctx,
            format!("LegacyInstances::instance_id({name:?})"),
            l.instance_id(name),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::node_addresses({name:?})"),
            l.node_addresses(name),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::node_addresses_by_provider_id({id:?})"),
            l.node_addresses_by_provider_id(id),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::instance_type({name:?})"),
            l.instance_type(name),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::instance_type_by_provider_id({id:?})"),
            l.instance_type_by_provider_id(id),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::instance_exists_by_provider_id({id:?})"),
            l.instance_exists_by_provider_id(id),
        )
        .await;
        p.ask(
            ctx,
            format!("LegacyInstances::instance_shutdown_by_provider_id({id:?})"),
            l.instance_shutdown_by_provider_id(id),
        )
        .await;
        probes.push(p);
    }
    ctx.set_step("zones()");
    if let Some(z) = provider.zones() {
        // Not `get_zone()`: off the cloud it may wait for a metadata server that is not there.
        let mut p = Probe::new("zones");
        p.ask(
            ctx,
            format!("Zones::get_zone_by_provider_id({absent_id:?})"),
            z.get_zone_by_provider_id(&absent_id),
        )
        .await;
        p.ask(
            ctx,
            format!("Zones::get_zone_by_node_name({absent:?})"),
            z.get_zone_by_node_name(&absent),
        )
        .await;
        probes.push(p);
    }
    ctx.set_step("load_balancer()");
    if let Some(lb) = provider.load_balancer() {
        let mut p = Probe::new("load_balancer");
        let service = ctx.service();
        p.ask(
            ctx,
            "LoadBalancer::get_load_balancer(a Service with no load balancer)".into(),
            lb.get_load_balancer(cluster, &service),
        )
        .await;
        probes.push(p);
    }
    ctx.set_step("routes()");
    if let Some(r) = provider.routes() {
        let mut p = Probe::new("routes");
        p.ask(
            ctx,
            format!("Routes::list_routes({cluster:?})"),
            r.list_routes(cluster),
        )
        .await;
        probes.push(p);
    }
    ctx.set_step("clusters()");
    if let Some(c) = provider.clusters() {
        let mut p = Probe::new("clusters");
        p.ask(ctx, "Clusters::list_clusters()".into(), c.list_clusters())
            .await;
        p.ask(
            ctx,
            format!("Clusters::master({cluster:?})"),
            c.master(cluster),
        )
        .await;
        probes.push(p);
    }

    let mut problems = Vec::new();
    let mut not_implemented = Vec::new();
    for probe in &probes {
        for (call, answer) in &probe.answers {
            match answer {
                Err(e) if says_not_implemented(e) => problems.push(format!(
                    "{call} returned a Provider error that says it is not implemented ({}); \
                     return CloudError::NotImplemented, the kind the controllers branch on",
                    describe_err(e)
                )),
                Err(CloudError::NotImplemented) => not_implemented.push(call.clone()),
                _ => {}
            }
        }
        if probe
            .answers
            .iter()
            .all(|(_, a)| matches!(a, Err(CloudError::NotImplemented)))
        {
            problems.push(format!(
                "{}() returns Some, but every call returned NotImplemented; return None from \
                 {}() when the capability is unsupported, so its controller does not start",
                probe.capability, probe.capability
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Stop::Fail(problems.join("; ")));
    }
    let supported: Vec<&str> = probes.iter().map(|p| p.capability).collect();
    let mut note = Vec::new();
    if supported.is_empty() {
        note.push("the provider supports no capability: every accessor returns None".into());
    }
    if !not_implemented.is_empty() {
        note.push(format!(
            "reported as CloudError::NotImplemented: {}",
            not_implemented.join(", ")
        ));
    }
    Ok(notes(note))
}
