// Package buildcoredns holds the tests of hack/build-coredns.sh, which
// builds CoreDNS (hack/coredns) per version from the Go module proxy for the
// cluster DNS of a local Kubernetes.
package buildcoredns
