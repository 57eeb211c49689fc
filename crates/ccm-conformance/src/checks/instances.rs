//! `instances.*` and `legacy_instances.*`: what the node controllers ask about instances.
//!
//! The `instances.*` checks ask through [`resolve_instances`](ccm_core::provider::resolve_instances),
//! exactly as the controllers do, so a legacy provider is checked through
//! `LegacyInstancesAdapter`; `legacy_instances.*` asks the legacy trait directly.

use std::net::IpAddr;

use ccm_core::provider::{CloudError, InstanceMetadata, Instances, ProviderId};
use k8s_openapi::api::core::v1::Node;

use super::notes;
use crate::context::{
    Checked, Ctx, Stop, describe_err, describe_node, fail, node_name, spec_provider_id, unexpected,
    valid_dns_name, with_provider_id,
};

/// The name of an `Instances` call, with the adapter when it goes through one.
fn op(ctx: &Ctx, call: &str) -> String {
    if ctx.is_legacy() {
        format!("{call} (through LegacyInstancesAdapter)")
    } else {
        call.to_owned()
    }
}

pub(super) async fn exists_true_for_running(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let call = op(ctx, "instance_exists");
    for (form, n) in ctx.node_forms(&*instances, &node).await {
        let step = format!("{call} for {} ({form})", describe_node(&n));
        if !ctx
            .call(step.clone(), instances.instance_exists(&n))
            .await?
        {
            fail!(
                "{step} returned Ok(false) for a running instance: the cloud-node-lifecycle \
                 controller would delete the Node"
            );
        }
    }
    Ok(None)
}

pub(super) async fn exists_true_for_stopped(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let forms = ctx.node_forms(&*instances, &node).await;
    ctx.stop_instance(&node).await?;
    let call = op(ctx, "instance_exists");
    for (form, n) in forms {
        let step = format!(
            "{call} for {} ({form}), instance stopped",
            describe_node(&n)
        );
        if !ctx
            .call(step.clone(), instances.instance_exists(&n))
            .await?
        {
            fail!(
                "{step} returned Ok(false): a stopped instance exists, and Ok(false) makes the \
                 cloud-node-lifecycle controller delete the Node of an instance that only needs \
                 starting"
            );
        }
    }
    Ok(None)
}

pub(super) async fn exists_false_only_when_gone(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let forms = ctx.node_forms(&*instances, &node).await;
    ctx.delete_instance(&node).await?;
    let call = op(ctx, "instance_exists");
    for (form, n) in forms {
        let step = format!(
            "{call} for {} ({form}), instance deleted",
            describe_node(&n)
        );
        let answer = ctx
            .eventually(
                step.clone(),
                || instances.instance_exists(&n),
                |a| matches!(a, Ok(false)),
            )
            .await;
        match answer {
            Ok(false) => {}
            Ok(true) => fail!(
                "{step} still returned Ok(true){}: the Node of a gone instance would never be \
                 deleted",
                ctx.settled()
            ),
            Err(CloudError::NotImplemented) => return Err(Stop::NotImplemented(step)),
            Err(e) => fail!(
                "{step} returned {}{} instead of Ok(false): on an error the \
                 cloud-node-lifecycle controller skips the Node, so it would never be deleted",
                describe_err(&e),
                ctx.settled()
            ),
        }
    }
    Ok(None)
}

pub(super) async fn shutdown_true_when_stopped(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let forms = ctx.node_forms(&*instances, &node).await;
    if ctx.is_legacy()
        && let Some(legacy) = ctx.provider().legacy_instances()
        && let Some(id) = forms.iter().find_map(|(_, n)| spec_provider_id(n))
    {
        // The adapter turns NotImplemented into "not shut down"; report it as what it is.
        let step = format!("LegacyInstances::instance_shutdown_by_provider_id({id:?})");
        if let Err(CloudError::NotImplemented) = ctx
            .raw(step.clone(), legacy.instance_shutdown_by_provider_id(id))
            .await
        {
            return Err(Stop::NotImplemented(format!(
                "{step} (LegacyInstancesAdapter then answers \"not shut down\", so the shutdown \
                 taint is never set)"
            )));
        }
    }
    let call = op(ctx, "instance_shutdown");
    for (form, n) in &forms {
        let step = format!("{call} for {} ({form}), instance running", describe_node(n));
        if ctx
            .call(step.clone(), instances.instance_shutdown(n))
            .await?
        {
            fail!("{step} returned Ok(true): the running Node would get the shutdown taint");
        }
    }
    ctx.stop_instance(&node).await?;
    for (form, n) in &forms {
        let step = format!("{call} for {} ({form}), instance stopped", describe_node(n));
        let answer = ctx
            .eventually(
                step.clone(),
                || instances.instance_shutdown(n),
                |a| matches!(a, Ok(true)),
            )
            .await;
        match answer {
            Ok(true) => {}
            Ok(false) => fail!(
                "{step} returned Ok(false){}: the stopped Node would not get the \
                 node.cloudprovider.kubernetes.io/shutdown taint",
                ctx.settled()
            ),
            Err(e) => return Err(unexpected(&step, &e)),
        }
    }
    let mut note = Vec::new();
    match ctx.start_instance(&node).await? {
        Ok(()) => {
            for (form, n) in &forms {
                let step = format!("{call} for {} ({form}), instance started", describe_node(n));
                let answer = ctx
                    .eventually(
                        step.clone(),
                        || instances.instance_shutdown(n),
                        |a| matches!(a, Ok(false)),
                    )
                    .await;
                match answer {
                    Ok(false) => {}
                    Ok(true) => fail!(
                        "{step} still returned Ok(true){}: the shutdown taint would stay on a \
                         running Node",
                        ctx.settled()
                    ),
                    Err(e) => return Err(unexpected(&step, &e)),
                }
            }
        }
        Err(why) => note.push(format!(
            "not checked that a started instance is no longer shut down: {why}"
        )),
    }
    Ok(notes(note))
}

/// `instance_metadata` for `node`, which must answer.
async fn metadata(
    ctx: &Ctx,
    instances: &dyn Instances,
    node: &Node,
) -> Result<(String, InstanceMetadata), Stop> {
    let step = format!(
        "{} for {}",
        op(ctx, "instance_metadata"),
        describe_node(node)
    );
    match ctx
        .call(step.clone(), instances.instance_metadata(node))
        .await?
    {
        Some(meta) => Ok((step, meta)),
        None => Err(Stop::Fail(format!(
            "{step} returned Ok(None) for a running instance: the cloud-node controller would \
             leave the Node uninitialized (tainted) for good"
        ))),
    }
}

pub(super) async fn metadata_provider_id_matches_scheme(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let (step, meta) = metadata(ctx, &*instances, &node).await?;
    let provider = ctx.provider().provider_name().to_owned();
    let spec = spec_provider_id(&node);
    if meta.provider_id.is_empty() {
        return match spec {
            None => fail!(
                "{step} returned an empty provider_id, and the Node has no spec.providerID: the \
                 cloud-node controller cannot initialize the Node"
            ),
            Some(id) => Ok(Some(format!(
                "provider_id was empty; the controller keeps the Node's spec.providerID {id:?}"
            ))),
        };
    }
    if let Err(e) = ProviderId::parse_for(&provider, &meta.provider_id) {
        fail!(
            "{step} returned provider_id {:?}, not of the form {provider}://<id>: {e}",
            meta.provider_id
        );
    }
    if let Some(id) = spec
        && id != meta.provider_id
    {
        fail!(
            "{step} returned provider_id {:?}, not the Node's own {id:?}: the provider should \
             look the instance up by spec.providerID first",
            meta.provider_id
        );
    }
    Ok(None)
}

const ADDRESS_TYPES: [&str; 5] = [
    "InternalIP",
    "ExternalIP",
    "Hostname",
    "InternalDNS",
    "ExternalDNS",
];

pub(super) async fn metadata_addresses_valid(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let (step, meta) = metadata(ctx, &*instances, &node).await?;
    if meta.node_addresses.is_empty() {
        return Ok(Some(
            "no addresses returned, so nothing to check; the Node keeps those its kubelet reported"
                .into(),
        ));
    }
    let mut problems = Vec::new();
    for a in &meta.node_addresses {
        let (kind, value) = (a.type_.as_str(), a.address.as_str());
        match kind {
            "InternalIP" | "ExternalIP" => {
                if value.parse::<IpAddr>().is_err() {
                    problems.push(format!("{kind} address {value:?} is not an IP address"));
                }
            }
            _ if ADDRESS_TYPES.contains(&kind) => {
                if !valid_dns_name(value) {
                    problems.push(format!("{kind} address {value:?} is not a DNS name"));
                }
            }
            _ => problems.push(format!(
                "address {value:?} has type {kind:?}, not one of {}",
                ADDRESS_TYPES.join(", ")
            )),
        }
    }
    if !problems.is_empty() {
        fail!("{step} returned invalid addresses: {}", problems.join("; "));
    }
    Ok(None)
}

pub(super) async fn metadata_by_provider_id_when_name_differs(ctx: &Ctx) -> Checked {
    let instances = ctx.instances()?;
    let node = ctx.create_instance().await?;
    let Some(id) = ctx.known_provider_id(&*instances, &node).await else {
        return Err(Stop::Skip(format!(
            "no provider ID is known for {}: the TestCloud's Node has none and \
             instance_metadata gave none",
            describe_node(&node)
        )));
    };
    let by_own_name = with_provider_id(&node, &id);
    let (_, expected) = metadata(ctx, &*instances, &by_own_name).await?;
    let mut renamed = by_own_name.clone();
    renamed.metadata.name = Some(format!("{}-renamed", node_name(&node)));
    let step = format!(
        "{} for {}, whose instance is named {:?}",
        op(ctx, "instance_metadata"),
        describe_node(&renamed),
        node_name(&node)
    );
    let meta = match ctx
        .raw(step.clone(), instances.instance_metadata(&renamed))
        .await
    {
        Ok(Some(meta)) => meta,
        Ok(None) => fail!(
            "{step} returned Ok(None): with spec.providerID set, the provider should find the \
             instance by it, whatever the Node is named"
        ),
        Err(CloudError::NotImplemented) => return Err(Stop::NotImplemented(step)),
        Err(e) => fail!(
            "{step} returned {}: with spec.providerID set, the provider should find the \
             instance by it, whatever the Node is named",
            describe_err(&e)
        ),
    };
    if !meta.provider_id.is_empty() && meta.provider_id != id {
        fail!(
            "{step} answered with provider_id {:?}, not {id:?}: it looked the instance up by \
             name",
            meta.provider_id
        );
    }
    let shape = |m: &InstanceMetadata| {
        format!(
            "type {:?}, zone {:?}, region {:?}",
            m.instance_type, m.zone, m.region
        )
    };
    if shape(&meta) != shape(&expected) {
        fail!(
            "{step} answered {}, but for the Node named after the instance {}: it answered for \
             another instance",
            shape(&meta),
            shape(&expected)
        );
    }
    Ok(None)
}

pub(super) async fn legacy_instance_id_not_found_only_when_gone(ctx: &Ctx) -> Checked {
    ctx.set_step("legacy_instances()");
    let Some(legacy) = ctx.provider().legacy_instances() else {
        return Err(Stop::Skip(
            "the provider has no LegacyInstances (legacy_instances() returns None)".into(),
        ));
    };
    let node = ctx.create_instance().await?;
    let name = node_name(&node).to_owned();
    let id_step = format!("LegacyInstances::instance_id({name:?})");
    let id = ctx
        .call(
            format!("{id_step}, instance running"),
            legacy.instance_id(&name),
        )
        .await?;
    if id.is_empty() {
        fail!("{id_step} returned an empty ID for a running instance");
    }
    let provider_id = format!("{}://{id}", ctx.provider().provider_name());
    let exists_step = format!("LegacyInstances::instance_exists_by_provider_id({provider_id:?})");
    if !ctx
        .call(
            format!("{exists_step}, instance running"),
            legacy.instance_exists_by_provider_id(&provider_id),
        )
        .await?
    {
        fail!("{exists_step} returned Ok(false) for a running instance");
    }

    let mut note = Vec::new();
    match ctx.stop_instance(&node).await {
        Ok(()) => {
            let step = format!("{id_step}, instance stopped");
            match ctx.raw(step.clone(), legacy.instance_id(&name)).await {
                Ok(same) if same == id => {}
                Ok(other) => fail!("{step} returned {other:?}; while running it was {id:?}"),
                Err(CloudError::InstanceNotFound) => fail!(
                    "{step} returned InstanceNotFound: that means gone, and the \
                     cloud-node-lifecycle controller would delete the Node of a stopped instance"
                ),
                Err(e) => return Err(unexpected(&step, &e)),
            }
            let step = format!("{exists_step}, instance stopped");
            if !ctx
                .call(
                    step.clone(),
                    legacy.instance_exists_by_provider_id(&provider_id),
                )
                .await?
            {
                fail!(
                    "{step} returned Ok(false): stopped instances exist, and the Node would be \
                     deleted"
                );
            }
        }
        Err(Stop::Skip(why)) => note.push(format!("not checked for a stopped instance: {why}")),
        Err(other) => return Err(other),
    }

    ctx.delete_instance(&node).await?;
    let step = format!("{id_step}, instance deleted");
    match ctx
        .eventually(
            step.clone(),
            || legacy.instance_id(&name),
            |a| matches!(a, Err(CloudError::InstanceNotFound)),
        )
        .await
    {
        Err(CloudError::InstanceNotFound) => {}
        Ok(still) => fail!("{step} still returned {still:?}{}", ctx.settled()),
        Err(e) => fail!(
            "{step} returned {}{}, not InstanceNotFound: the controllers cannot tell that the \
             instance is gone",
            describe_err(&e),
            ctx.settled()
        ),
    }
    let step = format!("{exists_step}, instance deleted");
    match ctx
        .eventually(
            step.clone(),
            || legacy.instance_exists_by_provider_id(&provider_id),
            |a| matches!(a, Ok(false)),
        )
        .await
    {
        Ok(false) => {}
        Ok(true) => fail!("{step} still returned Ok(true){}", ctx.settled()),
        Err(e) => fail!(
            "{step} returned {}{} instead of Ok(false): the Node of a gone instance would never \
             be deleted",
            describe_err(&e),
            ctx.settled()
        ),
    }
    Ok(notes(note))
}
