//! The CCM's requests as the API server saw them, from its audit log: the control plane logs
//! every request of the CCM's user (at level `Metadata`; its PATCH and UPDATE of Nodes and
//! `nodes/status` at level `Request`, with their bodies), and the driver reads the file's new
//! lines at the start and end of each scenario. Two things are taken from it:
//!
//! - Node condition writes (below);
//! - per request kind (`verb resource[/subresource]`): the count, the API server's time from
//!   receiving the request to completing the response, and the body size (of Node writes:
//!   the body as the audit log shows it, in JSON, whatever the wire encoding was).
//!
//! A write of a condition type to a Node whose `(status, reason)` equals that Node's
//! previous write of that type is a duplicate write: it changed nothing a reader of the
//! condition acts on (the target is 0).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::Result;

/// The user both CCMs run as (`ControlPlane::kubeconfig_for_user`, in `system:masters`),
/// so the audit policy can pick their requests out.
pub(crate) const USER: &str = "ccm-bench";

/// The audit policy: the CCM's PATCH and UPDATE of Nodes and `nodes/status` with their
/// request bodies, its other requests without, nothing else.
pub(crate) fn policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\n\
         kind: Policy\n\
         omitStages: [RequestReceived]\n\
         rules:\n\
         - level: Request\n  \
           users: [{USER}]\n  \
           verbs: [patch, update]\n  \
           resources:\n  \
           - group: \"\"\n    \
             resources: [nodes, nodes/status]\n\
         - level: Metadata\n  \
           users: [{USER}]\n\
         - level: None\n"
    )
}

/// The kube-apiserver flags that turn the audit log on: `policy_file` (holding
/// [`policy`]), the log at `log_path`, written before each response (blocking mode), and
/// never rotated (a rotation at the default 100 MB would move the lines being read).
pub(crate) fn apiserver_args(policy_file: &Path, log_path: &Path) -> Vec<String> {
    vec![
        format!("--audit-policy-file={}", policy_file.display()),
        format!("--audit-log-path={}", log_path.display()),
        "--audit-log-format=json".to_owned(),
        "--audit-log-mode=blocking".to_owned(),
        // Megabytes: far more than 10,000 Nodes' status writes (~2 KB each).
        "--audit-log-maxsize=100000".to_owned(),
    ]
}

/// Condition writes seen so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Counts {
    /// Conditions written (each condition of each successful write counts once).
    pub(crate) writes: f64,
    /// Of those, the ones whose `(status, reason)` equalled the Node's previous write of
    /// that condition type.
    pub(crate) duplicates: f64,
}

impl std::ops::Sub for Counts {
    type Output = Self;
    fn sub(self, before: Self) -> Self {
        Self {
            writes: self.writes - before.writes,
            duplicates: self.duplicates - before.duplicates,
        }
    }
}

/// One kind of request (`verb resource[/subresource]`) of the CCM, as the API server saw it.
#[derive(Serialize, Deserialize, Debug, Clone, Default, PartialEq)]
#[serde(default)]
pub(crate) struct RequestStats {
    /// Requests completed.
    pub(crate) count: f64,
    /// Of those, refused with a 4xx or 5xx code.
    pub(crate) failed: f64,
    /// Seconds from receipt to the response's end, summed (not for watches: they last).
    pub(crate) server_seconds: f64,
    /// Request body bytes (compact JSON as the audit log holds it), summed; 0 where the
    /// policy does not log bodies.
    pub(crate) body_bytes: f64,
}

/// Reads an audit log as it grows, remembering each Node's last written conditions.
pub(crate) struct AuditLog {
    path: PathBuf,
    /// Bytes read so far (always at a line's end).
    offset: u64,
    /// `(Node, condition type)` → the `(status, reason)` last written.
    last: HashMap<(String, String), (String, Option<String>)>,
    counts: Counts,
    /// The CCM's requests by kind since [`AuditLog::take_requests`] last took them.
    requests: BTreeMap<String, RequestStats>,
}

/// The part of an audit event read here.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    object_ref: ObjectRef,
    #[serde(default)]
    response_status: Option<ResponseStatus>,
    #[serde(default)]
    request_object: Option<serde_json::Value>,
    #[serde(default)]
    stage: String,
    #[serde(default)]
    request_received_timestamp: Option<String>,
    #[serde(default)]
    stage_timestamp: Option<String>,
}

#[derive(Deserialize, Default)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize, Default)]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    subresource: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct ResponseStatus {
    #[serde(default)]
    code: i64,
}

impl AuditLog {
    /// A reader of the log at `path` (which may not exist yet).
    pub(crate) fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            last: HashMap::new(),
            counts: Counts::default(),
            requests: BTreeMap::new(),
        }
    }

    /// The CCM's requests by kind read since the last call (call [`AuditLog::read_new`]
    /// first).
    pub(crate) fn take_requests(&mut self) -> BTreeMap<String, RequestStats> {
        std::mem::take(&mut self.requests)
    }

    /// Reads the lines written since the last call (whole lines only) and returns the
    /// counts over everything read so far.
    pub(crate) fn read_new(&mut self) -> Result<Counts> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(self.counts),
            Err(e) => return Err(format!("{}: {e}", self.path.display()).into()),
        };
        if file.metadata()?.len() < self.offset {
            // Truncated or replaced (it is not rotated): start again.
            self.offset = 0;
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut reader = BufReader::new(file);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 || line.last() != Some(&b'\n') {
                // The end, or a line still being written: read it next time.
                break;
            }
            self.offset += n as u64;
            if let Ok(event) = serde_json::from_slice::<Event>(&line) {
                self.record(&event);
            }
        }
        Ok(self.counts)
    }

    /// Counts one completed request of the CCM by its kind.
    fn count_request(&mut self, event: &Event) {
        if event.stage != "ResponseComplete" || event.user.username != USER {
            return;
        }
        let r = &event.object_ref;
        let kind = match (r.resource.as_str(), r.subresource.as_str()) {
            ("", _) => format!("{} (non-resource)", event.verb),
            (resource, "") => format!("{} {resource}", event.verb),
            (resource, sub) => format!("{} {resource}/{sub}", event.verb),
        };
        let stats = self.requests.entry(kind).or_default();
        stats.count += 1.0;
        if event
            .response_status
            .as_ref()
            .is_some_and(|s| s.code >= 400)
        {
            stats.failed += 1.0;
        }
        if event.verb != "watch" {
            let time = |t: &Option<String>| t.as_deref()?.parse::<Timestamp>().ok();
            if let (Some(received), Some(done)) = (
                time(&event.request_received_timestamp),
                time(&event.stage_timestamp),
            ) {
                stats.server_seconds += done.duration_since(received).as_secs_f64().max(0.0);
            }
        }
        if let Some(body) = &event.request_object {
            stats.body_bytes += serde_json::to_vec(body).map_or(0, |b| b.len()) as f64;
        }
    }

    /// Counts the conditions one event wrote.
    fn record(&mut self, event: &Event) {
        self.count_request(event);
        let r = &event.object_ref;
        let status_write = (event.verb == "patch" || event.verb == "update")
            && r.resource == "nodes"
            && r.subresource == "status"
            && event.user.username == USER;
        // A refused write (a conflict, say) changed nothing: neither a write nor the
        // value the next one is compared with.
        let ok = event
            .response_status
            .as_ref()
            .is_some_and(|s| (200..300).contains(&s.code));
        let Some(body) = event.request_object.as_ref() else {
            return;
        };
        if !status_write || !ok || r.name.is_empty() {
            return;
        }
        for condition in written_conditions(&event.verb, body) {
            let Some(type_) = condition.get("type").and_then(|t| t.as_str()) else {
                continue;
            };
            let value = (
                condition
                    .get("status")
                    .and_then(|s| s.as_str())
                    .unwrap_or_default()
                    .to_owned(),
                condition
                    .get("reason")
                    .and_then(|s| s.as_str())
                    .map(str::to_owned),
            );
            self.counts.writes += 1.0;
            let key = (r.name.clone(), type_.to_owned());
            if self.last.get(&key) == Some(&value) {
                self.counts.duplicates += 1.0;
            }
            self.last.insert(key, value);
        }
    }
}

/// The conditions a request body writes: for an UPDATE, the whole status's; for a merge or
/// strategic merge patch, `status.conditions`; for a JSON patch, the values of the
/// operations that add or replace `/status/conditions` or one of its elements.
fn written_conditions<'a>(verb: &str, body: &'a serde_json::Value) -> Vec<&'a serde_json::Value> {
    let conditions_of = |obj: &'a serde_json::Value| {
        obj.pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .map(|c| c.iter().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    match body {
        serde_json::Value::Array(ops) if verb == "patch" => ops
            .iter()
            .filter(|op| matches!(op["op"].as_str(), Some("add" | "replace")))
            .filter(|op| {
                op["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/status/conditions"))
            })
            .flat_map(|op| match &op["value"] {
                serde_json::Value::Array(items) => items.iter().collect(),
                v @ serde_json::Value::Object(_) => vec![v],
                _ => Vec::new(),
            })
            .collect(),
        serde_json::Value::Object(_) => conditions_of(body),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn event(verb: &str, node: &str, code: i64, body: serde_json::Value) -> String {
        serde_json::json!({
            "kind": "Event",
            "verb": verb,
            "user": {"username": USER, "groups": ["system:masters"]},
            "objectRef": {"resource": "nodes", "subresource": "status", "name": node},
            "responseStatus": {"code": code},
            "requestObject": body,
        })
        .to_string()
            + "\n"
    }

    fn strategic(status: &str, reason: &str) -> serde_json::Value {
        serde_json::json!({"status": {"conditions": [{
            "type": "NetworkUnavailable", "status": status, "reason": reason,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }]}})
    }

    #[test]
    fn a_write_equal_to_the_nodes_previous_one_is_a_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let mut log = AuditLog::new(path.clone());
        assert_eq!(log.read_new().unwrap(), Counts::default(), "no file yet");

        let mut file = std::fs::File::create(&path).unwrap();
        let lines = [
            event("patch", "n1", 200, strategic("False", "RouteCreated")),
            // Another Node: not a duplicate.
            event("patch", "n2", 200, strategic("False", "RouteCreated")),
            // The same again (another timestamp): a duplicate.
            event("patch", "n1", 200, strategic("False", "RouteCreated")),
            // Refused: not counted at all.
            event("patch", "n1", 409, strategic("False", "RouteCreated")),
            // A change, then a JSON patch of that value: a duplicate.
            event("patch", "n1", 200, strategic("True", "NoRouteCreated")),
            event(
                "patch",
                "n1",
                200,
                serde_json::json!([{"op": "add", "path": "/status/conditions/-", "value": {
                    "type": "NetworkUnavailable", "status": "True", "reason": "NoRouteCreated"}}]),
            ),
            // A JSON patch of the addresses only: no condition.
            event(
                "patch",
                "n1",
                200,
                serde_json::json!([{"op": "replace", "path": "/status/addresses", "value": []}]),
            ),
        ];
        for l in &lines {
            file.write_all(l.as_bytes()).unwrap();
        }
        // Half a line: left for the next read.
        let update = event(
            "update",
            "n2",
            200,
            serde_json::json!({"metadata": {"name": "n2"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated"},
            ]}}),
        );
        let (head, tail) = update.split_at(40);
        file.write_all(head.as_bytes()).unwrap();
        file.flush().unwrap();
        assert_eq!(
            log.read_new().unwrap(),
            Counts {
                writes: 5.0,
                duplicates: 2.0
            }
        );
        file.write_all(tail.as_bytes()).unwrap();
        file.flush().unwrap();
        // The UPDATE writes both conditions; NetworkUnavailable repeats n2's last write.
        assert_eq!(
            log.read_new().unwrap(),
            Counts {
                writes: 7.0,
                duplicates: 3.0
            }
        );
        assert_eq!(log.read_new().unwrap().writes, 7.0, "nothing new");
    }

    #[test]
    fn the_policy_logs_the_ccms_requests_only_with_node_write_bodies() {
        let p = policy();
        assert!(p.contains("users: [ccm-bench]"), "{p}");
        assert!(p.contains("resources: [nodes, nodes/status]"), "{p}");
        assert!(
            p.contains("- level: Metadata\n  users: [ccm-bench]\n"),
            "{p}"
        );
        assert!(p.ends_with("- level: None\n"), "{p}");
    }

    #[test]
    fn requests_are_counted_by_kind_with_server_time_and_body_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let line = |verb: &str, resource: &str, sub: &str, code: i64, body: Option<&str>| {
            let mut e = serde_json::json!({
                "stage": "ResponseComplete",
                "verb": verb,
                "user": {"username": USER},
                "objectRef": {"resource": resource, "subresource": sub, "name": "n1"},
                "responseStatus": {"code": code},
                "requestReceivedTimestamp": "2026-01-01T00:00:00.000000Z",
                "stageTimestamp": "2026-01-01T00:00:00.002500Z",
            });
            if let Some(b) = body {
                e["requestObject"] = serde_json::from_str(b).unwrap();
            }
            e.to_string() + "\n"
        };
        let mut other_user = line("create", "events", "", 201, None);
        other_user = other_user.replace(USER, "someone-else");
        let started =
            line("watch", "nodes", "", 200, None).replace("ResponseComplete", "ResponseStarted");
        let text = [
            line("patch", "nodes", "status", 200, Some(r#"[{"op":"test"}]"#)),
            line("patch", "nodes", "status", 409, Some(r#"[{"op":"test"}]"#)),
            line("update", "nodes", "", 200, Some(r#"{"a":1}"#)),
            line("watch", "nodes", "", 200, None),
            started,
            other_user,
        ]
        .concat();
        std::fs::write(&path, text).unwrap();
        let mut log = AuditLog::new(path);
        log.read_new().unwrap();
        let r = log.take_requests();
        assert_eq!(
            r.keys().collect::<Vec<_>>(),
            ["patch nodes/status", "update nodes", "watch nodes"]
        );
        let status = &r["patch nodes/status"];
        assert_eq!((status.count, status.failed), (2.0, 1.0));
        assert!((status.server_seconds - 0.005).abs() < 1e-9, "{status:?}");
        assert_eq!(status.body_bytes, 2.0 * r#"[{"op":"test"}]"#.len() as f64);
        assert_eq!(r["update nodes"].body_bytes, 7.0);
        assert_eq!(
            r["watch nodes"].server_seconds, 0.0,
            "watches last; not timed"
        );
        assert!(log.take_requests().is_empty(), "taken");
    }
}
