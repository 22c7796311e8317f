// hack/coredns is a module of its own so that Steward's go.mod does not
// require CoreDNS (and, through it, client-go). hack/build-coredns.sh does
// not build here: it copies main.go into a wrapper module per CoreDNS
// version under .cache/coredns/<version>/src, which requires that version.
module steward.local/coredns

go 1.25.0
