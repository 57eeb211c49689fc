//! Go's `RangeAllocator` without its I/O: one [`CidrSet`] per cluster CIDR, a Node's pod
//! CIDRs taken from them all or from none, marked used when a Node already has them, freed
//! when it goes, counted in Go's `node_ipam_controller_cidrset_*` metrics.

use super::cidr_set::{CidrSet, Exhausted};
use crate::controllers::route::Cidr;
use crate::metrics::NodeIpamMetrics;

/// A Node's `podCIDRs` that cannot be marked used or freed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PodCidrError {
    /// One does not parse.
    #[error("pod CIDR {cidr:?} is not a CIDR: {reason}")]
    Malformed {
        /// The value.
        cidr: String,
        /// Why.
        reason: String,
    },
    /// There are more than cluster CIDRs (the cluster went from dual-stack to single).
    #[error("pod CIDR {cidr} at index {index} has no cluster CIDR at that index")]
    NoClusterCidr {
        /// The value.
        cidr: String,
        /// Its index in `podCIDRs`.
        index: usize,
    },
    /// One is outside its cluster CIDR.
    #[error("{0}")]
    OutOfRange(#[from] super::cidr_set::OutOfRange),
}

/// The allocation state of every cluster CIDR, as Go's `RangeAllocator` keeps it: one
/// [`CidrSet`] per cluster CIDR; a Node's pod CIDRs are taken from them all or from none.
#[derive(Debug)]
pub struct RangeAllocator {
    sets: Vec<CidrSet>,
    metrics: Option<NodeIpamMetrics>,
}

impl RangeAllocator {
    /// An allocator over `sets` (one per cluster CIDR, in order), counting in `metrics`.
    pub fn new(sets: Vec<CidrSet>, metrics: Option<NodeIpamMetrics>) -> Self {
        let allocator = Self { sets, metrics };
        for set in &allocator.sets {
            allocator.count(set, 0, 0);
        }
        allocator
    }

    fn count(&self, set: &CidrSet, taken: u64, freed: u64) {
        if let Some(m) = &self.metrics {
            let cluster = set.cluster().to_string();
            m.count(&cluster, set.subnets(), set.allocated(), taken, freed);
        }
    }

    /// One CIDR from each set, in cluster-CIDR order — all, or none when a set is full.
    pub fn allocate(&mut self) -> Result<Vec<Cidr>, Exhausted> {
        let mut taken = Vec::with_capacity(self.sets.len());
        for i in 0..self.sets.len() {
            match self.sets[i].allocate_next() {
                Ok((cidr, tries)) => {
                    if let Some(m) = &self.metrics {
                        m.observe_tries(&self.sets[i].cluster().to_string(), tries);
                    }
                    self.count(&self.sets[i], 1, 0);
                    taken.push(cidr);
                }
                Err(full) => {
                    // Go keeps what it took from the sets before; we give it back.
                    self.release_cidrs(&taken);
                    return Err(full);
                }
            }
        }
        Ok(taken)
    }

    /// Marks a Node's `podCIDRs` used. Checks them all before marking any.
    pub fn occupy(&mut self, pod_cidrs: &[String]) -> Result<(), PodCidrError> {
        let cidrs = self.parse(pod_cidrs)?;
        for (i, cidr) in cidrs.iter().enumerate() {
            let taken = self.sets[i].occupy(cidr)?;
            self.count(&self.sets[i], taken, 0);
        }
        Ok(())
    }

    /// Marks a Node's `podCIDRs` free. Checks them all before freeing any.
    pub fn release(&mut self, pod_cidrs: &[String]) -> Result<(), PodCidrError> {
        let cidrs = self.parse(pod_cidrs)?;
        self.release_cidrs(&cidrs);
        Ok(())
    }

    /// Frees CIDRs this allocator handed out (one per set, in order).
    pub fn release_cidrs(&mut self, cidrs: &[Cidr]) {
        for (i, cidr) in cidrs.iter().enumerate().take(self.sets.len()) {
            if let Ok(freed) = self.sets[i].release(cidr) {
                self.count(&self.sets[i], 0, freed);
            }
        }
    }

    /// How many subnets of each set are used.
    #[cfg(test)]
    pub(super) fn used(&self) -> Vec<u64> {
        self.sets.iter().map(CidrSet::allocated).collect()
    }

    /// Parses `podCIDRs` and checks each against its set.
    fn parse(&self, pod_cidrs: &[String]) -> Result<Vec<Cidr>, PodCidrError> {
        let mut cidrs = Vec::with_capacity(pod_cidrs.len());
        for (index, text) in pod_cidrs.iter().enumerate() {
            let cidr = Cidr::parse(text).map_err(|e| PodCidrError::Malformed {
                cidr: text.clone(),
                reason: e.to_string(),
            })?;
            let Some(set) = self.sets.get(index) else {
                return Err(PodCidrError::NoClusterCidr {
                    cidr: text.clone(),
                    index,
                });
            };
            set.check(&cidr)?;
            cidrs.push(cidr);
        }
        Ok(cidrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;

    fn allocator(clusters: &[(&str, u8)], metrics: Option<NodeIpamMetrics>) -> RangeAllocator {
        let sets = clusters
            .iter()
            .map(|(c, m)| CidrSet::new(c.parse().unwrap(), *m).unwrap())
            .collect();
        RangeAllocator::new(sets, metrics)
    }

    fn strings(cidrs: &[Cidr]) -> Vec<String> {
        cidrs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn dual_stack_nodes_get_one_of_each_in_cluster_order() {
        let mut a = allocator(&[("10.244.0.0/23", 24), ("fd00::/63", 64)], None);
        assert_eq!(
            strings(&a.allocate().unwrap()),
            ["10.244.0.0/24", "fd00::/64"]
        );
        assert_eq!(
            strings(&a.allocate().unwrap()),
            ["10.244.1.0/24", "fd00:0:0:1::/64"]
        );
        assert!(a.allocate().is_err());
    }

    #[test]
    fn when_one_family_is_full_the_other_is_given_back() {
        let mut a = allocator(&[("10.244.0.0/23", 24), ("fd00::/64", 64)], None);
        a.allocate().unwrap();
        assert_eq!(a.used(), [1, 1]);
        let err = a.allocate().unwrap_err();
        assert_eq!(err.cluster.to_string(), "fd00::/64");
        // The IPv4 subnet taken before the IPv6 set was found full is free again.
        assert_eq!(a.used(), [1, 1]);
    }

    #[test]
    fn existing_pod_cidrs_are_never_given_again_until_released() {
        let mut a = allocator(&[("10.0.0.0/30", 32)], None);
        a.occupy(&["10.0.0.0/32".to_owned()]).unwrap();
        a.occupy(&["10.0.0.2/32".to_owned()]).unwrap();
        assert_eq!(strings(&a.allocate().unwrap()), ["10.0.0.1/32"]);
        assert_eq!(strings(&a.allocate().unwrap()), ["10.0.0.3/32"]);
        assert!(a.allocate().is_err());
        a.release(&["10.0.0.2/32".to_owned()]).unwrap();
        assert_eq!(strings(&a.allocate().unwrap()), ["10.0.0.2/32"]);
    }

    #[test]
    fn bad_pod_cidrs_are_refused_and_change_nothing() {
        let mut a = allocator(&[("10.0.0.0/30", 32)], None);
        let cases: [(&[&str], &str); 3] = [
            (&["banana"], "is not a CIDR"),
            (
                &["10.0.0.1/32", "fd00::/64"],
                "has no cluster CIDR at that index",
            ),
            (&["192.168.0.0/32"], "outside the cluster CIDR 10.0.0.0/30"),
        ];
        for (cidrs, want) in cases {
            let cidrs: Vec<String> = cidrs.iter().map(|s| (*s).to_owned()).collect();
            let err = a.occupy(&cidrs).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
            assert!(a.release(&cidrs).is_err());
        }
        // Nothing was marked: all four are still there.
        for _ in 0..4 {
            a.allocate().unwrap();
        }
    }

    #[test]
    fn metrics_have_go_s_names_and_labels() {
        let metrics = Metrics::new();
        let mut a = allocator(
            &[("10.0.0.0/30", 32)],
            Some(metrics.controllers().node_ipam.clone()),
        );
        a.occupy(&["10.0.0.0/32".to_owned()]).unwrap();
        a.allocate().unwrap();
        a.release(&["10.0.0.0/32".to_owned()]).unwrap();
        let text = metrics.encode();
        for line in [
            "node_ipam_controller_cidrset_cidrs_allocations_total{clusterCIDR=\"10.0.0.0/30\"} 2",
            "node_ipam_controller_cidrset_cidrs_releases_total{clusterCIDR=\"10.0.0.0/30\"} 1",
            "node_ipam_controller_cirdset_max_cidrs{clusterCIDR=\"10.0.0.0/30\"} 4",
            "node_ipam_controller_cidrset_usage_cidrs{clusterCIDR=\"10.0.0.0/30\"} 0.25",
            // The allocation passed over the occupied 10.0.0.0/32 once.
            "node_ipam_controller_cidrset_allocation_tries_per_request_bucket{clusterCIDR=\"10.0.0.0/30\",le=\"1\"} 1",
            "node_ipam_controller_cidrset_allocation_tries_per_request_sum{clusterCIDR=\"10.0.0.0/30\"} 1.0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
