//! One cluster CIDR cut into Node-sized subnets, each free or used: Go's `cidrset.CidrSet`.
//! Subnets are handed out round-robin from where the last one was found (so a released
//! subnet is not given again at once), and a block of any size can be marked used or free,
//! which is how existing Nodes and the Service range are taken out at start.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::controllers::route::Cidr;

/// The most bits a Node's prefix may be longer than the cluster's in IPv6, as Go's
/// `clusterSubnetMaxDiff` (its bitmap is uncompressed; so is ours).
pub const MAX_IPV6_SUBNET_BITS: u8 = 16;
/// The same bound for IPv4: 2²⁴ subnets, a 2 MiB bitmap. Go has none; a longer difference
/// (a `/8` cut into `/32`s) is no cluster anyone runs.
pub const MAX_IPV4_SUBNET_BITS: u8 = 24;

/// Why a cluster CIDR cannot be cut into subnets of the Node mask size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrSetError {
    /// The Node mask is shorter than the cluster's: a Node subnet would not fit.
    #[error(
        "the node mask size /{node} is shorter than the prefix of the cluster CIDR {cluster}: \
         a Node's pod CIDR must fit inside it"
    )]
    NodeMaskShorter {
        /// The cluster CIDR.
        cluster: Cidr,
        /// The Node mask size.
        node: u8,
    },
    /// The Node mask is longer than the address family allows.
    #[error("the node mask size /{node} is longer than an address of {cluster}")]
    NodeMaskTooLong {
        /// The cluster CIDR.
        cluster: Cidr,
        /// The Node mask size.
        node: u8,
    },
    /// The cluster would be cut into more subnets than the bound allows.
    #[error(
        "the node mask size /{node} cuts {cluster} into 2^{bits} subnets; at most 2^{max} are \
         allowed (use a shorter node mask size)"
    )]
    TooManySubnets {
        /// The cluster CIDR.
        cluster: Cidr,
        /// The Node mask size.
        node: u8,
        /// The bits between the two masks.
        bits: u8,
        /// The bound for this family.
        max: u8,
    },
}

/// A block that is not inside the cluster CIDR, nor contains it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{cidr} is outside the cluster CIDR {cluster}")]
pub struct OutOfRange {
    /// The block asked about.
    pub cidr: Cidr,
    /// The cluster CIDR.
    pub cluster: Cidr,
}

/// Every subnet of the cluster CIDR is used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "CIDR allocation failed; there are no remaining CIDRs left to allocate in the accepted \
     range {cluster}"
)]
pub struct Exhausted {
    /// The cluster CIDR.
    pub cluster: Cidr,
}

/// One cluster CIDR and which of its Node subnets are used.
#[derive(Clone, Debug)]
pub struct CidrSet {
    cluster: Cidr,
    /// The cluster's network address as bits.
    network: u128,
    node_prefix: u8,
    /// Bits to the right of a Node subnet's prefix.
    shift: u8,
    subnets: u64,
    used: Vec<u64>,
    allocated: u64,
    next: u64,
}

impl CidrSet {
    /// The set of `cluster`'s subnets of prefix length `node_prefix`, all free.
    pub fn new(cluster: Cidr, node_prefix: u8) -> Result<Self, CidrSetError> {
        let cluster = Cidr::new(cluster.network(), cluster.prefix_len()).unwrap_or(cluster);
        let width = if cluster.is_ipv4() { 32 } else { 128 };
        if node_prefix > width {
            return Err(CidrSetError::NodeMaskTooLong {
                cluster,
                node: node_prefix,
            });
        }
        let Some(bits) = node_prefix.checked_sub(cluster.prefix_len()) else {
            return Err(CidrSetError::NodeMaskShorter {
                cluster,
                node: node_prefix,
            });
        };
        let max = if cluster.is_ipv4() {
            MAX_IPV4_SUBNET_BITS
        } else {
            MAX_IPV6_SUBNET_BITS
        };
        if bits > max {
            return Err(CidrSetError::TooManySubnets {
                cluster,
                node: node_prefix,
                bits,
                max,
            });
        }
        let subnets = 1u64 << bits;
        Ok(Self {
            cluster,
            network: to_bits(cluster.network()),
            node_prefix,
            shift: width - node_prefix,
            subnets,
            used: vec![0; usize::try_from(subnets.div_ceil(64)).unwrap_or(usize::MAX)],
            allocated: 0,
            next: 0,
        })
    }

    /// The cluster CIDR (canonical form).
    pub fn cluster(&self) -> Cidr {
        self.cluster
    }

    /// How many Node subnets the cluster CIDR holds.
    pub fn subnets(&self) -> u64 {
        self.subnets
    }

    /// How many of them are used.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// The next free subnet, now marked used, and how many used ones were passed over to
    /// find it (Go's `cidrset_allocation_tries_per_request`).
    pub fn allocate_next(&mut self) -> Result<(Cidr, u64), Exhausted> {
        if self.allocated == self.subnets {
            return Err(Exhausted {
                cluster: self.cluster,
            });
        }
        let mut candidate = self.next;
        let mut tries = 0;
        while self.is_used(candidate) {
            candidate = (candidate + 1) % self.subnets;
            tries += 1;
        }
        self.next = (candidate + 1) % self.subnets;
        self.set(candidate, true);
        Ok((self.subnet(candidate), tries))
    }

    /// Marks every subnet that `cidr` covers used (a no-op for those already used). Returns
    /// how many changed.
    pub fn occupy(&mut self, cidr: &Cidr) -> Result<u64, OutOfRange> {
        let (first, last) = self.range(cidr)?;
        Ok((first..=last).filter(|&i| self.set(i, true)).count() as u64)
    }

    /// Marks every subnet that `cidr` covers free. Returns how many changed.
    pub fn release(&mut self, cidr: &Cidr) -> Result<u64, OutOfRange> {
        let (first, last) = self.range(cidr)?;
        Ok((first..=last).filter(|&i| self.set(i, false)).count() as u64)
    }

    /// Whether `cidr` lies inside the cluster CIDR or contains it.
    pub fn overlaps(&self, cidr: &Cidr) -> bool {
        self.cluster.contains(cidr.network()) || cidr.contains(self.cluster.network())
    }

    /// `Ok` when `cidr` [`overlaps`](Self::overlaps) the cluster CIDR, so that
    /// [`occupy`](Self::occupy) and [`release`](Self::release) take it.
    pub fn check(&self, cidr: &Cidr) -> Result<(), OutOfRange> {
        if self.overlaps(cidr) {
            Ok(())
        } else {
            Err(OutOfRange {
                cidr: *cidr,
                cluster: self.cluster,
            })
        }
    }

    /// The indices of the first and last subnets `cidr` covers.
    fn range(&self, cidr: &Cidr) -> Result<(u64, u64), OutOfRange> {
        self.check(cidr)?;
        if cidr.prefix_len() <= self.cluster.prefix_len() {
            return Ok((0, self.subnets - 1));
        }
        Ok((self.index(cidr.network()), self.index(cidr.last())))
    }

    /// The index of the subnet holding `ip`, an address inside the cluster CIDR.
    fn index(&self, ip: IpAddr) -> u64 {
        // Inside the cluster, the bits above `bits` are the network's, so the XOR leaves the
        // subnet index and the host part; the bound keeps the result within the set.
        let index = (to_bits(ip) ^ self.network) >> self.shift;
        u64::try_from(index).map_or(self.subnets - 1, |i| i.min(self.subnets - 1))
    }

    fn subnet(&self, index: u64) -> Cidr {
        let bits = self.network | (u128::from(index) << self.shift);
        let addr = match self.cluster.network() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(bits).unwrap_or(u32::MAX))),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
        };
        Cidr::new(addr, self.node_prefix).unwrap_or(self.cluster)
    }

    fn is_used(&self, index: u64) -> bool {
        let (word, bit) = position(index);
        self.used[word] & bit != 0
    }

    /// Sets one subnet used or free; whether that changed it.
    fn set(&mut self, index: u64, used: bool) -> bool {
        if self.is_used(index) == used {
            return false;
        }
        let (word, bit) = position(index);
        self.used[word] ^= bit;
        if used {
            self.allocated += 1;
        } else {
            self.allocated -= 1;
        }
        true
    }
}

fn position(index: u64) -> (usize, u64) {
    (
        usize::try_from(index / 64).unwrap_or(usize::MAX),
        1 << (index % 64),
    )
}

fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    fn set(cluster: &str, node: u8) -> CidrSet {
        CidrSet::new(cidr(cluster), node).unwrap()
    }

    fn next(s: &mut CidrSet) -> String {
        s.allocate_next().unwrap().0.to_string()
    }

    #[test]
    fn ipv4_subnets_come_in_order_then_run_out() {
        let mut s = set("10.244.0.0/22", 24);
        assert_eq!(s.subnets(), 4);
        let got: Vec<_> = (0..4).map(|_| next(&mut s)).collect();
        assert_eq!(
            got,
            [
                "10.244.0.0/24",
                "10.244.1.0/24",
                "10.244.2.0/24",
                "10.244.3.0/24"
            ]
        );
        let err = s.allocate_next().unwrap_err();
        assert!(err.to_string().contains("no remaining CIDRs"), "{err}");
        assert!(err.to_string().contains("10.244.0.0/22"), "{err}");
    }

    #[test]
    fn host_bits_of_the_cluster_cidr_are_ignored() {
        let mut s = set("10.244.7.9/16", 24);
        assert_eq!(s.cluster().to_string(), "10.244.0.0/16");
        assert_eq!(next(&mut s), "10.244.0.0/24");
    }

    #[test]
    fn a_released_subnet_is_given_again_only_after_the_others() {
        let mut s = set("10.0.0.0/30", 32);
        assert_eq!(next(&mut s), "10.0.0.0/32");
        assert_eq!(next(&mut s), "10.0.0.1/32");
        assert_eq!(s.release(&cidr("10.0.0.0/32")), Ok(1));
        assert_eq!(next(&mut s), "10.0.0.2/32");
        assert_eq!(next(&mut s), "10.0.0.3/32");
        // Round-robin comes back to the freed one, passing over none.
        assert_eq!(s.allocate_next().unwrap(), (cidr("10.0.0.0/32"), 0));
        assert_eq!(s.allocated(), 4);
    }

    #[test]
    fn tries_count_the_used_subnets_passed_over() {
        let mut s = set("10.0.0.0/29", 32);
        s.occupy(&cidr("10.0.0.0/30")).unwrap();
        assert_eq!(s.allocate_next().unwrap(), (cidr("10.0.0.4/32"), 4));
    }

    #[test]
    fn occupy_takes_every_subnet_a_block_covers_once() {
        let mut s = set("10.244.0.0/16", 24);
        assert_eq!(s.occupy(&cidr("10.244.4.0/22")), Ok(4));
        assert_eq!(s.occupy(&cidr("10.244.5.0/24")), Ok(0), "already used");
        assert_eq!(s.allocated(), 4);
        // A block smaller than a subnet takes the subnet it is in.
        assert_eq!(s.occupy(&cidr("10.244.9.16/28")), Ok(1));
        // A block containing the cluster takes it all.
        assert_eq!(s.occupy(&cidr("10.0.0.0/8")), Ok(256 - 5));
        assert!(s.allocate_next().is_err());
        assert_eq!(s.release(&cidr("10.244.0.0/16")), Ok(256));
        assert_eq!(s.allocated(), 0);
    }

    #[test]
    fn blocks_outside_the_cluster_or_of_the_other_family_are_refused() {
        let mut s = set("10.244.0.0/16", 24);
        for outside in ["10.245.0.0/24", "192.168.0.0/16", "fd00::/64"] {
            let err = s.occupy(&cidr(outside)).unwrap_err();
            assert_eq!(err.cidr, cidr(outside));
            assert!(
                err.to_string()
                    .contains("outside the cluster CIDR 10.244.0.0/16")
            );
            assert!(s.release(&cidr(outside)).is_err());
        }
        assert_eq!(s.allocated(), 0);
    }

    #[test]
    fn ipv6_subnets_span_both_halves_of_the_address() {
        let mut s = set("fd00:10:244::/56", 64);
        assert_eq!(s.subnets(), 256);
        assert_eq!(next(&mut s), "fd00:10:244::/64");
        assert_eq!(next(&mut s), "fd00:10:244:1::/64");
        // Node subnets longer than 64 bits reach into the low half.
        let mut s = set("fd00::/120", 128);
        s.occupy(&cidr("fd00::/121")).unwrap();
        assert_eq!(next(&mut s), "fd00::80/128");
        // And a cluster shorter than 64 bits with nodes longer than 64 crosses the halves.
        let mut s = set("fd00:0:0:ff00::/56", 72);
        s.occupy(&cidr("fd00:0:0:ff00::/64")).unwrap();
        assert_eq!(next(&mut s), "fd00:0:0:ff01::/72");
    }

    #[test]
    fn mask_sizes_go_refuses_or_that_would_need_a_huge_bitmap_are_refused() {
        let err = CidrSet::new(cidr("10.244.0.0/16"), 8).unwrap_err();
        assert!(
            matches!(err, CidrSetError::NodeMaskShorter { node: 8, .. }),
            "{err}"
        );
        let err = CidrSet::new(cidr("10.244.0.0/16"), 33).unwrap_err();
        assert!(matches!(err, CidrSetError::NodeMaskTooLong { .. }), "{err}");
        // Go's bound for IPv6: 16 bits.
        assert!(CidrSet::new(cidr("fd00::/48"), 64).is_ok());
        let err = CidrSet::new(cidr("fd00::/47"), 64).unwrap_err();
        assert!(
            err.to_string().contains("2^17 subnets; at most 2^16"),
            "{err}"
        );
        // Ours for IPv4: 24 bits, allocated at once (2 MiB).
        let s = CidrSet::new(cidr("10.0.0.0/8"), 32).unwrap();
        assert_eq!(s.subnets(), 1 << 24);
        assert!(CidrSet::new(cidr("10.0.0.0/7"), 32).is_err());
        // A whole cluster as one subnet.
        assert_eq!(set("10.0.0.0/24", 24).subnets(), 1);
    }
}
