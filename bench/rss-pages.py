#!/usr/bin/env python3
"""Where a CCM's resident memory is, page by page (docs/benchmarks.md, "Peak RSS of the
shipped binary").

  bench/rss-pages.py wrap BINARY OUT   # an exec wrapper for `ccm-bench --rust-ccm`, see below
  bench/rss-pages.py sample PID OUT    # samples PID once a second until it ends
  bench/rss-pages.py report BINARY OUT # resident bytes by section and by crate

`wrap` prints a shell script that starts the sampler on its own PID and then execs BINARY,
so the sampled process is the one ccm-bench measures:

  bench/rss-pages.py wrap target/x86_64-unknown-linux-gnu/release/fake-cloud-controller-manager \\
      /tmp/pages.json > /tmp/wrap.sh && chmod +x /tmp/wrap.sh
  cargo run -p ccm-bench --release -- --nodes 1000 --workers 8 --qps 100000 --burst 100000 \\
      --ccm rust --rust-ccm /tmp/wrap.sh
  bench/rss-pages.py report target/x86_64-unknown-linux-gnu/release/fake-cloud-controller-manager /tmp/pages.json

The sample kept is the last one: resident file pages only grow, and it holds VmHWM.
Reading /proc/PID/pagemap needs no privilege for the present bits used here.
"""
import collections
import json
import os
import re
import struct
import subprocess
import sys
import time


def sample(pid, out):
    while os.path.exists(f"/proc/{pid}/maps"):
        try:
            pages = {}
            with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/pagemap", "rb") as pm:
                for line in maps:
                    p = line.split()
                    if len(p) < 6:
                        continue
                    lo, hi = (int(x, 16) for x in p[0].split("-"))
                    offset = int(p[2], 16)
                    pm.seek(lo // 4096 * 8)
                    data = pm.read((hi - lo) // 4096 * 8)
                    present = [
                        offset + i * 4096
                        for i in range(len(data) // 8)
                        if struct.unpack_from("<Q", data, i * 8)[0] >> 63 & 1
                    ]
                    pages.setdefault(p[5], []).extend(present)
            with open(f"/proc/{pid}/status") as st:
                status = dict(l.split(":", 1) for l in st if ":" in l)
            keep = ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem")
            result = {
                "status": {k: status[k].strip() for k in keep if k in status},
                "smaps": open(f"/proc/{pid}/smaps").read(),
                "pages": pages,
            }
            with open(out + ".tmp", "w") as f:
                json.dump(result, f)
            os.replace(out + ".tmp", out)
        except OSError:
            pass
        time.sleep(1)


def crate_of(symbol):
    m = re.findall(r"([a-z_][a-z0-9_]*)::", symbol)
    return m[0] if m else "(C and unnamed)"


def report(binary, out):
    d = json.load(open(out))
    print("at the last sample:", d["status"])
    path = os.path.realpath(binary)
    resident = set(next(v for k, v in d["pages"].items() if os.path.realpath(k) == path))
    sections = []
    for line in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and int(m[2], 16):
            sections.append((m[1], int(m[2], 16), int(m[3], 16), int(m[4], 16)))
    by_section = collections.Counter()
    for page in resident:
        for name, _, off, size in sections:
            if off <= page < off + size:
                by_section[name] += 4096
                break
    print("\nresident kB by section (of its size)")
    for name, _, _, size in sections:
        if by_section[name]:
            print(f"  {name:22} {by_section[name] // 1024:6} of {size // 1024}")
    text = next(s for s in sections if s[0] == ".text")
    delta = text[1] - text[2]
    res, total = collections.Counter(), collections.Counter()
    nm = subprocess.run(["nm", "-S", "-C", binary], capture_output=True, text=True).stdout
    for line in nm.splitlines():
        p = line.split(None, 3)
        if len(p) < 4 or p[2] not in "tTwW":
            continue
        addr, size, crate = int(p[0], 16), int(p[1], 16), crate_of(p[3])
        total[crate] += size
        x, end = addr - delta, addr - delta + size
        while x < end:
            page_end = min(end, x // 4096 * 4096 + 4096)
            if x // 4096 * 4096 in resident:
                res[crate] += page_end - x
            x = page_end
    print("\n.text kB by crate: resident of total")
    for crate, n in res.most_common(40):
        print(f"  {crate:30} {n // 1024:6} of {total[crate] // 1024}")


def wrap(binary, out):
    print(f"""#!/bin/sh
setsid python3 {os.path.abspath(__file__)} sample $$ {out} </dev/null >/dev/null 2>&1 &
exec {os.path.abspath(binary)} "$@"
""")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("sample", "report", "wrap"):
        sys.exit(__doc__)
    {"sample": lambda: sample(int(sys.argv[2]), sys.argv[3]),
     "report": lambda: report(sys.argv[2], sys.argv[3]),
     "wrap": lambda: wrap(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
