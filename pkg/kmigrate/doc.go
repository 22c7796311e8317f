// Package kmigrate is Kubernetes storage version migration through the
// API server: every object of a resource is read in chunks and written
// back unchanged, so that kube-apiserver stores it again in the
// resource's current storage version and under the current encryption
// key (an update that changes nothing; kube-apiserver skips the write for
// objects already stored that way).
//
// It follows the design of the Kubernetes storage version migration KEP:
// one resource at a time, chunked lists whose continue token is saved
// after each chunk (in a bbolt database in the Steward directory, synced)
// so that a killed run resumes where it stopped, expired tokens handled,
// transient failures retried with backoff, a global request rate limit,
// progress and Prometheus metrics, and discovery's storageVersionHash to
// migrate only the resources whose storage version changed. Built-in
// resources travel in protobuf, their objects never decoded: each list
// item is sent back as it came (proto.go).
//
// The inventory of pkg/kstorage, read straight from etcd, shows the
// result: after a migration every object of the resource is stored in
// the current version (and encrypted with the current key).
package kmigrate
