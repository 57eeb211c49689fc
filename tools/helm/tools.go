//go:build tools

// Package tools records the command build.sh builds, so that `go mod tidy`
// keeps its dependencies in go.mod and go.sum. It is never compiled.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
