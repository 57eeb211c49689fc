//! What the simulator's tests share: a simulator started in-process, and requests to its API
//! over HTTP, as a client sends them.
// Each test file uses a part of this.
#![allow(dead_code)]

use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;

/// Starts a simulator on 127.0.0.1 that takes `token`, with the defaults changed by `tweak`.
pub(crate) async fn start(
    token: &str,
    tweak: impl FnOnce(&mut SimulatorConfig),
) -> RunningSimulator {
    let mut cfg = SimulatorConfig::new(token);
    tweak(&mut cfg);
    RunningSimulator::start(cfg).await.unwrap()
}

/// Requests to one simulator: its base URL, and the API token for `/v2`.
pub(crate) struct Api {
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Api {
    /// Requests to the simulator at `url` (`http://127.0.0.1:PORT`) with `token`.
    pub(crate) fn new(url: impl Into<String>, token: &str) -> Self {
        // reqwest is built without a default crypto provider; the workspace's rustls uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            http: reqwest::Client::new(),
            url: url.into(),
            token: token.to_owned(),
        }
    }

    /// Requests to `sim` with `token`.
    pub(crate) fn of(sim: &RunningSimulator, token: &str) -> Self {
        Self::new(sim.url(), token)
    }

    /// `method path` (`/admin/…`, or `/v2/…` with a token of the test's own), no token.
    pub(crate) fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url))
    }

    /// `method path` with the API token.
    pub(crate) fn v2(&self, method: Method, path: &str) -> RequestBuilder {
        self.request(method, path).bearer_auth(&self.token)
    }
}

/// Sends `request`: the response, whatever its status.
pub(crate) async fn send(request: RequestBuilder) -> Response {
    request.send().await.unwrap()
}

/// Sends `request`: the JSON body of the response, whatever its status.
pub(crate) async fn json(request: RequestBuilder) -> Value {
    send(request).await.json().await.unwrap()
}
