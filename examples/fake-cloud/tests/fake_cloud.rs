//! Behaviour of the fake cloud, through the provider traits as the controllers see them.

use std::sync::Arc;
use std::time::Duration;

use ccm_core::provider::{
    CloudConfig, CloudError, CloudProvider, Instances, ProviderRegistry, Route, display_chain,
    node_address, resolve_instances,
};
use ccm_fake_cloud::{FakeCloud, FakeInstance, Fault, InstanceState, InstancesShape, Method};
use ccm_test::fixtures::{NodeBuilder, ServiceBuilder};
use k8s_openapi::api::core::v1::{Node, Service};

fn node(name: &str) -> Node {
    NodeBuilder::new(name).build()
}

fn node_with_provider_id(name: &str, provider_id: &str) -> Node {
    NodeBuilder::new(name).provider_id(provider_id).build()
}

/// A LoadBalancer Service in `default` as the service controller passes it: TCP `ports`,
/// each on node port 30000 + port.
fn service(name: &str, uid: &str, ports: &[i32]) -> Service {
    let service = ServiceBuilder::load_balancer(name)
        .namespace("default")
        .uid(uid);
    ports
        .iter()
        .fold(service, |s, p| {
            s.port(*p).node_port(30000 + p).protocol("TCP")
        })
        .build()
}

fn instances(cloud: &Arc<FakeCloud>) -> Arc<dyn Instances> {
    let provider: Arc<dyn CloudProvider> = cloud.clone();
    resolve_instances(&provider).expect("instances supported")
}

#[tokio::test]
async fn instance_lifecycle() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.add_instance(
        FakeInstance::new("n1")
            .with_id("i-1")
            .with_type("big")
            .with_zone("z2", "r2")
            .with_addresses(vec![node_address("InternalIP", "10.1.1.1")])
            .with_label("example.com/pool", "blue"),
    );
    let inst = instances(&cloud);

    let meta = inst.instance_metadata(&node("n1")).await.unwrap().unwrap();
    assert_eq!(meta.provider_id, "fake://i-1");
    assert_eq!(meta.instance_type, "big");
    assert_eq!((meta.zone.as_str(), meta.region.as_str()), ("z2", "r2"));
    assert_eq!(
        meta.node_addresses,
        vec![node_address("InternalIP", "10.1.1.1")]
    );
    assert_eq!(meta.additional_labels["example.com/pool"], "blue");

    assert!(inst.instance_exists(&node("n1")).await.unwrap());
    assert!(!inst.instance_shutdown(&node("n1")).await.unwrap());

    // Stopped instances exist.
    assert!(cloud.power_off("n1"));
    assert!(inst.instance_exists(&node("n1")).await.unwrap());
    assert!(inst.instance_shutdown(&node("n1")).await.unwrap());
    assert!(cloud.power_on("n1"));
    assert!(!inst.instance_shutdown(&node("n1")).await.unwrap());

    // Gone instances do not.
    assert!(cloud.remove_instance("n1"));
    assert!(!inst.instance_exists(&node("n1")).await.unwrap());
    assert!(matches!(
        inst.instance_metadata(&node("n1")).await,
        Err(CloudError::InstanceNotFound)
    ));
    assert!(!cloud.power_off("n1"));
}

#[tokio::test]
async fn provider_id_wins_over_name() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.add_instance(FakeInstance::new("a").with_id("i-a"));
    cloud.add_instance(FakeInstance::new("b").with_id("i-b"));
    let inst = instances(&cloud);
    // The Node is called "a" but its provider ID points at "b".
    let meta = inst
        .instance_metadata(&node_with_provider_id("a", "fake://i-b"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(meta.provider_id, "fake://i-b");
    assert!(
        !inst
            .instance_exists(&node_with_provider_id("a", "fake://i-zzz"))
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn malformed_provider_id_is_a_clear_error() {
    let cloud = Arc::new(FakeCloud::new());
    cloud.add_instance(FakeInstance::new("a"));
    let inst = instances(&cloud);
    for bad in ["a", "aws:///i-a", "fake://"] {
        let err = inst
            .instance_exists(&node_with_provider_id("a", bad))
            .await
            .unwrap_err();
        assert!(matches!(err, CloudError::Provider { .. }), "{bad}: {err:?}");
        assert!(
            display_chain(&err).starts_with("invalid provider ID: provider ID"),
            "{}",
            display_chain(&err)
        );
    }
}

#[tokio::test]
async fn every_node_is_an_instance_until_removed() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    let inst = instances(&cloud);
    let m1 = inst.instance_metadata(&node("w-1")).await.unwrap().unwrap();
    let m2 = inst.instance_metadata(&node("w-2")).await.unwrap().unwrap();
    assert_eq!(m1.provider_id, "fake://w-1");
    assert_eq!(m1.node_addresses[1], node_address("Hostname", "w-1"));
    assert_ne!(
        m1.node_addresses[0], m2.node_addresses[0],
        "each instance gets its own IP"
    );
    // Asking again gives the same answer.
    assert_eq!(
        inst.instance_metadata(&node("w-1")).await.unwrap().unwrap(),
        m1
    );
    assert!(
        inst.instance_exists(&node_with_provider_id("x", "fake://w-9"))
            .await
            .unwrap()
    );

    assert!(cloud.remove_instance("w-1"));
    assert!(!inst.instance_exists(&node("w-1")).await.unwrap());
    assert!(
        !inst
            .instance_exists(&node_with_provider_id("w-1", "fake://w-1"))
            .await
            .unwrap()
    );
    cloud.add_instance(FakeInstance::new("w-1"));
    assert!(inst.instance_exists(&node("w-1")).await.unwrap());
}

#[tokio::test]
async fn legacy_shape_answers_like_v2() {
    let v2 = Arc::new(FakeCloud::new());
    let legacy = Arc::new(FakeCloud::new());
    legacy.set_instances_shape(InstancesShape::Legacy);
    for c in [&v2, &legacy] {
        c.add_instance(
            FakeInstance::new("n1")
                .with_id("i-1")
                .with_type("t")
                .with_zone("z", "r"),
        );
    }
    let provider: Arc<dyn CloudProvider> = legacy.clone();
    assert!(provider.instances().is_none());
    assert!(provider.legacy_instances().is_some());

    let a = instances(&v2)
        .instance_metadata(&node("n1"))
        .await
        .unwrap()
        .unwrap();
    let b = instances(&legacy)
        .instance_metadata(&node("n1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.provider_id, b.provider_id);
    assert_eq!(a.instance_type, b.instance_type);
    assert_eq!(a.node_addresses, b.node_addresses);
    assert_eq!((a.zone, a.region), (b.zone, b.region));
    // The legacy path went by name for the ID, then by provider ID.
    assert_eq!(legacy.call_count(Method::InstanceId), 1);
    assert_eq!(legacy.call_count(Method::InstanceTypeByProviderId), 1);
    assert_eq!(legacy.call_count(Method::GetZoneByProviderId), 1);
    assert_eq!(legacy.call_count(Method::InstanceMetadata), 0);

    let inst = instances(&legacy);
    legacy.power_off("n1");
    assert!(
        inst.instance_shutdown(&node_with_provider_id("n1", "fake://i-1"))
            .await
            .unwrap()
    );
    legacy.remove_instance("n1");
    assert!(!inst.instance_exists(&node("n1")).await.unwrap());
}

#[tokio::test]
async fn load_balancer_lifecycle_is_idempotent() {
    let cloud = Arc::new(FakeCloud::new());
    let lb = CloudProvider::load_balancer(&*cloud).unwrap();
    let svc = service("web", "0a1b2c3d-0000-0000-0000-000000000001", &[80]);
    let nodes = vec![Arc::new(node("n2")), Arc::new(node("n1"))];

    assert_eq!(lb.get_load_balancer("k", &svc).await.unwrap(), None);
    let s1 = lb.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    let s2 = lb.ensure_load_balancer("k", &svc, &nodes).await.unwrap();
    assert_eq!(s1, s2, "ensure twice gives the same status");
    assert_eq!(
        cloud.load_balancers().len(),
        1,
        "ensure twice makes one load balancer"
    );
    assert_eq!(
        lb.get_load_balancer("k", &svc).await.unwrap(),
        Some(s1.clone())
    );
    let stored = cloud.load_balancers().remove(0);
    assert_eq!(stored.name, "a0a1b2c3d000000000000000000000001"[..32]);
    assert_eq!(*stored.nodes, ["n1", "n2"]);
    assert_eq!(stored.ports, vec!["TCP:80->30080"]);
    assert_eq!(
        s1.ingress.unwrap()[0].ip.as_deref(),
        Some(stored.ingress_ip.as_str())
    );

    // Another cluster does not see it, and cannot delete it.
    assert_eq!(lb.get_load_balancer("other", &svc).await.unwrap(), None);
    lb.ensure_load_balancer_deleted("other", &svc)
        .await
        .unwrap();
    assert_eq!(cloud.load_balancers().len(), 1);

    lb.update_load_balancer("k", &svc, &[Arc::new(node("n3"))])
        .await
        .unwrap();
    assert_eq!(*cloud.load_balancers()[0].nodes, ["n3"]);

    lb.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    lb.ensure_load_balancer_deleted("k", &svc).await.unwrap();
    assert!(cloud.load_balancers().is_empty());
    assert!(
        lb.update_load_balancer("k", &svc, &nodes).await.is_err(),
        "update of a missing LB fails"
    );
}

#[tokio::test]
async fn load_balancer_without_ports_is_refused() {
    let cloud = FakeCloud::new();
    let err = CloudProvider::load_balancer(&cloud)
        .unwrap()
        .ensure_load_balancer("k", &service("empty", "u-1", &[]), &[])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("default/empty has no ports"),
        "{err}"
    );
    assert!(cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn routes_round_trip_and_duplicates_are_counted() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    let routes = CloudProvider::routes(&*cloud).unwrap();
    let r = Route::new("n1", "10.244.1.0/24");
    routes.create_route("k", "uid-1", &r).await.unwrap();
    assert!(routes.create_route("k", "uid-1", &r).await.is_err());
    assert!(
        routes.create_route("k", "uid-9", &r).await.is_err(),
        "same CIDR, other name"
    );
    assert_eq!(cloud.duplicate_route_creates(), 2);

    let listed = routes.list_routes("k").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "k-uid-1");
    assert!(routes.list_routes("other").await.unwrap().is_empty());

    // Removing the instance turns its routes into blackholes.
    cloud.remove_instance("n1");
    assert!(routes.list_routes("k").await.unwrap()[0].blackhole);

    routes.delete_route("k", &listed[0]).await.unwrap();
    assert!(routes.list_routes("k").await.unwrap().is_empty());
    assert!(routes.delete_route("k", &listed[0]).await.is_err());
}

#[tokio::test]
async fn injected_faults_fire_the_given_number_of_times() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    let inst = instances(&cloud);
    cloud.inject_times(Method::InstanceMetadata, Fault::Error("boom".into()), 2);
    for _ in 0..2 {
        let err = inst.instance_metadata(&node("a")).await.unwrap_err();
        assert_eq!(err.to_string(), "boom");
    }
    assert!(inst.instance_metadata(&node("a")).await.is_ok());
    assert_eq!(cloud.call_count(Method::InstanceMetadata), 3);

    cloud.inject(
        Method::InstanceExists,
        Fault::RetryAfter(Duration::from_secs(3)),
    );
    for _ in 0..3 {
        let err = inst.instance_exists(&node("a")).await.unwrap_err();
        assert_eq!(err.retry_after_delay(), Some(Duration::from_secs(3)));
    }
    cloud.clear_faults();
    assert!(inst.instance_exists(&node("a")).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn latency_is_added_to_every_call() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    cloud.set_latency(Duration::from_millis(250));
    let inst = instances(&cloud);
    let start = tokio::time::Instant::now();
    inst.instance_exists(&node("a")).await.unwrap();
    inst.instance_exists(&node("a")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}

#[tokio::test]
async fn call_log_records_targets() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    let inst = instances(&cloud);
    inst.instance_exists(&node("a")).await.unwrap();
    inst.instance_shutdown(&node("b")).await.unwrap();
    let calls: Vec<(String, String)> = cloud
        .calls()
        .into_iter()
        .map(|c| (c.method.to_string(), c.target))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("instance-exists".to_owned(), "a".to_owned()),
            ("instance-shutdown".to_owned(), "b".to_owned())
        ]
    );
    cloud.clear_calls();
    assert!(cloud.calls().is_empty());
    assert_eq!(cloud.call_count(Method::InstanceExists), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn safe_under_concurrency() {
    let cloud = Arc::new(FakeCloud::nodes_are_instances());
    let mut tasks = Vec::new();
    for i in 0..64 {
        let cloud = cloud.clone();
        tasks.push(tokio::spawn(async move {
            let inst = instances(&cloud);
            let n = node(&format!("n{}", i % 16));
            inst.instance_metadata(&n).await.unwrap();
            let lb = CloudProvider::load_balancer(&*cloud).unwrap();
            let svc = service(&format!("s{}", i % 8), &format!("uid-{}", i % 8), &[80]);
            lb.ensure_load_balancer("k", &svc, &[Arc::new(n)])
                .await
                .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(cloud.instances().len(), 16);
    assert_eq!(cloud.load_balancers().len(), 8);
    let mut ips: Vec<String> = cloud
        .load_balancers()
        .into_iter()
        .map(|l| l.ingress_ip)
        .collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), 8, "every load balancer has its own IP");
    assert_eq!(cloud.call_count(Method::EnsureLoadBalancer), 64);
}

#[test]
fn registers_and_reads_its_cloud_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.yaml");
    std::fs::write(
        &path,
        "instancesShape: legacy\ninstances:\n- name: n1\n  state: stopped\n  addresses: [{type: InternalIP, address: 10.9.9.9}]\n",
    )
    .unwrap();
    let mut registry = ProviderRegistry::new();
    FakeCloud::register(&mut registry).unwrap();
    let provider = registry.init("fake", Some(&path)).unwrap();
    assert_eq!(provider.provider_name(), "fake");
    assert!(provider.instances().is_none() && provider.legacy_instances().is_some());

    std::fs::write(
        &path,
        "instances:\n- name: n1\n  addresses: [{type: Internal, address: x}]\n",
    )
    .unwrap();
    let err = display_chain(&registry.init("fake", Some(&path)).err().unwrap());
    assert!(
        err.contains("field `instances[0].addresses[0].type`: unknown address type \"Internal\""),
        "{err}"
    );
}

#[test]
fn from_config_seeds_instances() {
    let cfg = ccm_fake_cloud::FakeCloudConfig::parse(&CloudConfig::from_string(
        "x.yaml",
        "defaults: {zone: zz}\ninstances:\n- {name: n1, id: i-1, state: stopped}\n",
    ))
    .unwrap();
    let cloud = FakeCloud::from_config(&cfg);
    let inst = cloud.instance("n1").unwrap();
    assert_eq!(inst.id, "i-1");
    assert_eq!(inst.zone, "zz");
    assert_eq!(inst.state, InstanceState::Stopped);
    assert_eq!(inst.addresses[0].type_, "InternalIP");
}

#[tokio::test]
async fn a_cloud_from_config_keeps_counts_but_no_call_log_unless_asked() {
    use ccm_core::provider::Instances;
    let parse = |yaml: &str| {
        ccm_fake_cloud::FakeCloudConfig::parse(&CloudConfig::from_string("x.yaml", yaml)).unwrap()
    };
    let quiet = FakeCloud::from_config(&parse("nodesAreInstances: true\n"));
    quiet.instance_exists(&node("a")).await.unwrap();
    assert!(quiet.calls().is_empty());
    assert_eq!(quiet.call_count(Method::InstanceExists), 1);

    let logged = FakeCloud::from_config(&parse("nodesAreInstances: true\ncallLogCapacity: 2\n"));
    for name in ["a", "b", "c"] {
        logged.instance_exists(&node(name)).await.unwrap();
    }
    let targets: Vec<String> = logged.calls().into_iter().map(|c| c.target).collect();
    assert_eq!(targets, ["b", "c"], "the oldest call was dropped");
    assert_eq!(logged.call_count(Method::InstanceExists), 3);
}
