#!/usr/bin/env bash
# Renders the release manifests: one file per bundled provider per version,
# releases/v<version>/<provider>.yaml, that `kubectl apply -f` installs — the provider's
# deploy/rbac.yaml and deploy/deployment.yaml (ServiceAccount, least-privilege RBAC,
# cloud-config, Deployment with leader election and probes on the secure port) with the image
# pinned to the release's tag. deploy/ stays the one source; this only pins the image.
#
#   scripts/release-manifests.sh            # (re)write releases/v<version>/
#   scripts/release-manifests.sh --check    # fail if the committed files differ (the test command)
#   REGISTRY=registry.example.com/team scripts/release-manifests.sh   # another registry
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
[ "${1:-}" = --check ] && check=true
registry="${REGISTRY:-ghcr.io/ccm-rs}"

# provider name, crate directory, image (binary) name
providers=(
  "fake-cloud examples/fake-cloud fake-cloud-controller-manager"
  "do-like-cloud examples/do-like-cloud do-like-cloud-controller-manager"
)

status=0
for entry in "${providers[@]}"; do
  read -r name dir image <<<"$entry"
  version="$(cargo pkgid --manifest-path "$dir/Cargo.toml" | sed 's/.*[#@]//')"
  out="releases/v$version/$name.yaml"
  rendered="$(
    printf '# %s v%s: kubectl apply -f %s\n' "$name" "$version" "$out"
    printf '# Rendered by scripts/release-manifests.sh from %s/deploy/ (edit those, not this file).\n' "$dir"
    printf '# The image is %s/%s:%s; see docs/deploying.md to build and push it.\n' "$registry" "$image" "$version"
    for file in rbac.yaml deployment.yaml; do
      printf -- '---\n'
      sed -e "s#^\([[:space:]]*image:[[:space:]]*\)$image:[^[:space:]]*#\1$registry/$image:$version#" \
        "$dir/deploy/$file"
    done
  )"
  grep -q "image: $registry/$image:$version" <<<"$rendered" || {
    echo "release-manifests.sh: $dir/deploy/deployment.yaml has no 'image: $image:<tag>' to pin" >&2
    exit 1
  }
  if $check; then
    if ! diff -u "$out" <(printf '%s\n' "$rendered") >&2; then
      echo "release-manifests.sh: $out is stale; run scripts/release-manifests.sh" >&2
      status=1
    fi
  else
    mkdir -p "$(dirname "$out")"
    printf '%s\n' "$rendered" >"$out"
    echo "release-manifests.sh: wrote $out" >&2
  fi
done
exit $status
