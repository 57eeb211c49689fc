//! Behind a corporate proxy: the client reaches the API through the proxy that
//! `HTTP_PROXY` / `HTTPS_PROXY` name, by Go's rules (as DigitalOcean's CCM, on Go's default
//! transport, does), with the proxy's credentials, and never for a loopback address;
//! against the simulator on 127.0.0.1 and a forward proxy on loopback
//! (`ccm_test::proxy`), the API named by a host that only the proxy knows (no name is
//! looked up). Which hosts `NO_PROXY` sends directly is `EnvProxy`'s unit tests'.

use std::time::Duration;

use ccm_core::provider::proxy::EnvProxy;
use ccm_do_like_cloud::{ApiToken, Client, ClientOptions};
use ccm_do_like_simulator::{RunningSimulator, SimulatorConfig};
use ccm_test::proxy::ForwardProxy;

const TOKEN: &str = "dop_v1_proxy-test-token";

#[tokio::test]
async fn the_api_is_reached_through_the_environments_proxy() {
    let sim = RunningSimulator::start(SimulatorConfig::new(TOKEN))
        .await
        .unwrap();
    sim.handle().create_droplet("d1", "s-1vcpu-1gb", "nyc1");
    let api = format!("api.digitalocean.test:{}", sim.addr().port());
    let proxy = ForwardProxy::start(&[(api.as_str(), sim.addr())]).await;
    let client = |env: EnvProxy| {
        let mut opts = ClientOptions::new(format!("http://{api}"), ApiToken::new(TOKEN));
        opts.timeout = Duration::from_secs(5);
        opts.proxy = env;
        Client::new(opts).unwrap()
    };

    let through = client(EnvProxy::from_values(
        None,
        Some(&proxy.url_with("corp", "pa55word")),
        Some("127.0.0.1,.internal"),
    ));
    let droplets = through.list_droplets().await.unwrap();
    assert_eq!(droplets.len(), 1);
    let seen = proxy.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|p| p.target == api
                && p.authorization.as_deref() == Some("Basic Y29ycDpwYTU1d29yZA==")),
        "{seen:?}"
    );

    // The simulator on loopback: never through the proxy, as Go.
    let before = proxy.seen().len();
    let mut opts = ClientOptions::new(sim.url(), ApiToken::new(TOKEN));
    opts.proxy = EnvProxy::from_values(None, Some(&proxy.url()), None);
    Client::new(opts).unwrap().list_droplets().await.unwrap();
    assert_eq!(proxy.seen().len(), before);
}
