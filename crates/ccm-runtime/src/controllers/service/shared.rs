//! Shared load balancers: [`SharingLoadBalancer`] stands between the service controller's
//! steps and the provider. A Service that asks for no sharing (and was in no group) goes
//! straight through, call for call. A member of a group is served by the group's load
//! balancer: its ensure puts its ports into the group's Service (after writing on it the
//! group it joins, [`SHARING_KEY_APPLIED_ANNOTATION`]) and asks the provider once, with
//! every included member's ports; its deletion (or its leaving the group) asks again
//! without it, or deletes the load balancer with the last member. The steps around it —
//! finalizer first, the status, the events, the node-sync updates — are the controller's
//! own, per member, unchanged.
//!
//! Members included in the load balancer are those admitted (see `decision::shared`) that
//! carry the group in [`SHARING_KEY_APPLIED_ANNOTATION`] (they went through an ensure, so
//! they hold the finalizer), plus the one being ensured. One group is worked on by one task
//! at a time (a lock per group), and what was last applied to it is remembered, so the
//! members' syncs after a change, and the N members' node-sync updates after a Node change,
//! cost the cloud one call, not N.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{LoadBalancerStatus, Node, Service};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::decision::ingress::ingress;
use super::decision::nodes::NodeSet;
use super::decision::shared::{
    GroupId, MAX_SHARED_MEMBERS, SHARING_KEY_APPLIED_ANNOTATION, SharingKeys, Verdict, admit,
    applied_group, group_service, port_keys,
};
use super::decision::wants::{is_deleting, wants_load_balancer};
use super::node_sync::NodeSync;
use super::records::Records;
use super::{ServiceKey, lock};
use crate::informer::Informer;
use crate::workqueue::Queue;
use ccm_provider::{
    CloudError, CloudProvider, CloudResult, LoadBalancer, LoadBalancerHealth, LoadBalancerPlan,
    LoadBalancerSharing,
};

/// Why a Service may not share (or join) a load balancer: the source of the
/// [`CloudError`] the controller turns into a `LoadBalancerSharingRefused` Warning.
#[derive(Debug, thiserror::Error)]
#[error("{why}")]
pub(crate) struct SharingRefused {
    why: String,
    /// Its ports were in a group's load balancer and are no longer: its address, the
    /// group's, is not its own any more. Also set when it shows an address and has no load
    /// balancer of its own: its applied key went before its address did (a controller
    /// stopped between the two, or a sync that read a copy without the address yet), and
    /// what it shows is still the group's.
    left_group: bool,
}

/// The error of a refusal of a Service that was (`left_group`) or was not in a group.
fn refused(why: impl Into<String>, left_group: bool) -> CloudError {
    CloudError::provider(
        "the Service may not share a load balancer",
        SharingRefused {
            why: why.into(),
            left_group,
        },
    )
}

/// Whether `err` is a refusal to share: `Some(left_group)` (see [`SharingRefused`]).
pub(super) fn refusal(err: &CloudError) -> Option<bool> {
    let source = std::error::Error::source(err)?;
    source
        .downcast_ref::<SharingRefused>()
        .map(|r| r.left_group)
}

/// Why a provider without [`LoadBalancer::load_balancer_sharing`] refuses.
const NO_SHARING: &str =
    "this cloud provider does not support load balancers shared by several Services";

/// What was last applied to a group's load balancer.
#[derive(Default)]
enum Applied {
    /// Not known (never asked, or the last call failed).
    #[default]
    Unknown,
    /// Deleted (or never made).
    Gone,
    /// Made from this group Service with these Nodes; its status.
    Serving {
        service: Box<Service>,
        hosts: Arc<NodeSet>,
        status: LoadBalancerStatus,
    },
}

/// A group's lock and what was last applied to it.
#[derive(Default)]
struct Group {
    applied: Applied,
    /// The UIDs of the members included last.
    members: Vec<String>,
    /// Their ports (port, protocol).
    ports: BTreeSet<(i32, String)>,
}

/// The service controller's view of the provider's load balancers, with groups (see the
/// module docs).
pub(super) struct SharingLoadBalancer {
    provider: Arc<dyn CloudProvider>,
    services: Informer<Service>,
    keys: SharingKeys,
    node_sync: Arc<NodeSync>,
    queue: Queue<ServiceKey>,
    /// The controller's records, to make a woken member's next sync a full ensure.
    records: Records,
    client: Client,
    groups: Mutex<HashMap<GroupId, Arc<tokio::sync::Mutex<Group>>>>,
    /// Members (by UID) whose own load balancer, from before they shared, is known gone.
    solo_gone: Mutex<HashSet<String>>,
}

impl SharingLoadBalancer {
    /// The view of `provider`'s load balancers for a controller of the classes `records`
    /// has.
    pub(super) fn new(
        provider: Arc<dyn CloudProvider>,
        services: Informer<Service>,
        keys: SharingKeys,
        node_sync: Arc<NodeSync>,
        queue: Queue<ServiceKey>,
        records: Records,
        client: Client,
    ) -> Self {
        Self {
            provider,
            services,
            keys,
            node_sync,
            queue,
            records,
            client,
            groups: Mutex::default(),
            solo_gone: Mutex::default(),
        }
    }

    fn inner(&self) -> CloudResult<&dyn LoadBalancer> {
        self.provider
            .load_balancer()
            .ok_or(CloudError::NotImplemented)
    }

    /// The group `service` is in, as far as the cloud goes: the one it last joined (by our
    /// annotation), else the one it asks for when that is valid.
    fn group_in(&self, service: &Service) -> Option<GroupId> {
        applied_group(service).or_else(|| self.keys.group_of(service)?.ok())
    }

    fn group_lock(&self, group: &GroupId) -> Arc<tokio::sync::Mutex<Group>> {
        let mut groups = lock(&self.groups);
        // Forget the groups nobody holds and nothing is remembered of.
        if groups.len() > 64 {
            groups.retain(|_, g| {
                Arc::strong_count(g) > 1 || g.try_lock().map_or(true, |g| !g.members.is_empty())
            });
        }
        groups.entry(group.clone()).or_default().clone()
    }

    /// The group's members, oldest first, with their verdicts: the Services of its namespace
    /// asking for its key, wanting a load balancer from this controller and not being
    /// deleted; `current`, when given, in place of the cache's copy of it.
    fn verdicts(
        &self,
        group: &GroupId,
        sharing: &LoadBalancerSharing,
        current: Option<&Arc<Service>>,
    ) -> Vec<(Arc<Service>, Verdict)> {
        let uid = |s: &Service| s.metadata.uid.clone();
        let members: Vec<Arc<Service>> = self
            .services
            .store()
            .state()
            .into_iter()
            .filter(|s| current.is_none_or(|c| uid(c) != uid(s)))
            .chain(current.cloned())
            .filter(|s| {
                s.metadata.namespace.as_deref() == Some(group.namespace.as_str())
                    && wants_load_balancer(self.records.classes(), s)
                    && !is_deleting(s)
                    && matches!(self.keys.key_of(s), Some(Ok(k)) if k == group.key)
            })
            .collect();
        let refs: Vec<&Service> = members.iter().map(|s| &**s).collect();
        admit(&refs, sharing.agreeing_annotations(), MAX_SHARED_MEMBERS)
            .into_iter()
            .map(|(i, v)| (members[i].clone(), v))
            .collect()
    }

    /// The members whose ports are the load balancer's: admitted, joined (our annotation
    /// names the group) or `joining`, and not `leaving` (by UID).
    fn included(
        verdicts: &[(Arc<Service>, Verdict)],
        group: &GroupId,
        joining: Option<&str>,
        leaving: Option<&str>,
    ) -> Vec<Arc<Service>> {
        verdicts
            .iter()
            .filter(|(s, v)| {
                let uid = s.metadata.uid.as_deref();
                *v == Verdict::Admitted
                    && uid != leaving
                    && (uid == joining || applied_group(s).as_ref() == Some(group))
            })
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// Brings the group's load balancer to `included`: asks the provider to ensure it (or
    /// only to update its Nodes, when only they changed), or deletes it when nobody is
    /// left; nothing when that was the last thing done. Then queues the other members when
    /// their load balancer moved or a place was freed. The group's status, or `None` when
    /// it has none.
    async fn reconcile(
        &self,
        cluster: &str,
        group_id: &GroupId,
        group: &mut Group,
        verdicts: &[(Arc<Service>, Verdict)],
        included: &[Arc<Service>],
        syncing: Option<&str>,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        let inner = self.inner()?;
        let uids: Vec<String> = included
            .iter()
            .filter_map(|s| s.metadata.uid.clone())
            .collect();
        let ports = port_keys(included);
        // A place or a port was freed: a refused member may fit now.
        let freed = group.members.iter().any(|u| !uids.contains(u))
            || group.ports.difference(&ports).next().is_some();
        let before = match &group.applied {
            Applied::Serving { status, .. } => Some(status.clone()),
            _ => None,
        };
        let result = self.apply(cluster, group_id, group, inner, included).await;
        if result.is_err() {
            group.applied = Applied::Unknown;
        }
        let status = result?;
        group.members = uids;
        group.ports = ports;
        // The included members' ingress follows a load balancer that moved; the others
        // (refused, or admitted only now) are looked at again when a place or a port was
        // freed (otherwise they wait: a refusal is not retried with backoff, see
        // `SyncError::outcome`).
        let moved = before.is_some() && before != status;
        for (member, _) in verdicts {
            let uid = member.metadata.uid.as_deref();
            let included = uid.is_some_and(|u| group.members.iter().any(|m| m == u));
            // One that still says it is in the group but is not (displaced by an older
            // member, say, while this process did not know the group yet) must hear it.
            let displaced = !included && applied_group(member).as_ref() == Some(group_id);
            let wake = if included { moved } else { freed || displaced };
            if wake && uid != syncing {
                let key = ServiceKey::of(member);
                self.records.stale(&key);
                self.queue.add(key);
            }
        }
        Ok(status)
    }

    async fn apply(
        &self,
        cluster: &str,
        group_id: &GroupId,
        group: &mut Group,
        inner: &dyn LoadBalancer,
        included: &[Arc<Service>],
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        let refs: Vec<&Service> = included.iter().map(|s| &**s).collect();
        let service = group_service(cluster, group_id, &refs);
        if included.is_empty() {
            if !matches!(group.applied, Applied::Gone)
                && inner.get_load_balancer(cluster, &service).await?.is_some()
            {
                tracing::info!(group = %group_id, "deleting the shared load balancer: its last member left");
                inner
                    .ensure_load_balancer_deleted(cluster, &service)
                    .await?;
            }
            group.applied = Applied::Gone;
            return Ok(None);
        }
        // Members agree on the backend selector: the first member's, which the group's
        // Service carries, is every member's.
        let eligible = self
            .node_sync
            .eligible_for(&service)
            .map_err(|e| CloudError::msg(format!("the group's backend Nodes: {e}")))?;
        if let Applied::Serving {
            service: applied,
            hosts,
            status,
        } = &mut group.applied
            && **applied == service
        {
            if *hosts != eligible.hosts {
                inner
                    .update_load_balancer(cluster, &service, &eligible.nodes)
                    .await?;
                *hosts = eligible.hosts;
            }
            return Ok(Some(status.clone()));
        }
        tracing::info!(group = %group_id, members = included.len(), "ensuring the shared load balancer");
        let status = inner
            .ensure_load_balancer(cluster, &service, &eligible.nodes)
            .await?;
        group.applied = Applied::Serving {
            service: Box::new(service),
            hosts: eligible.hosts,
            status: status.clone(),
        };
        Ok(Some(status))
    }

    /// Takes `service` out of `group`'s load balancer (it left, or is leaving).
    async fn leave(&self, cluster: &str, group_id: &GroupId, service: &Service) -> CloudResult<()> {
        let sharing = self.inner()?.load_balancer_sharing().unwrap_or_default();
        let lock = self.group_lock(group_id);
        let mut group = lock.lock().await;
        let verdicts = self.verdicts(group_id, &sharing, None);
        let included = Self::included(&verdicts, group_id, None, service.metadata.uid.as_deref());
        self.reconcile(
            cluster,
            group_id,
            &mut group,
            &verdicts,
            &included,
            service.metadata.uid.as_deref(),
        )
        .await
        .map(drop)
    }

    /// Deletes the load balancer `service` had of its own before it shared, once per UID.
    async fn delete_solo(&self, cluster: &str, service: &Service) -> CloudResult<()> {
        let uid = service.metadata.uid.clone().unwrap_or_default();
        if lock(&self.solo_gone).contains(&uid) {
            return Ok(());
        }
        let inner = self.inner()?;
        if inner.get_load_balancer(cluster, service).await?.is_some() {
            tracing::info!(service = %ServiceKey::of(service), "deleting the service's own load balancer: it now shares one");
            inner.ensure_load_balancer_deleted(cluster, service).await?;
        }
        let mut gone = lock(&self.solo_gone);
        if gone.len() >= 100_000 {
            gone.clear();
        }
        gone.insert(uid);
        Ok(())
    }

    /// The refusal of `service`, with why; `was_member`: its ports were in a group's load
    /// balancer. A refusal loses nothing it has: a load balancer of its own (from before it
    /// asked to share) stays with its address. So the address it shows goes when it was a
    /// member, or when it has no load balancer of its own (looked up only then, and only
    /// when it shows one): that address can only be a group's it left (see
    /// [`SharingRefused::left_group`]). A failed look-up is the error.
    async fn refuse(
        &self,
        cluster: &str,
        service: &Service,
        why: impl Into<String>,
        was_member: bool,
    ) -> CloudError {
        if was_member || ingress(service).is_empty() {
            return refused(why, was_member);
        }
        let uid = service.metadata.uid.clone().unwrap_or_default();
        let own = if lock(&self.solo_gone).contains(&uid) {
            false
        } else {
            match self.inner() {
                Ok(inner) => match inner.get_load_balancer(cluster, service).await {
                    Ok(found) => found.is_some(),
                    Err(err) => return err,
                },
                Err(err) => return err,
            }
        };
        if !own {
            tracing::info!(service = %ServiceKey::of(service), "refused service shows an address and has no load balancer of its own; clearing it");
        }
        refused(why, !own)
    }

    /// Sets (or with `None` removes) our annotation naming the group `service` joined.
    async fn mark(&self, service: &Service, group: Option<&GroupId>) -> CloudResult<()> {
        if applied_group(service).as_ref() == group || is_deleting(service) {
            return Ok(());
        }
        let (Some(namespace), Some(name)) = (
            service.metadata.namespace.as_deref(),
            service.metadata.name.as_deref(),
        ) else {
            return Ok(());
        };
        let value = group.map_or(Value::Null, |g| Value::from(g.key.as_str()));
        let patch = json!({"metadata": {
            "uid": service.metadata.uid,
            "annotations": {SHARING_KEY_APPLIED_ANNOTATION: value},
        }});
        match Api::<Service>::namespaced(self.client.clone(), namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            // Gone, or another Service of its name now (the UID test): nothing to mark.
            Err(kube::Error::Api(e)) if matches!(e.code, 404 | 409 | 422) => Ok(()),
            result => result.map(drop).map_err(|e| {
                CloudError::provider(
                    format!(
                        "writing {SHARING_KEY_APPLIED_ANNOTATION} on service {namespace}/{name}"
                    ),
                    e,
                )
            }),
        }
    }

    /// Ensures `service`, a member of `group_id` (see [`LoadBalancer::ensure_load_balancer`]).
    async fn ensure_member(
        &self,
        cluster: &str,
        group_id: &GroupId,
        service: &Service,
        was_member: bool,
    ) -> CloudResult<LoadBalancerStatus> {
        let inner = self.inner()?;
        let Some(sharing) = inner.load_balancer_sharing() else {
            return Err(self.refuse(cluster, service, NO_SHARING, was_member).await);
        };
        let lock = self.group_lock(group_id);
        let mut group = lock.lock().await;
        let current = Arc::new(service.clone());
        let verdicts = self.verdicts(group_id, &sharing, Some(&current));
        let uid = service.metadata.uid.as_deref();
        let verdict = verdicts
            .iter()
            .find(|(s, _)| s.metadata.uid.as_deref() == uid)
            .map(|(_, v)| v.clone());
        match verdict {
            Some(Verdict::Admitted) => {}
            refusal => {
                // Out of the load balancer if it was in, then refused.
                let included = Self::included(&verdicts, group_id, None, uid);
                self.reconcile(cluster, group_id, &mut group, &verdicts, &included, uid)
                    .await?;
                self.mark(service, None).await?;
                let why = match refusal {
                    Some(Verdict::Refused(why)) => why,
                    _ => "it is not a member of the group".to_owned(),
                };
                return Err(self.refuse(cluster, service, why, was_member).await);
            }
        }
        self.delete_solo(cluster, service).await?;
        self.mark(service, Some(group_id)).await?;
        let included = Self::included(&verdicts, group_id, uid, None);
        let status = self
            .reconcile(cluster, group_id, &mut group, &verdicts, &included, uid)
            .await?;
        status.ok_or_else(|| CloudError::msg("the shared load balancer has no members"))
    }

    /// Takes `service` out of the group it was in, when it is in another now (or none).
    async fn leave_old_group(&self, cluster: &str, service: &Service) -> CloudResult<()> {
        let Some(old) = applied_group(service) else {
            return Ok(());
        };
        let wanted = self.keys.group_of(service).and_then(Result::ok);
        if wanted.as_ref() == Some(&old) {
            return Ok(());
        }
        tracing::info!(service = %ServiceKey::of(service), group = %old, "service left its shared load balancer's group");
        self.leave(cluster, &old, service).await?;
        if wanted.is_none() {
            self.mark(service, None).await?;
        }
        Ok(())
    }

    /// The Service standing for the group `service` is in, for the calls that only need
    /// the load balancer's identity.
    fn group_identity(&self, cluster: &str, service: &Service) -> Option<Service> {
        let group = self.group_in(service)?;
        self.inner().ok()?.load_balancer_sharing()?;
        Some(group_service(cluster, &group, &[service]))
    }
}

#[async_trait]
impl LoadBalancer for SharingLoadBalancer {
    async fn get_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<Option<LoadBalancerStatus>> {
        let inner = self.inner()?;
        if let Some(group) = applied_group(service)
            && inner.load_balancer_sharing().is_some()
        {
            let group = group_service(cluster_name, &group, &[service]);
            let status = inner.get_load_balancer(cluster_name, &group).await?;
            // A member on its way out whose group's load balancer is gone (the last
            // member's clean-up stopped after deleting it) still has its applied key to
            // take off: "something to delete", so the clean-up comes here and does it.
            let leaving =
                is_deleting(service) || !wants_load_balancer(self.records.classes(), service);
            return Ok(status.or_else(|| leaving.then(LoadBalancerStatus::default)));
        }
        inner.get_load_balancer(cluster_name, service).await
    }

    fn get_load_balancer_name(&self, cluster_name: &str, service: &Service) -> String {
        let Ok(inner) = self.inner() else {
            return ccm_provider::default_load_balancer_name(service);
        };
        match self.group_identity(cluster_name, service) {
            Some(group) => inner.get_load_balancer_name(cluster_name, &group),
            None => inner.get_load_balancer_name(cluster_name, service),
        }
    }

    async fn ensure_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerStatus> {
        let was_member = applied_group(service).is_some();
        self.leave_old_group(cluster_name, service).await?;
        match self.keys.group_of(service) {
            None => {
                // A load balancer of its own again: one to delete should it share later.
                if let Some(uid) = &service.metadata.uid {
                    lock(&self.solo_gone).remove(uid);
                }
                self.inner()?
                    .ensure_load_balancer(cluster_name, service, nodes)
                    .await
            }
            Some(Err(why)) => Err(self.refuse(cluster_name, service, why, was_member).await),
            Some(Ok(group)) => {
                self.ensure_member(cluster_name, &group, service, was_member)
                    .await
            }
        }
    }

    async fn update_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<()> {
        if applied_group(service).is_none() && self.keys.group_of(service).is_none() {
            return self
                .inner()?
                .update_load_balancer(cluster_name, service, nodes)
                .await;
        }
        self.ensure_load_balancer(cluster_name, service, nodes)
            .await
            .map(drop)
    }

    async fn ensure_load_balancer_deleted(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<()> {
        let inner = self.inner()?;
        let mut groups: Vec<GroupId> = applied_group(service).into_iter().collect();
        if let Some(Ok(wanted)) = self.keys.group_of(service)
            && !groups.contains(&wanted)
        {
            groups.push(wanted);
        }
        if groups.is_empty() || inner.load_balancer_sharing().is_none() {
            return inner
                .ensure_load_balancer_deleted(cluster_name, service)
                .await;
        }
        for group in &groups {
            self.leave(cluster_name, group, service).await?;
        }
        self.delete_solo(cluster_name, service).await?;
        self.mark(service, None).await
    }

    async fn plan_load_balancer(
        &self,
        cluster_name: &str,
        service: &Service,
        nodes: &[Arc<Node>],
    ) -> CloudResult<LoadBalancerPlan> {
        let inner = self.inner()?;
        let Some(Ok(group)) = self.keys.group_of(service) else {
            return inner.plan_load_balancer(cluster_name, service, nodes).await;
        };
        let sharing = inner
            .load_balancer_sharing()
            .ok_or_else(|| refused(NO_SHARING, false))?;
        let current = Arc::new(service.clone());
        let verdicts = self.verdicts(&group, &sharing, Some(&current));
        let included = Self::included(&verdicts, &group, service.metadata.uid.as_deref(), None);
        let refs: Vec<&Service> = included.iter().map(|s| &**s).collect();
        inner
            .plan_load_balancer(
                cluster_name,
                &group_service(cluster_name, &group, &refs),
                nodes,
            )
            .await
    }

    async fn load_balancer_health(
        &self,
        cluster_name: &str,
        service: &Service,
    ) -> CloudResult<LoadBalancerHealth> {
        let inner = self.inner()?;
        // The group it asks for counts before our annotation reaches the cache copy the
        // health pass reads: never "no load balancer" for a member.
        match self.group_identity(cluster_name, service) {
            Some(group) => inner.load_balancer_health(cluster_name, &group).await,
            None => inner.load_balancer_health(cluster_name, service).await,
        }
    }

    fn load_balancer_sharing(&self) -> Option<LoadBalancerSharing> {
        self.inner().ok()?.load_balancer_sharing()
    }
}
