package datadir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// CheckV2Store runs etcd's own check before 3.6 (`etcdutl check v2store`,
// etcdutl the tool of the version the data runs) on a copy of dataDir made
// in a temporary directory under tmpParent: the tool refuses a data dir in
// use, and the copy leaves the member untouched. problem is what the tool
// found (empty: the v2 store holds membership data only); err, a failure
// to run the check at all.
func CheckV2Store(ctx context.Context, etcdutl, dataDir, tmpParent string) (problem string, err error) {
	tmp, err := os.MkdirTemp(tmpParent, "tmp-v2check-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cp := filepath.Join(tmp, "data")
	if out, err := exec.CommandContext(ctx, "cp", "-a", dataDir, cp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copy %s for the v2 store check: %v: %s", dataDir, err, out)
	}
	out, err := exec.CommandContext(ctx, etcdutl, "check", "v2store", "--data-dir", cp).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return strings.TrimSpace(string(out)), nil
	case err != nil:
		return "", err
	}
	return "", nil
}
