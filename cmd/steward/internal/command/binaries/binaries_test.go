package binaries

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/binpush"
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

// TestPushHint: a push that missed hosts gets the command that pushes to
// just those (with the store it pushed from, when one was given), and
// keeps its chain; other errors pass unchanged.
func TestPushHint(t *testing.T) {
	res := &binpush.PushResult{Version: "3.7.3", Hosts: []binpush.HostPush{
		{Host: "h1", Result: binpush.PushInstalled}, {Host: "h2", Result: binpush.PushFailed}, {Host: "h3", Result: binpush.PushFailed},
	}}
	err := fmt.Errorf("%w: etcd 3.7.3 is not on 2 of 3 host(s): ...", binpush.ErrPushIncomplete)
	got := pushHint(err, res, "3.7.3", "")
	if want := err.Error() + "; once they answer, run `steward binaries push 3.7.3 --host h2 --host h3`"; got.Error() != want || !errors.Is(got, binpush.ErrPushIncomplete) {
		t.Errorf("pushHint = %q, want %q", got, want)
	}
	if got := pushHint(err, res, "3.7.3", "/s"); !strings.Contains(got.Error(), "`steward binaries push 3.7.3 --store /s --host h2 --host h3`") {
		t.Errorf("pushHint with a store = %q", got)
	}
	other := errors.New("verify etcd 3.7.3: ...")
	if got := pushHint(other, res, "3.7.3", ""); got != other {
		t.Errorf("pushHint(other) = %v", got)
	}
	if pushHint(nil, res, "3.7.3", "") != nil {
		t.Error("pushHint(nil) != nil")
	}
}
