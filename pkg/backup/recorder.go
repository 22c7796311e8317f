package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/klauspost/compress/zstd"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	Store Store
	Key   *Key
	// Auth authenticates the manifests (required).
	Auth                   *AuthKey
	ClusterID, EtcdVersion string
	Member                 string
	// Lineage is the cluster's current timeline, recorded in each manifest.
	Lineage Lineage
	// A segment is closed and uploaded when it holds MaxEvents events or
	// MaxBytes bytes, or when its first event is MaxAge old (the recovery
	// point objective: keep it well under a second).
	MaxEvents int
	MaxBytes  int64
	MaxAge    time.Duration
	// OnUpload is called after each segment is stored (for status). It
	// runs on the goroutine that called Run: whatever it writes that
	// another goroutine reads needs a lock of the caller's.
	OnUpload func(Manifest)
	// Fence, when set, is called before each segment is stored; an error
	// stops the recorder without storing (another recorder may own the
	// chain now). It runs on Run's goroutine too.
	Fence func() error
	Now   func() time.Time
}

// ErrCompacted means the revision to continue from is compacted away: a
// new full snapshot is needed, never a silent gap.
var ErrCompacted = errors.New("watch revision compacted: a new full snapshot is needed")

// Recorder watches the whole keyspace from a revision and stores the events
// as delta segments.
//
// A Recorder has no lock: it is owned by the goroutine that calls Run (one
// Run at a time), which alone touches leases, segment and Next while Run
// runs, and calls OnUpload and Fence. The watch's own goroutines (in
// clientv3) hand events over through the watch channel only. o never
// changes after NewRecorder.
type Recorder struct {
	o       RecorderOptions
	leases  map[int64]bool // owned by Run's goroutine
	segment *segment       // owned by Run's goroutine; nil when none is open
	// Next is the first revision not yet stored. Owned by Run's goroutine:
	// read it before Run or after it returned, never during.
	Next int64
}

// segment is the open segment; it belongs to the Recorder's Run goroutine.
type segment struct {
	buf     bytes.Buffer
	w       *DeltaWriter
	start   int64
	end     int64
	opened  time.Time
	lastSub int64
}

// NewRecorder returns a recorder that continues at revision from.
func NewRecorder(o RecorderOptions, from int64) *Recorder {
	if o.MaxEvents == 0 {
		o.MaxEvents = 10000
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 8 << 20
	}
	if o.MaxAge == 0 {
		o.MaxAge = 250 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Recorder{o: o, leases: map[int64]bool{}, Next: from}
}

// Run watches from r.Next until ctx ends or the watch fails. It stores the
// open segment before returning, so that nothing received is lost. It
// returns ErrCompacted when r.Next is no longer available.
func (r *Recorder) Run(ctx context.Context, cli *clientv3.Client) (err error) {
	// A segment left by a failed upload is dropped: the watch below starts
	// again at r.Next, the first revision not stored, and receives it anew.
	r.segment = nil
	tick := time.NewTicker(r.o.MaxAge / 4)
	defer tick.Stop()
	defer func() {
		// Store what was received, even when stopping.
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		if ferr := r.flush(sctx); ferr != nil && err == nil {
			err = ferr
		}
	}()
	// The watch is re-established in place after a transient failure (a
	// leader election, a member restart), from the first revision not yet
	// received, so recording never pauses for a whole backup round.
	var (
		wch      clientv3.WatchChan
		cancel   context.CancelFunc = func() {}
		failures int
		lastErr  error
	)
	defer func() { cancel() }()
	open := func() {
		cancel()
		var wctx context.Context
		wctx, cancel = context.WithCancel(clientv3.WithRequireLeader(ctx))
		from := r.Next
		if r.segment != nil {
			from = r.segment.end + 1
		}
		wch = cli.Watch(wctx, "", clientv3.WithFromKey(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	}
	retry := func(e error) error {
		failures++
		lastErr = e
		if failures > 30 {
			return fmt.Errorf("watch keeps failing: %w", lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		open()
		return nil
	}
	open()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if r.segment != nil && r.o.Now().Sub(r.segment.opened) >= r.o.MaxAge {
				if err := r.flush(ctx); err != nil {
					return err
				}
			}
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err := retry(errors.New("watch closed")); err != nil {
					return err
				}
				continue
			}
			if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
				return fmt.Errorf("%w (continue at %d, compacted up to %d)", ErrCompacted, r.Next, resp.CompactRevision)
			}
			if err := resp.Err(); err != nil {
				if rerr := retry(fmt.Errorf("watch: %w", err)); rerr != nil {
					return rerr
				}
				continue
			}
			if len(resp.Events) == 0 {
				continue
			}
			failures = 0
			if err := r.add(ctx, cli, resp.Events); err != nil {
				return err
			}
			s := r.segment
			if s.w.Events >= r.o.MaxEvents || s.w.Bytes >= r.o.MaxBytes {
				if err := r.flush(ctx); err != nil {
					return err
				}
			}
		}
	}
}

func (r *Recorder) add(ctx context.Context, cli *clientv3.Client, evs []*clientv3.Event) error {
	if r.segment == nil {
		s := &segment{start: r.Next, opened: r.o.Now(), lastSub: -1}
		s.w = NewDeltaWriter(&s.buf)
		r.segment = s
	}
	s := r.segment
	if err := s.w.Time(evs[0].Kv.ModRevision, r.o.Now()); err != nil {
		return err
	}
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		if rev < r.Next && s.end == 0 {
			continue // already stored (a restarted watch may repeat)
		}
		sub := int64(0)
		if rev == s.end {
			sub = s.lastSub + 1
		} else if s.end != 0 && rev != s.end+1 || s.end == 0 && rev != s.start {
			return fmt.Errorf("watch skipped from revision %d to %d: refusing to record a gap", max(s.end, s.start-1), rev)
		}
		typ := byte('P')
		kv := *ev.Kv
		if ev.Type == mvccpb.DELETE {
			typ = 'D'
			kv = mvccpb.KeyValue{Key: ev.Kv.Key, ModRevision: rev}
		} else if kv.Lease != 0 && !r.leases[kv.Lease] {
			ttl, err := leaseTTL(ctx, cli, kv.Lease)
			if err != nil {
				return err
			}
			if err := s.w.Lease(kv.Lease, ttl); err != nil {
				return err
			}
			r.leases[kv.Lease] = true
		}
		if err := s.w.Event(typ, sub, &kv); err != nil {
			return err
		}
		s.end, s.lastSub = rev, sub
	}
	return nil
}

// leaseTTL asks etcd for a lease's granted TTL. A lease already gone keeps
// its keys' deletes in the stream; it is recorded with a 1 s TTL.
func leaseTTL(ctx context.Context, cli *clientv3.Client, id int64) (int64, error) {
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(lctx, clientv3.LeaseID(id))
	if err != nil {
		return 0, fmt.Errorf("lease %x: %w", id, err)
	}
	if resp.TTL <= 0 || resp.GrantedTTL <= 0 {
		return 1, nil
	}
	return resp.GrantedTTL, nil
}

// flush stores the open segment, if it holds events.
func (r *Recorder) flush(ctx context.Context) error {
	s := r.segment
	if s == nil || s.w.Events == 0 {
		r.segment = nil
		return nil
	}
	if r.o.Fence != nil {
		if err := r.o.Fence(); err != nil {
			return err
		}
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	m, err := PutDelta(ctx, r.o.Store, r.o.Key, r.o.Auth, DeltaInfo{
		ClusterID: r.o.ClusterID, Member: r.o.Member, EtcdVersion: r.o.EtcdVersion, Lineage: r.o.Lineage,
		Start: s.start, End: s.end, Events: s.w.Events, Now: r.o.Now(),
	}, s.buf.Bytes())
	if err != nil {
		return err
	}
	r.Next = s.end + 1
	r.segment = nil
	if r.o.OnUpload != nil {
		r.o.OnUpload(m)
	}
	return nil
}

// DeltaInfo describes a delta segment for PutDelta.
type DeltaInfo struct {
	ClusterID, Member, EtcdVersion string
	Lineage                        Lineage
	// Start and End are the first and last revision of its events.
	Start, End int64
	Events     int
	Now        time.Time
}

// PutDelta packs an encoded segment (zstd, and encryption with key) and
// stores it with its manifest, authenticated under auth.
func PutDelta(ctx context.Context, s Store, key *Key, auth *AuthKey, d DeltaInfo, body []byte) (Manifest, error) {
	m := Manifest{
		ID: fmt.Sprintf("%s-delta-r%d-%d", d.Now.UTC().Format("20060102T150405.000Z"), d.Start, d.End), Kind: KindDelta,
		ClusterID: d.ClusterID, Member: d.Member, StartRevision: d.Start, EndRevision: d.End,
		EtcdVersion: d.EtcdVersion, RawSize: int64(len(body)), TotalKeys: d.Events,
		Compression: compressionZstd, CreatedAt: d.Now.UTC(), Lineage: d.Lineage,
	}
	if key != nil {
		m.Encryption, m.KeyID = encAlgorithm, key.ID()
	}
	var packed bytes.Buffer
	var err error
	if m.Size, m.SHA256, err = packStream(&packed, bytes.NewReader(body), key, zstd.SpeedDefault); err != nil {
		return m, err
	}
	if err := putWithManifest(ctx, s, auth, &m, bytes.NewReader(packed.Bytes())); err != nil {
		return m, err
	}
	return m, nil
}
