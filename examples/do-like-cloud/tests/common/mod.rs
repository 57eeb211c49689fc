//! What the DO-like CCM's cluster tests (`cluster.rs`, `cluster_beyond_go.rs`,
//! `cluster_routes.rs`) share: the release manifest as a user would edit it, the simulator
//! started in the cluster's network namespace and its API as the CCM sees it, and a few
//! readings of the cluster.
#![allow(dead_code, reason = "each test binary uses a part of it")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ccm_test::cluster::LOAD_BALANCER_CIDR;
use ccm_test::net::http_get_over;
use ccm_test::{Cluster, eventually};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::Api;
use kube::api::{Patch, PatchParams};

pub(crate) const IMAGE: &str = "do-like-cloud-controller-manager";
const RELEASED_IMAGE: &str = "ghcr.io/ccm-rs/do-like-cloud-controller-manager:0.1.0";
pub(crate) const LOCAL_IMAGE: &str = "localhost/do-like-cloud-controller-manager:0.1.0";
pub(crate) const SIMULATOR: &str = "do-like-api-simulator";
const SIMULATOR_PORT: u16 = 8080;
pub(crate) const TOKEN: &str = "cluster-test-token";
pub(crate) const ADMIN_TOKEN: &str = "cluster-test-admin-token";
pub(crate) const WAIT: Duration = Duration::from_secs(120);

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The simulator's binary, built by `scripts/images.sh --debug`.
pub(crate) fn simulator_binary() -> PathBuf {
    let simulator = workspace().join(format!("target/images/context/{SIMULATOR}/{SIMULATOR}"));
    assert!(
        simulator.is_file(),
        "no {}: run scripts/images.sh --debug {SIMULATOR}",
        simulator.display()
    );
    simulator
}

/// The release manifest with what its comments ask a user to set (the image, the token, the
/// API's URL), and `flags` after the manifest's own.
pub(crate) fn release_manifest(api_url: &str, flags: &[&str]) -> String {
    let text = std::fs::read_to_string(workspace().join("releases/v0.1.0/do-like-cloud.yaml"))
        .expect("the release manifest");
    let last_arg = "            - --secure-port=10258\n";
    let with_flags = flags.iter().fold(last_arg.to_owned(), |args, flag| {
        format!("{args}            - {flag}\n")
    });
    let edits = [
        (
            format!("image: {RELEASED_IMAGE}"),
            format!("image: {LOCAL_IMAGE}"),
        ),
        ("token: REPLACE-ME".to_owned(), format!("token: {TOKEN}")),
        (
            "# apiUrl: http://do-like-api-simulator.example:8080".to_owned(),
            format!("apiUrl: {api_url}"),
        ),
        (last_arg.to_owned(), with_flags),
    ];
    edits.iter().fold(text, |text, (from, to)| {
        assert_eq!(text.matches(from.as_str()).count(), 1, "{from}");
        text.replace(from.as_str(), to)
    })
}

/// The simulator's API through a loopback forward into the cluster, as the CCM sees it
/// (`Host` names the simulator's address in the cluster).
pub(crate) struct CloudApi {
    http: reqwest::Client,
    base: String,
    host: String,
    /// The token files, there as long as the simulator runs.
    _tokens: tempfile::TempDir,
}

impl CloudApi {
    /// Starts `simulator` (the binary) in the cluster's namespace at its gateway address,
    /// with the test's tokens, and waits until it answers.
    pub(crate) async fn start(cluster: &Cluster, simulator: &Path) -> Self {
        Self::start_with(cluster, simulator, &[]).await
    }

    /// [`start`](Self::start) with more of the simulator's flags.
    pub(crate) async fn start_with(cluster: &Cluster, simulator: &Path, flags: &[&str]) -> Self {
        let files = tempfile::tempdir().unwrap();
        let token_file = files.path().join("token");
        let admin_token_file = files.path().join("admin-token");
        std::fs::write(&token_file, TOKEN).unwrap();
        std::fs::write(&admin_token_file, ADMIN_TOKEN).unwrap();
        let address = SocketAddr::from((cluster.gateway_address(), SIMULATOR_PORT));
        cluster
            .start_process(
                SIMULATOR,
                simulator,
                &[
                    format!("--listen={address}"),
                    "--non-loopback=on".to_owned(),
                    format!("--token-file={}", token_file.display()),
                    format!("--admin-token-file={}", admin_token_file.display()),
                    "--lb-activation-ms=500".to_owned(),
                    format!("--lb-addresses={LOAD_BALANCER_CIDR}"),
                ]
                .into_iter()
                .chain(flags.iter().map(|f| (*f).to_owned()))
                .collect::<Vec<_>>(),
            )
            .unwrap();
        let api = CloudApi {
            http: reqwest::Client::new(),
            base: format!("http://{}", cluster.forward(address).unwrap()),
            host: address.to_string(),
            _tokens: files,
        };
        eventually("the simulator answering", WAIT, || async {
            api.send(reqwest::Method::GET, "/v2/droplets", TOKEN, None)
                .await
                .map_err(|e| format!("{e}: {}", cluster.log(SIMULATOR)))
        })
        .await;
        api
    }

    /// The API's URL in the cluster, for the CCM's cloud-config.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.host)
    }

    /// `method path` with `token` and the JSON `body`: the JSON answer (null if none), or
    /// why there is none (no answer, or not a success).
    pub(crate) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, String> {
        let mut request = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .header("Host", &self.host)
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("{method} {path}: {status} {text}"));
        }
        Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::Null))
    }

    pub(crate) async fn load_balancers(&self) -> Vec<serde_json::Value> {
        let list = self
            .send(
                reqwest::Method::GET,
                "/v2/load_balancers?per_page=200",
                TOKEN,
                None,
            )
            .await
            .unwrap();
        list["load_balancers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Creates a droplet standing for the machine at `address`; its ID.
    pub(crate) async fn droplet(&self, name: &str, address: std::net::Ipv4Addr) -> u64 {
        self.dual_stack_droplet(name, address, None).await
    }

    /// [`droplet`](Self::droplet) with the machine's IPv6 address too (unique-local,
    /// `fd00::/8`), which the provider reports as the Node's `ExternalIP`, as DigitalOcean's
    /// CCM reports a droplet's public IPv6 address: for a dual-stack node.
    pub(crate) async fn dual_stack_droplet(
        &self,
        name: &str,
        address: std::net::Ipv4Addr,
        ipv6: Option<std::net::Ipv6Addr>,
    ) -> u64 {
        let mut body = serde_json::json!({"name": name, "private_ip_address": address.to_string()});
        if let Some(ipv6) = ipv6 {
            body["ipv6_address"] = ipv6.to_string().into();
        }
        let created = self
            .send(
                reqwest::Method::POST,
                "/admin/droplets",
                ADMIN_TOKEN,
                Some(body),
            )
            .await
            .unwrap();
        created["droplet"]["id"]
            .as_u64()
            .unwrap_or_else(|| panic!("no droplet ID in {created}"))
    }
}

pub(crate) fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .iter()
        .flat_map(|s| s.taints.iter().flatten())
        .map(|t| t.key.clone())
        .collect()
}

/// The body of `GET /` at `target` inside the cluster, when the answer is a 200.
pub(crate) async fn http_get(cluster: &Cluster, target: SocketAddr) -> Result<String, String> {
    let stream = cluster.connect(target).await.map_err(|e| e.to_string())?;
    match http_get_over(stream, &target.to_string(), "/").await? {
        (200, body) => Ok(body.trim().to_owned()),
        (status, body) => Err(format!("answered {status}: {body:?}")),
    }
}

/// Sets the replicas of the Deployment `name`.
pub(crate) async fn scale(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    deployments
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

/// The Service's first ingress IP, if any.
pub(crate) fn ingress_ip(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|ingress| ingress.first()?.ip.clone())
}
