#!/usr/bin/env bash
# Proves what scripts/images.sh built (it runs this last; run it alone to check existing
# images). For each binary and platform: the staged binary in target/images/context/ is a
# statically linked ELF of that platform's architecture (`file`) and runs, the linux/arm64 one
# under Debian's qemu-user-static (`qemu-aarch64-static BINARY --version`), printing its name
# and version; and target/images/<binary>.tar holds one OCI image index, named
# localhost/<binary>:<version>, whose manifests are exactly the platforms built, each with an
# image config of that architecture. Fails loudly on the first difference.
#
#   scripts/images-check.sh                                   # all three binaries, both platforms
#   scripts/images-check.sh --platform linux/arm64 fake-cloud-controller-manager
#   scripts/images-check.sh --contexts-only                   # after `images.sh --stage-only`
set -euo pipefail
cd "$(dirname "$0")/.."
me=images-check.sh
source scripts/lib/images.sh

platforms=()
binaries=()
contexts_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --contexts-only) contexts_only=true ;;
    --platform)
      [ $# -ge 2 ] || { echo "images-check.sh: --platform needs linux/amd64 or linux/arm64" >&2; exit 2; }
      add_platforms "$2"; shift ;;
    --platform=*) add_platforms "${1#--platform=}" ;;
    -h|--help) sed -n '2,12p' "scripts/$(basename "$0")"; exit 0 ;;
    -*) echo "images-check.sh: unknown option $1" >&2; exit 2 ;;
    *) binaries+=("$1") ;;
  esac
  shift
done
[ ${#binaries[@]} -gt 0 ] || binaries=("${default_binaries[@]}")
[ ${#platforms[@]} -gt 0 ] || platforms=("${default_platforms[@]}")

fail() { echo "images-check.sh: $*" >&2; exit 1; }
command -v file >/dev/null || fail "'file' is required (apt-get install file)"
if [[ " ${platforms[*]} " == *" linux/arm64 "* ]]; then
  command -v qemu-aarch64-static >/dev/null \
    || fail "qemu-aarch64-static is required to run the arm64 binaries (apt-get install qemu-user-static)"
fi

for bin in "${binaries[@]}"; do
  version="$(image_version "$bin")"
  for platform in "${platforms[@]}"; do
    context="$out/context/$bin$(suffix "$platform")"
    case "$platform" in
      linux/amd64) machine="x86-64"; runner=() ;;
      linux/arm64) machine="ARM aarch64"; runner=(qemu-aarch64-static) ;;
    esac
    binary="$context/$bin"
    [ -x "$binary" ] || fail "no $platform binary at $binary: run scripts/images.sh"
    kind="$(file -b "$binary")"
    [[ "$kind" == "ELF 64-bit LSB "*", $machine,"* ]] || fail "$binary is not a $machine ELF: $kind"
    [[ "$kind" == *"statically linked"* || "$kind" == *"static-pie linked"* ]] \
      || fail "$binary is not statically linked: $kind"
    said="$("${runner[@]}" "$binary" --version 2>&1)" || fail "$platform $binary --version (${runner[*]:-native}) failed: $said"
    [[ "$said" == "$bin v$version"* ]] || fail "$platform $binary --version printed '$said', not '$bin v$version …'"
    echo "images-check.sh: $platform $bin runs${runner:+ under ${runner[*]}}: ${said%%$'\n'*}" >&2
    # Every platform's binary is the same build: the same version and commit.
    [ -z "${first:-}" ] || [ "$said" = "$first" ] || fail "$platform $bin printed '$said', the first platform '$first'"
    first="$said"
  done
  first=""
  $contexts_only && continue

  archive="$out/$bin.tar"
  [ -f "$archive" ] || fail "no image archive at $archive: run scripts/images.sh"
  python3 - "$archive" "localhost/$bin:$version" "${platforms[@]}" <<'EOF' || fail "$archive is not the index expected"
import json, sys, tarfile

archive, name, wanted = sys.argv[1], sys.argv[2], sorted(sys.argv[3:])
INDEX = "application/vnd.oci.image.index.v1+json"
with tarfile.open(archive) as tar:
    def blob(descriptor):
        algorithm, digest = descriptor["digest"].split(":", 1)
        return json.load(tar.extractfile(f"blobs/{algorithm}/{digest}"))
    top = json.load(tar.extractfile("index.json"))["manifests"]
    if len(top) != 1 or top[0]["mediaType"] != INDEX:
        sys.exit(f"index.json should name one image index, not {top}")
    if top[0].get("annotations", {}).get("org.opencontainers.image.ref.name") != name:
        sys.exit(f"the index is not named {name}: {top[0].get('annotations')}")
    listed = []
    for manifest in blob(top[0])["manifests"]:
        platform = manifest.get("platform", {})
        listed.append(f"{platform.get('os')}/{platform.get('architecture')}")
        config = blob(blob(manifest)["config"])
        if f"{config['os']}/{config['architecture']}" != listed[-1]:
            sys.exit(f"the {listed[-1]} manifest's image is {config['os']}/{config['architecture']}")
    if sorted(listed) != wanted:
        sys.exit(f"the index lists {sorted(listed)}, not {wanted}")
    print(f"images-check.sh: {archive} is an index of {', '.join(sorted(listed))}", file=sys.stderr)
EOF
done
