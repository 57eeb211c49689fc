//! What the service controller remembers of each Service it synced: Go's service cache (the
//! last version a sync worked on), plus what was last done to its load balancer and with
//! which Nodes, whether the last sync failed and whether a worker is syncing it now. A
//! worker marks its record when a sync starts and updates it as the steps succeed; the
//! node-sync pass reads every record to find the load balancers whose Nodes changed; the
//! Service informer's handler adds one for a deleted Service the controller never synced,
//! so that its load balancer is still deleted. One mutex guards the map, held for map
//! operations only, never across an await; a sync decides from a [`Known`] copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Service;

use super::class::LoadBalancerClasses;
use super::decision::nodes::{HostsState, NodeSet, NodeSyncStep, node_sync_step};
use super::decision::wants::wants_load_balancer;
use super::decision::{Known, LbState};
use super::{ServiceKey, lock};

/// What the controller knows about one Service it synced (Go's service cache, plus the
/// Nodes its load balancer was given).
pub(super) struct Record {
    /// The last version a sync worked on, or the last version before it was deleted.
    pub(super) service: Arc<Service>,
    /// What was last done to its load balancer.
    pub(super) lb: LbState,
    /// The last sync failed: the next one ensures in full, and node-sync leaves it to
    /// its backoff.
    pub(super) failing: bool,
    /// A worker is syncing it now.
    pub(super) syncing: bool,
    /// The last sync ended with its load balancer still coming up
    /// ([`CloudError::Provisioning`](ccm_provider::CloudError::Provisioning)): the next
    /// ensure continues that one, without a second `EnsuringLoadBalancer`.
    pub(super) provisioning: bool,
}

impl Record {
    /// The record of a Service nothing was done for yet.
    pub(super) fn new(service: Arc<Service>) -> Self {
        Self {
            service,
            lb: LbState::Unknown,
            failing: false,
            syncing: false,
            provisioning: false,
        }
    }

    /// What the node-sync pass sees of it.
    pub(super) fn hosts_state(&self) -> HostsState<'_> {
        if self.syncing {
            HostsState::Syncing
        } else if self.failing {
            HostsState::Failing
        } else if let LbState::Applied { hosts, .. } = &self.lb {
            HostsState::Applied(hosts.as_ref())
        } else {
            HostsState::None
        }
    }

    /// What a sync decides from: a copy of the record, to read without the lock.
    pub(super) fn known(&self) -> Known {
        Known {
            service: self.service.clone(),
            lb: self.lb.clone(),
            failing: self.failing,
        }
    }
}

/// Marks the record of `service` as being synced, creating it, or replacing one of another
/// UID with a new one.
pub(super) fn start_sync(
    records: &mut HashMap<ServiceKey, Record>,
    key: &ServiceKey,
    service: &Arc<Service>,
) {
    let record = records
        .entry(key.clone())
        .or_insert_with(|| Record::new(service.clone()));
    if record.service.metadata.uid != service.metadata.uid {
        *record = Record::new(service.clone());
    }
    record.service = service.clone();
    record.syncing = true;
}

/// The records of every Service, by key: one map shared by the workers, the node-sync loop
/// and the Service informer's handler, and the classes the controller manages. Cloning
/// gives another handle to the same map.
#[derive(Clone, Default)]
pub(super) struct Records {
    map: Arc<Mutex<HashMap<ServiceKey, Record>>>,
    classes: Arc<LoadBalancerClasses>,
}

impl Records {
    /// No record yet, for a controller that manages the Services of `classes`.
    pub(super) fn new(classes: LoadBalancerClasses) -> Self {
        Self {
            map: Arc::default(),
            classes: Arc::new(classes),
        }
    }

    /// Its load balancer changed under it (a shared one's group did): the next sync ensures
    /// in full rather than finding nothing changed.
    pub(super) fn stale(&self, key: &ServiceKey) {
        if let Some(record) = self.lock().get_mut(key) {
            record.lb = LbState::Unknown;
        }
    }

    /// The classes the controller manages.
    pub(super) fn classes(&self) -> &LoadBalancerClasses {
        &self.classes
    }

    /// The map, locked. Hold it for map operations only, never across an await.
    pub(super) fn lock(&self) -> MutexGuard<'_, HashMap<ServiceKey, Record>> {
        lock(&self.map)
    }

    /// A copy of `key`'s record, if there is one.
    pub(super) fn known(&self, key: &ServiceKey) -> Option<Known> {
        self.lock().get(key).map(Record::known)
    }

    /// Marks `key`'s record, if there is one, as being synced.
    pub(super) fn mark_syncing(&self, key: &ServiceKey) {
        if let Some(record) = self.lock().get_mut(key) {
            record.syncing = true;
        }
    }

    /// A guard that clears `key`'s `syncing` mark when the sync ends, however it ends.
    pub(super) fn syncing_guard<'a>(&'a self, key: &'a ServiceKey) -> SyncingGuard<'a> {
        SyncingGuard { records: self, key }
    }

    /// Records how a sync of `key` ended: a failed one makes the next sync ensure in full.
    pub(super) fn finished(&self, key: &ServiceKey, succeeded: bool, provisioning: bool) {
        if let Some(record) = self.lock().get_mut(key) {
            record.failing = !succeeded;
            record.provisioning = provisioning;
        }
    }

    /// Whether `key`'s last sync ended with its load balancer still coming up.
    pub(super) fn provisioning(&self, key: &ServiceKey) -> bool {
        self.lock().get(key).is_some_and(|r| r.provisioning)
    }

    /// Records that `key`'s load balancer was ensured (or pointed at its Nodes) from
    /// `service`, with `hosts`.
    pub(super) fn applied(&self, key: &ServiceKey, service: &Arc<Service>, hosts: Arc<NodeSet>) {
        if let Some(record) = self.lock().get_mut(key) {
            record.lb = LbState::Applied {
                service: service.clone(),
                hosts,
            };
        }
    }

    /// Records that `key`'s load balancer was deleted and its finalizer removed.
    pub(super) fn cleaned(&self, key: &ServiceKey) {
        if let Some(record) = self.lock().get_mut(key) {
            record.lb = LbState::Cleaned;
        }
    }

    /// Forgets `key`'s record.
    pub(super) fn forget(&self, key: &ServiceKey) {
        self.lock().remove(key);
    }

    /// Whether `key` wants a load balancer that was last given other Nodes than its
    /// Service's eligible ones now, `current` (`None`: they cannot be chosen), and is
    /// neither being synced nor failing.
    pub(super) fn hosts_stale(
        &self,
        key: &ServiceKey,
        current: impl FnOnce(&Service) -> Option<Arc<NodeSet>>,
    ) -> bool {
        self.lock().get(key).is_some_and(|r| {
            wants_load_balancer(&self.classes, &r.service) && {
                let current = current(&r.service);
                node_sync_step(r.hosts_state(), current.as_deref()) == NodeSyncStep::Update
            }
        })
    }
}

/// Clears a record's `syncing` flag when the sync ends, however it ends.
pub(super) struct SyncingGuard<'a> {
    records: &'a Records,
    key: &'a ServiceKey,
}

impl Drop for SyncingGuard<'_> {
    fn drop(&mut self) {
        if let Some(record) = self.records.lock().get_mut(self.key) {
            record.syncing = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::decision::fixtures::{go, svc};
    use super::*;

    #[test]
    fn records_report_their_hosts_state() {
        let mut r = Record::new(svc("u", true));
        assert_eq!(r.hosts_state(), HostsState::None);
        assert!(r.known().may_have_load_balancer(&go()));
        let hosts = NodeSet::from([("a".into(), String::new())]);
        r.lb = LbState::Applied {
            service: svc("u", true),
            hosts: Arc::new(hosts.clone()),
        };
        assert_eq!(r.hosts_state(), HostsState::Applied(&hosts));
        r.failing = true;
        assert_eq!(r.hosts_state(), HostsState::Failing);
        r.syncing = true;
        assert_eq!(r.hosts_state(), HostsState::Syncing);
        r.lb = LbState::Cleaned;
        assert!(!r.known().may_have_load_balancer(&go()));
        assert!(
            !Record::new(svc("u", false))
                .known()
                .may_have_load_balancer(&go())
        );
    }

    #[test]
    fn a_record_copy_carries_what_the_plan_reads() {
        let mut r = Record::new(svc("u", true));
        let hosts = Arc::new(NodeSet::from([("a".into(), String::new())]));
        r.lb = LbState::Applied {
            service: svc("u", true),
            hosts: hosts.clone(),
        };
        r.failing = true;
        r.syncing = true;
        let known = r.known();
        assert!(Arc::ptr_eq(&known.service, &r.service));
        assert!(known.failing);
        assert!(matches!(&known.lb, LbState::Applied { hosts: h, .. } if Arc::ptr_eq(h, &hosts)));
    }

    #[test]
    fn starting_a_sync_marks_the_record_and_replaces_one_of_another_uid() {
        let key = ServiceKey::new("ns", "a");
        let mut records = HashMap::new();
        // No record yet: a new one, marked.
        let first = svc("u1", true);
        start_sync(&mut records, &key, &first);
        let r = &records[&key];
        assert!(r.syncing && !r.failing && matches!(r.lb, LbState::Unknown));
        assert!(Arc::ptr_eq(&r.service, &first));
        // The same UID: the state is kept, the version is the new one.
        let r = records.get_mut(&key).unwrap();
        r.syncing = false;
        r.failing = true;
        r.lb = LbState::Cleaned;
        let edited = svc("u1", false);
        start_sync(&mut records, &key, &edited);
        let r = &records[&key];
        assert!(r.syncing && r.failing && matches!(r.lb, LbState::Cleaned));
        assert!(Arc::ptr_eq(&r.service, &edited));
        // Another UID: a new record.
        let replaced = svc("u2", true);
        start_sync(&mut records, &key, &replaced);
        let r = &records[&key];
        assert!(r.syncing && !r.failing && matches!(r.lb, LbState::Unknown));
        assert!(Arc::ptr_eq(&r.service, &replaced));
    }

    #[test]
    fn the_records_handle_marks_and_applies() {
        let records = Records::default();
        let key = ServiceKey::new("ns", "a");
        let web = svc("u", true);
        // Nothing happens to a record that is not there.
        records.mark_syncing(&key);
        records.finished(&key, false, false);
        records.cleaned(&key);
        assert!(records.known(&key).is_none());
        start_sync(&mut records.lock(), &key, &web);
        {
            let _guard = records.syncing_guard(&key);
            assert!(records.lock()[&key].syncing);
        }
        assert!(!records.lock()[&key].syncing, "cleared when the guard goes");
        records.mark_syncing(&key);
        assert!(records.lock()[&key].syncing);
        records.finished(&key, false, false);
        assert!(records.known(&key).unwrap().failing);
        records.finished(&key, true, false);
        assert!(!records.known(&key).unwrap().failing);
        let hosts = Arc::new(NodeSet::from([("a".into(), String::new())]));
        records.lock().get_mut(&key).unwrap().syncing = false;
        records.applied(&key, &web, hosts.clone());
        assert!(!records.hosts_stale(&key, |_| Some(hosts.clone())));
        assert!(records.hosts_stale(&key, |_| Some(Arc::default())));
        assert!(
            !records.hosts_stale(&key, |_| None),
            "no Nodes to compare with"
        );
        records.cleaned(&key);
        assert!(matches!(records.known(&key).unwrap().lb, LbState::Cleaned));
        assert!(!records.hosts_stale(&key, |_| Some(Arc::default())));
        records.forget(&key);
        assert!(records.known(&key).is_none());
    }
}
