//go:build tools

// Package tools records the main package scripts/controlplane.sh builds, so
// that `go mod tidy` keeps its dependencies in go.mod/go.sum. Never compiled.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
