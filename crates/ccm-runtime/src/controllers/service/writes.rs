//! The service controller's writes: the cleanup finalizer and `status.loadBalancer.ingress`,
//! each a JSON Patch that tests the value it replaces, so a concurrent writer is never
//! overwritten. A failed test (or a conflict) makes the write re-read the Service and plan
//! again from the fresh copy, a few times, before it gives up: the controllers'
//! [`guarded_patch`] loop, which the cloud-node controller shares.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::class::LoadBalancerClasses;
use super::decision::conditions::{Wanted, conditions, merged, without_ours};
use super::decision::ingress::ingress;
use super::decision::wants::{
    finalizers, finalizers_with_ours, finalizers_without_ours, is_deleting,
};
use crate::controllers::guarded_patch::{Patched, guarded_patch};
use crate::controllers::patch::{replace_list, to_patch};
use crate::informer::trim_service;

/// The field manager of this controller's writes.
const FIELD_MANAGER: &str = "service-controller";

/// Where a patch goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The Service itself (metadata, spec).
    Object,
    /// The `status` subresource.
    Status,
}

/// Operations that add our finalizer (that of the Service's class), given the Service as it
/// is (none when present).
pub(super) fn add_finalizer_ops(classes: &LoadBalancerClasses, service: &Service) -> Vec<Value> {
    finalizer_ops(service, finalizers_with_ours(classes, service))
}

/// Operations that remove our finalizers, given the Service as it is (none when absent).
pub(super) fn remove_finalizer_ops(classes: &LoadBalancerClasses, service: &Service) -> Vec<Value> {
    finalizer_ops(service, finalizers_without_ours(classes, service))
}

/// Operations that replace the Service's finalizers with `new` (none for `None`: no change).
fn finalizer_ops(service: &Service, new: Option<Vec<String>>) -> Vec<Value> {
    list_ops(service, "/metadata/finalizers", finalizers(service), new)
}

/// Operations that replace the Service's list at `path`, now `old`, with `new` (none for
/// `None`: no change); an absent list is guarded by the resource version.
fn list_ops<T: serde::Serialize>(
    service: &Service,
    path: &str,
    old: &[T],
    new: Option<Vec<T>>,
) -> Vec<Value> {
    new.map_or_else(Vec::new, |new| {
        replace_list(
            path,
            Some(old),
            &new,
            service.metadata.resource_version.as_deref(),
        )
    })
}

/// Whether two ingress lists say the same, with the API server's defaults applied: an entry
/// with an IP and no `ipMode` is `VIP`; absent and empty port lists are equal.
pub(super) fn ingress_equal(a: &[LoadBalancerIngress], b: &[LoadBalancerIngress]) -> bool {
    fn mode(i: &LoadBalancerIngress) -> Option<&str> {
        match (i.ip_mode.as_deref(), i.ip.as_deref()) {
            (Some(mode), _) => Some(mode),
            (None, Some(ip)) if !ip.is_empty() => Some("VIP"),
            (None, _) => None,
        }
    }
    fn text(s: Option<&String>) -> &str {
        s.map_or("", String::as_str)
    }
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            text(x.ip.as_ref()) == text(y.ip.as_ref())
                && text(x.hostname.as_ref()) == text(y.hostname.as_ref())
                && mode(x) == mode(y)
                && x.ports.as_deref().unwrap_or_default() == y.ports.as_deref().unwrap_or_default()
        })
}

/// Operations that set `status.loadBalancer.ingress` to `new`, given the Service as it is
/// (none when it says the same already). An existing list is tested before it is replaced;
/// an absent one by testing that `status.loadBalancer` is empty.
pub(super) fn ingress_ops(service: &Service, new: &[LoadBalancerIngress]) -> Vec<Value> {
    let old = ingress(service);
    if ingress_equal(old, new) {
        return Vec::new();
    }
    if old.is_empty() {
        vec![
            json!({"op": "test", "path": "/status/loadBalancer", "value": {}}),
            json!({"op": "add", "path": "/status/loadBalancer/ingress", "value": new}),
        ]
    } else {
        replace_list("/status/loadBalancer/ingress", Some(old), new, None)
    }
}

/// Operations that set the Service's conditions to `new` (`None`: no change), tested
/// against the current list.
pub(super) fn conditions_ops(service: &Service, new: Option<Vec<Condition>>) -> Vec<Value> {
    let absent = service
        .status
        .as_ref()
        .is_none_or(|s| s.conditions.is_none());
    match new {
        // An absent list is tested as absent (a `test` of `null` passes on a missing
        // member, and fails once anyone has added the list), not by the resource version:
        // writes elsewhere on the Service (a provider's annotation in the same sync) move
        // that without touching this list, and each cost a re-read and a second patch.
        Some(new) if absent && !new.is_empty() => vec![
            json!({"op": "test", "path": "/status/conditions", "value": null}),
            json!({"op": "add", "path": "/status/conditions", "value": new}),
        ],
        new => list_ops(service, "/status/conditions", conditions(service), new),
    }
}

/// Sets the ingress list (`None`: leaves it) and the `wanted` conditions on the status
/// subresource, in one request, if either differs. `Ok(None)` when the Service is gone.
pub(super) async fn set_status(
    api: &Api<Service>,
    service: Arc<Service>,
    new: Option<&[LoadBalancerIngress]>,
    wanted: &[Wanted],
) -> Result<Option<Arc<Service>>, kube::Error> {
    let now = Time(Timestamp::now());
    write(api, service, Target::Status, |s| {
        let mut ops = new.map_or_else(Vec::new, |new| ingress_ops(s, new));
        ops.extend(conditions_ops(s, merged(s, wanted, &now)));
        ops
    })
    .await
}

/// Clears the ingress list and our conditions, in one request. `Ok(None)` when the Service
/// is gone.
pub(super) async fn clear_status(
    api: &Api<Service>,
    service: Arc<Service>,
) -> Result<Option<Arc<Service>>, kube::Error> {
    write(api, service, Target::Status, |s| {
        let mut ops = ingress_ops(s, &[]);
        ops.extend(conditions_ops(s, without_ours(s)));
        ops
    })
    .await
}

/// Adds our finalizer. `Ok(None)` when the Service is gone.
pub(super) async fn add_finalizer(
    api: &Api<Service>,
    classes: &LoadBalancerClasses,
    service: Arc<Service>,
) -> Result<Option<Arc<Service>>, kube::Error> {
    write(api, service, Target::Object, |s| {
        add_finalizer_ops(classes, s)
    })
    .await
}

/// Removes our finalizer. `Ok(None)` when the Service is gone.
pub(super) async fn remove_finalizer(
    api: &Api<Service>,
    classes: &LoadBalancerClasses,
    service: Arc<Service>,
) -> Result<Option<Arc<Service>>, kube::Error> {
    write(api, service, Target::Object, |s| {
        remove_finalizer_ops(classes, s)
    })
    .await
}

/// Sets the ingress list on the status subresource, if it differs. `Ok(None)` when the
/// Service is gone.
pub(super) async fn set_ingress(
    api: &Api<Service>,
    service: Arc<Service>,
    new: &[LoadBalancerIngress],
) -> Result<Option<Arc<Service>>, kube::Error> {
    write(api, service, Target::Status, |s| ingress_ops(s, new)).await
}

/// Whether a Service is being deleted and has no finalizers left: the API server removes it,
/// and writing to it is pointless.
pub(super) fn is_going_away(service: &Service) -> bool {
    is_deleting(service) && finalizers(service).is_empty()
}

/// Plans operations from the Service, patches, and on a conflict or a failed test re-reads
/// the Service and plans again ([`guarded_patch`]). Returns the Service as written (or as it
/// is, when there was nothing to write), or `None` when it is gone.
async fn write(
    api: &Api<Service>,
    service: Arc<Service>,
    target: Target,
    plan: impl Fn(&Service) -> Vec<Value>,
) -> Result<Option<Arc<Service>>, kube::Error> {
    let name = service.metadata.name.clone().unwrap_or_default();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let (name, params) = (name.as_str(), &params);
    let attempt = |service: Arc<Service>| {
        let ops = plan(&service);
        async move {
            if ops.is_empty() {
                return Ok(service);
            }
            let patch = Patch::Json::<()>(to_patch(ops));
            let mut written = match target {
                Target::Object => api.patch(name, params, &patch).await?,
                Target::Status => api.patch_status(name, params, &patch).await?,
            };
            trim_service(&mut written);
            Ok(Arc::new(written))
        }
    };
    let changed = |mut fresh: Service, attempt: usize| {
        tracing::debug!(
            service = %name,
            attempt,
            "service changed while writing; planning again"
        );
        trim_service(&mut fresh);
        Some(Arc::new(fresh))
    };
    match guarded_patch(api, name, service, attempt, changed).await {
        Ok(Patched::Done(written)) => Ok(Some(written)),
        // `changed` always plans again, so the write is never moot.
        Ok(Patched::Gone | Patched::Moot) => Ok(None),
        Err(err) => Err(err.into_inner()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{LoadBalancerStatus, PortStatus, ServiceStatus};

    use super::super::decision::fixtures::go;
    use super::*;
    use ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;

    fn svc(finalizers: Option<Vec<&str>>) -> Service {
        let mut s = Service::default();
        s.metadata.resource_version = Some("7".into());
        s.metadata.finalizers = finalizers.map(|f| f.into_iter().map(str::to_owned).collect());
        s
    }

    fn ip(ip: &str) -> LoadBalancerIngress {
        LoadBalancerIngress {
            ip: Some(ip.into()),
            ..LoadBalancerIngress::default()
        }
    }

    fn with_ingress(mut s: Service, ingress: Vec<LoadBalancerIngress>) -> Service {
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(ingress),
            }),
            ..ServiceStatus::default()
        });
        s
    }

    #[test]
    fn finalizer_is_added_with_a_guard() {
        let ops = add_finalizer_ops(&go(), &svc(None));
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
                json!({"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER_LOAD_BALANCER_CLEANUP]}),
            ]
        );
        let ops = add_finalizer_ops(&go(), &svc(Some(vec!["example.com/x"])));
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/metadata/finalizers", "value": ["example.com/x"]}),
                json!({"op": "replace", "path": "/metadata/finalizers", "value": ["example.com/x", FINALIZER_LOAD_BALANCER_CLEANUP]}),
            ]
        );
        assert!(
            add_finalizer_ops(&go(), &svc(Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP]))).is_empty()
        );
    }

    #[test]
    fn finalizer_removal_keeps_the_others() {
        assert!(remove_finalizer_ops(&go(), &svc(None)).is_empty());
        let ops = remove_finalizer_ops(&go(), &svc(Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP])));
        assert_eq!(
            ops,
            vec![
                json!({"op": "test", "path": "/metadata/finalizers", "value": [FINALIZER_LOAD_BALANCER_CLEANUP]}),
                json!({"op": "remove", "path": "/metadata/finalizers"}),
            ]
        );
        let ops = remove_finalizer_ops(
            &go(),
            &svc(Some(vec![
                "a.example.com/x",
                FINALIZER_LOAD_BALANCER_CLEANUP,
            ])),
        );
        assert_eq!(
            ops[1],
            json!({"op": "replace", "path": "/metadata/finalizers", "value": ["a.example.com/x"]})
        );
    }

    #[test]
    fn ingress_is_written_only_when_it_differs() {
        let empty = svc(None);
        assert!(ingress_ops(&empty, &[]).is_empty());
        assert_eq!(
            ingress_ops(&empty, &[ip("1.2.3.4")]),
            vec![
                json!({"op": "test", "path": "/status/loadBalancer", "value": {}}),
                json!({"op": "add", "path": "/status/loadBalancer/ingress", "value": [{"ip": "1.2.3.4"}]}),
            ]
        );
        let set = with_ingress(svc(None), vec![ip("1.2.3.4")]);
        assert!(ingress_ops(&set, &[ip("1.2.3.4")]).is_empty());
        assert_eq!(
            ingress_ops(&set, &[ip("5.6.7.8")]),
            vec![
                json!({"op": "test", "path": "/status/loadBalancer/ingress", "value": [{"ip": "1.2.3.4"}]}),
                json!({"op": "replace", "path": "/status/loadBalancer/ingress", "value": [{"ip": "5.6.7.8"}]}),
            ]
        );
        assert_eq!(
            ingress_ops(&set, &[])[1],
            json!({"op": "remove", "path": "/status/loadBalancer/ingress"})
        );
    }

    #[test]
    fn ingress_equality_applies_the_api_servers_defaults() {
        let mut vip = ip("1.2.3.4");
        vip.ip_mode = Some("VIP".into());
        assert!(ingress_equal(&[ip("1.2.3.4")], &[vip.clone()]));
        let mut proxy = ip("1.2.3.4");
        proxy.ip_mode = Some("Proxy".into());
        assert!(!ingress_equal(&[ip("1.2.3.4")], &[proxy]));
        let mut no_ports = ip("1.2.3.4");
        no_ports.ports = Some(vec![]);
        assert!(ingress_equal(&[ip("1.2.3.4")], &[no_ports]));
        let mut ports = ip("1.2.3.4");
        ports.ports = Some(vec![PortStatus {
            port: 80,
            protocol: "TCP".into(),
            error: None,
        }]);
        assert!(!ingress_equal(&[ip("1.2.3.4")], &[ports]));
        assert!(!ingress_equal(&[ip("1.2.3.4")], &[ip("1.2.3.5")]));
        assert!(!ingress_equal(&[ip("1.2.3.4")], &[]));
        let host = LoadBalancerIngress {
            hostname: Some("lb.example.com".into()),
            ..LoadBalancerIngress::default()
        };
        let same = host.clone();
        assert!(ingress_equal(&[host], &[same]));
    }

    #[test]
    fn going_away_means_deleting_without_finalizers() {
        let mut s = svc(None);
        assert!(!is_going_away(&s));
        s.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        assert!(is_going_away(&s));
        s.metadata.finalizers = Some(vec!["example.com/x".into()]);
        assert!(!is_going_away(&s));
    }
}
