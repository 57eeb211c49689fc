//go:build tools

// Package tools records the etcd command (the root package of
// go.etcd.io/etcd/server/v3) so that `go mod tidy` keeps its dependencies.
// It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
