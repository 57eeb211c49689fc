//! `--feature-gates` as Go's cloud-controller-manager reads it (component-base's
//! `featuregate.Set`): the gates it knows, with their defaults, stages and locks, are the
//! ones Go's command registers (`go-feature-gates.txt`, written by `tools/go-ccm-flags`
//! and checked against Go by the test command). An unknown gate, or a locked gate set away
//! from its value, is refused with Go's message; setting a GA or deprecated gate is
//! accepted with Go's warning; `AllAlpha` / `AllBeta` set every unlocked gate of their
//! stage.

use std::collections::BTreeMap;

use super::goflag::go_bool;

/// Go's gates: `name default stage locked` lines.
const GATES: &str = include_str!("go-feature-gates.txt");

/// A gate's release stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Alpha: off by default.
    Alpha,
    /// Beta.
    Beta,
    /// Generally available.
    Ga,
    /// Deprecated.
    Deprecated,
}

/// One known gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Its name, e.g. `CloudControllerManagerWebhook`.
    pub name: &'static str,
    /// Its default.
    pub default: bool,
    /// Its stage.
    pub stage: Stage,
    /// Whether it is locked to its default.
    pub locked: bool,
}

/// Every gate Go's cloud-controller-manager knows.
pub fn known() -> impl Iterator<Item = Gate> {
    GATES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next()?;
            let default = f.next()? == "true";
            let stage = match f.next()? {
                "ALPHA" => Stage::Alpha,
                "BETA" => Stage::Beta,
                "DEPRECATED" => Stage::Deprecated,
                _ => Stage::Ga,
            };
            let locked = f.next()? == "true";
            Some(Gate {
                name,
                default,
                stage,
                locked,
            })
        })
}

/// The gates `--feature-gates` set, checked; [`enabled`](Self::enabled) answers for any
/// known gate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<String, bool>,
    warnings: Vec<String>,
}

impl FeatureGates {
    /// Parses `Name=bool,…` (booleans as `strconv.ParseBool`) with Go's checks and messages.
    ///
    /// ```
    /// use ccm_runtime::flags::feature_gates::FeatureGates;
    /// let g = FeatureGates::parse("CloudControllerManagerWebhook=true").unwrap();
    /// assert!(g.enabled("CloudControllerManagerWebhook"));
    /// assert_eq!(
    ///     FeatureGates::parse("NoSuchGate=true").unwrap_err(),
    ///     "unrecognized feature gate: NoSuchGate"
    /// );
    /// ```
    pub fn parse(value: &str) -> Result<Self, String> {
        let known: BTreeMap<&str, Gate> = known().map(|g| (g.name, g)).collect();
        let mut gates = Self::default();
        for pair in value.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("missing bool value for {}", pair.trim()))?;
            let (name, v) = (name.trim(), v.trim());
            let on = go_bool(v).map_err(|e| format!("invalid value of {name}={v}, err: {e}"))?;
            let gate = known
                .get(name)
                .ok_or_else(|| format!("unrecognized feature gate: {name}"))?;
            if gate.locked && on != gate.default {
                return Err(format!(
                    "cannot set feature gate {name} to {on}, feature is locked to {}",
                    gate.default
                ));
            }
            match gate.stage {
                Stage::Deprecated => gates.warnings.push(format!(
                    "Setting deprecated feature gate {name}={on}. It will be removed in a future release."
                )),
                Stage::Ga => gates.warnings.push(format!(
                    "Setting GA feature gate {name}={on}. It will be removed in a future release."
                )),
                Stage::Alpha | Stage::Beta => {}
            }
            gates.set.insert(name.to_owned(), on);
        }
        Ok(gates)
    }

    /// Whether the known gate `name` is on: as set, else through `AllAlpha` / `AllBeta`
    /// for an unlocked gate of that stage, else its default. An unknown gate is off.
    #[must_use]
    pub fn enabled(&self, name: &str) -> bool {
        let Some(gate) = known().find(|g| g.name == name) else {
            return false;
        };
        if let Some(&on) = self.set.get(name) {
            return on;
        }
        let all = match gate.stage {
            Stage::Alpha => self.set.get("AllAlpha"),
            Stage::Beta => self.set.get("AllBeta"),
            Stage::Ga | Stage::Deprecated => None,
        };
        match all {
            Some(&on) if !gate.locked => on,
            _ => gate.default,
        }
    }

    /// The gates given, by name.
    #[must_use]
    pub fn given(&self) -> &BTreeMap<String, bool> {
        &self.set
    }

    /// Go's warnings for what was given (GA or deprecated gates set), to log at start.
    #[must_use]
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_go_s() {
        let gates: Vec<Gate> = known().collect();
        assert!(gates.len() > 40, "{}", gates.len());
        let webhook = gates
            .iter()
            .find(|g| g.name == "CloudControllerManagerWebhook")
            .unwrap();
        assert_eq!(
            (webhook.default, webhook.stage, webhook.locked),
            (false, Stage::Alpha, false)
        );
        assert!(gates.iter().any(|g| g.stage == Stage::Ga && g.locked));
        assert!(gates.iter().any(|g| g.stage == Stage::Deprecated));
    }

    #[test]
    fn go_s_checks_and_messages() {
        assert_eq!(FeatureGates::parse("").unwrap(), FeatureGates::default());
        assert_eq!(
            FeatureGates::parse("Nope=true").unwrap_err(),
            "unrecognized feature gate: Nope"
        );
        assert_eq!(
            FeatureGates::parse("APIServerTracing=false").unwrap_err(),
            "cannot set feature gate APIServerTracing to false, feature is locked to true"
        );
        assert!(
            FeatureGates::parse("AllAlpha")
                .unwrap_err()
                .contains("missing bool value")
        );
        assert!(
            FeatureGates::parse("AllAlpha=maybe")
                .unwrap_err()
                .contains("invalid value")
        );
        let ga = FeatureGates::parse(" APIServerTracing = T ").unwrap();
        assert_eq!(
            ga.warnings(),
            [
                "Setting GA feature gate APIServerTracing=true. It will be removed in a future release."
            ]
        );
        let deprecated = FeatureGates::parse("KMSv1=false").unwrap();
        assert!(
            deprecated.warnings()[0].starts_with("Setting deprecated feature gate KMSv1=false")
        );
    }

    #[test]
    fn all_alpha_and_all_beta_reach_unlocked_gates_of_their_stage() {
        let g = FeatureGates::parse("AllAlpha=true").unwrap();
        assert!(g.enabled("CloudControllerManagerWebhook"));
        assert!(
            g.enabled("APIResponseCompression"),
            "a beta gate keeps its default (on)"
        );
        let g =
            FeatureGates::parse("AllBeta=false,AllAlpha=true,CloudControllerManagerWebhook=false")
                .unwrap();
        assert!(!g.enabled("APIResponseCompression"));
        assert!(
            !g.enabled("CloudControllerManagerWebhook"),
            "named wins over AllAlpha"
        );
        assert!(g.enabled("APIServerTracing"), "GA keeps its default");
        assert!(!g.enabled("NoSuchGate"));
    }
}
