#!/usr/bin/env bash
# Builds the multi-arch container image (linux/amd64 and linux/arm64) of each bundled binary
# without a Docker engine: a statically linked binary per platform (glibc,
# `-C target-feature=+crt-static`, relocations packed; arm64 cross-compiled with Debian's
# gcc-aarch64-linux-gnu and libc6-dev-arm64-cross), staged with the CA certificates into a
# build context, each platform's image built from the binary's Containerfile with buildah
# (vfs storage, chroot isolation: works as root with no daemon; FROM scratch + COPY needs
# no emulation), the platforms joined in an OCI image index (`buildah manifest`) and saved
# as an OCI archive. Then scripts/images-check.sh proves the result (arm64 binaries run
# under qemu, the index lists each platform):
#
#   scripts/images.sh                         # release images of all three binaries, both platforms
#   scripts/images.sh --debug fake-cloud-controller-manager   # a quicker debug build (tests)
#   scripts/images.sh --debug --platform linux/amd64          # one platform only (quick local runs)
#   scripts/images.sh --stage-only do-like-cloud-controller-manager   # contexts only, for `docker build`
#
# Writes target/images/<binary>.tar, an OCI archive holding one index named
# localhost/<binary>:<version> with a manifest per platform (`buildah from` and
# `ctr images import` pick the host's platform; push every platform with
# `skopeo copy --all oci-archive:target/images/<binary>.tar docker://REGISTRY/<binary>:TAG`),
# and the build contexts target/images/context/<binary>/ (linux/amd64, the host's) and
# target/images/context/<binary>-arm64/ (linux/arm64). Prints each binary's and archive's size.
# Needs buildah, and for linux/arm64 gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
# qemu-user-static (apt-get) and `rustup target add aarch64-unknown-linux-gnu`.
set -euo pipefail
cd "$(dirname "$0")/.."
me=images.sh
source scripts/lib/images.sh

profile=release
stage_only=false
platforms=()
binaries=()
while [ $# -gt 0 ]; do
  case "$1" in
    --debug) profile=debug ;;
    --stage-only) stage_only=true ;;
    --platform)
      [ $# -ge 2 ] || { echo "images.sh: --platform needs linux/amd64 or linux/arm64" >&2; exit 2; }
      add_platforms "$2"; shift ;;
    --platform=*) add_platforms "${1#--platform=}" ;;
    -h|--help) sed -n '2,24p' "scripts/$(basename "$0")"; exit 0 ;;
    -*) echo "images.sh: unknown option $1" >&2; exit 2 ;;
    *) binaries+=("$1") ;;
  esac
  shift
done
[ ${#binaries[@]} -gt 0 ] || binaries=("${default_binaries[@]}")
[ ${#platforms[@]} -gt 0 ] || platforms=("${default_platforms[@]}")

# platform -> Rust target, and the strip that reads its binaries.
rust_target() {
  case "$1" in
    linux/amd64) echo x86_64-unknown-linux-gnu ;;
    linux/arm64) echo aarch64-unknown-linux-gnu ;;
    *) echo "images.sh: unsupported platform '$1' (linux/amd64, linux/arm64)" >&2; exit 2 ;;
  esac
}
strip_tool() { case "$1" in linux/amd64) echo strip ;; linux/arm64) echo aarch64-linux-gnu-strip ;; esac; }
for platform in "${platforms[@]}"; do rust_target "$platform" >/dev/null; done

# One build at a time on this machine (.ci/run builds a cluster's and the e2e run's images
# side by side; checkouts side by side build theirs): a second caller waits for the first.
# Machine-wide, not per output folder: the tags (localhost/<binary>:<version>) live in the
# one buildah storage of the machine, and a build removes them before making them.
mkdir -p "$out" "${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}"
exec 8>"${CCM_CACHE_DIR:-$HOME/.cache/ccm-rs}/images.lock"
flock 8

ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca_bundle" ] || { echo "images.sh: $ca_bundle is missing (apt-get install ca-certificates)" >&2; exit 1; }
if ! $stage_only; then
  command -v buildah >/dev/null || { echo "images.sh: buildah is required (apt-get install buildah)" >&2; exit 1; }
fi
if [[ " ${platforms[*]} " == *" linux/arm64 "* ]]; then
  for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-strip; do
    command -v "$tool" >/dev/null || { echo "images.sh: $tool is required for linux/arm64 (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)" >&2; exit 1; }
  done
  [ -r /usr/aarch64-linux-gnu/lib/libc.a ] || { echo "images.sh: /usr/aarch64-linux-gnu/lib/libc.a is missing: the static arm64 link needs it (apt-get install libc6-dev-arm64-cross)" >&2; exit 1; }
  rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
    || { echo "images.sh: the Rust target aarch64-unknown-linux-gnu is missing (rustup target add aarch64-unknown-linux-gnu)" >&2; exit 1; }
fi

target_dir="$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
mkdir -p "$out/context"
revision="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
# Read once: every platform's binary prints the same commit, even if HEAD moves mid-build.
commit="$(git rev-parse --short HEAD 2>/dev/null || true)"

packages=()
for bin in "${binaries[@]}"; do
  dir="$(crate_dir "$bin")"
  packages+=(-p "$(sed -n 's/^name = "\(.*\)"/\1/p' "$dir/Cargo.toml" | head -1)")
done
# An explicit --target keeps the static build apart from the host's (build scripts and proc
# macros are still built for the host, dynamically), so the two caches do not thrash. Each
# platform is built by its own cargo run: a cold arm64 build reuses the host's build scripts.
# Static, and the relative relocations of a position-independent executable packed
# (DT_RELR, binutils 2.38 and glibc 2.36 on): 6 KB instead of 430 KB of `.rela.dyn`, which
# the start-up code reads whole and so keeps resident (docs/benchmarks.md, "Peak RSS of the
# shipped binary"). bench/driver builds the benchmarked binary with the same flags.
STATIC_RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs"
profile_flag=()
[ "$profile" = release ] && profile_flag=(--release)
for platform in "${platforms[@]}"; do
  target="$(rust_target "$platform")"
  echo "images.sh: building ${binaries[*]} ($profile, static, $target)" >&2
  start=$(date +%s)
  # The commit `--version` prints, given to the examples' build.rs explicitly: it reruns when
  # this changes, even when the target folder is shared with another checkout whose git
  # files it last watched.
  CCM_GIT_COMMIT="$commit" \
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="$STATIC_RUSTFLAGS" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="$STATIC_RUSTFLAGS" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build --locked --quiet --target "$target" "${profile_flag[@]}" "${packages[@]}" \
    $(printf -- '--bin %s ' "${binaries[@]}")
  echo "images.sh: built $target in $(( $(date +%s) - start ))s" >&2
done

buildah=(buildah --storage-driver vfs)
for bin in "${binaries[@]}"; do
  dir="$(crate_dir "$bin")"
  version="$(image_version "$bin")"
  tag="localhost/$bin:$version"
  sizes=()
  for platform in "${platforms[@]}"; do
    context="$out/context/$bin$(suffix "$platform")"
    rm -rf "$context" && mkdir -p "$context"
    cp "$target_dir/$(rust_target "$platform")/$profile/$bin" "$context/$bin"
    if [ "$profile" = release ]; then "$(strip_tool "$platform")" "$context/$bin"; fi
    cp "$ca_bundle" "$context/ca-certificates.crt"
    sizes+=("${platform#linux/} $(( $(stat -c %s "$context/$bin") / 1024 )) KiB")
    if $stage_only; then
      echo "images.sh: staged $context (docker build --platform $platform -f $dir/Containerfile --build-arg VERSION=$version --build-arg REVISION=$revision $context)" >&2
    fi
  done
  $stage_only && continue
  # One image per platform (tagged <version>-<arch>, removed once in the index), then the
  # index under the image's name, pushed with every platform's blobs.
  "${buildah[@]}" manifest rm "$tag" >/dev/null 2>&1 || true
  "${buildah[@]}" rmi "$tag" >/dev/null 2>&1 || true
  "${buildah[@]}" manifest create "$tag" >/dev/null
  for platform in "${platforms[@]}"; do
    arch="${platform#linux/}"
    "${buildah[@]}" bud --quiet --isolation chroot --layers=false --platform "$platform" \
      --build-arg "VERSION=$version" --build-arg "REVISION=$revision" \
      -f "$dir/Containerfile" -t "$tag-$arch" "$out/context/$bin$(suffix "$platform")" >/dev/null
    "${buildah[@]}" manifest add --os linux --arch "$arch" "$tag" "containers-storage:$tag-$arch" >/dev/null
  done
  rm -f "$out/$bin.tar"
  "${buildah[@]}" manifest push --quiet --all --format oci "$tag" "oci-archive:$out/$bin.tar:$tag"
  "${buildah[@]}" manifest rm "$tag" >/dev/null
  for platform in "${platforms[@]}"; do "${buildah[@]}" rmi "$tag-${platform#linux/}" >/dev/null; done
  # Images that tests unpacked from older archives.
  "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
  printf 'images.sh: %s  %s  binary %s, archive %s KiB\n' "$out/$bin.tar" "$tag" \
    "$(IFS=,; echo "${sizes[*]}" | sed 's/,/, /g')" "$(( $(stat -c %s "$out/$bin.tar") / 1024 ))" >&2
done

# The proof: each platform's binary runs (arm64 under qemu-aarch64-static) and is a static
# ELF of its architecture, and each archive's index lists the platforms built.
check=()
$stage_only && check=(--contexts-only)
scripts/images-check.sh "${check[@]}" --platform "$(IFS=,; echo "${platforms[*]}")" "${binaries[@]}"
