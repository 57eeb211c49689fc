//! Which controllers run: the `--controllers` flag (Go's `IsControllerEnabled`).

use super::controller::Controller;
use super::options::FlagError;

/// The `--controllers` selection, checked against the known controller names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSelection {
    /// Entries with aliases resolved: `*`, `name` or `-name`.
    entries: Vec<String>,
}

impl ControllerSelection {
    /// Parses the flag's entries against the `known` controllers; an unknown name or alias
    /// is an error naming `--controllers`.
    pub fn parse(entries: &[String], known: &[Controller]) -> Result<Self, FlagError> {
        let canonical = |name: &str| {
            known
                .iter()
                .find(|c| c.name() == name || c.aliases().iter().any(|a| a == name))
                .map(|c| c.name().to_owned())
        };
        let mut out = Vec::new();
        for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            if entry == "*" {
                out.push("*".to_owned());
                continue;
            }
            let (neg, name) = match entry.strip_prefix('-') {
                Some(n) => (true, n),
                None => (false, entry),
            };
            let Some(name) = canonical(name) else {
                let mut names: Vec<&str> = known.iter().map(Controller::name).collect();
                names.sort_unstable();
                return Err(FlagError {
                    flag: "--controllers",
                    message: format!(
                        "{entry:?} is not in the list of known controllers: {}",
                        names.join(", ")
                    ),
                });
            };
            out.push(if neg { format!("-{name}") } else { name });
        }
        Ok(Self { entries: out })
    }

    /// Whether the controller `name` runs: the first entry naming it decides; otherwise `*`
    /// enables it unless it is off by default.
    pub fn is_enabled(&self, name: &str, on_by_default: bool) -> bool {
        let mut star = false;
        for entry in &self.entries {
            if entry == name {
                return true;
            }
            if entry.strip_prefix('-') == Some(name) {
                return false;
            }
            star |= entry == "*";
        }
        star && on_by_default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::app::builtin::{
        CLOUD_NODE_CONTROLLER, CLOUD_NODE_LIFECYCLE_CONTROLLER, NODE_IPAM_CONTROLLER,
        NODE_ROUTE_CONTROLLER, SERVICE_LB_CONTROLLER, builtin_controllers,
    };
    use crate::app::controller::ControllerFuture;

    fn known() -> Vec<Controller> {
        let mut all = builtin_controllers();
        all.push(
            Controller::new("my-extra", |_| Ok(Box::pin(async {}) as ControllerFuture))
                .disabled_by_default(),
        );
        all
    }

    fn sel(s: &str) -> Result<ControllerSelection, FlagError> {
        let entries: Vec<String> = s.split(',').map(str::to_owned).collect();
        ControllerSelection::parse(&entries, &known())
    }

    #[test]
    fn star_enables_the_defaults() {
        let s = sel("*").unwrap();
        for c in builtin_controllers() {
            // All of Go's four; node-ipam only when named (see builtin.rs).
            let on = c.name() != NODE_IPAM_CONTROLLER;
            assert_eq!(c.is_enabled_by_default(), on, "{}", c.name());
            assert_eq!(s.is_enabled(c.name(), c.is_enabled_by_default()), on);
        }
        let s = sel("*,nodeipam").unwrap();
        assert!(
            s.is_enabled("node-ipam-controller", false),
            "named by its alias"
        );
        assert!(
            !s.is_enabled("my-extra", false),
            "off by default stays off under *"
        );
    }

    #[test]
    fn minus_disables_and_aliases_resolve() {
        let s = sel("*,-route").unwrap();
        assert!(!s.is_enabled(NODE_ROUTE_CONTROLLER, true));
        assert!(s.is_enabled(SERVICE_LB_CONTROLLER, true));
        let s = sel("cloud-node,service").unwrap();
        assert!(s.is_enabled(CLOUD_NODE_CONTROLLER, true));
        assert!(s.is_enabled(SERVICE_LB_CONTROLLER, true));
        assert!(
            !s.is_enabled(CLOUD_NODE_LIFECYCLE_CONTROLLER, true),
            "no * : only the named ones"
        );
        let s = sel("*,my-extra").unwrap();
        assert!(s.is_enabled("my-extra", false));
    }

    #[test]
    fn first_explicit_entry_wins() {
        let s = sel("-service,service,*").unwrap();
        assert!(!s.is_enabled(SERVICE_LB_CONTROLLER, true));
        let s = sel("service-lb-controller,-service").unwrap();
        assert!(s.is_enabled(SERVICE_LB_CONTROLLER, true));
    }

    #[test]
    fn unknown_names_are_rejected() {
        let err = sel("*,-routes").unwrap_err();
        assert_eq!(err.flag, "--controllers");
        assert!(
            err.message
                .starts_with("\"-routes\" is not in the list of known controllers"),
            "{err}"
        );
    }
}
