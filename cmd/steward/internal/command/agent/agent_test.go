package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/pki"
)

// TestJoinHint: a refused join file reads as it did when the library
// named `steward host add` and --dir: the command adds them; other errors
// pass unchanged.
func TestJoinHint(t *testing.T) {
	expires := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &join.File{Agent: "cp-1", Host: "10.0.0.11", Port: 2378, ClusterToken: "tok", ExpiresAt: expires}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{(&join.File{Host: "10.0.0.11"}).Check(time.Now(), nil),
			`join file is incomplete (agent "", host "10.0.0.11", port 0): write a new one with ` + "`steward host add`"},
		{f.Check(expires.Add(time.Hour), nil),
			"join file expired at 2026-01-02T03:04:05Z (it is valid for " + join.DefaultValidity.String() + " after it is written): write a new one on the coordinator with `steward host add cp-1=10.0.0.11`"},
		{fmt.Errorf("%w: /h already belongs to cluster c1 (token a), the file is for cluster c2 (token b)", join.ErrOtherCluster),
			"join file is for another cluster: /h already belongs to cluster c1 (token a), the file is for cluster c2 (token b); use another --dir for the other cluster"},
	} {
		if got := joinHint(tc.err, f); got == nil || got.Error() != tc.want {
			t.Errorf("joinHint = %v\nwant %s", got, tc.want)
		}
	}
	other := errors.New("permission denied")
	if joinHint(other, f) != other {
		t.Error("joinHint changed an error it has no advice for")
	}
}

// TestJoinedAlready: a member pod restarting with the same --join finds
// its directory joined as that agent of that cluster and skips the file
// (which may have expired); another agent's or cluster's file is applied
// (and refused by join.Apply), as is any file before the first join.
func TestJoinedAlready(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "db-0.yaml")
	f := join.New("db", "db-tok", "db-0", "db-0.db-peer.ns.svc.cluster.local", 2378, &pki.HostBundle{}, time.Now().Add(-time.Hour))
	if err := f.Write(file); err != nil {
		t.Fatal(err)
	}
	if joinedAlready(dir, file) {
		t.Fatal("a directory that never joined counts as joined")
	}
	id := "apiVersion: steward.etcd.io/v1alpha1\nkind: AgentIdentity\ncluster: db\nclusterToken: db-tok\nagent: db-0\nhost: db-0.db-peer.ns.svc.cluster.local\nport: 2378\njoinedAt: 2026-01-01T00:00:00Z\n"
	if err := os.WriteFile(filepath.Join(dir, join.IdentityFile), []byte(id), 0o600); err != nil {
		t.Fatal(err)
	}
	if !joinedAlready(dir, file) {
		t.Error("the directory of agent db-0 of cluster db-tok does not count as joined by db-0's file")
	}
	other := join.New("db", "other-tok", "db-0", "h", 2378, &pki.HostBundle{}, time.Now())
	if err := other.Write(file); err != nil {
		t.Fatal(err)
	}
	if joinedAlready(dir, file) {
		t.Error("a file of another cluster counts as joined")
	}
}
