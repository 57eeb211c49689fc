//! The route table of the cloud's network: with
//! [`SimulatorConfig::kernel_routes`](crate::SimulatorConfig::kernel_routes), each route of
//! the `/v2/x-routes` extension is a route of the simulator's network namespace (the one
//! that plays the cloud's network, where a test cluster's nodes meet), sending its
//! destination CIDR to the target droplet's private address, as a VPC's route table sends it
//! to an instance. A reconciler keeps the kernel's table in step with the API's state once a
//! second and at every change: a route created or deleted through the API is added or
//! removed, one deleted behind the simulator's back is put back, one whose droplet is gone is
//! withdrawn. It touches only routes it marked as its own (`proto 99`), through iproute2's
//! `ip`, so it needs `CAP_NET_ADMIN` in that namespace; a failure is logged and tried again
//! at the next pass.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ccm_do_like_cloud::api::{Droplet, XRoute};
use tokio::process::Command;

/// The routing protocol number that marks the simulator's routes (`ip route … proto 99`):
/// not one of iproute2's named protocols, so no routing daemon claims it.
const PROTO: &str = "99";
/// How often the table is compared with the API's state without being told of a change.
const RESYNC: Duration = Duration::from_secs(1);
/// How long one `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(5);

/// A route of the table: its destination CIDR (normalised, as `ip` prints it) and where it
/// sends traffic.
pub(crate) type Table = BTreeMap<String, IpAddr>;

/// The table the API's `routes` ask for: each route whose destination is a CIDR and whose
/// target droplet exists with an address of the destination's family (its private IPv4
/// address; for IPv6, its first IPv6 address), by normalised destination.
pub(crate) fn desired(routes: &[XRoute], droplets: &[Droplet]) -> Table {
    routes
        .iter()
        .filter_map(|route| {
            let destination = normalise(&route.destination)?;
            let droplet = droplets.iter().find(|d| d.name == route.target)?;
            let via = if destination.contains(':') {
                droplet
                    .networks
                    .v6
                    .iter()
                    .find_map(|n| n.ip_address.parse::<std::net::Ipv6Addr>().ok())
                    .map(IpAddr::V6)
            } else {
                droplet
                    .networks
                    .v4
                    .iter()
                    .find(|n| n.kind == "private")
                    .and_then(|n| n.ip_address.parse::<std::net::Ipv4Addr>().ok())
                    .map(IpAddr::V4)
            }?;
            Some((destination, via))
        })
        .collect()
}

/// `cidr` as the kernel prints it (`10.244.1.0/24`, `fd00:10:244:1::/64`), or `None` when it
/// is not a CIDR whose host bits are zero.
pub(crate) fn normalise(cidr: &str) -> Option<String> {
    let (address, len) = cidr.split_once('/')?;
    let len: u8 = len.parse().ok()?;
    match address.parse::<IpAddr>().ok()? {
        IpAddr::V4(a) if len <= 32 => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            (u32::from(a) & !mask == 0).then(|| format!("{a}/{len}"))
        }
        IpAddr::V6(a) if len <= 128 => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            (u128::from(a) & !mask == 0).then(|| format!("{a}/{len}"))
        }
        _ => None,
    }
}

/// What to do to turn `current` into `desired`: the routes to replace (added, or sent
/// elsewhere) and the destinations to delete.
pub(crate) fn plan(current: &Table, desired: &Table) -> (Vec<(String, IpAddr)>, Vec<String>) {
    let replace = desired
        .iter()
        .filter(|(dst, via)| current.get(*dst) != Some(via))
        .map(|(dst, via)| (dst.clone(), *via))
        .collect();
    let delete = current
        .keys()
        .filter(|dst| !desired.contains_key(*dst))
        .cloned()
        .collect();
    (replace, delete)
}

/// Parses `ip -json route show proto 99`: each route's `dst` and `gateway`.
pub(crate) fn parse_shown(json: &str) -> Table {
    #[derive(serde::Deserialize)]
    struct Shown {
        dst: String,
        gateway: Option<IpAddr>,
    }
    serde_json::from_str::<Vec<Shown>>(json)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| Some((normalise(&r.dst)?, r.gateway?)))
        .collect()
}

/// Runs `ip args`; its standard output, or why it failed.
async fn ip(args: &[&str]) -> Result<String, String> {
    let run = Command::new("ip").args(args).kill_on_drop(true).output();
    let out = tokio::time::timeout(IP_TIMEOUT, run)
        .await
        .map_err(|_| format!("ip {}: no answer in {IP_TIMEOUT:?}", args.join(" ")))?
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The simulator's routes in the kernel's main table, both families.
async fn current() -> Result<Table, String> {
    let mut table = Table::new();
    for family in ["-4", "-6"] {
        let shown = ip(&[family, "-json", "route", "show", "proto", PROTO]).await?;
        table.extend(parse_shown(&shown));
    }
    Ok(table)
}

/// One pass: reads the kernel's table and changes what differs from `desired`.
async fn reconcile(desired: &Table) -> Result<(), String> {
    let (replace, delete) = plan(&current().await?, desired);
    let mut errors = Vec::new();
    for (dst, via) in replace {
        let via = via.to_string();
        match ip(&["route", "replace", &dst, "via", &via, "proto", PROTO]).await {
            Ok(_) => tracing::info!(%dst, %via, "route in place"),
            Err(e) => errors.push(e),
        }
    }
    for dst in delete {
        match ip(&["route", "del", &dst, "proto", PROTO]).await {
            Ok(_) => tracing::info!(%dst, "route withdrawn"),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Keeps the kernel's table in step with `read()` until the task is aborted.
pub(crate) async fn run(changed: Arc<tokio::sync::Notify>, read: impl Fn() -> Table) {
    let mut last_error = None;
    loop {
        let result = reconcile(&read()).await.err();
        if result != last_error {
            if let Some(e) = &result {
                tracing::warn!(error = %e, "the route table");
            }
            last_error = result;
        }
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(RESYNC) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use ccm_do_like_cloud::api::{NetworkV4, NetworkV6, Networks};

    use super::*;

    fn droplet(name: &str, private: &str, v6: Option<&str>) -> Droplet {
        Droplet {
            name: name.to_owned(),
            networks: Networks {
                v4: vec![
                    NetworkV4 {
                        ip_address: "203.0.113.9".to_owned(),
                        kind: "public".to_owned(),
                        ..NetworkV4::default()
                    },
                    NetworkV4 {
                        ip_address: private.to_owned(),
                        kind: "private".to_owned(),
                        ..NetworkV4::default()
                    },
                ],
                v6: v6
                    .map(|a| NetworkV6 {
                        ip_address: a.to_owned(),
                        netmask: 64,
                        gateway: String::new(),
                        kind: "public".to_owned(),
                    })
                    .into_iter()
                    .collect(),
            },
            ..Droplet::default()
        }
    }

    fn route(destination: &str, target: &str) -> XRoute {
        XRoute {
            id: 1,
            destination: destination.to_owned(),
            target: target.to_owned(),
            tags: Vec::new(),
        }
    }

    #[test]
    fn each_route_goes_to_its_droplets_address_of_its_family() {
        let droplets = [
            droplet("a", "10.0.0.2", Some("fd00::2")),
            droplet("b", "10.0.0.3", None),
        ];
        let routes = [
            route("10.244.1.0/24", "a"),
            route("fd00:10:244:1::/64", "a"),
            route("10.244.2.0/24", "b"),
            // No IPv6 address to send it to; no such droplet; not a CIDR; host bits set.
            route("fd00:10:244:2::/64", "b"),
            route("10.244.3.0/24", "gone"),
            route("10.244.4.0", "a"),
            route("10.244.5.1/24", "a"),
        ];
        let table = desired(&routes, &droplets);
        let want: Table = [
            ("10.244.1.0/24", "10.0.0.2"),
            ("10.244.2.0/24", "10.0.0.3"),
            ("fd00:10:244:1::/64", "fd00::2"),
        ]
        .into_iter()
        .map(|(d, v)| (d.to_owned(), v.parse().unwrap()))
        .collect();
        assert_eq!(table, want);
    }

    #[test]
    fn cidrs_are_normalised_as_the_kernel_prints_them() {
        for (given, want) in [
            ("10.244.1.0/24", Some("10.244.1.0/24")),
            ("0.0.0.0/0", Some("0.0.0.0/0")),
            ("fd00:0010:0244:0001::/64", Some("fd00:10:244:1::/64")),
            ("::/0", Some("::/0")),
            ("10.244.1.1/24", None),
            ("10.244.1.0/33", None),
            ("fd00::1/64", None),
            ("10.244.1.0", None),
            ("x/8", None),
        ] {
            assert_eq!(normalise(given).as_deref(), want, "{given}");
        }
    }

    #[test]
    fn the_plan_replaces_what_differs_and_deletes_what_is_not_asked_for() {
        let table = |routes: &[(&str, &str)]| -> Table {
            routes
                .iter()
                .map(|(d, v)| ((*d).to_owned(), v.parse().unwrap()))
                .collect()
        };
        let current = table(&[
            ("10.244.1.0/24", "10.0.0.2"),
            ("10.244.2.0/24", "10.0.0.3"),
            ("10.244.9.0/24", "10.0.0.9"),
        ]);
        let desired = table(&[
            ("10.244.1.0/24", "10.0.0.2"),
            ("10.244.2.0/24", "10.0.0.4"),
            ("10.244.3.0/24", "10.0.0.5"),
        ]);
        let (replace, delete) = plan(&current, &desired);
        assert_eq!(
            replace,
            vec![
                ("10.244.2.0/24".to_owned(), "10.0.0.4".parse().unwrap()),
                ("10.244.3.0/24".to_owned(), "10.0.0.5".parse().unwrap()),
            ]
        );
        assert_eq!(delete, vec!["10.244.9.0/24".to_owned()]);
        assert_eq!(plan(&desired, &desired), (Vec::new(), Vec::new()));
    }

    #[test]
    fn ip_json_output_is_read_for_destination_and_gateway() {
        let shown = r#"[{"dst":"10.244.1.0/24","gateway":"10.0.0.2","dev":"br0","protocol":"99",
            "flags":[]},{"dst":"10.244.7.0/24","dev":"br0","flags":[]},
            {"dst":"fd00:10:244:1::/64","gateway":"fd00::2","dev":"br0","metric":1024}]"#;
        let table = parse_shown(shown);
        assert_eq!(table.len(), 2, "{table:?}");
        assert_eq!(
            table["10.244.1.0/24"],
            "10.0.0.2".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            table["fd00:10:244:1::/64"],
            "fd00::2".parse::<IpAddr>().unwrap()
        );
        assert!(parse_shown("").is_empty());
    }
}
