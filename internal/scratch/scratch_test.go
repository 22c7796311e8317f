package scratch

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestMain lets the test run itself as the process that makes a scratch
// directory and then is killed.
func TestMain(m *testing.M) {
	if parent := os.Getenv("SCRATCH_TEST_HOLD"); parent != "" {
		d, err := New(parent, "job-")
		if err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString(d.Path + "\n")
		time.Sleep(time.Hour)
	}
	os.Exit(m.Run())
}

// TestSweep: the directory of a job that was killed is removed, and only
// it: not one still held (by this process or another), not a young one,
// not another prefix's; one from before locking counts as abandoned.
func TestSweep(t *testing.T) {
	parent := t.TempDir()

	// A job in another process, SIGKILLed while holding its directory.
	startHolder := func() (*exec.Cmd, string) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "SCRATCH_TEST_HOLD="+parent)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return cmd, line[:len(line)-1]
	}
	killed, dead := startHolder()
	_ = killed.Process.Kill()
	_ = killed.Wait()
	_, alive := startHolder()
	if err := os.WriteFile(filepath.Join(dead, "snapshot.db"), []byte("keys"), 0o600); err != nil {
		t.Fatal(err)
	}

	mine, err := New(parent, "job-")
	if err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(parent, "job-legacy")
	other := filepath.Join(parent, "other-1")
	for _, d := range []string{legacy, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	// Everything is young: nothing goes.
	if got, err := Sweep(parent, "job-", time.Now()); err != nil || len(got) != 0 {
		t.Fatalf("young directories swept: %v %v", got, err)
	}
	got, err := Sweep(parent, "job-", time.Now().Add(2*MinAge))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{dead, legacy}; !slices.Equal(got, want) {
		t.Fatalf("swept %q, want the killed job's and the unlocked one %q", got, want)
	}
	for _, d := range []string{alive, mine.Path, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s (held or another prefix) was removed: %v", d, err)
		}
	}
	if err := mine.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine.Path); !os.IsNotExist(err) {
		t.Errorf("Remove left %s: %v", mine.Path, err)
	}
	if fi, err := os.Stat(alive); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("scratch directory mode: %v %v", fi, err)
	}
}

// TestNewSweepsFirst: New removes the abandoned directories of its prefix
// and says which.
func TestNewSweepsFirst(t *testing.T) {
	parent := t.TempDir()
	old := filepath.Join(parent, "job-old")
	if err := os.Mkdir(old, 0o700); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * MinAge)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	d, err := New(parent, "job-")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Remove()
	if !slices.Equal(d.Swept, []string{old}) {
		t.Errorf("Swept = %q, want %q", d.Swept, old)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("abandoned %s still there: %v", old, err)
	}
}
