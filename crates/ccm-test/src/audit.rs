//! The API server's audit log, as a test reads it to see who asked for what and what the
//! answer was: [`read_audit_log`] (or [`parse_audit_log`] for a part of it).
//!
//! Start the control plane with an audit policy:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cp = ccm_test::ControlPlane::builder()
//!     .audit_policy(
//!         "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n\
//!          rules:\n- level: Metadata\n",
//!     )
//!     .start()
//!     .await?;
//! // … the process under test does its work …
//! let log = cp.audit_log_path().expect("a policy was given");
//! let refused = ccm_test::audit::read_audit_log(log)?
//!     .into_iter()
//!     .filter(|event| event.code == 403)
//!     .count();
//! assert_eq!(refused, 0);
//! # Ok(()) }
//! ```

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

/// One entry of the audit log: a request at one stage (`ResponseComplete`, say), with the
/// fields a test asks about. A field the entry does not have is empty (the code 0).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditEvent {
    /// `stage`: `ResponseStarted`, `ResponseComplete`, `Panic` (or `RequestReceived`).
    pub stage: String,
    /// `user.username`: who asked.
    pub user: String,
    /// `verb`: `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`…
    pub verb: String,
    /// `objectRef.resource`, e.g. `nodes`.
    pub resource: String,
    /// `objectRef.subresource`, e.g. `status`.
    pub subresource: String,
    /// `objectRef.namespace`.
    pub namespace: String,
    /// `objectRef.name`.
    pub name: String,
    /// `responseStatus.code`, e.g. 403 for a request RBAC refused.
    pub code: i64,
    /// `requestReceivedTimestamp`.
    pub received: Option<Timestamp>,
}

impl AuditEvent {
    /// The resource, and its subresource after a `/` if there is one: `nodes/status`.
    pub fn resource_path(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }

    /// The entry of one line of the log, if the line is JSON.
    fn parse(line: &str) -> Option<Self> {
        let event: serde_json::Value = serde_json::from_str(line).ok()?;
        let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
        let object = &event["objectRef"];
        Some(Self {
            stage: text(&event["stage"]),
            user: text(&event["user"]["username"]),
            verb: text(&event["verb"]),
            resource: text(&object["resource"]),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            code: event["responseStatus"]["code"].as_i64().unwrap_or_default(),
            received: event["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse().ok()),
        })
    }
}

/// The entries of the audit log at `path` so far, in order (lines that are not JSON, as a
/// line being written, are skipped).
///
/// # Errors
///
/// When the file cannot be read (not written yet: the API server creates it with its first
/// entry).
pub fn read_audit_log(path: &Path) -> std::io::Result<Vec<AuditEvent>> {
    Ok(parse_audit_log(&std::fs::read_to_string(path)?))
}

/// The entries of `text`, lines of an audit log (a part of the log, say: what was added
/// since an offset), in order; lines that are not JSON are skipped.
pub fn parse_audit_log(text: &str) -> Vec<AuditEvent> {
    text.lines().filter_map(AuditEvent::parse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_has_the_fields_tests_ask_about() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(
            &path,
            concat!(
                r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","#,
                r#""user":{"username":"system:serviceaccount:kube-system:node-controller"},"#,
                r#""objectRef":{"resource":"nodes","name":"n1","subresource":"status"},"#,
                r#""responseStatus":{"code":200},"#,
                r#""requestReceivedTimestamp":"2025-01-02T03:04:05.678901Z"}"#,
                "\n",
                r#"{"stage":"ResponseComplete","verb":"create","user":{"username":"u"},"#,
                r#""objectRef":{"resource":"events","namespace":"default"},"#,
                r#""responseStatus":{"code":403}}"#,
                "\n",
                r#"{"stage":"ResponseComplete","verb":"cre"#,
            ),
        )
        .unwrap();
        let events = read_audit_log(&path).unwrap();
        assert_eq!(events.len(), 2, "the unfinished line is skipped");
        let patch = &events[0];
        assert_eq!(
            (patch.stage.as_str(), patch.verb.as_str(), patch.code),
            ("ResponseComplete", "patch", 200)
        );
        assert_eq!(
            patch.user,
            "system:serviceaccount:kube-system:node-controller"
        );
        assert_eq!(patch.resource_path(), "nodes/status");
        assert_eq!((patch.namespace.as_str(), patch.name.as_str()), ("", "n1"));
        assert_eq!(
            patch.received,
            Some("2025-01-02T03:04:05.678901Z".parse().unwrap())
        );
        let create = &events[1];
        assert_eq!(create.resource_path(), "events");
        assert_eq!((create.namespace.as_str(), create.code), ("default", 403));
        assert_eq!(create.received, None);

        assert!(read_audit_log(&dir.path().join("missing.log")).is_err());
    }
}
