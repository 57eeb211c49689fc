//! The route controller's settings, checked once at startup so a bad flag stops the
//! controller manager with a message that names it.

use crate::metrics::ControllerMetrics;
use crate::shadow::ControllerShadow;
use std::time::Duration;

use super::cidr::Cidr;
use crate::controllers::node_ownership::NodeOwnership;

/// Go's `--route-reconciliation-period` default.
pub const DEFAULT_RECONCILIATION_PERIOD: Duration = Duration::from_secs(10);
/// How many route creates and deletes may be in flight at once, together; Go's
/// `maxConcurrentRouteOperations`, which also bounds both kinds through one limiter.
pub const DEFAULT_MAX_CONCURRENT_OPERATIONS: usize = 200;
/// The longest the controller waits after a Node change, collecting further changes, before
/// it reconciles; it reconciles sooner once changes have stopped for a tenth of it.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(1);

/// A flag the route controller cannot work with. The message names the flag and the value.
///
/// ```
/// use ccm_runtime::controllers::route::RouteControllerConfig;
/// let err = RouteControllerConfig::new("kubernetes", "10.0.0.0/8,10.1.0.0/16").unwrap_err();
/// assert_eq!(err.flag(), "--cluster-cidr");
/// assert!(err.to_string().starts_with("invalid --cluster-cidr \"10.0.0.0/8,10.1.0.0/16\": "));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag} {value:?}: {reason}")]
pub struct RouteConfigError {
    flag: &'static str,
    value: String,
    reason: String,
}

impl RouteConfigError {
    fn new(flag: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            flag,
            value: value.into(),
            reason: reason.into(),
        }
    }

    /// The flag, e.g. `--cluster-cidr`.
    pub fn flag(&self) -> &'static str {
        self.flag
    }

    /// The value given.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// What is wrong with it.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Settings of the route controller; only [`RouteControllerConfig::new`] and the `with_*`
/// methods make one, so every value in it has been checked.
#[derive(Clone, Debug)]
pub struct RouteControllerConfig {
    cluster_name: String,
    cluster_cidrs: Vec<Cidr>,
    reconciliation_period: Duration,
    max_concurrent_operations: usize,
    debounce: Duration,
    metrics: Option<ControllerMetrics>,
    shadow: Option<ControllerShadow>,
    node_ownership: NodeOwnership,
}

impl RouteControllerConfig {
    /// Settings for the cluster `cluster_name` (`--cluster-name`) whose pods live in
    /// `cluster_cidr` (`--cluster-cidr`), with the other settings at their defaults.
    ///
    /// `cluster_cidr` is a comma-separated list of one CIDR, or two of different IP
    /// families (dual-stack). It is required: build this only when cloud routes are
    /// configured (`--configure-cloud-routes`), and an empty value is an error, as in Go.
    /// Items may be padded with spaces; a CIDR with host bits set means its network
    /// (`10.0.0.1/8` is `10.0.0.0/8`), as Go's parser reads it.
    ///
    /// ```
    /// use ccm_runtime::controllers::route::RouteControllerConfig;
    /// let config = RouteControllerConfig::new("kubernetes", "10.244.0.0/16,fd00:10:244::/48")?;
    /// assert_eq!(config.cluster_cidrs().len(), 2);
    /// # Ok::<(), ccm_runtime::controllers::route::RouteConfigError>(())
    /// ```
    pub fn new(
        cluster_name: impl Into<String>,
        cluster_cidr: &str,
    ) -> Result<Self, RouteConfigError> {
        let cluster_name = cluster_name.into();
        if cluster_name.is_empty() {
            return Err(RouteConfigError::new(
                "--cluster-name",
                "",
                "must not be empty: routes are listed and created per cluster name",
            ));
        }
        Ok(Self {
            cluster_name,
            cluster_cidrs: parse_cluster_cidrs(cluster_cidr)?,
            reconciliation_period: DEFAULT_RECONCILIATION_PERIOD,
            max_concurrent_operations: DEFAULT_MAX_CONCURRENT_OPERATIONS,
            debounce: DEFAULT_DEBOUNCE,
            metrics: None,
            shadow: None,
            node_ownership: NodeOwnership::all(),
        })
    }

    /// Sets which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`;
    /// by default every Node, as Go). The others get no route and no `NetworkUnavailable`
    /// condition, and a listed route whose target is one of them is left alone: not
    /// deleted, not replaced (it is not this controller's to judge: another cloud's
    /// controller, or a person, made it).
    #[must_use]
    pub fn with_node_ownership(mut self, node_ownership: NodeOwnership) -> Self {
        self.node_ownership = node_ownership;
        self
    }

    /// Which Nodes are this cloud's.
    pub fn node_ownership(&self) -> &NodeOwnership {
        &self.node_ownership
    }

    /// Counts each sync with the cloud (each reconcile that listed the routes) in
    /// `metrics.route_sync`, Go's `route_controller_route_sync_total`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: ControllerMetrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Where Go's route controller metrics are counted, if anywhere.
    pub(crate) fn metrics(&self) -> Option<&ControllerMetrics> {
        self.metrics.as_ref()
    }

    /// Shadow mode: each listing of the routes settles `shadow`'s plan.
    #[must_use]
    pub fn with_shadow(mut self, shadow: Option<ControllerShadow>) -> Self {
        self.shadow = shadow;
        self
    }

    /// The plan each listing settles, in shadow mode.
    pub(crate) fn shadow(&self) -> Option<&ControllerShadow> {
        self.shadow.as_ref()
    }

    /// Sets how often all routes are reconciled (`--route-reconciliation-period`, default
    /// 10s). It must be more than zero.
    pub fn with_reconciliation_period(
        mut self,
        period: Duration,
    ) -> Result<Self, RouteConfigError> {
        if period.is_zero() {
            return Err(RouteConfigError::new(
                "--route-reconciliation-period",
                format!("{period:?}"),
                "must be greater than 0",
            ));
        }
        self.reconciliation_period = period;
        Ok(self)
    }

    /// Sets how many route creates and deletes may be in flight at once, together (default
    /// [`DEFAULT_MAX_CONCURRENT_OPERATIONS`], Go's 200). It must be at least 1. Lower it
    /// for a cloud with a tight limit on concurrent or per-second mutations.
    pub fn with_max_concurrent_operations(mut self, max: usize) -> Result<Self, RouteConfigError> {
        if max == 0 {
            return Err(RouteConfigError::new(
                "max concurrent route operations",
                "0",
                "must be at least 1",
            ));
        }
        self.max_concurrent_operations = max;
        Ok(self)
    }

    /// Sets how long the controller waits after a Node change before reconciling, so that a
    /// burst of changes (a hundred Nodes joining) makes one reconcile (default
    /// [`DEFAULT_DEBOUNCE`]). Zero reconciles at once.
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// The cluster name routes are listed and created for.
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// The cluster CIDRs: one, or one per IP family. Routes outside them are never deleted.
    pub fn cluster_cidrs(&self) -> &[Cidr] {
        &self.cluster_cidrs
    }

    /// How often all routes are reconciled.
    pub fn reconciliation_period(&self) -> Duration {
        self.reconciliation_period
    }

    /// How many route creates and deletes may be in flight at once.
    pub fn max_concurrent_operations(&self) -> usize {
        self.max_concurrent_operations
    }

    /// How long after a Node change the controller waits before reconciling.
    pub fn debounce(&self) -> Duration {
        self.debounce
    }
}

/// Parses `--cluster-cidr` as Go's `processCIDRs` and `startRouteController` check it.
fn parse_cluster_cidrs(value: &str) -> Result<Vec<Cidr>, RouteConfigError> {
    const FLAG: &str = "--cluster-cidr";
    let bad = |reason: String| RouteConfigError::new(FLAG, value, reason);
    if value.trim().is_empty() {
        return Err(bad(
            "must be set when cloud routes are configured (--configure-cloud-routes)".to_owned(),
        ));
    }
    let cidrs = value
        .split(',')
        .map(|item| Cidr::parse(item.trim()).map_err(|e| bad(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    match cidrs.as_slice() {
        [_] => {}
        [a, b] if a.is_ipv4() == b.is_ipv4() => {
            let family = if a.is_ipv4() { "IPv4" } else { "IPv6" };
            return Err(bad(format!(
                "two CIDRs must be dual-stack, one IPv4 and one IPv6; both are {family}"
            )));
        }
        [_, _] => {}
        more => {
            return Err(bad(format!(
                "at most two CIDRs (one per IP family) are allowed, got {}",
                more.len()
            )));
        }
    }
    Ok(cidrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(cidr: &str) -> RouteConfigError {
        RouteControllerConfig::new("kubernetes", cidr).unwrap_err()
    }

    #[test]
    fn defaults_match_go() {
        let c = RouteControllerConfig::new("kubernetes", "10.244.0.0/16").unwrap();
        assert_eq!(c.cluster_name(), "kubernetes");
        assert_eq!(c.reconciliation_period(), Duration::from_secs(10));
        assert_eq!(c.max_concurrent_operations(), 200);
        assert_eq!(c.debounce(), DEFAULT_DEBOUNCE);
        assert_eq!(
            c.cluster_cidrs(),
            &["10.244.0.0/16".parse::<Cidr>().unwrap()]
        );
    }

    #[test]
    fn single_and_dual_stack_are_accepted() {
        for ok in [
            "10.244.0.0/16",
            "fd00:10:244::/48",
            "10.244.0.0/16,fd00:10:244::/48",
            "fd00:10:244::/48,10.244.0.0/16",
            " 10.244.0.0/16 , fd00:10:244::/48 ",
            "10.244.0.1/16",
        ] {
            let c = RouteControllerConfig::new("c", ok)
                .unwrap_or_else(|e| panic!("{ok:?} refused: {e}"));
            assert!(!c.cluster_cidrs().is_empty());
        }
    }

    #[test]
    fn empty_is_refused_naming_the_flag() {
        for empty in ["", "  "] {
            let e = err(empty);
            assert_eq!(e.flag(), "--cluster-cidr");
            assert!(e.to_string().contains("--cluster-cidr"), "{e}");
            assert!(e.reason().contains("--configure-cloud-routes"), "{e}");
        }
    }

    #[test]
    fn malformed_is_refused_naming_the_flag_and_value() {
        for bad in [
            "10.244.0.0",
            "10.244.0.0/33",
            "banana",
            "10.244.0.0/16,",
            ",10.244.0.0/16",
            "10.244.0.0/16;fd00::/48",
        ] {
            let e = err(bad);
            assert_eq!(e.flag(), "--cluster-cidr", "{bad:?}");
            assert_eq!(e.value(), bad);
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid --cluster-cidr {bad:?}: ")),
                "{msg}"
            );
        }
        assert!(
            err("10.0.0.0/8,fd00::/200")
                .reason()
                .contains("\"fd00::/200\"")
        );
    }

    #[test]
    fn three_cidrs_are_refused() {
        let e = err("10.0.0.0/8,fd00::/48,10.1.0.0/16");
        assert_eq!(e.flag(), "--cluster-cidr");
        assert!(e.reason().contains("at most two"), "{e}");
        assert!(
            e.to_string().contains("10.0.0.0/8,fd00::/48,10.1.0.0/16"),
            "{e}"
        );
    }

    #[test]
    fn two_of_one_family_are_refused() {
        let e = err("10.0.0.0/8,10.1.0.0/16");
        assert_eq!(e.flag(), "--cluster-cidr");
        assert!(e.reason().contains("both are IPv4"), "{e}");
        let e = err("fd00::/48,fd01::/48");
        assert!(e.reason().contains("both are IPv6"), "{e}");
    }

    #[test]
    fn other_settings_are_checked() {
        let c = RouteControllerConfig::new("c", "10.0.0.0/8").unwrap();
        let e = c
            .clone()
            .with_reconciliation_period(Duration::ZERO)
            .unwrap_err();
        assert_eq!(e.flag(), "--route-reconciliation-period");
        assert!(c.clone().with_max_concurrent_operations(0).is_err());
        let e = RouteControllerConfig::new("", "10.0.0.0/8").unwrap_err();
        assert_eq!(e.flag(), "--cluster-name");
        let c = c
            .with_reconciliation_period(Duration::from_secs(30))
            .unwrap()
            .with_max_concurrent_operations(5)
            .unwrap()
            .with_debounce(Duration::ZERO);
        assert_eq!(c.reconciliation_period(), Duration::from_secs(30));
        assert_eq!(c.max_concurrent_operations(), 5);
        assert_eq!(c.debounce(), Duration::ZERO);
    }
}
