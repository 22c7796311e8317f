//go:build tools

// Package tools pins the code generators Steward runs (`make generate`) in
// a module of their own, so their dependencies stay out of Steward's.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
