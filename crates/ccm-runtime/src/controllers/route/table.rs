//! The cloud's routing table as the route controller last saw it: the last listing, plus
//! the creates and deletes the controller finished since. A reconcile after a Node change
//! plans its creates against it instead of listing again, so a burst of Nodes joining costs
//! no more `list_routes` calls than the period does (Go lists once per period, and so do
//! we); a listing is still taken every period, after a failed call (the table can no longer
//! be trusted), and before any delete (a delete needs the cloud's own name for the route,
//! which only a listing gives).
//!
//! A finished call is recorded before its destination stops being in flight, and the
//! controller takes the in-flight set before it reads the table, so a reconcile sees every
//! route either in the table or in flight, never neither. Calls that finish while a listing
//! is under way are replayed onto it when it arrives, since the listing may have been taken
//! before they landed.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::cidr::match_key;
use ccm_provider::Route;

/// Routes by their destination's match key (a listing may hold two for one destination).
type Routes = BTreeMap<String, Vec<Route>>;

/// A create or delete the controller finished.
#[derive(Clone, Debug)]
enum Finished {
    Created { key: String, route: Route },
    Deleted { key: String, name: String },
}

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(super) struct RouteTable {
    /// The last listing with what finished since, and when it was taken.
    routes: Option<(Routes, Instant)>,
    /// While a listing is under way: the calls finished meanwhile.
    replay: Option<Vec<Finished>>,
    /// A call failed while a listing was under way: that listing is used once, not kept.
    distrust_listing: bool,
}

impl RouteTable {
    /// The routes to plan a Node change against, when a listing younger than `max_age`
    /// stands and no call has failed since; `None`: list.
    pub(super) fn cached(&self, max_age: Duration) -> Option<Vec<Route>> {
        self.routes
            .as_ref()
            .filter(|(_, at)| at.elapsed() < max_age)
            .map(|(routes, _)| routes.values().flatten().cloned().collect())
    }

    /// A listing starts: calls finishing from now on are kept for it.
    pub(super) fn listing(&mut self) {
        self.replay = Some(Vec::new());
        self.distrust_listing = false;
    }

    /// The listing started by [`Self::listing`] arrived (taken at `at`): with the calls
    /// that finished meanwhile replayed onto it, it becomes the table (unless a call failed
    /// meanwhile). Returns the routes to plan against.
    pub(super) fn listed(&mut self, listed: Vec<Route>, at: Instant) -> Vec<Route> {
        let mut routes = Routes::new();
        for route in listed {
            routes
                .entry(match_key(&route.destination_cidr))
                .or_default()
                .push(route);
        }
        for finished in self.replay.take().unwrap_or_default() {
            apply(&mut routes, finished);
        }
        let flat = routes.values().flatten().cloned().collect();
        if !std::mem::take(&mut self.distrust_listing) {
            self.routes = Some((routes, at));
        }
        flat
    }

    /// The listing failed: the table stays as it was.
    pub(super) fn listing_failed(&mut self) {
        self.replay = None;
        self.distrust_listing = false;
    }

    /// `route` was created (its destination still marked in flight).
    pub(super) fn created(&mut self, route: &Route) {
        self.finished(Finished::Created {
            key: match_key(&route.destination_cidr),
            route: route.clone(),
        });
    }

    /// The listed route `route` was deleted (its destination still marked in flight).
    pub(super) fn deleted(&mut self, route: &Route) {
        self.finished(Finished::Deleted {
            key: match_key(&route.destination_cidr),
            name: route.name.clone(),
        });
    }

    /// A call failed, or did something the table cannot account for (a create the cloud
    /// refused may mean a route someone else made): the next reconcile lists.
    pub(super) fn invalidate(&mut self) {
        self.routes = None;
        if self.replay.is_some() {
            self.distrust_listing = true;
        }
    }

    fn finished(&mut self, finished: Finished) {
        if let Some(replay) = &mut self.replay {
            replay.push(finished.clone());
        }
        if let Some((routes, _)) = &mut self.routes {
            apply(routes, finished);
        }
    }
}

/// Applies a finished call: a create replaces the routes to its destination (a listing
/// taken after the create may already have it, under the cloud's name); a delete removes
/// the route of that name (a listing taken after the delete no longer has it).
fn apply(routes: &mut Routes, finished: Finished) {
    match finished {
        Finished::Created { key, route } => {
            routes.insert(key, vec![route]);
        }
        Finished::Deleted { key, name } => {
            if let Some(list) = routes.get_mut(&key) {
                list.retain(|r| r.name != name);
                if list.is_empty() {
                    routes.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(name: &str, node: &str, cidr: &str) -> Route {
        let mut route = Route::new(node, cidr);
        route.name = name.to_owned();
        route
    }

    fn destinations(routes: &[Route]) -> Vec<(&str, &str)> {
        let mut d: Vec<_> = routes
            .iter()
            .map(|r| (r.target_node.as_str(), r.destination_cidr.as_str()))
            .collect();
        d.sort_unstable();
        d
    }

    const PERIOD: Duration = Duration::from_secs(10);

    /// A table that has just listed `routes`.
    fn listed_table(routes: Vec<Route>) -> RouteTable {
        let mut t = RouteTable::default();
        t.listing();
        t.listed(routes, Instant::now());
        t
    }

    #[tokio::test(start_paused = true)]
    async fn no_table_before_the_first_listing_nor_after_the_period() {
        let mut t = RouteTable::default();
        assert!(t.cached(PERIOD).is_none());
        t.listing();
        t.listed(vec![listed("r1", "a", "10.0.1.0/24")], Instant::now());
        assert_eq!(t.cached(PERIOD).unwrap().len(), 1);
        tokio::time::advance(PERIOD).await;
        assert!(
            t.cached(PERIOD).is_none(),
            "as old as the period: list again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn finished_calls_update_the_table() {
        let mut t = listed_table(vec![
            listed("r1", "a", "10.0.1.0/24"),
            listed("r2", "b", "10.0.2.0/24"),
        ]);
        t.created(&Route::new("c", "10.0.3.0/24"));
        t.deleted(&listed("r1", "a", "10.0.1.0/24"));
        assert_eq!(
            destinations(&t.cached(PERIOD).unwrap()),
            [("b", "10.0.2.0/24"), ("c", "10.0.3.0/24")]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn calls_finished_during_a_listing_are_replayed_onto_it() {
        let mut t = listed_table(vec![listed("r1", "a", "10.0.1.0/24")]);
        // A listing starts; meanwhile a create and a delete finish. The listing was taken
        // before either landed.
        t.listing();
        t.created(&Route::new("c", "10.0.3.0/24"));
        t.deleted(&listed("r1", "a", "10.0.1.0/24"));
        let routes = t.listed(vec![listed("r1", "a", "10.0.1.0/24")], Instant::now());
        assert_eq!(destinations(&routes), [("c", "10.0.3.0/24")]);
        assert_eq!(
            destinations(&t.cached(PERIOD).unwrap()),
            [("c", "10.0.3.0/24")]
        );

        // A listing taken after a create landed has it under the cloud's name: one route.
        t.listing();
        t.created(&Route::new("d", "10.0.4.0/24"));
        let routes = t.listed(
            vec![
                listed("r3", "c", "10.0.3.0/24"),
                listed("r4", "d", "10.0.4.0/24"),
            ],
            Instant::now(),
        );
        assert_eq!(
            destinations(&routes),
            [("c", "10.0.3.0/24"), ("d", "10.0.4.0/24")]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_delete_removes_only_the_route_of_its_name() {
        let mut t = listed_table(vec![
            listed("r1", "a", "10.0.1.0/24"),
            listed("r2", "b", "10.0.1.0/24"),
        ]);
        t.deleted(&listed("r1", "a", "10.0.1.0/24"));
        assert_eq!(
            destinations(&t.cached(PERIOD).unwrap()),
            [("b", "10.0.1.0/24")]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_forces_a_listing_and_distrusts_one_under_way() {
        let mut t = listed_table(vec![]);
        t.invalidate();
        assert!(t.cached(PERIOD).is_none());

        t.listing();
        t.invalidate();
        let routes = t.listed(vec![listed("r1", "a", "10.0.1.0/24")], Instant::now());
        assert_eq!(routes.len(), 1, "the listing is still planned against");
        assert!(t.cached(PERIOD).is_none(), "but not kept");

        t.listing();
        t.listed(vec![], Instant::now());
        assert!(t.cached(PERIOD).is_some(), "the next listing is kept");
    }
}
