package status

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/etcd-steward/steward/pkg/status"
)

// TestTableSizes: database sizes in the table are in IEC units, as in
// every other table and progress line (a 20 KiB database read "0.0 MB").
func TestTableSizes(t *testing.T) {
	st := &status.Status{Members: []status.MemberStatus{
		{Name: "etcd-1", Role: "leader", DBSize: 20480, DBSizeInUse: 16384},
		{Name: "etcd-2", Role: "follower", DBSize: 3 << 20},
	}}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	table(tw, st)
	tw.Flush()
	out := b.String()
	for _, want := range []string{"20.0 KiB", "16.0 KiB", "3.0 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("status table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " MB") {
		t.Errorf("status table has decimal MB:\n%s", out)
	}
}
