//! Kubernetes Events, written where and as Go's cloud-provider controllers write them.
//!
//! Each controller has one [`EventRecorder`], named as the Go controller's event source
//! (`cloud-node-controller`, `service-controller`, …). Events are core/v1 `Event`s in the
//! object's namespace (`default` for Nodes), correlated as client-go's record package does
//! (`tools/record`, `EventCorrelator`): an event repeating one about the same object with the
//! same type, reason and message bumps `count` and `lastTimestamp` of that one Event with a
//! strategic-merge PATCH; from the 10th distinct message of one reason within 10 minutes, the
//! messages are combined into one "(combined from similar events): …" Event; and a token
//! bucket per object and type (25 events, then one every 5 minutes) drops a flood before it
//! reaches the API server. So `kubectl get events` and `kubectl describe` read as they did
//! under a Go CCM, and RBAC written for one (core `events` create/patch) is enough.
//!
//! What this writer keeps from its own design: [`EventRecorder::normal`] and
//! [`EventRecorder::warning`] never wait. They correlate at once (a few hash-map operations)
//! and queue the write; tasks of the recorder write the queue (four lanes at once, events about
//! one object in order), each write after the process's Node, Service and Lease writes in
//! flight, waiting for them at most a second once at the head of its lane
//! (`client::priority`), so events never slow the writes they report on. At most
//! [`MAX_QUEUED_EVENTS`] writes wait; past that, and for what the spam filter or the API
//! server refuses, the event is dropped and counted in
//! `ccm_events_dropped_total{component, reason}`. The caches are bounded (4096 entries each,
//! as Go's LRUs) and keep hashes and counts, not copies of events. `docs/architecture.md`
//! ("Events: what differs from client-go") lists the differences.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::mpsc;

use crate::client::priority;
use tokio::time::Instant;

/// Writes waiting per recorder (split among its lanes) before new events are dropped: ten
/// times Go's broadcaster's 1000, because an Event write here gives way to the Node,
/// Service and Lease writes in flight (up to a second each), so a burst of Node
/// initialisations queues its events rather than losing them (a queued write holds its
/// name, its object's name, UID and resource version, times and count, about 0.3 KiB with
/// them; the object's kind, the reason, message and source are shared by consecutive events
/// alike).
pub const MAX_QUEUED_EVENTS: usize = 10_000;

/// Messages longer than this are cut (Go does not cut; a provider's error can be long).
const MAX_MESSAGE_BYTES: usize = 4096;

/// Entries of each cache (client-go's `maxLruCacheEntries`).
const MAX_CACHE_ENTRIES: usize = 4096;

/// client-go's aggregation: from this many distinct messages of one reason about one object…
const AGGREGATE_MAX_EVENTS: usize = 10;
/// …seen with less than this between two of them, they are combined.
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// The prefix of a combined event's message (`EventAggregatorByReasonMessageFunc`).
const AGGREGATE_PREFIX: &str = "(combined from similar events): ";

/// client-go's spam filter: per source, object and type, a burst of 25 events…
const SPAM_BURST: f64 = 25.0;
/// …refilled by one every 5 minutes.
const SPAM_REFILL: Duration = Duration::from_secs(300);

/// Events of one recorder written at once, each lane in order. One at a time wrote ~140 a
/// second here, so 5000 Nodes initialised in 20 s overflowed the queue and lost events.
const EVENT_WRITERS: usize = 4;

/// client-go's `maxTriesPerEvent` and sleep between tries when the API server cannot be
/// reached (the first sleep is a random part of it).
const MAX_TRIES: u32 = 12;
const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// Events dropped, by recorder and why; registered by [`crate::metrics::Metrics`].
static DROPPED: LazyLock<Family<DropLabels, Counter>> = LazyLock::new(Family::default);

/// The labels of `ccm_events_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DropLabels {
    component: String,
    reason: &'static str,
}

/// The `ccm_events_dropped_total` family, to register (a clone shares the counts).
pub(crate) fn dropped_metric() -> Family<DropLabels, Counter> {
    DROPPED.clone()
}

/// Counts one event of `component` dropped for `reason`.
pub(crate) fn count_drop(component: &str, reason: &'static str) {
    DROPPED
        .get_or_create(&DropLabels {
            component: component.to_owned(),
            reason,
        })
        .inc();
}

/// Whether an event is `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One write for the API server: create `event`, or, with `patch`, patch the Event of that
/// name (and create `event` if it is gone, as client-go does).
#[derive(Debug)]
struct Write {
    event: CoreEvent,
    patch: Option<serde_json::Value>,
}

/// A [`Write`] as it waits in a lane: what differs from one event to the next (the name,
/// the object, the times and count) kept apart from what does not (reason, message, type,
/// source, action), which consecutive events of a recorder share in one [`Template`]. A
/// thousand `Synced` events queued behind a burst of Node writes then hold one message, not
/// a thousand, and a queued write takes about a fifth of a whole `Event`.
#[derive(Debug)]
struct Queued {
    name: Option<String>,
    /// The involved object's name, UID and resource version; the rest of its reference is
    /// the template's.
    object_name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    first: Option<Time>,
    last: Option<Time>,
    count: Option<i32>,
    template: Arc<Template>,
    /// Boxed: few writes are patches, and every queued write has the slot.
    patch: Option<Box<serde_json::Value>>,
}

/// What consecutive events of a recorder have in common: the kind of object (its API
/// version, kind, namespace, field path) and the event's namespace, type, reason, message,
/// source and action.
#[derive(Debug, PartialEq)]
struct Template {
    namespace: Option<String>,
    api_version: Option<String>,
    kind: Option<String>,
    object_namespace: Option<String>,
    field_path: Option<String>,
    type_: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    source: Option<EventSource>,
    reporting_component: Option<String>,
    reporting_instance: Option<String>,
    action: Option<String>,
}

impl Queued {
    /// Takes `write` apart, sharing `last`'s template when it is the same (and making
    /// `last` this one's otherwise).
    fn new(write: Write, last: &mut Option<Arc<Template>>) -> Self {
        let Write { event, patch } = write;
        let object = event.involved_object;
        let template = Template {
            namespace: event.metadata.namespace,
            api_version: object.api_version,
            kind: object.kind,
            object_namespace: object.namespace,
            field_path: object.field_path,
            type_: event.type_,
            reason: event.reason,
            message: event.message,
            source: event.source,
            reporting_component: event.reporting_component,
            reporting_instance: event.reporting_instance,
            action: event.action,
        };
        let template = match last {
            Some(shared) if **shared == template => Arc::clone(shared),
            _ => last.insert(Arc::new(template)).clone(),
        };
        Self {
            name: event.metadata.name,
            object_name: object.name,
            uid: object.uid,
            resource_version: object.resource_version,
            first: event.first_timestamp,
            last: event.last_timestamp,
            count: event.count,
            template,
            patch: patch.map(Box::new),
        }
    }

    /// The write again, whole.
    fn into_write(self) -> Write {
        let t = &*self.template;
        Write {
            event: CoreEvent {
                metadata: ObjectMeta {
                    name: self.name,
                    namespace: t.namespace.clone(),
                    ..ObjectMeta::default()
                },
                involved_object: ObjectReference {
                    api_version: t.api_version.clone(),
                    field_path: t.field_path.clone(),
                    kind: t.kind.clone(),
                    name: self.object_name,
                    namespace: t.object_namespace.clone(),
                    resource_version: self.resource_version,
                    uid: self.uid,
                },
                first_timestamp: self.first,
                last_timestamp: self.last,
                count: self.count,
                type_: t.type_.clone(),
                reason: t.reason.clone(),
                message: t.message.clone(),
                source: t.source.clone(),
                reporting_component: t.reporting_component.clone(),
                reporting_instance: t.reporting_instance.clone(),
                action: t.action.clone(),
                ..CoreEvent::default()
            },
            patch: self.patch.map(|patch| *patch),
        }
    }
}

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventRecorder {
    inner: Arc<Recorder>,
}

struct Recorder {
    client: Client,
    component: String,
    correlator: Mutex<Correlator>,
    /// The writer tasks' queues (lanes), started on first use (and again if their runtime
    /// went away), and the template the last queued write shares.
    lanes: Mutex<Lanes>,
}

#[derive(Default)]
struct Lanes {
    senders: Option<Vec<mpsc::Sender<Queued>>>,
    template: Option<Arc<Template>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.inner.component)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder whose events have `source.component` and `reportingComponent`
    /// `component`, as a Go recorder made with `EventSource{Component: component}`.
    pub fn new(client: Client, component: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Recorder {
                client,
                component: component.into(),
                correlator: Mutex::default(),
                lanes: Mutex::default(),
            }),
        }
    }

    /// The component name events are reported under.
    pub fn component(&self) -> &str {
        &self.inner.component
    }

    /// Records a `Normal` event about `obj`. `action` fills the Event's `action` (client-go's
    /// record package leaves it empty). Never waits; call it from within a Tokio runtime.
    pub fn normal<K>(&self, obj: &K, reason: &str, action: &str, message: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(obj, EventType::Normal, reason, action, message.into());
    }

    /// Records a `Warning` event about `obj`; see [`normal`](Self::normal).
    pub fn warning<K>(&self, obj: &K, reason: &str, action: &str, message: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(obj, EventType::Warning, reason, action, message.into());
    }

    fn publish<K>(&self, obj: &K, type_: EventType, reason: &str, action: &str, message: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let message = ccm_provider::echo::cut(message, MAX_MESSAGE_BYTES);
        let reference = obj.object_ref(&());
        tracing::debug!(
            component = %self.inner.component,
            kind = reference.kind.as_deref().unwrap_or_default(),
            object = %obj.name_any(),
            namespace = reference.namespace.as_deref().unwrap_or_default(),
            r#type = type_.as_str(),
            reason,
            message = %message,
            "Event occurred"
        );
        let draft = Draft {
            component: &self.inner.component,
            reference,
            type_,
            reason,
            action,
            message,
        };
        let object = draft.object_key();
        let write = self
            .inner
            .correlator
            .lock()
            .correlate(draft, Instant::now(), Timestamp::now());
        let Some(write) = write else {
            tracing::debug!(
                component = %self.inner.component,
                object = %obj.name_any(),
                reason,
                "event dropped by the spam filter (25 per object and type, then one per 5 minutes)"
            );
            count_drop(&self.inner.component, "spam_filter");
            return;
        };
        // Events about one object go to one lane, in order, so a patch follows its create;
        // lanes write concurrently.
        let lane = usize::try_from(object % EVENT_WRITERS as u64).unwrap_or(0);
        let mut lanes = self.inner.lanes.lock();
        let Lanes { senders, template } = &mut *lanes;
        let write = Queued::new(write, template);
        let senders = senders.get_or_insert_with(|| self.start_writers());
        let write = match senders[lane].try_send(write) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    component = %self.inner.component,
                    object = %obj.name_any(),
                    reason,
                    "event queue full; event dropped"
                );
                count_drop(&self.inner.component, "queue_full");
                return;
            }
            // The writers' runtime went away (a test's runtime, say): start others.
            Err(mpsc::error::TrySendError::Closed(write)) => write,
        };
        let senders = lanes.senders.insert(self.start_writers());
        let _ = senders[lane].try_send(write);
    }

    /// Starts the tasks that write queued events, one per lane, each in order; they end
    /// when every clone of this recorder is gone and their queue is empty.
    fn start_writers(&self) -> Vec<mpsc::Sender<Queued>> {
        (0..EVENT_WRITERS)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Queued>(MAX_QUEUED_EVENTS / EVENT_WRITERS);
                let client = self.inner.client.clone();
                let component = self.inner.component.clone();
                tokio::spawn(async move {
                    while let Some(queued) = rx.recv().await {
                        record(&client, &component, queued.into_write()).await;
                    }
                });
                tx
            })
            .collect()
    }
}

/// Writes one event as client-go's `recordToSink` does: rejected by the API server, it is
/// dropped; unable to reach it, it is tried again, [`MAX_TRIES`] times in all.
async fn record(client: &Client, component: &str, mut write: Write) {
    let name = write.event.metadata.name.clone().unwrap_or_default();
    for tries in 1..=MAX_TRIES {
        // After the Node, Service and Lease writes in flight (see `client::priority`).
        priority::PROCESS
            .background_turn(priority::MAX_EVENT_DEFERRAL)
            .await;
        let err = match write_once(client, &mut write).await {
            Ok(()) => return,
            Err(err) => err,
        };
        if let kube::Error::Api(status) = &err {
            if status.code == 409 {
                tracing::debug!(component, event = %name, error = %err, "event already exists; not retried");
            } else {
                tracing::warn!(component, event = %name, error = %err, "API server rejected event; not retried");
            }
            count_drop(component, "rejected");
            return;
        }
        if tries == MAX_TRIES {
            break;
        }
        tracing::warn!(component, event = %name, error = %err, "could not write event; will retry");
        let sleep = if tries == 1 {
            RETRY_SLEEP.mul_f64(random_fraction())
        } else {
            RETRY_SLEEP
        };
        tokio::time::sleep(sleep).await;
    }
    tracing::warn!(component, event = %name, "could not write event; retry limit reached, dropped");
    count_drop(component, "unreachable");
}

/// One try: the patch (if any), then a create if there was none or the Event is gone.
async fn write_once(client: &Client, write: &mut Write) -> Result<(), kube::Error> {
    let namespace = write
        .event
        .metadata
        .namespace
        .as_deref()
        .unwrap_or("default");
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    if let Some(patch) = &write.patch {
        let name = write.event.metadata.name.as_deref().unwrap_or_default();
        match api
            .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => return Ok(()),
            // Expired (an Event lives an hour) or deleted: create it again, count and all.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    api.create(&PostParams::default(), &write.event).await?;
    Ok(())
}

/// A number in [0, 1) that differs between calls (to spread retries, as client-go does).
fn random_fraction() -> f64 {
    let random = RandomState::new().hash_one(Timestamp::now().as_nanosecond());
    // 53 bits fit an f64 exactly.
    #[allow(clippy::cast_precision_loss)]
    let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
    fraction
}

/// An event as a controller records it, before correlation.
struct Draft<'a> {
    component: &'a str,
    reference: ObjectReference,
    type_: EventType,
    reason: &'a str,
    action: &'a str,
    message: String,
}

impl Draft<'_> {
    /// The object, as client-go's keys name it (kind, namespace, name, UID, API version).
    fn object_key(&self) -> u64 {
        let r = &self.reference;
        hash(&(&r.kind, &r.namespace, &r.name, &r.uid, &r.api_version))
    }

    /// The Event namespace: the object's, `default` for cluster-scoped objects.
    fn namespace(&self) -> String {
        self.reference
            .namespace
            .clone()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".to_owned())
    }

    /// The Event client-go's `makeEvent` makes, `count` 1, at `now`.
    fn to_event(&self, now: Timestamp) -> CoreEvent {
        let object = self.reference.name.as_deref().unwrap_or_default();
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(event_name(object, now)),
                namespace: Some(self.namespace()),
                ..ObjectMeta::default()
            },
            involved_object: self.reference.clone(),
            reason: Some(self.reason.to_owned()),
            message: Some(self.message.clone()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            type_: Some(self.type_.as_str().to_owned()),
            source: Some(EventSource {
                component: Some(self.component.to_owned()),
                host: None,
            }),
            reporting_component: Some(self.component.to_owned()),
            reporting_instance: Some(String::new()),
            action: (!self.action.is_empty()).then(|| self.action.to_owned()),
            ..CoreEvent::default()
        }
    }
}

/// Go's event name: `<object>.<unix nanoseconds in hex>`, or a random UUID-shaped name when
/// that is not a valid DNS subdomain (client-go's `GenerateEventName`).
fn event_name(object: &str, now: Timestamp) -> String {
    let name = format!("{object}.{:x}", now.as_nanosecond());
    if is_dns_subdomain(&name) {
        return name;
    }
    let a = RandomState::new().hash_one(now.as_nanosecond());
    let b = RandomState::new().hash_one(object);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.len() <= 63
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

fn hash<T: Hash>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// client-go's `EventCorrelator`: aggregator, event logger and spam filter, with hashes for
/// keys. Pure: the caller gives the times.
#[derive(Default)]
struct Correlator {
    /// Aggregate key → the distinct messages seen (oldest first) and when the last was.
    aggregates: Lru<(Vec<u64>, Instant)>,
    /// Event key (or aggregate key) → the Event written for it.
    logged: Lru<Logged>,
    /// Object and type → token bucket.
    spam: Lru<(f64, Instant)>,
}

/// What the event logger remembers of an Event it wrote (client-go's `eventLog`).
struct Logged {
    name: String,
    count: i32,
    first: Timestamp,
}

impl Correlator {
    /// `EventCorrelate`: aggregate, count, then filter. `None` when the spam filter drops
    /// the event (its occurrence is still counted, as in client-go).
    fn correlate(&mut self, draft: Draft<'_>, now: Instant, wall: Timestamp) -> Option<Write> {
        let object = draft.object_key();
        let (mut event, key) = self.aggregate(&draft, object, now, wall);
        let patch = self.observe(&mut event, key);
        let spam_key = hash(&(object, draft.type_));
        if !self.admit(spam_key, now) {
            return None;
        }
        Some(Write { event, patch })
    }

    /// `EventAggregate`: the event itself keyed by everything, or — from the 10th distinct
    /// message of its reason within 10 minutes — a combined event keyed by the reason.
    fn aggregate(
        &mut self,
        draft: &Draft<'_>,
        object: u64,
        now: Instant,
        wall: Timestamp,
    ) -> (CoreEvent, u64) {
        let event_key = hash(&("event", object, draft.type_, draft.reason, &draft.message));
        let aggregate_key = hash(&("aggregate", object, draft.type_, draft.reason));
        let message = hash(&draft.message);
        let (messages, last) = self.aggregates.entry(aggregate_key, || (Vec::new(), now));
        if now.duration_since(*last) > AGGREGATE_INTERVAL {
            messages.clear();
        }
        if !messages.contains(&message) {
            messages.push(message);
        }
        *last = now;
        let mut event = draft.to_event(wall);
        if messages.len() < AGGREGATE_MAX_EVENTS {
            return (event, event_key);
        }
        // Do not grow the set past the maximum (Go pops any; this pops the oldest).
        messages.remove(0);
        // client-go's combined event carries no reporting fields nor action.
        event.message = Some(format!("{AGGREGATE_PREFIX}{}", draft.message));
        event.reporting_component = None;
        event.reporting_instance = None;
        event.action = None;
        (event, aggregate_key)
    }

    /// `eventObserve`: a repeat of an Event written before takes its name, first time and
    /// next count, and is written as a patch of `count`, `lastTimestamp` and `message`.
    fn observe(&mut self, event: &mut CoreEvent, key: u64) -> Option<serde_json::Value> {
        let patch = match self.logged.get(key) {
            Some(last) if last.count > 0 => {
                event.metadata.name = Some(last.name.clone());
                event.first_timestamp = Some(Time(last.first));
                event.count = Some(last.count.saturating_add(1));
                Some(serde_json::json!({
                    "count": event.count,
                    "lastTimestamp": event.last_timestamp,
                    "message": event.message,
                }))
            }
            _ => None,
        };
        let logged = Logged {
            name: event.metadata.name.clone().unwrap_or_default(),
            count: event.count.unwrap_or(1),
            first: event
                .first_timestamp
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
        };
        self.logged.insert(key, logged);
        patch
    }

    /// The spam filter: takes a token of the bucket of `key`, if it has one.
    fn admit(&mut self, key: u64, now: Instant) -> bool {
        let (tokens, at) = self.spam.entry(key, || (SPAM_BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() / SPAM_REFILL.as_secs_f64())
            .min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A map of at most [`MAX_CACHE_ENTRIES`] entries that forgets the least recently used
/// quarter when full (Go's LRUs forget one at a time; this is cheaper per event).
struct Lru<V> {
    entries: HashMap<u64, (V, u64)>,
    tick: u64,
}

impl<V> Default for Lru<V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            tick: 0,
        }
    }
}

impl<V> Lru<V> {
    fn get(&mut self, key: u64) -> Option<&V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(&key).map(|(v, used)| {
            *used = tick;
            &*v
        })
    }

    fn entry(&mut self, key: u64, new: impl FnOnce() -> V) -> &mut V {
        self.make_room(key);
        let tick = self.tick;
        let (value, used) = self.entries.entry(key).or_insert_with(|| (new(), tick));
        *used = tick;
        value
    }

    fn insert(&mut self, key: u64, value: V) {
        self.make_room(key);
        self.entries.insert(key, (value, self.tick));
    }

    /// Counts a use; makes room for `key` if it is new and the map is full.
    fn make_room(&mut self, key: u64) {
        self.tick += 1;
        if self.entries.len() >= MAX_CACHE_ENTRIES && !self.entries.contains_key(&key) {
            let mut ticks: Vec<u64> = self.entries.values().map(|(_, t)| *t).collect();
            let (_, cut, _) = ticks.select_nth_unstable(MAX_CACHE_ENTRIES / 4);
            let cut = *cut;
            self.entries.retain(|_, (_, t)| *t > cut);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node(name: &str) -> ObjectReference {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                uid: Some(format!("uid-{name}")),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        node.object_ref(&())
    }

    fn draft<'a>(object: &str, type_: EventType, reason: &'a str, message: &str) -> Draft<'a> {
        Draft {
            component: "test-controller",
            reference: node(object),
            type_,
            reason,
            action: "",
            message: message.to_owned(),
        }
    }

    fn warn<'a>(reason: &'a str, message: &str) -> Draft<'a> {
        draft("n1", EventType::Warning, reason, message)
    }

    #[test]
    fn a_first_event_is_created_as_client_go_makes_it() {
        let mut c = Correlator::default();
        let wall = Timestamp::from_nanosecond(1_700_000_000_123_456_789).unwrap();
        let w = c
            .correlate(warn("Failed", "boom"), Instant::now(), wall)
            .unwrap();
        assert!(w.patch.is_none());
        let e = w.event;
        assert_eq!(e.metadata.name.as_deref(), Some("n1.17979cfe3d85cd15"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.first_timestamp, e.last_timestamp);
        assert_eq!(
            e.source.unwrap().component.as_deref(),
            Some("test-controller")
        );
        assert_eq!(e.reporting_component.as_deref(), Some("test-controller"));
        assert_eq!(e.reporting_instance.as_deref(), Some(""));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
    }

    /// A queued write is the same write once taken out of its lane, and consecutive writes
    /// of one template share it: first events, repeats (patches), combined events, with an
    /// action and without.
    #[test]
    fn a_queued_write_comes_out_whole_and_shares_its_template() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Timestamp::from_second(1_700_000_000).unwrap();
        let mut writes = Vec::new();
        for object in ["n1", "n2", "n3"] {
            let mut synced = draft(object, EventType::Normal, "Synced", "Node synced");
            synced.action = "InitializeNode";
            writes.push(c.correlate(synced, t0, wall).unwrap());
        }
        writes.push(c.correlate(warn("Failed", "boom"), t0, wall).unwrap());
        writes.push(c.correlate(warn("Failed", "boom"), t0, wall).unwrap());
        for i in 0..10 {
            let message = format!("error {i}");
            writes.push(c.correlate(warn("Other", &message), t0, wall).unwrap());
        }
        assert!(writes[4].patch.is_some(), "a repeat");
        assert!(
            writes[14].event.reporting_component.is_none(),
            "a combined event"
        );

        let mut last = None;
        let mut templates = Vec::new();
        for write in writes {
            let (event, patch) = (write.event.clone(), write.patch.clone());
            let queued = Queued::new(write, &mut last);
            templates.push(Arc::clone(&queued.template));
            let out = queued.into_write();
            assert_eq!(out.event, event);
            assert_eq!(out.patch, patch);
        }
        // The three Synced events share one template; the next one has its own.
        assert!(Arc::ptr_eq(&templates[0], &templates[2]));
        assert!(!Arc::ptr_eq(&templates[2], &templates[3]));
        assert!(
            Arc::ptr_eq(&templates[3], &templates[4]),
            "a repeat is the same"
        );
        assert!(
            std::mem::size_of::<Queued>() * 5 < std::mem::size_of::<Write>(),
            "a queued write is small: {} bytes against {}",
            std::mem::size_of::<Queued>(),
            std::mem::size_of::<Write>()
        );
    }

    #[test]
    fn a_repeat_patches_count_last_timestamp_and_message_of_the_first() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let w0 = Timestamp::from_second(1_700_000_000).unwrap();
        let first = c.correlate(warn("Failed", "boom"), t0, w0).unwrap();
        let w1 = Timestamp::from_second(1_700_000_007).unwrap();
        let again = c.correlate(warn("Failed", "boom"), t0, w1).unwrap();
        assert_eq!(again.event.metadata.name, first.event.metadata.name);
        assert_eq!(again.event.count, Some(2));
        assert_eq!(again.event.first_timestamp, Some(Time(w0)));
        assert_eq!(
            again.patch.unwrap(),
            serde_json::json!({
                "count": 2,
                "lastTimestamp": "2023-11-14T22:13:27Z",
                "message": "boom",
            })
        );
        let other = c.correlate(warn("Failed", "bang"), t0, w1).unwrap();
        assert!(other.patch.is_none(), "another message is another event");
    }

    #[test]
    fn the_tenth_distinct_message_of_a_reason_is_combined() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Timestamp::now();
        for i in 0..9 {
            let w = c
                .correlate(warn("Failed", &format!("error {i}")), t0, wall)
                .unwrap();
            assert!(w.patch.is_none());
            assert_eq!(
                w.event.message.as_deref(),
                Some(format!("error {i}").as_str())
            );
        }
        let tenth = c.correlate(warn("Failed", "error 9"), t0, wall).unwrap();
        assert!(tenth.patch.is_none(), "the combined event is new");
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): error 9")
        );
        assert_eq!(tenth.event.reporting_component, None);
        let eleventh = c.correlate(warn("Failed", "error 10"), t0, wall).unwrap();
        assert_eq!(eleventh.event.metadata.name, tenth.event.metadata.name);
        assert_eq!(eleventh.event.count, Some(2));
        assert_eq!(
            eleventh.patch.unwrap()["message"],
            "(combined from similar events): error 10"
        );
        // Another reason, and the same reason 10 minutes later, start over.
        assert!(
            c.correlate(warn("Other", "error 11"), t0, wall)
                .unwrap()
                .event
                .message
                .as_deref()
                == Some("error 11")
        );
        let later = t0 + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let w = c
            .correlate(warn("Failed", "error 12"), later, wall)
            .unwrap();
        assert_eq!(w.event.message.as_deref(), Some("error 12"));
    }

    #[test]
    fn the_spam_filter_allows_25_then_one_per_5_minutes_per_object_and_type() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Timestamp::now();
        let written: Vec<Write> = (0..30)
            .filter_map(|_| c.correlate(warn("Failed", "boom"), t0, wall))
            .collect();
        assert_eq!(written.len(), 25);
        assert_eq!(written[24].event.count, Some(25));
        let normal = draft("n1", EventType::Normal, "Synced", "ok");
        assert!(
            c.correlate(normal, t0, wall).is_some(),
            "a Normal has its own bucket"
        );
        assert!(
            c.correlate(draft("n2", EventType::Warning, "Failed", "boom"), t0, wall)
                .is_some()
        );
        assert!(
            c.correlate(warn("Failed", "boom"), t0 + Duration::from_secs(299), wall)
                .is_none()
        );
        let w = c
            .correlate(warn("Failed", "boom"), t0 + Duration::from_secs(301), wall)
            .unwrap();
        // The dropped occurrences were counted.
        assert_eq!(w.event.count, Some(32));
        assert!(
            c.correlate(warn("Failed", "boom"), t0 + Duration::from_secs(302), wall)
                .is_none()
        );
    }

    #[test]
    fn caches_stay_bounded() {
        let mut c = Correlator::default();
        let t0 = Instant::now();
        let wall = Timestamp::now();
        for i in 0..3 * MAX_CACHE_ENTRIES {
            let _ = c.correlate(
                draft(&format!("n{i}"), EventType::Normal, "Synced", "ok"),
                t0,
                wall,
            );
        }
        assert!(c.logged.len() <= MAX_CACHE_ENTRIES);
        assert!(c.aggregates.len() <= MAX_CACHE_ENTRIES);
        assert!(c.spam.len() <= MAX_CACHE_ENTRIES);
        // The most recent are kept.
        let last = format!("n{}", 3 * MAX_CACHE_ENTRIES - 1);
        let w = c
            .correlate(draft(&last, EventType::Normal, "Synced", "ok"), t0, wall)
            .unwrap();
        assert_eq!(w.event.count, Some(2));
    }

    #[test]
    fn names_are_gos_or_a_valid_fallback() {
        let t = Timestamp::from_nanosecond(255).unwrap();
        assert_eq!(event_name("web", t), "web.ff");
        let long = "a".repeat(250);
        let fallback = event_name(&long, t);
        assert!(is_dns_subdomain(&fallback), "{fallback}");
        assert_eq!(fallback.len(), 36);
    }

    #[test]
    fn messages_are_cut_to_the_bound() {
        let s = ccm_provider::echo::cut("é".repeat(3000), MAX_MESSAGE_BYTES);
        assert!(s.len() <= MAX_MESSAGE_BYTES);
        assert!(s.ends_with(" more bytes)"), "{s}");
    }
}
