//! Go's flag syntax, below every layer that parses flags: [`FlagError`] (a flag and what is
//! wrong with its value), the pflag-style value parsers (`goflag`: booleans as
//! `strconv.ParseBool`, integers with base prefixes, `stringSlice`, `namedCertKey`, …) and Go
//! durations ([`duration`]). The app's options and the serving options both build on it, so
//! an argument list copied from a Go cloud-controller-manager parses unchanged.

pub mod duration;
pub mod feature_gates;
pub(crate) mod goflag;

/// A flag with a value it cannot take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct FlagError {
    /// The flag, e.g. `--kube-api-qps`.
    pub flag: &'static str,
    /// What is wrong with its value.
    pub message: String,
}
