package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func runPrepare(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPrepareVolumeCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

// Bad input to the init step is refused with one message naming the flag
// and what to give, and nothing changes (the volume's owner, no copy).
func TestPrepareVolumeRefusals(t *testing.T) {
	vol := t.TempDir()
	src := filepath.Join(t.TempDir(), "db-0.yaml")
	if err := os.WriteFile(src, []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "db-0.yaml")
	before, err := os.Lstat(vol)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{vol}, "--owner is required: give the user and group Steward runs as, e.g. --owner 65532:65532"},
		{[]string{"--owner", "0:0", vol}, `not a non-root owner UID:GID: "0:0" (two numbers from 1 to 2147483647, e.g. 65532:65532); give --owner UID:GID of the user the pod's Steward container runs as`},
		{[]string{"--owner", "nonroot", vol}, `not a non-root owner UID:GID: "nonroot"`},
		{[]string{"--owner", "65532:65532"}, "nothing to prepare: give the volume directories (DIR...) and/or --copy SRC=DST"},
		{[]string{"--owner", "65532:65532", vol, "--copy", src}, `--copy "` + src + `": give --copy SRC=DST, two absolute paths`},
		{[]string{"--owner", "65532:65532", vol, "--copy", "db-0.yaml=" + dst}, "give --copy SRC=DST, two absolute paths"},
	} {
		out, err := runPrepare(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
		if out != "" {
			t.Errorf("%q printed %q", tc.args, out)
		}
	}
	after, err := os.Lstat(vol)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := after.Sys().(*syscall.Stat_t), before.Sys().(*syscall.Stat_t); a.Uid != b.Uid || a.Gid != b.Gid {
		t.Errorf("a refused run changed the volume's owner to %d:%d", a.Uid, a.Gid)
	}
	if _, err := os.Lstat(dst); err == nil {
		t.Error("a refused run copied the file")
	}
}

// The member pod's init step: the volume and the join file copy are the
// user's, and it says so.
func TestPrepareVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (CAP_CHOWN)")
	}
	vol := t.TempDir()
	if err := os.WriteFile(filepath.Join(vol, "agent.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "db-0.yaml")
	if err := os.WriteFile(src, []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "db-0.yaml")
	out, err := runPrepare(t, "--owner", "65532:65533", vol, "--copy", src+"="+dst)
	if err != nil {
		t.Fatal(err)
	}
	if want := vol + ": owned by 65532:65533 (2 entries changed)\ncopied " + src + " to " + dst + " (0600, owned by 65532:65533)\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	for _, p := range []string{vol, filepath.Join(vol, "agent.yaml"), dst} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 65532 || st.Gid != 65533 {
			t.Errorf("%s owned by %d:%d", p, st.Uid, st.Gid)
		}
	}
}
