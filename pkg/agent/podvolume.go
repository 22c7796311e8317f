package agent

// A pod's volumes made the user Steward runs as, by the pod's init step
// (docs/operator.md, Security). A member pod (and the operator's) runs
// Steward and etcd as a non-root user, but its data volume's root is
// root's when the volume is new (a cloud disk's file system: 0755; a
// local-path provisioner's directory: 0777), and every file on it is
// root's when an operator from before this change wrote it with root
// pods. The kubelet's fsGroup does not help: it gives the group, not the
// owner, that internal/dirmode asks of a Steward directory, and on each
// mount where the root does not match it makes every file group-readable
// and -writable (keys 0660). So an init container, root with CAP_CHOWN and
// no other capability, runs TakeVolume before Steward starts, and copies
// the pod's own join file out of the join Secret (CopyPrivate).
//
// Invariant TakeVolume keeps (and relies on across interrupted runs): a
// directory is made the user's only after everything under it, so a
// directory the user owns holds nothing of another owner. Root without
// CAP_DAC_OVERRIDE cannot read the user's 0700 directories; it need not,
// and a second run costs one stat once the volume's root is the user's.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// Owner is a user and group ID.
type Owner struct{ UID, GID int }

func (o Owner) String() string { return fmt.Sprintf("%d:%d", o.UID, o.GID) }

// ErrBadOwner: an owner that is not UID:GID of a user other than root.
var ErrBadOwner = errors.New("not a non-root owner UID:GID")

// ParseOwner parses UID:GID, two decimal IDs from 1 to 2147483647 (root,
// 0, needs no change of owner and is refused).
func ParseOwner(s string) (Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	id := func(v string) (int, bool) {
		n, err := strconv.ParseUint(v, 10, 31)
		return int(n), err == nil && n > 0
	}
	uid, uok := id(u)
	gid, gok := id(g)
	if !ok || !uok || !gok {
		return Owner{}, fmt.Errorf("%w: %q (two numbers from 1 to 2147483647, e.g. 65532:65532)", ErrBadOwner, s)
	}
	return Owner{UID: uid, GID: gid}, nil
}

// TakeVolume makes dir and everything under it on the same file system
// owned by o, symbolic links themselves (never what they point to), and
// returns how many entries it changed. An entry o owns already is not
// descended into (see the invariant above); a directory of another file
// system mounted under dir is left alone. Modes are not changed: the
// agent makes its directories private itself (internal/dirmode).
func TakeVolume(dir string, o Owner) (changed int, err error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return 0, fmt.Errorf("volume %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("volume %s is not a directory", dir)
	}
	dev := fi.Sys().(*syscall.Stat_t).Dev
	err = take(dir, fi, dev, o, &changed)
	return changed, err
}

func take(p string, fi fs.FileInfo, dev uint64, o Owner, changed *int) error {
	st := fi.Sys().(*syscall.Stat_t)
	if st.Dev != dev {
		return nil
	}
	if int(st.Uid) == o.UID {
		if int(st.Gid) != o.GID {
			if err := os.Lchown(p, o.UID, o.GID); err != nil {
				return fmt.Errorf("make %s owned by %s: %w", p, o, err)
			}
			*changed++
		}
		return nil
	}
	if fi.IsDir() {
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("make %s owned by %s: read it (owned by uid %d): %w", p, o, st.Uid, err)
		}
		names, err := f.Readdirnames(-1)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("make %s owned by %s: read it: %w", p, o, err)
		}
		for _, n := range names {
			c := filepath.Join(p, n)
			cfi, err := os.Lstat(c)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("make %s owned by %s: %w", c, o, err)
			}
			if err := take(c, cfi, dev, o, changed); err != nil {
				return err
			}
		}
	}
	if err := os.Lchown(p, o.UID, o.GID); err != nil {
		return fmt.Errorf("make %s owned by %s (this needs CAP_CHOWN): %w", p, o, err)
	}
	*changed++
	return nil
}

// CopyPrivate copies the file src to dst, mode 0600 and owned by o: written
// to a temporary file beside dst and renamed over it, so dst is whole or
// absent (an earlier copy is replaced). dst's directory must be writable
// by the caller (an emptyDir, 0777).
func CopyPrivate(src, dst string, o Owner) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := atomicfile.WriteFile(dst, b, 0o600); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.Lchown(dst, o.UID, o.GID); err != nil {
		return fmt.Errorf("copy %s: make %s owned by %s (this needs CAP_CHOWN): %w", src, dst, o, err)
	}
	return nil
}
