//! How a conformance run behaves: [`Options`].
//!
//! The defaults suit an in-memory or simulated cloud that answers at once. Against a real
//! cloud, raise [`Options::check_timeout`] (creating instances takes minutes) and set
//! [`Options::settle_timeout`] when the cloud's API is eventually consistent; pick a
//! [`Options::cluster_name`] and [`Options::route_cidr`] no real cluster uses.

use std::time::Duration;

use crate::Check;

/// `with_field(field: Type);` becomes `pub fn with_field(self, field: Type) -> Self`, which
/// sets the field (`impl Into<T>` converts first), documented as "Sets [`field`]".
macro_rules! setters {
    ($($setter:ident($field:ident: $($ty:tt)+);)*) => {
        $(
            #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
            pub fn $setter(mut self, $field: $($ty)+) -> Self {
                self.$field = setters!(@value $field: $($ty)+);
                self
            }
        )*
    };
    (@value $field:ident: impl Into<$ty:ty>) => { $field.into() };
    (@value $field:ident: $ty:ty) => { $field };
}

/// Options of a conformance run.
///
/// ```
/// use std::time::Duration;
/// use ccm_conformance::{Check, Options};
///
/// let options = Options::new("conformance-test")
///     .with_check_timeout(Duration::from_secs(600))
///     .with_settle_timeout(Duration::from_secs(120))
///     .skipping(Check::RoutesListScopedToCluster);
/// assert_eq!(options.cluster_name, "conformance-test");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Options {
    /// The cluster name passed to the load balancer and route calls. Default:
    /// `"ccm-conformance"`.
    pub cluster_name: String,
    /// How long one check may take, its instances included; a check that runs longer fails
    /// and names the call it was waiting for. Default: 120 s.
    pub check_timeout: Duration,
    /// How long to keep asking the provider, after a change, for the answer the contract
    /// requires (for example "does not exist" after a delete). Zero asks once. Default: zero.
    pub settle_timeout: Duration,
    /// The pause between two questions while settling. Default: 1 s.
    pub poll_interval: Duration,
    /// The start of every instance and Service name the suite makes. Default:
    /// `"ccm-conformance"`.
    pub name_prefix: String,
    /// An IPv4 block no cluster uses, with a prefix of at most /24; the route checks create
    /// /24 routes inside it. Default: `"10.253.0.0/16"`.
    pub route_cidr: String,
    /// Checks not to run; they are reported as skipped.
    pub skip: Vec<Check>,
    /// Count skipped and not-implemented checks as failures too, in
    /// [`Report::into_result`](crate::Report::into_result),
    /// [`Report::assert_all_passed`](crate::Report::assert_all_passed) and the tests of
    /// [`conformance_tests!`](crate::conformance_tests). For a provider that supports
    /// everything. Default: `false`.
    pub strict: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            cluster_name: "ccm-conformance".into(),
            check_timeout: Duration::from_secs(120),
            settle_timeout: Duration::ZERO,
            poll_interval: Duration::from_secs(1),
            name_prefix: "ccm-conformance".into(),
            route_cidr: "10.253.0.0/16".into(),
            skip: Vec::new(),
            strict: false,
        }
    }
}

impl Options {
    /// The default options with this cluster name.
    pub fn new(cluster_name: impl Into<String>) -> Self {
        Self {
            cluster_name: cluster_name.into(),
            ..Self::default()
        }
    }

    setters! {
        with_check_timeout(check_timeout: Duration);
        with_settle_timeout(settle_timeout: Duration);
        with_poll_interval(poll_interval: Duration);
        with_name_prefix(name_prefix: impl Into<String>);
        with_route_cidr(route_cidr: impl Into<String>);
        with_strict(strict: bool);
    }

    /// Adds `check` to [`skip`](Self::skip).
    pub fn skipping(mut self, check: Check) -> Self {
        self.skip.push(check);
        self
    }
}
