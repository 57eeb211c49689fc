//! Which Services' load balancers this controller manages, by `spec.loadBalancerClass`
//! ([`LoadBalancerClasses`]), and the cleanup finalizer each of them carries.
//!
//! Go's controller manages exactly the Services without a class and skips every Service
//! that has one; that is the default here. `--load-balancer-class` (repeatable) adds
//! classes, and `--manage-services-without-class=false` leaves Services without a class to
//! another controller, so two CCMs (or a CCM beside MetalLB or Cilium) share a cluster, each
//! with its own Services. A Service of a class this controller does not manage is never
//! touched: no finalizer, no status, no event, no cloud call.
//!
//! Each class has its own finalizer, the class name itself (a class is a prefixed
//! qualified name, as a finalizer is); Services without a class carry Go's
//! `service.kubernetes.io/load-balancer-cleanup`. Kubernetes clears a Service's class when
//! its type changes away from `LoadBalancer`: the finalizer still says whose load balancer
//! is left to delete, so the other controller never removes it and never leaks the first
//! one's load balancer. A class taken out of the flags is handed over, not cleaned up: its
//! Services keep their load balancers and finalizers for whoever manages the class next.

use std::collections::BTreeSet;
use std::fmt;

use ccm_provider::well_known::FINALIZER_LOAD_BALANCER_CLEANUP;

/// The most classes one controller manages.
pub const MAX_LOAD_BALANCER_CLASSES: usize = 64;

/// Which Services this controller manages the load balancers of, by their
/// `spec.loadBalancerClass`. The default is Go's: those without a class, and no class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancerClasses {
    classes: BTreeSet<String>,
    without_class: bool,
}

impl Default for LoadBalancerClasses {
    fn default() -> Self {
        Self {
            classes: BTreeSet::new(),
            without_class: true,
        }
    }
}

/// A class a controller cannot manage, or a set that manages nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClassError {
    /// Not a prefixed qualified name (`example.com/internal-vip`): Kubernetes reserves
    /// unprefixed classes for end users, and a class is also its load balancers' finalizer.
    #[error(
        "{class:?} is not a load balancer class a controller can claim: {why} \
         (a class is a prefixed qualified name, e.g. example.com/internal-vip)"
    )]
    Invalid {
        /// The class, cut to 256 bytes ([`echo::cut`](ccm_provider::echo::cut)).
        class: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// More than [`MAX_LOAD_BALANCER_CLASSES`] classes.
    #[error("{0} load balancer classes; at most {MAX_LOAD_BALANCER_CLASSES}")]
    TooMany(usize),
    /// No class, and Services without a class left to another controller: nothing to do.
    #[error("manages no Service: give a load balancer class, or manage the Services without one")]
    Nothing,
}

impl LoadBalancerClasses {
    /// Go's: the Services without a class, and no class.
    pub fn go() -> Self {
        Self::default()
    }

    /// The Services of `classes`, and those without a class when `without_class`.
    ///
    /// # Errors
    ///
    /// A class that is not a prefixed qualified name, more than
    /// [`MAX_LOAD_BALANCER_CLASSES`] classes, or no Service managed at all.
    pub fn new<I, S>(classes: I, without_class: bool) -> Result<Self, ClassError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut set = BTreeSet::new();
        for class in classes {
            let class = class.into();
            if let Err(why) = validate_class(&class) {
                let class = ccm_provider::echo::cut(class, 256);
                return Err(ClassError::Invalid { class, why });
            }
            set.insert(class);
            if set.len() > MAX_LOAD_BALANCER_CLASSES {
                return Err(ClassError::TooMany(set.len()));
            }
        }
        if set.is_empty() && !without_class {
            return Err(ClassError::Nothing);
        }
        Ok(Self {
            classes: set,
            without_class,
        })
    }

    /// The classes managed, sorted.
    pub fn classes(&self) -> impl Iterator<Item = &str> {
        self.classes.iter().map(String::as_str)
    }

    /// Whether Services without a class are managed.
    pub fn manages_without_class(&self) -> bool {
        self.without_class
    }

    /// Whether this is Go's selection (no class, the Services without one).
    pub fn is_go(&self) -> bool {
        self.classes.is_empty() && self.without_class
    }

    /// Whether a Service of `class` (`None`: without one) is managed.
    pub fn manages(&self, class: Option<&str>) -> bool {
        match class {
            None => self.without_class,
            Some(class) => self.classes.contains(class),
        }
    }

    /// The cleanup finalizer of a managed Service of `class`: the class itself, or Go's
    /// for a Service without one; `None` for a class not managed.
    pub fn finalizer(&self, class: Option<&str>) -> Option<&str> {
        match class {
            None => self
                .without_class
                .then_some(FINALIZER_LOAD_BALANCER_CLEANUP),
            Some(class) => self.classes.get(class).map(String::as_str),
        }
    }

    /// Whether `finalizer` is one of this controller's: Go's when Services without a class
    /// are managed, a managed class's otherwise.
    pub fn is_ours(&self, finalizer: &str) -> bool {
        if finalizer == FINALIZER_LOAD_BALANCER_CLEANUP {
            self.without_class
        } else {
            self.classes.contains(finalizer)
        }
    }
}

impl fmt::Display for LoadBalancerClasses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<&str> = self.classes().collect();
        if self.without_class {
            parts.insert(0, "(no class)");
        }
        f.write_str(&parts.join(", "))
    }
}

/// Why `class` cannot be claimed, if it cannot: Kubernetes' qualified-name rules with the
/// prefix required.
fn validate_class(class: &str) -> Result<(), &'static str> {
    let Some((prefix, name)) = class.split_once('/') else {
        return Err("it has no prefix");
    };
    if prefix.is_empty() || !crate::controllers::is_dns1123_subdomain(prefix) {
        return Err("its prefix is not a DNS subdomain");
    }
    if name.is_empty() || name.len() > 63 {
        return Err("its name is empty or longer than 63 characters");
    }
    let b = name.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    if !alnum(&b[0]) || !alnum(&b[b.len() - 1]) {
        return Err("its name must start and end with a letter or digit");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    {
        return Err("its name holds a character other than letters, digits, '-', '_', '.'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_gos() {
        let go = LoadBalancerClasses::default();
        assert!(go.is_go());
        assert!(go.manages(None));
        assert!(!go.manages(Some("example.com/lb")));
        assert_eq!(go.finalizer(None), Some(FINALIZER_LOAD_BALANCER_CLEANUP));
        assert_eq!(go.finalizer(Some("example.com/lb")), None);
        assert!(go.is_ours(FINALIZER_LOAD_BALANCER_CLEANUP));
        assert!(!go.is_ours("example.com/lb"));
        assert_eq!(go.to_string(), "(no class)");
    }

    #[test]
    fn a_class_has_its_own_finalizer() {
        let c = LoadBalancerClasses::new(["b.example/lb", "a.example/lb"], false).unwrap();
        assert!(!c.is_go());
        assert!(!c.manages(None));
        assert!(c.manages(Some("a.example/lb")));
        assert!(!c.manages(Some("c.example/lb")));
        assert_eq!(c.finalizer(Some("a.example/lb")), Some("a.example/lb"));
        assert_eq!(c.finalizer(None), None);
        assert!(!c.is_ours(FINALIZER_LOAD_BALANCER_CLEANUP));
        assert!(c.is_ours("b.example/lb"));
        assert_eq!(c.to_string(), "a.example/lb, b.example/lb");
        let both = LoadBalancerClasses::new(["a.example/lb"], true).unwrap();
        assert_eq!(both.to_string(), "(no class), a.example/lb");
        assert!(both.is_ours(FINALIZER_LOAD_BALANCER_CLEANUP));
    }

    #[test]
    fn bad_classes_are_refused_by_name() {
        for (class, why) in [
            ("internal-vip", "no prefix"),
            ("Example.com/lb", "DNS subdomain"),
            ("example.com/", "empty"),
            ("example.com/-lb", "start and end"),
            ("example.com/l b", "character"),
            ("/lb", "DNS subdomain"),
        ] {
            let err = LoadBalancerClasses::new([class], true).unwrap_err();
            assert!(err.to_string().contains(why), "{class}: {err}");
        }
        let long = format!("example.com/{}", "a".repeat(10_000));
        let err = LoadBalancerClasses::new([long], true).unwrap_err();
        assert!(err.to_string().len() < 600, "{err}");
        let many: Vec<String> = (0..65).map(|i| format!("example.com/c{i}")).collect();
        assert_eq!(
            LoadBalancerClasses::new(many, true).unwrap_err(),
            ClassError::TooMany(65)
        );
        assert_eq!(
            LoadBalancerClasses::new(Vec::<String>::new(), false).unwrap_err(),
            ClassError::Nothing
        );
    }
}
