#!/usr/bin/env bash
# Builds (or finds) the control-plane binaries used by the real-apiserver tests:
# kube-apiserver and kubectl from k8s.io/kubernetes, and etcd, in the envtest
# layout (one folder holding `kube-apiserver`, `etcd`, `kubectl`); and, for the
# cluster tier, the node and controller binaries of the same Kubernetes version
# beside them (`kubelet`, `kube-proxy`, `kube-scheduler`,
# `kube-controller-manager`). Only the binaries missing from the folder are built.
#
# Prints ONLY that folder's path on stdout (progress goes to stderr), so:
#
#     export KUBEBUILDER_ASSETS="$(tools/control-plane/build.sh)"
#
# - If TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD (and optionally
#   TEST_ASSET_KUBECTL) name executables, nothing is built and the folder of
#   kube-apiserver is printed (the test harness reads TEST_ASSET_* itself).
# - Else if KUBEBUILDER_ASSETS names a folder holding kube-apiserver and etcd
#   (for example from `setup-envtest`), nothing is built and it is printed.
# - Else the binaries are built into
#   ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/control-plane/k8s-vX.Y.Z-etcd-vA.B.C/
#   unless that folder is already complete (a stamp file is written last, so a
#   half-finished build is redone).
#
# With --wait, builds nothing: waits until the folder is complete (built by another
# build.sh, which holds its lock meanwhile), then prints it. A CI lane that builds other Go
# programs sharing these packages (Kubernetes' e2e.test) waits so, rather than compile the
# same packages at the same time: Go's build cache does not share work in progress.
#
# Needs Go (see go.mod) and the Go module proxy. Go's own caches
# ($(go env GOMODCACHE), $(go env GOCACHE)) make a second build fast.
# See docs/control-plane.md.
set -euo pipefail

readonly K8S_VERSION=v1.36.3
readonly ETCD_VERSION=v3.6.16

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

wait_only=false
case "${1:-}" in
--wait) wait_only=true ;;
"") ;;
*)
	printf 'control-plane: ERROR: unknown argument %q (only --wait)\n' "$1" >&2
	exit 2
	;;
esac

log() { printf 'control-plane: %s\n' "$*" >&2; }
die() {
	printf 'control-plane: ERROR: %s\n' "$*" >&2
	exit 1
}

# The cluster tier's binaries, all from k8s.io/kubernetes at $K8S_VERSION.
readonly CLUSTER_BINARIES=(kubelet kube-proxy kube-scheduler kube-controller-manager)

has_all() { # has_all DIR
	local bin
	for bin in kube-apiserver etcd kubectl "${CLUSTER_BINARIES[@]}"; do
		[[ -x "$1/$bin" ]] || return 1
	done
}

# 1. Explicit binaries (kubectl is optional: the tests do not need it).
if [[ -n "${TEST_ASSET_KUBE_APISERVER:-}" || -n "${TEST_ASSET_ETCD:-}" || -n "${TEST_ASSET_KUBECTL:-}" ]]; then
	for var in TEST_ASSET_KUBE_APISERVER TEST_ASSET_ETCD; do
		[[ -n "${!var:-}" ]] || die "$var is not set, but other TEST_ASSET_* variables are; set TEST_ASSET_KUBE_APISERVER and TEST_ASSET_ETCD (and optionally TEST_ASSET_KUBECTL), or none"
		[[ -x "${!var}" ]] || die "$var=${!var} is not an executable file"
	done
	if [[ -n "${TEST_ASSET_KUBECTL:-}" && ! -x "$TEST_ASSET_KUBECTL" ]]; then
		die "TEST_ASSET_KUBECTL=$TEST_ASSET_KUBECTL is not an executable file"
	fi
	log "using TEST_ASSET_* binaries; building nothing"
	dirname "$TEST_ASSET_KUBE_APISERVER"
	exit 0
fi

# 2. An envtest assets folder.
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
	if [[ -x "$KUBEBUILDER_ASSETS/kube-apiserver" && -x "$KUBEBUILDER_ASSETS/etcd" ]]; then
		[[ -x "$KUBEBUILDER_ASSETS/kubectl" ]] || log "note: no kubectl in $KUBEBUILDER_ASSETS"
		log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS; building nothing"
		printf '%s\n' "$KUBEBUILDER_ASSETS"
		exit 0
	fi
	die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS does not hold executable kube-apiserver and etcd; unset it to build them"
fi

# 3. Our own cache folder.
cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}"
out="$cache/control-plane/k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
stamp="$out/.complete"

if [[ -f "$stamp" ]] && has_all "$out"; then
	log "binaries already built in $out"
	printf '%s\n' "$out"
	exit 0
fi

if $wait_only; then
	log "waiting for another build.sh to build $out"
	until [[ -f "$stamp" ]] && has_all "$out"; do
		sleep 5
	done
	log "built by another build.sh in $out"
	printf '%s\n' "$out"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $here/go.mod); install Go, or set KUBEBUILDER_ASSETS to a folder with kube-apiserver, etcd and kubectl (e.g. from setup-envtest)"

log "building Kubernetes $K8S_VERSION (kube-apiserver, kubectl, ${CLUSTER_BINARIES[*]}) and etcd $ETCD_VERSION into $out"
log "a cold build downloads the modules and compiles for several minutes"

mkdir -p "$out" || die "cannot create $out"
# One build at a time per folder; a second caller waits, then reuses it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock" || die "cannot create $out/.lock"
	flock 9 || die "cannot lock $out/.lock"
	if [[ -f "$stamp" ]] && has_all "$out"; then
		log "binaries built meanwhile by another build.sh in $out"
		printf '%s\n' "$out"
		exit 0
	fi
fi
rm -f "$stamp"
# Build into a scratch folder beside $out and move each binary in when done,
# so no half-written binary is ever at its final path.
tmp="$(mktemp -d "$out/.build.XXXXXX")" || die "cannot create a scratch folder in $out"
trap 'rm -rf "$tmp"' EXIT

export GOWORK=off CGO_ENABLED=0
# Never switch to another Go toolchain behind the user's back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum files pin every module; refuse to change them.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

ldflags_k8s="-s -w"
ldflags_k8s+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${K8S_VERSION#v}")"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
ldflags_k8s+=" -X k8s.io/component-base/version.gitTreeState=clean"

build() { # build MODULE_DIR OUTPUT PACKAGE LDFLAGS
	local start=$SECONDS
	log "go build $3"
	(cd "$1" && go build -trimpath -tags=selinux,notest,grpcnotrace \
		-ldflags "$4" -o "$tmp/$2" "$3") >&2 ||
		die "building $3 failed (see the Go output above)"
	mv -f "$tmp/$2" "$out/$2" || die "cannot move $2 into $out"
	log "built $2 in $((SECONDS - start))s ($(du -h "$out/$2" | cut -f1))"
}

# A folder from before the cluster tier keeps its three binaries: only what is
# missing is built (Go's build cache makes the shared packages cheap).
for bin in kube-apiserver kubectl "${CLUSTER_BINARIES[@]}"; do
	[[ -x "$out/$bin" ]] || build "$here" "$bin" "k8s.io/kubernetes/cmd/$bin" "$ldflags_k8s"
done
[[ -x "$out/etcd" ]] || build "$here/etcd" etcd go.etcd.io/etcd/server/v3 "-s -w"

has_all "$out" || die "build finished but $out does not hold every binary"
"$out/kube-apiserver" --version >&2 || die "$out/kube-apiserver does not run"
"$out/etcd" --version >&2 || die "$out/etcd does not run"
"$out/kubelet" --version >&2 || die "$out/kubelet does not run"

printf 'kubernetes=%s\netcd=%s\n' "$K8S_VERSION" "$ETCD_VERSION" >"$stamp"
log "done"
printf '%s\n' "$out"
