package certs

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// An issued client reissued for its user (the operator's NAME-client-tls):
// a new key and certificate; the pair it replaced kept beside it (0600)
// and never overwritten by a second reissue before ForgetPreviousClient;
// refused while a CA rotation runs, changing nothing. ReadClient tells a
// missing pair from half of one and from a key of another certificate.
func TestReissueClient(t *testing.T) {
	c := &cluster.Cluster{Dir: t.TempDir(), Spec: &spec.Cluster{Name: "db"}}
	dir := c.CertDir()
	if err := pki.Ensure(dir, "db", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClient(dir, "db-client"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no pair: %v", err)
	}
	first, err := ReissueClient(t.Context(), c, "db-client", 0)
	if err != nil {
		t.Fatal(err)
	}
	if PreviousClient(dir, "db-client") {
		t.Error("a first issue kept a previous pair")
	}
	crt, key := clientFiles(dir, "db-client")
	firstCrt, _ := os.ReadFile(crt)
	firstKey, _ := os.ReadFile(key)
	second, err := ReissueClient(t.Context(), c, "db-client", 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.SerialNumber.Cmp(first.SerialNumber) == 0 || bytes.Equal(mustRead(t, key), firstKey) {
		t.Error("the reissue kept the serial or the key")
	}
	if !bytes.Equal(mustRead(t, crt+pki.PrevSuffix), firstCrt) || !bytes.Equal(mustRead(t, key+pki.PrevSuffix), firstKey) {
		t.Error("the replaced pair is not kept")
	}
	if st, err := os.Stat(key + pki.PrevSuffix); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("kept key: %v %v", st, err)
	}
	if _, err := ReissueClient(t.Context(), c, "db-client", 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustRead(t, crt+pki.PrevSuffix), firstCrt) {
		t.Error("a second reissue replaced the kept pair (what the user may still hold)")
	}
	if err := ForgetPreviousClient(dir, "db-client"); err != nil || PreviousClient(dir, "db-client") {
		t.Errorf("forget: %v, still kept %v", err, PreviousClient(dir, "db-client"))
	}

	// Half a pair, a key of another certificate.
	cur := mustRead(t, key)
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClient(dir, "db-client"); !errors.Is(err, pki.ErrUnparsable) {
		t.Errorf("half a pair: %v", err)
	}
	if err := os.WriteFile(key, firstKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClient(dir, "db-client"); !errors.Is(err, pki.ErrKeyMismatch) {
		t.Errorf("another certificate's key: %v", err)
	}
	if err := os.WriteFile(key, cur, 0o600); err != nil {
		t.Fatal(err)
	}

	// A CA rotation runs: refused, nothing written.
	if err := RotationPrepare(dir, "db", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	before := mustRead(t, crt)
	if _, err := ReissueClient(t.Context(), c, "db-client", 0); !errors.Is(err, pki.ErrRotationInProgress) {
		t.Errorf("during a rotation: %v", err)
	}
	if !bytes.Equal(mustRead(t, crt), before) || PreviousClient(dir, "db-client") {
		t.Error("a refused reissue wrote something")
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
