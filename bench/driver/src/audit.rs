//! Node condition writes, counted from the API server's audit log: the control plane logs
//! (at level `Request`) only the CCM's PATCH and UPDATE of `nodes/status`, and the driver
//! reads the file's new lines at the start and end of each scenario.
//!
//! A write of a condition type to a Node whose `(status, reason)` equals that Node's
//! previous write of that type is a duplicate write: it changed nothing a reader of the
//! condition acts on (the target is 0).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::Result;

/// The user both CCMs run as (`ControlPlane::kubeconfig_for_user`, in `system:masters`),
/// so the audit policy can pick their requests out.
pub(crate) const USER: &str = "ccm-bench";

/// The audit policy: the CCM's PATCH and UPDATE of `nodes/status` with their request
/// bodies, nothing else.
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
             resources: [nodes/status]\n\
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

/// Reads an audit log as it grows, remembering each Node's last written conditions.
pub(crate) struct AuditLog {
    path: PathBuf,
    /// Bytes read so far (always at a line's end).
    offset: u64,
    /// `(Node, condition type)` → the `(status, reason)` last written.
    last: HashMap<(String, String), (String, Option<String>)>,
    counts: Counts,
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
        }
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

    /// Counts the conditions one event wrote.
    fn record(&mut self, event: &Event) {
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
    fn the_policy_logs_the_ccms_node_status_writes_only() {
        let p = policy();
        assert!(p.contains("users: [ccm-bench]"), "{p}");
        assert!(p.contains("resources: [nodes/status]"), "{p}");
        assert!(p.ends_with("- level: None\n"), "{p}");
    }
}
