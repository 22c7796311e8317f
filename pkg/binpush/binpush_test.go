package binpush

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestPushHosts: a push goes to the agents on other hosts, all of them or
// those named (in the spec's order, each once); a name that is no host,
// or the agent on this machine, is refused, and so is a spec without
// other hosts.
func TestPushHosts(t *testing.T) {
	dir := t.TempDir()
	c := Cluster{Dir: dir, SpecPath: filepath.Join(dir, "cluster.yaml"), Spec: &spec.Cluster{Agents: []spec.Agent{
		{Name: "local", Address: "unix:///run/agent.sock"},
		{Name: "h1", Host: "10.0.0.11", Port: 2378},
		{Name: "h2", Host: "10.0.0.12", Port: 2378},
		{Name: "h3", Host: "10.0.0.13", Port: 2378},
	}}}
	for _, tc := range []struct {
		named, want []string
		err         string
	}{
		{nil, []string{"h1", "h2", "h3"}, ""},
		{[]string{"h3", "h1", "h3"}, []string{"h1", "h3"}, ""},
		{[]string{"h1", "h9"}, nil, `host "h9" is not in ` + c.SpecPath + " (hosts: [h1 h2 h3])"},
		{[]string{"local"}, nil, "agent local runs on this machine"},
	} {
		got, err := pushHosts(c, tc.named)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("pushHosts(%v) = %v, %v; want %q", tc.named, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got.Names(), tc.want) {
			t.Errorf("pushHosts(%v) = %v, %v; want %v", tc.named, got, err, tc.want)
		}
	}
	// A version missing from the local store (or not verifying) reaches
	// no host: no agent is asked.
	res, err := Push(t.Context(), c, "3.7.3", Options{Store: binaries.Open(t.TempDir())})
	if !errors.Is(err, binaries.ErrNotFound) || !strings.Contains(err.Error(), "etcd 3.7.3 was pushed to no host") || len(res.Hosts) != 0 {
		t.Errorf("push of a missing version = %+v, %v", res, err)
	}
	_, err = Push(t.Context(), c, binaries.EmbeddedVersion(), Options{Store: binaries.Open(t.TempDir())})
	if err == nil || !strings.Contains(err.Error(), "each host runs it from its own steward binary") {
		t.Errorf("push of the embedded version without a stored copy: %v", err)
	}

	c.Spec.Agents = c.Spec.Agents[:1]
	if _, err := pushHosts(c, nil); !errors.Is(err, ErrNoHosts) {
		t.Errorf("pushHosts without other hosts: %v", err)
	}
}
