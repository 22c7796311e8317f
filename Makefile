# Steward: build, test, benchmark, demo.
# bash with pipefail: the end-to-end tests' result is go test's, not that of
# the summary it is piped into.
SHELL         := /bin/bash
.SHELLFLAGS   := -o pipefail -c
GO            ?= go
BIN           := bin/steward
STORE         ?= $(CURDIR)/.cache/store
ETCD_VERSIONS ?= v3.5.35 v3.6.16 v3.7.3
TEST_TIMEOUT  ?= 60m
# E2E_TIMEOUT bounds each end-to-end test binary (one per area under
# test/e2e/).
E2E_TIMEOUT   ?= 45m
# The end-to-end tests run side by side: E2E_P test binaries at once (one of
# them the local-Kubernetes packages, one after the other: hack/e2e.sh),
# each running up to E2E_PARALLEL of its t.Parallel tests at once; every
# test has its own loopback address and directories (docs/testing.md,
# Running side by side, says how the degrees were measured).
E2E_P         ?= 3
E2E_PARALLEL  ?= 2
# E2E_PKGS are the end-to-end packages make test-e2e-run runs.
E2E_PKGS      ?= ./test/...
# TEST_BIN is the steward binary every end-to-end package runs, built once.
TEST_BIN      := $(CURDIR)/bin/steward-test
# RACE is the unit tests' race detector flag; the end-to-end tests run a
# race-built steward when it is set (STEWARD_TEST_RACE). `make test RACE=`
# turns both off. -race needs cgo and a C compiler (gcc).
RACE          ?= -race
# Unit tests: every package outside test/ (end-to-end tests, benchmarks
# and their harness); ./api/... checks the generated CRD and deep copies
# against controller-gen (TestGeneratedFilesUpToDate).
UNIT_PKGS     := ./api/... ./cmd/... ./internal/... ./pkg/... ./hack/...
DEMO_DIR      ?= $(CURDIR)/steward-data
KUBE_VERSION  ?= v1.36.3
# KUBE_VERSIONS are the Kubernetes releases `make kube-binaries` builds into
# $(KUBE_CACHE)/<version>/bin (docs/kubernetes-local.md).
KUBE_VERSIONS ?= v1.35.4 v1.36.3
KUBE_CACHE    ?= $(CURDIR)/.cache/kube
# COREDNS_CACHE is where `make coredns` builds CoreDNS, one directory per
# version (docs/kubernetes-local.md).
COREDNS_CACHE ?= $(CURDIR)/.cache/coredns
# IMAGES is where `make images` writes the image tarballs and images.json.
IMAGES        ?= $(CURDIR)/.cache/images
# NODES is the node count of `make kube-up` (1 or 3), KUBE_DIR its
# cluster's directory (docs/kubernetes-local.md).
NODES         ?= 1
KUBE_DIR      ?= $(CURDIR)/.cache/localkube
# ARTIFACTS keeps what tests save with t.ArtifactDir() (go test -artifacts):
# the linearizability checker's visualization of a violation
# (docs/testing.md).
ARTIFACTS     ?= $(CURDIR)/test-artifacts
# FUZZTIME is how long `make fuzz` fuzzes each target (hack/fuzz-targets).
FUZZTIME      ?= 10m
# BENCH selects the benchmarks `make bench` runs (go test -bench), all by
# default: `make bench BENCH=BenchmarkHostsLatencyUpgrade` runs one.
BENCH         ?= .

.PHONY: all build kube-node kube-up kube-down etcd-binaries s3-server kube-apiserver kube-binaries coredns images containerd prometheus nftables test test-unit test-e2e test-e2e-run fuzz bench demo demo-down vet clean generate

all: build

build:
	$(GO) build -o $(BIN) ./cmd/steward

## etcd-binaries: build etcd/etcdctl/etcdutl for $(ETCD_VERSIONS) from the Go
## module proxy (cached in .cache/) and import them into $(STORE).
etcd-binaries: build
	STEWARD=$(CURDIR)/$(BIN) STORE=$(STORE) ./hack/build-etcd.sh $(ETCD_VERSIONS)

## s3-server: build the versitygw S3 gateway the S3 tests run (.cache/bin).
s3-server:
	./hack/build-versitygw.sh

## kube-apiserver: build kube-apiserver $(KUBE_VERSION) from the Go module
## proxy into $(KUBE_CACHE)/$(KUBE_VERSION)/bin and link it at
## .cache/bin/kube-apiserver (skipped when that version is there); the tests
## run it above Steward clusters.
kube-apiserver:
	KUBE_VERSION=$(KUBE_VERSION) KUBE_CACHE=$(KUBE_CACHE) ./hack/build-kube-apiserver.sh

## kube-binaries: build kubelet, kube-apiserver, kube-controller-manager,
## kube-scheduler, kube-proxy, kubectl and kubeadm of each of
## $(KUBE_VERSIONS) from the Go module proxy into $(KUBE_CACHE)/<version>/bin
## (a version already built is skipped).
kube-binaries:
	for v in $(KUBE_VERSIONS); do KUBE_VERSION=$$v KUBE_CACHE=$(KUBE_CACHE) ./hack/build-kube.sh || exit 1; done

## coredns: build CoreDNS, the cluster DNS of a local Kubernetes, of the
## version kubeadm of each of $(KUBE_VERSIONS) names, from the Go module
## proxy into $(COREDNS_CACHE)/<version>/bin (a version already built is
## skipped; hack/build-coredns.sh).
coredns: kube-binaries
	for v in $(KUBE_VERSIONS); do KUBE_VERSION=$$v KUBE_CACHE=$(KUBE_CACHE) COREDNS_CACHE=$(COREDNS_CACHE) ./hack/build-coredns.sh || exit 1; done

## images: build the image tarballs of a local Kubernetes into $(IMAGES)
## (localkube images): pause, the Kubernetes components of each of
## $(KUBE_VERSIONS), the CoreDNS kubeadm of each names, and Steward's own
## (steward and the etcd versions of $(STORE)), with their index
## images.json (docs/kubernetes-local.md).
images: kube-binaries coredns etcd-binaries
	$(GO) run ./cmd/localkube images $(foreach v,$(KUBE_VERSIONS),--kube-version $(v)) --kube-cache $(KUBE_CACHE) --coredns-cache $(COREDNS_CACHE) --store $(STORE) --out $(IMAGES)

## containerd: install containerd and runc (Debian's packages) when
## missing; the test that runs the images (test/e2e/kube/images_test.go)
## starts a containerd of its own.
containerd:
	./hack/install-containerd.sh
## kube-node: install what each node of a local Kubernetes runs from
## Debian (containerd, runc, the CNI plugins, iptables, conntrack) when
## missing (hack/install-kube-node.sh).
kube-node:
	./hack/install-kube-node.sh

## kube-up: bring up a local Kubernetes of $(NODES) node(s) of
## $(KUBE_VERSION) in $(KUBE_DIR) (cmd/localkube up; its binaries from
## `make kube-binaries`, its images from `make images`); it ends with the
## export lines of KUBECONFIG, STEWARD_DIR and the S3 server. `make
## kube-down` removes it.
kube-up: build
	$(GO) build -o bin/localkube ./cmd/localkube
	bin/localkube up --dir $(KUBE_DIR) --nodes $(NODES) --version $(KUBE_VERSION) --kube-cache $(KUBE_CACHE) --images $(IMAGES) --steward $(CURDIR)/$(BIN)

## kube-down: remove the cluster of `make kube-up` and its directory.
kube-down:
	$(GO) build -o bin/localkube ./cmd/localkube
	bin/localkube down --dir $(KUBE_DIR)

## prometheus: install prometheus and promtool (Debian's package) when
## missing; the alert rules' tests and the metrics end-to-end test run them.
prometheus:
	./hack/install-prometheus.sh

## nftables: install nft (Debian's package) when missing; the delayed links
## between test hosts (test/harness/delaylink.go) put their redirect rules
## in the hosts' namespaces with it.
nftables:
	./hack/install-nftables.sh

vet:
	$(GO) vet ./...

## generate: the EtcdCluster API's deep copies (api/v1alpha1), its
## CustomResourceDefinition (deploy/operator/crd) from the Go types and the
## operator's ClusterRole (deploy/operator/rbac/role.yaml) from the
## +kubebuilder:rbac markers of pkg/operator, by controller-gen pinned in
## hack/tools/go.mod.
generate:
	$(GO) build -modfile=hack/tools/go.mod -o bin/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
	bin/controller-gen object:headerFile=/dev/null paths=./api/...
	bin/controller-gen crd:crdVersions=v1 paths=./api/... output:crd:dir=deploy/operator/crd
	bin/controller-gen rbac:roleName=steward-operator paths=./pkg/operator/... output:rbac:dir=deploy/operator/rbac

## test: the whole suite: unit tests under the race detector, then the
## end-to-end tests (test/...) against real etcd processes of every version
## in $(ETCD_VERSIONS), run by a race-built steward (docs/testing.md).
test: etcd-binaries s3-server kube-apiserver containerd kube-node kube-binaries coredns images prometheus nftables vet
	STEWARD_TEST_STORE=$(STORE) $(GO) test $(RACE) -count=1 -parallel 1 -timeout $(TEST_TIMEOUT) $(UNIT_PKGS)
	$(MAKE) --no-print-directory test-e2e-run

## test-e2e-run: the end-to-end tests alone, side by side, with their
## prerequisites already built (hack/e2e.sh: the local-Kubernetes packages
## one after the other beside the others); the slowest tests are summarized
## at the end and every event is kept in $(ARTIFACTS)/e2e.json. test/e2e/localkube
## brings up a cluster of each of $(KUBE_VERSIONS) and runs its smoke tests
## on each, as subtests named by the version (docs/kubernetes-local.md).
test-e2e-run:
	mkdir -p $(ARTIFACTS) bin
	$(GO) build $(RACE) -o $(TEST_BIN) ./cmd/steward
	STEWARD_KUBE_CACHE=$(KUBE_CACHE) STEWARD_IMAGES=$(IMAGES) STEWARD_TEST_KUBE_VERSIONS="$(KUBE_VERSIONS)" STEWARD_TEST_BINARY=$(TEST_BIN) STEWARD_TEST_STORE=$(STORE) STEWARD_TEST_RACE=$(if $(RACE),1,0) GO=$(GO) E2E_P=$(E2E_P) E2E_PARALLEL=$(E2E_PARALLEL) E2E_TIMEOUT=$(E2E_TIMEOUT) ARTIFACTS=$(ARTIFACTS) E2E_PKGS="$(E2E_PKGS)" ./hack/e2e.sh

test-unit:
	$(GO) test $(RACE) -count=1 -short $(UNIT_PKGS)

test-e2e: etcd-binaries s3-server kube-apiserver containerd kube-node kube-binaries coredns images prometheus nftables
	mkdir -p $(ARTIFACTS)
	STEWARD_KUBE_CACHE=$(KUBE_CACHE) STEWARD_IMAGES=$(IMAGES) STEWARD_TEST_KUBE_VERSIONS="$(KUBE_VERSIONS)" STEWARD_TEST_STORE=$(STORE) STEWARD_TEST_RACE=$(if $(RACE),1,0) $(GO) test -count=1 -timeout $(E2E_TIMEOUT) -artifacts -outputdir $(ARTIFACTS) -v ./test/e2e/...

## fuzz: fuzz each target listed in hack/fuzz-targets for $(FUZZTIME), one
## worker each (`make fuzz FUZZTIME=90s`). `make test` runs their seed
## corpora (testdata/fuzz/) as ordinary tests.
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./hack/fuzz.sh

## bench: the benchmarks recorded in docs/benchmarks.md (steward built
## without the race detector: test/bench's TestMain).
## The operator's (test/bench/operator) run in a local Kubernetes of
## $(KUBE_VERSION), brought up only when BENCH selects one of them. -p 1:
## one benchmark package at a time, so the hosts' figures never share the
## machine with the operator package's cluster.
bench: etcd-binaries s3-server kube-apiserver prometheus nftables containerd kube-node kube-binaries coredns images
	STEWARD_KUBE_CACHE=$(KUBE_CACHE) STEWARD_IMAGES=$(IMAGES) STEWARD_TEST_KUBE_VERSION=$(KUBE_VERSION) STEWARD_TEST_STORE=$(STORE) $(GO) test -p 1 -count=1 -v -timeout 150m -run '^$$' -bench '$(BENCH)' -benchtime 1x ./test/bench/...

## demo: build Steward and start a local three-member cluster on the
## embedded etcd version. `make demo-down` stops it. A new demo cluster
## uses the binary store `make etcd-binaries` fills ($(STORE)), so the
## versions it built are there for `steward upgrade` and `steward etcdctl`
## (one store, not a second one in $(DEMO_DIR)/binaries); an existing demo
## directory keeps the store its spec names.
demo: build
	./$(BIN) up --dir $(DEMO_DIR) $(if $(wildcard $(DEMO_DIR)/cluster.yaml),,--binary-store $(STORE))
	./$(BIN) status --dir $(DEMO_DIR)

demo-down:
	./$(BIN) down --dir $(DEMO_DIR)

clean:
	rm -rf bin
