//! The eligible Nodes, computed once per Node change. Every Node event bumps a generation
//! (after the informer's cache has it); [`EligibleCache::current`] filters, sorts and maps
//! the cached Nodes only when the generation moved since it last did, so a thousand syncs
//! between two Node events read the Nodes once. A recomputed set equal to the last is the
//! same shared `Arc`: M load balancers on the same N Nodes hold one set, not M copies, and
//! comparing them is a pointer check.
//!
//! A Service with a node selector ([`NODE_SELECTOR_ANNOTATION`]) gets the eligible Nodes its
//! selector selects ([`EligibleCache::eligible_for`]). They are cached per distinct
//! selector text, computed at most once per Node generation, so the Services of one
//! selector share one `Arc` set as the others share the unfiltered one; a selector that
//! selects every eligible Node gives the unfiltered set itself. At most
//! [`MAX_CACHED_SELECTORS`] selectors are cached (beyond that a set is computed on every
//! call, still correct); a node-sync pass drops those no Service it visited used. The
//! cached selectors also say which Node label changes matter ([`SelectorWatch`]).
//!
//! [`NODE_SELECTOR_ANNOTATION`]: super::NODE_SELECTOR_ANNOTATION

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Node, Service};
use tokio::sync::Notify;

use super::decision::nodes::{
    NodeSet, SelectorError, eligible_nodes, node_selector_text, node_set, parse_node_selector,
    select_nodes, selectors_moved,
};
use super::lock;
use crate::controllers::node_ownership::{LabelSelector, MAX_SELECTOR_BYTES, NodeOwnership};
use crate::informer::Informer;

/// The most distinct node selectors whose Nodes are cached: far more than a cluster's
/// node pools; each entry holds at most a 4 KiB text and one list of the Nodes.
pub(super) const MAX_CACHED_SELECTORS: usize = 1024;

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

/// A cached node selector: what its text reads as, its Nodes as last computed, and the
/// sweep it was last used in.
struct Selected {
    /// `Ok(None)`: it selects every eligible Node.
    parsed: Result<Option<Arc<LabelSelector>>, SelectorError>,
    /// Its Nodes, at the generation they say.
    last: Option<EligibleNodes>,
    /// The sweep it was last used in.
    used: u64,
}

/// The node selectors in use, by their text.
type Selectors = HashMap<Box<str>, Selected>;

/// The eligible Nodes as of the last Node event, computed when first asked for.
pub(super) struct EligibleCache {
    nodes: Informer<Node>,
    /// Which Nodes are this cloud's: the others are never eligible.
    ownership: NodeOwnership,
    /// Bumped on every Node event (after the cache has it).
    generation: Arc<AtomicU64>,
    /// The last computed Nodes and set.
    cached: Mutex<Option<EligibleNodes>>,
    /// The node selectors of Services, with their Nodes.
    selectors: Arc<Mutex<Selectors>>,
    /// The current sweep: a selector not used since the sweep began is dropped at its end.
    sweep: AtomicU64,
    /// Woken when a selector is cached while a Node event it may not have seen came in (the
    /// event's [`SelectorWatch`] looked before it was there).
    node_changed: Arc<Notify>,
}

/// Which Node label changes move a Node in or out of a node selector in use: the Node
/// informer's handler asks it (see [`EligibleCache::watch`]).
#[derive(Clone)]
pub(super) struct SelectorWatch(Arc<Mutex<Selectors>>);

impl SelectorWatch {
    /// Whether the update from `old` to `new` moves the Node in or out of a cached selector.
    pub(super) fn moved(&self, old: &Node, new: &Node) -> bool {
        if old.metadata.labels == new.metadata.labels {
            return false;
        }
        let selectors = lock(&self.0);
        let parsed = selectors
            .values()
            .filter_map(|s| s.parsed.as_ref().ok().and_then(Option::as_deref));
        selectors_moved(parsed, old, new)
    }
}

impl EligibleCache {
    /// A cache over the Node informer's cache, of the Nodes `ownership` says are this
    /// cloud's; nothing is computed yet. `node_changed` is woken when a selector is cached
    /// after a Node event that may have moved Nodes across it.
    pub(super) fn new(
        nodes: Informer<Node>,
        ownership: NodeOwnership,
        node_changed: Arc<Notify>,
    ) -> Self {
        Self {
            nodes,
            ownership,
            generation: Arc::new(AtomicU64::new(0)),
            cached: Mutex::default(),
            selectors: Arc::default(),
            sweep: AtomicU64::new(0),
            node_changed,
        }
    }

    /// The generation every Node event must bump, after the informer's cache has it.
    pub(super) fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// What the Node informer's handler asks whether a label change matters. Bump the
    /// generation before asking.
    pub(super) fn watch(&self) -> SelectorWatch {
        SelectorWatch(self.selectors.clone())
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

    /// The eligible Nodes of `service` now: [`current`](Self::current) narrowed by its node
    /// selector, if it has one; an error when that selector is bad. Services of one
    /// selector share its set, computed once per Node generation.
    pub(super) fn eligible_for(&self, service: &Service) -> Result<EligibleNodes, SelectorError> {
        let Some(text) = node_selector_text(service) else {
            return Ok(self.current());
        };
        if text.len() > MAX_SELECTOR_BYTES {
            // Refused at once, and not worth a cache entry.
            return parse_node_selector(text).map(|_| self.current());
        }
        let base = self.current();
        let mut selectors = lock(&self.selectors);
        if let Some(selected) = selectors.get_mut(text) {
            selected.used = self.sweep.load(Ordering::Relaxed);
            return selected.nodes(base);
        }
        let parsed = parse_node_selector(text).map(|s| s.map(Arc::new));
        let mut selected = Selected {
            parsed,
            last: None,
            used: self.sweep.load(Ordering::Relaxed),
        };
        let result = selected.nodes(base.clone());
        if selectors.len() < MAX_CACHED_SELECTORS {
            selectors.insert(text.into(), selected);
            // A Node event whose watch looked before this entry was there: it cannot have
            // said whether its Node crossed this selector, so a pass looks.
            if self.generation.load(Ordering::Acquire) != base.generation {
                self.node_changed.notify_one();
            }
        }
        result
    }

    /// Begins a sweep: the selectors not used (by [`eligible_for`](Self::eligible_for))
    /// from here to [`end_sweep`](Self::end_sweep) are dropped then.
    pub(super) fn begin_sweep(&self) -> u64 {
        self.sweep.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Ends the sweep `begin_sweep` returned: drops the selectors not used since.
    pub(super) fn end_sweep(&self, sweep: u64) {
        lock(&self.selectors).retain(|_, s| s.used >= sweep);
    }

    /// How many selectors are cached.
    #[cfg(test)]
    fn cached_selectors(&self) -> usize {
        lock(&self.selectors).len()
    }
}

impl Selected {
    /// Its Nodes out of the eligible ones, `base`: the last computed when `base` is of
    /// their generation; `base` itself when it selects them all; a recomputed set equal to
    /// the last is the same `Arc`.
    fn nodes(&mut self, base: EligibleNodes) -> Result<EligibleNodes, SelectorError> {
        let selector = match &self.parsed {
            Err(err) => return Err(err.clone()),
            Ok(None) => return Ok(base),
            Ok(Some(selector)) => selector,
        };
        if let Some(last) = self
            .last
            .as_ref()
            .filter(|l| l.generation == base.generation)
        {
            return Ok(last.clone());
        }
        let nodes = select_nodes(&base.nodes, selector);
        let selected = if nodes.len() == base.nodes.len() {
            // A subset as large as the whole is the whole.
            base
        } else {
            let set = node_set(&nodes);
            let hosts = match &self.last {
                Some(last) if *last.hosts == set => last.hosts.clone(),
                _ => Arc::new(set),
            };
            EligibleNodes {
                generation: base.generation,
                nodes: nodes.into(),
                hosts,
            }
        };
        Ok(self.last.insert(selected).clone())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::NODE_SELECTOR_ANNOTATION;
    use super::*;
    use crate::controllers::node_util::node_name;
    use ccm_test::fixtures::NodeBuilder;

    fn node(name: &str, pool: &str) -> Arc<Node> {
        let mut n = NodeBuilder::new(name)
            .provider_id(format!("fake://{name}"))
            .build();
        n.metadata.labels = Some(BTreeMap::from([("pool".to_owned(), pool.to_owned())]));
        Arc::new(n)
    }

    fn service(selector: Option<&str>) -> Service {
        let mut s = Service::default();
        s.metadata.annotations = selector
            .map(|text| BTreeMap::from([(NODE_SELECTOR_ANNOTATION.to_owned(), text.to_owned())]));
        s
    }

    fn apply(informer: &Informer<Node>, node: &Arc<Node>) {
        informer.apply_for_test(&kube::runtime::watcher::Event::Apply((**node).clone()));
    }

    fn names(e: &EligibleNodes) -> Vec<&str> {
        e.nodes.iter().map(|n| node_name(n)).collect()
    }

    /// A cache over an informer fed by hand (its client reaches no server) whose store
    /// holds `nodes`, and the informer.
    fn cache(nodes: &[Arc<Node>]) -> (EligibleCache, Informer<Node>) {
        let client = kube::Client::new(
            tower::service_fn(|_req: http::Request<kube::client::Body>| async {
                Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("no server"))
            }),
            "default",
        );
        let informer = Informer::new(
            kube::Api::all(client),
            kube::runtime::watcher::Config::default(),
            |_| {},
        );
        for n in nodes {
            apply(&informer, n);
        }
        let cache = EligibleCache::new(
            informer.clone(),
            NodeOwnership::all(),
            Arc::new(Notify::new()),
        );
        (cache, informer)
    }

    #[tokio::test]
    async fn services_of_one_selector_share_one_set_per_generation() {
        let (cache, informer) = cache(&[node("a1", "a"), node("b1", "b"), node("a2", "a")]);
        let all = cache.eligible_for(&service(None)).unwrap();
        assert_eq!(names(&all), ["a1", "a2", "b1"]);
        let a = cache.eligible_for(&service(Some("pool=a"))).unwrap();
        assert_eq!(names(&a), ["a1", "a2"]);
        let again = cache.eligible_for(&service(Some("pool=a"))).unwrap();
        assert!(Arc::ptr_eq(&a.hosts, &again.hosts), "one shared set");
        assert!(Arc::ptr_eq(&a.nodes, &again.nodes), "computed once");
        // A selector of every Node, and an empty one: the unfiltered set itself.
        let every = cache.eligible_for(&service(Some("pool"))).unwrap();
        assert!(Arc::ptr_eq(&every.hosts, &all.hosts));
        let empty = cache.eligible_for(&service(Some(""))).unwrap();
        assert!(Arc::ptr_eq(&empty.hosts, &all.hosts));
        // None selected: an empty list, not an error.
        assert!(
            cache
                .eligible_for(&service(Some("pool=c")))
                .unwrap()
                .nodes
                .is_empty()
        );

        // A Node event that does not touch pool=a: recomputed, the same set.
        apply(&informer, &node("b2", "b"));
        cache.generation().fetch_add(1, Ordering::Release);
        let after = cache.eligible_for(&service(Some("pool=a"))).unwrap();
        assert!(Arc::ptr_eq(&a.hosts, &after.hosts));
        assert_eq!(names(&cache.eligible_for(&service(None)).unwrap()).len(), 4);
        // One that does: a new set, for that selector only.
        apply(&informer, &node("b1", "a"));
        cache.generation().fetch_add(1, Ordering::Release);
        let moved = cache.eligible_for(&service(Some("pool=a"))).unwrap();
        assert_eq!(names(&moved), ["a1", "a2", "b1"]);
        assert_eq!(
            names(&cache.eligible_for(&service(Some("pool=b"))).unwrap()),
            ["b2"]
        );
    }

    #[tokio::test]
    async fn a_bad_selector_is_an_error_and_label_changes_are_watched() {
        let (cache, _informer) = cache(&[node("a1", "a")]);
        let err = cache
            .eligible_for(&service(Some("pool in a")))
            .err()
            .unwrap();
        assert!(err.to_string().contains(NODE_SELECTOR_ANNOTATION), "{err}");
        let long = "x".repeat(MAX_SELECTOR_BYTES + 1);
        assert!(cache.eligible_for(&service(Some(&long))).is_err());
        assert_eq!(
            cache.cached_selectors(),
            1,
            "a too-long value is not cached"
        );

        let watch = cache.watch();
        let (a, b) = (node("n", "a"), node("n", "b"));
        assert!(!watch.moved(&a, &b), "no valid selector in use yet");
        cache.eligible_for(&service(Some("pool=a"))).unwrap();
        assert!(watch.moved(&a, &b));
        assert!(!watch.moved(&a, &a));
    }

    #[tokio::test]
    async fn a_sweep_drops_the_selectors_it_did_not_see_used() {
        let (cache, _informer) = cache(&[node("a1", "a")]);
        for text in ["pool=a", "pool=b", "pool in x"] {
            let _ = cache.eligible_for(&service(Some(text)));
        }
        assert_eq!(cache.cached_selectors(), 3);
        let sweep = cache.begin_sweep();
        cache.eligible_for(&service(Some("pool=b"))).unwrap();
        cache.end_sweep(sweep);
        assert_eq!(cache.cached_selectors(), 1);
        assert!(!cache.watch().moved(&node("n", "a"), &node("n", "c")));
        assert!(cache.watch().moved(&node("n", "b"), &node("n", "c")));
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let (cache, _informer) = cache(&[node("a1", "a")]);
        for i in 0..MAX_CACHED_SELECTORS + 10 {
            let text = format!("pool={i}");
            assert!(cache.eligible_for(&service(Some(&text))).is_ok());
        }
        assert_eq!(cache.cached_selectors(), MAX_CACHED_SELECTORS);
        // Beyond the bound, still the right answer.
        let text = format!("pool in (a,{})", MAX_CACHED_SELECTORS + 20);
        assert_eq!(
            names(&cache.eligible_for(&service(Some(&text))).unwrap()),
            ["a1"]
        );
    }
}
