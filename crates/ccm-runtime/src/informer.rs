//! Shared informers: one watch per resource kind, an in-memory cache, and change
//! notifications for every controller that cares.
//!
//! An [`Informer`] runs one `kube` watcher, trims each object with a transform (Nodes lose
//! their `managedFields` and image lists, for instance) before caching it, and tells each
//! subscriber what changed, with the old and the new object. Several controllers share one
//! informer, so a CCM holds one copy of each Node however many controllers read it, and
//! the API server serves one watch per kind. A re-list is diffed against the cache, so
//! objects deleted while the watch was down are reported as deleted.
//!
//! **Recovery.** A watch that fails is started over with a fresh list, so a working watch
//! is always one whose list completed: that is when it counts as working again. An expired
//! resource version (`410 Expired`/`Gone`, what every watch gets from an API server that
//! restarted) re-lists at once; any other failure retries after [`WATCH_RETRY_INITIAL`],
//! doubling up to [`WATCH_RETRY_MAX`], each pause jittered to between half and all of it,
//! and back to the start once a list completes or an event arrives. So after an outage the
//! watch is back within about [`WATCH_RETRY_MAX`] of the API server, where kube's default
//! backoff (client-go's: 0.8 s doubling to 30 s) waits up to half a minute.
//! [`Informer::check_watch`] tells a readiness check how long the watch has been failing.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The pause before the first retry of a failed watch (an expired resource version is
/// re-listed at once instead).
pub const WATCH_RETRY_INITIAL: Duration = Duration::from_millis(250);

/// The longest pause between two retries of a failed watch, however long it has failed.
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(2);

/// What changed.
#[derive(Debug)]
pub enum Change<K> {
    /// The object was created or updated; `old` is the cached version before, if any.
    Applied {
        /// The previous version, `None` for a new object.
        old: Option<Arc<K>>,
        /// The new version, as cached.
        new: Arc<K>,
    },
    /// The object was deleted; this is its last known version.
    Deleted(Arc<K>),
}

type Handler<K> = Box<dyn Fn(&Change<K>) + Send + Sync>;

/// Starts a watcher of its own instead of kube's (JSON) one: the protobuf watcher.
type WatcherFn<K> = fn(
    Api<K>,
    watcher::Config,
) -> futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>;

/// Whether the watch works: when it started failing and why, `None` while it works.
#[derive(Debug, Default)]
struct WatchHealth {
    failing: Option<(Instant, String)>,
}

/// A shared, cancellable watch of one kind of object. Cloning gives another handle to the
/// same cache and subscriber list.
pub struct Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    store: Store<K>,
    writer: Arc<Mutex<Option<Writer<K>>>>,
    handlers: Arc<Mutex<Vec<Handler<K>>>>,
    synced: watch::Receiver<bool>,
    synced_tx: Arc<watch::Sender<bool>>,
    health: Arc<Mutex<WatchHealth>>,
    api: Api<K>,
    config: watcher::Config,
    transform: fn(&mut K),
    protobuf: Option<WatcherFn<K>>,
}

impl<K> Clone for Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            writer: self.writer.clone(),
            handlers: self.handlers.clone(),
            synced: self.synced.clone(),
            synced_tx: self.synced_tx.clone(),
            health: self.health.clone(),
            api: self.api.clone(),
            config: self.config.clone(),
            transform: self.transform,
            protobuf: self.protobuf,
        }
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + Hash + Clone + Default,
{
    /// An informer over `api`, filtered by `config`, trimming every object with `transform`
    /// before it is cached. Nothing happens until [`run`](Self::run).
    pub fn new(api: Api<K>, config: watcher::Config, transform: fn(&mut K)) -> Self {
        let writer = Writer::default();
        let store = writer.as_reader();
        let (synced_tx, synced) = watch::channel(false);
        Self {
            store,
            writer: Arc::new(Mutex::new(Some(writer))),
            handlers: Arc::default(),
            synced,
            synced_tx: Arc::new(synced_tx),
            health: Arc::default(),
            api,
            config,
            transform,
            protobuf: None,
        }
    }

    /// Lists and watches in protobuf rather than JSON (see [`crate::client::protobuf`]):
    /// the API server encodes each change once for every watcher of the same encoding, and
    /// the other watchers of Nodes and Services (kubelets, kube-controller-manager, the
    /// scheduler, kube-proxy) speak protobuf. The same events either way.
    #[must_use]
    pub fn with_protobuf(mut self) -> Self
    where
        K: crate::client::protobuf::Protobuf,
    {
        self.protobuf = Some(|api, config| Box::pin(crate::client::protobuf::watcher(api, config)));
        self
    }

    /// The cache. It is empty until the first list completes; see
    /// [`wait_synced`](Self::wait_synced).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Calls `handler` on every change from now on. Handlers run on the informer's task and
    /// must be quick: enqueue a key, do not call the API.
    pub fn subscribe(&self, handler: impl Fn(&Change<K>) + Send + Sync + 'static) {
        self.handlers.lock().push(Box::new(handler));
    }

    /// Waits until the first full list is in the cache. Returns `false` if the informer
    /// stopped first.
    pub async fn wait_synced(&self) -> bool {
        let mut rx = self.synced.clone();
        rx.wait_for(|s| *s).await.is_ok()
    }

    /// [`wait_synced`](Self::wait_synced), unless `cancel` fires first: `true` once the
    /// cache is synced, `false` if the informer stopped or `cancel` fired. What a
    /// controller's `run` starts with.
    pub async fn synced_or_cancelled(&self, cancel: &tokio_util::sync::CancellationToken) -> bool {
        tokio::select! {
            synced = self.wait_synced() => synced,
            () = cancel.cancelled() => false,
        }
    }

    /// Whether the first full list is in the cache.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// `Ok` while the watch works, or has failed for at most `threshold`; otherwise why,
    /// naming the resource, for a readiness check. A watch that failed counts as working
    /// again once a fresh list has completed.
    pub fn check_watch(&self, threshold: Duration) -> Result<(), String> {
        match &self.health.lock().failing {
            Some((since, error)) if since.elapsed() > threshold => Err(format!(
                "the {} watch has failed for {}s: {error}",
                K::plural(&Default::default()),
                since.elapsed().as_secs()
            )),
            _ => Ok(()),
        }
    }

    /// Runs the watch until `cancel` fires. A failed watch is started over with a fresh
    /// list, at once for an expired resource version, otherwise after a jittered pause of
    /// [`WATCH_RETRY_INITIAL`] doubling up to [`WATCH_RETRY_MAX`] (see the
    /// [module docs](self)). Only the first call runs; later calls return at once.
    pub async fn run(&self, cancel: CancellationToken) {
        let Some(mut writer) = self.writer.lock().take() else {
            return;
        };
        let kind = K::kind(&Default::default()).into_owned();
        let mut retry = Retry::default();
        let mut protobuf = self.protobuf;
        // Each turn is one watcher, from its first list until it fails.
        'watchers: loop {
            let stream = self.watcher(protobuf);
            let mut stream = std::pin::pin!(stream);
            // During a (re-)list: the objects seen so far, with their cached version before it.
            let mut relist: Option<HashMap<ObjectRef<K>, Option<Arc<K>>>> = None;
            let err = loop {
                let event = tokio::select! {
                    _ = cancel.cancelled() => break 'watchers,
                    ev = stream.next() => match ev {
                        Some(ev) => ev,
                        None => break 'watchers, // a watcher never ends on its own
                    },
                };
                match event {
                    Ok(event) => {
                        if self.apply(&mut writer, &mut relist, &event) {
                            retry.reset();
                        }
                        if let Event::InitDone = event {
                            self.synced_tx.send_replace(true);
                            tracing::debug!(
                                kind,
                                objects = self.store.state().len(),
                                "informer synced"
                            );
                            if let Some((since, _)) = self.health.lock().failing.take() {
                                tracing::info!(kind, down_for = ?since.elapsed(), "watch works again");
                            }
                        }
                    }
                    Err(err) => break err,
                }
            };
            if protobuf.is_some() && crate::client::protobuf::is_unreadable(&err) {
                // Never worse than JSON: an answer the schema cannot read (a newer server
                // writing a field otherwise) must not stop the informer for good.
                tracing::warn!(
                    kind,
                    error = %err,
                    "the API server's protobuf could not be read; listing and watching in JSON from now on"
                );
                protobuf = None;
            }
            let desync = is_desync(&err);
            let delay = retry.after_error(desync, random_fraction());
            let first = {
                let mut health = self.health.lock();
                let first = health.failing.is_none();
                let since = health
                    .failing
                    .as_ref()
                    .map_or_else(Instant::now, |(t, _)| *t);
                health.failing = Some((since, err.to_string()));
                first
            };
            if desync {
                tracing::info!(kind, error = %err, ?delay, "watch resource version expired; re-listing");
            } else if first {
                tracing::warn!(kind, error = %err, ?delay, "watch failed; re-listing after a pause");
            } else {
                tracing::debug!(kind, error = %err, ?delay, "watch failed again");
            }
            if !delay.is_zero() {
                tokio::select! {
                    _ = cancel.cancelled() => break 'watchers,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
        self.synced_tx.send_replace(false);
    }

    /// A watcher from a fresh list, its objects trimmed; in protobuf with `protobuf`.
    fn watcher(
        &self,
        protobuf: Option<WatcherFn<K>>,
    ) -> impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + use<K> {
        let transform = self.transform;
        let events = match protobuf {
            Some(start) => start(self.api.clone(), self.config.clone()),
            None => watcher::watcher(self.api.clone(), self.config.clone()).boxed(),
        };
        events.map(move |ev| {
            ev.map(|ev| match ev {
                Event::Apply(mut o) => {
                    transform(&mut o);
                    Event::Apply(o)
                }
                Event::InitApply(mut o) => {
                    transform(&mut o);
                    Event::InitApply(o)
                }
                Event::Delete(mut o) => {
                    transform(&mut o);
                    Event::Delete(o)
                }
                other => other,
            })
        })
    }

    /// Applies `event` as if the watch had sent it, for unit tests of the subscribers.
    /// Panics once [`run`](Self::run) has taken the cache's writer.
    #[cfg(test)]
    pub(crate) fn apply_for_test(&self, event: &Event<K>) {
        let mut writer = self.writer.lock();
        let writer = writer.as_mut().expect("the informer is not running");
        let mut relist = None;
        self.apply(writer, &mut relist, event);
    }

    /// Applies one event to the cache and notifies the subscribers. `true` when the event
    /// shows the watch works: a completed list, or a change.
    fn apply(
        &self,
        writer: &mut Writer<K>,
        relist: &mut Option<HashMap<ObjectRef<K>, Option<Arc<K>>>>,
        event: &Event<K>,
    ) -> bool {
        match event {
            Event::Apply(obj) => {
                let key = ObjectRef::from_obj(obj);
                let old = self.store.get(&key);
                writer.apply_watcher_event(event);
                if let Some(new) = self.store.get(&key) {
                    self.notify(&Change::Applied { old, new });
                }
                true
            }
            Event::Delete(obj) => {
                let key = ObjectRef::from_obj(obj);
                let last = self
                    .store
                    .get(&key)
                    .unwrap_or_else(|| Arc::new(obj.clone()));
                writer.apply_watcher_event(event);
                self.notify(&Change::Deleted(last));
                true
            }
            Event::Init => {
                *relist = Some(HashMap::new());
                writer.apply_watcher_event(event);
                false
            }
            Event::InitApply(obj) => {
                let key = ObjectRef::from_obj(obj);
                let old = self.store.get(&key);
                relist.get_or_insert_with(HashMap::new).insert(key, old);
                writer.apply_watcher_event(event);
                false
            }
            Event::InitDone => {
                let before = self.store.state();
                writer.apply_watcher_event(event);
                let seen = relist.take().unwrap_or_default();
                for obj in before {
                    if !seen.contains_key(&ObjectRef::from_obj(&*obj)) {
                        self.notify(&Change::Deleted(obj));
                    }
                }
                for (key, old) in seen {
                    if let Some(new) = self.store.get(&key) {
                        let unchanged = old.as_ref().is_some_and(|o| {
                            o.meta().resource_version == new.meta().resource_version
                        });
                        if !unchanged {
                            self.notify(&Change::Applied { old, new });
                        }
                    }
                }
                true
            }
        }
    }

    fn notify(&self, change: &Change<K>) {
        for handler in self.handlers.lock().iter() {
            handler(change);
        }
    }
}

/// Whether a watch error means the resource version is gone (`410 Expired` / `Gone`): the
/// watch can only go on from a fresh list.
fn is_desync(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => matches!(e, kube::Error::Api(s) if s.code == 410),
        watcher::Error::NoResourceVersion => false,
    }
}

/// The pauses between retries of a failed watch; see the [module docs](self).
#[derive(Debug, Default)]
struct Retry {
    /// Failures since the watch last worked.
    failures: u32,
}

impl Retry {
    /// The pause after another failure; `fraction` in [0, 1) picks the jitter. An expired
    /// resource version right after the watch worked is re-listed at once; a second one in a
    /// row waits like any failure, so a list that keeps expiring cannot spin.
    fn after_error(&mut self, desync: bool, fraction: f64) -> Duration {
        let n = self.failures;
        self.failures = self.failures.saturating_add(1);
        if desync && n == 0 {
            return Duration::ZERO;
        }
        let full = WATCH_RETRY_INITIAL
            .saturating_mul(1 << n.min(16))
            .min(WATCH_RETRY_MAX);
        full.mul_f64(0.5 + fraction.clamp(0.0, 1.0) / 2.0)
    }

    /// The watch works: the next failure starts from the shortest pause.
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A random number in [0, 1), from the system's randomness (0.5 without it).
fn random_fraction() -> f64 {
    let mut bytes = [0u8; 2];
    match ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes) {
        Ok(()) => f64::from(u16::from_le_bytes(bytes)) / 65536.0,
        Err(_) => 0.5,
    }
}

/// Drops what no controller reads from a Node: `managedFields`, the image list, the volume
/// lists, and the last-applied annotation. On a large cluster this is most of each Node.
pub fn trim_node(node: &mut k8s_openapi::api::core::v1::Node) {
    node.metadata.managed_fields = None;
    if let Some(a) = node.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.volumes_attached = None;
        status.volumes_in_use = None;
        status.config = None;
    }
}

/// Drops what no controller reads from a Service: `managedFields` and the last-applied
/// annotation.
pub fn trim_service(service: &mut k8s_openapi::api::core::v1::Service) {
    service.metadata.managed_fields = None;
    if let Some(a) = service.metadata.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> Box<kube::core::Status> {
        let mut status = kube::core::Status::failure("too old resource version", "Expired");
        status.code = code;
        Box::new(status)
    }

    #[test]
    fn expired_resource_versions_are_desyncs() {
        assert!(is_desync(&watcher::Error::WatchError(status(410))));
        assert!(is_desync(&watcher::Error::InitialListFailed(
            kube::Error::Api(status(410))
        )));
        assert!(!is_desync(&watcher::Error::WatchError(status(500))));
        assert!(!is_desync(&watcher::Error::WatchStartFailed(
            kube::Error::Api(status(429))
        )));
        assert!(!is_desync(&watcher::Error::NoResourceVersion));
    }

    #[test]
    fn retries_double_from_a_quarter_second_to_two_seconds_jittered() {
        let mut retry = Retry::default();
        // The largest jitter gives the full pause, the smallest half of it.
        let full: Vec<Duration> = (0..6)
            .map(|_| retry.after_error(false, 0.999_999))
            .collect();
        let ms = |d: &Duration| (d.as_secs_f64() * 1000.0).round() as u64;
        assert_eq!(
            full.iter().map(ms).collect::<Vec<_>>(),
            [250, 500, 1000, 2000, 2000, 2000]
        );
        assert_eq!(retry.after_error(false, 0.0), WATCH_RETRY_MAX / 2);
        retry.reset();
        assert_eq!(retry.after_error(false, 0.0), WATCH_RETRY_INITIAL / 2);
        // However long it fails.
        for _ in 0..100 {
            assert!(retry.after_error(false, 0.999) <= WATCH_RETRY_MAX);
        }
    }

    #[test]
    fn an_expired_resource_version_relists_at_once_but_not_twice_in_a_row() {
        let mut retry = Retry::default();
        assert_eq!(retry.after_error(true, 0.5), Duration::ZERO);
        assert!(retry.after_error(true, 0.5) > Duration::ZERO, "no spin");
        retry.reset();
        assert_eq!(retry.after_error(true, 0.5), Duration::ZERO);
        // After other failures (the API server was down), too: it waits its turn.
        let mut retry = Retry::default();
        retry.after_error(false, 0.5);
        assert!(retry.after_error(true, 0.5) > Duration::ZERO);
    }

    /// An API server whose protobuf cannot be read (`garbage` for every protobuf request)
    /// and whose JSON lists one Node; JSON watches end at once. Counts protobuf requests.
    fn unreadable_protobuf_server(
        protobuf_requests: Arc<std::sync::atomic::AtomicUsize>,
    ) -> kube::Client {
        use kube::client::Body;
        kube::Client::new(
            tower::service_fn(move |req: http::Request<Body>| {
                let protobuf_requests = protobuf_requests.clone();
                async move {
                    let accept = req
                        .headers()
                        .get(http::header::ACCEPT)
                        .map(|v| v.to_str().unwrap_or("").to_owned());
                    let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                    let (ctype, body): (&str, Vec<u8>) =
                        if accept.is_some_and(|a| a.contains("protobuf")) {
                            protobuf_requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            (
                                "application/vnd.kubernetes.protobuf",
                                b"k8s\0\x12\x05short".to_vec(),
                            )
                        } else if watch {
                            ("application/json", Vec::new())
                        } else {
                            let list = serde_json::json!({"apiVersion": "v1", "kind": "NodeList",
                            "metadata": {"resourceVersion": "5"},
                            "items": [{"metadata": {"name": "n1", "resourceVersion": "5"}}]});
                            (
                                "application/json",
                                serde_json::to_vec(&list).unwrap_or_default(),
                            )
                        };
                    let res = http::Response::builder()
                        .status(200)
                        .header(http::header::CONTENT_TYPE, ctype);
                    res.body(Body::from(body)).map_err(std::io::Error::other)
                }
            }),
            "default",
        )
    }

    #[tokio::test]
    async fn unreadable_protobuf_falls_back_to_json_for_good() {
        let protobuf_requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let client = unreadable_protobuf_server(protobuf_requests.clone());
        let informer: Informer<k8s_openapi::api::core::v1::Node> =
            Informer::new(Api::all(client), watcher::Config::default(), |_| {}).with_protobuf();
        let cancel = CancellationToken::new();
        let run = tokio::spawn({
            let (informer, cancel) = (informer.clone(), cancel.clone());
            async move { informer.run(cancel).await }
        });
        let synced = tokio::time::timeout(Duration::from_secs(10), informer.wait_synced()).await;
        assert_eq!(
            synced,
            Ok(true),
            "synced in JSON after the protobuf list failed"
        );
        assert_eq!(informer.store().state().len(), 1);
        // one protobuf list, then JSON only
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            protobuf_requests.load(std::sync::atomic::Ordering::SeqCst),
            1
        );
        cancel.cancel();
        let _ = run.await;
    }

    #[test]
    fn random_fractions_are_in_the_unit_interval() {
        for _ in 0..100 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f), "{f}");
        }
    }
}
