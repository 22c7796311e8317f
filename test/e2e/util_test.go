package e2e

import (
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func clientWithPrefixSerializable() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable()}
}

// lastLines returns the last n lines of s, for a failure message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
