package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	mathrand "math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/test/harness"
)

// invProto is what kube-apiserver stores for a built-in object: "k8s\x00"
// and a runtime.Unknown {1 typeMeta {1 apiVersion, 2 kind}, 2 raw,
// 3 contentEncoding, 4 contentType}.
func invProto(apiVersion, kind string, size int) []byte {
	var tm []byte
	tm = protowire.AppendTag(tm, 1, protowire.BytesType)
	tm = protowire.AppendString(tm, apiVersion)
	tm = protowire.AppendTag(tm, 2, protowire.BytesType)
	tm = protowire.AppendString(tm, kind)
	u := []byte("k8s\x00")
	u = protowire.AppendTag(u, 1, protowire.BytesType)
	u = protowire.AppendBytes(u, tm)
	u = protowire.AppendTag(u, 2, protowire.BytesType)
	u = protowire.AppendBytes(u, bytes.Repeat([]byte{0x0a}, size))
	u = protowire.AppendTag(u, 3, protowire.BytesType)
	u = protowire.AppendString(u, "")
	u = protowire.AppendTag(u, 4, protowire.BytesType)
	u = protowire.AppendString(u, "")
	return u
}

// invEncrypted is an encrypted-at-rest value: prefix and random bytes.
func invEncrypted(prefix string) []byte {
	b := make([]byte, 200)
	_, _ = rand.Read(b)
	return append([]byte(prefix), b...)
}

// invModel applies writes to etcd and to a map of the live keys.
type invModel struct {
	t    *testing.T
	cli  *clientv3.Client
	live map[string][]byte
	rev  int64
}

func (m *invModel) txn(ops ...clientv3.Op) {
	m.t.Helper()
	for len(ops) > 0 {
		n := min(len(ops), 100)
		resp, err := m.cli.Txn(m.t.Context()).Then(ops[:n]...).Commit()
		if err != nil {
			m.t.Fatal(err)
		}
		m.rev = resp.Header.Revision
		for _, op := range ops[:n] {
			if op.IsPut() {
				m.live[string(op.KeyBytes())] = op.ValueBytes()
			} else {
				delete(m.live, string(op.KeyBytes()))
			}
		}
		ops = ops[n:]
	}
}

func (m *invModel) put(key string, value []byte) clientv3.Op {
	return clientv3.OpPut(key, string(value))
}

// expected is the inventory of the model's live keys.
func (m *invModel) expected() kstorage.Report {
	inv := kstorage.NewInventory(kstorage.DefaultPrefix)
	for k, v := range m.live {
		inv.Add([]byte(k), v)
	}
	return inv.Report(kstorage.Source{})
}

// sameInventory compares everything but the source.
func sameInventory(t *testing.T, what string, got, want kstorage.Report) {
	t.Helper()
	got.Source, want.Source = kstorage.Source{}, kstorage.Source{}
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	if !bytes.Equal(g, w) {
		t.Errorf("%s: inventory differs from the keys written\n got: %s\nwant: %s", what, g, w)
	}
}

func tmpInventoryDirs(t *testing.T, e *harness.Env) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(e.Dir, "tmp-inventory-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestInventory writes Kubernetes-shaped values under /registry (2,500
// protobuf config maps, so the live scan takes three pages; JSON custom
// resources; secrets encrypted with aescbc and KMS v2 and a plain one; a
// batch/v1beta1 CronJob; a non-object key; keys outside the prefix;
// deleted and re-written keys), then inventories the live cluster, a
// snapshot file and a backup (full snapshot plus deltas), each of which
// must count exactly the live keys; then the bad inputs.
func TestInventory(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, binaries.EmbeddedVersion())
	cli := e.Client()
	m := &invModel{t: t, cli: cli, live: map[string][]byte{}}

	var ops []clientv3.Op
	for i := 0; i < 2500; i++ {
		ops = append(ops, m.put(fmt.Sprintf("/registry/configmaps/ns-%02d/cm-%05d", i%7, i), invProto("v1", "ConfigMap", 100+i%50)))
	}
	widget := []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"default"},"spec":{"size":3}}`)
	ops = append(ops,
		m.put("/registry/example.com/widgets/default/w1", widget),
		m.put("/registry/example.com/widgets/default/w2", bytes.Replace(widget, []byte("w1"), []byte("w2"), 1)),
		m.put("/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com",
			[]byte(`{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1","metadata":{"name":"widgets.example.com"}}`)),
		m.put("/registry/secrets/default/enc-aescbc", invEncrypted("k8s:enc:aescbc:v1:key1:")),
		m.put("/registry/secrets/default/enc-kms", invEncrypted("k8s:enc:kms:v2:kms-plugin:")),
		m.put("/registry/secrets/default/plain", invProto("v1", "Secret", 64)),
		m.put("/registry/cronjobs/default/nightly", invProto("batch/v1beta1", "CronJob", 80)),
		m.put("/registry/namespaces/default", invProto("v1", "Namespace", 30)),
		m.put("/registry/services/specs/default/kubernetes", invProto("v1", "Service", 90)),
		m.put("/registry/health", []byte(`{"health":"true"}`)),
		m.put("/registry/configmaps/ns-gone/deleted", invProto("v1", "ConfigMap", 10)),
		m.put("compact_rev_key", []byte("42")),
		m.put("/other/configmaps/ns/x", invProto("v1", "ConfigMap", 10)),
	)
	m.txn(ops...)
	// History the inventory must see through: an update, a deletion, a
	// deletion followed by a re-creation in another version.
	m.txn(m.put("/registry/configmaps/ns-00/cm-00000", invProto("v1", "ConfigMap", 5000)))
	m.txn(clientv3.OpDelete("/registry/configmaps/ns-gone/deleted"))
	m.txn(clientv3.OpDelete("/registry/example.com/widgets/default/w2"))
	m.txn(m.put("/registry/example.com/widgets/default/w2", []byte(`{"apiVersion":"example.com/v2","kind":"Widget","metadata":{"name":"w2"}}`)))
	want := m.expected()

	// The oracle itself, spelled out.
	if cm := harness.InspectResource(want, "configmaps"); cm.Objects != 2500 || len(cm.Versions) != 1 || cm.Versions[0].APIVersion != "v1" || cm.Versions[0].Format != kstorage.FormatProtobuf {
		t.Fatalf("expected config maps: %+v", cm)
	}
	if s := harness.InspectResource(want, "secrets"); s.Objects != 3 || s.EncryptedObjects != 2 || len(s.Encryption) != 2 ||
		s.Encryption[0] != (kstorage.EncryptionReport{Provider: "aescbc", PrefixVersion: "v1", KeyName: "key1", Objects: 1, Bytes: int64(len("k8s:enc:aescbc:v1:key1:") + 200)}) ||
		s.Encryption[1].Provider != "kms" || s.Encryption[1].PrefixVersion != "v2" || s.Encryption[1].KeyName != "kms-plugin" {
		t.Fatalf("expected secrets: %+v", s)
	}
	if w := harness.InspectResource(want, "widgets.example.com"); w.Objects != 2 || len(w.Versions) != 2 {
		t.Fatalf("expected widgets: %+v", w)
	}
	if want.Totals.Objects != 2509 || want.OtherKeys.Objects != 1 {
		t.Fatalf("expected totals %+v, other keys %+v", want.Totals, want.OtherKeys)
	}

	t.Run("live cluster", func(t *testing.T) {
		rep := harness.InspectJSON(t, e)
		if rep.Source.Type != "cluster" || rep.Source.Revision != m.rev || rep.Source.Cluster == "" {
			t.Errorf("source %+v, want the cluster at revision %d", rep.Source, m.rev)
		}
		sameInventory(t, "live", rep, want)
		if rep.RemovedAPIs != nil {
			t.Errorf("removed APIs checked without --kubernetes-version: %+v", rep.RemovedAPIs)
		}

		so, se, err := e.Run("inspect", "storage-versions", "--kubernetes-version", "1.25")
		if err != nil {
			t.Fatalf("removed APIs found must not fail the command: %v\n%s", err, se)
		}
		t.Logf("steward inspect storage-versions --kubernetes-version 1.25:\n%s%s", so, se)
		for _, s := range []string{"cronjobs", "batch/v1beta1", "1.25", "batch/v1", "WARNING", "TOTAL", "aescbc:v1:key1", "kms:v2:kms-plugin", "widgets.example.com"} {
			if !strings.Contains(so, s) {
				t.Errorf("table does not show %q:\n%s", s, so)
			}
		}
		if !strings.Contains(se, "warning: 1 object is stored in API versions Kubernetes 1.25 no longer serves") {
			t.Errorf("no warning on stderr: %s", se)
		}
		rep = harness.InspectJSON(t, e, "--kubernetes-version", "v1.25.3")
		rc := rep.RemovedAPIs
		if rc == nil || rc.KubernetesVersion != "1.25" || rc.Objects != 1 || len(rc.Uses) != 1 || rc.UncheckedObjects != 2 ||
			rc.Uses[0] != (kstorage.RemovedUse{Resource: "cronjobs", APIVersion: "batch/v1beta1", Kind: "CronJob", Objects: 1, RemovedIn: "1.25", Replacement: "batch/v1"}) {
			t.Errorf("removed APIs for 1.25: %+v", rc)
		}
		if rc := harness.InspectJSON(t, e, "--kubernetes-version", "1.24").RemovedAPIs; rc == nil || rc.Objects != 0 || rc.Uses == nil {
			t.Errorf("removed APIs for 1.24: %+v", rc)
		}
		out := e.MustRun("inspect", "storage-versions", "-o", "yaml", "--prefix", "/other/")
		if !strings.Contains(out, "prefix: /other") || !strings.Contains(out, "resource: configmaps") || !strings.Contains(out, "objects: 1") {
			t.Errorf("yaml with --prefix /other/:\n%s", out)
		}
	})

	snap := filepath.Join(t.TempDir(), "snapshot.db")
	// The later phases read this snapshot.
	if !t.Run("snapshot file", func(t *testing.T) {
		rc, err := cli.Snapshot(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(snap)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		before := fileSum(t, snap)
		rep := harness.InspectJSON(t, e, "--snapshot", snap)
		if rep.Source.Type != "snapshot" || rep.Source.Path != snap || rep.Source.Revision != m.rev {
			t.Errorf("source %+v, want %s at revision %d", rep.Source, snap, m.rev)
		}
		sameInventory(t, "snapshot", rep, want)
		if fileSum(t, snap) != before {
			t.Error("the snapshot file was modified")
		}
	}) {
		return
	}

	t.Run("backup", func(t *testing.T) {
		full := harness.BackupNow(t, e)
		// Changes after the full backup reach the inventory through deltas.
		m.txn(m.put("/registry/configmaps/ns-00/after-backup", invProto("v1", "ConfigMap", 10)))
		m.txn(clientv3.OpDelete("/registry/secrets/default/plain"))
		m.txn(m.put("/registry/cronjobs/default/nightly", invProto("batch/v1", "CronJob", 80)))
		harness.WaitBackedUp(t, e, m.rev)
		rep := harness.InspectJSON(t, e, "--backup", full.ID)
		if rep.Source.Type != "backup" || rep.Source.BackupID != full.ID || rep.Source.FullRevision != full.EndRevision ||
			rep.Source.Revision != m.rev || rep.Source.DeltasApplied < 1 {
			t.Errorf("source %+v, want backup %s at %d replayed to %d", rep.Source, full.ID, full.EndRevision, m.rev)
		}
		sameInventory(t, "backup", rep, m.expected())
		if d := tmpInventoryDirs(t, e); len(d) > 0 {
			t.Errorf("temporary files left: %v", d)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		dir := t.TempDir()
		text := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(text, []byte("not a database\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		noKey := filepath.Join(dir, "other.db")
		db, err := bolt.Open(noKey, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("plans")); return err }); err != nil {
			t.Fatal(err)
		}
		db.Close()
		var delta string
		for _, b := range harness.ListBackups(t, e) {
			if b.Kind == backup.KindDelta {
				delta = b.ID
			}
		}
		sums := map[string]string{text: fileSum(t, text), noKey: fileSum(t, noKey), snap: fileSum(t, snap)}
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--snapshot", text}, []string{"inspect storage-versions: " + text + " is not an etcd snapshot: it is not a bbolt database"}},
			{[]string{"--snapshot", noKey}, []string{"inspect storage-versions: " + noKey + ` is not an etcd snapshot: the bbolt database has no "key" bucket`}},
			{[]string{"--snapshot", dir}, []string{dir + " is a directory, not an etcd snapshot"}},
			{[]string{"--snapshot", filepath.Join(dir, "missing.db")}, []string{"snapshot file " + filepath.Join(dir, "missing.db") + " does not exist"}},
			{[]string{"--backup", "20200101T000000.000Z-full-r1"}, []string{`no backup "20200101T000000.000Z-full-r1"`, "steward backup list"}},
			{[]string{"--backup", delta}, []string{"backup " + delta + " is a delta segment: name a full backup"}},
			{[]string{"--snapshot", snap, "--backup", "latest"}, []string{"--snapshot and --backup", "give one"}},
			{[]string{"--kubernetes-version", "latest"}, []string{"--kubernetes-version", "want MAJOR.MINOR"}},
			{[]string{"--key-file", text}, []string{"--key-file decrypts a backup"}},
			{[]string{"-o", "xml"}, []string{`unknown output format "xml"`}},
		} {
			out := e.MustFail(append([]string{"inspect", "storage-versions"}, tc.args...)...)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("%v: error does not say %q:\n%s", tc.args, w, out)
				}
			}
			if n := strings.Count(out, "Error:"); n != 1 {
				t.Errorf("%v: %d errors, want one:\n%s", tc.args, n, out)
			}
		}
		for p, sum := range sums {
			if fileSum(t, p) != sum {
				t.Errorf("%s was modified", p)
			}
		}
		if d := tmpInventoryDirs(t, e); len(d) > 0 {
			t.Errorf("temporary files left: %v", d)
		}

		// Without quorum the live cluster cannot be read; its backups and
		// snapshots still can.
		names := e.Spec().MemberNames()
		e.MustRun("member", "stop", "--force", names[1])
		e.MustRun("member", "stop", "--force", names[2])
		out := e.MustFail("inspect", "storage-versions")
		if !strings.Contains(out, "cannot read the live cluster") || !strings.Contains(out, "--snapshot FILE") {
			t.Errorf("live cluster without quorum: %s", out)
		}
		sameInventory(t, "snapshot without quorum", harness.InspectJSON(t, e, "--snapshot", snap), want)
	})
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// scanRequest is one range request the live scan sent.
type scanRequest struct {
	key, end     string
	limit, rev   int64
	serializable bool
}

// recordingKV passes every call to a real etcd. It records each Get's key,
// range end, limit and revision, and runs afterGet (when set) after each
// Get returns, with the number of Gets so far: a test writes or compacts
// there, between two pages of a scan.
type recordingKV struct {
	clientv3.KV
	reqs     []scanRequest
	afterGet func(n int)
}

func (r *recordingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	op := clientv3.OpGet(key, opts...)
	r.reqs = append(r.reqs, scanRequest{key: key, end: string(op.RangeBytes()), limit: op.Limit(), rev: op.Rev(), serializable: op.IsSerializable()})
	resp, err := r.KV.Get(ctx, key, opts...)
	if r.afterGet != nil {
		r.afterGet(len(r.reqs))
	}
	return resp, err
}

// TestInventoryLiveScan checks the live scan's paging (kstorage.ScanLive,
// behind `steward inspect storage-versions`) against a real etcd 3.6,
// which counts every key from a range request's start to its end whatever
// the limit: on several thousand keys of resources of every shape (dense
// sequential names, random names of random lengths, dozens of
// one-object resources, random names across namespaces), read 100 keys a
// page, it must read every key once and make etcd walk only a few times
// as many keys as there are; writes between pages must not show (every
// page is read at the first page's revision); a compaction past that
// revision mid-scan must stop it with an error that says to run it again.
func TestInventoryLiveScan(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, version36(t))
	cli := e.Client()
	ctx := t.Context()
	m := &invModel{t: t, cli: cli, live: map[string][]byte{}}

	rnd := mathrand.New(mathrand.NewSource(1))
	var ops []clientv3.Op
	seen := map[string]bool{}
	put := func(k string, v []byte) {
		if !seen[k] { // a transaction must not name a key twice
			seen[k] = true
			ops = append(ops, m.put(k, v))
		}
	}
	cm := invProto("v1", "ConfigMap", 20)
	for i := 0; i < 4000; i++ { // dense, sequential names
		put(fmt.Sprintf("/registry/configmaps/ns-%02d/cm-%07d", i%10, i), cm)
	}
	for i := 0; i < 1000; i++ { // random names of random lengths
		b := make([]byte, 1+rnd.Intn(40))
		for j := range b {
			b[j] = "abcdefghijklmnopqrstuvwxyz0123456789-."[rnd.Intn(38)]
		}
		put(fmt.Sprintf("/registry/events/ns-%d/%s", rnd.Intn(5), b), invProto("v1", "Event", 20))
	}
	for i := 0; i < 60; i++ { // many one-object resources
		put(fmt.Sprintf("/registry/group%03d.example.com/things/t%d", i, i),
			[]byte(fmt.Sprintf(`{"apiVersion":"group%03d.example.com/v1","kind":"Thing","metadata":{"name":"t%d"}}`, i, i)))
	}
	for _, r := range []string{"pods", "replicasets", "rolebindings", "secrets", "serviceaccounts", "services/specs"} {
		for i := 0; i < 400; i++ { // random hex names in 8 namespaces
			put(fmt.Sprintf("/registry/%s/team-%d/%s-%x", r, rnd.Intn(8), []string{"web", "api", "db"}[rnd.Intn(3)], rnd.Int63()),
				invProto("v1", "Object", 20))
		}
	}
	put("/registry/zzz/last", invProto("v1", "Last", 10))
	put("/registry/health", []byte(`{"health":"true"}`))
	put("compact_rev_key", []byte("1")) // outside the prefix
	m.txn(ops...)
	want := m.expected()
	n := want.Totals.Objects + want.OtherKeys.Objects // keys under the prefix
	if n < 7000 || len(want.Resources) < 60 {
		t.Fatalf("keyspace: %d keys in %d resources", n, len(want.Resources))
	}
	const page = 100

	// checkRequests: linearizable, page-sized requests, the first at the
	// current revision, the others at the first's, each window inside the
	// prefix and starting where the last left off or later.
	checkRequests := func(t *testing.T, reqs []scanRequest, info kstorage.LiveInfo) {
		t.Helper()
		if int64(len(reqs)) != info.Requests {
			t.Errorf("%d requests sent, info says %d", len(reqs), info.Requests)
		}
		prev := ""
		for i, r := range reqs {
			wantRev := info.Revision
			if i == 0 {
				wantRev = 0
			}
			if r.serializable || r.limit != page || r.rev != wantRev || r.key >= r.end || r.key <= prev ||
				!strings.HasPrefix(r.key, "/registry/") || r.end > "/registry0" {
				t.Errorf("request %d: %+v; want a linearizable read of [key, end) under /registry/ after %q, limit %d, revision %d", i, r, prev, page, wantRev)
			}
			prev = r.key
		}
	}

	t.Run("bounded walks", func(t *testing.T) {
		kv := &recordingKV{KV: cli}
		inv := kstorage.NewInventory(kstorage.DefaultPrefix)
		info, err := kstorage.ScanLive(ctx, kv, inv, page)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != m.rev || info.Keys != n {
			t.Errorf("info %+v, want %d keys at revision %d", info, n, m.rev)
		}
		sameInventory(t, "paged scan", inv.Report(kstorage.Source{}), want)
		checkRequests(t, kv.reqs, info)

		// What etcd walked for each request: the keys in [key, end) at
		// the request's revision, as etcd itself counts them.
		var walked, first, worst, empty int64
		for i, r := range kv.reqs {
			resp, err := cli.Get(ctx, r.key, clientv3.WithRange(r.end), clientv3.WithRev(info.Revision), clientv3.WithCountOnly())
			if err != nil {
				t.Fatal(err)
			}
			walked += resp.Count
			if resp.Count == 0 {
				empty++
			}
			if i == 0 {
				first = resp.Count
			} else {
				worst = max(worst, resp.Count)
			}
		}
		t.Logf("%d keys in %d resources, %d per page: %d requests (%d of empty windows); etcd walked %d keys (%.2f per key; the first request %d, the worst other %d)",
			n, len(want.Resources), page, info.Requests, empty, walked, float64(walked)/float64(n), first, worst)
		if first != n {
			t.Errorf("the first request's range holds %d keys, want all %d", first, n)
		}
		if walked > 8*n {
			t.Errorf("etcd walked %d keys for %d: the scan is not linear", walked, n)
		}
		// A window estimated too narrow (decimal names carry, a namespace
		// or resource ends) comes back empty and is widened: a request
		// that walks nothing, but a round trip. Most requests are such.
		if info.Requests > 8*n/page {
			t.Errorf("%d requests for %d keys at %d per page", info.Requests, n, page)
		}

		// The command (1,000 keys a page) reads the same.
		sameInventory(t, "steward inspect storage-versions", harness.InspectJSON(t, e), want)
	})

	t.Run("fixed revision", func(t *testing.T) {
		start, want := m.rev, m.expected()
		kv := &recordingKV{KV: cli}
		pod := invProto("v1", "Pod", 10)
		kv.afterGet = func(i int) {
			// Between pages: a key ahead of the scan in a new namespace of
			// pods, one behind it, deletions ahead of and behind it, and the
			// last key rewritten in another version.
			m.txn(
				m.put(fmt.Sprintf("/registry/pods/late/p-%04d", i), pod),
				m.put(fmt.Sprintf("/registry/configmaps/aaa/early-%04d", i), cm),
				m.put(fmt.Sprintf("/registry/new.example.com/things/t%d", i), []byte(`{"apiVersion":"new.example.com/v1","kind":"Thing"}`)),
				clientv3.OpDelete(fmt.Sprintf("/registry/configmaps/ns-09/cm-%07d", 9+10*(i%400))),
				clientv3.OpDelete(fmt.Sprintf("/registry/configmaps/ns-00/cm-%07d", 10*(i%400))),
				m.put("/registry/zzz/last", invProto("v2", "Last", 10+i)),
			)
		}
		inv := kstorage.NewInventory(kstorage.DefaultPrefix)
		info, err := kstorage.ScanLive(ctx, kv, inv, page)
		if err != nil {
			t.Fatal(err)
		}
		if info.Requests < 20 || m.rev < start+info.Requests {
			t.Fatalf("%d requests, revision %d to %d: the test did not write between pages", info.Requests, start, m.rev)
		}
		if info.Revision != start || info.Keys != want.Totals.Objects+want.OtherKeys.Objects {
			t.Errorf("info %+v, want the %d keys at revision %d", info, want.Totals.Objects+want.OtherKeys.Objects, start)
		}
		sameInventory(t, "scan while writing", inv.Report(kstorage.Source{}), want)
		checkRequests(t, kv.reqs, info)

		// Scanned again, the writes show.
		after := m.expected()
		if after.Totals.Objects <= want.Totals.Objects {
			t.Fatalf("objects %d before the writes, %d after", want.Totals.Objects, after.Totals.Objects)
		}
		inv = kstorage.NewInventory(kstorage.DefaultPrefix)
		info, err = kstorage.ScanLive(ctx, &recordingKV{KV: cli}, inv, page)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != m.rev {
			t.Errorf("second scan at revision %d, want %d", info.Revision, m.rev)
		}
		sameInventory(t, "scan after the writes", inv.Report(kstorage.Source{}), after)
	})

	t.Run("compaction mid-scan", func(t *testing.T) {
		start := m.rev
		kv := &recordingKV{KV: cli}
		kv.afterGet = func(i int) {
			if i != 3 {
				return
			}
			// Kubernetes compacts every five minutes: here, past the scan's
			// revision after its third page.
			m.txn(m.put("/registry/pods/late/after-compaction", invProto("v1", "Pod", 10)))
			if _, err := cli.Compact(ctx, m.rev); err != nil {
				t.Fatal(err)
			}
		}
		info, err := kstorage.ScanLive(ctx, kv, kstorage.NewInventory(kstorage.DefaultPrefix), page)
		wantErr := fmt.Sprintf("etcd compacted revision %d while it was being read (%d keys read): run the inventory again", start, info.Keys)
		if err == nil || err.Error() != wantErr {
			t.Fatalf("scan across a compaction: %v; want %q", err, wantErr)
		}
		if info.Revision != start || info.Requests != 4 || info.Keys < 1 || info.Keys > 3*page {
			t.Errorf("info %+v: want the scan stopped at its fourth request, at revision %d", info, start)
		}
		checkRequests(t, kv.reqs, info)

		// Run again, as the error says: the scan reads the compacted
		// cluster at its new revision.
		inv := kstorage.NewInventory(kstorage.DefaultPrefix)
		info, err = kstorage.ScanLive(ctx, &recordingKV{KV: cli}, inv, page)
		if err != nil {
			t.Fatal(err)
		}
		if info.Revision != m.rev {
			t.Errorf("scan after the compaction at revision %d, want %d", info.Revision, m.rev)
		}
		sameInventory(t, "scan after the compaction", inv.Report(kstorage.Source{}), m.expected())
	})
}
