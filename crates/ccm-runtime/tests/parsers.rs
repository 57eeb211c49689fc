//! Property tests of the flag parsers: Go durations and the worker-count bounds. Whatever
//! the input, they never panic, and what they accept means what Go means by it.

use std::time::Duration;

use ccm_runtime::app::Options;
use ccm_runtime::app::options::MAX_WORKERS;
use ccm_runtime::flags::duration::{format_go_duration, parse_go_duration};
use proptest::prelude::*;

/// Within a microsecond: the parser adds components as floating point, so `1.001s` may come
/// back a nanosecond short.
fn close(a: Duration, b: Duration) -> bool {
    a.abs_diff(b) <= Duration::from_micros(1)
}

/// Text made of what durations are made of.
fn durationish() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[0-9]{1,25}",
            prop::sample::select(vec![
                ".", "+", "-", "h", "m", "s", "ms", "us", "µs", "μs", "ns", " ", "e", "x", "0",
            ])
            .prop_map(str::to_owned),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No input panics; what parses is finite and at most the parser's bound.
    #[test]
    fn durations_never_panic(s in prop_oneof![any::<String>(), durationish()]) {
        if let Ok(d) = parse_go_duration(&s) {
            prop_assert!(d <= Duration::from_secs(1_000_000_000_000), "{s:?}: {d:?}");
        } else {
            let e = parse_go_duration(&s).unwrap_err();
            prop_assert!(e.starts_with("invalid duration "), "{e}");
        }
    }

    /// Go's spelling of hours, minutes, seconds and fractions means their sum.
    #[test]
    fn durations_add_their_components(
        h in 0u64..100_000,
        m in 0u64..1000,
        s in 0u64..1000,
        ms in 0u64..1000,
        us in 0u64..1000,
        ns in 0u64..1000,
        keep in prop::collection::vec(any::<bool>(), 6),
    ) {
        let parts = [(h, "h", 3_600_000_000_000u64), (m, "m", 60_000_000_000), (s, "s", 1_000_000_000),
            (ms, "ms", 1_000_000), (us, "us", 1_000), (ns, "ns", 1)];
        let (mut text, mut want) = (String::new(), Duration::ZERO);
        for ((value, unit, nanos), keep) in parts.into_iter().zip(keep) {
            if keep {
                text.push_str(&format!("{value}{unit}"));
                want += Duration::from_nanos(value * nanos);
            }
        }
        if text.is_empty() {
            prop_assert!(parse_go_duration("").is_err());
        } else {
            let got = parse_go_duration(&text).unwrap();
            prop_assert!(close(got, want), "{text}: {got:?} != {want:?}");
        }
    }

    /// A decimal fraction of a unit: `1.5h`, `0.25s`.
    #[test]
    fn durations_take_fractions(whole in 0u64..10_000, frac in "[0-9]{1,6}", unit in prop::sample::select(vec![("h", 3600.0), ("m", 60.0), ("s", 1.0), ("ms", 1e-3)])) {
        let text = format!("{whole}.{frac}{}", unit.0);
        let value: f64 = format!("{whole}.{frac}").parse().unwrap();
        let got = parse_go_duration(&text).unwrap();
        prop_assert!(close(got, Duration::from_secs_f64(value * unit.1)), "{text}: {got:?}");
    }

    /// What `--help` prints reads back.
    #[test]
    fn durations_round_trip_through_go_formatting(millis in 0u64..1_000_000_000) {
        let d = Duration::from_millis(millis);
        let text = format_go_duration(d);
        let back = parse_go_duration(&text).unwrap();
        prop_assert!(close(back, d), "{text}: {back:?} != {d:?}");
    }

    /// Negative durations are refused, as flags here cannot take them.
    #[test]
    fn negative_durations_are_refused(text in "-[0-9]{1,4}(h|m|s|ms)") {
        prop_assert!(parse_go_duration(&text).is_err());
    }

    /// A worker count is accepted exactly within its bounds, and an error names the flag.
    #[test]
    fn worker_counts_are_bounded(
        flag in prop::sample::select(vec![
            ("--concurrent-service-syncs", 1),
            ("--concurrent-node-syncs", 1),
            ("--concurrent-node-status-updates", 0),
        ]),
        n in prop_oneof![any::<i32>(), -2i32..10_003],
    ) {
        let (flag, min) = flag;
        let options = Options::from_args(["ccm", "--cloud-provider=x", &format!("{flag}={n}")]).unwrap();
        match options.validate() {
            Ok(()) => prop_assert!((min..=MAX_WORKERS).contains(&n)),
            Err(e) => {
                prop_assert!(!(min..=MAX_WORKERS).contains(&n));
                prop_assert_eq!(
                    e.to_string(),
                    format!("{flag}: must be between {min} and {MAX_WORKERS}, got {n}")
                );
            }
        }
    }
}
