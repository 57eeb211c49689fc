//! The controller manager: turns a provider registry into a complete CCM binary (Go's
//! `app.NewCloudControllerManagerCommand` and `Run`).
//!
//! Startup order: parse and check the flags (an error names the flag and nothing touches
//! the cluster), build the provider from `--cloud-config`, reach the API server, serve the
//! endpoints, win the leader election, `initialize` the provider, start the shared
//! informers and each enabled controller. Shutdown (SIGTERM, SIGINT) stops the controllers,
//! lets in-flight reconciles finish (up to a grace period), then releases the Lease so a
//! standby takes over at once. Losing the Lease stops the controllers at once and exits
//! with status 1, as Go does.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::builtin::builtin_controllers;
use super::controller::{
    Applies, Controller, ControllerContext, ControllerFuture, controllers_help,
};
use super::kubeconfig::kube_config;
use super::leader::{
    LeaderElectionConfig, LeaderElector, LeaderHealthz, LeadershipEnd, MAX_TOLERABLE_EXPIRED_LEASE,
};
use super::options::{BinaryVersion, ContentType, FlagError, LogFormat, Options, PrintRequest};
use super::provider_flags::{CommandExtensions, ProviderFlags};
use super::selection::ControllerSelection;
use crate::client::service_account::{ServiceAccountClients, ServiceAccountError};
use crate::client::{ApiLayer, ClientFactory, Fence, rate_limited};
use crate::informer::{Informer, trim_node, trim_service};
use crate::metrics::Metrics;
use crate::serving::{self, Health};
use crate::shadow::{self, Shadow};
use ccm_provider::{CloudProvider, InitContext, ProviderRegistry, RegistryError};

/// What every part of a running manager shares.
#[derive(Clone)]
struct Shared {
    metrics: Metrics,
    health: Health,
    /// Open while this replica may write (always, without leader election).
    fence: Fence,
    /// The plan, in shadow mode (`--shadow`).
    shadow: Option<Shadow>,
    /// The leader elector's client: unfenced, not rate-limited.
    lease_client: Client,
    /// Under `--use-service-account-credentials`, the per-controller clients.
    service_accounts: Option<ServiceAccountClients>,
    /// Makes a controller's client with the manager's credentials: the shared connections,
    /// counters and fence, a rate limit of its own ([`rate_limited`]).
    controller_client: Arc<dyn Fn() -> Client + Send + Sync>,
    /// How long a watch may fail before `/readyz` reports it.
    watch_failure_threshold: Duration,
}

/// What the leader runs ([`lead`]): the controllers, and what they are built with.
#[derive(Clone)]
struct LeaderWork {
    controllers: Arc<Vec<Controller>>,
    client: Client,
    provider: Arc<dyn CloudProvider>,
    options: Arc<Options>,
    shared: Shared,
}

pub use super::error::AppError;

/// The builder of a cloud-controller-manager binary.
///
/// ```no_run
/// use std::sync::Arc;
/// use ccm_runtime::app::CloudControllerManager;
/// use ccm_provider::{CloudProvider, ProviderRegistry};
///
/// struct MyCloud;
/// impl CloudProvider for MyCloud {
///     fn provider_name(&self) -> &str { "my-cloud" }
///     fn has_cluster_id(&self) -> bool { true }
/// }
///
/// fn main() -> std::process::ExitCode {
///     let mut registry = ProviderRegistry::new();
///     registry.register("my-cloud", |_config| Ok(Arc::new(MyCloud) as Arc<dyn CloudProvider>)).unwrap();
///     CloudControllerManager::new("my-cloud-controller-manager", registry).run()
/// }
/// ```
pub struct CloudControllerManager {
    name: String,
    registry: ProviderRegistry,
    extra: Vec<Controller>,
    shutdown_grace: Duration,
    watch_failure_threshold: Duration,
    version: BinaryVersion,
    extensions: CommandExtensions,
}

impl CloudControllerManager {
    /// A controller manager named `name` (for `--help` and logs) choosing among `registry`'s
    /// providers with `--cloud-provider`.
    pub fn new(name: impl Into<String>, registry: ProviderRegistry) -> Self {
        Self {
            name: name.into(),
            registry,
            extra: Vec::new(),
            shutdown_grace: Duration::from_secs(10),
            watch_failure_threshold: Duration::from_secs(30),
            version: BinaryVersion::default(),
            extensions: CommandExtensions::default(),
        }
    }

    /// Adds a controller of the provider's own, selectable with `--controllers` like the
    /// built-in ones and started the same way (see [`Controller`]).
    #[must_use]
    pub fn with_controller(mut self, controller: Controller) -> Self {
        self.extra.push(controller);
        self
    }

    /// The version `--version` prints: the binary's own, and its git commit when known.
    /// Without it, `--version` prints ccm-core's version.
    ///
    /// ```no_run
    /// # use ccm_runtime::app::CloudControllerManager;
    /// # let registry = ccm_provider::ProviderRegistry::new();
    /// // CCM_GIT_COMMIT set by the binary's build.rs from `git rev-parse --short HEAD`.
    /// CloudControllerManager::new("my-ccm", registry)
    ///     .with_version(env!("CARGO_PKG_VERSION"), option_env!("CCM_GIT_COMMIT"))
    ///     .run();
    /// ```
    #[must_use]
    pub fn with_version(mut self, version: &'static str, git_commit: Option<&'static str>) -> Self {
        self.version = BinaryVersion {
            version,
            git_commit: git_commit.filter(|c| !c.is_empty()),
        };
        self
    }

    /// Adds a provider's own flags (Go's `additionalFlags`): listed by `--help`, parsed with
    /// ours, and read by the provider's factory from its clone of `flags` (see
    /// [`ProviderFlags`]). A name that is taken is an error when the binary starts.
    #[must_use]
    pub fn with_flags<T>(mut self, flags: ProviderFlags<T>) -> Self
    where
        T: clap::Args + Clone + Send + Sync + 'static,
    {
        self.extensions.add_flags(flags);
        self
    }

    /// Changes the default of one of our flags, named as on the command line
    /// (`with_flag_default("--cluster-name", "prod")`); `--help` shows it. An unknown flag or
    /// a value it cannot take is an error when the binary starts. [`Options::from_args`]
    /// keeps Go's defaults.
    #[must_use]
    pub fn with_flag_default(mut self, flag: &'static str, value: impl Into<String>) -> Self {
        self.extensions.set_default(flag, value.into());
        self
    }

    setters! {
        /// How long in-flight reconciles may take to finish on shutdown (default 10s).
        pub fn with_shutdown_grace(shutdown_grace: Duration);
        /// How long the Node or Service watch may fail before `/readyz` reports it (the
        /// checks `watch-nodes` and `watch-services`; default 30s). Watches retry at least
        /// every 2 seconds, so a shorter outage of the API server never shows.
        #[must_use]
        pub fn with_watch_failure_threshold(watch_failure_threshold: Duration);
    }

    /// Parses the process's arguments, runs until SIGTERM or SIGINT, and returns the exit
    /// code: 0 after a clean shutdown, 1 on an error (printed as one line), 2 on a flag clap
    /// could not parse.
    pub fn run(self) -> ExitCode {
        self.run_with_args(std::env::args_os())
    }

    /// [`run`](Self::run) with the given arguments (the first is the program name).
    pub fn run_with_args<I, T>(mut self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        // Parsed on a thread of its own: clap's parser for our hundred-odd flags takes over
        // 100 KB of stack, which on the main thread would stay resident for the whole run;
        // a thread's stack is unmapped, or handed to the runtime's next worker, when it ends.
        let parsed =
            std::thread::scope(|scope| match scope.spawn(|| self.parse_args(args)).join() {
                Ok(parsed) => parsed,
                Err(panic) => std::panic::resume_unwind(panic),
            });
        let options = match parsed {
            Ok(options) => options,
            Err(code) => return code,
        };
        init_logging(&options);
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(err) => {
                report(&format!("cannot start the async runtime: {err}"));
                return ExitCode::FAILURE;
            }
        };
        // A task rather than the future `block_on` polls: the run's state (tens of KB) is
        // then built and polled on a worker's stack, not left resident on the main thread's.
        let run = runtime.spawn(async move {
            let shutdown = CancellationToken::new();
            spawn_signal_handler(shutdown.clone());
            match self.run_with_options(options, shutdown).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    report(&err.to_string());
                    ExitCode::FAILURE
                }
            }
        });
        match runtime.block_on(run) {
            Ok(code) => code,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => {
                report(&format!("the run ended early: {err}"));
                ExitCode::FAILURE
            }
        }
    }

    /// Parses `args` into options, or says how the process ends instead (`--help`,
    /// `--version`, a flag clap could not parse: printed, with the exit code).
    fn parse_args(&mut self, args: Vec<std::ffi::OsString>) -> Result<Options, ExitCode> {
        let controllers = self.controllers();
        let command = super::options::command()
            .name(self.name.clone())
            .mut_arg("controllers", |arg| {
                arg.help(controllers_help(&controllers))
            });
        let command = match self.extensions.command(command) {
            Ok(command) => command,
            Err(err) => {
                report(&err.to_string());
                return Err(ExitCode::FAILURE);
            }
        };
        let mut help = command.clone();
        let matches = match command.try_get_matches_from(args) {
            Ok(m) => m,
            Err(err) => {
                let _ = err.print();
                return Err(if err.use_stderr() {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                });
            }
        };
        let options = match Options::from_matches(&matches) {
            Ok(o) => o,
            Err(err) => {
                let _ = err.print();
                return Err(ExitCode::from(2));
            }
        };
        match options.print_request() {
            Some(PrintRequest::Help) => {
                let _ = help.print_help();
                return Err(ExitCode::SUCCESS);
            }
            Some(PrintRequest::Version { raw }) => {
                #[allow(clippy::print_stdout)]
                {
                    println!("{}", self.version.render(&self.name, raw));
                }
                return Err(ExitCode::SUCCESS);
            }
            None => {}
        }
        if let Err(err) = self.extensions.fill(&matches) {
            let _ = err.print();
            return Err(ExitCode::from(2));
        }
        Ok(options)
    }

    /// Runs with parsed options until `shutdown` fires. The library entry point for tests
    /// and for binaries that parse their own flags.
    pub async fn run_with_options(
        self,
        options: Options,
        shutdown: CancellationToken,
    ) -> Result<(), AppError> {
        options.validate()?;
        for (flag, why) in options.ignored_flags() {
            tracing::info!("flag {flag} is accepted and ignored: {why}");
        }
        for note in options.feature_gate_notes() {
            tracing::warn!("{note}");
        }
        if let Some(ownership) = options.node_ownership()?.describe() {
            tracing::info!(
                "{ownership}: the others are never initialised, tainted, deleted, routed or \
                 made load balancer backends"
            );
        }
        let controllers = self.controllers();
        let selection = ControllerSelection::parse(&options.controllers, &controllers)?;

        // Every await of startup gives way to a shutdown signal: the process ends at once
        // (status 0), whatever step it was at.
        let serving = options.serving.clone();
        let checked = off_the_runtime("serving-files", &shutdown, move || {
            serving::check_files(&serving)
        })
        .await
        .map_err(|source| AppError::Io {
            context: "reading the serving files".into(),
            source,
        })?;
        let Some(checked) = checked else {
            tracing::info!("shutting down while the serving files were read");
            return Ok(());
        };
        checked?;
        let Some(provider) = build_provider(&self.registry, &options, &shutdown).await? else {
            return Ok(());
        };
        if !provider.has_cluster_id() && !options.allow_untagged_cloud {
            return Err(FlagError {
                flag: "--allow-untagged-cloud",
                message:
                    "no ClusterID found: the cloud provider does not tag its resources with one; \
                          set --allow-untagged-cloud to run anyway"
                        .to_owned(),
            }
            .into());
        }

        let metrics = Metrics::new();
        metrics.set_build_info(self.version.version, self.version.git_commit);
        // Under leader election, closed while this replica cannot prove it holds the Lease:
        // no cloud mutation (the one provider wrapper) and no API write (the client layer).
        let fence = if options.leader_election.leader_elect {
            Fence::leased(options.leader_election.leader_elect_renew_deadline)
        } else {
            Fence::open()
        };
        let provider = metrics.wrap(provider, fence.clone());
        // Shadow mode: the controllers' writes are dry runs and their cloud mutations
        // plans, recorded in one plan (crate::shadow).
        let shadow = options.shadow.then(Shadow::new);
        let provider = match &shadow {
            Some(plan) => {
                tracing::info!(
                    path = shadow::PLAN_PATH,
                    "shadow mode: changing nothing; what would change is served at the path"
                );
                metrics.with_registry(|registry| plan.register(registry));
                shadow::wrap_provider(
                    provider,
                    plan,
                    super::SERVICE_LB_CONTROLLER,
                    super::NODE_ROUTE_CONTROLLER,
                )
            }
            None => provider,
        };
        let health = Health::new();

        // The flags of the controllers that will run are checked now, before the cluster
        // is touched; the rest are started (or skipped) by the leader.
        let mut to_run = Vec::new();
        for controller in controllers {
            if !selection.is_enabled(controller.name(), controller.is_enabled_by_default()) {
                tracing::info!(
                    controller = controller.name(),
                    "controller disabled by --controllers"
                );
                continue;
            }
            match controller.applies(&options, &*provider) {
                Applies::Yes => {
                    controller.check(&options)?;
                    to_run.push(controller);
                }
                Applies::MissingCapability(capability) => tracing::info!(
                    controller = controller.name(),
                    "the cloud provider does not support {capability}; not starting the controller"
                ),
                Applies::FlagOff(flag) => tracing::info!(
                    controller = controller.name(),
                    "{flag} is off; not starting the controller"
                ),
            }
        }
        let controllers = Arc::new(to_run);

        // The kubeconfig, the files it names and its exec plugin are read and run as
        // blocking calls, off the runtime: SIGTERM need not wait for a plugin that hangs.
        let kube_options = options.clone();
        let configured = off_the_runtime("kubeconfig", &shutdown, move || {
            let config = tokio::runtime::Handle::current().block_on(kube_config(&kube_options))?;
            let factory = ClientFactory::new(&config).map_err(|e| AppError::Kube {
                context: "building the Kubernetes client".into(),
                source: Box::new(e),
            })?;
            Ok::<_, AppError>((config, factory))
        })
        .await
        .map_err(|source| AppError::Io {
            context: "reading the kubeconfig".into(),
            source,
        })?;
        let Some((kube_config, factory)) = configured.transpose()? else {
            tracing::info!("shutting down before the Kubernetes client was configured");
            return Ok(());
        };
        let api = ApiLayer::new()
            .with_rate_limit(
                f64::from(options.kube_api_qps),
                options.kube_api_burst.unsigned_abs(),
            )
            .with_fence(fence.clone());
        let build = |layer: &ApiLayer| factory.client(layer);
        // One connection pool (counted and fenced) for the manager's client and the
        // controllers', each with a rate limit of its own.
        let base = build(&api.without_rate_limit());
        let client = rate_limited(&base, &api);
        // Go's dynamic client builder: the manager's own credentials create the accounts
        // and request their tokens; the controllers' clients carry those tokens.
        let service_accounts = options
            .use_service_account_credentials
            .then(|| ServiceAccountClients::new(client.clone(), &kube_config, api.clone()));
        // The Lease's own client, as Go's: renewals neither fenced nor queued behind the
        // controllers' requests.
        let lease_client = build(&api.for_leader_election());
        let answer = shutdown
            .run_until_cancelled(tokio::time::timeout(
                Duration::from_secs(10),
                client.apiserver_version(),
            ))
            .await;
        let Some(answer) = answer else {
            tracing::info!("shutting down while waiting for the API server");
            return Ok(());
        };
        match answer {
            Ok(Ok(v)) => tracing::info!(version = %v.git_version, "connected to the API server"),
            Ok(Err(e)) => {
                return Err(AppError::Kube {
                    context: "the API server did not answer".into(),
                    source: Box::new(e),
                });
            }
            Err(_) => {
                return Err(AppError::Kube {
                    context: "the API server did not answer".into(),
                    source: "timed out after 10s".into(),
                });
            }
        }

        metrics.register_api_counters(api.counters().clone());

        // The endpoints come up before the election, so a standby answers its probes too.
        let started = shutdown
            .run_until_cancelled(serving::start_server(
                &options.serving,
                &lease_client,
                metrics.clone(),
                health.clone(),
                serving::DebugEndpoints::default()
                    .with_verbosity(crate::logging::verbosity())
                    .with_configz(super::configz::render(&options))
                    .with_shadow_plan(shadow.clone()),
                shutdown.clone(),
            ))
            .await;
        let Some(started) = started else {
            tracing::info!("shutting down while the endpoint server was starting");
            return Ok(());
        };
        let server = started?;
        if let Some(server) = &server {
            tracing::info!(address = %server.local_addr(), https = server.is_https(), "serving /healthz, /readyz and /metrics");
        }

        let options = Arc::new(options);
        let controller_client = {
            let api = api.clone();
            Arc::new(move || rate_limited(&base, &api))
        };
        let shared = Shared {
            shadow,
            metrics,
            health,
            fence,
            lease_client,
            service_accounts,
            controller_client,
            watch_failure_threshold: self.watch_failure_threshold,
        };
        let work = LeaderWork {
            controllers,
            client,
            provider,
            options,
            shared,
        };
        let result = self.elect_and_lead(work, shutdown.clone()).await;
        shutdown.cancel();
        if let Some(server) = server {
            server.stopped().await;
        }
        result
    }

    /// Runs the controllers, under leader election when it is on.
    async fn elect_and_lead(
        &self,
        work: LeaderWork,
        shutdown: CancellationToken,
    ) -> Result<(), AppError> {
        if !work.options.leader_election.leader_elect {
            return lead(work, shutdown).await;
        }
        let shared = work.shared.clone();
        let le = &work.options.leader_election;
        // A shadow never competes for the Lease of the CCM in charge.
        let lease_name = if shared.shadow.is_some() {
            format!("{}-shadow", le.leader_elect_resource_name)
        } else {
            le.leader_elect_resource_name.clone()
        };
        let elector = LeaderElector::new(
            shared.lease_client.clone(),
            LeaderElectionConfig::new(&le.leader_elect_resource_namespace, &lease_name)
                .with_timing(
                    le.leader_elect_lease_duration,
                    le.leader_elect_renew_deadline,
                    le.leader_elect_retry_period,
                ),
        )
        .with_fence(shared.fence.clone())
        .with_metrics(shared.metrics.clone());
        // Live unless leading without renewing (Go's leaderElection healthz check).
        let healthz = LeaderHealthz::new(MAX_TOLERABLE_EXPIRED_LEASE);
        let mut elector = elector.with_healthz(healthz.clone());
        shared
            .health
            .register_liveness_fn("leaderElection", move || healthz.check());
        // Ready while standing by; not ready once the leader fails to renew.
        let renewing = Arc::new(AtomicBool::new(true));
        {
            let renewing = renewing.clone();
            shared.health.register_fn("leader-election", move || {
                if renewing.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("failed to renew the leader lease".to_owned())
                }
            });
        }
        tracing::info!(
            identity = elector.identity(),
            "waiting to become the leader"
        );
        if !elector.acquire(&shutdown).await {
            return Ok(());
        }
        shared.metrics.set_leader(&lease_name, true);
        let leading = shutdown.child_token();
        let grace = self.shutdown_grace;
        let mut controllers = tokio::spawn(lead(work.clone(), leading.clone()));
        // Renew until shutdown or loss. On shutdown the controllers stop first, then the
        // Lease is released; on loss they stop at once.
        let stop_renewing = CancellationToken::new();
        let hold = elector.hold(&stop_renewing, |ok| renewing.store(ok, Ordering::Relaxed));
        tokio::pin!(hold);
        let result = tokio::select! {
            end = &mut hold => {
                leading.cancel();
                let _ = tokio::time::timeout(grace, &mut controllers).await;
                match end {
                    LeadershipEnd::Lost => Err(AppError::LostLeadership),
                    LeadershipEnd::Shutdown => Ok(()),
                }
            }
            result = &mut controllers => {
                // The controllers ended on their own: an init error.
                stop_renewing.cancel();
                hold.await;
                result.unwrap_or(Ok(()))
            }
            () = shutdown.cancelled() => {
                tracing::info!("shutting down: stopping controllers");
                leading.cancel();
                match tokio::time::timeout(grace, &mut controllers).await {
                    Ok(_) => tracing::info!("controllers stopped"),
                    Err(_) => tracing::warn!(?grace, "controllers did not stop within the grace period"),
                }
                stop_renewing.cancel();
                hold.await;
                Ok(())
            }
        };
        shared.metrics.set_leader(&lease_name, false);
        result
    }

    /// Every controller: the built-in ones, then the provider's own.
    fn controllers(&self) -> Vec<Controller> {
        let mut all = builtin_controllers();
        all.extend(self.extra.iter().cloned());
        all
    }
}

/// What the leader runs: the provider's initialisation, the informers, the controllers.
async fn lead(work: LeaderWork, cancel: CancellationToken) -> Result<(), AppError> {
    let LeaderWork {
        controllers,
        client,
        provider,
        options,
        shared,
    } = work;
    // In shadow mode the provider's own writes are dry runs too.
    let provider_client = match &shared.shadow {
        Some(plan) => shadow::wrap_client(client.clone(), plan.for_controller("cloud-provider")),
        None => client.clone(),
    };
    provider
        .initialize(
            InitContext::new(provider_client, cancel.clone())
                .with_metrics(shared.metrics.registry().clone()),
        )
        .await
        .map_err(AppError::Initialize)?;
    let mut nodes = Informer::new(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        trim_node,
    );
    let mut services = Informer::new(
        Api::<Service>::all(client.clone()),
        watcher::Config::default(),
        trim_service,
    );
    if options.kube_api_content_type == ContentType::Protobuf {
        nodes = nodes.with_protobuf();
        services = services.with_protobuf();
    }
    // Checked at start (`Options::validate`); one value for every controller, so each
    // skipped Node is logged once, and forgotten when it is deleted.
    let node_ownership = options.node_ownership()?;
    node_ownership.forget_deleted(&nodes);
    let ctx = ControllerContext {
        client,
        provider,
        nodes: nodes.clone(),
        services: services.clone(),
        options: options.clone(),
        cancel: cancel.clone(),
        metrics: shared.metrics.registry().clone(),
        health: shared.health.clone(),
        manager_metrics: shared.metrics.clone(),
        shadow: None,
        node_ownership,
    };
    // Ready once the caches are filled, and while no watch has failed for long.
    {
        let (nodes, services) = (nodes.clone(), services.clone());
        shared.health.register_fn("informers-synced", move || {
            if nodes.is_synced() && services.is_synced() {
                Ok(())
            } else {
                Err("waiting for the Node and Service caches".to_owned())
            }
        });
    }
    let threshold = shared.watch_failure_threshold;
    {
        let nodes = nodes.clone();
        shared
            .health
            .register_fn(WATCH_NODES, move || nodes.check_watch(threshold));
        let services = services.clone();
        shared
            .health
            .register_fn(WATCH_SERVICES, move || services.check_watch(threshold));
    }
    let mut running: BTreeMap<String, ControllerFuture> = BTreeMap::new();
    for controller in controllers.iter() {
        // `initialize` may have found a capability missing (a probe of the cloud's API);
        // like Go, a controller whose capability is gone is then not started.
        if let Applies::MissingCapability(capability) =
            controller.applies(&ctx.options, &*ctx.provider)
        {
            tracing::info!(
                controller = controller.name(),
                "after initializing, the cloud provider does not support {capability}; not \
                 starting the controller"
            );
            continue;
        }
        let mut ctx = ctx.clone();
        if let Some(accounts) = &shared.service_accounts {
            match accounts.client(controller.service_account(), &cancel).await {
                Ok(client) => ctx.client = client,
                Err(ServiceAccountError::Cancelled(_)) => return Ok(()),
                Err(e) => {
                    return Err(AppError::Controller {
                        name: controller.name().to_owned(),
                        source: Box::new(e),
                    });
                }
            }
        } else {
            ctx.client = (shared.controller_client)();
        }
        if let Some(plan) = &shared.shadow {
            ctx.client = shadow::wrap_client(ctx.client, plan.for_controller(controller.name()));
            ctx.shadow = Some(plan.clone());
        }
        let fut = controller
            .start(&ctx)
            .map_err(|source| AppError::Controller {
                name: controller.name().to_owned(),
                source,
            })?;
        running.insert(controller.name().to_owned(), fut);
    }
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (nodes, cancel) = (nodes.clone(), cancel.clone());
        tasks.spawn(async move { nodes.run(cancel).await });
    }
    {
        let (services, cancel) = (services.clone(), cancel.clone());
        tasks.spawn(async move { services.run(cancel).await });
    }
    for (name, fut) in running {
        if !options.controller_start_interval.is_zero() {
            tokio::time::sleep(jitter(options.controller_start_interval)).await;
        }
        tracing::info!(controller = %name, "starting controller");
        let metrics = shared.metrics.clone();
        metrics.controller_started(&name);
        tasks.spawn(async move {
            fut.await;
            metrics.controller_stopped(&name);
        });
    }
    while tasks.join_next().await.is_some() {}
    for check in ["informers-synced", WATCH_NODES, WATCH_SERVICES] {
        shared.health.remove(check);
    }
    Ok(())
}

/// The readiness checks of the two watches.
const WATCH_NODES: &str = "watch-nodes";
const WATCH_SERVICES: &str = "watch-services";

/// Runs `work` on a thread of its own (named `name`, with the runtime entered, so it may
/// spawn tasks or block on a future) and waits for it unless `shutdown` fires first: `None`.
/// Startup reads files and runs code that may block (a large cloud-config, a provider's
/// factory, a slow disk, a named pipe named inside a kubeconfig), and a shutdown signal
/// meanwhile must still end the process. The thread is then left to finish on its own: it
/// holds nothing the process needs, and the process does not wait for it. A panic in `work`
/// goes on here, as if it had run on this thread.
async fn off_the_runtime<T: Send + 'static>(
    name: &str,
    shutdown: &CancellationToken,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<Option<T>> {
    shutdown
        .run_until_cancelled(crate::files::off_thread(name, work))
        .await
        .transpose()
}

/// Builds the provider from `--cloud-provider` and `--cloud-config` off the runtime (see
/// [`off_the_runtime`]); `None` when `shutdown` fired first.
async fn build_provider(
    registry: &ProviderRegistry,
    options: &Options,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<dyn CloudProvider>>, AppError> {
    let registry = registry.clone();
    let name = options.cloud_provider.clone();
    let config_path = options
        .cloud_config
        .clone()
        .filter(|p| !p.as_os_str().is_empty());
    tracing::info!(provider = %name, cloud_config = ?config_path, "building the cloud provider");
    let built = off_the_runtime("provider-init", shutdown, move || {
        registry.init(&name, config_path.as_deref())
    })
    .await
    .map_err(|e| {
        AppError::Provider(RegistryError::Init {
            name: options.cloud_provider.clone(),
            source: Box::new(e),
        })
    })?;
    match built {
        None => {
            tracing::info!("shutting down before the cloud provider was built");
            Ok(None)
        }
        Some(provider) => Ok(Some(provider?)),
    }
}

/// A random duration in [d, 2d), like Go's `wait.Jitter(d, 1.0)`.
fn jitter(d: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut byte);
    d + d.mul_f64(f64::from(byte[0]) / 256.0)
}

/// Installs the log subscriber, its verbosity changeable at `/debug/flags/v`.
fn init_logging(options: &Options) {
    let format = match options.logging_format {
        LogFormat::Text => crate::logging::Format::Text,
        LogFormat::Json => crate::logging::Format::Json,
    };
    let flags = options.clone();
    crate::logging::init(format, options.verbosity, move |v| {
        flags.log_directives_at(v)
    });
}

fn spawn_signal_handler(shutdown: CancellationToken) {
    // Installed now, not when the task first runs: a signal during startup must reach the
    // token, not end the process by the default action.
    #[cfg(unix)]
    let handlers = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        )
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let (Ok(mut term), Ok(mut int)) = handlers else {
                tracing::warn!("cannot install signal handlers");
                return;
            };
            tokio::select! {
                _ = term.recv() => tracing::info!("received SIGTERM"),
                _ = int.recv() => tracing::info!("received SIGINT"),
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        shutdown.cancel();
    });
}

#[allow(clippy::print_stderr)]
fn report(message: &str) {
    eprintln!("error: {message}");
}
