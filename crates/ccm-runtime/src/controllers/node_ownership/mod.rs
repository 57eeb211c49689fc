//! Which Nodes are this cloud-controller-manager's, in a cluster whose Nodes are not all
//! of one cloud (bare-metal servers beside a cloud's VMs, two clouds in one cluster).
//!
//! Go's controllers treat every Node as their cloud's: the cloud-node controller tries to
//! initialise a bare-metal Node, the lifecycle controller deletes it when the cloud has no
//! instance of its name, the service controller makes it a load balancer backend and the
//! route controller routes its pod CIDR (kubernetes/cloud-provider#35; hcloud-cloud-controller-manager
//! #7, #9, #753, #789). Two flags say which Nodes are ours; every controller that acts on a
//! Node on behalf of the cloud leaves the others alone:
//!
//! - `--node-provider-id-prefix` (comma-separated or repeated, e.g. `digitalocean://`): a
//!   Node whose `spec.providerID` starts with none of the prefixes is not ours. A Node
//!   **without** a provider ID is ours while it still carries the
//!   `node.cloudprovider.kubernetes.io/uninitialized` taint: its kubelet waits for a CCM to
//!   set the ID, and that is us. Once initialised without one (a kubelet without
//!   `--cloud-provider=external`), it is not ours: any Node we initialise gets its ID.
//! - `--node-selector` (a label selector, `kubectl -l` syntax): a Node whose labels do not
//!   match it is not ours.
//!
//! Both given: both must hold. Neither: every Node is ours, which is Go's behaviour.
//! [`NodeOwnership::owns`] is the pure predicate; [`NodeOwnership::check`] is what the
//! controllers call, which also logs, once per Node, why one is skipped.

mod selector;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ccm_provider::echo::echo;
use ccm_provider::node_provider_id;
use ccm_provider::well_known::TAINT_UNINITIALIZED;
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;

pub use self::selector::{LabelSelector, MAX_REQUIREMENTS, MAX_SELECTOR_BYTES};
use crate::controllers::node_util::{node_name, taints};
use crate::flags::FlagError;
use crate::informer::{Change, Informer};

/// The provider-ID prefix flag.
pub const FLAG_PROVIDER_ID_PREFIX: &str = "--node-provider-id-prefix";
/// The label selector flag.
pub const FLAG_SELECTOR: &str = "--node-selector";
/// The most provider-ID prefixes accepted: 32.
pub const MAX_PROVIDER_ID_PREFIXES: usize = 32;
/// The longest provider-ID prefix accepted: 256 bytes.
pub const MAX_PROVIDER_ID_PREFIX_BYTES: usize = 256;
/// The most skipped Nodes remembered as logged (one entry a Node, dropped when it is
/// deleted or becomes ours); beyond it the memory starts over and Nodes are logged again.
const MAX_LOGGED: usize = 65_536;

/// Whether a Node is this cloud-controller-manager's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Ours: every controller acts on it as Go's do.
    Owned,
    /// Not ours: no controller initialises, taints, deletes, routes or load-balances it.
    NotOwned(NotOwned),
}

impl Ownership {
    /// Whether the Node is ours.
    pub fn is_owned(&self) -> bool {
        matches!(self, Self::Owned)
    }
}

/// Why a Node is not ours.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NotOwned {
    /// The flag that decides: [`FLAG_PROVIDER_ID_PREFIX`] or [`FLAG_SELECTOR`].
    pub flag: &'static str,
    /// Why, naming the flag and its value, e.g. `its spec.providerID "hrobot://7" starts
    /// with none of --node-provider-id-prefix=digitalocean://`.
    pub reason: String,
}

impl std::fmt::Display for NotOwned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The rules the flags set.
#[derive(Debug)]
struct Rules {
    /// `--node-provider-id-prefix`; empty: no rule.
    prefixes: Vec<String>,
    /// `--node-selector`; `None`: no rule.
    selector: Option<LabelSelector>,
}

/// Which Nodes are ours (see the [module docs](self)), and the Nodes already logged as
/// skipped. Cloning shares that memory, so the controllers of one manager log each skipped
/// Node once between them. The default owns every Node, as Go does.
#[derive(Clone, Debug, Default)]
pub struct NodeOwnership {
    /// `None`: every Node is ours.
    rules: Option<Arc<Rules>>,
    logged: Arc<Logged>,
}

/// Node name → the reason logged for it.
#[derive(Debug, Default)]
struct Logged {
    reasons: Mutex<HashMap<String, String>>,
    /// How many entries `reasons` has, read without the lock: with none, an owned Node
    /// costs no lock.
    count: AtomicUsize,
}

/// Why an empty prefix is refused.
const EMPTY_PREFIX: &str =
    "an empty prefix would match every provider ID; leave the flag out for that";

/// Checks one `--node-provider-id-prefix` item.
fn check_prefix(prefix: &str) -> Result<(), String> {
    if prefix.is_empty() {
        return Err(EMPTY_PREFIX.into());
    }
    if prefix.len() > MAX_PROVIDER_ID_PREFIX_BYTES {
        return Err(format!(
            "prefix {:?} is {} bytes long; at most {MAX_PROVIDER_ID_PREFIX_BYTES} are accepted",
            echo(prefix).to_string(),
            prefix.len()
        ));
    }
    if prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "prefix {:?} has whitespace or control characters",
            echo(prefix).to_string()
        ));
    }
    // `<provider>://…`: at least the provider name and its separator, so `hcloud` (which
    // would match `hcloud-other://…` too) is caught as the slip it is.
    let scheme_ok = prefix
        .split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty());
    if !scheme_ok {
        return Err(format!(
            "prefix {:?} must start with the provider's name and \"://\", as provider IDs do \
             (e.g. {:?})",
            echo(prefix).to_string(),
            format!("{}://", prefix.trim_end_matches([':', '/']))
        ));
    }
    Ok(())
}

/// A `--node-provider-id-prefix` value, checked item by item, for the flag's parser: one
/// CSV record of prefixes (pflag's `stringSlice`).
pub(crate) fn parse_prefix_flag(value: &str) -> Result<String, String> {
    let items = crate::flags::goflag::go_string_slice(value)?;
    if items.is_empty() {
        return Err(EMPTY_PREFIX.into());
    }
    for item in &items {
        check_prefix(item)?;
    }
    Ok(value.to_owned())
}

/// A `--node-selector` value, checked, for the flag's parser.
pub(crate) fn parse_selector_flag(value: &str) -> Result<String, String> {
    LabelSelector::parse(value).map(|_| value.to_owned())
}

impl NodeOwnership {
    /// Every Node is ours: Go's behaviour.
    pub fn all() -> Self {
        Self::default()
    }

    /// The ownership the flags describe: `prefixes` (`--node-provider-id-prefix`, each item
    /// of each occurrence; empty for none) and `selector` (`--node-selector`; empty for
    /// none). A bad value is an error naming its flag: an empty prefix, one without
    /// `<provider>://`, with whitespace, longer than [`MAX_PROVIDER_ID_PREFIX_BYTES`] or more
    /// than [`MAX_PROVIDER_ID_PREFIXES`] of them; a selector that does not parse or is
    /// beyond [`MAX_SELECTOR_BYTES`] / [`MAX_REQUIREMENTS`].
    ///
    /// ```
    /// use ccm_runtime::controllers::node_ownership::NodeOwnership;
    /// let o = NodeOwnership::new(&["digitalocean://".to_owned()], "").unwrap();
    /// assert!(!o.owns_everything());
    /// let err = NodeOwnership::new(&[], "cloud in do").unwrap_err();
    /// assert_eq!(err.flag, "--node-selector");
    /// ```
    pub fn new(prefixes: &[String], selector: &str) -> Result<Self, FlagError> {
        let bad = |flag, message| FlagError { flag, message };
        if prefixes.len() > MAX_PROVIDER_ID_PREFIXES {
            return Err(bad(
                FLAG_PROVIDER_ID_PREFIX,
                format!(
                    "{} prefixes given; at most {MAX_PROVIDER_ID_PREFIXES} are accepted",
                    prefixes.len()
                ),
            ));
        }
        for prefix in prefixes {
            check_prefix(prefix).map_err(|m| bad(FLAG_PROVIDER_ID_PREFIX, m))?;
        }
        let selector = LabelSelector::parse(selector).map_err(|m| {
            bad(
                FLAG_SELECTOR,
                format!("{:?}: {m}", echo(selector).to_string()),
            )
        })?;
        let selector = (!selector.selects_all()).then_some(selector);
        if prefixes.is_empty() && selector.is_none() {
            return Ok(Self::all());
        }
        Ok(Self {
            rules: Some(Arc::new(Rules {
                prefixes: prefixes.to_vec(),
                selector,
            })),
            logged: Arc::default(),
        })
    }

    /// Whether every Node is ours (no flag set): Go's behaviour.
    pub fn owns_everything(&self) -> bool {
        self.rules.is_none()
    }

    /// What the flags say, for the startup log: `None` when every Node is ours.
    pub fn describe(&self) -> Option<String> {
        let rules = self.rules.as_ref()?;
        let mut parts = Vec::new();
        if !rules.prefixes.is_empty() {
            parts.push(format!(
                "whose spec.providerID starts with {} (or that wait for one, tainted uninitialized)",
                rules.prefixes.join(" or ")
            ));
        }
        if let Some(selector) = &rules.selector {
            parts.push(format!("whose labels match {:?}", selector.as_str()));
        }
        Some(format!(
            "only Nodes {} are this cloud's",
            parts.join(" and ")
        ))
    }

    /// Whether `node` is ours, and if not, why: a pure function of the Node's
    /// `spec.providerID`, its uninitialized taint and its labels.
    pub fn owns(&self, node: &Node) -> Ownership {
        let Some(rules) = &self.rules else {
            return Ownership::Owned;
        };
        if !rules.prefixes.is_empty() {
            let prefixes = || rules.prefixes.join(",");
            match node_provider_id(node) {
                Some(id) if !rules.prefixes.iter().any(|p| id.starts_with(p.as_str())) => {
                    return Ownership::NotOwned(NotOwned {
                        flag: FLAG_PROVIDER_ID_PREFIX,
                        reason: format!(
                            "its spec.providerID {:?} starts with none of \
                             {FLAG_PROVIDER_ID_PREFIX}={}",
                            echo(id).to_string(),
                            prefixes()
                        ),
                    });
                }
                Some(_) => {}
                None if taints(node).iter().any(|t| t.key == TAINT_UNINITIALIZED) => {}
                None => {
                    return Ownership::NotOwned(NotOwned {
                        flag: FLAG_PROVIDER_ID_PREFIX,
                        reason: format!(
                            "it has no spec.providerID and is not waiting for one (no \
                             {TAINT_UNINITIALIZED} taint), so it matches none of \
                             {FLAG_PROVIDER_ID_PREFIX}={}",
                            prefixes()
                        ),
                    });
                }
            }
        }
        if let Some(selector) = &rules.selector
            && !selector.matches(node.metadata.labels.as_ref())
        {
            return Ownership::NotOwned(NotOwned {
                flag: FLAG_SELECTOR,
                reason: format!(
                    "its labels do not match {FLAG_SELECTOR}={:?}",
                    selector.as_str()
                ),
            });
        }
        Ownership::Owned
    }

    /// Whether `node` is ours, without logging.
    pub fn is_owned(&self, node: &Node) -> bool {
        self.rules.is_none() || self.owns(node).is_owned()
    }

    /// Whether `node` is ours, for a controller about to act on it. A Node that is not is
    /// logged at info level, with why and the flag that decides, once (again only if the
    /// reason changes); a Node logged so that has become ours is logged once more, saying
    /// so.
    pub fn check(&self, node: &Node) -> bool {
        if self.rules.is_none() {
            return true;
        }
        let name = node_name(node);
        match self.owns(node) {
            Ownership::Owned => {
                if self.logged.count.load(Ordering::Relaxed) > 0 {
                    let mut reasons = self.logged.reasons.lock();
                    if reasons.remove(name).is_some() {
                        self.logged.count.store(reasons.len(), Ordering::Relaxed);
                        drop(reasons);
                        tracing::info!(
                            node = name,
                            "node is this cloud's now; the controllers act on it"
                        );
                    }
                }
                true
            }
            Ownership::NotOwned(why) => {
                let mut reasons = self.logged.reasons.lock();
                if reasons.get(name) != Some(&why.reason) {
                    if reasons.len() >= MAX_LOGGED {
                        reasons.clear();
                    }
                    reasons.insert(name.to_owned(), why.reason.clone());
                    self.logged.count.store(reasons.len(), Ordering::Relaxed);
                    drop(reasons);
                    tracing::info!(
                        node = name,
                        flag = why.flag,
                        "node is not this cloud's, so no controller initialises, taints, \
                         deletes, routes or load-balances it: {why}"
                    );
                }
                false
            }
        }
    }

    /// Forgets that `name` was logged (it was deleted): memory stays bounded by the Nodes
    /// that exist.
    pub fn forget(&self, name: &str) {
        if self.logged.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut reasons = self.logged.reasons.lock();
        reasons.remove(name);
        self.logged.count.store(reasons.len(), Ordering::Relaxed);
    }

    /// Forgets each Node `nodes` reports deleted ([`forget`](Self::forget)).
    pub fn forget_deleted(&self, nodes: &Informer<Node>) {
        if self.rules.is_none() {
            return;
        }
        let this = self.clone();
        nodes.subscribe(move |change| {
            if let Change::Deleted(node) = change {
                this.forget(node_name(node));
            }
        });
    }

    /// How many skipped Nodes are remembered as logged.
    #[cfg(test)]
    fn logged_count(&self) -> usize {
        self.logged.reasons.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use ccm_test::fixtures::NodeBuilder;
    use k8s_openapi::api::core::v1::Taint;

    use super::*;

    fn ownership(prefixes: &[&str], selector: &str) -> NodeOwnership {
        let prefixes: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
        NodeOwnership::new(&prefixes, selector).unwrap()
    }

    fn node(name: &str, provider_id: Option<&str>, labels: &[(&str, &str)]) -> Node {
        let mut b = NodeBuilder::new(name);
        if let Some(id) = provider_id {
            b = b.provider_id(id);
        }
        let mut n = b.build();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        );
        n
    }

    fn uninitialized(mut n: Node) -> Node {
        n.spec.get_or_insert_default().taints = Some(vec![Taint {
            key: TAINT_UNINITIALIZED.into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        n
    }

    #[test]
    fn without_flags_every_node_is_ours() {
        let o = NodeOwnership::new(&[], "").unwrap();
        assert!(o.owns_everything());
        assert!(o.describe().is_none());
        for n in [
            node("a", Some("other://1"), &[]),
            node("b", None, &[]),
            Node::default(),
        ] {
            assert_eq!(o.owns(&n), Ownership::Owned);
            assert!(o.check(&n));
        }
        assert!(NodeOwnership::all().owns_everything());
        assert!(NodeOwnership::new(&[], "  ").unwrap().owns_everything());
    }

    #[test]
    fn a_provider_id_must_start_with_a_prefix() {
        let o = ownership(&["digitalocean://", "do-metal://"], "");
        assert!(o.is_owned(&node("a", Some("digitalocean://123"), &[])));
        assert!(o.is_owned(&node("b", Some("do-metal://7"), &[])));
        let Ownership::NotOwned(why) = o.owns(&node("c", Some("hrobot://7"), &[])) else {
            panic!("owned")
        };
        assert_eq!(why.flag, FLAG_PROVIDER_ID_PREFIX);
        assert_eq!(
            why.reason,
            "its spec.providerID \"hrobot://7\" starts with none of \
             --node-provider-id-prefix=digitalocean://,do-metal://"
        );
        assert!(!o.is_owned(&node("d", Some("digitalocean:/1"), &[])));
        assert!(!o.is_owned(&node("e", Some("DIGITALOCEAN://1"), &[])));
    }

    #[test]
    fn a_node_waiting_for_its_provider_id_is_ours_and_one_initialised_without_is_not() {
        let o = ownership(&["digitalocean://"], "");
        assert!(o.is_owned(&uninitialized(node("new", None, &[]))));
        let Ownership::NotOwned(why) = o.owns(&node("metal", None, &[])) else {
            panic!("owned")
        };
        assert_eq!(why.flag, FLAG_PROVIDER_ID_PREFIX);
        assert!(why.reason.contains("no spec.providerID"), "{why}");
        // A provider ID set by the kubelet decides, tainted or not.
        assert!(!o.is_owned(&uninitialized(node("x", Some("hrobot://1"), &[]))));
        // The selector alone has no opinion on provider IDs.
        let s = ownership(&[], "cloud=do");
        assert!(s.is_owned(&node("metal", None, &[("cloud", "do")])));
    }

    #[test]
    fn the_selector_must_match_the_labels() {
        let o = ownership(&[], "example.com/cloud in (do), !example.com/bare-metal");
        assert!(o.is_owned(&node("a", Some("x://1"), &[("example.com/cloud", "do")])));
        let Ownership::NotOwned(why) = o.owns(&node("b", Some("digitalocean://1"), &[])) else {
            panic!("owned")
        };
        assert_eq!(why.flag, FLAG_SELECTOR);
        assert_eq!(
            why.reason,
            "its labels do not match --node-selector=\"example.com/cloud in (do), \
             !example.com/bare-metal\""
        );
        assert!(!o.is_owned(&node(
            "c",
            None,
            &[("example.com/cloud", "do"), ("example.com/bare-metal", "")]
        )));
        let mut no_labels = node("d", None, &[]);
        no_labels.metadata.labels = None;
        assert!(!o.is_owned(&no_labels));
        assert!(ownership(&[], "!example.com/bare-metal").is_owned(&no_labels));
    }

    #[test]
    fn with_both_flags_both_must_hold() {
        let o = ownership(&["digitalocean://"], "cloud=do");
        assert!(o.is_owned(&node("a", Some("digitalocean://1"), &[("cloud", "do")])));
        assert_eq!(
            o.owns(&node("b", Some("hrobot://1"), &[("cloud", "do")])),
            Ownership::NotOwned(NotOwned {
                flag: FLAG_PROVIDER_ID_PREFIX,
                reason: "its spec.providerID \"hrobot://1\" starts with none of \
                         --node-provider-id-prefix=digitalocean://"
                    .into()
            })
        );
        let Ownership::NotOwned(why) = o.owns(&node("c", Some("digitalocean://1"), &[])) else {
            panic!("owned")
        };
        assert_eq!(why.flag, FLAG_SELECTOR);
        let d = o.describe().unwrap();
        assert!(
            d.contains("digitalocean://") && d.contains("cloud=do"),
            "{d}"
        );
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let prefixes = |p: &[&str]| p.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        for (given, needle) in [
            (prefixes(&[""]), "empty prefix"),
            (prefixes(&["hcloud"]), "\"hcloud://\""),
            (prefixes(&["hcloud:"]), "\"hcloud://\""),
            (prefixes(&["://x"]), "provider's name"),
            (prefixes(&["a ://"]), "whitespace"),
            (
                prefixes(&[&format!("a://{}", "x".repeat(300))]),
                "at most 256",
            ),
        ] {
            let err = NodeOwnership::new(&given, "").unwrap_err();
            assert_eq!(err.flag, FLAG_PROVIDER_ID_PREFIX);
            assert!(err.message.contains(needle), "{given:?}: {err}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("p{i}://")).collect();
        let err = NodeOwnership::new(&many, "").unwrap_err();
        assert!(err.message.contains("at most 32"), "{err}");
        for bad in ["a in b", "=", "a,", "a>1", &"a".repeat(5000)] {
            let err = NodeOwnership::new(&[], bad).unwrap_err();
            assert_eq!(err.flag, FLAG_SELECTOR, "{bad}");
            assert!(err.to_string().starts_with("--node-selector: "), "{err}");
        }
        assert_eq!(
            NodeOwnership::new(&[], "a in b").unwrap_err().to_string(),
            "--node-selector: \"a in b\": found 'b', expected: '('"
        );
    }

    #[test]
    fn the_flag_parsers_check_each_item() {
        assert_eq!(parse_prefix_flag("a://,b://").as_deref(), Ok("a://,b://"));
        assert!(parse_prefix_flag("").is_err());
        assert!(parse_prefix_flag("a://,").is_err());
        assert!(parse_prefix_flag("a").is_err());
        assert!(parse_selector_flag("a=b").is_ok());
        assert!(parse_selector_flag("a=b,").is_err());
    }

    #[test]
    fn a_skipped_node_is_remembered_once_and_forgotten() {
        let o = ownership(&["digitalocean://"], "");
        let other = o.clone();
        let metal = node("metal", Some("hrobot://1"), &[]);
        assert!(!o.check(&metal));
        assert!(!other.check(&metal), "clones share the memory");
        assert_eq!(o.logged_count(), 1);
        assert!(o.check(&node("vm", Some("digitalocean://1"), &[])));
        assert_eq!(o.logged_count(), 1);
        // The same name, ours now: forgotten.
        assert!(o.check(&node("metal", Some("digitalocean://2"), &[])));
        assert_eq!(o.logged_count(), 0);
        assert!(!o.check(&metal));
        o.forget("metal");
        assert_eq!(o.logged_count(), 0);
    }
}
