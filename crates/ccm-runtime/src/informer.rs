//! Shared informers: one watch per resource kind, an in-memory cache, and change
//! notifications for every controller that cares.
//!
//! An [`Informer`] runs one `kube` watcher, trims each object with a transform (Nodes lose
//! their `managedFields` and image lists, for instance) before caching it, and tells each
//! subscriber what changed, with the old and the new object. Several controllers share one
//! informer, so a CCM holds one copy of each Node however many controllers read it, and
//! the API server serves one watch per kind. A re-list (after a `410 Gone`) is diffed
//! against the cache, so objects deleted while the watch was down are reported as deleted.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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
    api: Api<K>,
    config: watcher::Config,
    transform: fn(&mut K),
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
            api: self.api.clone(),
            config: self.config.clone(),
            transform: self.transform,
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
            api,
            config,
            transform,
        }
    }

    /// The cache. It is empty until the first list completes; see
    /// [`wait_synced`](Self::wait_synced).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Calls `handler` on every change from now on. Handlers run on the informer's task and
    /// must be quick: enqueue a key, do not call the API.
    pub fn subscribe(&self, handler: impl Fn(&Change<K>) + Send + Sync + 'static) {
        self.handlers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(handler));
    }

    /// Waits until the first full list is in the cache. Returns `false` if the informer
    /// stopped first.
    pub async fn wait_synced(&self) -> bool {
        let mut rx = self.synced.clone();
        rx.wait_for(|s| *s).await.is_ok()
    }

    /// Whether the first full list is in the cache.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Runs the watch until `cancel` fires. Watch errors are logged and retried with
    /// backoff. Only the first call runs; later calls return at once.
    pub async fn run(&self, cancel: CancellationToken) {
        let Some(mut writer) = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        else {
            return;
        };
        let kind = K::kind(&Default::default()).into_owned();
        let transform = self.transform;
        let stream = watcher::watcher(self.api.clone(), self.config.clone())
            .default_backoff()
            .map(move |ev| {
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
            });
        let mut stream = std::pin::pin!(stream);
        // During a (re-)list: the objects seen so far, with their cached version before it.
        let mut relist: Option<HashMap<ObjectRef<K>, Option<Arc<K>>>> = None;
        loop {
            let event = tokio::select! {
                _ = cancel.cancelled() => break,
                ev = stream.next() => match ev {
                    Some(ev) => ev,
                    None => break,
                },
            };
            let event = match event {
                Ok(ev) => ev,
                Err(err) => {
                    tracing::warn!(kind, error = %err, "watch failed; retrying with backoff");
                    continue;
                }
            };
            match &event {
                Event::Apply(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let old = self.store.get(&key);
                    writer.apply_watcher_event(&event);
                    if let Some(new) = self.store.get(&key) {
                        self.notify(&Change::Applied { old, new });
                    }
                }
                Event::Delete(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let last = self
                        .store
                        .get(&key)
                        .unwrap_or_else(|| Arc::new(obj.clone()));
                    writer.apply_watcher_event(&event);
                    self.notify(&Change::Deleted(last));
                }
                Event::Init => {
                    relist = Some(HashMap::new());
                    writer.apply_watcher_event(&event);
                }
                Event::InitApply(obj) => {
                    let key = ObjectRef::from_obj(obj);
                    let old = self.store.get(&key);
                    relist.get_or_insert_with(HashMap::new).insert(key, old);
                    writer.apply_watcher_event(&event);
                }
                Event::InitDone => {
                    let before = self.store.state();
                    writer.apply_watcher_event(&event);
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
                    self.synced_tx.send_replace(true);
                    tracing::debug!(kind, objects = self.store.state().len(), "informer synced");
                }
            }
        }
        self.synced_tx.send_replace(false);
    }

    fn notify(&self, change: &Change<K>) {
        for handler in self
            .handlers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            handler(change);
        }
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
