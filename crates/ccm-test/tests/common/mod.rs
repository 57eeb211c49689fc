//! Shared by the clean-up tests of the control plane (`cleanup.rs`) and of the cluster
//! (`cluster.rs`).

/// Whether `pid` is a live (not zombie) process. Linux `/proc`.
pub(crate) fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}
