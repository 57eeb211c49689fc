//! What a cluster takes from the machine and gives back: the prerequisites it checks, each
//! node's name, address, folder and cgroup root, the cgroups it makes, and the script with
//! which the supervisor removes them at the end.

use std::path::{Path, PathBuf};

use super::node::NodeLayout;
use super::{CNI_BIN_DIR, netns};
use crate::Error;

/// The commands and files a cluster needs from the machine, each with its package.
pub(super) fn check_prerequisites() -> Result<(), Error> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Err(Error::Cluster(
            "a cluster needs root (network namespaces, mounts, containerd)".to_owned(),
        ));
    }
    let commands = [
        ("unshare", "util-linux"),
        ("nsenter", "util-linux"),
        ("ip", "iproute2"),
        ("iptables", "iptables"),
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("buildah", "buildah"),
        ("gcc", "gcc"),
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut missing: Vec<String> = commands
        .iter()
        .filter(|(command, _)| {
            !std::env::split_paths(&path).any(|dir| dir.join(command).is_file())
                && !["/usr/sbin", "/sbin"]
                    .iter()
                    .any(|dir| Path::new(dir).join(command).is_file())
        })
        .map(|(command, package)| format!("{command} (package {package})"))
        .collect();
    for plugin in ["bridge", "host-local", "loopback", "portmap"] {
        if !Path::new(CNI_BIN_DIR).join(plugin).is_file() {
            missing.push(format!(
                "{CNI_BIN_DIR}/{plugin} (package containernetworking-plugins)"
            ));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::Cluster(format!(
            "missing: {}; install them with apt-get install containerd runc \
             containernetworking-plugins iptables iproute2 buildah gcc",
            missing.join(", ")
        )))
    }
}

/// The name of the cluster's `index`th node: `ccm-control-plane`, `ccm-worker`,
/// `ccm-worker2`, …
pub(super) fn node_name(index: usize) -> String {
    match index {
        0 => "ccm-control-plane".to_owned(),
        1 => "ccm-worker".to_owned(),
        n => format!("ccm-worker{n}"),
    }
}

pub(super) fn node_layouts(
    dir: &Path,
    run_id: &str,
    count: usize,
    dual_stack: bool,
) -> Result<Vec<NodeLayout>, Error> {
    (0..count)
        .map(|index| {
            let name = node_name(index);
            let address = netns::node_address(index)
                .ok_or_else(|| Error::InvalidArgument(format!("too many nodes ({count})")))?;
            let node_dir = dir.join(&name);
            std::fs::create_dir_all(node_dir.join("cni"))
                .map_err(|e| Error::io(format!("creating {}", node_dir.display()), e))?;
            Ok(NodeLayout {
                cgroup_root: format!("/{run_id}/{name}"),
                name,
                address,
                address_v6: dual_stack.then(|| netns::node_address_v6(index)).flatten(),
                control_plane: index == 0,
                dir: node_dir,
                kubelet_args: Vec::new(),
            })
        })
        .collect()
}

/// The cgroup hierarchies of the machine (`/sys/fs/cgroup/<name>` that are cgroup mounts).
fn cgroup_hierarchies() -> Vec<PathBuf> {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return Vec::new();
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup" || kind == "cgroup2").then(|| PathBuf::from(target))
        })
        .filter(|path| path.starts_with("/sys/fs/cgroup"))
        .collect()
}

/// Makes each node's cgroup root in every hierarchy (the kubelet checks that it exists),
/// with cpuset's CPUs and memory nodes copied down so that tasks may join below it.
pub(super) fn make_cgroups(layouts: &[NodeLayout]) -> Result<(), Error> {
    for hierarchy in cgroup_hierarchies() {
        for layout in layouts {
            let path = hierarchy.join(layout.cgroup_root.trim_start_matches('/'));
            std::fs::create_dir_all(&path)
                .map_err(|e| Error::io(format!("creating the cgroup {}", path.display()), e))?;
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let mut parent = path.clone();
                let mut chain = Vec::new();
                while parent != hierarchy {
                    chain.push(parent.clone());
                    if !parent.pop() {
                        break;
                    }
                }
                let Ok(value) = std::fs::read_to_string(hierarchy.join(file)) else {
                    continue;
                };
                for level in chain.iter().rev() {
                    let _ = std::fs::write(level.join(file), value.trim());
                }
            }
        }
    }
    Ok(())
}

/// The supervisor's last step: kill what is left in the run's cgroups (nothing, normally)
/// and remove them, deepest first.
pub(super) fn write_cleanup_script(dir: &Path, run_id: &str) -> Result<(), Error> {
    let script = format!(
        r#"for h in /sys/fs/cgroup/*; do
    root="$h/{run_id}"
    [ -d "$root" ] || continue
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
        find "$root" -name cgroup.procs -exec cat {{}} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null
        find "$root" -depth -type d -exec rmdir {{}} + 2>/dev/null
        [ -d "$root" ] || break
        sleep 0.2
    done
done
"#
    );
    crate::write_file(&dir.join("cleanup.sh"), &script)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn nodes_are_named_as_kind_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let layouts = node_layouts(dir.path(), "run", 3, false).unwrap();
        let names: Vec<&str> = layouts.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["ccm-control-plane", "ccm-worker", "ccm-worker2"]);
        assert!(layouts[0].control_plane && !layouts[1].control_plane);
        assert_eq!(layouts[2].address, Ipv4Addr::new(10, 88, 0, 12));
        assert_eq!(layouts[2].address_v6, None);
        assert_eq!(layouts[1].cgroup_root, "/run/ccm-worker");
        let dual = node_layouts(dir.path(), "run", 3, true).unwrap();
        assert_eq!(
            dual[2].address_v6,
            Some("fd00:10:88::c".parse().unwrap()),
            "the IPv4 address's last number, in hexadecimal"
        );
    }
}
