package bootstrap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TestCheckEndpoints: endpoints are client URLs of one scheme, given in
// one flag or several, duplicates dropped; anything else is refused as
// ErrEndpoint naming the endpoint.
func TestCheckEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		in     []string
		want   []string
		scheme string
		err    string
	}{
		{"comma-separated, duplicates dropped", []string{"https://a:2379,https://b:2379", "https://a:2379"}, []string{"https://a:2379", "https://b:2379"}, "https", ""},
		{"plain http", []string{"http://127.0.0.1:2379"}, []string{"http://127.0.0.1:2379"}, "http", ""},
		{"none", []string{" , "}, nil, "", "no endpoint"},
		{"no scheme", []string{"127.0.0.1:2379"}, nil, "", `endpoint "127.0.0.1:2379"`},
		{"no port", []string{"https://a"}, nil, "", `endpoint "https://a"`},
		{"a path", []string{"https://a:2379/v3"}, nil, "", `endpoint "https://a:2379/v3"`},
		{"mixed schemes", []string{"https://a:2379,http://b:2379"}, nil, "", "mixed http and https"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, scheme, err := checkEndpoints(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrEndpoint) {
					t.Fatalf("got %v, want ErrEndpoint with %q", err, tc.err)
				}
				return
			}
			if err != nil || scheme != tc.scheme || strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("got %v %q %v, want %v %q", got, scheme, err, tc.want, tc.scheme)
			}
		})
	}
}

// TestJudge: a certificate refused anywhere, an endpoint that does not
// answer, and two cluster IDs are each one refusal of its own kind.
func TestJudge(t *testing.T) {
	ok := func(ep string, id uint64) answer { return answer{endpoint: ep, clusterID: id, memberID: id + 1} }
	for _, tc := range []struct {
		name    string
		answers []answer
		kind    error
		want    []string
	}{
		{"one cluster", []answer{ok("https://a:1", 0xabc), ok("https://b:1", 0xabc)}, nil, nil},
		{"two clusters", []answer{ok("https://a:1", 0xabc), ok("https://b:1", 0xdef), ok("https://c:1", 0xabc)}, ErrMixedClusters,
			[]string{"2 different clusters", "cluster abc at https://a:1, https://c:1", "cluster def at https://b:1"}},
		{"an unknown authority", []answer{ok("https://a:1", 1), {endpoint: "https://b:1", err: errors.New("tls: failed to verify certificate: x509: certificate signed by unknown authority")}}, ErrCertificate,
			[]string{"does not work against https://b:1"}},
		{"a client certificate refused", []answer{{endpoint: "https://a:1", err: errors.New("remote error: tls: bad certificate")}}, ErrCertificate, []string{"https://a:1"}},
		{"no answer", []answer{{endpoint: "https://a:1", err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}}, ErrEndpoint, []string{"no etcd answer from https://a:1: dial tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := judge(tc.answers)
			if tc.kind == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var r *refusal.Refusal
			if !errors.As(err, &r) || !errors.Is(err, tc.kind) {
				t.Fatalf("got %v, want a refusal of kind %v", err, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("want %q in %q", w, err)
				}
			}
		})
	}
}

// TestExternalSpec: the spec of an attached cluster lists etcd's members
// with the URL the operator gave for those reached through one, has no
// agents and no data dirs, runs the lowest version seen, and validates.
func TestExternalSpec(t *testing.T) {
	list := &clientv3.MemberListResponse{Members: []*pb.Member{
		{ID: 2, Name: "cp-2.example.com", PeerURLs: []string{"https://127.0.0.2:2380"}, ClientURLs: []string{"https://127.0.0.2:2379", "https://localhost:2379"}},
		{ID: 1, Name: "cp-1.example.com", PeerURLs: []string{"https://127.0.0.1:2380"}, ClientURLs: []string{"https://localhost:2379", "https://127.0.0.1:2379"}},
	}}
	answers := []answer{{endpoint: "https://127.0.0.1:2379", clusterID: 0xfeed, memberID: 1, version: "3.5.35"}, {endpoint: "https://127.0.0.2:2379", clusterID: 0xfeed, memberID: 2, version: "3.5.9"}}
	s, err := externalSpec(AttachOptions{Name: "kube", CAFile: "/etc/ca.crt", CertFile: "/etc/c.crt", KeyFile: "/etc/c.key"}, answers, list, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Version != "3.5.9" || s.External.ClusterID != "feed" || len(s.Agents) != 0 {
		t.Errorf("version %s cluster ID %s agents %v", s.Version, s.External.ClusterID, s.Agents)
	}
	if m := s.Members[0]; m.Name != "cp-1.example.com" || m.ClientURL != "https://127.0.0.1:2379" || m.Agent != "" || m.DataDir != "" {
		t.Errorf("first member %+v: want cp-1 at the URL given, no agent, no data dir", m)
	}
	s.ApplyDefaults()
	if _, err := s.Validate(spec.ValidateOptions{KnownVersion: func(string) error { return errors.New("not in the store") }}); err != nil {
		t.Errorf("the attached spec does not validate: %v", err)
	}

	list.Members = append(list.Members, &pb.Member{ID: 3, PeerURLs: []string{"https://127.0.0.3:2380"}})
	if _, err := externalSpec(AttachOptions{}, answers, list, true); !errors.Is(err, ErrEndpoint) || !strings.Contains(err.Error(), "has not started") {
		t.Errorf("an unstarted member: %v", err)
	}
}

// TestAttachRefusesBeforeWriting: a directory with a spec, and files that
// are no certificate, are refused before any endpoint is asked, and the
// directory is left as it was.
func TestAttachRefusesBeforeWriting(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, spec.FileName), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Attach(t.Context(), dir, AttachOptions{Endpoints: []string{"https://127.0.0.1:1"}}, progress.Func(nil))
	if !errors.Is(err, ErrDirHoldsCluster) {
		t.Errorf("a directory with a spec: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, spec.FileName)); string(b) != "kept" {
		t.Errorf("the spec changed: %q", b)
	}

	empty := filepath.Join(t.TempDir(), "new")
	bogus := filepath.Join(t.TempDir(), "bogus.pem")
	if err := os.WriteFile(bogus, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Attach(t.Context(), empty, AttachOptions{Endpoints: []string{"https://127.0.0.1:1"}, CAFile: bogus, CertFile: bogus, KeyFile: bogus}, nil)
	if !errors.Is(err, ErrCertificate) || !strings.Contains(err.Error(), "cannot load the client certificate") {
		t.Errorf("files that are no certificate: %v", err)
	}
	if _, serr := os.Stat(empty); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a refused attach created %s", empty)
	}
}

// TestAttachMetricsAddress: a metrics address is refused, before anything
// is asked of the endpoints or written, without --continuous (no agent
// would serve it), when it is not HOST:PORT, and when it is not loopback
// (an attached cluster has no Steward certificate for HTTPS).
func TestAttachMetricsAddress(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    AttachOptions
		want string
	}{
		{"no agent", AttachOptions{MetricsAddress: "127.0.0.1:9479"}, "runs only with continuous backups"},
		{"no port", AttachOptions{Continuous: true, MetricsAddress: "127.0.0.1"}, "is not HOST:PORT"},
		{"not loopback", AttachOptions{Continuous: true, MetricsAddress: "10.0.0.1:9479"}, "not a loopback address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			tt.o.Endpoints = []string{"https://127.0.0.1:1"}
			_, err := Attach(t.Context(), dir, tt.o, nil)
			if !errors.Is(err, ErrMetricsAddress) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Attach: %v, want %v saying %q", err, ErrMetricsAddress, tt.want)
			}
			if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a refused attach created %s", dir)
			}
		})
	}
	if err := checkMetricsAddress(AttachOptions{Continuous: true, MetricsAddress: "127.0.0.1:9479"}); err != nil {
		t.Errorf("a loopback address with --continuous: %v", err)
	}
}
