//! Passthrough load balancers (the `x_passthrough` extension): instead of proxying, the
//! simulator routes the load balancer's address to its healthy droplets, so packets reach
//! a node still addressed to the load balancer and kube-proxy there takes them by that
//! address (as it does behind Google's passthrough network load balancers, or MetalLB). The
//! route is a `/32` in the `local` table of the simulator's network namespace, which beats
//! the range's `local` route: `ip route replace table local <address>/32 nexthop via <a>
//! nexthop via <b>` (equal-cost paths; the namespace's `fib_multipath_hash_policy` decides
//! how flows spread), removed when no droplet is healthy (the address is then local again
//! and refuses connections) and when the load balancer goes.
//!
//! Changing routes needs `CAP_NET_ADMIN` in the simulator's namespace and `ip` (iproute2):
//! the cluster tier runs the simulator as root in a namespace of its own. Elsewhere the
//! command fails, which is logged, and the address refuses connections.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use super::forward::Pool;

/// How often the healthy droplets are compared with the route.
const FOLLOW: Duration = Duration::from_millis(500);

/// `ip` arguments that make `address` lead to `targets` (or local again, when empty).
pub(crate) fn route_args(address: Ipv4Addr, targets: &[Ipv4Addr]) -> Vec<String> {
    let prefix = format!("{address}/32");
    if targets.is_empty() {
        return ["route", "del", "table", "local", &prefix]
            .map(str::to_owned)
            .to_vec();
    }
    let mut args: Vec<String> = ["route", "replace", "table", "local", &prefix]
        .map(str::to_owned)
        .to_vec();
    for target in targets {
        args.extend(["nexthop".to_owned(), "via".to_owned(), target.to_string()]);
    }
    args
}

fn ip(args: &[String]) -> Result<(), String> {
    let output = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// Removes the route when dropped (the task was aborted: the load balancer is gone or no
/// longer passthrough).
struct Installed {
    address: Ipv4Addr,
}

impl Drop for Installed {
    fn drop(&mut self) {
        // Absent already is fine ("No such process").
        let _ = ip(&route_args(self.address, &[]));
    }
}

/// Keeps `address` routed to the healthy targets of `pool` until aborted.
pub(crate) async fn keep_route(id: String, address: Ipv4Addr, pool: Arc<Pool>) {
    let _installed = Installed { address };
    let mut routed: Option<Vec<Ipv4Addr>> = None;
    let mut failing = false;
    loop {
        let healthy: Vec<Ipv4Addr> = pool
            .health()
            .into_iter()
            .filter_map(|(target, up)| up.then_some(target))
            .collect();
        if routed.as_ref() != Some(&healthy) {
            let args = route_args(address, &healthy);
            let result = tokio::task::spawn_blocking(move || ip(&args))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match result {
                Ok(()) => {
                    tracing::info!(lb = %id, %address, targets = ?healthy, "passthrough route set");
                    routed = Some(healthy);
                    failing = false;
                }
                // Removing a route that is not there is what we wanted.
                Err(_) if healthy.is_empty() => routed = Some(healthy),
                Err(e) => {
                    if !failing {
                        tracing::warn!(lb = %id, %address, error = %e, "cannot route the passthrough load balancer's address (needs CAP_NET_ADMIN and iproute2); retrying");
                    }
                    failing = true;
                }
            }
        }
        tokio::time::sleep(FOLLOW).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_route_leads_to_every_healthy_target_or_is_removed() {
        let lb = Ipv4Addr::new(10, 88, 64, 3);
        assert_eq!(
            route_args(
                lb,
                &[Ipv4Addr::new(10, 88, 0, 11), Ipv4Addr::new(10, 88, 0, 12)]
            )
            .join(" "),
            "route replace table local 10.88.64.3/32 nexthop via 10.88.0.11 nexthop via 10.88.0.12"
        );
        assert_eq!(
            route_args(lb, &[]).join(" "),
            "route del table local 10.88.64.3/32"
        );
    }
}
