//! Controller registration: one table for the four built-in controllers and a provider's
//! own. A [`Controller`] carries its name and aliases (for `--controllers`), whether `*`
//! enables it, the provider capability it needs, the flags it depends on and its start
//! function; `--controllers` validation, its help text and the "does this controller run"
//! decision all read the same table.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ccm_provider::{BoxError, CloudProvider, MetricsRegistry};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use tokio_util::sync::CancellationToken;

use super::options::{FlagError, Options};
use crate::controllers::node_ownership::NodeOwnership;
use crate::informer::Informer;
use crate::metrics::Metrics;
use crate::serving::Health;
use crate::shadow::{ControllerShadow, Shadow};

/// A running controller: a future that ends when its context's `cancel` token fires.
pub type ControllerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a controller gets when it starts.
#[derive(Clone)]
#[non_exhaustive]
pub struct ControllerContext {
    /// The API client (rate-limited and counted): the manager's own credentials, or under
    /// `--use-service-account-credentials` those of the controller's ServiceAccount
    /// ([`Controller::with_service_account`]). The shared informers list and watch with
    /// the manager's own, as in Go.
    pub client: Client,
    /// The cloud provider.
    pub provider: Arc<dyn CloudProvider>,
    /// The shared Node informer; subscribe before it runs (i.e. in the init function).
    pub nodes: Informer<Node>,
    /// The shared Service informer.
    pub services: Informer<Service>,
    /// The flags.
    pub options: Arc<Options>,
    /// Cancelled on shutdown or when leadership is lost.
    pub cancel: CancellationToken,
    /// The metrics registry served on `/metrics`: register the controller's own metrics
    /// here, once (a controller starts again on every leadership term).
    pub metrics: MetricsRegistry,
    /// Readiness checks: register one for the controller if it can become unhealthy.
    pub health: Health,
    /// The manager's own metrics, for the built-in controllers' queues and Go's metrics.
    pub(crate) manager_metrics: Metrics,
    /// The plan, in shadow mode.
    pub(crate) shadow: Option<Shadow>,
    /// Which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`), shared
    /// by the built-in controllers so that each skipped Node is logged once.
    pub(crate) node_ownership: NodeOwnership,
}

impl ControllerContext {
    /// In shadow mode (`--shadow`), the plan's part for the controller `name`: mark each
    /// sync with [`ControllerShadow::syncing`] (or each pass with
    /// [`ControllerShadow::pass`]) so that what it no longer would change leaves the plan.
    /// `None` when the manager acts. `client` and `provider` are shadowed already: writes
    /// through them are dry runs and plans whatever the controller does.
    #[must_use]
    pub fn shadow(&self, name: &str) -> Option<ControllerShadow> {
        self.shadow.as_ref().map(|s| s.for_controller(name))
    }

    /// Which Nodes are this cloud's (`--node-provider-id-prefix`, `--node-selector`; every
    /// Node by default, as Go): a controller of your own that acts on Nodes or their
    /// instances asks it as the built-in ones do, so a hybrid cluster's other Nodes are
    /// left alone by it too. [`NodeOwnership::check`] logs each skipped Node once, shared
    /// with the built-in controllers; [`NodeOwnership::is_owned`] logs nothing.
    ///
    /// ```
    /// use ccm_core::app::Controller;
    ///
    /// let tagger = Controller::new("acme-instance-tagger", |ctx| {
    ///     let (nodes, ownership) = (ctx.nodes.clone(), ctx.node_ownership().clone());
    ///     let cancel = ctx.cancel.clone();
    ///     Ok(Box::pin(async move {
    ///         for node in nodes.store().state() {
    ///             if ownership.check(&node) {
    ///                 // tag the Node's instance in the cloud
    ///             }
    ///         }
    ///         cancel.cancelled().await;
    ///     }))
    /// });
    /// # let _ = tagger;
    /// ```
    #[must_use]
    pub fn node_ownership(&self) -> &NodeOwnership {
        &self.node_ownership
    }
}

type StartFn = dyn Fn(&ControllerContext) -> Result<ControllerFuture, BoxError> + Send + Sync;
type OptionsPredicate = dyn Fn(&Options) -> bool + Send + Sync;
type OptionsCheck = dyn Fn(&Options) -> Result<(), FlagError> + Send + Sync;

/// A provider capability a controller needs; without it the controller does not start
/// (and says so in the log), as Go's controllers do when the interface reports `false`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// [`CloudProvider::instances`] or [`CloudProvider::legacy_instances`].
    Instances,
    /// [`CloudProvider::load_balancer`].
    LoadBalancer,
    /// [`CloudProvider::routes`].
    Routes,
}

impl Capability {
    /// Whether `provider` offers the capability.
    #[must_use]
    pub fn offered_by(self, provider: &dyn CloudProvider) -> bool {
        match self {
            Self::Instances => {
                provider.instances().is_some() || provider.legacy_instances().is_some()
            }
            Self::LoadBalancer => provider.load_balancer().is_some(),
            Self::Routes => provider.routes().is_some(),
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Instances => "instances",
            Self::LoadBalancer => "load balancers",
            Self::Routes => "routes",
        })
    }
}

/// A controller the manager can run: built-in or a provider's own, registered with
/// [`CloudControllerManager::with_controller`](super::CloudControllerManager::with_controller).
///
/// ```
/// use ccm_core::app::{Capability, Controller, ControllerFuture};
///
/// let gc = Controller::new("acme-lb-gc", |ctx| {
///     let cancel = ctx.cancel.clone();
///     Ok(Box::pin(async move { cancel.cancelled().await }) as ControllerFuture)
/// })
/// .with_alias("lb-gc")
/// .requires(Capability::LoadBalancer)
/// .disabled_by_default();
/// assert_eq!(gc.name(), "acme-lb-gc");
/// assert!(!gc.is_enabled_by_default());
/// ```
#[derive(Clone)]
pub struct Controller {
    name: String,
    aliases: Vec<String>,
    enabled_by_default: bool,
    requires: Vec<Capability>,
    only_if: Option<(&'static str, Arc<OptionsPredicate>)>,
    check: Option<Arc<OptionsCheck>>,
    service_account: Option<String>,
    start: Arc<StartFn>,
}

impl fmt::Debug for Controller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("name", &self.name)
            .field("aliases", &self.aliases)
            .field("enabled_by_default", &self.enabled_by_default)
            .field("requires", &self.requires)
            .field("service_account", &self.service_account())
            .finish_non_exhaustive()
    }
}

/// Whether a selected controller runs, and if not, why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Applies {
    Yes,
    /// The provider lacks this capability.
    MissingCapability(Capability),
    /// The flag that turns it on is off.
    FlagOff(&'static str),
}

impl Controller {
    /// A controller named `name` (as `--controllers` spells it), on by default, needing no
    /// capability. `start` runs on the leader after the provider's `initialize`: subscribe
    /// to the shared informers there and return the controller's future, which must end
    /// when [`ControllerContext::cancel`] fires. An error stops the controller manager.
    pub fn new(
        name: impl Into<String>,
        start: impl Fn(&ControllerContext) -> Result<ControllerFuture, BoxError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            aliases: Vec::new(),
            enabled_by_default: true,
            requires: Vec::new(),
            only_if: None,
            check: None,
            service_account: None,
            start: Arc::new(start),
        }
    }

    /// Another name `--controllers` accepts for it.
    #[must_use]
    pub fn with_alias(mut self, alias: impl Into<String>) -> Self {
        self.aliases.push(alias.into());
        self
    }

    /// Not enabled by `*`: only when `--controllers` names it.
    #[must_use]
    pub fn disabled_by_default(mut self) -> Self {
        self.enabled_by_default = false;
        self
    }

    /// Runs only when the provider offers `capability`.
    #[must_use]
    pub fn requires(mut self, capability: Capability) -> Self {
        self.requires.push(capability);
        self
    }

    /// Runs only when `condition` holds for the flags; `flag` names the flag for the log
    /// line that says the controller was skipped (e.g. `--configure-cloud-routes`).
    #[must_use]
    pub fn only_if(
        mut self,
        flag: &'static str,
        condition: impl Fn(&Options) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.only_if = Some((flag, Arc::new(condition)));
        self
    }

    /// Checks the flags the controller reads at startup, before anything touches the
    /// cluster, when the controller is going to run; an error names the flag.
    #[must_use]
    pub fn check_options(
        mut self,
        check: impl Fn(&Options) -> Result<(), FlagError> + Send + Sync + 'static,
    ) -> Self {
        self.check = Some(Arc::new(check));
        self
    }

    /// Under `--use-service-account-credentials`, the ServiceAccount (in `kube-system`)
    /// whose token the controller's client carries; several controllers may share one.
    /// Without this, the controller's own name.
    #[must_use]
    pub fn with_service_account(mut self, name: impl Into<String>) -> Self {
        self.service_account = Some(name.into());
        self
    }

    /// The ServiceAccount of the controller's client under
    /// `--use-service-account-credentials` (see
    /// [`with_service_account`](Self::with_service_account)).
    #[must_use]
    pub fn service_account(&self) -> &str {
        self.service_account.as_deref().unwrap_or(&self.name)
    }

    /// The name `--controllers` uses.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The other names `--controllers` accepts.
    #[must_use]
    pub fn aliases(&self) -> &[String] {
        &self.aliases
    }

    /// Whether `*` enables it.
    #[must_use]
    pub fn is_enabled_by_default(&self) -> bool {
        self.enabled_by_default
    }

    /// Whether it runs with these flags and this provider, given that `--controllers`
    /// selects it.
    pub(crate) fn applies(&self, options: &Options, provider: &dyn CloudProvider) -> Applies {
        if let Some(&missing) = self.requires.iter().find(|c| !c.offered_by(provider)) {
            return Applies::MissingCapability(missing);
        }
        match &self.only_if {
            Some((flag, condition)) if !condition(options) => Applies::FlagOff(flag),
            _ => Applies::Yes,
        }
    }

    /// The startup check of its flags.
    pub(crate) fn check(&self, options: &Options) -> Result<(), FlagError> {
        self.check.as_ref().map_or(Ok(()), |check| check(options))
    }

    /// Starts it.
    pub(crate) fn start(&self, ctx: &ControllerContext) -> Result<ControllerFuture, BoxError> {
        (self.start)(ctx)
    }
}

/// The `--controllers` help text, listing `controllers` with their aliases.
pub(crate) fn controllers_help(controllers: &[Controller]) -> String {
    let names: Vec<String> = controllers
        .iter()
        .map(|c| {
            let mut name = c.name.clone();
            if !c.aliases.is_empty() {
                name.push_str(&format!(" ({})", c.aliases.join(", ")));
            }
            if !c.enabled_by_default {
                name.push_str(" [off by default]");
            }
            name
        })
        .collect();
    format!(
        "Controllers to enable: '*' enables all on-by-default controllers, 'foo' enables the \
         controller named foo, '-foo' disables it. Names (aliases): {}",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ccm_provider::mock::{MockCloud, MockLoadBalancer, MockRoutes};

    fn noop(name: &str) -> Controller {
        Controller::new(name, |_| Ok(Box::pin(async {}) as ControllerFuture))
    }

    fn options(args: &[&str]) -> Options {
        let mut all = vec!["ccm", "--cloud-provider=x"];
        all.extend_from_slice(args);
        <Options as clap::Parser>::parse_from(all)
    }

    #[test]
    fn capabilities_decide_whether_it_applies() {
        let bare = MockCloud::new("x");
        let lb = MockCloud::new("x").with_load_balancer(MockLoadBalancer::new());
        let c = noop("svc").requires(Capability::LoadBalancer);
        let o = options(&[]);
        assert_eq!(
            c.applies(&o, &bare),
            Applies::MissingCapability(Capability::LoadBalancer)
        );
        assert_eq!(c.applies(&o, &lb), Applies::Yes);
    }

    #[test]
    fn a_flag_condition_decides_after_the_capability() {
        let routes = MockCloud::new("x").with_routes(MockRoutes::new());
        let c = noop("route")
            .requires(Capability::Routes)
            .only_if("--configure-cloud-routes", |o| o.configure_cloud_routes);
        assert_eq!(
            c.applies(&options(&["--configure-cloud-routes=false"]), &routes),
            Applies::FlagOff("--configure-cloud-routes")
        );
        assert_eq!(c.applies(&options(&[]), &routes), Applies::Yes);
        assert_eq!(
            c.applies(&options(&[]), &MockCloud::new("x")),
            Applies::MissingCapability(Capability::Routes)
        );
    }

    #[test]
    fn the_service_account_defaults_to_the_name() {
        assert_eq!(noop("acme-gc").service_account(), "acme-gc");
        assert_eq!(
            noop("acme-gc")
                .with_service_account("acme")
                .service_account(),
            "acme"
        );
    }

    #[test]
    fn the_help_lists_names_aliases_and_defaults() {
        let help = controllers_help(&[noop("a").with_alias("aa"), noop("b").disabled_by_default()]);
        assert!(
            help.ends_with("Names (aliases): a (aa), b [off by default]"),
            "{help}"
        );
    }
}
