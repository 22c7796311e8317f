package datadir

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/etcd-steward/steward/internal/childenv"
	"github.com/etcd-steward/steward/internal/scratch"
)

// CheckV2Store runs etcd's own check before 3.6 (`etcdutl check v2store`,
// etcdutl the tool of the version the data runs) on a copy of dataDir made
// in a temporary directory under tmpParent: the tool refuses a data dir in
// use, and the copy leaves the member untouched. problem is what the tool
// found (empty: the v2 store holds membership data only); err, a failure
// to run the check at all.
func CheckV2Store(ctx context.Context, etcdutl, dataDir, tmpParent string) (problem string, err error) {
	sd, err := scratch.New(tmpParent, "tmp-v2check-")
	if err != nil {
		return "", err
	}
	defer sd.Remove()
	tmp := sd.Path
	cp := filepath.Join(tmp, "data")
	if err := copyTree(ctx, dataDir, cp); err != nil {
		return "", fmt.Errorf("copy %s for the v2 store check: %w", dataDir, err)
	}
	if !filepath.IsAbs(etcdutl) {
		return "", fmt.Errorf("v2 store check: etcdutl %q is not an absolute path: the tool must come from the binary store, not from PATH", etcdutl)
	}
	cmd := exec.CommandContext(ctx, etcdutl, "check", "v2store", "--data-dir", cp)
	cmd.Env = childenv.Etcd()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return strings.TrimSpace(string(out)), nil
	case err != nil:
		return "", err
	}
	return "", nil
}

// copyTree copies the directory src to dst (which must not exist): its
// directories, regular files (with their modes) and symbolic links, in Go
// rather than through a `cp` found on PATH. Anything else is an error.
func copyTree(ctx context.Context, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch m := info.Mode(); {
		case m.IsDir():
			return os.Mkdir(target, m.Perm()|0o700)
		case m&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case m.IsRegular():
			return copyFile(p, target, m.Perm())
		default:
			return fmt.Errorf("%s is neither a file, a directory nor a symbolic link (%v)", p, m.Type())
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
