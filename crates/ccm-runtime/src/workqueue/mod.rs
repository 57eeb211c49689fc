//! What the controllers share: a keyed work [`Queue`] with client-go `workqueue` semantics
//! (deduplication, one worker per key at a time, delayed and rate-limited adds, metrics) and
//! a worker pool, [`run`], that feeds its keys to a controller's async handler and acts on
//! the [`Outcome`]. The cloud-node, service and route controllers each run on one queue and
//! one pool; the queue is generic over the key, e.g. a Node name or a Service's
//! `(namespace, name)`.
//!
//! ```
//! use std::time::Duration;
//! use ccm_runtime::workqueue::{Queue, RateLimit};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let nodes = Queue::new("Nodes", RateLimit::client_go_default());
//! nodes.add("node-a".to_string());
//! nodes.add("node-a".to_string()); // already waiting: deduplicated
//! let item = nodes.get().await.unwrap();
//! nodes.add("node-a".to_string()); // held by a worker: re-queued when it is released
//! assert_eq!(item.key(), "node-a");
//! item.finish(ccm_runtime::workqueue::Outcome::Done);
//! assert_eq!(nodes.len(), 1);
//! # }
//! ```

pub mod held;
pub mod metrics;
pub mod pool;
pub mod queue;
pub mod rate_limit;

pub use self::metrics::{DurationHistogram, QueueMetrics};
pub use self::pool::run;
pub use self::queue::{Outcome, Queue, QueueKey, WorkItem};
pub use self::rate_limit::{Bucket, RateLimit};
