//! `/configz`: the effective configuration as Go's cloud-controller-manager publishes it
//! (`configz.New("cloudcontrollermanager.config.k8s.io").Set(ComponentConfig)`): one key,
//! the component config with Go's field names and durations in Go's format (`5m0s`).
//! Only what this controller manager reads is there; the kubeconfig and cloud-config are
//! paths, never their contents.

use serde_json::{Value, json};

use super::options::Options;
use crate::flags::duration::format_go_duration as go;

/// The key Go publishes the configuration under.
pub(crate) const CONFIGZ_NAME: &str = "cloudcontrollermanager.config.k8s.io";

/// The `/configz` document for `o`.
pub(crate) fn render(o: &Options) -> String {
    let le = &o.leader_election;
    let path = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let config = json!({
        "Generic": {
            "Port": o.serving.port().unwrap_or(0),
            "Address": o.serving.bind_address.to_string(),
            "ClientConnection": {
                "Kubeconfig": path(&o.kubeconfig),
                "QPS": o.kube_api_qps,
                "Burst": o.kube_api_burst,
            },
            "ControllerStartInterval": go(o.controller_start_interval),
            "LeaderElection": {
                "LeaderElect": le.leader_elect,
                "LeaseDuration": go(le.leader_elect_lease_duration),
                "RenewDeadline": go(le.leader_elect_renew_deadline),
                "RetryPeriod": go(le.leader_elect_retry_period),
                "ResourceLock": le.leader_elect_resource_lock,
                "ResourceName": le.leader_elect_resource_name,
                "ResourceNamespace": le.leader_elect_resource_namespace,
            },
            "Controllers": o.controllers,
            "LeaderMigrationEnabled": le.enable_leader_migration,
        },
        "KubeCloudShared": {
            "CloudProvider": {
                "Name": o.cloud_provider,
                "CloudConfigFile": path(&o.cloud_config),
            },
            "UseServiceAccountCredentials": o.use_service_account_credentials,
            "AllowUntaggedCloud": o.allow_untagged_cloud,
            "RouteReconciliationPeriod": go(o.route_reconciliation_period),
            "NodeMonitorPeriod": go(o.node_monitor_period),
            "ClusterName": o.cluster_name,
            "ClusterCIDR": o.cluster_cidr,
            "AllocateNodeCIDRs": o.allocate_node_cidrs,
            "CIDRAllocatorType": o.cidr_allocator_type,
            "ConfigureCloudRoutes": o.configure_cloud_routes,
        },
        "ServiceController": {
            "ConcurrentServiceSyncs": o.concurrent_service_syncs,
        },
        "NodeController": {
            "ConcurrentNodeSyncs": o.concurrent_node_syncs,
            "ConcurrentNodeStatusUpdates": o.concurrent_node_status_updates,
        },
        "NodeIPAMController": {
            "ServiceCIDR": o.service_cluster_ip_range,
            "NodeCIDRMaskSize": o.node_cidr_mask_size,
            "NodeCIDRMaskSizeIPv4": o.node_cidr_mask_size_ipv4,
            "NodeCIDRMaskSizeIPv6": o.node_cidr_mask_size_ipv6,
        },
        "NodeStatusUpdateFrequency": go(o.node_status_update_frequency),
    });
    let mut doc = serde_json::Map::new();
    doc.insert(CONFIGZ_NAME.to_owned(), config);
    Value::Object(doc).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_effective_flags_under_go_s_names() {
        let o = Options::from_args([
            "ccm",
            "--cloud-provider=acme",
            "--cluster-name=prod",
            "--node-monitor-period=1m30s",
            "--controllers=*,-route",
            "--kubeconfig=/etc/kubernetes/ccm.conf",
        ])
        .unwrap();
        let doc: Value = serde_json::from_str(&render(&o)).unwrap();
        let c = &doc[CONFIGZ_NAME];
        assert_eq!(c["KubeCloudShared"]["CloudProvider"]["Name"], "acme");
        assert_eq!(c["KubeCloudShared"]["ClusterName"], "prod");
        assert_eq!(c["KubeCloudShared"]["NodeMonitorPeriod"], "1m30s");
        assert_eq!(c["Generic"]["Controllers"], json!(["*", "-route"]));
        assert_eq!(c["Generic"]["LeaderElection"]["LeaseDuration"], "15s");
        assert_eq!(
            c["Generic"]["ClientConnection"]["Kubeconfig"],
            "/etc/kubernetes/ccm.conf"
        );
        assert_eq!(c["Generic"]["Port"], 10258);
        assert_eq!(c["NodeStatusUpdateFrequency"], "5m0s");
    }
}
