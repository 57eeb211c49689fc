#!/usr/bin/env bash
# provider-image.sh: the container image of a provider's cloud-controller-manager binary,
# built the way ccm-rs builds its own: the binary linked statically for each platform
# (glibc, `-C target-feature=+crt-static`), staged with the CA certificates, each platform's
# image built FROM scratch with buildah (vfs storage, chroot isolation: as root, no daemon,
# no emulation), the platforms joined in an OCI image index and saved as an OCI archive that
# `ctr images import`, `skopeo copy --all` and ccm_test::Cluster take.
#
#   provider-image.sh                                   # the crate of ./Cargo.toml, amd64 + arm64
#   provider-image.sh --platform linux/amd64 --debug    # quick: one platform, a debug build
#   provider-image.sh --manifest-path acme/Cargo.toml --bin acme-cloud-controller-manager
#   provider-image.sh --stage-only                      # build contexts only, for `docker build`
#
# Options:
#   --manifest-path FILE  the crate's Cargo.toml (default: ./Cargo.toml)
#   --bin NAME            the binary (default: the crate's only one)
#   --platform LIST       linux/amd64 and/or linux/arm64, comma-separated (default: both)
#   --debug               a debug build (default: release, stripped)
#   --name NAME           the image's name (default: localhost/<bin>)
#   --tag TAG             its tag (default: the crate's version)
#   --containerfile FILE  build with this Containerfile (default: one written for the binary:
#                         FROM scratch, the CA bundle, the binary, USER 65532, ENTRYPOINT)
#   --out FILE            the archive (default: <target dir>/images/<bin>.tar)
#   --stage-only          write the build contexts and print a `docker build` command each
#
# Prints the archive's path on standard output, progress on standard error. Shipped in the
# ccm-test crate (ccm_test::image::ProviderImage runs it from a test); find it with
#   cargo metadata --format-version 1 | python3 -c 'import json,sys,os; print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == "ccm-test"))'
# Needs cargo, buildah and the CA bundle (apt-get install buildah ca-certificates); for
# linux/arm64 also gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (apt-get) and
# `rustup target add aarch64-unknown-linux-gnu`.
set -euo pipefail
me=provider-image.sh

manifest=Cargo.toml
bin=""
platforms="linux/amd64,linux/arm64"
profile=release
name=""
tag=""
containerfile=""
out=""
stage_only=false
die() { echo "$me: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --manifest-path|--bin|--platform|--name|--tag|--containerfile|--out)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --manifest-path) manifest="$2" ;;
        --bin) bin="$2" ;;
        --platform) platforms="$2" ;;
        --name) name="$2" ;;
        --tag) tag="$2" ;;
        --containerfile) containerfile="$2" ;;
        --out) out="$2" ;;
      esac
      shift 2 ;;
    --debug) profile=debug; shift ;;
    --stage-only) stage_only=true; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "$me: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

[ -f "$manifest" ] || die "no Cargo.toml at $manifest (--manifest-path)"
manifest="$(cd "$(dirname "$manifest")" && pwd)/$(basename "$manifest")"
# Cargo reads the .cargo/config.toml files of the folder it runs in: the crate's, not the
# caller's.
cd "$(dirname "$manifest")"
[ -z "$containerfile" ] || [ -f "$containerfile" ] || die "--containerfile $containerfile does not exist"
[ -z "$containerfile" ] || containerfile="$(cd "$(dirname "$containerfile")" && pwd)/$(basename "$containerfile")"
ca_bundle=/etc/ssl/certs/ca-certificates.crt
[ -r "$ca_bundle" ] || die "$ca_bundle is missing (apt-get install ca-certificates)"
$stage_only || command -v buildah >/dev/null || die "buildah is required (apt-get install buildah)"

# platform -> Rust target, its strip, the image's architecture.
rust_target() {
  case "$1" in
    linux/amd64) echo x86_64-unknown-linux-gnu ;;
    linux/arm64) echo aarch64-unknown-linux-gnu ;;
    *) die "unsupported platform '$1' (linux/amd64, linux/arm64)" ;;
  esac
}
IFS=, read -r -a platform_list <<<"$platforms"
[ ${#platform_list[@]} -gt 0 ] || die "--platform names no platform"
for platform in "${platform_list[@]}"; do
  rust_target "$platform" >/dev/null
  if [ "$platform" = linux/arm64 ]; then
    command -v aarch64-linux-gnu-gcc >/dev/null \
      || die "linux/arm64 needs aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"
    [ -r /usr/aarch64-linux-gnu/lib/libc.a ] \
      || die "linux/arm64 needs /usr/aarch64-linux-gnu/lib/libc.a for the static link (apt-get install libc6-dev-arm64-cross)"
    rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu \
      || die "linux/arm64 needs the Rust target (rustup target add aarch64-unknown-linux-gnu)"
  fi
done

# The crate: its package, version, binary and target folder.
read -r package version bin target_dir < <(
  cargo metadata --format-version 1 --no-deps --manifest-path "$manifest" | python3 -c '
import json, os, sys
manifest, wanted = sys.argv[1], sys.argv[2]
meta = json.load(sys.stdin)
packages = [p for p in meta["packages"] if os.path.realpath(p["manifest_path"]) == os.path.realpath(manifest)]
if not packages:
    sys.exit(f"provider-image.sh: {manifest} is a workspace without a package: give the Cargo.toml of the crate")
package = packages[0]
pname = package["name"]
bins = [t["name"] for t in package["targets"] if "bin" in t["kind"]]
if wanted:
    if wanted not in bins:
        sys.exit(f"provider-image.sh: {pname} has no binary {wanted!r} (it has {bins})")
    bins = [wanted]
elif len(bins) != 1:
    sys.exit(f"provider-image.sh: {pname} has binaries {bins}: choose one with --bin")
print(package["name"], package["version"], bins[0], meta["target_directory"])
' "$manifest" "$bin"
)
[ -n "${target_dir:-}" ] || die "cargo metadata failed for $manifest"
name="${name:-localhost/$bin}"
tag="${tag:-$version}"
out="${out:-$target_dir/images/$bin.tar}"
image="$name:$tag"
contexts="$target_dir/images/context"
mkdir -p "$contexts" "$(dirname "$out")"

profile_flag=()
[ "$profile" = release ] && profile_flag=(--release)
for platform in "${platform_list[@]}"; do
  target="$(rust_target "$platform")"
  echo "$me: building $bin ($profile, static, $target)" >&2
  # An explicit --target keeps the static build apart from the host's, so the two caches
  # do not thrash (build scripts and proc macros are still built for the host).
  CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static" \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    cargo build --quiet --manifest-path "$manifest" -p "$package" --bin "$bin" \
    --target "$target" "${profile_flag[@]}" >&2
done

for platform in "${platform_list[@]}"; do
  target="$(rust_target "$platform")"
  arch="${platform#linux/}"
  context="$contexts/$bin-$arch"
  rm -rf "$context" && mkdir -p "$context"
  cp "$target_dir/$target/$profile/$bin" "$context/$bin"
  if [ "$profile" = release ]; then
    case "$arch" in amd64) strip "$context/$bin" ;; arm64) aarch64-linux-gnu-strip "$context/$bin" ;; esac
  fi
  # FROM scratch has no loader: a dynamically linked binary would not start.
  if command -v readelf >/dev/null && readelf -l "$context/$bin" | grep -q 'INTERP'; then
    die "$context/$bin is not statically linked (a RUSTFLAGS of yours may override +crt-static)"
  fi
  cp "$ca_bundle" "$context/ca-certificates.crt"
  if [ -n "$containerfile" ]; then
    cp "$containerfile" "$context/Containerfile"
  else
    cat >"$context/Containerfile" <<EOF
# Written by provider-image.sh: the static binary and the CA certificates, nothing else (no
# shell, no libc); runs as 65532 (distroless' nonroot), as ccm-rs' own images do.
FROM scratch
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY $bin /$bin
LABEL org.opencontainers.image.title="$bin" org.opencontainers.image.version="$tag"
USER 65532:65532
ENTRYPOINT ["/$bin"]
EOF
  fi
  if $stage_only; then
    echo "$me: staged $context (docker build --platform $platform -t $image $context)" >&2
  fi
done
$stage_only && exit 0

buildah=(buildah --storage-driver vfs)
"${buildah[@]}" manifest rm "$image" >/dev/null 2>&1 || true
"${buildah[@]}" rmi "$image" >/dev/null 2>&1 || true
"${buildah[@]}" manifest create "$image" >/dev/null
for platform in "${platform_list[@]}"; do
  arch="${platform#linux/}"
  "${buildah[@]}" bud --quiet --isolation chroot --layers=false --platform "$platform" \
    -f "$contexts/$bin-$arch/Containerfile" -t "$image-$arch" "$contexts/$bin-$arch" >/dev/null
  "${buildah[@]}" manifest add --os linux --arch "$arch" "$image" "containers-storage:$image-$arch" >/dev/null
done
rm -f "$out"
"${buildah[@]}" manifest push --quiet --all --format oci "$image" "oci-archive:$out:$image"
"${buildah[@]}" manifest rm "$image" >/dev/null
for platform in "${platform_list[@]}"; do "${buildah[@]}" rmi "$image-${platform#linux/}" >/dev/null; done
echo "$me: $out holds $image ($(IFS=' '; echo "${platform_list[*]}")), $(( $(stat -c %s "$out") / 1024 )) KiB" >&2
echo "$out"
