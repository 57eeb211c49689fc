//! The account's load balancers as one [`Client`](super::Client) last saw them: its latest
//! list, with every answer since written over it (a create, an update or a read replaces
//! one, a deletion or a 404 removes one). The provider finds a Service's load balancer by
//! name in it instead of listing the account on every sync, and answers a sync of a load
//! balancer that is still `new` from it until its next look is due.
//!
//! A list that was in flight while a create, an update or a deletion was answered does not
//! undo it: writes carry a sequence number, and a list keeps the writes made after it
//! started.
//!
//! Each load balancer names every droplet behind it, so the index would cost Nodes × load
//! balancers (160 MB at 10,000 Nodes and 2,000 load balancers) and a copy of it as much
//! again. So it keeps `droplet_ids` only of a load balancer that is still `new` (the provider
//! answers a sync of one from the index); of the others it keeps what a lookup by name and
//! ownership reads, and the provider reads the one it finds again. And the objects are
//! shared ([`Arc`]): a lookup copies pointers, not load balancers. For the same reason the
//! simulator's health extension (`x_droplet_health`, one entry per droplet) is kept as its
//! counts ([`DropletHealthCount`]), which answer `load_balancer_health`.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::{DROPLET_HEALTHY, DROPLET_UNKNOWN, LoadBalancerObject};

/// How the droplets behind a load balancer stand in its health check, counted from the
/// simulator's extension [`LoadBalancerObject::x_droplet_health`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DropletHealthCount {
    /// The droplets behind it.
    pub droplets: usize,
    /// Of those, the ones that pass its health check.
    pub healthy: usize,
    /// Of those, the ones checked (passing or failing; not `unknown`).
    pub checked: usize,
}

impl DropletHealthCount {
    /// The counts of `lb`'s extension; `None` when the API sent none (DigitalOcean's own).
    pub fn of(lb: &LoadBalancerObject) -> Option<Self> {
        let list = lb.x_droplet_health.as_ref()?;
        Some(Self {
            droplets: list.len(),
            healthy: list.iter().filter(|d| d.status == DROPLET_HEALTHY).count(),
            checked: list.iter().filter(|d| d.status != DROPLET_UNKNOWN).count(),
        })
    }
}

/// A load balancer as a list keeps it while the list runs: slimmed, with its health counts.
pub(crate) type Kept = (LoadBalancerObject, Option<DropletHealthCount>);

/// A load balancer as last seen, and when.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SeenLoadBalancer {
    /// The answer; its `droplet_ids` are left out unless it is `new` (at 10,000 Nodes behind
    /// each of 2,000 load balancers they would be 160 MB; read the load balancer again for
    /// them).
    pub lb: Arc<LoadBalancerObject>,
    /// When the answer came.
    pub fetched: Instant,
    /// Since when it has been seen `new` (by this client), if it still was then.
    pub new_since: Option<Instant>,
    /// How its droplets stood in its health check then; `None` when the API does not say.
    pub health: Option<DropletHealthCount>,
}

#[derive(Debug)]
struct Entry {
    /// `None`: deleted (kept only while a list is in flight, so it does not come back).
    seen: Option<SeenLoadBalancer>,
    /// The write's sequence number.
    seq: u64,
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct LbIndex {
    entries: HashMap<String, Entry>,
    /// When the latest complete list started, if any.
    listed_at: Option<Instant>,
    /// The sequence number of the next write or list.
    next_seq: u64,
    /// Lists in flight.
    listing: usize,
}

impl LbIndex {
    /// Records an answer for one load balancer.
    pub(crate) fn saw(&mut self, lb: LoadBalancerObject, now: Instant) {
        let new_since =
            (lb.status == "new").then(|| self.get(&lb.id).and_then(|s| s.new_since).unwrap_or(now));
        let id = lb.id.clone();
        let health = DropletHealthCount::of(&lb);
        let seen = SeenLoadBalancer {
            lb: Arc::new(Self::slim(lb)),
            fetched: now,
            new_since,
            health,
        };
        self.write(id, Some(seen));
    }

    /// Records that load balancer `id` is gone.
    pub(crate) fn gone(&mut self, id: &str) {
        self.write(id.to_owned(), None);
    }

    fn write(&mut self, id: String, seen: Option<SeenLoadBalancer>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if seen.is_none() && self.listing == 0 {
            self.entries.remove(&id);
        } else {
            self.entries.insert(id, Entry { seen, seq });
        }
    }

    /// One load balancer as last seen.
    pub(crate) fn get(&self, id: &str) -> Option<&SeenLoadBalancer> {
        self.entries.get(id).and_then(|e| e.seen.as_ref())
    }

    /// Every load balancer, if the latest list started less than `max_age` ago.
    pub(crate) fn fresh(
        &self,
        max_age: std::time::Duration,
        now: Instant,
    ) -> Option<Vec<Arc<LoadBalancerObject>>> {
        let at = self.listed_at?;
        (now.saturating_duration_since(at) < max_age).then(|| self.all())
    }

    /// Every load balancer seen and not seen gone, however old the last list.
    pub(crate) fn all(&self) -> Vec<Arc<LoadBalancerObject>> {
        self.entries
            .values()
            .filter_map(|e| e.seen.as_ref().map(|s| Arc::clone(&s.lb)))
            .collect()
    }

    /// `lb` as the index keeps it: without its droplets unless it is `new`, and without
    /// its droplets' health (kept as counts: [`keep`](Self::keep)).
    pub(crate) fn slim(mut lb: LoadBalancerObject) -> LoadBalancerObject {
        if lb.status != "new" {
            lb.droplet_ids = Vec::new();
        }
        lb.x_droplet_health = None;
        lb
    }

    /// `lb` as a list keeps it until the index takes it: [`slim`](Self::slim), with its
    /// health counts.
    pub(crate) fn keep(lb: LoadBalancerObject) -> Kept {
        let health = DropletHealthCount::of(&lb);
        (Self::slim(lb), health)
    }

    /// A list starts: its token, for [`listed`](Self::listed) or [`list_failed`](Self::list_failed).
    pub(crate) fn list_started(&mut self, now: Instant) -> (u64, Instant) {
        self.listing += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        (seq, now)
    }

    /// A list that started with `token` failed.
    pub(crate) fn list_failed(&mut self, _token: (u64, Instant)) {
        self.listing = self.listing.saturating_sub(1);
        self.drop_tombstones();
    }

    /// A list that started with `token` answered `all`: it replaces what was seen before it
    /// started; what was written since stays.
    pub(crate) fn listed(&mut self, (seq, started): (u64, Instant), all: Vec<Kept>, now: Instant) {
        self.listing = self.listing.saturating_sub(1);
        let mut entries: HashMap<String, Entry> = HashMap::with_capacity(all.len());
        for (lb, health) in all {
            let new_since = (lb.status == "new")
                .then(|| self.get(&lb.id).and_then(|s| s.new_since).unwrap_or(now));
            let id = lb.id.clone();
            let seen = SeenLoadBalancer {
                lb: Arc::new(Self::slim(lb)),
                fetched: now,
                new_since,
                health,
            };
            entries.insert(
                id,
                Entry {
                    seen: Some(seen),
                    seq,
                },
            );
        }
        for (id, entry) in self.entries.drain() {
            if entry.seq > seq {
                entries.insert(id, entry);
            }
        }
        self.entries = entries;
        if self.listed_at.is_none_or(|at| at < started) {
            self.listed_at = Some(started);
        }
        self.drop_tombstones();
    }

    fn drop_tombstones(&mut self) {
        if self.listing == 0 {
            self.entries.retain(|_, e| e.seen.is_some());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn lb(id: &str, status: &str) -> LoadBalancerObject {
        serde_json::from_value(serde_json::json!({
            "id": id, "name": id, "status": status, "region": {"slug": "nyc1"},
            "forwarding_rules": [],
        }))
        .unwrap()
    }

    fn kept(all: Vec<LoadBalancerObject>) -> Vec<Kept> {
        all.into_iter().map(LbIndex::keep).collect()
    }

    fn ids(list: Option<Vec<Arc<LoadBalancerObject>>>) -> Vec<String> {
        let mut ids: Vec<String> = list.unwrap().iter().map(|l| l.id.clone()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn nothing_is_fresh_before_a_list_and_a_list_ages() {
        let now = Instant::now();
        let mut index = LbIndex::default();
        index.saw(lb("a", "active"), now);
        assert!(index.fresh(Duration::from_secs(10), now).is_none());
        let token = index.list_started(now);
        index.listed(token, kept(vec![lb("b", "active")]), now);
        assert_eq!(
            ids(index.fresh(Duration::from_secs(10), now)),
            ["b"],
            "a list replaces what was seen before it"
        );
        assert!(
            index
                .fresh(Duration::from_secs(10), now + Duration::from_secs(10))
                .is_none()
        );
    }

    #[test]
    fn writes_during_a_list_survive_it() {
        let now = Instant::now();
        let mut index = LbIndex::default();
        let first = index.list_started(now);
        index.listed(
            first,
            kept(vec![lb("old", "active"), lb("deleted", "active")]),
            now,
        );
        let token = index.list_started(now);
        // Answered while the list was in flight: a create and a deletion the list's pages
        // did not see.
        index.saw(lb("created", "new"), now);
        index.gone("deleted");
        index.listed(
            token,
            kept(vec![lb("old", "active"), lb("deleted", "active")]),
            now,
        );
        assert_eq!(
            ids(index.fresh(Duration::from_secs(10), now)),
            ["created", "old"]
        );
        assert!(index.get("deleted").is_none());
    }

    #[test]
    fn a_load_balancer_is_new_since_it_was_first_seen_new() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(3);
        let mut index = LbIndex::default();
        index.saw(lb("a", "new"), t0);
        index.saw(lb("a", "new"), later);
        let seen = index.get("a").unwrap();
        assert_eq!((seen.new_since, seen.fetched), (Some(t0), later));
        let token = index.list_started(later);
        index.listed(token, kept(vec![lb("a", "new")]), later);
        assert_eq!(
            index.get("a").unwrap().new_since,
            Some(t0),
            "a list keeps it"
        );
        index.saw(lb("a", "active"), later);
        assert_eq!(index.get("a").unwrap().new_since, None);
    }

    #[test]
    fn droplets_are_kept_only_while_new() {
        let now = Instant::now();
        let mut index = LbIndex::default();
        let with_droplets = |id: &str, status: &str| LoadBalancerObject {
            droplet_ids: vec![1, 2, 3],
            ..lb(id, status)
        };
        index.saw(with_droplets("a", "new"), now);
        assert_eq!(index.get("a").unwrap().lb.droplet_ids, [1, 2, 3]);
        index.saw(with_droplets("a", "active"), now);
        let a = &index.get("a").unwrap().lb;
        assert!(a.droplet_ids.is_empty());
        assert_eq!((a.name.as_str(), a.status.as_str()), ("a", "active"));
        let token = index.list_started(now);
        index.listed(
            token,
            kept(vec![
                with_droplets("b", "new"),
                with_droplets("c", "errored"),
            ]),
            now,
        );
        assert_eq!(index.get("b").unwrap().lb.droplet_ids, [1, 2, 3]);
        assert!(index.get("c").unwrap().lb.droplet_ids.is_empty());
    }

    #[test]
    fn droplet_health_is_kept_as_counts() {
        use crate::api::DropletHealth;
        let now = Instant::now();
        let mut index = LbIndex::default();
        let with_health = |id: &str, statuses: &[&str]| LoadBalancerObject {
            x_droplet_health: Some(
                statuses
                    .iter()
                    .zip(1..)
                    .map(|(status, droplet_id)| DropletHealth {
                        droplet_id,
                        status: (*status).to_owned(),
                    })
                    .collect(),
            ),
            ..lb(id, "active")
        };
        index.saw(with_health("a", &["healthy", "unhealthy", "unknown"]), now);
        let a = index.get("a").unwrap();
        let counts = DropletHealthCount {
            droplets: 3,
            healthy: 1,
            checked: 2,
        };
        assert_eq!(a.health, Some(counts));
        assert_eq!(a.lb.x_droplet_health, None, "not the list");
        let token = index.list_started(now);
        index.listed(
            token,
            kept(vec![with_health("b", &["unhealthy"]), lb("c", "active")]),
            now,
        );
        let b = index.get("b").unwrap();
        assert_eq!(b.health.map(|h| (h.droplets, h.healthy)), Some((1, 0)));
        assert_eq!(b.lb.x_droplet_health, None);
        assert_eq!(index.get("c").unwrap().health, None, "an API without it");
    }

    #[test]
    fn a_failed_list_changes_nothing_seen() {
        let now = Instant::now();
        let mut index = LbIndex::default();
        let token = index.list_started(now);
        index.saw(lb("a", "active"), now);
        index.gone("b");
        index.list_failed(token);
        assert!(index.get("a").is_some());
        assert!(!index.entries.contains_key("b"), "no tombstone is left");
        assert!(index.fresh(Duration::from_secs(10), now).is_none());
    }
}
