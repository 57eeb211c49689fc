//! The Service conditions the controller writes when `--service-conditions` is on, with the
//! names KEP-4631 proposed: [`LOAD_BALANCER_PROVISIONING`], [`LOAD_BALANCER_SERVING`] and
//! [`LOAD_BALANCER_DEGRADED`]. From what a sync found ([`Observed`]) they give the
//! conditions it wants ([`wanted`]), and from those and the Service's current list the new
//! list ([`merged`]), or `None` when nothing changes, so a steady state writes nothing.
//! `lastTransitionTime` moves only when a condition's status does; every condition carries
//! the Service's `metadata.generation` as `observedGeneration`, and a message is cut to
//! 1 KiB.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::super::failure::cut_message;

/// `True` while the load balancer is being brought to what the Service asks for (the cloud
/// still brings it up); `False` once it is (reason `Provisioned`) or when that failed (the
/// reason of the Warning Event, e.g. `SyncLoadBalancerFailed`).
pub const LOAD_BALANCER_PROVISIONING: &str = "LoadBalancerProvisioning";
/// `True` once the load balancer is ensured and its address written (reason
/// `LoadBalancerEnsured`); `False` while the Service has no address yet (the reason says
/// why: `Provisioning`, or the failure's).
pub const LOAD_BALANCER_SERVING: &str = "LoadBalancerServing";
/// `True` when the provider reports the load balancer cannot serve as it should (e.g. no
/// backend passes its health check), with the provider's reason; `False` when it reports
/// it healthy. Absent for a provider that reports no health.
pub const LOAD_BALANCER_DEGRADED: &str = "LoadBalancerDegraded";

/// The three condition types, for clearing them.
const OURS: [&str; 3] = [
    LOAD_BALANCER_PROVISIONING,
    LOAD_BALANCER_SERVING,
    LOAD_BALANCER_DEGRADED,
];

/// What a sync found, as the conditions see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Observed {
    /// Ensured; the ingress is written in the same request.
    Ensured,
    /// The cloud is still bringing the load balancer up: the provider's message.
    Provisioning(String),
    /// The sync failed: the Warning's reason and message.
    Failed { reason: String, message: String },
    /// The provider's health report: degraded (reason, message) or not.
    Health(Option<(String, String)>),
}

/// One condition as wanted: its type, status, reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wanted {
    pub(crate) type_: &'static str,
    pub(crate) status: bool,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl Wanted {
    fn new(type_: &'static str, status: bool, reason: &str, message: &str) -> Self {
        Self {
            type_,
            status,
            reason: reason_or(reason, "Unknown"),
            message: cut_message(message.to_owned()),
        }
    }
}

/// The conditions `observed` asks for, given whether the Service has an address
/// (`serving`): a failure after the address was written leaves `LoadBalancerServing` as it
/// is, since the load balancer still answers at it.
pub(crate) fn wanted(observed: &Observed, serving: bool) -> Vec<Wanted> {
    match observed {
        Observed::Ensured => vec![
            Wanted::new(
                LOAD_BALANCER_PROVISIONING,
                false,
                "Provisioned",
                "The load balancer is as the Service asks",
            ),
            Wanted::new(
                LOAD_BALANCER_SERVING,
                true,
                "LoadBalancerEnsured",
                "The load balancer is ensured and its address written",
            ),
        ],
        Observed::Provisioning(message) => {
            let mut list = vec![Wanted::new(
                LOAD_BALANCER_PROVISIONING,
                true,
                "Provisioning",
                message,
            )];
            if !serving {
                list.push(Wanted::new(
                    LOAD_BALANCER_SERVING,
                    false,
                    "Provisioning",
                    "The cloud is still bringing the load balancer up",
                ));
            }
            list
        }
        Observed::Failed { reason, message } => {
            let mut list = vec![Wanted::new(
                LOAD_BALANCER_PROVISIONING,
                false,
                reason,
                message,
            )];
            if !serving {
                list.push(Wanted::new(LOAD_BALANCER_SERVING, false, reason, message));
            }
            list
        }
        Observed::Health(None) => vec![Wanted::new(
            LOAD_BALANCER_DEGRADED,
            false,
            "Healthy",
            "The provider reports the load balancer healthy",
        )],
        Observed::Health(Some((reason, message))) => {
            vec![Wanted::new(LOAD_BALANCER_DEGRADED, true, reason, message)]
        }
    }
}

/// The Service's conditions.
pub(crate) fn conditions(service: &Service) -> &[Condition] {
    service
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// The Service's conditions with `wanted` set, at `now`, or `None` when they say it
/// already. Others' conditions are kept, in place.
pub(crate) fn merged(service: &Service, wanted: &[Wanted], now: &Time) -> Option<Vec<Condition>> {
    let generation = service.metadata.generation;
    let mut list = conditions(service).to_vec();
    let mut changed = false;
    for w in wanted {
        let status = if w.status { "True" } else { "False" };
        let new = |last: Option<&Condition>| Condition {
            type_: w.type_.to_owned(),
            status: status.to_owned(),
            reason: w.reason.clone(),
            message: w.message.clone(),
            observed_generation: generation,
            last_transition_time: match last {
                Some(last) if last.status == status => last.last_transition_time.clone(),
                _ => now.clone(),
            },
        };
        match list.iter_mut().find(|c| c.type_ == w.type_) {
            Some(c) => {
                let same = c.status == status
                    && c.reason == w.reason
                    && c.message == w.message
                    && c.observed_generation == generation;
                if !same {
                    *c = new(Some(c));
                    changed = true;
                }
            }
            None => {
                list.push(new(None));
                changed = true;
            }
        }
    }
    changed.then_some(list)
}

/// The Service's conditions without ours, or `None` when it has none of ours.
pub(crate) fn without_ours(service: &Service) -> Option<Vec<Condition>> {
    let list = conditions(service);
    list.iter()
        .any(|c| OURS.contains(&c.type_.as_str()))
        .then(|| {
            list.iter()
                .filter(|c| !OURS.contains(&c.type_.as_str()))
                .cloned()
                .collect()
        })
}

/// `reason` as the API server accepts a condition's reason (`[A-Za-z]([A-Za-z0-9_,:]*
/// [A-Za-z0-9_])?`, at most 1024 bytes): other characters dropped; `fallback` when nothing
/// is left. A provider's reason is not trusted to be valid.
pub(crate) fn reason_or(reason: &str, fallback: &str) -> String {
    let mut out: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .skip_while(|c| !c.is_ascii_alphabetic())
        .take(1024)
        .collect();
    while out.ends_with([',', ':']) {
        out.pop();
    }
    if out.is_empty() {
        fallback.to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceStatus;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn with(conditions: Vec<Condition>, generation: i64) -> Service {
        let mut s = Service::default();
        s.metadata.generation = Some(generation);
        s.status = Some(ServiceStatus {
            conditions: Some(conditions),
            ..ServiceStatus::default()
        });
        s
    }

    fn get<'a>(list: &'a [Condition], type_: &str) -> &'a Condition {
        list.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn ensured_is_serving_and_provisioned() {
        let s = with(vec![], 3);
        let list = merged(&s, &wanted(&Observed::Ensured, false), &at(10)).unwrap();
        let serving = get(&list, LOAD_BALANCER_SERVING);
        assert_eq!(serving.status, "True");
        assert_eq!(serving.reason, "LoadBalancerEnsured");
        assert_eq!(serving.observed_generation, Some(3));
        assert_eq!(serving.last_transition_time, at(10));
        assert_eq!(get(&list, LOAD_BALANCER_PROVISIONING).status, "False");
        // The same again: nothing to write.
        assert_eq!(
            merged(&with(list, 3), &wanted(&Observed::Ensured, true), &at(20)),
            None
        );
    }

    #[test]
    fn the_transition_time_moves_only_with_the_status() {
        let failed = Observed::Failed {
            reason: "SyncLoadBalancerFailed".into(),
            message: "first".into(),
        };
        let list = merged(&with(vec![], 1), &wanted(&failed, false), &at(10)).unwrap();
        assert_eq!(get(&list, LOAD_BALANCER_SERVING).status, "False");
        assert_eq!(
            get(&list, LOAD_BALANCER_PROVISIONING).reason,
            "SyncLoadBalancerFailed"
        );
        // Another message, same status: rewritten, time kept.
        let again = Observed::Failed {
            reason: "SyncLoadBalancerFailed".into(),
            message: "second".into(),
        };
        let list = merged(&with(list, 1), &wanted(&again, false), &at(20)).unwrap();
        let p = get(&list, LOAD_BALANCER_PROVISIONING);
        assert_eq!(p.message, "second");
        assert_eq!(p.last_transition_time, at(10));
        // Ensured: Serving flips (time moves), Provisioning stays False (time kept).
        let list = merged(&with(list, 1), &wanted(&Observed::Ensured, false), &at(30)).unwrap();
        assert_eq!(
            get(&list, LOAD_BALANCER_SERVING).last_transition_time,
            at(30)
        );
        assert_eq!(
            get(&list, LOAD_BALANCER_PROVISIONING).last_transition_time,
            at(10)
        );
        // A new generation alone is a write.
        assert!(merged(&with(list, 2), &wanted(&Observed::Ensured, true), &at(40)).is_some());
    }

    #[test]
    fn a_failure_after_the_address_keeps_serving() {
        let failed = Observed::Failed {
            reason: "LoadBalancerNotOwned".into(),
            message: "no".into(),
        };
        let w = wanted(&failed, true);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].type_, LOAD_BALANCER_PROVISIONING);
        let w = wanted(&Observed::Provisioning("new".into()), false);
        assert_eq!(w.len(), 2);
        assert!(w[0].status);
        assert!(!w[1].status);
    }

    #[test]
    fn others_conditions_are_kept_and_ours_cleared() {
        let theirs = Condition {
            type_: "example.com/Ready".into(),
            status: "True".into(),
            reason: "Because".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: at(1),
        };
        let s = with(vec![theirs.clone()], 1);
        assert_eq!(without_ours(&s), None);
        let list = merged(&s, &wanted(&Observed::Ensured, false), &at(2)).unwrap();
        assert_eq!(list[0], theirs);
        assert_eq!(list.len(), 3);
        assert_eq!(without_ours(&with(list, 1)), Some(vec![theirs]));
    }

    #[test]
    fn degradation_is_its_own_condition() {
        let w = wanted(
            &Observed::Health(Some(("NoHealthyBackends".into(), "0 of 2".into()))),
            true,
        );
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].type_, LOAD_BALANCER_DEGRADED);
        assert!(w[0].status);
        assert!(!wanted(&Observed::Health(None), true)[0].status);
    }

    #[test]
    fn a_providers_reason_is_made_valid_and_messages_are_bounded() {
        assert_eq!(reason_or("no healthy backends!", "X"), "nohealthybackends");
        assert_eq!(reason_or("1st:Reason:", "X"), "st:Reason");
        assert_eq!(reason_or("", "Unknown"), "Unknown");
        assert_eq!(reason_or("%%%", "Unknown"), "Unknown");
        assert_eq!(reason_or(&"a".repeat(5000), "X").len(), 1024);
        let w = Wanted::new(LOAD_BALANCER_DEGRADED, true, "R", &"m".repeat(100_000));
        assert!(w.message.len() <= 1100);
    }
}
