package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
)

const pushVersion = "3.7.3"

// fakeTool is a shell script that answers --version as etcd pushVersion
// does; name makes each tool's content (and sum) its own.
func fakeTool(name string) []byte {
	return []byte("#!/bin/sh\n# " + name + "\necho 'etcd Version: " + pushVersion + "'\n")
}

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// sourceStore returns a store holding pushVersion (fake tools), as a
// coordinator's.
func sourceStore(t *testing.T) *binaries.Store {
	t.Helper()
	src := filepath.Join(t.TempDir(), "etcd-v"+pushVersion)
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
		if err := os.WriteFile(filepath.Join(src, tool), fakeTool(tool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := binaries.Open(filepath.Join(t.TempDir(), "store"))
	if _, err := s.Import(context.Background(), src, binaries.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// socketClient serves the agent's handler on a Unix socket, counting the
// pushes (PUT requests), and returns a client of it.
func socketClient(t *testing.T, a *Agent) (*agentapi.Client, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var puts atomic.Int32
	h := a.Handler()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			puts.Add(1)
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c, err := agentapi.NewClient("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	return c, &puts
}

// TestPushBinary: a version pushed through the client lands verified in
// the agent's own store (BinaryStore unset: DIR/binaries); a second push
// sends nothing.
func TestPushBinary(t *testing.T) {
	ctx := context.Background()
	_, a, _ := apiAgent(t)
	c, puts := socketClient(t, a)
	src := sourceStore(t)
	want, err := src.Sums(pushVersion)
	if err != nil {
		t.Fatal(err)
	}

	// The problem travels with its kind (binaries.Problem: the
	// coordinator's command names the command that fixes it), in the
	// library's words.
	if ch, err := c.CheckBinary(ctx, pushVersion); err != nil || ch.Problem == "" || ch.Files != nil ||
		ch.ProblemKind != binaries.KindNotInStore || ch.Version != pushVersion || strings.Contains(ch.Problem, "steward binaries") {
		t.Fatalf("check before the push = %+v, %v; want a problem of its kind and no files", ch, err)
	}
	res, err := c.PushBinary(ctx, src, pushVersion)
	store := filepath.Join(a.opts.Dir, "binaries")
	if err != nil || res.Result != agentapi.PushInstalled || res.Store != store ||
		res.Binary != filepath.Join(store, "etcd-v"+pushVersion, "etcd") || strings.Join(res.Tools, ",") != "etcd,etcdctl,etcdutl" {
		t.Fatalf("PushBinary = %+v, %v", res, err)
	}
	ch, err := c.CheckBinary(ctx, pushVersion)
	if err != nil || ch.Problem != "" || ch.Binary != res.Binary {
		t.Fatalf("check after the push = %+v, %v", ch, err)
	}
	for tool, s := range want {
		if ch.Files[tool] != s {
			t.Errorf("%s: agent's sum %s, sent %s", tool, ch.Files[tool], s)
		}
	}

	again, err := c.PushBinary(ctx, src, "v"+pushVersion)
	if err != nil || again.Result != agentapi.PushPresent || again.Binary != res.Binary || strings.Join(again.Tools, ",") != "etcd,etcdctl,etcdutl" {
		t.Fatalf("second PushBinary = %+v, %v", again, err)
	}
	if n := puts.Load(); n != 1 {
		t.Errorf("%d bundles sent, want 1: the second push must send nothing", n)
	}

	// A version the local store lacks is refused before anything is sent.
	if _, err := c.PushBinary(ctx, src, "3.5.35"); !errors.Is(err, binaries.ErrNotFound) {
		t.Errorf("push of a missing version: %v", err)
	}
	if n := puts.Load(); n != 1 {
		t.Errorf("%d bundles sent, want 1", n)
	}
}

// TestPushCorruptedCopy: a sender whose stored file no longer matches its
// manifest has its push refused by the agent (400, naming the file and
// both sums), and the agent's store keeps nothing.
func TestPushCorruptedCopy(t *testing.T) {
	ctx := context.Background()
	root, a, _ := apiAgent(t)
	c, _ := socketClient(t, a)
	src := sourceStore(t)
	sums, _ := src.Sums(pushVersion)
	bad := append(fakeTool("etcdutl"), '#')
	if err := os.WriteFile(filepath.Join(src.Dir, "etcd-v"+pushVersion, "etcdutl"), bad, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := c.PushBinary(ctx, src, pushVersion)
	var ae *agentapi.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "sha256 mismatch for etcdutl: the sender's manifest says "+sums["etcdutl"]+", the received file has "+sum(bad)) {
		t.Fatalf("push of a corrupted copy: %v", err)
	}
	requireNothingStored(t, root)
}

// requireNothingStored fails when a push left a file or a temporary
// directory anywhere under root.
func requireNothingStored(t *testing.T, root string) {
	t.Helper()
	if f := files(t, root); len(f) > 0 {
		t.Fatalf("files written: %v", f)
	}
	left, _ := filepath.Glob(filepath.Join(root, "steward", "binaries", "*"))
	if len(left) > 0 {
		t.Fatalf("left in the store: %v", left)
	}
}

// bundle is a hand-made push body: the manifest listing files, then the
// entries (name, content) in order.
func bundle(t *testing.T, version string, files map[string]string, entries ...[2]string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	head, _ := json.Marshal(binaries.BundleManifest{Version: version, Files: files})
	all := append([][2]string{{binaries.BundleManifestName, string(head)}}, entries...)
	for _, e := range all {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Mode: 0o755, Size: int64(len(e[1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestPushRejectsBadNames: a version that is not one (a path, sent
// escaped so that it is one URL segment) is refused with 400 before the
// body is read, and a bundle naming a file other than etcd, etcdctl or
// etcdutl, or a sum that differs, with 400 too; none writes anything.
func TestPushRejectsBadNames(t *testing.T) {
	root, _, srv := apiAgent(t)
	etcd := string(fakeTool("etcd"))
	good := bundle(t, pushVersion, map[string]string{"etcd": sum([]byte(etcd))}, [2]string{"etcd", etcd})
	for _, seg := range []string{"..%2F..%2Fx", "3.7.3%2F..%2F..%2Fx", "%2E%2E", "3.7", "v3.7.3-rc.0", "3.07.3", "4.0.0", "etcd"} {
		code, body := call(t, srv, http.MethodPut, "/v1/binaries/"+seg, good)
		if code != http.StatusBadRequest || !strings.Contains(body, "invalid etcd version") {
			t.Errorf("PUT /v1/binaries/%s: %d %s, want 400 naming the bad version", seg, code, body)
		}
		requireNothingStored(t, root)
	}
	for _, tc := range []struct{ what, body, want string }{
		{"a tool that is not one", bundle(t, pushVersion, map[string]string{"etcd": sum([]byte(etcd)), "sh": sum([]byte("x"))}, [2]string{"etcd", etcd}, [2]string{"sh", "x"}),
			`lists \"sh\", which is not one of etcd, etcdctl, etcdutl`},
		{"a path as a tool", bundle(t, pushVersion, map[string]string{"etcd": sum([]byte(etcd)), "../../../bin/etcd": sum([]byte(etcd))}, [2]string{"../../../bin/etcd", etcd}),
			`lists \"../../../bin/etcd\", which is not one of`},
		{"an entry the manifest does not list", bundle(t, pushVersion, map[string]string{"etcd": sum([]byte(etcd))}, [2]string{"etcd", etcd}, [2]string{"../etcd", etcd}),
			`entry \"../etcd\" is not a file its manifest lists`},
		{"another version than the URL's", bundle(t, "3.6.16", map[string]string{"etcd": sum([]byte(etcd))}, [2]string{"etcd", etcd}),
			`its manifest is for etcd \"3.6.16\", the request for 3.7.3`},
		{"a sum that differs", bundle(t, pushVersion, map[string]string{"etcd": sum([]byte("other"))}, [2]string{"etcd", etcd}),
			"sha256 mismatch for etcd: the sender's manifest says " + sum([]byte("other"))},
		{"not a bundle", "hello", "bad binary bundle"},
	} {
		code, body := call(t, srv, http.MethodPut, "/v1/binaries/"+pushVersion, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("PUT of %s: %d %s, want 400 containing %s", tc.what, code, body, tc.want)
		}
		requireNothingStored(t, root)
	}
	// The same request with a good bundle is taken.
	if code, body := call(t, srv, http.MethodPut, "/v1/binaries/"+pushVersion, good); code != http.StatusOK || !strings.Contains(body, `"result":"installed"`) {
		t.Fatalf("PUT of a good bundle: %d %s", code, body)
	}
}

// TestListBinariesAndReplace: the agent lists its store with the sums its
// manifests record; another build under the same version is refused by a
// plain push and replaced by a replacing one, the host's copy kept aside;
// the listing then shows the sender's sums. An agent without the listing
// (an older steward: 404) is ErrNotServed.
func TestListBinariesAndReplace(t *testing.T) {
	ctx := context.Background()
	_, a, _ := apiAgent(t)
	c, _ := socketClient(t, a)
	src := sourceStore(t)
	want, _ := src.Sums(pushVersion)

	if l, err := c.ListBinaries(ctx); err != nil || len(l.Versions) != 0 || l.Store != filepath.Join(a.opts.Dir, "binaries") {
		t.Fatalf("list of an empty store = %+v, %v", l, err)
	}

	// Another build of the same version, imported on the host itself.
	other := filepath.Join(t.TempDir(), "etcd-v"+pushVersion)
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	otherEtcd := append(fakeTool("etcd"), []byte("# another build\n")...)
	if err := os.WriteFile(filepath.Join(other, "etcd"), otherEtcd, 0o755); err != nil {
		t.Fatal(err)
	}
	host := binaries.Open(filepath.Join(a.opts.Dir, "binaries"))
	if _, err := host.Import(ctx, other, binaries.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := c.ListBinaries(ctx)
	if err != nil || len(l.Versions) != 1 || l.Versions[0].Version != pushVersion || l.Versions[0].Files["etcd"] != sum(otherEtcd) {
		t.Fatalf("list = %+v, %v", l, err)
	}
	local, _ := src.Stored()
	if d := binaries.CompareStores(local, nil, l.Versions); len(d.Different) != 1 || d.Different[0] != pushVersion {
		t.Errorf("compare: %+v, want %s different", d, pushVersion)
	}

	if _, err := c.PushBinary(ctx, src, pushVersion); err == nil || !strings.Contains(err.Error(), binaries.ErrDifferentBinary.Error()) {
		t.Fatalf("plain push over another build: %v, want refused", err)
	}
	res, err := c.PushBinaryReplacing(ctx, src, pushVersion)
	if err != nil || res.Result != agentapi.PushInstalled {
		t.Fatalf("replacing push = %+v, %v", res, err)
	}
	if l, err = c.ListBinaries(ctx); err != nil || len(l.Versions) != 1 || l.Versions[0].Files["etcd"] != want["etcd"] || l.Versions[0].Files["etcdutl"] != want["etcdutl"] {
		t.Fatalf("list after the replacing push = %+v, %v", l, err)
	}
	aside, _ := filepath.Glob(filepath.Join(host.Dir, "etcd-v"+pushVersion+".replaced-*"))
	if len(aside) != 1 {
		t.Fatalf("the host's copy was not kept aside: %v", aside)
	}
	if b, err := os.ReadFile(filepath.Join(aside[0], "etcd")); err != nil || string(b) != string(otherEtcd) {
		t.Errorf("kept aside: %q, %v", b, err)
	}
	// Again: the same build is present, nothing replaced.
	if res, err := c.PushBinaryReplacing(ctx, src, pushVersion); err != nil || res.Result != agentapi.PushPresent {
		t.Errorf("second replacing push = %+v, %v", res, err)
	}

	// An older agent answers 404 to the listing.
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	old, err := agentapi.NewClient("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.ListBinaries(ctx); !errors.Is(err, agentapi.ErrNotServed) {
		t.Errorf("listing of an older agent: %v, want ErrNotServed", err)
	}
}
