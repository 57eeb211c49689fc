//! One run of one CCM: a fresh control plane and simulator, the Nodes initialised, then the
//! Services created at once and watched until each has its ingress.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use ccm_do_like_simulator::{Faults, RunningSimulator, SimulatorConfig, SimulatorHandle};
use ccm_test::ControlPlane;
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder, has_ingress, is_initialized, provider_id};
use ccm_test::process::CcmProcess;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

use crate::report::RunResult;
use crate::{Options, Result, progress};

/// The simulator's token: loopback only, made up per run.
const TOKEN: &str = "bench-cloud-token";
/// The region of both CCMs' load balancers (DigitalOcean's CCM reads `REGION` instead of
/// asking the droplet metadata address).
const REGION: &str = "nyc1";
/// The user the CCM runs as, whose requests the audit log records.
const CCM_USER: &str = "ccm-bench-cloud";
/// Every request of [`CCM_USER`], once, when it is answered.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n\
    omitStages: [RequestReceived, ResponseStarted]\nrules:\n\
    - level: Metadata\n  users: [ccm-bench-cloud]\n- level: None\n";
/// The controllers both run: Go's names, which ours accepts.
const CONTROLLERS: &str =
    "cloud-node-controller,cloud-node-lifecycle-controller,service-lb-controller";

/// Runs `name` (`rust` or `digitalocean`) once; see the crate docs.
pub(crate) async fn one(opts: &Options, name: &str, binary: &Path) -> Result<RunResult> {
    progress(format_args!(
        "{name}: starting a control plane and the simulator"
    ));
    let dir = tempfile::tempdir()?;
    let cp = ControlPlane::builder()
        .audit_policy(AUDIT_POLICY)
        .start()
        .await?;
    let client = cp.client()?;
    // The CCM runs as a user of its own, so the audit log can pick out its requests.
    let kubeconfig = cp.kubeconfig_for_user(CCM_USER, &["system:masters"])?;
    let audit = cp.audit_log_path().ok_or("no audit log")?.to_owned();
    let mut config = SimulatorConfig::new(TOKEN);
    config.lb_activation_delay = Duration::from_millis(opts.activation_ms);
    config.rate_limit = opts.cloud_rate_limit;
    config.rate_limit_window = Duration::from_secs(opts.cloud_rate_window_secs.max(1));
    let sim = RunningSimulator::start(config).await?;
    let cloud = sim.handle().clone();
    for i in 1..=opts.nodes {
        cloud.create_droplet(&node_name(i), "s-2vcpu-4gb", REGION);
    }
    if opts.existing_load_balancers > 0 {
        other_clusters_load_balancers(&sim.url(), opts.existing_load_balancers).await?;
    }
    let mut faults = Faults::default();
    faults.latency_ms = opts.latency_ms;
    cloud.set_faults(faults);

    let mut ccm = start(opts, name, binary, &kubeconfig, &sim.url(), dir.path())?;
    let result = measure(opts, name, (&client, &audit), &cloud, &mut ccm).await;
    if result.is_err() {
        progress(format_args!("{name}: its log ends:\n{}", ccm.log_tail(30)));
    }
    drop(ccm);
    sim.shutdown().await;
    drop(cp);
    result
}

/// `count` load balancers of another cluster, created through the API (so they are what a
/// list pages through), before the latency is injected.
async fn other_clusters_load_balancers(api_url: &str, count: usize) -> Result<()> {
    use ccm_do_like_cloud::api::{ForwardingRule, LoadBalancerRequest};
    use ccm_do_like_cloud::{ApiToken, Client, ClientOptions};
    let mut options = ClientOptions::new(api_url, ApiToken::new(TOKEN));
    options.rate_windows.clear();
    let client = std::sync::Arc::new(Client::new(options)?);
    stream::iter(0..count)
        .map(|i| {
            let client = client.clone();
            async move {
                let request = LoadBalancerRequest {
                    name: format!("other-{i:05}"),
                    region: REGION.to_owned(),
                    forwarding_rules: vec![ForwardingRule::new("tcp", 80, 30080)],
                    tags: vec!["k8s:another-cluster".to_owned()],
                    ..LoadBalancerRequest::default()
                };
                client.create_load_balancer(&request).await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    progress(format_args!(
        "created {count} load balancers of another cluster"
    ));
    Ok(())
}

fn node_name(i: usize) -> String {
    format!("node-{i}")
}

/// Starts the CCM with the flags both get, pointed at the simulator.
fn start(
    opts: &Options,
    name: &str,
    binary: &Path,
    kubeconfig: &Path,
    api_url: &str,
    dir: &Path,
) -> Result<CcmProcess> {
    let mut args = vec![
        "--cloud-provider=digitalocean".to_owned(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".to_owned(),
        "--configure-cloud-routes=false".to_owned(),
        format!("--controllers={CONTROLLERS}"),
        format!("--concurrent-service-syncs={}", opts.workers),
    ];
    if let Some(q) = &opts.kube_api {
        args.push(format!("--kube-api-qps={}", q[0]));
        args.push(format!(
            "--kube-api-burst={}",
            q.get(1).copied().unwrap_or(q[0])
        ));
    }
    let builder = if name == "digitalocean" {
        args.extend([
            "--secure-port=0".to_owned(),
            "--authentication-skip-lookup".to_owned(),
        ]);
        CcmProcess::builder(binary)
            .env("DO_ACCESS_TOKEN", TOKEN)
            .env("DO_OVERRIDE_URL", api_url)
            .env("REGION", REGION)
    } else {
        let token = dir.join("token");
        std::fs::write(&token, TOKEN)?;
        let mut cloud_config = format!(
            "apiUrl: {api_url}\ntokenFile: {}\nregion: {REGION}\n",
            token.display()
        );
        for line in &opts.rust_config {
            cloud_config.push_str(line);
            cloud_config.push('\n');
        }
        let path = dir.join("cloud.yaml");
        std::fs::write(&path, cloud_config)?;
        args.extend([
            format!("--cloud-config={}", path.display()),
            "--allow-untagged-cloud".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            "--secure-port=0".to_owned(),
        ]);
        args.extend(opts.rust_flag.iter().cloned());
        // Ours logs as its flags say unless the user set `RUST_LOG`.
        let builder = CcmProcess::builder(binary);
        match std::env::var_os("RUST_LOG") {
            Some(filter) => builder.env("RUST_LOG", filter),
            None => builder.env_remove("RUST_LOG"),
        }
    };
    Ok(builder
        .args(&args)
        .name(name)
        .log_file(dir.join(format!("{name}.log")))
        .try_spawn()?)
}

async fn measure(
    opts: &Options,
    name: &str,
    (client, audit): (&kube::Client, &Path),
    cloud: &SimulatorHandle,
    ccm: &mut CcmProcess,
) -> Result<RunResult> {
    // The Nodes, registered as kubelets register them; the scenario starts once the CCM
    // has initialised every one.
    let nodes: Api<Node> = Api::all(client.clone());
    stream::iter(1..=opts.nodes)
        .map(|i| {
            let nodes = nodes.clone();
            async move {
                let mut node = NodeBuilder::new(&node_name(i))
                    .uninitialized()
                    .label("kubernetes.io/hostname", &node_name(i));
                if opts.ready_nodes {
                    node = node.ready();
                }
                let node = node.build();
                nodes.create(&PostParams::default(), &node).await
            }
        })
        .buffer_unordered(opts.create_concurrency.max(1))
        .try_collect::<Vec<_>>()
        .await?;
    let init_timeout = Duration::from_secs(opts.timeout_secs);
    let deadline = Instant::now() + init_timeout;
    let mut last_print = Instant::now();
    loop {
        check_running(ccm)?;
        let list = nodes.list(&Default::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|n| is_initialized(n) && provider_id(n).is_some_and(|p| !p.is_empty()))
            .count();
        if ready == opts.nodes {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name}: {ready}/{} Nodes initialised after {} s",
                opts.nodes,
                init_timeout.as_secs()
            )
            .into());
        }
        if last_print.elapsed() >= Duration::from_secs(10) {
            progress(format_args!(
                "{name}: {ready}/{} Nodes initialised",
                opts.nodes
            ));
            last_print = Instant::now();
        }
        // A list of 10,000 Nodes is not free: look less often the more there are.
        let pause = 200 + u64::try_from(opts.nodes / 10).unwrap_or(u64::MAX).min(1800);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    // What it does at start-up and for the Nodes is not the scenario's.
    settle(cloud, Duration::from_secs(2), Duration::from_secs(30)).await;
    let requests_before = cloud.request_counts();
    let audit_before = std::fs::metadata(audit).map_or(0, |m| m.len());
    let cpu_before = ccm.cpu_seconds()?;
    progress(format_args!(
        "{name}: Nodes initialised; creating {} Services",
        opts.services
    ));

    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    let watch = ingress_counts(services.clone());
    let creates = {
        let (services, count, at_once) = (services.clone(), opts.services, opts.create_concurrency);
        tokio::spawn(async move {
            stream::iter(0..count)
                .map(|i| {
                    let services = services.clone();
                    async move {
                        let service = ServiceBuilder::load_balancer(&format!("bench-lb-{i:05}"))
                            .port(80)
                            .protocol("TCP")
                            .build();
                        services.create(&PostParams::default(), &service).await
                    }
                })
                .buffer_unordered(at_once.max(1))
                .try_collect::<Vec<_>>()
                .await
                .map(|_| start.elapsed().as_secs_f64())
        })
    };
    let mut watch = Box::pin(watch);
    let deadline = start + Duration::from_secs(opts.timeout_secs);
    let mut curve = vec![(0.0, 0)];
    let mut first = None;
    let mut seen = 0;
    let mut last_print = Instant::now();
    while seen < opts.services {
        check_running(ccm)?;
        match tokio::time::timeout(Duration::from_secs(1), watch.next()).await {
            Ok(Some(n)) if n != seen => {
                seen = n;
                let at = start.elapsed().as_secs_f64();
                first.get_or_insert(at);
                curve.push((at, n));
            }
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => return Err("the Service watch ended".into()),
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{name}: only {seen}/{} Services have an ingress after {} s",
                opts.services, opts.timeout_secs
            )
            .into());
        }
        if last_print.elapsed() >= Duration::from_secs(2) {
            progress(format_args!(
                "{name}: {seen}/{} with an ingress ({:.1} s)",
                opts.services,
                start.elapsed().as_secs_f64()
            ));
            last_print = Instant::now();
        }
    }
    let seconds_to_all = start.elapsed().as_secs_f64();
    let create_seconds = creates.await??;
    // Requests that follow the last ingress (a last read, tags) count too.
    settle(cloud, Duration::from_secs(2), Duration::from_secs(30)).await;
    let cpu_seconds = ccm.cpu_seconds()? - cpu_before;
    check_running(ccm)?;
    let after = cloud.request_counts();
    let requests: BTreeMap<String, u64> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - requests_before.get(k).copied().unwrap_or(0)))
        .filter(|(_, v)| *v > 0)
        .collect();
    let api_requests = api_requests_since(audit, audit_before)?;
    let events = event_reasons(client).await?;
    let result = RunResult {
        name: name.to_owned(),
        api_requests,
        events,
        repeat: 0,
        seconds_to_first: first.unwrap_or(seconds_to_all),
        seconds_to_all,
        create_seconds,
        requests,
        cpu_seconds,
        peak_rss_mib: ccm.peak_rss_mib()?,
        curve,
    };
    progress(format_args!(
        "{name}: every ingress in {seconds_to_all:.2} s (first {:.2} s), {:.2} cloud requests \
         per Service, {cpu_seconds:.2} CPU s, peak RSS {:.1} MiB",
        result.seconds_to_first,
        result.requests_per_service(opts.services),
        result.peak_rss_mib
    ));
    Ok(result)
}

/// The CCM's API requests in the audit log after byte `offset`, by verb and resource
/// (`patch services/status`); watches, which stay open, are left out.
fn api_requests_since(audit: &Path, offset: u64) -> Result<BTreeMap<String, u64>> {
    let text = std::fs::read(audit)?;
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(text.len());
    let mut counts = BTreeMap::new();
    for event in ccm_test::audit::parse_audit_log(&String::from_utf8_lossy(&text[start..])) {
        if event.user == CCM_USER && event.verb != "watch" {
            *counts
                .entry(format!("{} {}", event.verb, event.resource_path()))
                .or_default() += 1;
        }
    }
    Ok(counts)
}

/// The service controller's Events about the scenario's Services, by type and reason
/// (`Warning SyncLoadBalancerFailed`), each counted as often as it happened (its `count`).
async fn event_reasons(client: &kube::Client) -> Result<BTreeMap<String, u64>> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let mut counts = BTreeMap::new();
    for event in events.list(&Default::default()).await?.items {
        // The CCM's (Go's event source, ours too), not the API server's own.
        let source = event.source.as_ref().and_then(|s| s.component.as_deref());
        if event.involved_object.kind.as_deref() != Some("Service")
            || source != Some("service-controller")
        {
            continue;
        }
        let key = format!(
            "{} {}",
            event.type_.as_deref().unwrap_or_default(),
            event.reason.as_deref().unwrap_or_default()
        );
        *counts.entry(key).or_default() += u64::try_from(event.count.unwrap_or(1)).unwrap_or(1);
    }
    Ok(counts)
}

/// An error with the log's tail if the CCM has exited.
fn check_running(ccm: &mut CcmProcess) -> Result<()> {
    match ccm.try_wait() {
        Some(status) => Err(format!("the CCM exited ({status})").into()),
        None => Ok(()),
    }
}

/// Waits until the simulator has answered no request for `quiet` (at most `max`).
async fn settle(cloud: &SimulatorHandle, quiet: Duration, max: Duration) {
    let total = |c: &SimulatorHandle| c.request_counts().values().sum::<u64>();
    let deadline = Instant::now() + max;
    let mut last = total(cloud);
    let mut since = Instant::now();
    while since.elapsed() < quiet && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = total(cloud);
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
}

/// A stream of "how many Services have an ingress", one item per watch event.
fn ingress_counts(api: Api<Service>) -> impl futures::Stream<Item = usize> + Send {
    let mut done: HashSet<String> = HashSet::new();
    watcher(api, watcher::Config::default()).filter_map(move |event| {
        let changed = match event {
            Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => {
                let name = s.metadata.name.clone().unwrap_or_default();
                if has_ingress(&s) {
                    done.insert(name);
                } else {
                    done.remove(&name);
                }
                true
            }
            Ok(_) | Err(_) => false,
        };
        futures::future::ready(changed.then_some(done.len()))
    })
}
