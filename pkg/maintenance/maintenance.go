// Package maintenance keeps a running cluster in shape without changing its
// membership: rolling defragmentation (followers first, the leader last,
// only while every member is healthy) and alarms (list, and disarm, which
// first frees the space a NOSPACE alarm is about).
package maintenance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefragResult reports one member's defragmentation.
type DefragResult struct {
	Member     string        `json:"member"`
	DBSizeFrom int64         `json:"dbSizeBefore"`
	DBSizeTo   int64         `json:"dbSizeAfter"`
	Duration   time.Duration `json:"durationNs"`
}

// DefragOptions configure Defrag.
type DefragOptions struct {
	// AllowAlarms defragments members that have alarms raised (used to
	// clear NOSPACE); health is still required otherwise.
	AllowAlarms bool
	// Timeout bounds each member's defragmentation (default 10m).
	Timeout time.Duration
}

// Defrag defragments every member one at a time, followers first and the
// leader last, only while every member is healthy; it stops at the first
// member that is not and says why. It is a roll (rolling.Action.Each) that
// keeps leadership where it is.
func Defrag(ctx context.Context, c *cluster.Cluster, o DefragOptions) ([]DefragResult, error) {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	results := []DefragResult{}
	var (
		m     status.MemberStatus // the member of the turn
		id    uint64
		start time.Time
		turns int
	)
	turn := rolling.Action{
		// Re-check before each member: never defragment while another
		// member is unhealthy.
		Gate: func(st *status.Status, name string) error {
			turns++
			err := requireDefragHealth(st, o.AllowAlarms)
			if err != nil && turns > 1 {
				return fmt.Errorf("defragmentation stopped before %s: %w", name, err)
			}
			return err
		},
		// Defragmentation does not stop the member: its raft loop keeps
		// heartbeating, so the leader keeps leading (the leader last is
		// the whole of its leadership rule) and no transfer adds an
		// election's wait.
		KeepLeader: true,
		Act: func(ctx context.Context, st *status.Status, name string) error {
			var ok bool
			if m, ok = st.Member(name); !ok {
				return fmt.Errorf("refusing to defragment %s: it is not in the cluster", name)
			}
			var err error
			id, err = strconv.ParseUint(m.ID, 16, 64)
			if err != nil {
				return fmt.Errorf("refusing to defragment %s: it has no valid member ID %q", m.Name, m.ID)
			}
			// Defragment blocks the member it reaches: make sure the member on
			// the URL is m, not another one behind an alias or a reused port.
			if _, err := status.Endpoint(ctx, c, m.Name, id, m.ClientURLs[0]); err != nil {
				return fmt.Errorf("refusing to defragment %s: %w", m.Name, err)
			}
			c.Progress.Say("defragmenting %s (%s, db %s)", m.Name, m.Role, progress.Bytes(m.DBSize))
			start = time.Now()
			cli, err := c.Client(m.ClientURLs...)
			if err != nil {
				return err
			}
			dctx, cancel := context.WithTimeout(ctx, o.Timeout)
			_, err = cli.Defragment(dctx, m.ClientURLs[0])
			cancel()
			cli.Close()
			if err != nil {
				return fmt.Errorf("defragment %s: %w", m.Name, err)
			}
			return nil
		},
		CaughtUp: func(ctx context.Context, name string) error {
			if err := status.WaitMemberHealthy(ctx, c, name, time.Minute); err != nil && !o.AllowAlarms {
				return fmt.Errorf("defragmentation stopped: %w", err)
			}
			r := DefragResult{Member: name, DBSizeFrom: m.DBSize, Duration: time.Since(start)}
			if s, err := status.Endpoint(ctx, c, name, id, m.ClientURLs[0]); err == nil {
				r.DBSizeTo = s.DbSize
			}
			c.Progress.Say("  %s: %s -> %s in %s", name, progress.Bytes(r.DBSizeFrom), progress.Bytes(r.DBSizeTo), r.Duration.Round(time.Millisecond))
			results = append(results, r)
			return nil
		},
	}
	// Every member of the status, in its order (by name), the leader last.
	err := turn.Each(ctx, rolling.Of(c), nil)
	if err != nil && turns == 0 {
		return nil, err // no status to gate on
	}
	return results, err
}

func requireDefragHealth(st *status.Status, allowAlarms bool) error {
	if !st.Cluster.Quorate {
		return fmt.Errorf("refusing to defragment: the cluster has no quorum: %s", st.Unhealthy())
	}
	for _, m := range st.Members {
		if m.Healthy {
			continue
		}
		if allowAlarms && m.OnlyAlarms {
			continue
		}
		return fmt.Errorf("refusing to defragment while member %s is unhealthy (%s): defragmenting another member could cost quorum", m.Name, m.LastError)
	}
	return nil
}

// Alarm is a raised etcd alarm.
type Alarm struct {
	MemberID   string `json:"memberID"`
	MemberName string `json:"memberName"`
	Alarm      string `json:"alarm"`
}

// Alarms lists the cluster's raised alarms.
func Alarms(ctx context.Context, c *cluster.Cluster) ([]Alarm, error) {
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.AlarmList(actx)
	if err != nil {
		return nil, fmt.Errorf("list alarms: %w", err)
	}
	names := map[uint64]string{}
	if l, err := cli.MemberList(actx); err == nil {
		for _, m := range l.Members {
			names[m.ID] = m.Name
		}
	}
	out := []Alarm{}
	for _, a := range resp.Alarms {
		out = append(out, Alarm{MemberID: fmt.Sprintf("%x", a.MemberID), MemberName: names[a.MemberID], Alarm: a.Alarm.String()})
	}
	return out, nil
}

// ErrCorrupt refuses to disarm a CORRUPT alarm (DisarmOptions.Force
// overrides it).
var ErrCorrupt = errors.New("CORRUPT alarm raised")

// CorruptError is the ErrCorrupt refusal of the alarm of member Member,
// whose data must be rebuilt (a command names how).
type CorruptError struct {
	refusal.Refusal
	Member string
}

// DisarmOptions configure Disarm.
type DisarmOptions struct {
	// Force disarms CORRUPT alarms too.
	Force bool
}

// Disarm clears the cluster's alarms. For NOSPACE it first frees space:
// compacts to the current revision, defragments every member, and checks
// the database is back under the quota, because disarming a full database
// only raises the alarm again. A CORRUPT alarm is refused unless Force: the
// member's data diverged and must be replaced.
func Disarm(ctx context.Context, c *cluster.Cluster, o DisarmOptions) ([]Alarm, error) {
	alarms, err := Alarms(ctx, c)
	if err != nil {
		return nil, err
	}
	if len(alarms) == 0 {
		c.Progress.Say("no alarms raised")
		return alarms, nil
	}
	nospace := false
	for _, a := range alarms {
		switch a.Alarm {
		case pb.AlarmType_CORRUPT.String():
			if !o.Force {
				return nil, &CorruptError{Refusal: refusal.Refusal{Kind: ErrCorrupt,
					Msg: fmt.Sprintf("member %s (%s) has a CORRUPT alarm: its data diverged from the others", a.MemberName, a.MemberID)}, Member: a.MemberName}
			}
		case pb.AlarmType_NOSPACE.String():
			nospace = true
		}
	}
	cli, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	if nospace {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := cli.Get(gctx, "health", clientv3.WithCountOnly())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("read current revision: %w", err)
		}
		rev := resp.Header.Revision
		c.Progress.Say("NOSPACE: compacting to revision %d", rev)
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		_, err = cli.Compact(cctx, rev, clientv3.WithCompactPhysical())
		cancel()
		if err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
			return nil, fmt.Errorf("compact to revision %d: %w", rev, err)
		}
		if _, err := Defrag(ctx, c, DefragOptions{AllowAlarms: true}); err != nil {
			return nil, err
		}
		st, err := status.Get(ctx, c)
		if err != nil {
			return nil, err
		}
		for _, m := range st.Members {
			if m.DBSize >= c.Spec.Etcd.QuotaBackendBytes {
				return nil, fmt.Errorf("member %s database is still %s after compaction and defragmentation, at or above the quota %s: delete data or raise etcd.quotaBackendBytes, then disarm again",
					m.Name, progress.Bytes(m.DBSize), progress.Bytes(c.Spec.Etcd.QuotaBackendBytes))
			}
		}
	}
	for _, a := range alarms {
		id, _ := strconv.ParseUint(a.MemberID, 16, 64)
		at := pb.AlarmType(pb.AlarmType_value[a.Alarm])
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.AlarmDisarm(dctx, &clientv3.AlarmMember{MemberID: id, Alarm: at})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("disarm %s on %s: %w", a.Alarm, a.MemberName, err)
		}
		c.Progress.Say("disarmed %s on %s", a.Alarm, a.MemberName)
	}
	return alarms, nil
}
