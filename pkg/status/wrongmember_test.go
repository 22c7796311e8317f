package status

import (
	"errors"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// TestCheckAnswer: a status asked of one member on its URL and answered by
// another (an alias, a reused port) is refused with ErrWrongMember, naming
// both; Endpoint and the callers reading etcd's status directly
// (backup loop, upgrade executor) go through it.
func TestCheckAnswer(t *testing.T) {
	resp := func(id uint64) *clientv3.StatusResponse {
		return &clientv3.StatusResponse{Header: &pb.ResponseHeader{MemberId: id}}
	}
	tests := []struct {
		name    string
		resp    *clientv3.StatusResponse
		wantErr string
	}{
		{name: "the member asked", resp: resp(0xb)},
		{name: "another member", resp: resp(0xa), wantErr: "member ID a answers on https://u, not etcd-2 (ID b): is etcd-2 running"},
		{name: "no header", resp: &clientv3.StatusResponse{}, wantErr: "member ID 0 answers on https://u, not etcd-2 (ID b)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckAnswer("etcd-2", 0xb, "https://u", tt.resp)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckAnswer = %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrWrongMember) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckAnswer = %v; want ErrWrongMember with %q", err, tt.wantErr)
			}
		})
	}
	if err := wrongAnswer("etcd-2", 0xb, "https://u", 0xa, "etcd-1"); !strings.Contains(err.Error(), "etcd-1 (ID a) answers on https://u, not etcd-2 (ID b)") {
		t.Errorf("wrongAnswer with the answering member's name = %v", err)
	}
}

// TestMemberID: a status's hex ID as a number, 0 without one.
func TestMemberID(t *testing.T) {
	for in, want := range map[string]uint64{"8e9e05c52164694d": 0x8e9e05c52164694d, "": 0, "zz": 0} {
		if got := (MemberStatus{ID: in}).MemberID(); got != want {
			t.Errorf("MemberID(%q) = %x; want %x", in, got, want)
		}
	}
}
