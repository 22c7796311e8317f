package binaries

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
)

// TestImportHint: each refusal of an import gets the flag that gets past
// it and keeps its chain; other errors pass unchanged.
func TestImportHint(t *testing.T) {
	other := errors.New("read tarball: unexpected EOF")
	for _, tc := range []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"unknown version", fmt.Errorf("import etcd from /tmp/bin: %w from the name %q", binaries.ErrUnknownVersion, "bin"),
			`import etcd from /tmp/bin: cannot tell the etcd version from the name "bin"; pass it with --version`, binaries.ErrUnknownVersion},
		{"different binary", fmt.Errorf("import etcd 3.6.16: %w: /s/etcd-v3.6.16 holds etcd sha256 aa, importing bb", binaries.ErrDifferentBinary),
			"import etcd 3.6.16: a different etcd binary is stored under this version: /s/etcd-v3.6.16 holds etcd sha256 aa, importing bb; use --force to replace it (the old directory is kept aside)",
			binaries.ErrDifferentBinary},
		{"other", other, other.Error(), other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := importHint(tc.err)
			if got.Error() != tc.want {
				t.Errorf("importHint = %q, want %q", got, tc.want)
			}
			if !errors.Is(got, tc.is) {
				t.Errorf("importHint lost the chain: %v", got)
			}
		})
	}
	if importHint(nil) != nil {
		t.Error("importHint(nil) != nil")
	}
}
