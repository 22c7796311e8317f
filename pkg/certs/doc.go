// Package certs owns the lifecycle of the cluster's certificates above the
// x509 of pkg/pki: renewal (this directory's leaves, the joined hosts',
// the agents' loop and the coordinator's renewal process), the file and
// host work of a CA rotation and its rollback, and the take-over of an
// adopted cluster's certificates.
package certs
