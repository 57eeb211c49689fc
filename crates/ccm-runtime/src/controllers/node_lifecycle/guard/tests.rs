use super::*;

fn limits(value: &str) -> GuardLimits {
    match value.parse::<NodeDeletionGuard>() {
        Ok(NodeDeletionGuard::On(limits)) => limits,
        other => panic!("{value}: {other:?}"),
    }
}

fn err(value: &str) -> String {
    value
        .parse::<NodeDeletionGuard>()
        .expect_err(&format!("{value:?} should be refused"))
}

/// `n` Nodes reported gone, named `n000`… and NotReady since second 1000 + their number.
fn gone(n: usize) -> Vec<GoneNode> {
    (0..n)
        .map(|i| GoneNode {
            name: format!("n{i:03}"),
            approved: false,
            not_ready_since: Some(Timestamp::from_second(1000 + i as i64).unwrap()),
        })
        .collect()
}

fn names(gone: &[GoneNode], indices: &[usize]) -> Vec<String> {
    indices.iter().map(|&i| gone[i].name.clone()).collect()
}

#[test]
fn the_flag_parses_and_prints_back() {
    let default = NodeDeletionGuard::default();
    assert_eq!(default.to_string(), "max=10%,window=10m0s,stop=50%");
    assert_eq!(
        default.to_string().parse::<NodeDeletionGuard>(),
        Ok(default)
    );
    assert_eq!(
        "off".parse::<NodeDeletionGuard>(),
        Ok(NodeDeletionGuard::Off)
    );
    assert_eq!(NodeDeletionGuard::Off.to_string(), "off");

    let l = limits("max=5, window=1h,stop=off");
    assert_eq!(l.max, MaxDeletions::Count(5));
    assert_eq!(l.window, Duration::from_secs(3600));
    assert_eq!(l.stop_percent, None);
    assert_eq!(
        NodeDeletionGuard::On(l).to_string(),
        "max=5,window=1h0m0s,stop=off"
    );

    // A field not given keeps its default.
    let l = limits("window=30m");
    assert_eq!(l.max, MaxDeletions::Percent(10));
    assert_eq!(l.stop_percent, Some(50));
    assert_eq!(l.window, Duration::from_secs(1800));
    assert_eq!(limits("max=0%").max, MaxDeletions::Percent(0));
    assert_eq!(limits("max=0").max, MaxDeletions::Count(0));
    assert_eq!(limits("stop=100%").stop_percent, Some(100));
    assert_eq!(
        GuardLimits::default()
            .with_max(MaxDeletions::Count(5))
            .with_window(Duration::from_secs(3600))
            .with_stop_percent(None),
        limits("max=5,window=1h,stop=off")
    );
}

#[test]
fn bad_values_are_refused_naming_the_field() {
    for (value, says) in [
        ("", "empty"),
        ("on", "not key=value"),
        ("max=ten", "max: \"ten\" is neither a count"),
        ("max=-1", "max: \"-1\" is neither"),
        ("max=+3", "max: \"+3\" is neither"),
        (
            "max=101%",
            "max: \"101%\" is not a percentage from 0% to 100%",
        ),
        ("max=2.5%", "max: \"2.5%\""),
        ("max=99999999999", "max: \"99999999999\" is neither"),
        ("window=10", "window: invalid duration"),
        ("window=0s", "window: \"0s\" is out of range"),
        ("window=169h", "window: \"169h\" is out of range"),
        ("stop=50", "stop: \"50\" is not a percentage"),
        (
            "stop=150%",
            "stop: \"150%\" is not a percentage from 0% to 100%",
        ),
        ("budget=3", "unknown field \"budget\""),
        ("max=1,max=2", "max: given twice"),
        ("off,max=1", "\"off\" is not key=value"),
    ] {
        let e = err(value);
        assert!(e.contains(says), "{value:?}: {e}");
    }
}

#[test]
fn the_budget_is_a_share_of_the_nodes_and_at_least_one() {
    let l = GuardLimits::default();
    for (owned, budget) in [
        (0, 1),
        (1, 1),
        (9, 1),
        (19, 1),
        (20, 2),
        (100, 10),
        (5000, 500),
    ] {
        assert_eq!(l.budget(owned), budget, "{owned} Nodes");
    }
    assert_eq!(limits("max=0%").budget(1000), 0, "0% allows none");
    assert_eq!(limits("max=100%").budget(7), 7);
    assert_eq!(limits("max=3").budget(1000), 3, "a count ignores the size");
    assert_eq!(limits("max=0").budget(1000), 0);
}

#[test]
fn the_window_slides_and_its_end_is_exclusive() {
    let window = Duration::from_secs(600);
    let t0 = Instant::now();
    let mut history = History::default();
    assert_eq!(history.recent(window, t0), 0);
    history.record(t0);
    history.record(t0 + Duration::from_secs(300));
    assert_eq!(history.recent(window, t0), 2);
    assert_eq!(
        history.recent(window, t0 + window - Duration::from_nanos(1)),
        2,
        "the first is still in the window a nanosecond before its end"
    );
    assert_eq!(
        history.recent(window, t0 + window),
        1,
        "exactly a window later it is out"
    );
    assert_eq!(history.recent(window, t0 + Duration::from_secs(900)), 0);
    // A clock that reads earlier than a recorded time (never with a monotonic clock) keeps
    // it rather than panicking.
    history.record(t0 + Duration::from_secs(2000));
    assert_eq!(history.recent(window, t0), 1);
}

#[test]
fn under_the_budget_every_gone_node_is_deleted() {
    let g = gone(3);
    let p = plan(&NodeDeletionGuard::default(), 100, 5, &g);
    assert_eq!(p.delete.len(), 3);
    assert!(p.held.is_empty());
    assert_eq!(p.hold, None);
    assert_eq!(p.counted, 3);
}

#[test]
fn past_the_budget_the_oldest_not_ready_go_first_and_the_rest_wait() {
    let mut g = gone(30);
    // n029 has been NotReady the longest; n000 since an unknown time (last).
    g[29].not_ready_since = Some(Timestamp::from_second(10).unwrap());
    g[0].not_ready_since = None;
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &g);
    let deleted = names(&g, &p.delete);
    assert_eq!(deleted.len(), 10);
    assert_eq!(deleted[0], "n029");
    assert_eq!(deleted[1..], names(&g, &(1..10).collect::<Vec<_>>()));
    assert_eq!(p.held.len(), 20);
    assert!(names(&g, &p.held).contains(&"n000".to_owned()));
    assert_eq!(
        p.hold,
        Some(Hold::Budget {
            budget: 10,
            used: 10,
            window: Duration::from_secs(600)
        })
    );
    assert_eq!(p.hold.unwrap().reason(), "budget");
    assert!(
        p.hold.unwrap().why().starts_with(
            "10 Nodes were deleted in the last 10m0s (this pass's included) and the guard allows 10"
        ),
        "{}",
        p.hold.unwrap().why()
    );

    // Part of the budget spent in the window: only the rest.
    let p = plan(&NodeDeletionGuard::default(), 100, 7, &g);
    assert_eq!(p.delete.len(), 3);
    // All of it, or more (the Node count fell): none.
    for recent in [10, 12] {
        let p = plan(&NodeDeletionGuard::default(), 100, recent, &g);
        assert!(p.delete.is_empty());
        assert_eq!(p.held.len(), 30);
        assert!(matches!(p.hold, Some(Hold::Budget { used, .. }) if used == recent));
    }
}

#[test]
fn past_the_stop_nothing_is_deleted() {
    let g = gone(100);
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &g);
    assert!(p.delete.is_empty());
    assert_eq!(p.held.len(), 100);
    let hold = p.hold.unwrap();
    assert_eq!(
        hold,
        Hold::Stop {
            gone: 100,
            owned: 100,
            stop_percent: 50
        }
    );
    assert_eq!(hold.reason(), "stop");
    assert!(
        hold.why().contains("100 of the cloud's 100 Nodes"),
        "{}",
        hold.why()
    );

    // The edge: 50 of 100 is not more than 50%, 51 is.
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &gone(50));
    assert_eq!((p.delete.len(), p.hold.unwrap().reason()), (10, "budget"));
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &gone(51));
    assert_eq!((p.delete.len(), p.hold.unwrap().reason()), (0, "stop"));

    // What the budget allows is never stopped: the only Node of a cluster, reported gone,
    // is the window's one deletion; one of two as well; both of two are stopped.
    let p = plan(&NodeDeletionGuard::default(), 1, 0, &gone(1));
    assert_eq!((p.delete.len(), p.hold), (1, None));
    let p = plan(&NodeDeletionGuard::default(), 2, 0, &gone(1));
    assert_eq!((p.delete.len(), p.hold), (1, None));
    let p = plan(&NodeDeletionGuard::default(), 2, 0, &gone(2));
    assert_eq!(
        (p.delete.len(), p.hold.map(Hold::reason)),
        (0, Some("stop"))
    );
    // A count of 60 a window: 55 of 100 gone is past the stop's share, not the budget.
    let p = plan(&NodeDeletionGuard::On(limits("max=60")), 100, 0, &gone(55));
    assert_eq!((p.delete.len(), p.hold), (55, None));

    // stop=off: the budget alone.
    let p = plan(&NodeDeletionGuard::On(limits("stop=off")), 100, 0, &g);
    assert_eq!((p.delete.len(), p.held.len()), (10, 90));
}

#[test]
fn approved_nodes_go_past_both_bounds_and_are_not_counted() {
    let mut g = gone(100);
    for n in &mut g[..60] {
        n.approved = true;
    }
    // 40 unapproved of 100 is under the stop; the budget takes 10 of them.
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &g);
    assert_eq!(p.delete.len(), 70);
    assert_eq!(p.counted, 10);
    assert_eq!(p.held.len(), 30);
    assert!(p.held.iter().all(|&i| !g[i].approved));
    assert_eq!(p.hold.map(Hold::reason), Some("budget"));

    // Past the stop, the approved ones still go.
    let mut g = gone(100);
    g[5].approved = true;
    let p = plan(&NodeDeletionGuard::default(), 100, 0, &g);
    assert_eq!(names(&g, &p.delete), ["n005"]);
    assert_eq!(p.counted, 0);
    assert_eq!(p.held.len(), 99);
}

#[test]
fn off_deletes_everything_as_go() {
    let g = gone(100);
    let p = plan(&NodeDeletionGuard::Off, 100, 1000, &g);
    assert_eq!(p.delete.len(), 100);
    assert_eq!(p.hold, None);
}

/// Passes every `period` over `total` Nodes of which `going` are reported gone (and deleted
/// Nodes leave the count), until none is left to delete or `until`; the largest number of
/// deletions in any window, and when the last deletion was.
fn simulate(
    guard: &NodeDeletionGuard,
    total: usize,
    going: usize,
    period: Duration,
    until: Duration,
) -> (usize, usize, Option<Duration>) {
    let GuardLimits { window, .. } = match guard {
        NodeDeletionGuard::On(l) => *l,
        NodeDeletionGuard::Off => GuardLimits::default(),
    };
    let t0 = Instant::now();
    let mut history = History::default();
    let mut times: Vec<Instant> = Vec::new();
    let (mut owned, mut left) = (total, going);
    let mut last = None;
    let mut now = t0;
    while now - t0 <= until && left > 0 {
        let recent = history.recent(window, now);
        let p = plan(guard, owned, recent, &gone(left));
        for _ in 0..p.counted {
            history.record(now);
        }
        if !p.delete.is_empty() {
            last = Some(now - t0);
            times.extend(std::iter::repeat_n(now, p.delete.len()));
        }
        owned -= p.delete.len();
        left -= p.delete.len();
        now += period;
    }
    let most_in_a_window = times
        .iter()
        .map(|&start| {
            times
                .iter()
                .filter(|&&t| t >= start && t - start < window)
                .count()
        })
        .max()
        .unwrap_or(0);
    (going - left, most_in_a_window, last)
}

#[test]
fn a_real_scale_down_completes_in_a_few_windows() {
    let five_s = Duration::from_secs(5);
    let window = Duration::from_secs(600);
    // 30 of 100: 10, then 9, 8 and 3 as the Node count falls: 4 windows.
    let (deleted, most, last) =
        simulate(&NodeDeletionGuard::default(), 100, 30, five_s, 10 * window);
    assert_eq!(deleted, 30);
    assert_eq!(most, 10, "never more than the budget in a window");
    assert_eq!(
        last,
        Some(3 * window),
        "the last 3 go at the start of the 4th window"
    );

    // Half of a small cluster: 2 of 4, one a window.
    let (deleted, most, last) = simulate(&NodeDeletionGuard::default(), 4, 2, five_s, 10 * window);
    assert_eq!((deleted, most, last), (2, 1, Some(window)));
}

#[test]
fn every_instance_gone_at_once_deletes_nothing_for_ever() {
    let day = Duration::from_secs(24 * 3600);
    let (deleted, _, _) = simulate(
        &NodeDeletionGuard::default(),
        100,
        100,
        Duration::from_secs(5),
        day,
    );
    assert_eq!(deleted, 0);
    // Without the stop the budget still bounds each window: 10 of 100 in the first, and a
    // tenth of what is left in each later one.
    let (deleted, most, _) = simulate(
        &NodeDeletionGuard::On(limits("stop=off")),
        100,
        100,
        Duration::from_secs(5),
        Duration::from_secs(599),
    );
    assert_eq!((deleted, most), (10, 10));
    // And Go's behaviour, off: everything in the first pass.
    let (deleted, most, last) = simulate(
        &NodeDeletionGuard::Off,
        100,
        100,
        Duration::from_secs(5),
        day,
    );
    assert_eq!((deleted, most, last), (100, 100, Some(Duration::ZERO)));
}

#[test]
fn trips_and_resets() {
    assert_eq!(transition(None, None), Transition::Unchanged);
    assert_eq!(
        transition(None, Some("budget")),
        Transition::Tripped("budget")
    );
    assert_eq!(
        transition(Some("budget"), Some("budget")),
        Transition::Unchanged
    );
    assert_eq!(
        transition(Some("budget"), Some("stop")),
        Transition::Tripped("stop")
    );
    assert_eq!(transition(Some("stop"), None), Transition::Reset);
}
