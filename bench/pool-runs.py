#!/usr/bin/env python3
"""Issue 43's four figures over several runs of the benchmark (docs/benchmarks.md, table 16).

  bench/pool-runs.py RESULTS.json [RESULTS.json ...]

Each file is a `target/bench/results.json` that `ccm-bench --repeat N` wrote (copy it away
between runs: each run overwrites it). For node_init's seconds, the driver's creates, the
API server + etcd CPU per Node and the peak RSS it prints, over every repeat of every file:

- the ratio of the medians (ours over Go's), as the benchmark's own table gives it per run;
- the median of the paired ratios: repeat i of ours over repeat i of Go's in the same file.
  Repeats alternate (ours, Go's, Go's, ours, ...), so a pair ran minutes apart on the same
  machine, and a slow spell of the machine falls on both halves of a pair rather than on
  one CCM's median.
"""
import json
import statistics
import sys

FIGURES = {
    "node_init": lambda run, s: s["seconds"],
    "creates": lambda run, s: s["create_seconds"],
    "server_ms_per_node": lambda run, s: s["server_cpu_seconds"] * 1000 / s["objects"],
    "peak_rss_mib": lambda run, s: run["peak_rss_mib"],
}
TARGETS = {"node_init": 0.90, "creates": 1.05, "server_ms_per_node": 0.90, "peak_rss_mib": 0.25}


def node_init(run):
    scenarios = run["scenarios"]
    if isinstance(scenarios, dict):
        return scenarios["node_init"]
    return next(s for s in scenarios if s.get("name") == "node_init")


def main(paths):
    values = {}  # (figure, ccm) -> [value]
    paired = {}  # figure -> [ours / Go's]
    for path in paths:
        with open(path) as f:
            runs = {(r["name"], r["repeat"]): r for r in json.load(f)["results"]}
        for (ccm, repeat), run in sorted(runs.items()):
            for figure, get in FIGURES.items():
                values.setdefault((figure, ccm), []).append(get(run, node_init(run)))
            go = runs.get(("go", repeat))
            if ccm == "rust" and go is not None:
                for figure, get in FIGURES.items():
                    ours, theirs = get(run, node_init(run)), get(go, node_init(go))
                    if theirs:
                        paired.setdefault(figure, []).append(ours / theirs)
    print("| figure | ours (median) | Go's (median) | ratio of medians | median of paired ratios (range) | target |")
    print("|---|---:|---:|---:|---:|---|")
    for figure in FIGURES:
        ours = statistics.median(values[(figure, "rust")])
        theirs = statistics.median(values[(figure, "go")])
        pairs = sorted(paired[figure])
        print(
            f"| {figure} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.3f} | "
            f"{statistics.median(pairs):.3f} ({pairs[0]:.2f}–{pairs[-1]:.2f}, {len(pairs)} pairs) | "
            f"≤ {TARGETS[figure]} |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
