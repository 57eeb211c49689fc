#!/usr/bin/env bash
# The control-plane build lives in the ccm-test crate (crates/ccm-test/control-plane/), so
# that ccm-test from crates.io carries it; this path is kept for scripts and habits.
exec "$(dirname "${BASH_SOURCE[0]}")/../../crates/ccm-test/control-plane/build.sh" "$@"
