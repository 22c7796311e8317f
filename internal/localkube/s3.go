package localkube

// The S3 server: versitygw (posix backend, DIR/s3/root) in the root
// namespace on the bridge's address, so the machine reaches it there and
// pods reach it through their node (masqueraded to the node's address).
// It binds that address only, which goes with the bridge.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/childenv"
)

// s3Port is the S3 server's port on the bridge's address (the bridge is
// the cluster's own: no other server binds there).
const s3Port = 9000

func (c *Cluster) startS3(ctx context.Context) error {
	root := filepath.Join(c.Dir, "s3", "root")
	c.S3Bucket = "localkube"
	if err := os.MkdirAll(filepath.Join(root, c.S3Bucket), 0o700); err != nil {
		return err
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	access, sk := "localkube", hex.EncodeToString(secret)
	c.S3CredentialsFile = filepath.Join(c.Dir, "s3", "credentials")
	if err := atomicfile.WriteFile(c.S3CredentialsFile, fmt.Appendf(nil, "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", access, sk), 0o600); err != nil {
		return err
	}
	addr := fmt.Sprintf("%s:%d", c.Gateway, s3Port)
	c.S3Endpoint = "http://" + addr
	log := filepath.Join(c.Dir, "logs", "versitygw.log")
	argv, env := s3Command(c.VersityGW, addr, root, access, sk)
	_, done, err := c.startEnv(env, c.infraCgroup(), "", 0, log, argv...)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 2 * time.Second}
	return poll(ctx, 20*time.Second, func() error {
		select {
		case <-done:
			return fmt.Errorf("versitygw exited (log: %s)", log)
		default:
		}
		resp, err := client.Get(c.S3Endpoint)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// s3Command is versitygw's command line and environment: the credentials
// go in the environment (ROOT_ACCESS_KEY_ID, ROOT_SECRET_ACCESS_KEY), not
// on the command line, which every user of the machine reads in /proc.
func s3Command(bin, addr, root, access, secret string) (argv, env []string) {
	return []string{bin, "--port", addr, "posix", root},
		childenv.With("ROOT_ACCESS_KEY_ID="+access, "ROOT_SECRET_ACCESS_KEY="+secret)
}
