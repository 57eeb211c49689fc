//! The endpoints Go's controller managers serve for live debugging, behind the same
//! delegated authorization as `/metrics`: `PUT /debug/flags/v` sets the log verbosity of the
//! running process (Go's `routes.StringFlagPutHandler` with `logs.GlogSetter`: the body is
//! the level, the answer Go's text), and `GET /configz` answers the effective configuration
//! as JSON (Go's `configz`). Ours: in shadow mode (`--shadow`), `GET /debug/shadow/plan`
//! answers what the controllers would change, as JSON ([`crate::shadow`]). `/debug/pprof`
//! is not served (docs/app.md says why).

use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Bytes};

use super::response;
use crate::logging::Verbosity;
use crate::shadow::{PLAN_PATH, Shadow};

/// The path of the verbosity handler.
pub const FLAGS_V_PATH: &str = "/debug/flags/v";
/// The path of the configuration.
pub const CONFIGZ_PATH: &str = "/configz";
/// The most a `PUT /debug/flags/v` body may hold: a level is a few digits.
pub const MAX_FLAG_BODY_BYTES: usize = 1024;

/// What the debug endpoints serve; each is off (404) when not set.
#[derive(Clone, Debug, Default)]
pub struct DebugEndpoints {
    verbosity: Option<Verbosity>,
    configz: Option<Arc<str>>,
    shadow: Option<Shadow>,
}

impl DebugEndpoints {
    /// Serves `PUT /debug/flags/v`, changing `verbosity`.
    #[must_use]
    pub fn with_verbosity(mut self, verbosity: Option<Verbosity>) -> Self {
        self.verbosity = verbosity;
        self
    }

    /// Serves `GET /configz` with `json`.
    #[must_use]
    pub fn with_configz(mut self, json: String) -> Self {
        self.configz = Some(json.into());
        self
    }

    /// Serves `GET /debug/shadow/plan` with the plan of `shadow`, when set.
    #[must_use]
    pub fn with_shadow_plan(mut self, shadow: Option<Shadow>) -> Self {
        self.shadow = shadow;
        self
    }

    /// Whether `path` is one of these endpoints (served or not).
    pub(super) fn owns(path: &str) -> bool {
        path == FLAGS_V_PATH || path == CONFIGZ_PATH || path == PLAN_PATH
    }

    /// Answers a request for one of these endpoints (see [`owns`](Self::owns)).
    pub(super) async fn respond<B>(&self, req: Request<B>) -> Response<Full<Bytes>>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let text = |status, body: String| response(status, "text/plain; charset=utf-8", body);
        let not_found = || text(StatusCode::NOT_FOUND, "404 page not found\n".to_owned());
        match req.uri().path() {
            CONFIGZ_PATH => match (&self.configz, req.method()) {
                (None, _) => not_found(),
                (Some(json), &Method::GET | &Method::HEAD) => {
                    response(StatusCode::OK, "application/json", json.to_string())
                }
                (Some(_), _) => text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "405 method not allowed\n".to_owned(),
                ),
            },
            PLAN_PATH => match (&self.shadow, req.method()) {
                (None, _) => not_found(),
                (Some(shadow), &Method::GET | &Method::HEAD) => {
                    response(StatusCode::OK, "application/json", shadow.to_json())
                }
                (Some(_), _) => text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "405 method not allowed\n".to_owned(),
                ),
            },
            _ => {
                let Some(verbosity) = &self.verbosity else {
                    return not_found();
                };
                if req.method() != Method::PUT {
                    return text(
                        StatusCode::NOT_ACCEPTABLE,
                        "unsupported http method".to_owned(),
                    );
                }
                let body = match Limited::new(req.into_body(), MAX_FLAG_BODY_BYTES)
                    .collect()
                    .await
                {
                    Ok(body) => body.to_bytes(),
                    Err(err) => {
                        return text(
                            StatusCode::BAD_REQUEST,
                            format!("error reading request body: {err}"),
                        );
                    }
                };
                match verbosity.set(&String::from_utf8_lossy(&body)) {
                    Ok(done) => text(StatusCode::OK, done),
                    Err(err) => text(StatusCode::BAD_REQUEST, err),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, body: &str) -> Request<Full<Bytes>> {
        Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap()
    }

    async fn answer(d: &DebugEndpoints, req: Request<Full<Bytes>>) -> (StatusCode, String) {
        let r = d.respond(req).await;
        let status = r.status();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn configz_answers_json_when_set_and_404_otherwise() {
        let none = DebugEndpoints::default();
        assert_eq!(
            answer(&none, request("GET", CONFIGZ_PATH, "")).await.0,
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            answer(&none, request("PUT", FLAGS_V_PATH, "4")).await.0,
            StatusCode::NOT_FOUND
        );
        let set = DebugEndpoints::default().with_configz("{\"a\":1}".to_owned());
        let r = set.respond(request("GET", CONFIGZ_PATH, "")).await;
        assert_eq!(r.headers()["content-type"], "application/json");
        assert_eq!(
            answer(&set, request("GET", CONFIGZ_PATH, "")).await,
            (StatusCode::OK, "{\"a\":1}".to_owned())
        );
        assert_eq!(
            answer(&set, request("POST", CONFIGZ_PATH, "")).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert!(DebugEndpoints::owns("/configz") && DebugEndpoints::owns("/debug/flags/v"));
        assert!(!DebugEndpoints::owns("/debug/flags") && !DebugEndpoints::owns("/metrics"));
    }

    #[tokio::test]
    async fn the_shadow_plan_is_served_in_shadow_mode_only() {
        let acting = DebugEndpoints::default().with_shadow_plan(None);
        assert_eq!(
            answer(&acting, request("GET", PLAN_PATH, "")).await.0,
            StatusCode::NOT_FOUND
        );
        let shadow = crate::shadow::Shadow::new();
        let set = DebugEndpoints::default().with_shadow_plan(Some(shadow.clone()));
        let (status, body) = answer(&set, request("GET", PLAN_PATH, "")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, shadow.to_json());
        let plan: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(plan["changes"], serde_json::json!([]));
        assert_eq!(
            answer(&set, request("POST", PLAN_PATH, "")).await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert!(DebugEndpoints::owns(PLAN_PATH));
    }
}
