package agentapi

import (
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/memberrt"
)

// TestUnreachableMatchesTheSeam: an agent that does not answer, local
// (its socket) or on another host (mTLS), fails with ErrUnreachable, which
// an operation matches through the runtime seam (memberrt.ErrUnreachable);
// the message still says "agent unreachable at ADDRESS".
func TestUnreachableMatchesTheSeam(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "agent.sock")
	local, err := NewClient(sock)
	if err != nil {
		t.Fatal(err)
	}
	_, err = local.Members(t.Context())
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, memberrt.ErrUnreachable) || !strings.HasPrefix(err.Error(), "agent unreachable at "+sock+": ") {
		t.Errorf("local agent not running: %v; want ErrUnreachable matching memberrt.ErrUnreachable", err)
	}

	// A port nothing listens on: taken, then released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "https://" + ln.Addr().String()
	_ = ln.Close()
	remote, err := NewRemoteClient("h2", "127.0.0.1", addr, &tls.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = remote.Members(t.Context())
	if ue, ok := errors.AsType[*UnreachableError](err); !ok || ue.Agent != "h2" || !errors.Is(err, memberrt.ErrUnreachable) {
		t.Errorf("remote agent not running: %v; want an UnreachableError matching memberrt.ErrUnreachable", err)
	}
	if errors.Is(err, memberrt.ErrNotFound) {
		t.Errorf("an unreachable agent matches memberrt.ErrNotFound: %v", err)
	}
}
