//! The guard against mass Node deletion (`--node-deletion-guard`), as pure decisions: how
//! many Nodes the lifecycle controller may delete now, given the deletions of the last
//! window and the number of the cloud's Nodes; when it stops deleting altogether; when a
//! pass trips it and when one resets it. The controller (`mod.rs`) does the I/O.
//!
//! Two bounds, because a controller cannot tell a cloud whose API lies ("every instance is
//! gone", an empty list answered with 200: linode-cloud-controller-manager #570) from a real
//! scale-down by the answers alone, only by their size:
//!
//! - **The budget**: at most `max` Nodes (a count, or a share of the cloud's Nodes but at
//!   least one) deleted in any sliding `window`. A real scale-down goes through at that
//!   pace: with the defaults, 30 of 100 Nodes take 4 windows (10, 9, 8, then 3, as the
//!   budget follows the shrinking count). The Nodes past it are held back until the window
//!   frees room.
//! - **The stop**: while more than `stop` of the cloud's Nodes are reported gone in one
//!   pass, and more than a window's budget, none is deleted: the cloud is more likely wrong
//!   than the cluster half gone. Deleting resumes by itself once a pass finds that share
//!   back at or under the bound (the provider answers that the instances exist, or the
//!   Nodes came back Ready, or an operator deleted or approved them).
//!
//! Nodes an operator approved (the annotation [`APPROVED_ANNOTATION`]`: "true"`) are
//! deleted when the provider says their instance is gone, past both bounds, and do not
//! count against them.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tokio::time::Instant;

use crate::flags::duration::{format_go_duration, parse_go_duration};

/// The Node annotation by which an operator approves the deletion of a Node the guard holds
/// back: with the value `"true"`, the Node is deleted once the provider says its instance is
/// gone, past the budget and the stop, as Go would.
pub const APPROVED_ANNOTATION: &str = "ccm-rs.github.io/node-deletion-approved";

/// The longest window accepted: 7 days. The history is kept in memory (a restart forgets
/// it), so a longer one promises what the guard cannot keep.
pub const MAX_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// The guard against mass Node deletion (`--node-deletion-guard`); see the module docs of
/// the lifecycle controller. The default is [`GuardLimits::default`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeDeletionGuard {
    /// No guard: every Node whose instance is gone is deleted at once, as Go does (`off`).
    Off,
    /// Deletions bounded by these limits.
    On(GuardLimits),
}

impl Default for NodeDeletionGuard {
    fn default() -> Self {
        Self::On(GuardLimits::default())
    }
}

/// The limits of an enabled [`NodeDeletionGuard`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GuardLimits {
    /// The most Nodes deleted in any `window` because the provider says their instance is
    /// gone (`max=`).
    pub max: MaxDeletions,
    /// The sliding window of `max` (`window=`).
    pub window: Duration,
    /// No deletion at all while more than this percentage of the cloud's Nodes is reported
    /// gone in one pass (`stop=`); `None` (`stop=off`): the budget alone.
    pub stop_percent: Option<u8>,
}

impl Default for GuardLimits {
    /// `max=10%,window=10m,stop=50%`: see docs/controllers.md for why.
    fn default() -> Self {
        Self {
            max: MaxDeletions::Percent(10),
            window: Duration::from_secs(600),
            stop_percent: Some(50),
        }
    }
}

/// How many Nodes a window's budget holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxDeletions {
    /// This percentage (0 to 100) of the cloud's Nodes, rounded down but at least 1 (0%:
    /// none).
    Percent(u8),
    /// This many Nodes (0: none).
    Count(u32),
}

impl GuardLimits {
    setters! {
        /// Sets the most Nodes deleted in any window.
        pub fn with_max(max: MaxDeletions);
        /// Sets the sliding window (above 0, at most [`MAX_WINDOW`]; the flag checks it).
        pub fn with_window(window: Duration);
        /// Sets the stop's percentage (0 to 100); `None`: the budget alone.
        pub fn with_stop_percent(stop_percent: Option<u8>);
    }

    /// How many deletions a window allows when the cloud has `owned` Nodes.
    #[must_use]
    pub fn budget(&self, owned: usize) -> usize {
        match self.max {
            MaxDeletions::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            MaxDeletions::Percent(0) => 0,
            MaxDeletions::Percent(p) => (owned.saturating_mul(usize::from(p)) / 100).max(1),
        }
    }

    /// Whether `gone` Nodes reported gone of `owned` is past the stop.
    fn stops(&self, gone: usize, owned: usize) -> bool {
        self.stop_percent
            .is_some_and(|p| gone.saturating_mul(100) > owned.saturating_mul(usize::from(p)))
    }
}

impl fmt::Display for NodeDeletionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self::On(limits) = self else {
            return f.write_str("off");
        };
        match limits.max {
            MaxDeletions::Percent(p) => write!(f, "max={p}%")?,
            MaxDeletions::Count(n) => write!(f, "max={n}")?,
        }
        write!(f, ",window={}", format_go_duration(limits.window))?;
        match limits.stop_percent {
            Some(p) => write!(f, ",stop={p}%"),
            None => f.write_str(",stop=off"),
        }
    }
}

/// A percentage `0%` to `100%`.
fn percent(field: &str, value: &str) -> Result<u8, String> {
    let digits = value.strip_suffix('%').ok_or_else(|| {
        format!("{field}: {value:?} is not a percentage (a whole number and %, e.g. 50%)")
    })?;
    match digits.parse::<u8>() {
        Ok(p) if p <= 100 && digits.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(format!(
            "{field}: {value:?} is not a percentage from 0% to 100% (a whole number)"
        )),
    }
}

impl FromStr for NodeDeletionGuard {
    type Err = String;

    /// `off`, or comma-separated `max=`, `window=` and `stop=`, each at most once; those not
    /// given keep their default. An error names the field.
    fn from_str(value: &str) -> Result<Self, String> {
        let value = value.trim();
        if value == "off" {
            return Ok(Self::Off);
        }
        if value.is_empty() {
            return Err("empty: give off, or max=, window= and stop= (e.g. \
                        max=10%,window=10m,stop=50%)"
                .to_owned());
        }
        let mut limits = GuardLimits::default();
        let mut seen: Vec<&str> = Vec::new();
        for part in value.split(',') {
            let part = part.trim();
            let Some((key, val)) = part.split_once('=') else {
                return Err(format!(
                    "{part:?} is not key=value: expected max=, window= or stop= (or the whole \
                     value off)"
                ));
            };
            let (key, val) = (key.trim(), val.trim());
            if seen.contains(&key) {
                return Err(format!("{key}: given twice"));
            }
            match key {
                "max" => {
                    limits.max = if val.ends_with('%') {
                        MaxDeletions::Percent(percent("max", val)?)
                    } else {
                        match val.parse::<u32>() {
                            Ok(n) if val.bytes().all(|b| b.is_ascii_digit()) => {
                                MaxDeletions::Count(n)
                            }
                            _ => {
                                return Err(format!(
                                    "max: {val:?} is neither a count of Nodes (e.g. 5) nor a \
                                     percentage of them (e.g. 10%)"
                                ));
                            }
                        }
                    };
                }
                "window" => {
                    let window = parse_go_duration(val).map_err(|e| format!("window: {e}"))?;
                    if window.is_zero() || window > MAX_WINDOW {
                        return Err(format!(
                            "window: {val:?} is out of range: above 0 and at most {}",
                            format_go_duration(MAX_WINDOW)
                        ));
                    }
                    limits.window = window;
                }
                "stop" => {
                    limits.stop_percent = if val == "off" {
                        None
                    } else {
                        Some(percent("stop", val)?)
                    };
                }
                other => {
                    return Err(format!(
                        "unknown field {other:?}: expected max, window or stop (or the whole \
                         value off)"
                    ));
                }
            }
            seen.push(key);
        }
        Ok(Self::On(limits))
    }
}

/// The times of the deletions the budget counts, oldest first.
#[derive(Debug, Default)]
pub(crate) struct History {
    at: VecDeque<Instant>,
}

impl History {
    /// Forgets the deletions at least `window` before `now`, and says how many are left:
    /// those of the window that ends at `now`.
    pub(crate) fn recent(&mut self, window: Duration, now: Instant) -> usize {
        while self
            .at
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= window)
        {
            self.at.pop_front();
        }
        self.at.len()
    }

    /// Records a deletion at `at` (not before the last one recorded).
    pub(crate) fn record(&mut self, at: Instant) {
        self.at.push_back(at);
    }
}

/// A Node the provider reports gone on this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GoneNode {
    pub(crate) name: String,
    /// Approved by an operator ([`APPROVED_ANNOTATION`]).
    pub(crate) approved: bool,
    /// When its Ready condition last changed (to False or Unknown), if known.
    pub(crate) not_ready_since: Option<Timestamp>,
}

/// Why the guard holds Nodes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The window's budget is spent: `used` deletions in the last `window` (with this
    /// pass's), `budget` allowed.
    Budget {
        budget: usize,
        used: usize,
        window: Duration,
    },
    /// `gone` of the cloud's `owned` Nodes are reported gone at once: more than
    /// `stop_percent`%.
    Stop {
        gone: usize,
        owned: usize,
        stop_percent: u8,
    },
}

impl Hold {
    /// The `reason` label of the guard's metrics: `budget` or `stop`.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::Budget { .. } => "budget",
            Self::Stop { .. } => "stop",
        }
    }

    /// Why, for an Event and a log line.
    pub(crate) fn why(self) -> String {
        match self {
            Self::Budget {
                budget,
                used,
                window,
            } => format!(
                "{used} Nodes were deleted in the last {} (this pass's included) and the guard \
                 allows {budget} (--node-deletion-guard); it is deleted when the window frees \
                 room",
                format_go_duration(window)
            ),
            Self::Stop {
                gone,
                owned,
                stop_percent,
            } => format!(
                "the cloud provider reports {gone} of the cloud's {owned} Nodes gone at once, \
                 more than {stop_percent}% (--node-deletion-guard): no Node is deleted until \
                 that share is back under the bound"
            ),
        }
    }
}

/// What a pass does with the Nodes reported gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Indices (into the pass's gone Nodes) to delete now, oldest NotReady first.
    pub(crate) delete: Vec<usize>,
    /// Indices held back.
    pub(crate) held: Vec<usize>,
    /// Why they are held back; `None` when none is.
    pub(crate) hold: Option<Hold>,
    /// How many of `delete` the budget counts (the approved ones are not counted).
    pub(crate) counted: usize,
}

/// What to do with the Nodes reported `gone` on a pass, when the cloud has `owned` Nodes
/// and the budget counts `recent` deletions in the window ending now.
///
/// Approved Nodes are always deleted and count for neither bound. Of the others: none past
/// the stop (more of them than a window's budget, and more than the stop's share of the
/// cloud's Nodes); else as many as the budget has room for, those NotReady longest first
/// (the likeliest to be really gone; then by name, so that every pass picks the same ones).
pub(crate) fn plan(
    guard: &NodeDeletionGuard,
    owned: usize,
    recent: usize,
    gone: &[GoneNode],
) -> Plan {
    let (approved, mut others): (Vec<usize>, Vec<usize>) =
        (0..gone.len()).partition(|&i| gone[i].approved);
    let NodeDeletionGuard::On(limits) = guard else {
        return Plan {
            delete: (0..gone.len()).collect(),
            held: Vec::new(),
            hold: None,
            counted: 0,
        };
    };
    others.sort_by(|&a, &b| {
        let key = |i: usize| {
            // Unknown times last: a Node NotReady since an unknown time is the newest.
            (
                gone[i].not_ready_since.is_none(),
                gone[i].not_ready_since,
                &gone[i].name,
            )
        };
        key(a).cmp(&key(b))
    });
    let budget = limits.budget(owned);
    let (room, hold) = if others.len() > budget && limits.stops(others.len(), owned) {
        let stop = Hold::Stop {
            gone: others.len(),
            owned,
            stop_percent: limits.stop_percent.unwrap_or(100),
        };
        (0, Some(stop))
    } else {
        let room = budget.saturating_sub(recent);
        let hold = (others.len() > room).then_some(Hold::Budget {
            budget,
            used: recent + room,
            window: limits.window,
        });
        (room, hold)
    };
    let held = others.split_off(room.min(others.len()));
    let counted = others.len();
    let mut delete = approved;
    delete.extend(others);
    Plan {
        delete,
        held,
        hold,
        counted,
    }
}

/// How the guard's state changes from one pass to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transition {
    /// It holds Nodes back now and did not (or for another reason) before: a trip.
    Tripped(&'static str),
    /// It held Nodes back and holds none now: deleting as usual again.
    Reset,
    /// As before.
    Unchanged,
}

/// The transition from the hold reason of the last pass to this one's.
pub(crate) fn transition(before: Option<&'static str>, now: Option<&'static str>) -> Transition {
    match (before, now) {
        (b, Some(n)) if b != Some(n) => Transition::Tripped(n),
        (Some(_), None) => Transition::Reset,
        _ => Transition::Unchanged,
    }
}

#[cfg(test)]
mod tests;
