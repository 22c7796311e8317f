package agent

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/join"
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
