package certs

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
)

// An issued client certificate whose copy lives with its user (the
// operator's Secret NAME-client-tls: pkg/operator decides when): read,
// issued again with a new key, the pair it replaces kept beside it
// (pki.PrevSuffix) until its user holds the new one.

// clientFiles are the certificate and key of the issued client name in
// the certificate directory dir (dir/clients/NAME.crt, .key).
func clientFiles(dir, name string) (crt, key string) {
	base := filepath.Join(dir, pki.ClientsDir, name)
	return base + ".crt", base + ".key"
}

// ReadClient reads the certificate of the issued client name in the
// certificate directory dir and checks that its key is the certificate's
// (not which CA signed it: the caller judges that). Neither file there is
// os.ErrNotExist; one of the two alone, a file that does not parse or a
// key of another certificate is an error naming the file.
func ReadClient(dir, name string) (*x509.Certificate, error) {
	crt, key := clientFiles(dir, name)
	_, cerr := os.Stat(crt)
	_, kerr := os.Stat(key)
	if errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist) {
		return nil, os.ErrNotExist
	}
	c, _, err := pki.LoadLeaf(crt, key, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: half of the pair is missing (%s, %s)", pki.ErrUnparsable, crt, key)
	}
	return c, err
}

// ReissueClient issues the client name of c's certificate directory again
// (pki.IssueClient: a new key, lifetime, or the leaf lifetime when 0),
// under the certificate directory's lock (Lock, waiting up to 5 s) and
// never while a CA rotation runs (pki.ErrRotationInProgress). The pair it
// replaces is kept beside it first (pki.PrevSuffix) unless a kept pair is
// there already (that one is what the client's user may still hold), until
// ForgetPreviousClient. It returns the new certificate.
func ReissueClient(ctx context.Context, c *cluster.Cluster, name string, lifetime time.Duration) (*x509.Certificate, error) {
	lock, err := Lock(ctx, c, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	dir := c.CertDir()
	if pki.RotationInProgress(dir) {
		return nil, pki.ErrRotationInProgress
	}
	crt, key := clientFiles(dir, name)
	if err := keepPrevious(crt, key); err != nil {
		return nil, err
	}
	if _, err := pki.IssueClient(dir, c.Spec.Name, name, lifetime, "", c.Validity()); err != nil {
		return nil, err
	}
	return ReadClient(dir, name)
}

// keepPrevious copies the files of a pair that exist beside them
// (PrevSuffix, 0600), unless a kept copy of either is there already.
func keepPrevious(files ...string) error {
	for _, f := range files {
		if _, err := os.Stat(f + pki.PrevSuffix); err == nil {
			return nil
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(f+pki.PrevSuffix, b, 0o600); err != nil {
			return fmt.Errorf("keep the previous %s: %w", filepath.Base(f), err)
		}
	}
	return nil
}

// PreviousClient reports whether ReissueClient kept a pair of the client
// name in dir that ForgetPreviousClient has not removed yet.
func PreviousClient(dir, name string) bool {
	crt, key := clientFiles(dir, name)
	for _, f := range []string{crt, key} {
		if _, err := os.Stat(f + pki.PrevSuffix); err == nil {
			return true
		}
	}
	return false
}

// ForgetPreviousClient removes the pair ReissueClient kept of the client
// name in dir, once its user holds the new one.
func ForgetPreviousClient(dir, name string) error {
	crt, key := clientFiles(dir, name)
	for _, f := range []string{crt, key} {
		if err := os.Remove(f + pki.PrevSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
