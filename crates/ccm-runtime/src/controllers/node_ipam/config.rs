//! The node-ipam controller's settings from Go's flags, checked as Kubernetes'
//! `cloud-controller-manager` checks them (`startNodeIpamController`,
//! `setNodeCIDRMaskSizes`, `NewNodeIpamController`), and stricter where Go logs a bad value
//! and goes on: every error names its flag.

use super::cidr_set::CidrSet;
use crate::controllers::route::Cidr;
use crate::flags::FlagError;
use crate::shadow::ControllerShadow;

/// Go's default Node mask size for IPv4 cluster CIDRs.
pub const DEFAULT_NODE_MASK_IPV4: u8 = 24;
/// Go's default Node mask size for IPv6 cluster CIDRs.
pub const DEFAULT_NODE_MASK_IPV6: u8 = 64;

/// The mask-size flags as given; 0 means not set, as in Go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MaskSizeFlags {
    /// `--node-cidr-mask-size` (single-stack clusters only).
    pub node_cidr_mask_size: i32,
    /// `--node-cidr-mask-size-ipv4`.
    pub ipv4: i32,
    /// `--node-cidr-mask-size-ipv6`.
    pub ipv6: i32,
}

/// Settings of the node-ipam controller; only [`NodeIpamConfig::new`] makes one, so the
/// CIDRs fit together.
#[derive(Clone, Debug)]
pub struct NodeIpamConfig {
    cluster_cidrs: Vec<Cidr>,
    service_cidrs: Vec<Cidr>,
    node_mask_sizes: Vec<u8>,
    shadow: Option<ControllerShadow>,
}

impl NodeIpamConfig {
    /// Settings from `--cluster-cidr` (one CIDR, or two of different families),
    /// `--service-cluster-ip-range` (empty, one, or two of different families; the subnets
    /// it overlaps are never given to a Node) and the mask-size flags.
    ///
    /// ```
    /// use ccm_runtime::controllers::node_ipam::{MaskSizeFlags, NodeIpamConfig};
    /// let config = NodeIpamConfig::new("10.244.0.0/16", "", MaskSizeFlags::default())?;
    /// assert_eq!(config.node_mask_sizes(), [24]);
    /// let err = NodeIpamConfig::new("10.244.0.0/16,10.245.0.0/16", "", MaskSizeFlags::default())
    ///     .unwrap_err();
    /// assert_eq!(err.flag, "--cluster-cidr");
    /// # Ok::<(), ccm_runtime::flags::FlagError>(())
    /// ```
    pub fn new(
        cluster_cidr: &str,
        service_cluster_ip_range: &str,
        masks: MaskSizeFlags,
    ) -> Result<Self, FlagError> {
        let cluster_cidrs = parse_list("--cluster-cidr", cluster_cidr)?;
        if cluster_cidrs.is_empty() {
            return Err(FlagError {
                flag: "--cluster-cidr",
                message: "must be set when --allocate-node-cidrs is true".to_owned(),
            });
        }
        let service_cidrs = parse_list("--service-cluster-ip-range", service_cluster_ip_range)?;
        let node_mask_sizes = mask_sizes(&cluster_cidrs, masks)?;
        let config = Self {
            cluster_cidrs,
            service_cidrs,
            node_mask_sizes,
            shadow: None,
        };
        // Each set must be possible, and leave something once the Service range is out.
        for set in config.cidr_sets()? {
            if set.allocated() == set.subnets() {
                return Err(FlagError {
                    flag: "--service-cluster-ip-range",
                    message: format!(
                        "{service_cluster_ip_range:?} covers all of the cluster CIDR {}: no \
                         pod CIDR is left for a Node",
                        set.cluster()
                    ),
                });
            }
        }
        Ok(config)
    }

    /// The cluster CIDRs, in the order given (a Node's `podCIDRs` follow it).
    pub fn cluster_cidrs(&self) -> &[Cidr] {
        &self.cluster_cidrs
    }

    /// The Service ranges taken out of the cluster CIDRs.
    pub fn service_cidrs(&self) -> &[Cidr] {
        &self.service_cidrs
    }

    /// Shadow mode: each sync of a Node settles `shadow`'s plan for it.
    #[must_use]
    pub fn with_shadow(mut self, shadow: Option<ControllerShadow>) -> Self {
        self.shadow = shadow;
        self
    }

    /// The plan each sync settles, in shadow mode.
    pub(crate) fn shadow(&self) -> Option<&ControllerShadow> {
        self.shadow.as_ref()
    }

    /// The prefix length of a Node's pod CIDR, one per cluster CIDR.
    pub fn node_mask_sizes(&self) -> &[u8] {
        &self.node_mask_sizes
    }

    /// One empty set per cluster CIDR, the Service ranges already taken out (as Go's
    /// `filterOutServiceRange`: a range is taken out of each cluster CIDR it overlaps).
    pub fn cidr_sets(&self) -> Result<Vec<CidrSet>, FlagError> {
        let mut sets = Vec::with_capacity(self.cluster_cidrs.len());
        for (cluster, &mask) in self.cluster_cidrs.iter().zip(&self.node_mask_sizes) {
            let mut set = CidrSet::new(*cluster, mask).map_err(|e| FlagError {
                flag: mask_flag(self.cluster_cidrs.len(), cluster),
                message: e.to_string(),
            })?;
            for service in &self.service_cidrs {
                if set.overlaps(service) {
                    // Overlapping, so never out of range.
                    let _ = set.occupy(service);
                }
            }
            sets.push(set);
        }
        Ok(sets)
    }
}

/// The flag that set the mask size of `cluster`, for an error message.
fn mask_flag(clusters: usize, cluster: &Cidr) -> &'static str {
    match (clusters, cluster.is_ipv4()) {
        (1, _) => "--node-cidr-mask-size",
        (_, true) => "--node-cidr-mask-size-ipv4",
        (_, false) => "--node-cidr-mask-size-ipv6",
    }
}

/// A comma-separated list of at most two CIDRs of different families (Go's
/// `processCIDRs` and its dual-stack checks); empty gives none.
fn parse_list(flag: &'static str, value: &str) -> Result<Vec<Cidr>, FlagError> {
    let bad = |message: String| FlagError {
        flag,
        message: format!("{value:?}: {message}"),
    };
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    let items: Vec<&str> = value.split(',').collect();
    if items.len() > 2 {
        return Err(bad(format!(
            "at most two CIDRs (one per IP family) are allowed, got {}",
            items.len()
        )));
    }
    let cidrs = items
        .iter()
        .map(|item| Cidr::parse(item.trim()).map_err(|e| bad(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    if let [a, b] = cidrs.as_slice()
        && a.is_ipv4() == b.is_ipv4()
    {
        return Err(bad(
            "two CIDRs must be dual-stack, one IPv4 and one IPv6".to_owned()
        ));
    }
    Ok(cidrs)
}

/// Go's `setNodeCIDRMaskSizes`: one mask size per cluster CIDR, from the flags or the
/// defaults, refusing the combinations Go refuses.
fn mask_sizes(clusters: &[Cidr], flags: MaskSizeFlags) -> Result<Vec<u8>, FlagError> {
    let size = |flag: &'static str, value: i32| {
        u8::try_from(value)
            .ok()
            .filter(|&v| v <= 128)
            .ok_or_else(|| FlagError {
                flag,
                message: format!("{value} is not a mask size (0 to 128 bits)"),
            })
    };
    let refuse = |flag: &'static str, message: &str| FlagError {
        flag,
        message: message.to_owned(),
    };
    let (mut ipv4, mut ipv6) = (DEFAULT_NODE_MASK_IPV4, DEFAULT_NODE_MASK_IPV6);
    let single = size("--node-cidr-mask-size", flags.node_cidr_mask_size)?;
    let v4 = size("--node-cidr-mask-size-ipv4", flags.ipv4)?;
    let v6 = size("--node-cidr-mask-size-ipv6", flags.ipv6)?;
    let ipv6_only = clusters.len() == 1 && !clusters[0].is_ipv4();
    if clusters.len() > 1 && single != 0 {
        return Err(refuse(
            "--node-cidr-mask-size",
            "is not allowed with dual-stack clusters; use --node-cidr-mask-size-ipv4 and \
             --node-cidr-mask-size-ipv6",
        ));
    }
    if single != 0 {
        if v4 != 0 || v6 != 0 {
            return Err(refuse(
                "--node-cidr-mask-size",
                "cannot be combined with --node-cidr-mask-size-ipv4 or \
                 --node-cidr-mask-size-ipv6; for dual-stack clusters unset it and use the \
                 per-family flags",
            ));
        }
        (ipv4, ipv6) = (single, single);
    }
    if v4 != 0 {
        if ipv6_only {
            return Err(refuse(
                "--node-cidr-mask-size-ipv4",
                "is not allowed for a single-stack IPv6 cluster",
            ));
        }
        ipv4 = v4;
    }
    if v6 != 0 {
        if clusters.len() == 1 && clusters[0].is_ipv4() {
            return Err(refuse(
                "--node-cidr-mask-size-ipv6",
                "is not allowed for a single-stack IPv4 cluster",
            ));
        }
        ipv6 = v6;
    }
    Ok(clusters
        .iter()
        .map(|c| if c.is_ipv4() { ipv4 } else { ipv6 })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn masks(node_cidr_mask_size: i32, ipv4: i32, ipv6: i32) -> MaskSizeFlags {
        MaskSizeFlags {
            node_cidr_mask_size,
            ipv4,
            ipv6,
        }
    }

    fn err(cluster: &str, service: &str, m: MaskSizeFlags) -> FlagError {
        NodeIpamConfig::new(cluster, service, m).unwrap_err()
    }

    #[test]
    fn defaults_are_go_s_per_family() {
        let c = NodeIpamConfig::new("10.244.0.0/16, fd00:10:244::/56", "", masks(0, 0, 0)).unwrap();
        assert_eq!(c.node_mask_sizes(), [24, 64]);
        assert_eq!(c.cluster_cidrs()[1].to_string(), "fd00:10:244::/56");
        let c = NodeIpamConfig::new("fd00::/48", "", masks(0, 0, 0)).unwrap();
        assert_eq!(c.node_mask_sizes(), [64]);
    }

    #[test]
    fn the_single_mask_flag_serves_either_family_alone() {
        let c = NodeIpamConfig::new("10.0.0.0/8", "", masks(26, 0, 0)).unwrap();
        assert_eq!(c.node_mask_sizes(), [26]);
        let c = NodeIpamConfig::new("fd00::/56", "", masks(64, 0, 0)).unwrap();
        assert_eq!(c.node_mask_sizes(), [64]);
        let c = NodeIpamConfig::new("10.0.0.0/8,fd00::/56", "", masks(0, 20, 60)).unwrap();
        assert_eq!(c.node_mask_sizes(), [20, 60]);
    }

    #[test]
    fn combinations_go_refuses_are_refused_naming_the_flag() {
        let cases = [
            (
                "10.0.0.0/8,fd00::/56",
                masks(24, 0, 0),
                "--node-cidr-mask-size",
            ),
            ("10.0.0.0/8", masks(24, 25, 0), "--node-cidr-mask-size"),
            ("fd00::/56", masks(0, 24, 0), "--node-cidr-mask-size-ipv4"),
            ("10.0.0.0/8", masks(0, 0, 64), "--node-cidr-mask-size-ipv6"),
            ("10.0.0.0/8", masks(-1, 0, 0), "--node-cidr-mask-size"),
            ("10.0.0.0/8", masks(0, 300, 0), "--node-cidr-mask-size-ipv4"),
        ];
        for (cluster, m, flag) in cases {
            assert_eq!(err(cluster, "", m).flag, flag, "{cluster} {m:?}");
        }
    }

    #[test]
    fn impossible_mask_sizes_are_refused_naming_the_flag() {
        let e = err("10.244.0.0/16", "", masks(8, 0, 0));
        assert_eq!(e.flag, "--node-cidr-mask-size");
        assert!(
            e.message
                .contains("shorter than the prefix of the cluster CIDR"),
            "{e}"
        );
        let e = err("10.244.0.0/16,fd00::/40", "", masks(0, 0, 0));
        assert_eq!(e.flag, "--node-cidr-mask-size-ipv6");
        assert!(e.message.contains("2^24 subnets; at most 2^16"), "{e}");
        let e = err("10.244.0.0/16", "", masks(33, 0, 0));
        assert!(e.message.contains("longer than an address"), "{e}");
    }

    #[test]
    fn bad_cluster_cidrs_are_refused_naming_the_flag() {
        for bad in [
            "",
            " ",
            "10.0.0.0",
            "10.0.0.0/8,10.1.0.0/16",
            "a/8",
            "10.0.0.0/8,fd00::/56,fd01::/56",
        ] {
            let e = err(bad, "", MaskSizeFlags::default());
            assert_eq!(e.flag, "--cluster-cidr", "{bad:?}: {e}");
        }
    }

    #[test]
    fn service_ranges_are_checked_and_taken_out() {
        for bad in ["10.96.0.0", "10.96.0.0/12,10.97.0.0/16", "1/2/3", "a,b,c"] {
            let e = err("10.0.0.0/8", bad, MaskSizeFlags::default());
            assert_eq!(e.flag, "--service-cluster-ip-range", "{bad:?}: {e}");
        }
        let c = NodeIpamConfig::new("10.0.0.0/8", "10.96.0.0/12, fd00:96::/112", masks(0, 0, 0))
            .unwrap();
        let sets = c.cidr_sets().unwrap();
        // 10.96.0.0/12 is 4096 /24s of the /8's 65536.
        assert_eq!(sets[0].allocated(), 4096);
        // Outside the cluster: nothing taken.
        let c = NodeIpamConfig::new("10.244.0.0/16", "10.96.0.0/12", masks(0, 0, 0)).unwrap();
        assert_eq!(c.cidr_sets().unwrap()[0].allocated(), 0);
        // A range covering the whole cluster CIDR leaves nothing: refused.
        let e = err("10.244.0.0/16", "10.0.0.0/8", MaskSizeFlags::default());
        assert_eq!(e.flag, "--service-cluster-ip-range");
        assert!(
            e.message
                .contains("covers all of the cluster CIDR 10.244.0.0/16"),
            "{e}"
        );
    }
}
