# Shared by scripts/images.sh and scripts/images-check.sh (sourced, from the repository
# root, under `set -euo pipefail`, with `me` set to the calling script's name for its
# messages): which binaries have images, the crates that build them, the platforms, and
# where a platform's build context lives.

# What both build and check when no binary or platform is named.
default_binaries=(fake-cloud-controller-manager do-like-cloud-controller-manager do-like-api-simulator)
default_platforms=(linux/amd64 linux/arm64)
out=target/images

# Appends the comma-separated platforms of a --platform value to `platforms`.
add_platforms() {
  local more
  IFS=, read -r -a more <<<"$1"
  platforms+=("${more[@]}")
}

# binary -> the directory of the crate that builds it (and holds its Containerfile).
crate_dir() {
  case "$1" in
    fake-cloud-controller-manager) echo examples/fake-cloud ;;
    do-like-cloud-controller-manager) echo examples/do-like-cloud ;;
    do-like-api-simulator) echo examples/do-like-simulator ;;
    *) echo "$me: no image for '$1'" >&2; exit 2 ;;
  esac
}

# binary -> the version of its crate (the image's tag, what --version prints).
image_version() {
  local dir
  dir="$(crate_dir "$1")" || exit 2
  cargo pkgid --manifest-path "$dir/Cargo.toml" | sed 's/.*[#@]//'
}

# platform -> the suffix of its build context folder (none for the host's platform, so
# target/images/context/<binary>/ stays the amd64 one).
suffix() {
  case "$1" in
    linux/amd64) echo "" ;;
    linux/arm64) echo -arm64 ;;
    *) echo "$me: unsupported platform '$1' (linux/amd64, linux/arm64)" >&2; exit 2 ;;
  esac
}
