//! What a Service wants from the service controller, as pure functions of the Service and
//! the classes the controller manages ([`LoadBalancerClasses`]): whether it wants a load
//! balancer at all (`type: LoadBalancer`, a class managed here: by default none, Go's
//! rule), whether our cleanup finalizer is there and what the finalizer list becomes with or
//! without it, whether it needs cleaning up, and whether an update from one version to the
//! next matters to its load balancer ([`needs_update`], Go's `needsUpdate`, with the
//! [`UpdateCause`] Go logs).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};

use super::super::class::LoadBalancerClasses;

const TYPE_LOAD_BALANCER: &str = "LoadBalancer";

fn spec(service: &Service) -> Option<&ServiceSpec> {
    service.spec.as_ref()
}

fn service_type(service: &Service) -> &str {
    spec(service)
        .and_then(|s| s.type_.as_deref())
        .unwrap_or_default()
}

fn class(service: &Service) -> Option<&str> {
    spec(service).and_then(|s| s.load_balancer_class.as_deref())
}

/// Whether the Service wants a load balancer from this controller: `type: LoadBalancer` and
/// a `loadBalancerClass` it manages (by default, Go's: none; another class means another
/// controller provides it).
pub(crate) fn wants_load_balancer(classes: &LoadBalancerClasses, service: &Service) -> bool {
    service_type(service) == TYPE_LOAD_BALANCER && classes.manages(class(service))
}

/// Whether the Service waits for its load balancer: it wants one from this controller, is
/// not being deleted, and has no ingress yet (`ccm_service_load_balancers_pending`).
pub(crate) fn waits_for_load_balancer(classes: &LoadBalancerClasses, service: &Service) -> bool {
    wants_load_balancer(classes, service)
        && service.metadata.deletion_timestamp.is_none()
        && super::ingress::ingress(service).is_empty()
}

/// Whether the Service carries one of our cleanup finalizers: Go's
/// `service.kubernetes.io/load-balancer-cleanup` (when Services without a class are ours),
/// or a managed class's.
pub(crate) fn has_finalizer(classes: &LoadBalancerClasses, service: &Service) -> bool {
    finalizers(service).iter().any(|f| classes.is_ours(f))
}

/// Whether the Service carries a class finalizer of ours that is not the one its class now
/// asks for: its class was cleared (the type changed away) or it came back without it.
/// Never with Go's selection, which has no class finalizer.
fn has_stray_class_finalizer(classes: &LoadBalancerClasses, service: &Service) -> bool {
    let wanted = classes.finalizer(class(service));
    finalizers(service).iter().any(|f| {
        classes.is_ours(f)
            && f != ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP
            && Some(f.as_str()) != wanted
    })
}

/// The Service's finalizers.
pub(crate) fn finalizers(service: &Service) -> &[String] {
    service.metadata.finalizers.as_deref().unwrap_or_default()
}

/// The finalizers with the one of the Service's class appended, or `None` when it is there
/// already (or the class is not ours).
pub(crate) fn finalizers_with_ours(
    classes: &LoadBalancerClasses,
    service: &Service,
) -> Option<Vec<String>> {
    let ours = classes.finalizer(class(service))?;
    if finalizers(service).iter().any(|f| f == ours) {
        return None;
    }
    let mut list = finalizers(service).to_vec();
    list.push(ours.to_owned());
    Some(list)
}

/// The finalizers without ours (every copy of each), or `None` when none is there.
pub(crate) fn finalizers_without_ours(
    classes: &LoadBalancerClasses,
    service: &Service,
) -> Option<Vec<String>> {
    if !has_finalizer(classes, service) {
        return None;
    }
    Some(
        finalizers(service)
            .iter()
            .filter(|f| !classes.is_ours(f))
            .cloned()
            .collect(),
    )
}

/// Whether the Service is being deleted.
pub(crate) fn is_deleting(service: &Service) -> bool {
    service.metadata.deletion_timestamp.is_some()
}

/// Whether the load balancer must be cleaned up: one of our finalizers is there, and the
/// Service is being deleted or is no longer `type: LoadBalancer` (Go's rule), or carries a
/// class finalizer of ours its class no longer asks for.
pub(crate) fn needs_cleanup(classes: &LoadBalancerClasses, service: &Service) -> bool {
    has_finalizer(classes, service)
        && (is_deleting(service)
            || service_type(service) != TYPE_LOAD_BALANCER
            || has_stray_class_finalizer(classes, service))
}

/// Whether a sync takes the delete branch (as opposed to ensuring the load balancer).
pub(crate) fn takes_delete_branch(classes: &LoadBalancerClasses, service: &Service) -> bool {
    !wants_load_balancer(classes, service) || needs_cleanup(classes, service)
}

/// Whether a Service just added to the cache is worth a sync.
pub(crate) fn wanted_on_add(classes: &LoadBalancerClasses, service: &Service) -> bool {
    wants_load_balancer(classes, service) || needs_cleanup(classes, service)
}

/// Why a Service update matters to its load balancer: the first difference found, in Go's
/// order. Some causes are named in the log (as Go logs them), some are silent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UpdateCause {
    /// Whether it wants a load balancer changed (the type, or the class).
    Type { from: String, to: String },
    /// `spec.loadBalancerSourceRanges`.
    SourceRanges { from: Vec<String>, to: Vec<String> },
    /// A port's name, protocol, port, nodePort, targetPort or appProtocol, or their number.
    Ports,
    /// `spec.sessionAffinity` or its config.
    SessionAffinity,
    /// `spec.loadBalancerIP`.
    LoadBalancerIp { from: String, to: String },
    /// The number of `spec.externalIPs`.
    ExternalIpCount { from: usize, to: usize },
    /// An external IP changed.
    ExternalIpAdded(String),
    /// Any annotation.
    Annotations,
    /// The UID: the Service was deleted and created again.
    Uid { from: String, to: String },
    /// `spec.externalTrafficPolicy`.
    ExternalTrafficPolicy { from: String, to: String },
    /// `spec.healthCheckNodePort`.
    HealthCheckNodePort { from: i32, to: i32 },
    /// The number of IP families.
    IpFamilies { from: usize, to: usize },
}

impl UpdateCause {
    /// What changed, as (what, from -> to), for the log; `None` for causes Go does not name.
    /// (Go recorded these as Normal events until cloud-provider v0.31; since v0.32 it logs
    /// them.)
    pub(crate) fn event(&self) -> Option<(&'static str, String)> {
        Some(match self {
            Self::Type { from, to } => ("Type", format!("{from} -> {to}")),
            Self::SourceRanges { from, to } => (
                "LoadBalancerSourceRanges",
                format!("{} -> {}", go_list(from), go_list(to)),
            ),
            Self::LoadBalancerIp { from, to } => ("LoadbalancerIP", format!("{from} -> {to}")),
            Self::ExternalIpCount { from, to } => ("ExternalIP", format!("Count: {from} -> {to}")),
            Self::ExternalIpAdded(ip) => ("ExternalIP", format!("Added: {ip}")),
            Self::Uid { from, to } => ("UID", format!("{from} -> {to}")),
            Self::ExternalTrafficPolicy { from, to } => {
                ("ExternalTrafficPolicy", format!("{from} -> {to}"))
            }
            Self::HealthCheckNodePort { from, to } => {
                ("HealthCheckNodePort", format!("{from} -> {to}"))
            }
            Self::IpFamilies { from, to } => ("IPFamilies", format!("Count: {from} -> {to}")),
            Self::Ports | Self::SessionAffinity | Self::Annotations => return None,
        })
    }
}

/// A list as Go's `%v` prints a slice: `[a b]`.
pub(crate) fn go_list<T: fmt::Display>(items: &[T]) -> String {
    let inner: Vec<String> = items.iter().map(ToString::to_string).collect();
    format!("[{}]", inner.join(" "))
}

fn list(v: Option<&Vec<String>>) -> &[String] {
    v.map_or(&[], Vec::as_slice)
}

fn text(v: Option<&String>) -> String {
    v.cloned().unwrap_or_default()
}

/// Whether an update from `old` to `new` matters to the load balancer, and why (Go's
/// `needsUpdate`). Absent and empty lists and maps count as equal.
pub(crate) fn needs_update(
    classes: &LoadBalancerClasses,
    old: &Service,
    new: &Service,
) -> Option<UpdateCause> {
    let (old_wants, new_wants) = (
        wants_load_balancer(classes, old),
        wants_load_balancer(classes, new),
    );
    if !old_wants && !new_wants {
        return None;
    }
    if old_wants != new_wants {
        return Some(UpdateCause::Type {
            from: service_type(old).to_owned(),
            to: service_type(new).to_owned(),
        });
    }
    let default = ServiceSpec::default();
    let o = spec(old).unwrap_or(&default);
    let n = spec(new).unwrap_or(&default);

    let (from, to) = (
        list(o.load_balancer_source_ranges.as_ref()),
        list(n.load_balancer_source_ranges.as_ref()),
    );
    if from != to {
        return Some(UpdateCause::SourceRanges {
            from: from.to_vec(),
            to: to.to_vec(),
        });
    }
    if !ports_equal(
        o.ports.as_deref().unwrap_or_default(),
        n.ports.as_deref().unwrap_or_default(),
    ) {
        return Some(UpdateCause::Ports);
    }
    if o.session_affinity != n.session_affinity
        || o.session_affinity_config != n.session_affinity_config
    {
        return Some(UpdateCause::SessionAffinity);
    }
    if o.load_balancer_ip != n.load_balancer_ip {
        return Some(UpdateCause::LoadBalancerIp {
            from: text(o.load_balancer_ip.as_ref()),
            to: text(n.load_balancer_ip.as_ref()),
        });
    }
    let (from, to) = (list(o.external_ips.as_ref()), list(n.external_ips.as_ref()));
    if from.len() != to.len() {
        return Some(UpdateCause::ExternalIpCount {
            from: from.len(),
            to: to.len(),
        });
    }
    if let Some((_, added)) = from.iter().zip(to).find(|(a, b)| a != b) {
        return Some(UpdateCause::ExternalIpAdded(added.clone()));
    }
    let empty = BTreeMap::new();
    if old.metadata.annotations.as_ref().unwrap_or(&empty)
        != new.metadata.annotations.as_ref().unwrap_or(&empty)
    {
        return Some(UpdateCause::Annotations);
    }
    if old.metadata.uid != new.metadata.uid {
        return Some(UpdateCause::Uid {
            from: text(old.metadata.uid.as_ref()),
            to: text(new.metadata.uid.as_ref()),
        });
    }
    if o.external_traffic_policy != n.external_traffic_policy {
        return Some(UpdateCause::ExternalTrafficPolicy {
            from: text(o.external_traffic_policy.as_ref()),
            to: text(n.external_traffic_policy.as_ref()),
        });
    }
    if o.health_check_node_port != n.health_check_node_port {
        return Some(UpdateCause::HealthCheckNodePort {
            from: o.health_check_node_port.unwrap_or_default(),
            to: n.health_check_node_port.unwrap_or_default(),
        });
    }
    let (from, to) = (
        list(o.ip_families.as_ref()).len(),
        list(n.ip_families.as_ref()).len(),
    );
    if from != to {
        return Some(UpdateCause::IpFamilies { from, to });
    }
    None
}

/// Go's `portEqualForLB` over the whole list, in order.
fn ports_equal(x: &[ServicePort], y: &[ServicePort]) -> bool {
    x.len() == y.len()
        && x.iter().zip(y).all(|(a, b)| {
            a.name == b.name
                && a.protocol == b.protocol
                && a.port == b.port
                && a.node_port == b.node_port
                && a.target_port == b.target_port
                && a.app_protocol == b.app_protocol
        })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ServiceStatus, SessionAffinityConfig};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::super::fixtures::{deleting, go, ing, lb_service, with_finalizer, with_spec};
    use super::*;
    use ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;

    #[test]
    fn wants_only_load_balancers_without_class() {
        assert!(wants_load_balancer(&go(), &lb_service()));
        assert!(!wants_load_balancer(
            &go(),
            &with_spec(lb_service(), |s| {
                s.load_balancer_class = Some("example.com/other".into());
            })
        ));
        assert!(!wants_load_balancer(
            &go(),
            &with_spec(lb_service(), |s| {
                s.type_ = Some("NodePort".into());
            })
        ));
        assert!(!wants_load_balancer(
            &go(),
            &with_spec(lb_service(), |s| {
                s.type_ = None;
            })
        ));
        assert!(
            !wants_load_balancer(&go(), &Service::default()),
            "no spec at all"
        );
        assert!(wanted_on_add(&go(), &lb_service()));
        assert!(!wanted_on_add(&go(), &Service::default()));
    }

    #[test]
    fn a_load_balancer_is_pending_until_its_ingress_is_written() {
        use k8s_openapi::api::core::v1::LoadBalancerStatus;
        assert!(waits_for_load_balancer(&go(), &lb_service()));
        let mut served = lb_service();
        served.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![ing(Some("192.0.2.1"), None)]),
            }),
            ..ServiceStatus::default()
        });
        assert!(!waits_for_load_balancer(&go(), &served));
        assert!(!waits_for_load_balancer(&go(), &deleting(lb_service())));
        assert!(!waits_for_load_balancer(
            &go(),
            &with_spec(lb_service(), |s| {
                s.load_balancer_class = Some("example.com/other".into());
            })
        ));
        assert!(!waits_for_load_balancer(
            &go(),
            &with_spec(lb_service(), |s| {
                s.type_ = Some("ClusterIP".into());
            })
        ));
    }

    #[test]
    fn cleanup_needs_our_finalizer_and_deletion_or_another_type() {
        assert!(!needs_cleanup(&go(), &lb_service()));
        assert!(
            !needs_cleanup(&go(), &deleting(lb_service())),
            "no finalizer"
        );
        assert!(!needs_cleanup(&go(), &with_finalizer(lb_service())));
        assert!(needs_cleanup(
            &go(),
            &deleting(with_finalizer(lb_service()))
        ));
        let cluster_ip = with_spec(with_finalizer(lb_service()), |s| {
            s.type_ = Some("ClusterIP".into());
        });
        assert!(needs_cleanup(&go(), &cluster_ip));
        assert!(wanted_on_add(&go(), &cluster_ip));
        // A class does not make a LoadBalancer Service need cleanup (Go's rule), but it
        // takes the delete branch when synced.
        let classed = with_spec(with_finalizer(lb_service()), |s| {
            s.load_balancer_class = Some("x".into());
        });
        assert!(!needs_cleanup(&go(), &classed));
        assert!(takes_delete_branch(&go(), &classed));
        assert!(!takes_delete_branch(&go(), &with_finalizer(lb_service())));
        assert!(takes_delete_branch(
            &go(),
            &deleting(with_finalizer(lb_service()))
        ));
    }

    #[test]
    fn a_controller_of_classes_touches_only_their_services() {
        const C: &str = "c.example/lb";
        let ours = LoadBalancerClasses::new([C], false).unwrap();
        let classed = |class: Option<&str>| {
            with_spec(lb_service(), |s| {
                s.load_balancer_class = class.map(str::to_owned)
            })
        };
        let with = |mut s: Service, finalizers: &[&str]| {
            s.metadata.finalizers = Some(finalizers.iter().map(|f| (*f).to_owned()).collect());
            s
        };
        // A Service of the class: wanted, its finalizer is the class.
        assert!(wants_load_balancer(&ours, &classed(Some(C))));
        assert!(wanted_on_add(&ours, &classed(Some(C))));
        assert_eq!(
            finalizers_with_ours(&ours, &classed(Some(C))),
            Some(vec![C.to_owned()])
        );
        assert!(!wants_load_balancer(&go(), &classed(Some(C))));
        // Without a class, or of another class: never touched, even being deleted with
        // another controller's finalizer.
        for other in [
            with(classed(None), &[FINALIZER_LOAD_BALANCER_CLEANUP]),
            with(classed(Some("d.example/lb")), &["d.example/lb"]),
        ] {
            for s in [other.clone(), deleting(other)] {
                assert!(!wanted_on_add(&ours, &s));
                assert!(!needs_cleanup(&ours, &s));
                assert!(!has_finalizer(&ours, &s));
                assert_eq!(finalizers_with_ours(&ours, &s), None);
                assert_eq!(finalizers_without_ours(&ours, &s), None);
            }
        }
        // The type changed away (Kubernetes clears the class): the class finalizer says the
        // load balancer is ours to delete, and Go's controller leaves it alone.
        let away = with_spec(with(classed(None), &["x.example/keep", C]), |s| {
            s.type_ = Some("ClusterIP".into())
        });
        assert!(needs_cleanup(&ours, &away));
        assert!(wanted_on_add(&ours, &away));
        assert_eq!(
            finalizers_without_ours(&ours, &away),
            Some(vec!["x.example/keep".to_owned()])
        );
        assert!(!needs_cleanup(&go(), &away));
        assert!(!wanted_on_add(&go(), &away));
        // ... and back to LoadBalancer without a class before we cleaned up: still ours to
        // clean up, while Go's controller takes the Service.
        let back = with(classed(None), &[C]);
        assert!(needs_cleanup(&ours, &back));
        assert!(takes_delete_branch(&ours, &back));
        assert!(wants_load_balancer(&go(), &back));
        assert!(!needs_cleanup(&go(), &back));
        // Both kinds managed: Go's finalizer for a Service without a class.
        let both = LoadBalancerClasses::new([C], true).unwrap();
        assert_eq!(
            finalizers_with_ours(&both, &classed(None)),
            Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()])
        );
        assert!(!needs_cleanup(&both, &with(classed(Some(C)), &[C])));
    }

    #[test]
    fn finalizer_lists_keep_other_finalizers() {
        let mut s = lb_service();
        assert_eq!(
            finalizers_with_ours(&go(), &s),
            Some(vec![FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()])
        );
        assert_eq!(finalizers_without_ours(&go(), &s), None);
        s.metadata.finalizers = Some(vec![
            "example.com/a".into(),
            FINALIZER_LOAD_BALANCER_CLEANUP.into(),
            "example.com/b".into(),
        ]);
        assert_eq!(finalizers_with_ours(&go(), &s), None);
        assert_eq!(
            finalizers_without_ours(&go(), &s),
            Some(vec!["example.com/a".to_owned(), "example.com/b".to_owned()])
        );
        s.metadata.finalizers = Some(vec!["example.com/a".into()]);
        assert_eq!(
            finalizers_with_ours(&go(), &s),
            Some(vec![
                "example.com/a".to_owned(),
                FINALIZER_LOAD_BALANCER_CLEANUP.to_owned()
            ])
        );
    }

    #[test]
    fn needs_update_ignores_services_that_never_want_one() {
        let a = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        let b = with_spec(a.clone(), |s| s.ports = None);
        assert_eq!(needs_update(&go(), &a, &b), None);
    }

    #[test]
    fn needs_update_reports_each_field_in_go_order() {
        let base = lb_service();
        let same = base.clone();
        assert_eq!(needs_update(&go(), &base, &same), None);

        let cases: Vec<(Service, UpdateCause)> = vec![
            (
                with_spec(base.clone(), |s| s.type_ = Some("ClusterIP".into())),
                UpdateCause::Type {
                    from: "LoadBalancer".into(),
                    to: "ClusterIP".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| s.load_balancer_class = Some("c".into())),
                UpdateCause::Type {
                    from: "LoadBalancer".into(),
                    to: "LoadBalancer".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()]);
                }),
                UpdateCause::SourceRanges {
                    from: vec![],
                    to: vec!["10.0.0.0/8".into()],
                },
            ),
            (
                with_spec(base.clone(), |s| s.ports.as_mut().unwrap()[0].port = 81),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].node_port = Some(30081);
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].target_port =
                        Some(IntOrString::String("http".into()));
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].app_protocol = Some("h2c".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].name = Some("web".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
                }),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| s.ports.as_mut().unwrap().clear()),
                UpdateCause::Ports,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.session_affinity = Some("ClientIP".into())
                }),
                UpdateCause::SessionAffinity,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.session_affinity_config = Some(SessionAffinityConfig::default());
                }),
                UpdateCause::SessionAffinity,
            ),
            (
                with_spec(base.clone(), |s| {
                    s.load_balancer_ip = Some("1.2.3.4".into())
                }),
                UpdateCause::LoadBalancerIp {
                    from: String::new(),
                    to: "1.2.3.4".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.external_ips = Some(vec!["5.6.7.8".into()])
                }),
                UpdateCause::ExternalIpCount { from: 0, to: 1 },
            ),
            (
                {
                    let mut s = base.clone();
                    s.metadata.annotations =
                        Some(BTreeMap::from([("example.com/x".into(), "1".into())]));
                    s
                },
                UpdateCause::Annotations,
            ),
            (
                {
                    let mut s = base.clone();
                    s.metadata.uid = Some("uid-2".into());
                    s
                },
                UpdateCause::Uid {
                    from: "uid-1".into(),
                    to: "uid-2".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.external_traffic_policy = Some("Local".into());
                }),
                UpdateCause::ExternalTrafficPolicy {
                    from: String::new(),
                    to: "Local".into(),
                },
            ),
            (
                with_spec(base.clone(), |s| s.health_check_node_port = Some(31000)),
                UpdateCause::HealthCheckNodePort { from: 0, to: 31000 },
            ),
            (
                with_spec(base.clone(), |s| {
                    s.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
                }),
                UpdateCause::IpFamilies { from: 0, to: 2 },
            ),
        ];
        for (new, want) in cases {
            assert_eq!(
                needs_update(&go(), &base, &new),
                Some(want.clone()),
                "{want:?}"
            );
        }
        // The first difference wins: a port change and an annotation change report ports.
        let mut both = with_spec(base.clone(), |s| s.ports.as_mut().unwrap()[0].port = 81);
        both.metadata.annotations = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert_eq!(needs_update(&go(), &base, &both), Some(UpdateCause::Ports));
        // An external IP swapped in place.
        let one = with_spec(base.clone(), |s| {
            s.external_ips = Some(vec!["1.1.1.1".into()])
        });
        let other = with_spec(base.clone(), |s| {
            s.external_ips = Some(vec!["2.2.2.2".into()])
        });
        assert_eq!(
            needs_update(&go(), &one, &other),
            Some(UpdateCause::ExternalIpAdded("2.2.2.2".into()))
        );
    }

    #[test]
    fn needs_update_ignores_what_the_load_balancer_does_not_use() {
        let base = lb_service();
        let mut new = with_finalizer(base.clone());
        new.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        new.metadata.resource_version = Some("42".into());
        new.status = Some(ServiceStatus::default());
        new.spec.as_mut().unwrap().selector = Some(BTreeMap::from([("app".into(), "x".into())]));
        // Absent and empty lists and maps are the same.
        new.spec.as_mut().unwrap().load_balancer_source_ranges = Some(vec![]);
        new.spec.as_mut().unwrap().external_ips = Some(vec![]);
        new.metadata.annotations = Some(BTreeMap::new());
        // The IP family list's order and content do not matter, only its length.
        let a = with_spec(base.clone(), |s| s.ip_families = Some(vec!["IPv4".into()]));
        let b = with_spec(base.clone(), |s| s.ip_families = Some(vec!["IPv6".into()]));
        assert_eq!(needs_update(&go(), &base, &new), None);
        assert_eq!(needs_update(&go(), &a, &b), None);
        // No spec at all on either side does not panic.
        let mut bare = Service::default();
        bare.metadata.uid = Some("uid-1".into());
        assert!(needs_update(&go(), &bare, &base).is_some());
    }

    #[test]
    fn update_causes_name_what_go_logs() {
        let e = |c: UpdateCause| c.event();
        assert_eq!(
            e(UpdateCause::Type {
                from: "LoadBalancer".into(),
                to: "ClusterIP".into()
            }),
            Some(("Type", "LoadBalancer -> ClusterIP".to_owned()))
        );
        assert_eq!(
            e(UpdateCause::SourceRanges {
                from: vec![],
                to: vec!["1.0.0.0/8".into(), "2.0.0.0/8".into()]
            }),
            Some((
                "LoadBalancerSourceRanges",
                "[] -> [1.0.0.0/8 2.0.0.0/8]".to_owned()
            ))
        );
        assert_eq!(
            e(UpdateCause::ExternalIpCount { from: 1, to: 2 }),
            Some(("ExternalIP", "Count: 1 -> 2".to_owned()))
        );
        assert_eq!(e(UpdateCause::Ports), None);
        assert_eq!(e(UpdateCause::Annotations), None);
        assert_eq!(e(UpdateCause::SessionAffinity), None);
    }
}
