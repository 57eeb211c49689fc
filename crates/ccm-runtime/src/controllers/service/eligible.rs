//! The eligible Nodes, computed once per Node change. Every Node event bumps a generation
//! (after the informer's cache has it); [`EligibleCache::current`] filters, sorts and maps
//! the cached Nodes only when the generation moved since it last did, so a thousand syncs
//! between two Node events read the Nodes once. A recomputed set equal to the last is the
//! same shared `Arc`: M load balancers on the same N Nodes hold one set, not M copies, and
//! comparing them is a pointer check.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;

use super::decision::nodes::{NodeSet, eligible_nodes, node_set};
use super::lock;
use crate::controllers::node_ownership::NodeOwnership;
use crate::informer::Informer;

/// The eligible Nodes (sorted by name) and their set, computed at a Node generation.
#[derive(Clone)]
pub(super) struct EligibleNodes {
    /// The Node generation they were computed at.
    generation: u64,
    /// What the provider is given.
    pub(super) nodes: Arc<[Arc<Node>]>,
    /// What load balancers are compared by.
    pub(super) hosts: Arc<NodeSet>,
}

/// The eligible Nodes as of the last Node event, computed when first asked for.
pub(super) struct EligibleCache {
    nodes: Informer<Node>,
    /// Which Nodes are this cloud's: the others are never eligible.
    ownership: NodeOwnership,
    /// Bumped on every Node event (after the cache has it).
    generation: Arc<AtomicU64>,
    /// The last computed Nodes and set.
    cached: Mutex<Option<EligibleNodes>>,
}

impl EligibleCache {
    /// A cache over the Node informer's cache, of the Nodes `ownership` says are this
    /// cloud's; nothing is computed yet.
    pub(super) fn new(nodes: Informer<Node>, ownership: NodeOwnership) -> Self {
        Self {
            nodes,
            ownership,
            generation: Arc::new(AtomicU64::new(0)),
            cached: Mutex::default(),
        }
    }

    /// The generation every Node event must bump, after the informer's cache has it.
    pub(super) fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// The eligible Nodes now and their set: the cached ones unless a Node event came since
    /// they were computed; a recomputed set equal to the last is the same shared `Arc`.
    pub(super) fn current(&self) -> EligibleNodes {
        // Read before the cache: an event after this read bumps it again, so the cache is
        // never older than the generation it is filed under.
        let generation = self.generation.load(Ordering::Acquire);
        let mut cached = lock(&self.cached);
        if let Some(current) = cached.as_ref().filter(|c| c.generation == generation) {
            return current.clone();
        }
        let nodes: Arc<[Arc<Node>]> =
            eligible_nodes(self.nodes.store().state(), &self.ownership).into();
        let set = node_set(&nodes);
        let hosts = match cached.as_ref() {
            Some(last) if *last.hosts == set => last.hosts.clone(),
            _ => Arc::new(set),
        };
        cached
            .insert(EligibleNodes {
                generation,
                nodes,
                hosts,
            })
            .clone()
    }
}
