#!/usr/bin/env bash
# Builds the container image of each bundled binary without a Docker engine: a statically
# linked binary (glibc, `-C target-feature=+crt-static`), staged with the CA certificates
# into a build context, then the binary's Containerfile built with buildah (vfs storage,
# chroot isolation: works as root with no daemon) and saved as an OCI archive:
#
#   scripts/images.sh                         # release images of all three binaries
#   scripts/images.sh --debug fake-cloud-controller-manager   # a quicker debug build (tests)
#   scripts/images.sh --stage-only do-like-cloud-controller-manager   # context only, for `docker build`
#
# Writes target/images/<binary>.tar (load with `podman load`, `docker load` after
# `skopeo copy oci-archive:… docker-archive:…`, or push with `skopeo copy`/`buildah push`)
# and target/images/context/<binary>/. Prints each image's size.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
stage_only=false
binaries=()
for arg in "$@"; do
  case "$arg" in
    --debug) profile=debug ;;
    --stage-only) stage_only=true ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "images.sh: unknown option $arg" >&2; exit 2 ;;
    *) binaries+=("$arg") ;;
  esac
done
[ ${#binaries[@]} -gt 0 ] || binaries=(fake-cloud-controller-manager do-like-cloud-controller-manager do-like-api-simulator)

# binary -> the directory of the crate that builds it (and holds its Containerfile).
crate_dir() {
  case "$1" in
    fake-cloud-controller-manager) echo examples/fake-cloud ;;
    do-like-cloud-controller-manager) echo examples/do-like-cloud ;;
    do-like-api-simulator) echo examples/do-like-simulator ;;
    *) echo "images.sh: no image for '$1'" >&2; exit 2 ;;
  esac
}

host=x86_64-unknown-linux-gnu
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca_bundle" ] || { echo "images.sh: $ca_bundle is missing (apt-get install ca-certificates)" >&2; exit 1; }
if ! $stage_only; then
  command -v buildah >/dev/null || { echo "images.sh: buildah is required (apt-get install buildah)" >&2; exit 1; }
fi

target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
out=target/images
mkdir -p "$out/context"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"

packages=()
for bin in "${binaries[@]}"; do
  packages+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$(crate_dir "$bin")/Cargo.toml" | head -1)")
done
# An explicit --target keeps the static build apart from the host's (build scripts and proc
# macros are still built for the host, dynamically), so the two caches do not thrash.
profile_flag=()
[ "$profile" = release ] && profile_flag=(--release)
echo "images.sh: building ${binaries[*]} ($profile, static)" >&2
# The commit `--version` prints, given to the examples' build.rs explicitly: it reruns when
# this changes, even when the target folder is shared with another checkout whose git
# files it last watched.
CCM_GIT_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || true)" \
CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  cargo build --locked --quiet --target "$host" "${profile_flag[@]}" "${packages[@]}" \
  $(printf -- '--bin %s ' "${binaries[@]}")

for bin in "${binaries[@]}"; do
  dir="$(crate_dir "$bin")"
  context="$out/context/$bin"
  rm -rf "$context" && mkdir -p "$context"
  cp "$target_dir/$host/$profile/$bin" "$context/$bin"
  [ "$profile" = release ] && strip "$context/$bin" 2>/dev/null || true
  cp "$ca_bundle" "$context/ca-certificates.crt"
  version="$(cargo pkgid --manifest-path "$dir/Cargo.toml" | sed 's/.*[#@]//')"
  if $stage_only; then
    echo "images.sh: staged $context (docker build -f $dir/Containerfile --build-arg VERSION=$version --build-arg REVISION=$revision $context)" >&2
    continue
  fi
  tag="localhost/$bin:$version"
  buildah=(buildah --storage-driver vfs)
  "${buildah[@]}" bud --quiet --isolation chroot --layers=false \
    --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
    -f "$dir/Containerfile" -t "$tag" "$context" >/dev/null
  rm -f "$out/$bin.tar"
  "${buildah[@]}" push --quiet "$tag" "oci-archive:$out/$bin.tar:$tag"
  "${buildah[@]}" rmi "$tag" >/dev/null
  # Images that tests unpacked from older archives.
  "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
  printf 'images.sh: %s  %s  binary %s KiB, archive %s KiB\n' "$out/$bin.tar" "$tag" \
    "$(( $(stat -c %s "$context/$bin") / 1024 ))" "$(( $(stat -c %s "$out/$bin.tar") / 1024 ))" >&2
done
