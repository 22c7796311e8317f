package crashpoint

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{" , ,", nil},
		{"plan-step-before:0", []string{"plan-step-before:0"}},
		{"plan-step-before:0,plan-step-after:3", []string{"plan-step-before:0", "plan-step-after:3"}},
		{" plan-step-after:1 ,, plan-step-after:2, ", []string{"plan-step-after:1", "plan-step-after:2"}},
		{"a,a", []string{"a"}},
	} {
		want := map[string]bool{}
		for _, n := range tc.want {
			want[n] = true
		}
		if got := parse(tc.in); !maps.Equal(got, want) {
			t.Errorf("parse(%q) = %v, want %v", tc.in, got, want)
		}
	}
}

func TestIndexed(t *testing.T) {
	for _, tc := range []struct {
		point string
		i     int
		want  string
	}{
		{PlanStepBefore, 0, "plan-step-before:0"},
		{PlanStepAfter, 12, "plan-step-after:12"},
	} {
		if got := Indexed(tc.point, tc.i); got != tc.want {
			t.Errorf("Indexed(%q, %d) = %q, want %q", tc.point, tc.i, got, tc.want)
		}
	}
}

// helperEnv marks the child process TestHit starts.
const helperEnv = "CRASHPOINT_TEST_HELPER"

// TestHelperProcess is not a test: run by TestHit as a child, it hits
// test:1 and test:2, then says it survived.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	Hit("test:1")
	os.Stdout.WriteString("reached test:2\n")
	Hit("test:2")
	os.Stdout.WriteString("survived\n")
	os.Exit(0)
}

// TestHit runs this test binary as a child with STEWARD_CRASHPOINT set: an
// armed point kills it with SIGKILL right there, after the stderr line; an
// unarmed one does nothing.
func TestHit(t *testing.T) {
	for _, tc := range []struct {
		armed      string
		killedAt   string // "" when the child must survive
		wantStdout string
	}{
		{"", "", "reached test:2\nsurvived\n"},
		{"other,test:3", "", "reached test:2\nsurvived\n"},
		{"test:1", "test:1", ""},
		{"other, test:2", "test:2", "reached test:2\n"},
		{"test:2,test:1", "test:1", ""},
	} {
		t.Run(tc.armed, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$")
			cmd.Env = append(os.Environ(), helperEnv+"=1", EnvVar+"="+tc.armed)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout %q, want %q", stdout.String(), tc.wantStdout)
			}
			if tc.killedAt == "" {
				if err != nil || strings.Contains(stderr.String(), "crashpoint:") {
					t.Fatalf("child with %s=%q: %v, stderr %q; want a normal exit", EnvVar, tc.armed, err, stderr.String())
				}
				return
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("child with %s=%q: %v, want killed by SIGKILL", EnvVar, tc.armed, err)
			}
			if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("child with %s=%q ended with %v, want killed by SIGKILL", EnvVar, tc.armed, ee)
			}
			if want := "crashpoint: " + tc.killedAt + "\n"; stderr.String() != want {
				t.Fatalf("stderr %q, want %q", stderr.String(), want)
			}
		})
	}
}
