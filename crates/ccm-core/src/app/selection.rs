//! Which controllers run: the `--controllers` flag (Go's `IsControllerEnabled`).

use super::options::FlagError;

/// The cloud-node controller's name.
pub const CLOUD_NODE_CONTROLLER: &str = "cloud-node-controller";
/// The cloud-node-lifecycle controller's name.
pub const CLOUD_NODE_LIFECYCLE_CONTROLLER: &str = "cloud-node-lifecycle-controller";
/// The service controller's name.
pub const SERVICE_LB_CONTROLLER: &str = "service-lb-controller";
/// The route controller's name.
pub const NODE_ROUTE_CONTROLLER: &str = "node-route-controller";

/// The default controllers and their aliases (Go's `names/controller_names.go`).
pub const DEFAULT_CONTROLLERS: [(&str, &str); 4] = [
    (CLOUD_NODE_CONTROLLER, "cloud-node"),
    (CLOUD_NODE_LIFECYCLE_CONTROLLER, "cloud-node-lifecycle"),
    (SERVICE_LB_CONTROLLER, "service"),
    (NODE_ROUTE_CONTROLLER, "route"),
];

/// The `--controllers` selection, checked against the known controller names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSelection {
    /// Entries with aliases resolved: `*`, `name` or `-name`.
    entries: Vec<String>,
}

impl ControllerSelection {
    /// Parses the flag's entries. `known` are every controller's name with its aliases
    /// (`(name, aliases)`); an unknown name is an error naming `--controllers`.
    pub fn parse(entries: &[String], known: &[(String, Vec<String>)]) -> Result<Self, FlagError> {
        let canonical = |name: &str| {
            known
                .iter()
                .find(|(n, aliases)| n == name || aliases.iter().any(|a| a == name))
                .map(|(n, _)| n.clone())
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
                let mut names: Vec<&str> = known.iter().map(|(n, _)| n.as_str()).collect();
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

    fn known() -> Vec<(String, Vec<String>)> {
        DEFAULT_CONTROLLERS
            .iter()
            .map(|(n, a)| ((*n).to_owned(), vec![(*a).to_owned()]))
            .chain([("my-extra".to_owned(), vec![])])
            .collect()
    }

    fn sel(s: &str) -> Result<ControllerSelection, FlagError> {
        let entries: Vec<String> = s.split(',').map(str::to_owned).collect();
        ControllerSelection::parse(&entries, &known())
    }

    #[test]
    fn star_enables_the_defaults() {
        let s = sel("*").unwrap();
        for (name, _) in DEFAULT_CONTROLLERS {
            assert!(s.is_enabled(name, true));
        }
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
