package certs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/refusal"
)

// TestRenewWatchRefusesNames: --watch renews everything at its renewal
// point, so names or --all with it are one error, before any directory is
// read.
func TestRenewWatchRefusesNames(t *testing.T) {
	for _, args := range [][]string{{"--watch", "--all"}, {"--watch", "server"}} {
		g := &cli.Globals{Dir: t.TempDir(), Output: "table"}
		cmd := renewCommand(g)
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || err.Error() != "--watch renews every leaf at its renewal point: give it without --all or names" {
			t.Errorf("renew %v: %v", args, err)
		}
	}
}

// TestRetryWhileRunning: a renewal that finds the directory's renewal
// running is tried again until it gets its turn or the deadline passes;
// any other outcome is returned at once.
func TestRetryWhileRunning(t *testing.T) {
	running := fmt.Errorf("renew certificates: %w: another renewal of /d/pki is running", certs.ErrRenewalRunning)
	done := []pki.Renewal{{Name: "server"}}
	for _, tc := range []struct {
		name     string
		busy     int // calls that find the lock held
		deadline time.Duration
		calls    int
		wantErr  error
	}{
		{name: "free", busy: 0, deadline: time.Second, calls: 1},
		{name: "held twice", busy: 2, deadline: 5 * time.Second, calls: 3},
		{name: "held past the deadline", busy: 100, deadline: 300 * time.Millisecond, calls: 3, wantErr: certs.ErrRenewalRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			rs, err := retryWhileRunning(t.Context(), time.Now().Add(tc.deadline), func() ([]pki.Renewal, error) {
				calls++
				if calls <= tc.busy {
					return nil, running
				}
				return done, nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && (len(rs) != 1 || calls != tc.calls) {
				t.Errorf("renewals %v after %d calls, want %d calls", rs, calls, tc.calls)
			}
			if tc.wantErr != nil && (calls < 2 || calls > 4) {
				t.Errorf("%d calls within %s at 200 ms, want about %d", calls, tc.deadline, tc.calls)
			}
		})
	}
	other := errors.New("the CA key is not in the certificate directory")
	calls := 0
	if _, err := retryWhileRunning(t.Context(), time.Now().Add(time.Minute), func() ([]pki.Renewal, error) { calls++; return nil, other }); err != other || calls != 1 {
		t.Errorf("another error: %v after %d calls", err, calls)
	}
}

// TestSystemdUnit: the shipped unit (deploy/systemd/steward-certrenew.service)
// runs a command line this command accepts (`certs renew --watch --dir
// DIR`), and systemd restarts it whenever it ends.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("../../../../../deploy/systemd/steward-certrenew.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"\nRestart=always\n", "\nUMask=0077\n", "\nWantedBy=multi-user.target\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q", strings.TrimSpace(want))
		}
	}
	var exec []string
	for _, l := range strings.Split(unit, "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			exec = strings.Fields(v)
		}
	}
	if len(exec) < 4 || !filepath.IsAbs(exec[0]) || exec[1] != "certs" || exec[2] != "renew" {
		t.Fatalf("ExecStart %q, want /path/steward certs renew ...", exec)
	}
	g := &cli.Globals{Output: "table"}
	cmd := renewCommand(g)
	g.AddFlags(cmd)
	if err := cmd.ParseFlags(exec[3:]); err != nil {
		t.Fatalf("ExecStart's flags: %v", err)
	}
	if w, _ := cmd.Flags().GetBool("watch"); !w || len(cmd.Flags().Args()) > 0 || !filepath.IsAbs(g.Dir) {
		t.Errorf("ExecStart %q: want --watch, no names, an absolute --dir (got %q)", exec, g.Dir)
	}
}

// TestTakeOverNeedsTheCAFiles: take-over without the CA certificate or
// key is one error naming both flags, before any directory is read.
func TestTakeOverNeedsTheCAFiles(t *testing.T) {
	for _, args := range [][]string{{"--yes"}, {"--ca-cert", "/ca.pem", "--yes"}, {"--ca-key", "/ca-key.pem"}} {
		dir := filepath.Join(t.TempDir(), "none")
		g := &cli.Globals{Dir: dir, Output: "table"}
		cmd := takeOverCommand(g)
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--ca-cert FILE --ca-key FILE") {
			t.Errorf("take-over %v: %v", args, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("take-over %v created %s", args, dir)
		}
	}
}

// TestTakeOverHint: the refusals of a certificate take-over read as they
// did when the library named the commands: the command adds them.
func TestTakeOverHint(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refusal.New(adopt.ErrTakenOver, "Steward took over issuing the certificates of cluster kube already"),
			"Steward took over issuing the certificates of cluster kube already (`steward certs list`)"},
		{refusal.New(adopt.ErrNotAllAdopted, "cluster kube still has members Steward does not run (m2)"),
			"cluster kube still has members Steward does not run (m2): adopt every member first (`steward adopt`), then take over its certificates"},
		{refusal.New(adopt.ErrCAExpiresSoon, "the CA /ca.pem (ca) expires 2030-01-01T00:00:00Z, within the lifetime of a leaf Steward issues (8760h0m0s, tls.leafValidity)"),
			"the CA /ca.pem (ca) expires 2030-01-01T00:00:00Z, within the lifetime of a leaf Steward issues (8760h0m0s, tls.leafValidity): renew the CA first (`steward certs rotate-ca` after the take-over replaces it), or shorten tls.leafValidity"},
		{refusal.New(adopt.ErrOwnCerts, "cluster kube runs without TLS: there are no certificates to take over"),
			"cluster kube runs without TLS: there are no certificates to take over"},
		{refusal.New(adopt.ErrCAValidity, "the CA /ca.pem (ca) is not valid before 2030-01-01T00:00:00Z"),
			"the CA /ca.pem (ca) is not valid before 2030-01-01T00:00:00Z"},
	} {
		if got := takeOverHint(tc.err); got.Error() != tc.want {
			t.Errorf("takeOverHint = %q\nwant %q", got, tc.want)
		}
	}
}
