//! Protobuf against a real API server: every object read in protobuf equals the same
//! object read in JSON, field for field, for the kinds the CCM reads in protobuf (Nodes and
//! Services, each with every field this test can set, lists of them, Events) and the
//! server's errors; and a protobuf watch of Nodes sees every change a JSON one sees.

use ccm_runtime::client::protobuf::{self, MEDIA_TYPE, Protobuf};
use ccm_runtime::informer::{Change, Informer};
use ccm_test::ControlPlane;
use http::Request;
use k8s_openapi::List;
use k8s_openapi::api::core::v1::{Event, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::json;

async fn control_plane() -> (&'static ControlPlane, Client) {
    ccm_test::init_tracing("warn");
    let cp = ControlPlane::shared().await.expect(
        "a real control plane (run tools/control-plane/build.sh or set KUBEBUILDER_ASSETS)",
    );
    (cp, cp.client().expect("admin client"))
}

/// GET `path` with `accept`: the status code and the body.
async fn get(client: &Client, path: &str, accept: &str) -> (u16, Vec<u8>) {
    let req = Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())
        .unwrap();
    let res = client.send(req).await.expect("the request");
    let status = res.status().as_u16();
    (
        status,
        res.into_body()
            .collect_bytes()
            .await
            .expect("the body")
            .to_vec(),
    )
}

/// `path` read in JSON and in protobuf: both, decoded; they must be equal.
async fn both<K>(client: &Client, path: &str) -> K
where
    K: Protobuf + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let (code, json) = get(client, path, "application/json").await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&json));
    let from_json: K = serde_json::from_slice(&json).expect("JSON");
    let (code, pb) = get(client, path, MEDIA_TYPE).await;
    assert_eq!(code, 200);
    assert!(pb.starts_with(b"k8s\0"), "the server answered protobuf");
    let from_pb: K = protobuf::decode(&pb).expect("protobuf");
    assert_eq!(from_pb, from_json, "{path}: protobuf and JSON differ");
    from_pb
}

/// The list at `path` read in JSON and in protobuf; they must be equal.
async fn both_lists<K>(client: &Client, path: &str) -> List<K>
where
    K: Protobuf + DeserializeOwned + k8s_openapi::ListableResource + PartialEq + std::fmt::Debug,
{
    let (code, json) = get(client, path, "application/json").await;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&json));
    let from_json: List<K> = serde_json::from_slice(&json).expect("JSON");
    let (code, pb) = get(client, path, MEDIA_TYPE).await;
    assert_eq!(code, 200);
    let from_pb: List<K> = protobuf::decode_list(&pb).expect("protobuf");
    assert_eq!(
        from_pb.items, from_json.items,
        "{path}: protobuf and JSON differ"
    );
    from_pb
}

#[tokio::test]
async fn a_node_with_every_field_reads_the_same_in_protobuf_and_json() {
    let (_cp, client) = control_plane().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let name = format!("pb-{}", std::process::id());
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "empty": ""},
            "annotations": {"note": "ünïcödé ✓", "json": "{\"a\": [1, 2]}"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": "0b8a3c52-60b1-4d4a-9b0e-0d3f0e7c1a11", "controller": true, "blockOwnerDeletion": false}],
        },
        "spec": {
            "podCIDR": "10.244.7.0/24", "podCIDRs": ["10.244.7.0/24", "fd00:10:244:7::/64"],
            "providerID": "fake://pb", "unschedulable": true,
            "taints": [
                {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
                {"key": "example.com/no-value", "effect": "NoExecute", "timeAdded": "2026-12-06T20:11:52Z"},
            ],
        },
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &node)
        .await
        .expect("create");
    let status = json!({"status": {
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110", "example.com/gpu": "0"},
        "allocatable": {"cpu": "1500m", "memory": "7.5Gi"},
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": "2026-12-06T20:11:52Z", "lastTransitionTime": "2026-12-06T20:00:00Z"},
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "",
             "lastHeartbeatTime": "2026-12-06T20:11:52Z", "lastTransitionTime": "2026-12-06T20:11:52Z"},
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}, {"type": "InternalIP", "address": "fd00:10:88::7"},
                      {"type": "ExternalIP", "address": "203.0.113.7"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "6.1.0",
            "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0.0", "kubeletVersion": "v1.36.3",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64", "swap": {"capacity": 1_073_741_824_i64}},
        "images": [{"names": ["registry.k8s.io/pause:3.10.2"], "sizeBytes": 321_000}, {"names": [], "sizeBytes": 0}],
        "volumesInUse": ["kubernetes.io/csi/a^b"],
        "volumesAttached": [{"name": "kubernetes.io/csi/a^b", "devicePath": "/dev/sdb"}],
        "runtimeHandlers": [{"name": "", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}],
        "features": {"supplementalGroupsPolicy": true},
    }});
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let read: Node = both(&client, &format!("/api/v1/nodes/{name}")).await;
    // what the comparison covered, so a decoder that dropped everything could not pass
    let status = read.status.as_ref().unwrap();
    assert_eq!(status.addresses.as_ref().unwrap().len(), 4);
    assert!(status.conditions.as_ref().unwrap().len() >= 2);
    assert!(
        read.metadata
            .managed_fields
            .as_ref()
            .is_some_and(|m| !m.is_empty())
    );
    // ours, and the not-ready taint the API server's admission adds
    assert!(read.spec.as_ref().unwrap().taints.as_ref().unwrap().len() >= 2);
    // this Node only: other tests create Nodes between the two reads
    let path = format!("/api/v1/nodes?fieldSelector=metadata.name%3D{name}");
    let list: List<Node> = both_lists(&client, &path).await;
    assert_eq!(list.items.len(), 1);
    nodes
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    nodes.delete(&name, &Default::default()).await.unwrap();
}

#[tokio::test]
async fn a_load_balancer_service_reads_the_same_in_protobuf_and_json() {
    let (cp, client) = control_plane().await;
    let ns = cp.create_namespace("pb").await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "annotations": {"service.beta.kubernetes.io/do-loadbalancer-protocol": "http"}},
        "spec": {
            "type": "LoadBalancer",
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http-alt"},
                {"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353},
            ],
            "selector": {"app": "web"},
            "sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 600}},
            "externalTrafficPolicy": "Local",
            "loadBalancerSourceRanges": ["192.0.2.0/24"],
            "allocateLoadBalancerNodePorts": false,
            "loadBalancerClass": "example.com/lb",
            "ipFamilyPolicy": "SingleStack",
            "publishNotReadyAddresses": false,
        },
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &svc)
        .await
        .expect("create");
    let status = json!({"status": {
        "loadBalancer": {"ingress": [
            {"ip": "203.0.113.9", "ipMode": "VIP", "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP", "error": "Pending"}]},
            {"hostname": "lb.example.com"},
        ]},
        "conditions": [{"type": "LoadBalancerServing", "status": "True", "reason": "Serving", "message": "",
            "lastTransitionTime": "2026-12-06T20:11:52Z", "observedGeneration": 1}],
    }});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("status");
    let read: Service = both(&client, &format!("/api/v1/namespaces/{ns}/services/web")).await;
    let spec = read.spec.as_ref().unwrap();
    assert_eq!(
        spec.allocate_load_balancer_node_ports,
        Some(false),
        "a *bool false is kept"
    );
    assert!(spec.health_check_node_port.is_some_and(|p| p > 0));
    assert_eq!(
        read.status
            .as_ref()
            .unwrap()
            .load_balancer
            .as_ref()
            .unwrap()
            .ingress
            .as_ref()
            .unwrap()
            .len(),
        2
    );
    let list: List<Service> =
        both_lists(&client, &format!("/api/v1/namespaces/{ns}/services")).await;
    assert_eq!(list.items.len(), 1);
}

#[tokio::test]
async fn an_event_reads_the_same_in_protobuf_and_json() {
    let (cp, client) = control_plane().await;
    let ns = cp.create_namespace("pb-events").await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "node.1"},
        "involvedObject": {"kind": "Service", "namespace": ns, "name": "web", "uid": "u", "apiVersion": "v1"},
        "reason": "Synced", "message": "Node synced successfully", "type": "Normal",
        "source": {"component": "cloud-node-controller", "host": "h"},
        "firstTimestamp": "2026-12-06T20:11:52Z", "lastTimestamp": "2026-12-06T20:12:52Z", "count": 3,
        "eventTime": "2026-12-06T20:11:52.123456Z", "action": "Sync",
        "series": {"count": 2, "lastObservedTime": "2026-12-06T20:12:52.654321Z"},
        "reportingComponent": "cloud-node-controller", "reportingInstance": "h",
    }))
    .unwrap();
    events
        .create(&PostParams::default(), &event)
        .await
        .expect("create");
    let read: Event = both(&client, &format!("/api/v1/namespaces/{ns}/events/node.1")).await;
    assert!(read.event_time.is_some() && read.series.is_some());
}

#[tokio::test]
async fn the_servers_errors_read_the_same_in_protobuf_and_json() {
    let (_cp, client) = control_plane().await;
    let path = "/api/v1/nodes/no-such-node-here";
    let (code, json) = get(&client, path, "application/json").await;
    assert_eq!(code, 404);
    let from_json: Status = serde_json::from_slice(&json).unwrap();
    let (code, pb) = get(&client, path, MEDIA_TYPE).await;
    assert_eq!(code, 404);
    let from_pb: Status = protobuf::decode(&pb).expect("a Status in protobuf");
    assert_eq!(from_pb, from_json);
    assert_eq!(from_pb.reason.as_deref(), Some("NotFound"));
}

/// What an informer told its subscribers, in order: (change, name, resource version).
type Log = std::sync::Arc<parking_lot::Mutex<Vec<(&'static str, String, String)>>>;

fn informer(run: &ccm_test::TestRun, client: &Client, protobuf: bool) -> (Informer<Node>, Log) {
    // The server ends each watch after a second, so both resume from their last resource
    // version many times during the test.
    let config = watcher::Config::default()
        .labels(&run.label_selector())
        .timeout(1);
    let mut informer = Informer::new(Api::<Node>::all(client.clone()), config, |_| {});
    if protobuf {
        informer = informer.with_protobuf();
    }
    let log = Log::default();
    let into = log.clone();
    informer.subscribe(move |change| {
        let (what, node) = match change {
            Change::Applied { new, .. } => ("applied", new),
            Change::Deleted(node) => ("deleted", node),
        };
        let m = &node.metadata;
        into.lock().push((
            what,
            m.name.clone().unwrap_or_default(),
            m.resource_version.clone().unwrap_or_default(),
        ));
    });
    (informer, log)
}

#[tokio::test]
async fn a_protobuf_watch_of_nodes_sees_every_change_a_json_one_sees() {
    let (_cp, client) = control_plane().await;
    let run = ccm_test::TestRun::new(client.clone());
    let cancel = tokio_util::sync::CancellationToken::new();
    let _stop = cancel.clone().drop_guard();
    // Nodes that exist before the informers start come with the list.
    for i in 0..5 {
        run.create_node(&run.new_node(&format!("before-{i}"))).await;
    }
    let (json, json_log) = informer(&run, &client, false);
    let (pb, pb_log) = informer(&run, &client, true);
    for i in [&json, &pb] {
        let (i, cancel) = (i.clone(), cancel.clone());
        tokio::spawn(async move { i.run(cancel).await });
    }
    assert!(json.wait_synced().await && pb.wait_synced().await);
    assert_eq!(pb.store().state().len(), 5);
    let nodes = run.nodes();
    let mut names = Vec::new();
    for i in 0..20 {
        let node = run
            .create_node(&run.new_node(&format!("pb-watch-{i}")))
            .await;
        names.push(node.metadata.name.clone().unwrap());
    }
    for (i, name) in names.iter().enumerate() {
        let labels =
            json!({"metadata": {"labels": {"step": "one"}, "finalizers": ["example.com/hold"]}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(labels))
            .await
            .unwrap();
        let status = json!({"status": {"addresses": [{"type": "InternalIP", "address": format!("10.9.0.{i}")}]}});
        nodes
            .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap();
        if i % 3 == 0 {
            // deleted with a finalizer: an update with deletionTimestamp, then the delete
            nodes.delete(name, &Default::default()).await.unwrap();
            let release = json!({"metadata": {"finalizers": null}});
            nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(release))
                .await
                .unwrap();
        }
        if i % 5 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(700)).await; // across watch restarts
        }
    }
    let want = 20 + 20 * 2 + 7 * 2; // creates, two changes each, deletions' update and delete
    ccm_test::eventually(
        "both informers saw every change",
        std::time::Duration::from_secs(30),
        || async {
            let (mut j, mut p) = (json_log.lock().clone(), pb_log.lock().clone());
            // the Nodes of the first list are told in no particular order
            for log in [&mut j, &mut p] {
                let n = log.len().min(5);
                log[..n].sort();
            }
            if j.len() >= want && p == j {
                return Ok(());
            }
            let first = j.iter().zip(&p).position(|(a, b)| a != b);
            Err(format!(
                "JSON saw {}, protobuf {}; first difference at {first:?}: {:?} / {:?}",
                j.len(),
                p.len(),
                first.map(|i| &j[i]),
                first.map(|i| &p[i])
            ))
        },
    )
    .await;
    let log = pb_log.lock().clone();
    assert_eq!(
        log.iter().filter(|(what, ..)| *what == "deleted").count(),
        7
    );
    // and the objects themselves are equal in both caches, field for field
    let (j, p) = (json.store().state(), pb.store().state());
    assert_eq!(p.len(), 5 + 13);
    for node in &j {
        let other = pb
            .store()
            .get(&kube::runtime::reflector::ObjectRef::from_obj(&**node))
            .expect("in both");
        assert_eq!(*other, **node);
    }
    for name in names {
        let release = json!({"metadata": {"finalizers": null}});
        let _ = nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(release))
            .await;
        let _ = nodes.delete(&name, &Default::default()).await;
    }
}
