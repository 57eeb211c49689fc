#!/usr/bin/env bash
# Renders the plain manifests of each bundled provider from the one Helm chart,
# charts/cloud-controller-manager (`helm template` with the chart's default values and
# provider=<provider>; helm is built by tools/helm/build.sh):
#
# - releases/v<version>/<provider>.yaml, that `kubectl apply -f` installs (ServiceAccount,
#   least-privilege RBAC, cloud-config, Deployment with leader election and probes on the
#   secure port), with the image pinned to <registry>/<provider>-controller-manager:<version>;
# - examples/<provider>/deploy/rbac.yaml and deploy/deployment.yaml, the same objects with
#   the local image <provider>-controller-manager:dev (scripts/images.sh), which the tests
#   run the binary and image under.
#
# The chart is the one source: edit it, then run this.
#
#   scripts/release-manifests.sh            # (re)write releases/v<version>/ and deploy/
#   scripts/release-manifests.sh --check    # fail if the committed files differ (the test command)
#   REGISTRY=registry.example.com/team scripts/release-manifests.sh   # another registry
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *)
    echo "usage: scripts/release-manifests.sh [--check]" >&2
    exit 2
    ;;
esac
registry="${REGISTRY:-ghcr.io/ccm-rs}"
chart=charts/cloud-controller-manager
helm="$(tools/helm/build.sh)"

# provider name (the chart's `provider`), crate directory
providers=(
  "fake-cloud examples/fake-cloud"
  "do-like-cloud examples/do-like-cloud"
)

app_version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$chart/Chart.yaml")"
[ -n "$app_version" ] || {
  echo "release-manifests.sh: no appVersion in $chart/Chart.yaml" >&2
  exit 1
}

status=0
emit() { # emit FILE TEXT: write FILE, or compare it in --check mode
  if $check; then
    if ! diff -u "$1" <(printf '%s\n' "$2") >&2; then
      echo "release-manifests.sh: $1 is stale; run scripts/release-manifests.sh" >&2
      status=1
    fi
  else
    mkdir -p "$(dirname "$1")"
    printf '%s\n' "$2" >"$1"
    echo "release-manifests.sh: wrote $1" >&2
  fi
}

render() { # render PROVIDER [HELM ARGS...]: helm template in kube-system, comments kept
  local provider="$1"
  shift
  "$helm" template cloud-controller-manager "$chart" --namespace kube-system \
    --set "provider=$provider" "$@"
}

for entry in "${providers[@]}"; do
  read -r name dir <<<"$entry"
  image="$name-controller-manager"
  version="$(cargo pkgid --manifest-path "$dir/Cargo.toml" | sed 's/.*[#@]//')"
  [ "$version" = "$app_version" ] || {
    echo "release-manifests.sh: $dir is version $version but $chart/Chart.yaml has appVersion $app_version; make them equal" >&2
    exit 1
  }

  out="releases/v$version/$name.yaml"
  rendered="$(
    printf '# %s v%s: kubectl apply -f %s\n' "$name" "$version" "$out"
    printf '# Rendered by scripts/release-manifests.sh from %s (helm template, provider=%s,\n' "$chart" "$name"
    printf '# default values); edit the chart, not this file. Or install the chart: docs/helm.md.\n'
    printf '# The image is %s/%s:%s; see docs/deploying.md to build and push it.\n' "$registry" "$image" "$version"
    render "$name" --set "image.registry=$registry" --set "image.tag=$version"
  )"
  grep -q "image: $registry/$image:$version\$" <<<"$rendered" || {
    echo "release-manifests.sh: $chart did not render 'image: $registry/$image:$version'" >&2
    exit 1
  }
  emit "$out" "$rendered"

  # deploy/: the same objects with the local image, split as before (RBAC; the rest).
  local_image=(--set image.registry= --set image.tag=dev)
  header="$(
    printf '# Rendered by scripts/release-manifests.sh from %s (helm template,\n' "$chart"
    printf '# provider=%s, image %s:dev); edit the chart, not this file.\n' "$name" "$image"
  )"
  emit "$dir/deploy/rbac.yaml" "$(
    printf '%s\n' "$header"
    render "$name" "${local_image[@]}" --show-only templates/rbac.yaml
  )"
  deployment="$(
    printf '%s\n' "$header"
    render "$name" "${local_image[@]}" \
      --show-only templates/cloud-config.yaml --show-only templates/deployment.yaml
  )"
  grep -q "image: $image:dev\$" <<<"$deployment" || {
    echo "release-manifests.sh: $chart did not render 'image: $image:dev'" >&2
    exit 1
  }
  emit "$dir/deploy/deployment.yaml" "$deployment"
done
exit $status
