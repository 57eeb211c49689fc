//! The one loop behind every guarded write of the controllers: patch with a guard, and on a
//! conflict re-read the object and plan again.
//!
//! A controller's patches test what they replace (see the `patch` module), so a concurrent
//! change makes the API server refuse them: `409 Conflict`, or `422 Invalid` for a failed
//! `test` (which the API server does not tell apart from an invalid value). [`guarded_patch`]
//! runs one attempt (the caller plans from the object and patches), and on either answer
//! re-reads the object: if its `resourceVersion` moved, the caller looks at the fresh copy
//! and the attempt runs again on it, up to [`CONFLICT_RETRIES`] times; if it did not move,
//! the write itself was refused and trying again would not help. A `404` at any point means
//! the object is gone. What an attempt plans and writes, and what each ending means to the
//! controller (an event, a retry), stay with the caller, as kube-runtime's `finalizer`
//! keeps the reconciler's work outside its own loop.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use kube::Resource;
use kube::api::Api;
use serde::de::DeserializeOwned;

/// How often a guarded patch re-reads the object and runs again after a conflict, before it
/// gives up.
pub(crate) const CONFLICT_RETRIES: usize = 5;

/// How a guarded patch ended, when it did not fail.
#[derive(Debug)]
pub(crate) enum Patched<T> {
    /// An attempt went through (or found nothing to write): its answer.
    Done(T),
    /// The object is gone: the patch answered `404`, or the re-read found nothing.
    Gone,
    /// A re-read copy showed the write is no longer wanted: the caller's `changed` answered
    /// `None`.
    Moot,
}

/// Why a guarded patch failed.
#[derive(Debug)]
pub(crate) enum PatchError {
    /// The API server refused the patch (`409` or `422`) although the object had not changed
    /// since it was read: not a conflict, the write itself is refused (an invalid value).
    /// Holds the API server's answer to the patch.
    Refused(kube::Error),
    /// The patch failed otherwise, or still conflicted after [`CONFLICT_RETRIES`] re-reads.
    Failed(kube::Error),
    /// Re-reading the object after a conflict failed.
    Reread(kube::Error),
}

impl PatchError {
    /// The API server's answer, whichever step it came from.
    pub(crate) fn into_inner(self) -> kube::Error {
        match self {
            Self::Refused(err) | Self::Failed(err) | Self::Reread(err) => err,
        }
    }
}

/// Runs `attempt` on `object` (named `name` in `api`) until it goes through, re-reading the
/// object after each `409` or `422`, at most [`CONFLICT_RETRIES`] times.
///
/// `attempt` plans from the object it is given and patches (it may write nothing, or more
/// than one patch); its `Ok` answer ends the loop as [`Patched::Done`]. After a conflict,
/// a fresh copy whose `resourceVersion` moved is handed to `changed` with the number of the
/// retry (from 1): it answers the object the next attempt starts from, or `None` when the
/// fresh copy shows the write is no longer wanted ([`Patched::Moot`]).
pub(crate) async fn guarded_patch<K, T, F, Fut>(
    api: &Api<K>,
    name: &str,
    mut object: Arc<K>,
    mut attempt: F,
    mut changed: impl FnMut(K, usize) -> Option<Arc<K>>,
) -> Result<Patched<T>, PatchError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    F: FnMut(Arc<K>) -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut retries = 0;
    loop {
        let err = match attempt(object.clone()).await {
            Ok(answer) => return Ok(Patched::Done(answer)),
            Err(err) => err,
        };
        match api_code(&err) {
            Some(404) => return Ok(Patched::Gone),
            Some(409 | 422) if retries < CONFLICT_RETRIES => retries += 1,
            _ => return Err(PatchError::Failed(err)),
        }
        // A failed `test` and an invalid value both answer 422; if the object did not
        // change, it was the value, and trying again will not help.
        let fresh = match api.get_opt(name).await {
            Ok(Some(fresh)) => fresh,
            Ok(None) => return Ok(Patched::Gone),
            Err(reread) => return Err(PatchError::Reread(reread)),
        };
        if fresh.meta().resource_version == object.meta().resource_version {
            return Err(PatchError::Refused(err));
        }
        match changed(fresh, retries) {
            Some(fresh) => object = fresh,
            None => return Ok(Patched::Moot),
        }
    }
}

/// The HTTP status of an API server's answer, if the error is one.
fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::{Value, json};

    use super::*;

    /// An API whose GETs of the ConfigMap `cm` answer `answers[i]` (status, body) for the
    /// i-th GET (the last one again after the end); and how many GETs it answered.
    fn api(answers: Vec<(u16, Value)>) -> (Api<ConfigMap>, Arc<AtomicUsize>) {
        let gets = Arc::new(AtomicUsize::new(0));
        let counted = gets.clone();
        let answers = Arc::new(answers);
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let i = counted.fetch_add(1, Ordering::SeqCst);
            let (code, body) = answers[i.min(answers.len() - 1)].clone();
            async move {
                assert_eq!(req.method(), "GET");
                assert_eq!(req.uri().path(), "/api/v1/namespaces/default/configmaps/cm");
                let body = kube::client::Body::from(serde_json::to_vec(&body).unwrap());
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder().status(code).body(body).unwrap(),
                )
            }
        });
        let client = kube::Client::new(service, "default");
        (Api::namespaced(client, "default"), gets)
    }

    fn config_map(rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": "default", "resourceVersion": rv}})
    }

    fn status(code: u16, reason: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
               "message": format!("answered {code}"), "reason": reason, "code": code})
    }

    fn error(code: u16) -> kube::Error {
        let mut status = kube::core::Status::failure(&format!("patch answered {code}"), "");
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    fn object(rv: &str) -> Arc<ConfigMap> {
        Arc::new(serde_json::from_value(config_map(rv)).unwrap())
    }

    fn rv(cm: &ConfigMap) -> &str {
        cm.metadata.resource_version.as_deref().unwrap_or_default()
    }

    fn code(err: &PatchError) -> Option<u16> {
        match err {
            PatchError::Refused(e) | PatchError::Failed(e) | PatchError::Reread(e) => api_code(e),
        }
    }

    #[tokio::test]
    async fn an_attempt_that_goes_through_ends_it_without_a_read() {
        let (api, gets) = api(vec![(200, config_map("2"))]);
        let patched = guarded_patch(
            &api,
            "cm",
            object("1"),
            |cm| async move { Ok(rv(&cm).to_owned()) },
            |_, _| panic!("no conflict, no fresh copy"),
        )
        .await
        .unwrap();
        assert!(matches!(patched, Patched::Done(rv) if rv == "1"));
        assert_eq!(gets.load(Ordering::SeqCst), 0);
    }

    /// `guarded_patch` of `cm` at version 1, each attempt answering `answer(its version)`
    /// (`Err(code)`: the API's error), with an API whose re-reads answer `rereads` (as in
    /// [`api`]). Returns the result, the versions the attempts were given, and how many GETs
    /// the API answered.
    async fn patch(
        rereads: Vec<(u16, Value)>,
        answer: impl Fn(&str) -> Result<(), u16>,
        changed: impl FnMut(ConfigMap, usize) -> Option<Arc<ConfigMap>>,
    ) -> (Result<Patched<()>, PatchError>, Vec<String>, usize) {
        let (api, gets) = api(rereads);
        let seen = Mutex::new(Vec::new());
        let attempt = |cm: Arc<ConfigMap>| {
            seen.lock().unwrap().push(rv(&cm).to_owned());
            let answer = answer(rv(&cm)).map_err(error);
            async move { answer }
        };
        let result = guarded_patch(&api, "cm", object("1"), attempt, changed).await;
        (
            result,
            seen.into_inner().unwrap(),
            gets.load(Ordering::SeqCst),
        )
    }

    #[tokio::test]
    async fn a_conflict_re_reads_and_runs_again_on_the_fresh_copy() {
        for conflict in [409, 422] {
            let answer = |rv: &str| if rv == "1" { Err(conflict) } else { Ok(()) };
            let (patched, seen, gets) =
                patch(vec![(200, config_map("2"))], answer, |fresh, retry| {
                    assert_eq!(retry, 1);
                    Some(Arc::new(fresh))
                })
                .await;
            assert!(matches!(patched.unwrap(), Patched::Done(())), "{conflict}");
            assert_eq!(seen, ["1", "2"], "{conflict}");
            assert_eq!(gets, 1, "{conflict}");
        }
    }

    #[tokio::test]
    async fn a_refusal_of_an_unchanged_object_is_not_retried() {
        for refused in [409, 422] {
            let unchanged = vec![(200, config_map("1"))];
            let (err, _, gets) = patch(
                unchanged,
                |_| Err(refused),
                |_, _| panic!("the object did not change"),
            )
            .await;
            let err = err.unwrap_err();
            assert!(matches!(err, PatchError::Refused(_)), "{err:?}");
            assert_eq!(code(&err), Some(refused), "the patch's answer");
            assert_eq!(gets, 1);
        }
    }

    #[tokio::test]
    async fn a_conflict_is_retried_five_times_then_fails() {
        // Every re-read shows another version.
        let rereads = (2..8)
            .map(|rv| (200, config_map(&rv.to_string())))
            .collect();
        let retries = Mutex::new(Vec::new());
        let (err, attempts, gets) = patch(
            rereads,
            |_| Err(409),
            |fresh, retry| {
                retries.lock().unwrap().push(retry);
                Some(Arc::new(fresh))
            },
        )
        .await;
        let err = err.unwrap_err();
        assert!(matches!(err, PatchError::Failed(_)), "{err:?}");
        assert_eq!(code(&err), Some(409));
        assert_eq!(attempts, ["1", "2", "3", "4", "5", "6"]);
        assert_eq!(attempts.len(), CONFLICT_RETRIES + 1);
        assert_eq!(gets, CONFLICT_RETRIES);
        assert_eq!(*retries.lock().unwrap(), [1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn gone_moot_and_other_errors_end_it() {
        // The patch answers 404.
        let (gone, _, gets) = patch(vec![(200, config_map("2"))], |_| Err(404), |_, _| None).await;
        assert!(matches!(gone.unwrap(), Patched::Gone));
        assert_eq!(gets, 0);
        // The re-read finds nothing.
        let not_found = vec![(404, status(404, "NotFound"))];
        let (gone, _, _) = patch(not_found, |_| Err(422), |_, _| panic!("nothing was read")).await;
        assert!(matches!(gone.unwrap(), Patched::Gone));
        // The fresh copy says the write is no longer wanted.
        let (moot, _, _) = patch(
            vec![(200, config_map("2"))],
            |_| Err(409),
            |fresh, _| {
                assert_eq!(rv(&fresh), "2");
                None
            },
        )
        .await;
        assert!(matches!(moot.unwrap(), Patched::Moot));
        // Another answer to the patch is not retried.
        let fresh = vec![(200, config_map("2"))];
        let (err, _, gets) = patch(fresh, |_| Err(500), |_, _| panic!("not a conflict")).await;
        let err = err.unwrap_err();
        assert!(matches!(err, PatchError::Failed(_)) && code(&err) == Some(500));
        assert_eq!(gets, 0);
        // The re-read fails.
        let failing = vec![(500, status(500, "InternalError"))];
        let (err, _, _) = patch(failing, |_| Err(409), |_, _| panic!("nothing was read")).await;
        let err = err.unwrap_err();
        assert!(matches!(err, PatchError::Reread(_)) && code(&err) == Some(500));
        assert_eq!(code(&PatchError::Refused(error(422))), Some(422));
        assert!(matches!(
            PatchError::Reread(error(503)).into_inner(),
            kube::Error::Api(s) if s.code == 503
        ));
    }
}
