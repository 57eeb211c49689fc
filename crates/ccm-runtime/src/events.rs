//! Kubernetes Events, published under the Go controllers' component names.
//!
//! Events go through one [`EventRecorder`] per controller, named as the Go controller's
//! event source is (`cloud-node-controller`, `service-controller`, …) so that
//! `kubectl get events` reads the same after a migration. Publishing never fails nor
//! blocks a reconcile: [`EventRecorder::normal`] and [`EventRecorder::warning`] put the event
//! on a queue of [`MAX_QUEUED_EVENTS`] that a task of the recorder's own writes to the API
//! server (a few at a time; those about one object in order), as Go's event broadcaster
//! does. So a controller whose reconciles each
//! end with an event is not held to the client's rate limit by its events (the benchmark
//! measured load balancer updates six times slower when they waited for theirs). An event
//! that cannot be written is logged and dropped; so is one that finds the queue full.
//!
//! As in Go, each object gets at most 25 events, then one every 5 minutes (client-go's spam
//! filter); the rest are dropped. Repeats are aggregated as Go's recorder does: the same type, reason *and message* about
//! the same object, within 6 minutes, becomes one event with a `series`, while a new message
//! is a new event. Like client-go's events library, the server sees the first occurrence
//! and the second (as `series.count: 2`); later ones are counted here and written every 30
//! minutes, so a load balancer updated every second does not cost a write each time. (kube's `Recorder` folds every event of one reason
//! into the first one's message, which would hide the latest error, and keeps a full copy
//! of every event it wrote for 6 minutes: 4.75 MB of the benchmark's 10 MB heap at 1000
//! Nodes. This writer keeps the event's name and count only, about 100 bytes.)

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The largest event note the API accepts is 1 KiB; longer notes are cut.
const MAX_NOTE_BYTES: usize = 1024;

/// How many aggregation entries are kept before the oldest half is dropped.
const MAX_SERIES: usize = 4096;

/// How long a repeat is folded into the event before it (kube's and Go's window).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// Events waiting to be written, per recorder (split among its lanes), before new ones are
/// dropped (Go's broadcaster queues 1000 too).
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// How often a running series' count is written after its second occurrence (client-go's
/// events library: the event, the second occurrence as a series, then a refresh every 30
/// minutes).
const SERIES_REFRESH: Duration = Duration::from_secs(30 * 60);

/// Go's spam filter (client-go `EventSourceObjectSpamFilter`): per object, a burst of 25
/// events, then one every 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_REFILL: Duration = Duration::from_secs(5 * 60);

/// Events of one recorder written at once, each lane in order. One at a time wrote ~140 a
/// second here, so 5000 Nodes initialised in 20 s overflowed the queue and lost events.
const EVENT_WRITERS: usize = 4;

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

/// One event on its way to the API server.
struct Queued {
    /// What aggregates it: object, type, reason, message.
    key: u64,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
    reference: ObjectReference,
}

/// The event a repeat is folded into.
struct Series {
    name: String,
    /// Occurrences seen.
    count: i32,
    /// When the last one was seen.
    last: Instant,
    /// When the series was last written to the server.
    written: Instant,
}

/// What the writer tasks share.
struct Writer {
    client: Client,
    controller: String,
    instance: String,
    series: Mutex<HashMap<u64, Series>>,
}

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventRecorder {
    writer: Arc<Writer>,
    spam: Arc<Mutex<SpamFilter>>,
    /// The writer tasks' queues (lanes), started on first use (and again if their runtime
    /// went away).
    queue: Arc<Mutex<Option<Vec<mpsc::Sender<Queued>>>>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.writer.controller)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `component` (the reporting instance is `$POD_NAME` when
    /// set, else the component).
    pub fn new(client: Client, component: impl Into<String>) -> Self {
        let controller = component.into();
        let instance = std::env::var("POD_NAME")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| controller.clone());
        Self {
            writer: Arc::new(Writer {
                client,
                controller,
                instance,
                series: Mutex::default(),
            }),
            spam: Arc::default(),
            queue: Arc::default(),
        }
    }

    /// The component name events are reported under.
    pub fn component(&self) -> &str {
        &self.writer.controller
    }

    /// Queues a `Normal` event about `obj`. Call it from within a Tokio runtime.
    pub fn normal<K>(&self, obj: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(obj, EventType::Normal, reason, action, note.into());
    }

    /// Queues a `Warning` event about `obj`. Call it from within a Tokio runtime.
    pub fn warning<K>(&self, obj: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(obj, EventType::Warning, reason, action, note.into());
    }

    fn publish<K>(&self, obj: &K, type_: EventType, reason: &str, action: &str, mut note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        truncate(&mut note, MAX_NOTE_BYTES);
        let reference = object_reference(obj);
        let object = {
            let mut hasher = DefaultHasher::new();
            (
                &reference.uid,
                &reference.name,
                &reference.namespace,
                &reference.kind,
            )
                .hash(&mut hasher);
            hasher.finish()
        };
        let key = {
            let mut hasher = DefaultHasher::new();
            (object, type_, reason, note.as_str()).hash(&mut hasher);
            hasher.finish()
        };
        let admitted = self
            .spam
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(object, Instant::now());
        if !admitted {
            tracing::debug!(
                component = %self.writer.controller,
                object = %obj.name_any(),
                reason,
                "event dropped by the spam filter (25 per object, then one per 5 minutes)"
            );
            return;
        }
        // Events about one object go to one lane, in order, so repeats aggregate; lanes
        // write concurrently.
        let lane = usize::try_from(object % EVENT_WRITERS as u64).unwrap_or(0);
        let queued = Queued {
            key,
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note,
            reference,
        };
        let mut lanes = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let senders = lanes.get_or_insert_with(|| self.start_writers());
        let queued = match senders[lane].try_send(queued) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    component = %self.writer.controller,
                    object = %obj.name_any(),
                    reason,
                    "event queue full; event dropped"
                );
                return;
            }
            // The writers' runtime went away (a test's runtime, say): start others.
            Err(mpsc::error::TrySendError::Closed(queued)) => queued,
        };
        let senders = lanes.insert(self.start_writers());
        let _ = senders[lane].try_send(queued);
    }

    /// Starts the tasks that write queued events, one per lane, each in order; they end
    /// when every clone of this recorder is gone and their queue is empty.
    fn start_writers(&self) -> Vec<mpsc::Sender<Queued>> {
        (0..EVENT_WRITERS)
            .map(|_| {
                let (tx, mut rx) = mpsc::channel::<Queued>(MAX_QUEUED_EVENTS / EVENT_WRITERS);
                let writer = self.writer.clone();
                tokio::spawn(async move {
                    while let Some(q) = rx.recv().await {
                        if let Err(err) = writer.write(&q).await {
                            tracing::warn!(
                                component = %writer.controller,
                                object = q.reference.name.as_deref().unwrap_or_default(),
                                reason = %q.reason,
                                error = %err,
                                "could not publish event"
                            );
                        }
                    }
                });
                tx
            })
            .collect()
    }
}

/// Go's spam filter: a token bucket per object, [`SPAM_BURST`] tokens, one more every
/// [`SPAM_REFILL`]. A controller updating a load balancer every second must not spend the
/// client's rate limit on saying so.
#[derive(Default)]
struct SpamFilter {
    buckets: HashMap<u64, (f64, Instant)>,
}

impl SpamFilter {
    /// Takes a token of `object`'s bucket, if it has one.
    fn admit(&mut self, object: u64, now: Instant) -> bool {
        let refill = |tokens: f64, at: Instant| {
            (tokens + now.duration_since(at).as_secs_f64() / SPAM_REFILL.as_secs_f64())
                .min(SPAM_BURST)
        };
        if self.buckets.len() >= MAX_SERIES && !self.buckets.contains_key(&object) {
            // Full buckets carry no information: forget them first.
            self.buckets
                .retain(|_, (tokens, at)| refill(*tokens, *at) < SPAM_BURST);
            if self.buckets.len() >= MAX_SERIES {
                self.buckets.clear();
            }
        }
        let (tokens, at) = self.buckets.entry(object).or_insert((SPAM_BURST, now));
        *tokens = refill(*tokens, *at);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl Writer {
    /// Writes one event: a `series` patch of the event it repeats, or a new event.
    async fn write(&self, q: &Queued) -> Result<(), kube::Error> {
        let namespace = q.reference.namespace.as_deref().unwrap_or("default");
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let now = Timestamp::now();
        // A repeat: counted here; written when it is the second occurrence, or when the
        // series was last written more than SERIES_REFRESH ago.
        let repeat = {
            let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
            match series
                .get_mut(&q.key)
                .filter(|s| s.last.elapsed() < SERIES_TTL)
            {
                Some(s) => {
                    s.count += 1;
                    s.last = Instant::now();
                    if s.count > 2 && s.written.elapsed() < SERIES_REFRESH {
                        return Ok(());
                    }
                    Some((s.name.clone(), s.count))
                }
                None => None,
            }
        };
        if let Some((name, count)) = repeat {
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.remember(q.key, name, count);
                    return Ok(());
                }
                // The event expired on the server (its TTL is an hour): start a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!(
            "{}.{:x}",
            q.reference.name.as_deref().unwrap_or(&self.controller),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(q.action.clone()),
            reason: Some(q.reason.clone()),
            note: Some(q.note.clone()),
            type_: Some(q.type_.as_str().to_owned()),
            regarding: Some(q.reference.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        };
        api.create(&PostParams::default(), &event).await?;
        self.remember(q.key, name, 1);
        Ok(())
    }

    fn remember(&self, key: u64, name: String, count: i32) {
        let mut series = self.series.lock().unwrap_or_else(PoisonError::into_inner);
        if series.len() >= MAX_SERIES && !series.contains_key(&key) {
            // Drop the expired, then the older half if that was not enough.
            series.retain(|_, s| s.last.elapsed() < SERIES_TTL);
            if series.len() >= MAX_SERIES {
                let mut ages: Vec<Instant> = series.values().map(|s| s.last).collect();
                ages.sort_unstable();
                let cut = ages[ages.len() / 2];
                series.retain(|_, s| s.last > cut);
            }
        }
        series.insert(
            key,
            Series {
                name,
                count,
                last: Instant::now(),
                written: Instant::now(),
            },
        );
    }
}

fn object_reference<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectReference {
    let mut reference = obj.object_ref(&());
    // Events about an object name its current version; a stale one makes no difference.
    reference.resource_version = None;
    reference
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max.saturating_sub(3);
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spam_filter_allows_25_then_one_per_5_minutes_per_object() {
        let mut filter = SpamFilter::default();
        let t0 = Instant::now();
        assert_eq!((0..30).filter(|_| filter.admit(1, t0)).count(), 25);
        assert!(filter.admit(2, t0), "another object has its own bucket");
        assert!(!filter.admit(1, t0 + Duration::from_secs(299)));
        assert!(filter.admit(1, t0 + Duration::from_secs(301)));
        assert!(!filter.admit(1, t0 + Duration::from_secs(302)));
    }

    #[test]
    fn truncates_on_char_boundaries() {
        let mut s = "é".repeat(600);
        truncate(&mut s, MAX_NOTE_BYTES);
        assert!(s.len() <= MAX_NOTE_BYTES);
        assert!(s.ends_with("..."));
        let mut short = "ok".to_owned();
        truncate(&mut short, MAX_NOTE_BYTES);
        assert_eq!(short, "ok");
    }
}
