package recovery

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// etcdBinary returns the etcd program of version v from $STEWARD_ETCD_CACHE
// or <repo>/.cache/etcd (make etcd-binaries), failing the test when it is
// missing.
func etcdBinary(t *testing.T, v string) string {
	t.Helper()
	cache := os.Getenv("STEWARD_ETCD_CACHE")
	if cache == "" {
		dir, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				break
			}
			if filepath.Dir(dir) == dir {
				t.Fatal("no go.mod above the working directory")
			}
			dir = filepath.Dir(dir)
		}
		cache = filepath.Join(dir, ".cache", "etcd")
	}
	p := filepath.Join(cache, "v"+v, "etcd")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("etcd %s missing (%v): run `make etcd-binaries` (or set STEWARD_ETCD_CACHE)", v, err)
	}
	return p
}

func freeURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// runEtcd runs a plain one-member etcd on dataDir with extra flags and
// waits until it serves; the returned func kills it with sig and waits
// for it to exit.
func runEtcd(t *testing.T, bin, dataDir string, extra ...string) (*clientv3.Client, func(syscall.Signal)) {
	t.Helper()
	client, peer := freeURL(t), freeURL(t)
	logf, err := os.Create(dataDir + ".log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, append([]string{"--name", "s1", "--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "s1=" + peer}, extra...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func(sig syscall.Signal) {
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() { stop(syscall.SIGKILL) })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(dataDir + ".log")
			t.Fatalf("etcd does not serve: %v\n%s", err, b)
		}
		select {
		case <-done:
			b, _ := os.ReadFile(dataDir + ".log")
			t.Fatalf("etcd exited:\n%s", b)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return cli, stop
}

// TestChooseSeedRealWALAhead: a real data dir whose member was killed -9
// between commit and apply (its backend commits once an hour here, so
// the window is certain): its database is behind the newest backup, its
// WAL is not. The choice asks for the replay (before the fix, the
// database's revision alone sent the recovery to the backup, dropping the
// writes the WAL holds); once the member replayed its WAL (a start alone,
// as the replay's isolated run is), the same data dir seeds the cluster.
func TestChooseSeedRealWALAhead(t *testing.T) {
	bin := etcdBinary(t, "3.6.16")
	dataDir := filepath.Join(t.TempDir(), "s1")
	// A first run stopped gracefully: its database holds its writes.
	cli, stop := runEtcd(t, bin, dataDir)
	for i := range 5 {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("a%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	stop(syscall.SIGTERM)
	cli, stop = runEtcd(t, bin, dataDir, "--backend-batch-interval", "1h", "--backend-batch-limit", "1000000")
	var last int64
	for i := range 20 {
		resp, err := cli.Put(t.Context(), fmt.Sprintf("k%02d", i), "v")
		if err != nil {
			t.Fatal(err)
		}
		last = resp.Header.Revision
	}
	stop(syscall.SIGKILL)

	cand := func() seedCandidate {
		t.Helper()
		f := datadir.Check(dataDir)
		applied, committed, err := datadir.Applied(dataDir)
		if err != nil || f.State != datadir.Valid {
			t.Fatalf("data dir: %v, %v", f, err)
		}
		return seedCandidate{Name: "s1", Finding: f, Indexed: true, Applied: applied, Committed: committed}
	}
	s := cand()
	if s.Finding.Revision >= last || s.Committed <= s.Applied {
		t.Fatalf("killed -9 with its backend uncommitted: database at revision %d (writes up to %d), applied %d, committed %d; want the WAL ahead", s.Finding.Revision, last, s.Applied, s.Committed)
	}
	newest := last - 5 // the newest backup: past the database, behind the WAL
	if got := chooseSeed([]seedCandidate{s}, newest); len(got.Replay) != 1 || got.Replay[0] != 0 {
		t.Fatalf("chooseSeed with the WAL ahead = %+v; want the member replayed first, not the backup restored over it", got)
	}

	// Replayed: the member applies its committed entries when it starts.
	_, stop = runEtcd(t, bin, dataDir)
	stop(syscall.SIGTERM)
	s = cand()
	if s.Finding.Revision != last || s.Committed > s.Applied {
		t.Fatalf("after the replay: database at revision %d (want %d), applied %d, committed %d", s.Finding.Revision, last, s.Applied, s.Committed)
	}
	if got := chooseSeed([]seedCandidate{s}, newest); len(got.Replay) != 0 || got.Seed != 0 {
		t.Fatalf("chooseSeed after the replay = %+v; want it to seed", got)
	}
}
