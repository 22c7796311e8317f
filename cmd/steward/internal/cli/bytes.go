package cli

import "github.com/etcd-steward/steward/pkg/progress"

// Bytes is the one form of a size in every table: IEC units (512 B,
// 1.5 KiB, 20.0 MiB), as progress lines print them. JSON and YAML carry
// the raw byte count (their fields are in bytes).
func Bytes(n int64) string { return progress.Bytes(n) }
