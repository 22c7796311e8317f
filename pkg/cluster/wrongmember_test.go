package cluster

import (
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestWrongMember: a member answering on another member's URL is named,
// and the member expected is not taken as healthy.
func TestWrongMember(t *testing.T) {
	list := []*pb.Member{{ID: 0xa, Name: "etcd-1"}, {ID: 0xb, Name: "etcd-2"}, {ID: 0xc}}
	byName, byID := map[string]*pb.Member{}, map[uint64]*pb.Member{}
	for _, m := range list {
		byID[m.ID] = m
		if m.Name != "" {
			byName[m.Name] = m
		}
	}
	tests := []struct {
		name     string
		member   string
		answered uint64
		wantErr  string
	}{
		{name: "the member itself", member: "etcd-1", answered: 0xa},
		{name: "another member on its URL", member: "etcd-2", answered: 0xa, wantErr: "etcd-1 (ID a) answers on https://u, not etcd-2 (ID b)"},
		{name: "an unknown member on its URL", member: "etcd-2", answered: 0xf, wantErr: "member ID f answers on https://u, not etcd-2 (ID b)"},
		{name: "a member not yet in the list answered by a listed one", member: "etcd-3", answered: 0xb, wantErr: "etcd-2 (ID b) answers on https://u, not etcd-3"},
		{name: "a member not yet started in the list", member: "etcd-3", answered: 0xc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wrongMember(tt.member, "https://u", tt.answered, byName, byID)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("wrongMember = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("wrongMember = %v; want %q", err, tt.wantErr)
			}
		})
	}
}
