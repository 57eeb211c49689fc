//! The service controller's decisions, as pure functions of Services and Nodes: which
//! Services want a cloud load balancer, which need cleaning up, which changes matter to the
//! load balancer, which Nodes may receive traffic, what a sync does next, and whether a
//! provider's answer can be written.
//!
//! What a sync does next is [`plan`]'s answer (and [`plan_gone`]'s, for a Service gone from
//! the cache). From the Service as the informer's cache has it, what the controller knew of
//! it when the sync began (a [`Known`] copy of its record: the version last worked on, what
//! was last applied to its load balancer and with which Nodes, whether the last sync
//! failed) and the eligible Nodes now, it picks the step: delete the load balancer of a
//! replaced Service first (the same name under another UID), then clean up, point the load
//! balancer at new Nodes only, ensure it in full, or do nothing. It is pure so that every
//! branch is tested here, without an API server or a runtime, and so that a worker copies
//! the record under the lock, decides with the lock released, and does the I/O (cloud
//! calls, patches, events) holding no lock.
//!
//! What the provider's answers mean to the delete branch is decided here too
//! ([`delete_call_needed`], [`deletion`]): a load balancer a user-written hint led to but
//! that is not the Service's ([`CloudError::NotOwned`]) is "nothing of ours", so deletion
//! finishes without it.
//!
//! The inputs of the plan are decided by topic, a file each: [`wants`] (what a Service
//! wants, which changes matter to its load balancer), [`nodes`] (which Nodes are eligible,
//! when a load balancer must follow them) and [`ingress`] (the status a provider's answer
//! becomes).

pub(crate) mod conditions;
pub(crate) mod ingress;
pub(crate) mod nodes;
pub(crate) mod shared;
pub(crate) mod wants;

#[cfg(test)]
pub(super) mod fixtures;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerStatus, Service};

use self::nodes::{HostsState, NodeSet, hosts_stale};
use self::wants::{has_finalizer, needs_update, takes_delete_branch, wants_load_balancer};
use super::class::LoadBalancerClasses;
use ccm_provider::{CloudError, CloudResult};

/// What the controller last did to a Service's load balancer.
#[derive(Clone, Debug)]
pub(crate) enum LbState {
    /// Not known to exist, nor known to be gone.
    Unknown,
    /// Ensured (or its Nodes updated) from this version of the Service, with these Nodes.
    Applied {
        service: Arc<Service>,
        hosts: Arc<NodeSet>,
    },
    /// Deleted, finalizer removed.
    Cleaned,
}

/// What the controller knew of a Service when a sync began: a copy of its record, taken
/// under the records lock and read without it (the `Arc`s are shared, not deep-copied).
#[derive(Clone, Debug)]
pub(crate) struct Known {
    /// The last version a sync worked on, or the last version before it was deleted.
    pub(crate) service: Arc<Service>,
    /// What was last done to its load balancer.
    pub(crate) lb: LbState,
    /// The last sync failed.
    pub(crate) failing: bool,
}

impl Known {
    /// Whether this record's Service may have a load balancer to delete: one was applied,
    /// or nothing is known and the Service wanted one or carries our finalizer.
    pub(crate) fn may_have_load_balancer(&self, classes: &LoadBalancerClasses) -> bool {
        match self.lb {
            LbState::Cleaned => false,
            LbState::Applied { .. } => true,
            LbState::Unknown => {
                wants_load_balancer(classes, &self.service) || has_finalizer(classes, &self.service)
            }
        }
    }
}

/// The step a sync of a Service in the cache takes (after the deletion of a replaced
/// Service's load balancer, if [`Plan::delete_replaced`] asks for one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The Service wants no load balancer from us (another type, a `loadBalancerClass`) or
    /// is being deleted: delete the load balancer if the cloud has one, remove our
    /// finalizer, clear the status (Go's delete branch).
    CleanUp,
    /// The load balancer was ensured from a version that differs in nothing it uses, the
    /// last sync did not fail, and the eligible Nodes differ from those it was given:
    /// `update_load_balancer` with them (Go's node-sync update), no full ensure.
    UpdateHosts,
    /// Everything else the Service wants a load balancer for (never ensured, last sync
    /// failed, or something it uses changed): our finalizer, `ensure_load_balancer` with
    /// the eligible Nodes, the status.
    Ensure,
    /// Ensured from a version that differs in nothing it uses, with the same Nodes: nothing.
    Nothing,
}

/// What a sync of a Service in the cache does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    /// The record is of another Service under the same name (deleted and created again
    /// while the controller looked away) which may have a load balancer: delete that
    /// version's load balancer first and forget the record. `step` is then the step of a
    /// Service the controller has no record of.
    pub(crate) delete_replaced: Option<Arc<Service>>,
    /// Then this.
    pub(crate) step: Step,
}

/// What a sync of `service` (the cache's copy) does, given the classes managed, what the
/// controller knew of it when the sync began (`None`: no record) and the eligible Nodes now.
pub(crate) fn plan(
    classes: &LoadBalancerClasses,
    service: &Service,
    known: Option<&Known>,
    hosts: &NodeSet,
) -> Plan {
    let (delete_replaced, known) = match known {
        // Another UID: whatever that record says is about another Service.
        Some(other) if other.service.metadata.uid != service.metadata.uid => (
            other
                .may_have_load_balancer(classes)
                .then(|| other.service.clone()),
            None,
        ),
        known => (None, known),
    };
    Plan {
        delete_replaced,
        step: step(classes, service, known, hosts),
    }
}

/// The step for a Service whose record (if any) is its own.
fn step(
    classes: &LoadBalancerClasses,
    service: &Service,
    known: Option<&Known>,
    hosts: &NodeSet,
) -> Step {
    if takes_delete_branch(classes, service) {
        return Step::CleanUp;
    }
    match known {
        // Nothing the load balancer uses changed since it was ensured: at most its Nodes.
        Some(Known {
            lb:
                LbState::Applied {
                    service: applied,
                    hosts: given,
                },
            failing: false,
            ..
        }) if needs_update(classes, applied, service).is_none() => {
            if hosts_stale(HostsState::Applied(given), hosts) {
                Step::UpdateHosts
            } else {
                Step::Nothing
            }
        }
        _ => Step::Ensure,
    }
}

/// What a sync of a Service gone from the cache does.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GoneStep {
    /// No record: the controller never did anything for it.
    Nothing,
    /// Its load balancer cannot exist (deleted already, or never wanted): forget the
    /// record.
    Forget,
    /// Its last version may have a load balancer (the Service went without our cleanup:
    /// someone removed our finalizer, or it went before this controller synced it): delete
    /// that, with events, then forget the record (Go's `processLoadBalancerDelete`).
    DeleteLoadBalancer { last: Arc<Service> },
}

/// What a sync of a Service gone from the cache does, given the classes managed and what
/// the controller knew of it when the sync began (`None`: no record).
pub(crate) fn plan_gone(classes: &LoadBalancerClasses, known: Option<&Known>) -> GoneStep {
    match known {
        None => GoneStep::Nothing,
        Some(known) if !known.may_have_load_balancer(classes) => GoneStep::Forget,
        Some(known) => GoneStep::DeleteLoadBalancer {
            last: known.service.clone(),
        },
    }
}

/// Whether the delete branch calls `ensure_load_balancer_deleted`, given what
/// `get_load_balancer` answered: yes when the load balancer exists (Go's rule), no when it
/// does not, and yes when a hint led to one that is not the Service's
/// ([`CloudError::NotOwned`]) — the provider then deletes only what is the Service's own,
/// found without the hint, and the deletion is not held up by the foreign one. Any other
/// error is the sync's error.
pub(crate) fn delete_call_needed(
    answer: &CloudResult<Option<LoadBalancerStatus>>,
) -> Result<bool, &CloudError> {
    match answer {
        Ok(status) => Ok(status.is_some()),
        Err(err) if err.is_not_owned() => Ok(true),
        Err(err) => Err(err),
    }
}

/// What an `ensure_load_balancer_deleted` answer means.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deletion<'a> {
    /// Deleted, or already gone, or another controller's (`ImplementedElsewhere` is
    /// ignored, as in Go): go on.
    Done,
    /// The load balancer the Service's hint leads to is not the Service's; the provider left
    /// it alone (and deleted what was the Service's own, if anything): go on, with a
    /// `LoadBalancerNotOwned` Warning. The finalizer is not held for a load balancer that is
    /// not ours to delete.
    LeftAlone(&'a CloudError),
    /// Failed: keep the finalizer, retry.
    Failed(&'a CloudError),
}

/// What an `ensure_load_balancer_deleted` answer means (see [`Deletion`]).
pub(crate) fn deletion(result: &CloudResult<()>) -> Deletion<'_> {
    match result {
        Ok(()) => Deletion::Done,
        Err(err) if err.is_implemented_elsewhere() => Deletion::Done,
        Err(err) if err.is_not_owned() => Deletion::LeftAlone(err),
        Err(err) => Deletion::Failed(err),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ServiceStatus;

    use super::fixtures::{deleting, go, ing, lb_service, with_finalizer, with_spec};
    use super::wants::wanted_on_add;
    use super::*;

    // the controller kept of its last sync.

    fn hosts(names: &[&str]) -> NodeSet {
        names
            .iter()
            .map(|n| ((*n).to_owned(), format!("fake://{n}")))
            .collect()
    }

    /// The record of a load balancer ensured from `service` with `given`.
    fn ensured(service: &Service, given: &NodeSet) -> Known {
        Known {
            service: Arc::new(service.clone()),
            lb: LbState::Applied {
                service: Arc::new(service.clone()),
                hosts: Arc::new(given.clone()),
            },
            failing: false,
        }
    }

    fn known(service: &Service, lb: LbState, failing: bool) -> Known {
        Known {
            service: Arc::new(service.clone()),
            lb,
            failing,
        }
    }

    fn just(step: Step) -> Plan {
        Plan {
            delete_replaced: None,
            step,
        }
    }

    fn with_uid(mut s: Service, uid: &str) -> Service {
        s.metadata.uid = Some(uid.into());
        s
    }

    #[test]
    fn a_new_load_balancer_service_is_ensured() {
        let web = lb_service();
        assert_eq!(
            plan(&go(), &web, None, &hosts(&["a", "b"])),
            just(Step::Ensure)
        );
        // No eligible Node changes nothing: it is ensured (with a Warning).
        assert_eq!(plan(&go(), &web, None, &NodeSet::new()), just(Step::Ensure));
    }

    #[test]
    fn a_record_with_nothing_applied_is_ensured_in_full() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        // The first sync failed before the cloud answered: the retry ensures.
        let failed_first = known(&web, LbState::Unknown, true);
        assert_eq!(
            plan(&go(), &web, Some(&failed_first), &now),
            just(Step::Ensure)
        );
        // The record of a deleted Service seen again (same UID): nothing applied.
        let unknown = known(&web, LbState::Unknown, false);
        assert_eq!(plan(&go(), &web, Some(&unknown), &now), just(Step::Ensure));
        // Cleaned up (the type changed away), then the type changed back.
        let cluster_ip = with_spec(web.clone(), |s| s.type_ = Some("ClusterIP".into()));
        let cleaned = known(&cluster_ip, LbState::Cleaned, false);
        assert_eq!(plan(&go(), &web, Some(&cleaned), &now), just(Step::Ensure));
    }

    #[test]
    fn an_ensured_service_with_the_same_nodes_needs_nothing() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a", "b"]);
        assert_eq!(
            plan(&go(), &web, Some(&ensured(&web, &now)), &now),
            just(Step::Nothing)
        );
        // Changes the load balancer does not use (labels, status, resource version) are
        // not a reason either.
        let mut relabelled = web.clone();
        relabelled.metadata.labels = Some(BTreeMap::from([("team".into(), "x".into())]));
        relabelled.metadata.resource_version = Some("7".into());
        relabelled.status = Some(ServiceStatus::default());
        assert_eq!(
            plan(&go(), &relabelled, Some(&ensured(&web, &now)), &now),
            just(Step::Nothing)
        );
        // One shared set is the same set.
        let shared = Arc::new(now.clone());
        let record = Known {
            lb: LbState::Applied {
                service: Arc::new(web.clone()),
                hosts: shared.clone(),
            },
            ..ensured(&web, &now)
        };
        assert_eq!(
            plan(&go(), &web, Some(&record), &shared),
            just(Step::Nothing)
        );
    }

    #[test]
    fn only_a_node_change_updates_the_hosts_without_an_ensure() {
        let web = with_finalizer(lb_service());
        let record = ensured(&web, &hosts(&["a", "b"]));
        for (now, why) in [
            (hosts(&["a", "b", "c"]), "a Node came"),
            (hosts(&["a"]), "a Node left (or was excluded)"),
            (NodeSet::new(), "no Node is left"),
            (
                {
                    let mut moved = hosts(&["a", "b"]);
                    moved.insert("b".into(), "fake://b2".into());
                    moved
                },
                "a provider ID changed",
            ),
            (
                NodeSet::from([("a".into(), "fake://a".into()), ("b".into(), String::new())]),
                "a provider ID is not set yet",
            ),
        ] {
            assert_eq!(
                plan(&go(), &web, Some(&record), &now),
                just(Step::UpdateHosts),
                "{why}"
            );
        }
    }

    #[test]
    fn a_port_or_annotation_change_ensures_in_full() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&web, &now);
        let port = with_spec(web.clone(), |s| s.ports.as_mut().unwrap()[0].port = 8080);
        assert_eq!(plan(&go(), &port, Some(&record), &now), just(Step::Ensure));
        let mut annotated = web.clone();
        annotated.metadata.annotations =
            Some(BTreeMap::from([("example.com/x".into(), "1".into())]));
        assert_eq!(
            plan(&go(), &annotated, Some(&record), &now),
            just(Step::Ensure)
        );
        let ranges = with_spec(web.clone(), |s| {
            s.load_balancer_source_ranges = Some(vec!["10.0.0.0/8".into()]);
        });
        assert_eq!(
            plan(&go(), &ranges, Some(&record), &now),
            just(Step::Ensure)
        );
        // A change of the Service and of the Nodes: the ensure takes both.
        assert_eq!(
            plan(&go(), &port, Some(&record), &hosts(&["a", "b"])),
            just(Step::Ensure)
        );
    }

    #[test]
    fn a_failing_service_is_ensured_in_full_even_when_only_nodes_changed() {
        let web = with_finalizer(lb_service());
        let given = hosts(&["a"]);
        let failing = Known {
            failing: true,
            ..ensured(&web, &given)
        };
        // The update failed (the load balancer still exists): the retry ensures.
        assert_eq!(
            plan(&go(), &web, Some(&failing), &hosts(&["a", "b"])),
            just(Step::Ensure)
        );
        assert_eq!(
            plan(&go(), &web, Some(&failing), &given),
            just(Step::Ensure)
        );
    }

    #[test]
    fn a_type_change_away_cleans_up() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&web, &now);
        for ty in ["ClusterIP", "NodePort", "ExternalName"] {
            let away = with_spec(web.clone(), |s| s.type_ = Some(ty.into()));
            assert_eq!(
                plan(&go(), &away, Some(&record), &now),
                just(Step::CleanUp),
                "{ty}"
            );
        }
        // Without our finalizer (never ensured, or removed by someone) too.
        let away = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        assert_eq!(plan(&go(), &away, None, &now), just(Step::CleanUp));
    }

    #[test]
    fn a_service_being_deleted_is_cleaned_up_although_nothing_it_uses_changed() {
        let web = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let going = deleting(web.clone());
        assert_eq!(needs_update(&go(), &web, &going), None);
        assert_eq!(
            plan(&go(), &going, Some(&ensured(&web, &now)), &now),
            just(Step::CleanUp)
        );
        // Deleted while no controller ran: there is no record, the finalizer held it.
        assert_eq!(plan(&go(), &going, None, &now), just(Step::CleanUp));
        // Even with the Nodes changed, or the last sync failed.
        let failing = Known {
            failing: true,
            ..ensured(&web, &now)
        };
        assert_eq!(
            plan(&go(), &going, Some(&failing), &hosts(&["b"])),
            just(Step::CleanUp)
        );
    }

    #[test]
    fn a_load_balancer_class_is_not_ours_so_a_sync_cleans_up() {
        let classed = with_spec(lb_service(), |s| {
            s.load_balancer_class = Some("example.com/other-lb".into());
        });
        // Added with a class: not even queued.
        assert!(!wanted_on_add(&go(), &classed));
        // Synced anyway (the class was set on a Service we had ensured): ours goes.
        let now = hosts(&["a"]);
        let ours = with_finalizer(lb_service());
        let classed = with_finalizer(classed);
        assert_eq!(
            plan(&go(), &classed, Some(&ensured(&ours, &now)), &now),
            just(Step::CleanUp)
        );
        assert_eq!(plan(&go(), &classed, None, &now), just(Step::CleanUp));
    }

    #[test]
    fn implemented_elsewhere_is_followed_like_an_ensured_load_balancer() {
        // An ensure that the provider answers with ImplementedElsewhere is recorded as
        // applied, with the Nodes of that sync: no retry, only Node changes are passed on.
        let web = with_finalizer(lb_service());
        let given = hosts(&["a"]);
        let record = ensured(&web, &given);
        assert_eq!(
            plan(&go(), &web, Some(&record), &given),
            just(Step::Nothing)
        );
        assert_eq!(
            plan(&go(), &web, Some(&record), &hosts(&["a", "b"])),
            just(Step::UpdateHosts)
        );
    }

    #[test]
    fn a_replaced_uid_deletes_the_old_load_balancer_first() {
        let old = with_finalizer(lb_service());
        let new = with_uid(lb_service(), "uid-2");
        let now = hosts(&["a"]);
        // The old one was ensured: its load balancer goes, then the new one is ensured in
        // full, although its spec and the Nodes are the same.
        let record = ensured(&old, &now);
        assert_eq!(
            plan(&go(), &new, Some(&record), &now),
            Plan {
                delete_replaced: Some(Arc::new(old.clone())),
                step: Step::Ensure,
            }
        );
        // Nothing applied, but the old one wanted a load balancer, or carried our
        // finalizer: it may have one.
        for old in [
            lb_service(),
            with_spec(with_finalizer(lb_service()), |s| {
                s.type_ = Some("ClusterIP".into());
            }),
        ] {
            let record = known(&old, LbState::Unknown, true);
            assert_eq!(
                plan(&go(), &new, Some(&record), &now).delete_replaced,
                Some(Arc::new(old.clone()))
            );
        }
    }

    #[test]
    fn after_a_replaced_uid_the_new_service_is_planned_as_never_seen() {
        let old = with_finalizer(lb_service());
        let now = hosts(&["a"]);
        let record = ensured(&old, &now);
        // The new one wants no load balancer, or is being deleted: cleaned up.
        for new in [
            with_spec(with_uid(lb_service(), "uid-2"), |s| {
                s.type_ = Some("ClusterIP".into());
            }),
            deleting(with_finalizer(with_uid(lb_service(), "uid-2"))),
        ] {
            assert_eq!(
                plan(&go(), &new, Some(&record), &now),
                Plan {
                    delete_replaced: Some(Arc::new(old.clone())),
                    step: Step::CleanUp,
                }
            );
        }
        // The old record's failure is not the new one's: ensured all the same.
        let failing = Known {
            failing: true,
            ..record
        };
        let new = with_uid(lb_service(), "uid-2");
        assert_eq!(plan(&go(), &new, Some(&failing), &now).step, Step::Ensure);
    }

    #[test]
    fn a_replaced_uid_without_a_load_balancer_is_just_forgotten() {
        let new = with_uid(lb_service(), "uid-2");
        let now = hosts(&["a"]);
        let gone = with_finalizer(lb_service());
        let never = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        for record in [
            // Its load balancer was deleted already.
            known(&gone, LbState::Cleaned, false),
            // It never wanted one, and has no finalizer.
            known(&never, LbState::Unknown, false),
        ] {
            assert_eq!(plan(&go(), &new, Some(&record), &now), just(Step::Ensure));
        }
        // It had a class: its load balancer, if any, is another controller's to delete.
        let classed_old = with_spec(lb_service(), |s| {
            s.load_balancer_class = Some("x".into());
        });
        let record = known(&classed_old, LbState::Unknown, false);
        assert_eq!(plan(&go(), &new, Some(&record), &now), just(Step::Ensure));
    }

    // The provider's answers on the delete branch.

    fn lb_status(ip: &str) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: Some(vec![ing(Some(ip), None)]),
        }
    }

    #[test]
    fn the_delete_call_is_made_for_an_existing_or_a_foreign_load_balancer() {
        assert!(matches!(
            delete_call_needed(&Ok(Some(lb_status("1.2.3.4")))),
            Ok(true)
        ));
        assert!(matches!(delete_call_needed(&Ok(None)), Ok(false)));
        // A hint led to another Service's load balancer: the provider is asked to delete
        // the Service's own (it leaves the foreign one alone), and deletion is not stuck.
        let foreign = Err(CloudError::not_owned("lb-1", "another Service's"));
        assert!(matches!(delete_call_needed(&foreign), Ok(true)));
        let failed = Err(CloudError::msg("the cloud is down"));
        assert!(
            matches!(delete_call_needed(&failed), Err(e) if e.to_string() == "the cloud is down")
        );
    }

    #[test]
    fn a_foreign_load_balancer_is_left_alone_and_does_not_hold_the_finalizer() {
        assert!(matches!(deletion(&Ok(())), Deletion::Done));
        assert!(matches!(
            deletion(&Err(CloudError::ImplementedElsewhere)),
            Deletion::Done
        ));
        let foreign = Err(CloudError::not_owned("lb-1", "tagged for cluster other"));
        assert!(matches!(deletion(&foreign), Deletion::LeftAlone(e) if e.is_not_owned()));
        let failed = Err(CloudError::msg("boom"));
        assert!(matches!(deletion(&failed), Deletion::Failed(e) if e.to_string() == "boom"));
        // Retried, after its delay.
        let busy = Err(CloudError::retry_after(
            "busy",
            std::time::Duration::from_secs(1),
        ));
        assert!(matches!(deletion(&busy), Deletion::Failed(e) if e.retry_after_delay().is_some()));
    }

    #[test]
    fn a_gone_service_without_a_record_needs_nothing() {
        assert_eq!(plan_gone(&go(), None), GoneStep::Nothing);
    }

    #[test]
    fn a_gone_service_whose_load_balancer_cannot_exist_is_forgotten() {
        // Cleaned up before it went (deleted with our finalizer).
        let web = deleting(with_finalizer(lb_service()));
        assert_eq!(
            plan_gone(&go(), Some(&known(&web, LbState::Cleaned, false))),
            GoneStep::Forget
        );
        // Never wanted one and had no finalizer.
        let cluster_ip = with_spec(lb_service(), |s| s.type_ = Some("ClusterIP".into()));
        assert_eq!(
            plan_gone(&go(), Some(&known(&cluster_ip, LbState::Unknown, false))),
            GoneStep::Forget
        );
    }

    #[test]
    fn a_gone_service_that_may_have_a_load_balancer_gets_it_deleted() {
        let web = lb_service();
        let now = hosts(&["a"]);
        // Ensured, then deleted after someone removed our finalizer.
        assert_eq!(
            plan_gone(&go(), Some(&ensured(&web, &now))),
            GoneStep::DeleteLoadBalancer {
                last: Arc::new(web.clone())
            }
        );
        // Never synced by this controller (it started after the finalizer went): its last
        // version wanted a load balancer, or carried our finalizer.
        let finalized = with_spec(with_finalizer(lb_service()), |s| {
            s.type_ = Some("ClusterIP".into());
        });
        for last in [web, finalized] {
            assert_eq!(
                plan_gone(&go(), Some(&known(&last, LbState::Unknown, true))),
                GoneStep::DeleteLoadBalancer {
                    last: Arc::new(last.clone())
                }
            );
        }
    }

    #[test]
    fn may_have_a_load_balancer_unless_cleaned_or_never_wanted() {
        let web = lb_service();
        let now = hosts(&["a"]);
        assert!(ensured(&web, &now).may_have_load_balancer(&go()));
        assert!(known(&web, LbState::Unknown, false).may_have_load_balancer(&go()));
        assert!(!known(&web, LbState::Cleaned, false).may_have_load_balancer(&go()));
        let cluster_ip = with_spec(web.clone(), |s| s.type_ = Some("ClusterIP".into()));
        assert!(!known(&cluster_ip, LbState::Unknown, false).may_have_load_balancer(&go()));
        assert!(
            known(&with_finalizer(cluster_ip), LbState::Unknown, false)
                .may_have_load_balancer(&go())
        );
        let classed = with_spec(web, |s| s.load_balancer_class = Some("x".into()));
        assert!(!known(&classed, LbState::Unknown, false).may_have_load_balancer(&go()));
    }
}
