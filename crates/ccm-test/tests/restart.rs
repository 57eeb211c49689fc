//! Stopping and starting the servers of a control plane: clients made before reconnect to
//! the same port with the same certificates, and the data survives in etcd. Each test
//! starts a control plane of its own; the shared one refuses.

use std::time::Duration;

use ccm_test::{ControlPlane, Error, Server, eventually, unique_name};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

async fn own_control_plane() -> ControlPlane {
    ccm_test::init_tracing("ccm_test=info");
    ControlPlane::start()
        .await
        .expect("a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)")
}

async fn create_config_map(api: &Api<ConfigMap>) -> String {
    let name = unique_name("survivor");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_owned(), "v".to_owned())].into()),
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
    name
}

#[tokio::test]
async fn the_apiserver_restarts_on_the_same_port_certificates_and_data() {
    let cp = own_control_plane().await;
    // Made before the restart, used after it.
    let client = cp.client().unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let name = create_config_map(&config_maps).await;
    let (etcd_before, apiserver_before) = cp.process_ids();

    // ANCHOR: restart
    cp.stop_server(Server::KubeApiserver).await.unwrap();
    assert!(
        config_maps.get(&name).await.is_err(),
        "no API server while it is stopped"
    );
    // Stopping a stopped server is harmless.
    cp.stop_server(Server::KubeApiserver).await.unwrap();
    cp.start_server(Server::KubeApiserver).await.unwrap();
    // ANCHOR_END: restart

    let (etcd_after, apiserver_after) = cp.process_ids();
    assert_eq!(etcd_after, etcd_before, "etcd kept running");
    assert_ne!(apiserver_after, apiserver_before, "a new kube-apiserver");
    // The old client reconnects (same port, same serving certificate) and finds the data.
    let cm = eventually(
        "the old client to read through the new server",
        Duration::from_secs(10),
        || async { config_maps.get(&name).await.map_err(|e| e.to_string()) },
    )
    .await;
    assert_eq!(cm.data.unwrap()["k"], "v");
    // The kubeconfig still works too.
    if let Some(mut kubectl) = cp.kubectl() {
        let out = kubectl.args(["get", "configmap", &name]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        matches!(
            cp.start_server(Server::KubeApiserver).await,
            Err(Error::InvalidArgument(_))
        ),
        "starting a running server is refused"
    );
}

#[tokio::test]
async fn etcd_restarts_with_its_data() {
    let cp = own_control_plane().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(cp.client().unwrap(), "default");
    let name = create_config_map(&config_maps).await;

    // Both down, then up in order: a whole control plane's restart.
    cp.stop_server(Server::KubeApiserver).await.unwrap();
    cp.restart_server(Server::Etcd).await.unwrap();
    cp.start_server(Server::KubeApiserver).await.unwrap();
    assert_eq!(
        config_maps.get(&name).await.unwrap().data.unwrap()["k"],
        "v"
    );
    // etcd alone, under a running API server: it reconnects.
    cp.restart_server(Server::Etcd).await.unwrap();
    let again = eventually(
        "a write after etcd's restart",
        Duration::from_secs(30),
        || async {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(unique_name("after-etcd")),
                    ..ObjectMeta::default()
                },
                ..ConfigMap::default()
            };
            config_maps
                .create(&PostParams::default(), &cm)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    assert!(again.metadata.resource_version.is_some());
}

#[tokio::test]
async fn the_shared_control_plane_is_not_restarted() {
    let cp = ControlPlane::shared().await.expect(
        "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
    );
    let err = cp.stop_server(Server::KubeApiserver).await.unwrap_err();
    assert!(err.to_string().contains("own"), "{err}");
    cp.client()
        .unwrap()
        .apiserver_version()
        .await
        .expect("still serving");
}

#[tokio::test]
async fn a_kubeconfig_for_a_user_authenticates_as_that_user() {
    let cp = ControlPlane::shared().await.expect(
        "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
    );
    let user = unique_name("replica");
    let path = cp.kubeconfig_for_user(&user, &["system:masters"]).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let review: serde_json::Value = client
        .request(
            http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
                .header("content-type", "application/json")
                .body(
                    serde_json::to_vec(&serde_json::json!({
                        "apiVersion": "authentication.k8s.io/v1",
                        "kind": "SelfSubjectReview"
                    }))
                    .unwrap(),
                )
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(review["status"]["userInfo"]["username"], user.as_str());
    assert!(cp.kubeconfig_for_user("../x", &[]).is_err());
}
