#!/usr/bin/env bash
# Builds (or finds) what running Kubernetes' own e2e suite against a cluster
# needs, for the specs scripts/e2e-upstream.sh runs (its --suite choices):
#
#   e2e.test      `go test -c k8s.io/kubernetes/test/e2e` at $K8S_VERSION,
#                 static, with the version stamped in (`e2e.test --version`)
#   agnhost.tar   OCI archive of registry.k8s.io/e2e-test-images/agnhost:<tag>
#                 (the tag of test/utils/image/manifest.go at $K8S_VERSION),
#                 FROM scratch: /agnhost built from the module's
#                 test/images/agnhost, plus the tools the specs run inside
#                 pods through `kubectl exec ... /bin/sh -c`: sh (dash),
#                 curl, wget (GNU: busybox's has no working -T) and nc
#                 (netcat-openbsd: busybox's has no -u/-v), copied from this
#                 Debian host with their shared libraries; plus busybox for
#                 the small commands (ls, cat, sleep, ...). Not busybox's sh:
#                 Debian's busybox-static runs its own applets in preference
#                 to PATH, so `nc`/`wget` in `sh -c` would be busybox's.
#   pause.tar     OCI archive of registry.k8s.io/pause:<tag> (the tag of
#                 imageutils.GetPauseImageName() at $K8S_VERSION, which the
#                 Multi-AZ specs run as their Pods' container): upstream's
#                 build/pause/linux/pause.c of the same module, gcc -static,
#                 FROM scratch, user 65535 as upstream's
#   images.txt    one line per archive: `<file> <image reference>`
#
# into ${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/e2e-upstream/k8s-vX.Y.Z/ unless
# that folder is already complete (a stamp file is written last, so a
# half-finished build is redone; only what is missing is built).
#
# Prints ONLY that folder's path on stdout (progress goes to stderr), so:
#
#     e2e="$(crates/ccm-test/e2e-upstream/build.sh)"
#     "$e2e/e2e.test" --version
#     ctr -n k8s.io images import "$e2e/agnhost.tar"   # on every node
#
# Needs Go (see go.mod) and the Go module proxy; and, for the images, root, gcc,
# buildah, and the Debian packages busybox-static (or busybox), dash, curl,
# wget and netcat-openbsd. Go's own caches ($(go env GOMODCACHE), $(go env GOCACHE))
# make a second build fast.
set -euo pipefail

readonly K8S_VERSION=v1.36.3
# registry.k8s.io/e2e-test-images/agnhost tag in test/utils/image/manifest.go
# of k8s.io/kubernetes $K8S_VERSION (checked against `e2e.test --list-images`).
readonly AGNHOST_TAG=2.63.0
readonly AGNHOST_IMAGE="registry.k8s.io/e2e-test-images/agnhost:$AGNHOST_TAG"
# registry.k8s.io/pause tag in the same file (configs[Pause]).
readonly PAUSE_TAG=3.10.2
readonly PAUSE_IMAGE="registry.k8s.io/pause:$PAUSE_TAG"
# Bumped whenever what this script puts in the folder changes, so that a cached folder
# built by an older recipe is not taken for complete.
readonly RECIPE=3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

log() { printf 'e2e-upstream: %s\n' "$*" >&2; }
die() {
	printf 'e2e-upstream: ERROR: %s\n' "$*" >&2
	exit 1
}

cache="${CCM_CACHE_DIR:-${HOME:?HOME is not set}/.cache/ccm-rs}"
out="$cache/e2e-upstream/k8s-$K8S_VERSION-r$RECIPE"
stamp="$out/.complete"

has_all() { # has_all DIR
	[[ -x "$1/e2e.test" && -f "$1/agnhost.tar" && -f "$1/pause.tar" && -f "$1/images.txt" ]]
}

if [[ -f "$stamp" ]] && has_all "$out"; then
	log "already built in $out"
	printf '%s\n' "$out"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "Go is not installed (need the version in $here/go.mod)"

mkdir -p "$out" || die "cannot create $out"
# One build at a time per folder; a second caller waits, then reuses it.
if command -v flock >/dev/null 2>&1; then
	exec 9>"$out/.lock" || die "cannot create $out/.lock"
	flock 9 || die "cannot lock $out/.lock"
	if [[ -f "$stamp" ]] && has_all "$out"; then
		log "built meanwhile by another build.sh in $out"
		printf '%s\n' "$out"
		exit 0
	fi
fi
rm -f "$stamp"
# Build into a scratch folder beside $out and move each result in when done,
# so no half-written file is ever at its final path.
tmp="$(mktemp -d "$out/.build.XXXXXX")" || die "cannot create a scratch folder in $out"
image_id="" ctr=""
cleanup() {
	if [[ -n "$ctr" ]]; then
		buildah --storage-driver vfs rm "$ctr" >/dev/null 2>&1 || true
	fi
	if [[ -n "$image_id" ]]; then
		buildah --storage-driver vfs rmi "$image_id" >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

export GOWORK=off CGO_ENABLED=0
# Never switch to another Go toolchain behind the user's back.
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
# The committed go.sum pins every module; refuse to change it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"

# ---- e2e.test ---------------------------------------------------------------

# The flags of the upstream build (hack/lib/golang.sh: -trimpath, tags
# selinux,notest,grpcnotrace, -s -w and the version), which are also
# crates/ccm-test/control-plane/build.sh's, so Go's build cache is shared.
ldflags_k8s="-s -w"
ldflags_k8s+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMajor=$(cut -d. -f1 <<<"${K8S_VERSION#v}")"
ldflags_k8s+=" -X k8s.io/component-base/version.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
ldflags_k8s+=" -X k8s.io/component-base/version.gitTreeState=clean"

if [[ ! -x "$out/e2e.test" ]]; then
	log "building e2e.test of Kubernetes $K8S_VERSION into $out"
	log "with an empty Go build cache this compiles ~2,900 packages (about 6 minutes on 2 cores)"
	start=$SECONDS
	(cd "$here" && go test -c -trimpath -tags=selinux,notest,grpcnotrace \
		-ldflags "$ldflags_k8s" -o "$tmp/e2e.test" k8s.io/kubernetes/test/e2e) >&2 ||
		die "building k8s.io/kubernetes/test/e2e failed (see the Go output above)"
	"$tmp/e2e.test" --version >&2 || die "the new e2e.test does not run"
	mv -f "$tmp/e2e.test" "$out/e2e.test" || die "cannot move e2e.test into $out"
	log "built e2e.test in $((SECONDS - start))s ($(du -h "$out/e2e.test" | cut -f1))"
fi

# The suite itself says which images it uses; ours must be among them.
# (Read whole first: `grep -q` in a pipe would stop reading at the match, and with
# pipefail the writer's SIGPIPE would fail the check at random, as the list's order is.)
images="$("$out/e2e.test" --list-images 2>/dev/null)" ||
	die "$out/e2e.test --list-images failed"
grep -qxF "$AGNHOST_IMAGE" <<<"$images" ||
	die "$out/e2e.test --list-images does not list $AGNHOST_IMAGE; update AGNHOST_TAG in $0"
grep -qxF "$PAUSE_IMAGE" <<<"$images" ||
	die "$out/e2e.test --list-images does not list $PAUSE_IMAGE; update PAUSE_TAG in $0"

# ---- agnhost image -----------------------------------------------------------

# ldd-copy BINARY DEST: copies BINARY to ROOTFS/DEST and every shared library
# it loads (and the loader) to the same folder under ROOTFS/usr, whose
# lib and lib64 are what /lib and /lib64 point to (a merged-/usr layout).
ldd_copy() {
	local bin="$1" dest="$2" line lib dir
	install -D -m 0755 "$bin" "$rootfs/$dest" || die "cannot copy $bin"
	while read -r line; do
		case "$line" in
		*"=> not found"*) die "$bin needs a library that is not installed: $line" ;;
		*"=> /"*) lib="${line#*=> }" lib="${lib%% (*}" ;;
		/*) lib="${line%% (*}" ;;
		*) continue ;;
		esac
		dir="$(readlink -f "$(dirname "$lib")")" || die "cannot resolve $lib"
		case "$dir" in
		/usr/*) dir="${dir#/}" ;;
		*) dir="usr$dir" ;;
		esac
		[[ -e "$rootfs/$dir/$(basename "$lib")" ]] ||
			install -D -m 0755 "$(readlink -f "$lib")" "$rootfs/$dir/$(basename "$lib")" ||
			die "cannot copy $lib"
	done < <(ldd "$bin" 2>/dev/null || true)
}

find_tool() { # find_tool NAME DEBIAN_PACKAGE [ALTERNATIVE_NAME...]
	local name
	for name in "$1" "${@:3}"; do
		if command -v "$name" >/dev/null 2>&1; then
			command -v "$name"
			return
		fi
	done
	die "no $1 on this machine: apt-get install $2"
}

if [[ ! -f "$out/agnhost.tar" ]]; then
	[[ "$(id -u)" == 0 ]] || die "building the agnhost image needs root (buildah with the vfs storage driver)"
	command -v buildah >/dev/null 2>&1 || die "buildah is not installed: apt-get install buildah"
	command -v ldd >/dev/null 2>&1 || die "ldd is not installed: apt-get install libc-bin"
	busybox="$(find_tool busybox busybox-static)"
	dash="$(find_tool dash dash)"
	curl="$(find_tool curl curl)"
	wget="$(find_tool wget wget)"
	nc="$(find_tool nc.openbsd netcat-openbsd)"
	[[ "$("$wget" --version 2>/dev/null)" == *"GNU Wget"* ]] || die "$wget is not GNU Wget: apt-get install wget"

	log "building $AGNHOST_IMAGE into $out/agnhost.tar"
	start=$SECONDS
	rootfs="$tmp/agnhost/rootfs"
	mkdir -p "$rootfs"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,uploads} || die "cannot create $rootfs"
	install -d -m 1777 "$rootfs/tmp"
	for d in bin sbin lib lib64; do ln -s "usr/$d" "$rootfs/$d"; done

	# /agnhost, as test/images/agnhost/Makefile builds it (static, its VERSION).
	(cd "$here" && go build -trimpath -ldflags "-s -w -X main.Version=$AGNHOST_TAG" \
		-o "$rootfs/agnhost" k8s.io/kubernetes/test/images/agnhost) >&2 ||
		die "building k8s.io/kubernetes/test/images/agnhost failed (see the Go output above)"
	# The rest of test/images/agnhost/Dockerfile that is not a download:
	# the agnhost-2 link, porter's certificate, /uploads (above), the user
	# and group the SupplementalGroups specs expect.
	ln -s agnhost "$rootfs/agnhost-2"
	agnhost_src="$(cd "$here" && go list -f '{{.Dir}}' k8s.io/kubernetes/test/images/agnhost)" ||
		die "cannot find the agnhost sources"
	install -m 0644 "$agnhost_src/porter/localhost.crt" "$agnhost_src/porter/localhost.key" "$rootfs/"
	cat >"$rootfs/etc/passwd" <<-'EOF'
		root:x:0:0:root:/root:/bin/sh
		nobody:x:65534:65534:nobody:/:/sbin/nologin
		user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh
	EOF
	cat >"$rootfs/etc/group" <<-'EOF'
		root:x:0:
		user-defined-in-image:x:1000:
		group-defined-in-image:x:50000:user-defined-in-image
		nogroup:x:65534:
	EOF
	printf 'hosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
	# Upstream's wget (busybox, in alpine) tries once; GNU Wget retries 20 times with
	# back-off on a reply cut short, which turns each "not reachable" check of the specs
	# into minutes.
	printf 'tries = 1\n' >"$rootfs/etc/wgetrc"

	# The tools the specs run in pods: sh -x -c, curl, wget -T, nc -v -t/-u -w
	ldd_copy "$dash" usr/bin/sh
	ldd_copy "$curl" usr/bin/curl
	ldd_copy "$wget" usr/bin/wget
	ldd_copy "$nc" usr/bin/nc
	# ... and the usual small commands, from busybox (not its sh, see above).
	ldd_copy "$busybox" usr/bin/busybox
	while read -r applet; do
		applet="${applet#/}"
		case "$applet" in
		bin/* | sbin/*) applet="usr/$applet" ;;
		usr/bin/* | usr/sbin/*) ;;
		*) continue ;;
		esac
		[[ -e "$rootfs/$applet" || -L "$rootfs/$applet" ]] && continue
		ln -s /usr/bin/busybox "$rootfs/$applet"
	done < <("$busybox" --list-full)

	# ADD of a tar keeps the links and modes exactly.
	tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$tmp/agnhost/rootfs.tar" . ||
		die "cannot pack the agnhost rootfs"
	cat >"$tmp/agnhost/Containerfile" <<-'EOF'
		FROM scratch
		ADD rootfs.tar /
		EXPOSE 80 8080 8081 9376 5000
		ENTRYPOINT ["/agnhost"]
		CMD ["pause"]
	EOF
	buildah_() { buildah --storage-driver vfs "$@"; }
	image_id="$(buildah_ bud --quiet --isolation chroot --layers=false \
		-t "$AGNHOST_IMAGE" "$tmp/agnhost")" ||
		die "buildah bud of $AGNHOST_IMAGE failed (see above)"
	image_id="$(tail -n1 <<<"$image_id")"

	# Smoke test: the entrypoint runs, and so does every tool through sh.
	ctr="$(buildah_ from --quiet "$image_id")" || die "buildah from $AGNHOST_IMAGE failed"
	smoke() { buildah_ run --isolation chroot "$ctr" -- "$@"; }
	ok=true
	smoke /agnhost netexec --help >/dev/null 2>&1 || { log "/agnhost netexec --help failed"; ok=false; }
	smoke /bin/sh -x -c 'echo ok && curl --version && wget --version && nc -h; :' >/dev/null 2>&1 ||
		{ log "/bin/sh, curl, wget or nc does not run in the image"; ok=false; }
	out_nc="$(smoke /bin/sh -c 'nc -h 2>&1 | head -n1')" || true
	[[ "$out_nc" == *OpenBSD* ]] || { log "nc in the image is not netcat-openbsd: $out_nc"; ok=false; }
	out_wget="$(smoke /bin/sh -c 'wget --version 2>&1 | head -n1')" || true
	[[ "$out_wget" == *"GNU Wget"* ]] || { log "wget in the image is not GNU Wget: $out_wget"; ok=false; }
	buildah_ rm "$ctr" >/dev/null 2>&1 || true
	ctr=""
	$ok || die "the agnhost image failed its smoke test"

	buildah_ push --quiet "$image_id" "oci-archive:$tmp/agnhost.tar:$AGNHOST_IMAGE" >&2 ||
		die "saving $AGNHOST_IMAGE failed"
	buildah_ rmi "$image_id" >/dev/null 2>&1 || true
	image_id=""
	mv -f "$tmp/agnhost.tar" "$out/agnhost.tar" || die "cannot move agnhost.tar into $out"
	log "built agnhost.tar in $((SECONDS - start))s ($(du -h "$out/agnhost.tar" | cut -f1))"
fi

# ---- pause image --------------------------------------------------------------

if [[ ! -f "$out/pause.tar" ]]; then
	[[ "$(id -u)" == 0 ]] || die "building the pause image needs root (buildah with the vfs storage driver)"
	command -v buildah >/dev/null 2>&1 || die "buildah is not installed: apt-get install buildah"
	command -v gcc >/dev/null 2>&1 || die "gcc is not installed: apt-get install gcc libc6-dev"
	log "building $PAUSE_IMAGE into $out/pause.tar"
	start=$SECONDS
	k8s_src="$(cd "$here" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)" ||
		die "cannot find the k8s.io/kubernetes module's sources"
	mkdir -p "$tmp/pause" || die "cannot create $tmp/pause"
	# As build/pause/Makefile: the version baked in, static.
	gcc -Os -Wall -Werror -static -s -DVERSION="v$PAUSE_TAG-ccm-rs" \
		-o "$tmp/pause/pause" "$k8s_src/build/pause/linux/pause.c" >&2 ||
		die "gcc -static of build/pause/linux/pause.c failed (apt-get install libc6-dev)"
	cat >"$tmp/pause/Containerfile" <<-'EOF'
		FROM scratch
		COPY pause /pause
		USER 65535:65535
		ENTRYPOINT ["/pause"]
	EOF
	image_id="$(buildah --storage-driver vfs bud --quiet --isolation chroot --layers=false \
		-t "$PAUSE_IMAGE" "$tmp/pause")" || die "buildah bud of $PAUSE_IMAGE failed (see above)"
	image_id="$(tail -n1 <<<"$image_id")"
	buildah --storage-driver vfs push --quiet "$image_id" "oci-archive:$tmp/pause.tar:$PAUSE_IMAGE" >&2 ||
		die "saving $PAUSE_IMAGE failed"
	buildah --storage-driver vfs rmi "$image_id" >/dev/null 2>&1 || true
	image_id=""
	mv -f "$tmp/pause.tar" "$out/pause.tar" || die "cannot move pause.tar into $out"
	log "built pause.tar in $((SECONDS - start))s ($(du -h "$out/pause.tar" | cut -f1))"
fi

printf '%s %s\n' agnhost.tar "$AGNHOST_IMAGE" pause.tar "$PAUSE_IMAGE" >"$tmp/images.txt"
mv -f "$tmp/images.txt" "$out/images.txt" || die "cannot write $out/images.txt"

has_all "$out" || die "build finished but $out does not hold everything"
printf 'kubernetes=%s\nagnhost=%s\npause=%s\n' "$K8S_VERSION" "$AGNHOST_IMAGE" "$PAUSE_IMAGE" >"$stamp"
log "done"
printf '%s\n' "$out"
