#!/usr/bin/env bash
# The DigitalOcean-like quickstart, in one command: a local control plane, the API
# simulator, do-like-cloud-controller-manager, three tainted Nodes and a LoadBalancer
# Service; prints the result and leaves the kubeconfig for kubectl until Ctrl-C.
#   scripts/quickstart.sh          # runs until Ctrl-C
#   scripts/quickstart.sh --once   # shows the result and stops
exec "$(dirname "$0")/../examples/do-like-cloud/quickstart.sh" "$@"
