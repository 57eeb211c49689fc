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
//! Repeats are aggregated as Go's recorder does: the same reason *and message* about the
//! same object becomes one event with a growing count, while a new message is a new event.
//! (kube's `Recorder` alone folds every event of one reason into the first one's message,
//! which would hide the latest error; each distinct message gets a recorder of its own.)

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;

/// The largest event note the API accepts is 1 KiB; longer notes are cut.
const MAX_NOTE_BYTES: usize = 1024;

/// How many distinct (reason, message) recorders are kept before the set starts afresh.
const MAX_RECORDERS: usize = 4096;

/// Events waiting to be written, per recorder (split among its lanes), before new ones are
/// dropped (Go's broadcaster queues 1000 too).
pub const MAX_QUEUED_EVENTS: usize = 1000;

/// Events of one recorder written at once, each lane in order. One at a time wrote ~140 a
/// second here, so 5000 Nodes initialised in 20 s overflowed the queue and lost events.
const EVENT_WRITERS: usize = 4;

/// One event on its way to the API server.
struct Queued {
    recorder: Recorder,
    event: Event,
    reference: ObjectReference,
}

/// Publishes events for one controller.
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    /// One kube recorder (and so one aggregation series) per (type, reason, message).
    recorders: Arc<Mutex<HashMap<u64, Recorder>>>,
    component: String,
    /// The writer tasks' queues (lanes), started on first use (and again if their runtime
    /// went away).
    queue: Arc<Mutex<Option<Vec<mpsc::Sender<Queued>>>>>,
}

impl std::fmt::Debug for EventRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventRecorder")
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl EventRecorder {
    /// A recorder reporting as `component`.
    pub fn new(client: Client, component: impl Into<String>) -> Self {
        let component = component.into();
        let reporter = Reporter {
            controller: component.clone(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            client,
            reporter,
            recorders: Arc::default(),
            component,
            queue: Arc::default(),
        }
    }

    /// The component name events are reported under.
    pub fn component(&self) -> &str {
        &self.component
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
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        let recorder = self.recorder_for(type_, reason, event.note.as_deref().unwrap_or_default());
        // Events about one object go to one lane, in order, so repeats aggregate; lanes
        // write concurrently.
        let lane = {
            let mut hasher = DefaultHasher::new();
            (&reference.uid, &reference.name, &reference.namespace).hash(&mut hasher);
            usize::try_from(hasher.finish() % EVENT_WRITERS as u64).unwrap_or(0)
        };
        let queued = Queued {
            recorder,
            event,
            reference,
        };
        let mut lanes = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let senders = lanes.get_or_insert_with(|| self.start_writers());
        let queued = match senders[lane].try_send(queued) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    component = %self.component,
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
                let component = self.component.clone();
                tokio::spawn(async move {
                    while let Some(q) = rx.recv().await {
                        if let Err(err) = q.recorder.publish(&q.event, &q.reference).await {
                            tracing::warn!(
                                component = %component,
                                object = q.reference.name.as_deref().unwrap_or_default(),
                                reason = %q.event.reason,
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

impl EventRecorder {
    fn recorder_for(&self, type_: EventType, reason: &str, note: &str) -> Recorder {
        let mut hasher = DefaultHasher::new();
        (matches!(type_, EventType::Warning), reason, note).hash(&mut hasher);
        let key = hasher.finish();
        let mut recorders = self
            .recorders
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if recorders.len() >= MAX_RECORDERS && !recorders.contains_key(&key) {
            recorders.clear();
        }
        recorders
            .entry(key)
            .or_insert_with(|| Recorder::new(self.client.clone(), self.reporter.clone()))
            .clone()
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
