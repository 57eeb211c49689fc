# What the test command needs on the machine, in one place for scripts/test.sh and .ci/run
# (sourced, under `set -euo pipefail`). `ensure_prereqs` installs what is missing — the
# Debian packages as root (or with sudo when it asks no password), rustup's components and
# the arm64 target — and otherwise stops with one line naming what to install.
#
# Why each package: the image tests build and run OCI images with buildah (no Docker engine
# needed); the cluster tier (ccm_test::Cluster) runs containerd, runc, the CNI plugins and
# iptables in network namespaces (iproute2, util-linux), and builds its pause image with gcc.
# The upstream e2e specs' test image (agnhost) carries the shell tools they run in Pods,
# copied from these packages (crates/ccm-test/e2e-upstream/build.sh). The images are
# multi-arch: the arm64 binaries are cross-linked statically with Debian's aarch64 gcc and
# glibc, and run under qemu-user-static to prove them (scripts/images.sh).

PREREQ_PACKAGES=(buildah containerd runc containernetworking-plugins iptables iproute2 util-linux gcc libc6-dev
  busybox-static netcat-openbsd curl wget dash gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static file)

prereq_die() {
  echo "prerequisites: $*" >&2
  exit 1
}

prereq_need() {
  command -v "$1" >/dev/null 2>&1 || prereq_die "'$1' is required but not installed: $2"
}

# The Debian packages not installed yet, one per line.
prereq_missing_packages() {
  local package
  for package in "${PREREQ_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || echo "$package"
  done
}

prereq_install_packages() {
  command -v dpkg-query >/dev/null 2>&1 || return 0 # not Debian: the checks below name what is missing
  local missing
  mapfile -t missing < <(prereq_missing_packages)
  [ ${#missing[@]} -gt 0 ] || return 0
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    sudo -n true 2>/dev/null \
      || prereq_die "run as root, or install them first: sudo apt-get install ${missing[*]}"
    sudo="sudo -n"
  fi
  echo "prerequisites: installing ${missing[*]} (Debian packages)" >&2
  # A fresh machine may have no package lists yet: fetch them once if the install fails.
  $sudo apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q "${missing[@]}" >/dev/null; } \
    || prereq_die "apt-get could not install ${missing[*]}"
}

# ensure_prereqs [--quick]: --quick needs only Rust with rustfmt and clippy.
ensure_prereqs() {
  prereq_need cargo "install Rust with rustup (https://rustup.rs)"
  prereq_need rustup "install Rust with rustup (https://rustup.rs): it adds rustfmt, clippy and the arm64 target"
  local component
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component"
  done
  [ "${1:-}" = --quick ] && return 0

  prereq_need go "install Go 1.26 or newer (the control-plane binaries are built from Go modules)"
  prereq_install_packages
  local command
  prereq_need buildah "apt-get install buildah: the image tests build and run OCI images"
  for command in containerd runc ctr iptables ip unshare nsenter gcc; do
    prereq_need "$command" "apt-get install ${PREREQ_PACKAGES[*]}: the cluster tier runs kubelets and containerd"
  done
  [ -x /usr/lib/cni/bridge ] || prereq_die "/usr/lib/cni/bridge is missing: apt-get install containernetworking-plugins"
  for command in aarch64-linux-gnu-gcc aarch64-linux-gnu-strip qemu-aarch64-static file; do
    prereq_need "$command" "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static file: the arm64 images"
  done
  [ -r /usr/aarch64-linux-gnu/lib/libc.a ] \
    || prereq_die "/usr/aarch64-linux-gnu/lib/libc.a is missing: apt-get install libc6-dev-arm64-cross"
  # The arm64 images' binaries are cross-compiled (scripts/images.sh).
  rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
    || rustup target add aarch64-unknown-linux-gnu
  rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
    || prereq_die "the Rust target aarch64-unknown-linux-gnu is missing: rustup target add aarch64-unknown-linux-gnu"
}
