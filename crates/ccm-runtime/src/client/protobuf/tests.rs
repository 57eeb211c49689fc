//! Objects written in protobuf by hand, field by field as the API server writes them, read
//! into the value their JSON gives. (`tests/protobuf.rs` compares both encodings of real
//! objects from a real API server.)

use super::wire::{put_bytes, put_varint};
use super::*;
use k8s_openapi::api::core::v1::{Node, Service};
use serde_json::json;

fn string(out: &mut Vec<u8>, number: u32, s: &str) {
    put_bytes(out, number, s.as_bytes());
}

fn varint(out: &mut Vec<u8>, number: u32, n: u64) {
    put_varint(out, u64::from(number) << 3);
    put_varint(out, n);
}

fn message(out: &mut Vec<u8>, number: u32, build: impl FnOnce(&mut Vec<u8>)) {
    let mut m = Vec::new();
    build(&mut m);
    put_bytes(out, number, &m);
}

fn entry(out: &mut Vec<u8>, number: u32, key: &str, value: impl FnOnce(&mut Vec<u8>)) {
    message(out, number, |e| {
        string(e, 1, key);
        value(e);
    });
}

fn envelope(kind: &str, object: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    message(&mut out, 1, |t| {
        string(t, 1, "v1");
        string(t, 2, kind);
    });
    put_bytes(&mut out, 2, object);
    out
}

#[test]
fn a_node_reads_as_its_json_does() {
    let mut node = Vec::new();
    message(&mut node, 1, |m| {
        string(m, 1, "worker-1");
        string(m, 2, ""); // generateName: empty, left out as JSON leaves it
        string(m, 5, "6a1c…");
        string(m, 6, "42");
        varint(m, 7, 0); // generation 0: left out
        message(m, 8, |t| varint(t, 1, 1_796_587_912)); // creationTimestamp
        message(m, 9, |_| {}); // a zero Time: null in JSON
        entry(m, 11, "kubernetes.io/hostname", |e| {
            string(e, 2, "worker-1")
        });
        entry(m, 11, "empty", |_| {}); // a value of "" is left out on the wire
        string(m, 14, "a/finalizer");
    });
    message(&mut node, 2, |s| {
        string(s, 1, "10.244.1.0/24");
        string(s, 7, "10.244.1.0/24");
        string(s, 7, "fd00:10:244:1::/64");
        string(s, 3, "");
        varint(s, 4, 1);
        message(s, 5, |t| {
            string(t, 1, "node.cloudprovider.kubernetes.io/uninitialized");
            string(t, 2, "true");
            string(t, 3, "NoSchedule");
        });
    });
    message(&mut node, 3, |s| {
        entry(s, 1, "cpu", |e| message(e, 2, |q| string(q, 1, "2")));
        string(s, 3, "");
        message(s, 4, |c| {
            string(c, 1, "Ready");
            string(c, 2, "True");
            message(c, 3, |t| varint(t, 1, 1_796_587_912));
            message(c, 4, |t| {
                varint(t, 1, 1_796_587_912);
                varint(t, 2, 999_999_999); // JSON has no fraction
            });
            string(c, 5, "KubeletReady");
            string(c, 6, "");
        });
        message(s, 5, |a| {
            string(a, 1, "InternalIP");
            string(a, 2, "10.0.0.1");
        });
        message(s, 6, |d| message(d, 1, |p| varint(p, 1, 10250)));
        varint(s, 99, 7); // a field newer than the schema: skipped
    });
    let read: Node = decode(&envelope("Node", &node)).unwrap();
    let want: Node = serde_json::from_value(json!({
        "metadata": {
            "name": "worker-1", "uid": "6a1c…", "resourceVersion": "42",
            "creationTimestamp": "2026-12-06T20:11:52Z",
            "labels": {"kubernetes.io/hostname": "worker-1", "empty": ""},
            "finalizers": ["a/finalizer"],
        },
        "spec": {
            "podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24", "fd00:10:244:1::/64"],
            "unschedulable": true,
            "taints": [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": "2"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-06T20:11:52Z",
                "lastTransitionTime": "2026-12-06T20:11:52Z", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }))
    .unwrap();
    assert_eq!(read, want);
}

#[test]
fn a_service_keeps_pointers_and_int_or_string_as_json_does() {
    let mut svc = Vec::new();
    message(&mut svc, 1, |m| {
        string(m, 1, "web");
        string(m, 3, "default");
    });
    message(&mut svc, 2, |s| {
        message(s, 1, |p| {
            string(p, 1, "http");
            string(p, 2, "TCP");
            varint(p, 3, 80);
            message(p, 4, |t| {
                varint(t, 1, 1);
                string(t, 3, "http-alt");
            });
            varint(p, 5, 0); // nodePort 0: left out
        });
        message(s, 1, |p| {
            string(p, 2, "UDP");
            varint(p, 3, 53);
            message(p, 4, |t| {
                varint(t, 1, 0);
                varint(t, 2, 5353);
            });
            varint(p, 5, 31000);
        });
        string(s, 4, "LoadBalancer");
        varint(s, 20, 0); // *bool false: kept, as JSON keeps it
        string(s, 99, "a field newer than the schema");
    });
    message(&mut svc, 3, |st| {
        message(st, 1, |lb| {
            message(lb, 1, |i| {
                string(i, 1, "203.0.113.7");
                string(i, 3, "VIP");
            })
        })
    });
    let read: Service = decode(&envelope("Service", &svc)).unwrap();
    let want: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "ports": [
                {"name": "http", "protocol": "TCP", "port": 80, "targetPort": "http-alt"},
                {"protocol": "UDP", "port": 53, "targetPort": 5353, "nodePort": 31000},
            ],
            "type": "LoadBalancer",
            "allocateLoadBalancerNodePorts": false,
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7", "ipMode": "VIP"}]}},
    }))
    .unwrap();
    assert_eq!(read, want);
}

#[test]
fn bad_data_is_an_error_not_a_panic() {
    let node: Result<Node, _> = decode(b"{\"kind\":\"Node\"}");
    assert!(matches!(node, Err(DecodeError::Malformed(_))));
    let mut truncated = envelope("Node", &[0x0a, 0x10, 0x0a]);
    assert!(decode::<Node>(&truncated).is_err());
    truncated.truncate(6);
    assert!(decode::<Node>(&truncated).is_err());
    // a string where a number belongs
    let mut svc = Vec::new();
    message(&mut svc, 2, |s| message(s, 1, |p| string(p, 3, "eighty")));
    assert!(decode::<Service>(&envelope("Service", &svc)).is_err());
    // not UTF-8
    let mut bad = Vec::new();
    message(&mut bad, 1, |m| put_bytes(m, 1, &[0xff, 0xfe]));
    assert!(decode::<Node>(&envelope("Node", &bad)).is_err());
}

#[test]
fn a_watch_error_reads_into_kubes_status() {
    // what the API server sends in an ERROR event when a watch's resource version expired
    let mut status = Vec::new();
    string(&mut status, 2, "Failure");
    string(&mut status, 3, "too old resource version: 1 (42)");
    string(&mut status, 4, "Expired");
    varint(&mut status, 6, 410);
    let read: kube::core::Status = decode(&envelope("Status", &status)).unwrap();
    assert_eq!(read.code, 410);
    assert_eq!(read.reason, "Expired");
    assert!(read.is_failure());
}

#[test]
fn watch_frames_read_as_events_bookmarks_and_errors() {
    use super::watch::{WatchEvent, watch_event};
    // the API server frames a WatchEvent without an envelope; its object has one
    let frame = |kind: &str, object: Vec<u8>| {
        let mut event = Vec::new();
        string(&mut event, 1, kind);
        message(&mut event, 2, |ext| put_bytes(ext, 1, &object));
        event
    };
    let mut node = Vec::new();
    message(&mut node, 1, |m| {
        string(m, 1, "worker-1");
        string(m, 6, "77");
    });
    match watch_event::<Node>(&frame("MODIFIED", envelope("Node", &node))).unwrap() {
        WatchEvent::Object {
            kind,
            object,
            version,
        } => {
            assert_eq!((kind.as_str(), version.as_str()), ("MODIFIED", "77"));
            assert_eq!(object.metadata.name.as_deref(), Some("worker-1"));
        }
        _ => panic!("not an object"),
    }
    let mut bookmark = Vec::new();
    message(&mut bookmark, 1, |m| string(m, 6, "99"));
    assert!(matches!(
        watch_event::<Node>(&frame("BOOKMARK", envelope("Node", &bookmark))).unwrap(),
        WatchEvent::Bookmark { version } if version == "99"
    ));
    let mut status = Vec::new();
    string(&mut status, 4, "Expired");
    varint(&mut status, 6, 410);
    assert!(matches!(
        watch_event::<Node>(&frame("ERROR", envelope("Status", &status))).unwrap(),
        WatchEvent::Error(s) if s.code == 410
    ));
    assert!(watch_event::<Node>(&frame("SURPRISE", envelope("Node", &node))).is_err());
}
