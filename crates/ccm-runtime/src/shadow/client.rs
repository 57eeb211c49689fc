//! A shadow's API client: reads go through as they are; every write is sent as a dry run
//! (`dryRun=All`), so the API server validates, admits and answers it as if it were made,
//! and stores nothing; and, unless it is an Event (a shadow's report, not a change), it is
//! recorded in the plan under the controller whose client it is.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use kube::client::Body;

use super::{Action, ControllerShadow, Planned};

/// `client`, with every write a dry run recorded in `shadow`.
pub(crate) fn wrap_client(client: kube::Client, shadow: ControllerShadow) -> kube::Client {
    let namespace = client.default_namespace().to_owned();
    kube::Client::new(DryRun { client, shadow }, namespace)
}

#[derive(Clone)]
struct DryRun {
    client: kube::Client,
    shadow: ControllerShadow,
}

impl tower::Service<Request<Body>> for DryRun {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, kube::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), kube::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let client = self.client.clone();
        let shadow = self.shadow.clone();
        Box::pin(async move {
            if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
                return client.send(req).await;
            }
            let (mut parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await?;
            if let Some(planned) = planned(&parts.method, parts.uri.path(), &bytes) {
                shadow.plan(planned);
            }
            parts.uri = dry_run(&parts.uri)?;
            client
                .send(Request::from_parts(parts, Body::from(bytes)))
                .await
        })
    }
}

/// `uri` with `dryRun=All` added to its query.
fn dry_run(uri: &Uri) -> Result<Uri, kube::Error> {
    let path_and_query = match uri.query() {
        Some(query) if !query.is_empty() => format!("{}?{query}&dryRun=All", uri.path()),
        _ => format!("{}?dryRun=All", uri.path()),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(
        path_and_query
            .parse()
            .map_err(|e: http::uri::InvalidUri| kube::Error::HttpError(e.into()))?,
    );
    Uri::from_parts(parts).map_err(|e| kube::Error::HttpError(e.into()))
}

/// The change a write to `path` makes; `None` for what is not a change of the cluster's
/// objects: Events, and a TokenRequest (which stores nothing).
fn planned(method: &Method, path: &str, body: &[u8]) -> Option<Planned> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some((*ns).to_owned()), rest),
        other => (None, other),
    };
    let (resource, name, sub) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub, ..] => (*resource, Some(*name), Some(*sub)),
        [] => return None,
    };
    if resource == "events" || (resource == "serviceaccounts" && sub == Some("token")) {
        return None;
    }
    // A create names its object in the body.
    let name = match name {
        Some(name) => name.to_owned(),
        None => serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.pointer("/metadata/name")?.as_str().map(str::to_owned))
            .unwrap_or_default(),
    };
    let action = match *method {
        Method::POST => Action::Create,
        Method::DELETE => Action::Delete,
        _ => Action::Update,
    };
    let kind = {
        let resource = if group.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}.{group}")
        };
        match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource,
        }
    };
    let scope = match &namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    };
    Some(Planned {
        kind,
        namespace,
        name,
        scope,
        action,
        request: format!("{method} {path}"),
        why: String::from_utf8_lossy(body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_named_by_their_path_and_events_are_not_changes() {
        let p = |method: Method, path: &str, body: &str| planned(&method, path, body.as_bytes());
        let node = p(
            Method::PATCH,
            "/api/v1/nodes/n1",
            r#"{"metadata":{"labels":{"a":"b"}}}"#,
        )
        .unwrap();
        assert_eq!(
            (
                node.kind.as_str(),
                node.namespace,
                node.name.as_str(),
                node.scope.as_str()
            ),
            ("nodes", None, "n1", "n1")
        );
        assert_eq!(node.action, Action::Update);
        assert_eq!(node.request, "PATCH /api/v1/nodes/n1");
        assert_eq!(node.why, r#"{"metadata":{"labels":{"a":"b"}}}"#);

        let status = p(
            Method::PATCH,
            "/api/v1/namespaces/web/services/lb/status",
            "{}",
        )
        .unwrap();
        assert_eq!(
            (
                status.kind.as_str(),
                status.namespace.as_deref(),
                status.scope.as_str()
            ),
            ("services/status", Some("web"), "web/lb")
        );
        let gone = p(Method::DELETE, "/api/v1/nodes/n2", "").unwrap();
        assert_eq!((gone.action, gone.name.as_str()), (Action::Delete, "n2"));
        let made = p(
            Method::POST,
            "/api/v1/namespaces/kube-system/serviceaccounts",
            r#"{"metadata":{"name":"node-controller"}}"#,
        )
        .unwrap();
        assert_eq!(
            (made.action, made.name.as_str()),
            (Action::Create, "node-controller")
        );
        let lease = p(
            Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/ccm",
            "{}",
        )
        .unwrap();
        assert_eq!(lease.kind, "leases.coordination.k8s.io");

        assert!(p(Method::POST, "/api/v1/namespaces/default/events", "{}").is_none());
        assert!(p(Method::PATCH, "/api/v1/namespaces/default/events/e.1", "{}").is_none());
        assert!(
            p(
                Method::POST,
                "/api/v1/namespaces/kube-system/serviceaccounts/a/token",
                "{}"
            )
            .is_none()
        );
        assert!(p(Method::POST, "/version", "").is_none());
    }

    #[test]
    fn dry_run_is_added_to_any_query() {
        let uri: Uri = "/api/v1/nodes/n1".parse().unwrap();
        assert_eq!(dry_run(&uri).unwrap(), "/api/v1/nodes/n1?dryRun=All");
        let uri: Uri = "/api/v1/nodes/n1?fieldManager=ccm".parse().unwrap();
        assert_eq!(
            dry_run(&uri).unwrap(),
            "/api/v1/nodes/n1?fieldManager=ccm&dryRun=All"
        );
    }
}
