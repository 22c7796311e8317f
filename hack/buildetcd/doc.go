// Package buildetcd holds the tests of hack/build-etcd.sh, which builds
// etcd, etcdctl and etcdutl per version from the Go module proxy and
// imports them into a binary store.
package buildetcd
