//! What a run found: a [`Report`] of one [`CheckResult`] per check.
//!
//! Each result's [`Outcome`] is a pass, a failure naming the broken contract and what the
//! provider answered, a skip with its reason, a call the provider reported as not
//! implemented, or an error of the test set-up. The report prints as a table, and
//! [`Report::assert_all_passed`] / [`Report::into_result`] turn it into a test verdict.

use std::fmt;
use std::time::Duration;

use crate::Check;

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The provider kept the contract.
    Passed {
        /// What was not verified, or worth knowing (for example, an optional
        /// [`TestCloud`](crate::TestCloud) method was unsupported).
        note: Option<String>,
    },
    /// The provider broke the contract: `message` says what it answered.
    Failed {
        /// What was observed, naming the call.
        message: String,
    },
    /// The check did not run: the provider lacks the capability, the
    /// [`TestCloud`](crate::TestCloud) cannot do what it needs, or
    /// [`Options::skip`](crate::Options::skip) names it.
    Skipped {
        /// Why.
        reason: String,
    },
    /// A call the check needs returned
    /// [`CloudError::NotImplemented`](ccm_core::provider::CloudError::NotImplemented).
    NotImplemented {
        /// The call.
        call: String,
    },
    /// The test set-up failed (a [`TestCloud`](crate::TestCloud) call, an invalid
    /// [`Options`](crate::Options) value); the contract is unverified.
    Errored {
        /// What went wrong.
        message: String,
    },
}

impl Outcome {
    /// Whether the check passed.
    pub fn is_passed(&self) -> bool {
        matches!(self, Self::Passed { .. })
    }

    /// Whether the outcome fails a test: [`Failed`](Self::Failed) and
    /// [`Errored`](Self::Errored) always, anything but [`Passed`](Self::Passed) when
    /// `strict`.
    pub fn fails(&self, strict: bool) -> bool {
        match self {
            Self::Passed { .. } => false,
            Self::Failed { .. } | Self::Errored { .. } => true,
            Self::Skipped { .. } | Self::NotImplemented { .. } => strict,
        }
    }

    /// A short label: `pass`, `FAIL`, `skip`, `not-impl` or `ERROR`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Passed { .. } => "pass",
            Self::Failed { .. } => "FAIL",
            Self::Skipped { .. } => "skip",
            Self::NotImplemented { .. } => "not-impl",
            Self::Errored { .. } => "ERROR",
        }
    }
}

/// The result of one check.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct CheckResult {
    /// The check.
    pub check: Check,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it took, clean-up excluded.
    pub duration: Duration,
    /// What could not be cleaned up after it (an instance, load balancer or route the suite
    /// made). Reported, but not a failure of the check.
    pub cleanup_errors: Vec<String>,
}

/// The result of a conformance run. Prints as a table.
#[derive(Clone, Debug)]
pub struct Report {
    pub(crate) provider_name: String,
    pub(crate) cluster_name: String,
    pub(crate) capabilities: String,
    pub(crate) strict: bool,
    pub(crate) results: Vec<CheckResult>,
    pub(crate) cleanup_errors: Vec<String>,
}

impl Report {
    /// The provider's name.
    pub fn provider_name(&self) -> &str {
        &self.provider_name
    }

    /// The capabilities the provider offered, as the report's header prints them.
    pub fn capabilities(&self) -> &str {
        &self.capabilities
    }

    /// Every result, in the order the checks ran.
    pub fn results(&self) -> &[CheckResult] {
        &self.results
    }

    /// The result of `check`, if it was part of the run.
    pub fn result(&self, check: Check) -> Option<&CheckResult> {
        self.results.iter().find(|r| r.check == check)
    }

    /// The outcome of `check`, if it was part of the run.
    pub fn outcome(&self, check: Check) -> Option<&Outcome> {
        self.result(check).map(|r| &r.outcome)
    }

    /// The checks whose outcome fails the run (see [`Outcome::fails`]; with
    /// [`Options::strict`](crate::Options::strict), skips count).
    pub fn failures(&self) -> Vec<Check> {
        self.results
            .iter()
            .filter(|r| r.outcome.fails(self.strict))
            .map(|r| r.check)
            .collect()
    }

    /// The checks that ended with `outcome`'s kind, e.g. every skipped check with
    /// `report.with_label("skip")`; see [`Outcome::label`].
    pub fn with_label(&self, label: &str) -> Vec<Check> {
        self.results
            .iter()
            .filter(|r| r.outcome.label() == label)
            .map(|r| r.check)
            .collect()
    }

    /// What could not be cleaned up at the end of the run (after every check's own
    /// clean-up, which [`CheckResult::cleanup_errors`] lists).
    pub fn cleanup_errors(&self) -> &[String] {
        &self.cleanup_errors
    }

    /// Whether no check failed.
    pub fn is_success(&self) -> bool {
        self.failures().is_empty()
    }

    /// `Ok(self)` when no check failed, else an error that prints the whole report.
    pub fn into_result(self) -> Result<Self, ConformanceError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(ConformanceError {
                report: Box::new(self),
            })
        }
    }

    /// Panics with the whole report when a check failed.
    ///
    /// # Panics
    ///
    /// When [`is_success`](Self::is_success) is false.
    pub fn assert_all_passed(&self) {
        if !self.is_success() {
            let failed: Vec<&str> = self.failures().iter().map(|c| c.id()).collect();
            panic!(
                "provider {:?} broke the contract of {} conformance check(s): {}\n\n{self}",
                self.provider_name,
                failed.len(),
                failed.join(", ")
            );
        }
    }
}

fn count(results: &[CheckResult], label: &str) -> usize {
    results
        .iter()
        .filter(|r| r.outcome.label() == label)
        .count()
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "conformance of provider {:?}, cluster {:?} ({}){}",
            self.provider_name,
            self.cluster_name,
            self.capabilities,
            if self.strict { ", strict" } else { "" }
        )?;
        let width = self
            .results
            .iter()
            .map(|r| r.check.id().len())
            .max()
            .unwrap_or(5)
            .max(5);
        writeln!(f, "  {:<8}  {:<width$}  {:>7}", "RESULT", "CHECK", "TIME")?;
        for r in &self.results {
            writeln!(
                f,
                "  {:<8}  {:<width$}  {:>6.2}s",
                r.outcome.label(),
                r.check.id(),
                r.duration.as_secs_f64()
            )?;
            let indent = " ".repeat(12);
            match &r.outcome {
                Outcome::Passed { note: Some(note) } => writeln!(f, "{indent}note: {note}")?,
                Outcome::Passed { note: None } => {}
                Outcome::Failed { message } => {
                    writeln!(f, "{indent}contract: {}", r.check.contract())?;
                    writeln!(f, "{indent}observed: {message}")?;
                }
                Outcome::Skipped { reason } => writeln!(f, "{indent}why: {reason}")?,
                Outcome::NotImplemented { call } => {
                    writeln!(f, "{indent}{call} returned CloudError::NotImplemented")?;
                }
                Outcome::Errored { message } => writeln!(f, "{indent}test set-up: {message}")?,
            }
            for e in &r.cleanup_errors {
                writeln!(f, "{indent}clean-up: {e}")?;
            }
        }
        for e in &self.cleanup_errors {
            writeln!(f, "  clean-up: {e}")?;
        }
        write!(
            f,
            "{} checks: {} passed, {} failed, {} skipped, {} not implemented, {} errors",
            self.results.len(),
            count(&self.results, "pass"),
            count(&self.results, "FAIL"),
            count(&self.results, "skip"),
            count(&self.results, "not-impl"),
            count(&self.results, "ERROR"),
        )
    }
}

/// A run in which some check failed; prints the report.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{report}")]
pub struct ConformanceError {
    /// The whole report.
    pub report: Box<Report>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(strict: bool) -> Report {
        let result = |check, outcome| CheckResult {
            check,
            outcome,
            duration: Duration::from_millis(20),
            cleanup_errors: Vec::new(),
        };
        Report {
            provider_name: "acme".into(),
            cluster_name: "c1".into(),
            capabilities: "instances: Instances".into(),
            strict,
            results: vec![
                result(
                    Check::InstancesExistsTrueForRunning,
                    Outcome::Passed { note: None },
                ),
                result(
                    Check::InstancesExistsTrueForStopped,
                    Outcome::Failed {
                        message: "instance_exists returned Ok(false)".into(),
                    },
                ),
                result(
                    Check::RoutesListScopedToCluster,
                    Outcome::Skipped {
                        reason: "no routes".into(),
                    },
                ),
            ],
            cleanup_errors: vec!["instance x: still there".into()],
        }
    }

    #[test]
    fn table_names_the_broken_contract_and_the_observation() {
        let text = report(false).to_string();
        assert!(
            text.contains("FAIL      instances.exists_true_for_stopped"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "contract: {}",
                Check::InstancesExistsTrueForStopped.contract()
            )),
            "{text}"
        );
        assert!(
            text.contains("observed: instance_exists returned Ok(false)"),
            "{text}"
        );
        assert!(text.contains("why: no routes"), "{text}");
        assert!(text.contains("clean-up: instance x: still there"), "{text}");
        assert!(
            text.ends_with("3 checks: 1 passed, 1 failed, 1 skipped, 0 not implemented, 0 errors"),
            "{text}"
        );
    }

    #[test]
    fn verdicts() {
        let lenient = report(false);
        assert_eq!(
            lenient.failures(),
            vec![Check::InstancesExistsTrueForStopped]
        );
        assert_eq!(
            lenient.with_label("skip"),
            vec![Check::RoutesListScopedToCluster]
        );
        let err = lenient.into_result().unwrap_err();
        assert!(
            err.to_string()
                .contains("instances.exists_true_for_stopped")
        );
        let strict = report(true);
        assert_eq!(
            strict.failures(),
            vec![
                Check::InstancesExistsTrueForStopped,
                Check::RoutesListScopedToCluster
            ]
        );
        let panic = std::panic::catch_unwind(|| strict.assert_all_passed()).unwrap_err();
        let msg = panic.downcast_ref::<String>().unwrap();
        assert!(msg.starts_with("provider \"acme\" broke the contract of 2 conformance check(s): instances.exists_true_for_stopped, routes.list_scoped_to_cluster"), "{msg}");
    }
}
