//! The Services and ingress entries the service controller's tests build on.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;

/// `default/web` (UID `uid-1`): `type: LoadBalancer`, one TCP port 80 → 8080.
pub(super) fn lb_service() -> Service {
    let mut s = Service::default();
    s.metadata.name = Some("web".into());
    s.metadata.namespace = Some("default".into());
    s.metadata.uid = Some("uid-1".into());
    s.spec = Some(ServiceSpec {
        type_: Some("LoadBalancer".into()),
        ports: Some(vec![ServicePort {
            name: Some("http".into()),
            protocol: Some("TCP".into()),
            port: 80,
            node_port: Some(30080),
            target_port: Some(IntOrString::Int(8080)),
            ..ServicePort::default()
        }]),
        ..ServiceSpec::default()
    });
    s
}

/// A Service with only a UID and a type: `LoadBalancer` if `lb`, else `ClusterIP`.
pub(in crate::controllers::service) fn svc(uid: &str, lb: bool) -> Arc<Service> {
    let mut s = Service::default();
    s.metadata.uid = Some(uid.into());
    s.spec = Some(ServiceSpec {
        type_: Some(if lb { "LoadBalancer" } else { "ClusterIP" }.into()),
        ..ServiceSpec::default()
    });
    Arc::new(s)
}

/// `s` with `f` applied to its spec.
pub(super) fn with_spec(mut s: Service, f: impl FnOnce(&mut ServiceSpec)) -> Service {
    f(s.spec.as_mut().unwrap());
    s
}

/// `s` being deleted.
pub(super) fn deleting(mut s: Service) -> Service {
    s.metadata.deletion_timestamp = Some(Time(Default::default()));
    s
}

/// `s` with our cleanup finalizer (only).
pub(super) fn with_finalizer(mut s: Service) -> Service {
    s.metadata.finalizers = Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.into()]);
    s
}

/// An ingress entry with this IP and hostname.
pub(super) fn ing(ip: Option<&str>, host: Option<&str>) -> LoadBalancerIngress {
    LoadBalancerIngress {
        ip: ip.map(Into::into),
        hostname: host.map(Into::into),
        ..LoadBalancerIngress::default()
    }
}

/// Go's class selection: the Services without a class.
pub(crate) fn go() -> super::super::class::LoadBalancerClasses {
    super::super::class::LoadBalancerClasses::go()
}
