//! `ccm-local-cluster`: a real cluster on this machine (`ccm_test::Cluster`: kubelets,
//! containerd, kube-proxy, a CNI, in network namespaces made for the run) with a bundled
//! provider's CCM installed from its release manifest, as a user installs it, or a provider
//! author's own CCM installed from its image with the Helm chart (`--values`). Prints the
//! Nodes, the Pods and a LoadBalancer Service (with the DO-like cloud, a request answered
//! through its load balancer), then keeps the cluster until Ctrl-C; or runs a program in
//! the cluster's network (`--exec`, for Kubernetes' e2e tests) and exits with its status.
//! `scripts/cluster.sh` and `scripts/e2e-upstream.sh` build what it needs and run it.
//!
//! ```text
//! ccm-local-cluster --provider fake|do-like [--nodes N] [--once] [--kubeconfig FILE]
//!                   [--image ARCHIVE]... [--manifest FILE | --values FILE [--chart DIR]]
//!                   [--zones N (fake)] [--pod-routes cloud (do-like)] [--dual-stack (do-like)]
//!                   [--exec PROGRAM ARGS...]
//! ccm-local-cluster --image ARCHIVE --values FILE [--chart DIR] [--nodes N] [--once] ...
//! ```
//!
//! `--zones N` (the fake cloud) puts node *i* in zone `zone-<a|b|c…>` number *i* mod N
//! through the cloud-config it applies (the fake cloud's per-instance `zone`), so that the
//! CCM's `topology.kubernetes.io/zone` labels spread the schedulable nodes over N zones, for
//! Kubernetes' multi-zone specs. `--pod-routes cloud` (the DO-like cloud, which is one region
//! and one zone) leaves the Pod routes between nodes to the CCM's route controller: the
//! cluster tier adds none ([`ccm_test::cluster::PodRoutes::Cloud`]) and the simulator turns
//! each route of its API into a route of the cluster's network (`--kernel-routes on`).
//! `--dual-stack` (the DO-like cloud) starts an IPv4/IPv6 cluster
//! ([`ccm_test::ClusterBuilder::dual_stack`]): each droplet has its node's IPv6 address too,
//! the CCM gets both cluster CIDRs, and the simulator gives `DUALSTACK` load balancers an
//! IPv6 address of [`ccm_test::cluster::LOAD_BALANCER_CIDR_V6`].
#![forbid(unsafe_code)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "../cli.rs"]
mod cli;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use ccm_test::Cluster;
use ccm_test::cluster::{LOAD_BALANCER_CIDR, WEB_IMAGE};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const USAGE: &str = "\
usage: ccm-local-cluster --provider fake|do-like [--nodes N] [--once] [--kubeconfig FILE]
                         [--image ARCHIVE]... [--manifest FILE | --values FILE [--chart DIR]]
                         [--zones N] [--pod-routes cloud] [--dual-stack]
                         [--exec PROGRAM ARGS...]
       ccm-local-cluster --image ARCHIVE --values FILE [--chart DIR] [--nodes N] [--once]
                         [--kubeconfig FILE] [--exec PROGRAM ARGS...]

Starts a cluster of N nodes (default 2; kubelets with --cloud-provider=external,
containerd, kube-proxy) in network namespaces made for the run, applies the
provider's release manifest (releases/v<version>/<provider>.yaml) with the image
pointed at the one scripts/images.sh built, waits until the CCM has initialised
the Nodes, runs a web Deployment behind a LoadBalancer Service, and prints them.
The DO-like provider's API simulator runs in the cluster's own namespace with its
data plane on: its load balancers get addresses of 10.88.64.0/24 there and
forward to the Nodes, and a request is sent through one. Needs root.

  --once             stop after printing (default: run until Ctrl-C)
  --kubeconfig FILE  also write the admin kubeconfig to FILE (removed on exit)
  --image ARCHIVE    also import this OCI archive into every node (repeatable)
  --manifest FILE    apply FILE instead of the provider's release manifest: another
                     CCM (its image given with --image), with the provider's cloud;
                     ${CLOUD_API_URL} and ${CLOUD_API_TOKEN} in it become the DO-like
                     simulator's URL and token; the nodes' Pod network comes up at
                     their pod CIDR (the CCM need not tolerate NotReady Nodes)
  --values FILE      install the CCM with the Helm chart (helm: $HELM, else on PATH)
                     and these values instead of applying a manifest; ${NODES} in
                     them becomes the nodes' names as a YAML list, and with
                     --provider do-like ${CLOUD_API_URL} and ${CLOUD_API_TOKEN} the
                     simulator's. Without --provider: your own provider's CCM, its
                     image given with --image (provider-image.sh builds one), no
                     bundled cloud and no workload: the Nodes it initialised and its
                     Pods are printed
  --chart DIR        the chart for --values (default: charts/cloud-controller-manager)
  --zones N          --provider fake: put node i (0 is the control plane) in zone
                     zone-<a|b|c...> number i mod N (N from 1 to 26) through the
                     cloud-config applied with the release manifest, so the CCM's
                     topology.kubernetes.io/zone labels spread the nodes over N zones
                     (with --nodes 4 and --zones 3: one schedulable node per zone)
  --pod-routes cloud --provider do-like: the cluster adds no Pod routes between nodes;
                     the simulator makes each route of its /v2/x-routes API a route of
                     the cluster's network (--kernel-routes on), so Pod traffic across
                     nodes flows only over the CCM's route controller's routes
  --dual-stack       --provider do-like: an IPv4/IPv6 cluster (unique-local IPv6
                     addresses inside the run's namespaces): each droplet has its
                     node's IPv6 address too, the CCM gets both cluster CIDRs, and
                     DUALSTACK load balancers an IPv6 address that forwards
  --exec PROGRAM...  instead of the workload, run PROGRAM with the rest of the
                     arguments in the cluster's network namespace, with KUBECONFIG
                     naming an admin kubeconfig that works there (and CLOUD_API_URL,
                     CLOUD_API_TOKEN, CLOUD_API_ADMIN_TOKEN: the simulator's); stop the
                     cluster when it ends and exit with its status
";

/// A bundled provider: its release manifest and images.
struct Provider {
    manifest: &'static str,
    image: &'static str,
}

const FAKE: Provider = Provider {
    manifest: "fake-cloud.yaml",
    image: "fake-cloud-controller-manager",
};
const DO_LIKE: Provider = Provider {
    manifest: "do-like-cloud.yaml",
    image: "do-like-cloud-controller-manager",
};
const SIMULATOR: &str = "do-like-api-simulator";
const SIMULATOR_PORT: u16 = 8080;
const TOKEN: &str = "local-cluster-token";
const ADMIN_TOKEN: &str = "local-cluster-admin-token";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const WAIT: Duration = Duration::from_secs(180);

struct Options {
    /// A bundled provider; `None` for an author's own (`--values` without `--provider`).
    provider: Option<&'static Provider>,
    nodes: usize,
    once: bool,
    kubeconfig: Option<PathBuf>,
    images: Vec<PathBuf>,
    manifest: Option<PathBuf>,
    values: Option<PathBuf>,
    chart: Option<PathBuf>,
    /// `--zones`: how many zones the fake cloud spreads the nodes over (0: not set).
    zones: usize,
    /// `--pod-routes cloud`: the CCM's routes carry Pod traffic between nodes.
    cloud_routes: bool,
    /// `--dual-stack`: an IPv4/IPv6 cluster.
    dual_stack: bool,
    exec: Vec<String>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let mut provider = None;
    let mut nodes = 2;
    let mut once = false;
    let mut kubeconfig = None;
    let mut images = Vec::new();
    let mut manifest = None;
    let mut values = None;
    let mut chart = None;
    let mut zones = 0;
    let mut cloud_routes = false;
    let mut dual_stack = false;
    let mut exec = Vec::new();
    while let Some(arg) = args.next() {
        if arg == "--exec" {
            exec.extend(args.by_ref());
            if exec.is_empty() {
                return Err("--exec needs a program".to_owned());
            }
            break;
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or(format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--provider" => {
                provider = Some(match value("--provider")?.as_str() {
                    "fake" => &FAKE,
                    "do-like" => &DO_LIKE,
                    other => return Err(format!("--provider: fake or do-like, not {other:?}")),
                });
            }
            "--nodes" => {
                nodes = value("--nodes")?
                    .parse()
                    .ok()
                    .filter(|n| (1..=20).contains(n))
                    .ok_or("--nodes: a number from 1 to 20")?;
            }
            "--once" => once = true,
            "--kubeconfig" => kubeconfig = Some(PathBuf::from(value("--kubeconfig")?)),
            "--image" => images.push(PathBuf::from(value("--image")?)),
            "--manifest" => manifest = Some(PathBuf::from(value("--manifest")?)),
            "--values" => values = Some(PathBuf::from(value("--values")?)),
            "--chart" => chart = Some(PathBuf::from(value("--chart")?)),
            "--zones" => {
                zones = value("--zones")?
                    .parse()
                    .ok()
                    .filter(|n| (1..=26).contains(n))
                    .ok_or("--zones: a number from 1 to 26")?;
            }
            "--pod-routes" => match value("--pod-routes")?.as_str() {
                "cloud" => cloud_routes = true,
                "cluster" => cloud_routes = false,
                other => return Err(format!("--pod-routes: cloud or cluster, not {other:?}")),
            },
            "--dual-stack" => dual_stack = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if values.is_some() && manifest.is_some() {
        return Err("--values (the chart) or --manifest, not both".to_owned());
    }
    if chart.is_some() && values.is_none() {
        return Err("--chart is the chart of --values".to_owned());
    }
    let bundled_release = values.is_none() && manifest.is_none();
    let is = |cloud: &Provider| provider.is_some_and(|p| std::ptr::eq(p, cloud));
    if zones > 0 && !(is(&FAKE) && bundled_release) {
        return Err(
            "--zones sets the fake cloud's zones in its release manifest: \
             --provider fake, without --manifest or --values"
                .to_owned(),
        );
    }
    if dual_stack && !(is(&DO_LIKE) && bundled_release) {
        return Err(
            "--dual-stack gives the DO-like cloud's release manifest both cluster CIDRs: \
             --provider do-like, without --manifest or --values"
                .to_owned(),
        );
    }
    if cloud_routes && !is(&DO_LIKE) {
        return Err("--pod-routes cloud needs a cloud with routes: --provider do-like".to_owned());
    }
    if provider.is_none() {
        if values.is_none() {
            return Err(
                "--provider is required (fake or do-like), or --values FILE with \
                        --image ARCHIVE for your own provider's CCM"
                    .to_owned(),
            );
        }
        if images.is_empty() {
            return Err(
                "--values without --provider installs your own provider's CCM: \
                        give its image with --image ARCHIVE (provider-image.sh writes one)"
                    .to_owned(),
            );
        }
    }
    Ok(Options {
        provider,
        nodes,
        once,
        kubeconfig,
        images,
        manifest,
        values,
        chart,
        zones,
        cloud_routes,
        dual_stack,
        exec,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse(args.into_iter()) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    cli::init_logging();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    let runtime = match cli::runtime(builder.worker_threads(2)) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(run(&options)) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The repository root: the manifests and image archives are found from it.
fn workspace() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// Runs the cluster; the exit status (`--exec`'s program's, else 0).
async fn run(options: &Options) -> Result<u8, String> {
    let provider = options.provider;
    let started = std::time::Instant::now();
    let mut builder = Cluster::builder().nodes(options.nodes);
    if options.cloud_routes {
        builder = builder.pod_routes(ccm_test::cluster::PodRoutes::Cloud);
    }
    builder = builder.dual_stack(options.dual_stack);
    if let (Some(provider), None) = (provider, &options.manifest) {
        let archive = ccm_test::image::archive(&workspace(), provider.image);
        if !archive.is_file() {
            return Err(format!(
                "no image archive {}: run scripts/images.sh --debug {}",
                archive.display(),
                provider.image
            ));
        }
        builder = builder.image(&archive);
    } else if options.manifest.is_some() {
        // Another CCM may not run on NotReady Nodes (DigitalOcean's tolerates only the
        // `uninitialized` taint), so its nodes' Pod network comes up at their pod CIDR, as
        // with a network plugin that needs no cloud address, not after initialisation; its
        // image comes with --image.
        builder = builder.pod_network(ccm_test::cluster::PodNetwork::AtPodCidr);
    }
    for image in &options.images {
        if !image.is_file() {
            return Err(format!("--image {}: no such file", image.display()));
        }
        builder = builder.image(image);
    }
    let cluster = builder.start().await.map_err(|e| e.to_string())?;
    println!(
        "Cluster of {} nodes up in {:.1} s (Kubernetes {}).",
        options.nodes,
        started.elapsed().as_secs_f64(),
        ccm_test::KUBERNETES_VERSION
    );

    let do_like = provider.is_some_and(|p| std::ptr::eq(p, &DO_LIKE));
    let url = if do_like {
        Some(start_simulator(&cluster, options.cloud_routes, options.dual_stack).await?)
    } else {
        None
    };
    match (&options.values, &options.manifest, provider) {
        (Some(values), _, _) => helm_install(&cluster, options, values, url.as_deref())?,
        (None, Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--manifest {}: {e}", path.display()))?;
            println!("Applying {}:", path.display());
            let manifest = other_manifest(text, url.as_deref())?;
            print!("{}", cluster.apply(&manifest).map_err(|e| e.to_string())?);
        }
        (None, None, Some(provider)) => {
            println!("Applying releases/v{VERSION}/{}:", provider.manifest);
            let mut manifest = release_manifest(provider, url.as_deref())?;
            if options.zones > 0 {
                manifest = with_zones(&manifest, &cluster, options.zones)?;
            }
            if options.dual_stack {
                manifest = with_dual_stack_cluster_cidr(&manifest)?;
            }
            print!("{}", cluster.apply(&manifest).map_err(|e| e.to_string())?);
        }
        (None, None, None) => unreachable!("parse() requires --provider or --values"),
    }
    cluster
        .wait_initialised(WAIT)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "Nodes initialised by the CCM {:.1} s after the start.",
        started.elapsed().as_secs_f64()
    );

    // (Another CCM's Pods carry labels of its own: its initialised Nodes are the sign.)
    let ours = options.manifest.is_none();
    wait_for(&cluster, "the CCM's Pods ready", || {
        !ours
            || kubectl_out(
                &cluster,
                &[
                    "get",
                    "pods",
                    "-n",
                    "kube-system",
                    "-l",
                    "app=cloud-controller-manager",
                    "-o",
                    "jsonpath={.items[*].status.containerStatuses[*].ready}",
                ],
            )
            .is_ok_and(|ready| {
                let ready: Vec<&str> = ready.split_whitespace().collect();
                !ready.is_empty() && ready.iter().all(|r| *r == "true")
            })
    })
    .await?;
    if !options.exec.is_empty() {
        let status = exec(&cluster, &options.exec, url.as_deref()).await;
        stop(cluster);
        return status;
    }
    if provider.is_none() {
        // An author's provider may have no load balancers: its Nodes and Pods are the show.
        for args in [
            NODES_WIDE,
            NODES_BY_CCM,
            &["get", "pods", "-n", "kube-system", "-o", "wide"][..],
        ] {
            println!("\n$ kubectl {}", args.join(" "));
            print!("{}", kubectl_out(&cluster, args)?);
        }
        return finish(cluster, options).await;
    }
    cluster
        .apply(&workload())
        .map_err(|e| format!("the workload: {e}"))?;
    wait_for(&cluster, "the web Deployment available", || {
        kubectl_out(
            &cluster,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.status.availableReplicas}",
            ],
        )
        .is_ok_and(|ready| ready == WEB_REPLICAS.to_string())
    })
    .await?;
    wait_for(&cluster, "the load balancer's ingress", || {
        kubectl_out(
            &cluster,
            &[
                "get",
                "service",
                "web",
                "-o",
                "jsonpath={.status.loadBalancer.ingress[0].ip}",
            ],
        )
        .is_ok_and(|ip| !ip.is_empty())
    })
    .await?;

    for args in [
        NODES_WIDE,
        NODES_BY_CCM,
        &["get", "pods", "-A", "-o", "wide"],
        &["get", "service", "web"],
    ] {
        println!("\n$ kubectl {}", args.join(" "));
        print!("{}", kubectl_out(&cluster, args)?);
    }
    if do_like {
        request_through_load_balancer(&cluster).await?;
    }
    finish(cluster, options).await
}

/// `kubectl get nodes -o wide`.
const NODES_WIDE: &[&str] = &["get", "nodes", "-o", "wide"];
/// The Nodes with what the CCM wrote: provider ID, instance type, zone, taints left.
const NODES_BY_CCM: &[&str] = &[
    "get",
    "nodes",
    "-o",
    "custom-columns=NAME:.metadata.name,PROVIDER-ID:.spec.providerID,TYPE:.metadata.labels.node\\.kubernetes\\.io/instance-type,ZONE:.metadata.labels.topology\\.kubernetes\\.io/zone,TAINTS:.spec.taints[*].key",
];

/// Unless `--once`: prints the kubeconfig to use and keeps the cluster until Ctrl-C. Then
/// stops it; exit status 0.
async fn finish(cluster: Cluster, options: &Options) -> Result<u8, String> {
    let kubeconfig = match &options.kubeconfig {
        Some(path) => {
            std::fs::copy(cluster.kubeconfig_path(), path)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            path.clone()
        }
        None => cluster.kubeconfig_path().to_owned(),
    };
    // With --once the cluster, its kubeconfig and its logs are gone in a moment: no hint.
    if !options.once {
        println!(
            "\nexport KUBECONFIG={}\n(logs of every process: {})",
            kubeconfig.display(),
            cluster.control_plane().dir().display()
        );
        println!("Press Ctrl-C to stop; everything above is then removed.");
        wait_for_stop().await;
    }
    if let Some(path) = &options.kubeconfig {
        let _ = std::fs::remove_file(path);
    }
    stop(cluster);
    Ok(0)
}

fn stop(cluster: Cluster) {
    let stopping = std::time::Instant::now();
    drop(cluster);
    eprintln!("stopped in {:.1} s", stopping.elapsed().as_secs_f64());
}

/// `helm install ccm CHART -n kube-system` with the `--values` file, its `${NODES}` (and with
/// the DO-like cloud `${CLOUD_API_URL}`, `${CLOUD_API_TOKEN}`) filled in; waits until the
/// Deployment is available.
fn helm_install(
    cluster: &Cluster,
    options: &Options,
    values: &Path,
    url: Option<&str>,
) -> Result<(), String> {
    let text = std::fs::read_to_string(values)
        .map_err(|e| format!("--values {}: {e}", values.display()))?;
    let names: Vec<&str> = cluster.nodes().iter().map(|n| n.name()).collect();
    let text = other_manifest(text, url)?.replace("${NODES}", &yaml_list(&names));
    let filled = cluster.control_plane().dir().join("values.yaml");
    std::fs::write(&filled, text).map_err(|e| format!("writing {}: {e}", filled.display()))?;
    let chart = options
        .chart
        .clone()
        .unwrap_or_else(|| workspace().join("charts/cloud-controller-manager"));
    let helm = ccm_test::helm::Helm::find().map_err(|e| e.to_string())?;
    println!(
        "Installing the chart {} with {}:",
        chart.display(),
        values.display()
    );
    let wait = format!("{}s", WAIT.as_secs());
    let installed = helm
        .run(
            cluster,
            [
                "install".as_ref(),
                "ccm".as_ref(),
                chart.as_os_str(),
                "--namespace".as_ref(),
                "kube-system".as_ref(),
                "--values".as_ref(),
                filled.as_os_str(),
                "--wait".as_ref(),
                "--timeout".as_ref(),
                std::ffi::OsStr::new(&wait),
            ],
        )
        .map_err(|e| e.to_string())?;
    print!("{installed}");
    Ok(())
}

/// `names` as a YAML flow sequence of quoted strings, e.g. `["a", "b"]`.
fn yaml_list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// The provider's release manifest with what its comments ask a user to set: the image
/// (built here), and for the DO-like cloud the simulator's token and URL.
fn release_manifest(provider: &Provider, url: Option<&str>) -> Result<String, String> {
    let mut manifest = std::fs::read_to_string(
        workspace().join(format!("releases/v{VERSION}/{}", provider.manifest)),
    )
    .map_err(|e| format!("reading the release manifest: {e}"))?;
    manifest = manifest.replace(
        &format!("image: ghcr.io/ccm-rs/{}:{VERSION}", provider.image),
        &format!("image: localhost/{}:{VERSION}", provider.image),
    );
    if let Some(url) = url {
        manifest = manifest
            .replace("token: REPLACE-ME", &format!("token: {TOKEN}"))
            .replace(
                "# apiUrl: http://do-like-api-simulator.example:8080",
                &format!("apiUrl: {url}"),
            );
    }
    Ok(manifest)
}

/// The release manifest's `--cluster-cidr` flag, which `--dual-stack` extends.
const CLUSTER_CIDR_FLAG: &str = "- --cluster-cidr=10.244.0.0/16\n";

/// The DO-like release manifest with both of a dual-stack cluster's CIDRs in the CCM's
/// `--cluster-cidr` (its route controller then routes both families).
fn with_dual_stack_cluster_cidr(manifest: &str) -> Result<String, String> {
    use ccm_test::cluster::{CLUSTER_CIDR, CLUSTER_CIDR_V6};
    if manifest.matches(CLUSTER_CIDR_FLAG).count() != 1 {
        return Err(format!(
            "--dual-stack: the release manifest has no one {:?} to extend",
            CLUSTER_CIDR_FLAG.trim()
        ));
    }
    Ok(manifest.replace(
        CLUSTER_CIDR_FLAG,
        &format!("- --cluster-cidr={CLUSTER_CIDR},{CLUSTER_CIDR_V6}\n"),
    ))
}

/// The name of zone `i` (`zone-a`, `zone-b`, …, `zone-z`).
fn zone_name(i: usize) -> String {
    let letter = b'a' + u8::try_from(i % 26).unwrap_or(0);
    format!("zone-{}", char::from(letter))
}

/// The fake cloud's cloud-config with every node an instance of its own zone: node `i` in
/// zone `i mod zones`, its addresses the node's own (InternalIP and Hostname, as the fake
/// cloud would take from the kubelet).
fn fake_cloud_config(nodes: &[(&str, String)], zones: usize) -> String {
    let mut config = "nodesAreInstances: true\ninstances:\n".to_owned();
    for (i, (name, address)) in nodes.iter().enumerate() {
        config.push_str(&format!(
            "  - {{name: {name}, zone: {}, addresses: [{{type: InternalIP, address: \"{address}\"}}, \
             {{type: Hostname, address: {name}}}]}}\n",
            zone_name(i % zones.max(1))
        ));
    }
    config
}

/// The fake release manifest's cloud-config, which `--zones` replaces.
const FAKE_CLOUD_CONFIG: &str = "  cloud.yaml: |\n    nodesAreInstances: true\n";

/// The fake release manifest with its cloud-config ([`fake_cloud_config`]) spreading the
/// cluster's nodes over `zones` zones.
fn with_zones(manifest: &str, cluster: &Cluster, zones: usize) -> Result<String, String> {
    let nodes: Vec<(&str, String)> = cluster
        .nodes()
        .iter()
        .map(|n| (n.name(), n.address().to_string()))
        .collect();
    let config = fake_cloud_config(&nodes, zones);
    println!("Zones (the fake cloud's cloud-config):\n{config}");
    zoned_manifest(manifest, &config)
}

/// `manifest` with [`FAKE_CLOUD_CONFIG`] replaced by `config`; an error if it has none.
fn zoned_manifest(manifest: &str, config: &str) -> Result<String, String> {
    if !manifest.contains(FAKE_CLOUD_CONFIG) {
        return Err(format!(
            "--zones: the fake release manifest has no cloud-config {FAKE_CLOUD_CONFIG:?} to replace"
        ));
    }
    let indented: String = config.lines().map(|l| format!("    {l}\n")).collect();
    Ok(manifest.replace(FAKE_CLOUD_CONFIG, &format!("  cloud.yaml: |\n{indented}")))
}

/// Another CCM's manifest (`--manifest`) with `${CLOUD_API_URL}` and `${CLOUD_API_TOKEN}`
/// replaced by the simulator's URL and token; an error if it names them and there is no
/// simulator (the fake provider).
fn other_manifest(text: String, url: Option<&str>) -> Result<String, String> {
    let uses = |name: &str| text.contains(&format!("${{{name}}}"));
    match url {
        Some(url) => Ok(text
            .replace("${CLOUD_API_URL}", url)
            .replace("${CLOUD_API_TOKEN}", TOKEN)),
        None if uses("CLOUD_API_URL") || uses("CLOUD_API_TOKEN") => Err(
            "--manifest names ${CLOUD_API_URL} or ${CLOUD_API_TOKEN}, which only \
             --provider do-like has (its simulator)"
                .to_owned(),
        ),
        None => Ok(text),
    }
}

/// Runs `program args` in the cluster's namespace with an in-cluster admin kubeconfig in
/// `KUBECONFIG` (and with the DO-like cloud, the simulator's `CLOUD_API_URL`,
/// `CLOUD_API_TOKEN` and `CLOUD_API_ADMIN_TOKEN`); its exit status (1 if killed by a signal). On Ctrl-C or SIGTERM the program
/// gets SIGTERM (and SIGKILL after [`EXEC_GRACE`]), and the cluster is stopped after it:
/// 130 or 143.
async fn exec(cluster: &Cluster, command: &[String], api_url: Option<&str>) -> Result<u8, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let kubeconfig = cluster.kubeconfig_in_cluster().map_err(|e| e.to_string())?;
    println!(
        "\n$ {}   (in the cluster's network namespace)",
        command.join(" ")
    );
    let mut child = cluster.command(&command[0]);
    child.args(&command[1..]).env("KUBECONFIG", &kubeconfig);
    if let Some(url) = api_url {
        child
            .env("CLOUD_API_URL", url)
            .env("CLOUD_API_TOKEN", TOKEN)
            .env("CLOUD_API_ADMIN_TOKEN", ADMIN_TOKEN);
    }
    let mut child = child
        .spawn()
        .map_err(|e| format!("running {}: {e}", command[0]))?;
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("catching SIGTERM: {e}"))?;
    loop {
        if let Some(status) = child
            .try_wait()
            .map_err(|e| format!("waiting for {}: {e}", command[0]))?
        {
            println!(
                "{} exited: {status} (logs of every cluster process: {})",
                command[0],
                cluster.control_plane().dir().display()
            );
            return Ok(status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(1));
        }
        let signalled = tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(200)) => None,
            _ = tokio::signal::ctrl_c() => Some(130),
            _ = terminate.recv() => Some(143),
        };
        if let Some(code) = signalled {
            eprintln!("stopping {} and the cluster", command[0]);
            stop_child(&mut child).await;
            return Ok(code);
        }
    }
}

/// How long a program run with `--exec` has to finish after SIGTERM.
const EXEC_GRACE: Duration = Duration::from_secs(30);

/// SIGTERM (through kill(1): this crate links no libc bindings), then SIGKILL after
/// [`EXEC_GRACE`].
async fn stop_child(child: &mut std::process::Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = tokio::time::Instant::now() + EXEC_GRACE;
    while tokio::time::Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `curl http://<address>/` of the `web` Service's load balancer in the cluster's
/// namespace (as a client on the cloud's network would) until four requests are answered,
/// and prints the answers: the names of the Pods that served them.
async fn request_through_load_balancer(cluster: &Cluster) -> Result<(), String> {
    let ip = kubectl_out(
        cluster,
        &[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ],
    )?;
    let ip: std::net::Ipv4Addr = ip
        .trim()
        .parse()
        .map_err(|_| format!("the load balancer's address {ip:?} is not an IPv4 address"))?;
    let url = format!("http://{ip}/");
    let curl = [
        "--silent",
        "--show-error",
        "--fail",
        "--max-time",
        "5",
        &url,
    ];
    println!(
        "\n$ curl {}   (in the cluster's network namespace, through the load balancer)",
        curl.join(" ")
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut answered = Vec::new();
    while answered.len() < 4 {
        let out = cluster
            .command("curl")
            .args(curl)
            .output()
            .map_err(|e| format!("running curl (apt-get install curl): {e}"))?;
        if out.status.success() {
            answered.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
            continue;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "no answer through the load balancer at {url}: {}\n{}",
                String::from_utf8_lossy(&out.stderr).trim(),
                cluster.log(SIMULATOR)
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for body in &answered {
        println!("{body}");
    }
    println!("(each line is the name of the Pod that answered)");
    Ok(())
}

/// How many web Pods the workload runs.
const WEB_REPLICAS: u32 = 2;

/// A Deployment of the cluster's web image (it answers with its Pod's name) and a
/// LoadBalancer Service in front of it.
fn workload() -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: default}}
spec:
  replicas: {WEB_REPLICAS}
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: web, image: {WEB_IMAGE}, ports: [{{containerPort: 8080}}]}}]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: default}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports: [{{name: http, port: 80, targetPort: 8080}}]
"
    )
}

/// Starts the DO-like API simulator in the cluster's namespace (with `kernel_routes`, its
/// routes routes of that namespace: `--kernel-routes on`; with `dual_stack`, IPv6 addresses
/// for dual-stack load balancers), registers each node as a droplet with the node's
/// address (addresses), and returns the API's URL as the nodes reach it.
async fn start_simulator(
    cluster: &Cluster,
    kernel_routes: bool,
    dual_stack: bool,
) -> Result<String, String> {
    let binary = workspace().join(format!("target/images/context/{SIMULATOR}/{SIMULATOR}"));
    if !binary.is_file() {
        return Err(format!(
            "no {}: run scripts/images.sh --debug {SIMULATOR}",
            binary.display()
        ));
    }
    let dir = cluster.control_plane().dir();
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok::<_, String>(path)
    };
    let token = write("do-like-token", TOKEN)?;
    let admin_token = write("do-like-admin-token", ADMIN_TOKEN)?;
    let address = SocketAddr::from((cluster.gateway_address(), SIMULATOR_PORT));
    let v6_range = dual_stack.then(|| {
        format!(
            "--lb-addresses-v6={}",
            ccm_test::cluster::LOAD_BALANCER_CIDR_V6
        )
    });
    cluster
        .start_process(
            SIMULATOR,
            &binary,
            &[
                format!("--listen={address}"),
                "--non-loopback=on".to_owned(),
                format!("--lb-addresses={LOAD_BALANCER_CIDR}"),
                format!("--token-file={}", token.display()),
                format!("--admin-token-file={}", admin_token.display()),
                format!(
                    "--kernel-routes={}",
                    if kernel_routes { "on" } else { "off" }
                ),
            ]
            .into_iter()
            .chain(v6_range)
            .collect::<Vec<_>>(),
        )
        .map_err(|e| e.to_string())?;
    for node in cluster.nodes() {
        let ipv6 = node
            .address_v6()
            .map(|v6| format!(r#","ipv6_address":"{v6}""#))
            .unwrap_or_default();
        let body = format!(
            r#"{{"name":"{}","private_ip_address":"{}"{ipv6}}}"#,
            node.name(),
            node.address()
        );
        let mut tries = 0;
        loop {
            match post(cluster, address, "/admin/droplets", &body).await {
                Ok(status) if status.starts_with("HTTP/1.1 2") => break,
                other if tries >= 50 => {
                    return Err(format!(
                        "registering {} as a droplet: {other:?}\n{}",
                        node.name(),
                        cluster.log(SIMULATOR)
                    ));
                }
                _ => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    println!(
        "DO-like API simulator at http://{address} (in the cluster's namespace); droplets: {}.",
        cluster
            .nodes()
            .iter()
            .map(|n| format!("{} ({})", n.name(), n.address()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(format!("http://{address}"))
}

/// A `POST` to the simulator's admin API from inside the cluster; its status line.
async fn post(
    cluster: &Cluster,
    address: SocketAddr,
    path: &str,
    body: &str,
) -> std::io::Result<String> {
    let mut stream = cluster.connect(address).await?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.take(64 * 1024).read_to_end(&mut response).await?;
    Ok(String::from_utf8_lossy(&response)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned())
}

fn kubectl_out(cluster: &Cluster, args: &[&str]) -> Result<String, String> {
    let mut kubectl = cluster.kubectl().ok_or("no kubectl")?;
    let out = kubectl
        .args(args)
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

async fn wait_for(cluster: &Cluster, what: &str, check: impl Fn() -> bool) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out waiting for {what}\n{}",
                kubectl_out(cluster, &["get", "pods,services", "-A", "-o", "wide"])
                    .unwrap_or_default()
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut terminate) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::{
        DO_LIKE, TOKEN, other_manifest, parse, release_manifest, with_dual_stack_cluster_cidr,
    };

    fn args(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn flags_parse_with_clear_errors() {
        let options = parse(args(&["--provider", "do-like", "--nodes=3", "--once"])).unwrap();
        assert_eq!(options.provider.unwrap().manifest, "do-like-cloud.yaml");
        assert_eq!(options.nodes, 3);
        assert!(options.once);
        assert!(options.exec.is_empty() && options.images.is_empty());
        let options = parse(args(&[
            "--provider=do-like",
            "--image",
            "a.tar",
            "--image=b.tar",
            "--manifest=theirs.yaml",
            "--exec",
            "e2e.test",
            "--provider=aws",
            "--nodes=9",
        ]))
        .unwrap();
        assert_eq!(
            options.images,
            [PathBuf::from("a.tar"), PathBuf::from("b.tar")]
        );
        assert_eq!(
            options.exec,
            ["e2e.test", "--provider=aws", "--nodes=9"],
            "everything after --exec is the program's"
        );
        assert_eq!(options.manifest, Some(PathBuf::from("theirs.yaml")));
        assert_eq!(options.nodes, 2);
        for (bad, says) in [
            (&["--provider=fake", "--exec"][..], "needs a program"),
            (&["--nodes", "2"][..], "--provider is required"),
            (&["--provider", "aws"][..], "fake or do-like"),
            (&["--provider=fake", "--nodes=0"][..], "1 to 20"),
            (&["--provider=fake", "--bogus"][..], "unknown argument"),
            (&["--values=v.yaml"][..], "give its image with --image"),
            (&["--image=a.tar"][..], "--provider is required"),
            (
                &["--provider=fake", "--values=v.yaml", "--manifest=m.yaml"][..],
                "not both",
            ),
            (
                &["--provider=fake", "--chart=c"][..],
                "the chart of --values",
            ),
        ] {
            let error = parse(args(bad)).err().unwrap();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn zones_are_the_fake_clouds_and_cloud_routes_the_do_like_clouds() {
        let options = parse(args(&["--provider=fake", "--nodes=4", "--zones", "3"])).unwrap();
        assert_eq!((options.zones, options.cloud_routes), (3, false));
        let options = parse(args(&["--provider=do-like", "--pod-routes=cloud"])).unwrap();
        assert_eq!((options.zones, options.cloud_routes), (0, true));
        for (bad, says) in [
            (&["--provider=do-like", "--zones=3"][..], "--provider fake"),
            (
                &["--provider=fake", "--zones=3", "--manifest=m.yaml"][..],
                "without --manifest",
            ),
            (&["--provider=fake", "--zones=0"][..], "1 to 26"),
            (&["--provider=fake", "--zones=27"][..], "1 to 26"),
            (
                &["--provider=fake", "--pod-routes=cloud"][..],
                "--provider do-like",
            ),
            (
                &["--provider=do-like", "--pod-routes=vpc"][..],
                "cloud or cluster",
            ),
        ] {
            let error = parse(args(bad)).err().unwrap();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn node_i_is_in_zone_i_mod_n_with_its_own_addresses() {
        let nodes: Vec<(&str, String)> = ["cp", "w1", "w2", "w3"]
            .iter()
            .enumerate()
            .map(|(i, n)| (*n, format!("10.88.0.{}", 10 + i)))
            .collect();
        let config = super::fake_cloud_config(&nodes, 3);
        let zones: Vec<&str> = config
            .lines()
            .filter_map(|l| l.split("zone: ").nth(1)?.split(',').next())
            .collect();
        assert_eq!(zones, ["zone-a", "zone-b", "zone-c", "zone-a"], "{config}");
        assert!(config.starts_with("nodesAreInstances: true\ninstances:\n"));
        assert!(
            config.contains(
                "- {name: w2, zone: zone-c, addresses: [{type: InternalIP, address: \"10.88.0.12\"}, \
                 {type: Hostname, address: w2}]}"
            ),
            "{config}"
        );
        assert_eq!(super::zone_name(25), "zone-z");

        // The release manifest has the cloud-config --zones replaces; the instances go into
        // its ConfigMap's block scalar.
        let release = super::release_manifest(&super::FAKE, None).unwrap();
        let zoned = super::zoned_manifest(&release, &config).unwrap();
        assert!(
            zoned.contains("  cloud.yaml: |\n    nodesAreInstances: true\n    instances:\n      - {name: cp, zone: zone-a,"),
            "{zoned}"
        );
        let error = super::zoned_manifest("kind: ConfigMap\n", &config).unwrap_err();
        assert!(error.contains("no cloud-config"), "{error}");
    }

    #[test]
    fn an_authors_ccm_is_its_image_and_chart_values_with_no_bundled_provider() {
        let options = parse(args(&[
            "--image=target/images/acme.tar",
            "--values",
            "acme.yaml",
            "--chart=../charts/ccm",
        ]))
        .unwrap();
        assert!(options.provider.is_none());
        assert_eq!(options.values, Some(PathBuf::from("acme.yaml")));
        assert_eq!(options.chart, Some(PathBuf::from("../charts/ccm")));
        assert_eq!(options.images, [PathBuf::from("target/images/acme.tar")]);
        assert_eq!(
            super::yaml_list(&["ccm-control-plane", "ccm-worker"]),
            r#"["ccm-control-plane", "ccm-worker"]"#
        );
    }

    #[test]
    fn dual_stack_is_the_do_like_clouds_and_gives_its_ccm_both_cluster_cidrs() {
        let options = parse(args(&["--provider=do-like", "--dual-stack"])).unwrap();
        assert!(options.dual_stack);
        assert!(!parse(args(&["--provider=do-like"])).unwrap().dual_stack);
        for bad in [
            &["--provider=fake", "--dual-stack"][..],
            &["--provider=do-like", "--dual-stack", "--manifest=m.yaml"][..],
        ] {
            let error = parse(args(bad)).err().unwrap();
            assert!(
                error.contains("--provider do-like, without"),
                "{bad:?}: {error}"
            );
        }
        let manifest = release_manifest(&DO_LIKE, Some("http://10.88.0.1:8080")).unwrap();
        let dual = with_dual_stack_cluster_cidr(&manifest).unwrap();
        assert!(
            dual.contains("- --cluster-cidr=10.244.0.0/16,fd00:10:244::/56\n"),
            "the release manifest's flag, extended"
        );
        assert!(with_dual_stack_cluster_cidr("kind: Deployment\n").is_err());
    }

    #[test]
    fn another_manifest_gets_the_simulators_url_and_token() {
        let theirs = "env: [{name: DO_OVERRIDE_URL, value: \"${CLOUD_API_URL}\"}]\n\
                      token: \"${CLOUD_API_TOKEN}\"\n";
        let rendered = other_manifest(theirs.to_owned(), Some("http://10.88.0.1:8080")).unwrap();
        assert_eq!(
            rendered,
            format!(
                "env: [{{name: DO_OVERRIDE_URL, value: \"http://10.88.0.1:8080\"}}]\n\
                 token: \"{TOKEN}\"\n"
            )
        );
        let error = other_manifest(theirs.to_owned(), None).unwrap_err();
        assert!(error.contains("only --provider do-like"), "{error}");
        assert_eq!(
            other_manifest("kind: Pod\n".to_owned(), None).unwrap(),
            "kind: Pod\n"
        );
    }
}
