package e2e

import (
	clientv3 "go.etcd.io/etcd/client/v3"
)

func clientWithPrefixSerializable() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable()}
}
