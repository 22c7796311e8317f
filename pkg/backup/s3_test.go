package backup_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/test/harness"
)

// TestS3Store runs the store contract against a real S3 server.
func TestS3Store(t *testing.T) {
	srv := harness.StartS3(t)
	ctx := context.Background()
	s, err := backup.NewS3Store(ctx, backup.S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "cluster-a", CredentialsFile: srv.CredentialsFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "full/x.json", strings.NewReader(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "full/x.json", strings.NewReader(`{}`)); err == nil {
		t.Error("Put replaced an existing object")
	}
	big := strings.Repeat("0123456789abcdef", 3<<20) // 48 MiB: multipart
	if err := s.Put(ctx, "full/big.db", strings.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	rc, err := s.Get(ctx, "full/big.db")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != big {
		t.Fatalf("read back %d bytes, want %d (err %v)", len(b), len(big), err)
	}
	names, err := s.List(ctx, "full/")
	if err != nil || len(names) != 2 || names[0] != "full/big.db" {
		t.Fatalf("List: %v %v", names, err)
	}
	if _, err := s.Get(ctx, "full/missing"); !errors.Is(err, backup.ErrNotExist) {
		t.Errorf("Get missing: %v", err)
	}
	if err := s.Delete(ctx, "full/big.db"); err != nil {
		t.Fatal(err)
	}
	if names, _ := s.List(ctx, ""); len(names) != 1 {
		t.Errorf("after delete: %v", names)
	}
	// Bad input: wrong credentials, missing bucket.
	bad := t.TempDir() + "/creds"
	writeFile(t, bad, "AWS_ACCESS_KEY_ID=nobody\nAWS_SECRET_ACCESS_KEY=wrong\n")
	if _, err := backup.NewS3Store(ctx, backup.S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, CredentialsFile: bad}); err == nil {
		t.Error("wrong credentials accepted")
	}
	if _, err := backup.NewS3Store(ctx, backup.S3Config{Endpoint: srv.Endpoint, Bucket: "no-such-bucket", CredentialsFile: srv.CredentialsFile}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing bucket: %v", err)
	}
}
