#!/usr/bin/env python3
"""Lists the public API of a crate from its rustdoc HTML, one item or member a line.

    scripts/public-api.py ccm_core            # print the list (after `cargo doc`)
    scripts/public-api.py ccm_core --check    # diff against docs/public-api/ccm_core.txt
    scripts/public-api.py ccm_core --write    # update that file

The list is what rustdoc documents: every item page (modules, structs, enums, traits,
functions, type aliases, constants, macros) and, on each page, the inherent methods,
associated items, fields and variants; trait implementations are left out. Re-exports
that rustdoc inlines (ccm-core's `provider` and `app`) count as the crate's own.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

KINDS = {
    "struct": "struct", "enum": "enum", "trait": "trait", "fn": "fn", "type": "type",
    "constant": "const", "static": "static", "macro": "macro", "union": "union",
    "attr": "attr", "derive": "derive", "traitalias": "traitalias",
}
# Sections after which a page lists implementations of other traits, not its own API.
STOP = re.compile(
    r'id="(trait-implementations|synthetic-implementations|blanket-implementations|implementors|dyn-compatibility|object-safety)"'
)
MEMBER = re.compile(
    r'id="(method|tymethod|structfield|variant|associatedconstant|associatedtype)\.([A-Za-z0-9_]+)"'
)


def doc_dir() -> Path:
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"], text=True))
    return Path(meta["target_directory"]) / "doc"


def items(crate: str) -> list[str]:
    root = doc_dir() / crate
    if not root.is_dir():
        sys.exit(f"public-api: {root} not found: run `cargo doc -p {crate.replace('_', '-')} --no-deps --all-features` first")
    out = set()
    for page in sorted(root.rglob("*.html")):
        rel = page.relative_to(root)
        module = "::".join([crate, *rel.parts[:-1]])
        name = rel.name[:-len(".html")]
        if name == "index":
            out.add(f"mod {module}")
            continue
        kind, _, item = name.partition(".")
        if kind not in KINDS:
            continue  # all.html, sidebar files, redirects
        html = page.read_text(encoding="utf-8", errors="replace")
        if "<title>Redirection</title>" in html:
            continue
        path = f"{module}::{item}"
        out.add(f"{KINDS[kind]} {path}")
        stop = STOP.search(html)
        own = html[: stop.start()] if stop else html
        for member_kind, member in MEMBER.findall(own):
            label = {"tymethod": "method", "structfield": "field"}.get(member_kind, member_kind)
            out.add(f"{label} {path}::{member}")
    return sorted(out, key=lambda line: (line.split(" ", 1)[1], line))


def main() -> None:
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    crate = args[0]
    listing = items(crate)
    body = "".join(f"{line}\n" for line in listing)
    expected = Path(__file__).resolve().parent.parent / "docs" / "public-api" / f"{crate}.txt"
    if "--write" in args:
        expected.write_text(body)
        print(f"public-api: wrote {len(listing)} items to {expected}", file=sys.stderr)
    elif "--check" in args:
        old = expected.read_text() if expected.exists() else ""
        if old != body:
            import difflib
            sys.stdout.writelines(difflib.unified_diff(
                old.splitlines(True), body.splitlines(True), str(expected), "rustdoc"))
            sys.exit(f"public-api: the public API of {crate} changed; if that is meant, run "
                     f"`scripts/public-api.py {crate} --write` and commit the file")
        print(f"public-api: {crate}: {len(listing)} items, as recorded", file=sys.stderr)
    else:
        sys.stdout.write(body)


if __name__ == "__main__":
    main()
