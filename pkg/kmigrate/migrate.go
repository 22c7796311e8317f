package kmigrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// metadataOnly asks for the object's metadata alone in the answer to an
// update: the API server then encodes, and Steward reads, a fraction of
// the object (a server that cannot do that answers with the whole object
// as JSON). Errors still come as a Status.
const metadataOnly = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// Defaults of Options.
const (
	DefaultChunkSize = 500
	DefaultWorkers   = 4
	DefaultQPS       = 50
	// MaxReportedFailures is the number of failed objects a Report lists
	// per resource; the state database keeps them all.
	MaxReportedFailures = 100
)

// Options say what to migrate and how.
type Options struct {
	// Config is the client configuration (from the kubeconfig). Run uses a
	// copy: its rate limit, content type and user agent are replaced.
	Config *rest.Config
	// Kubeconfig is the kubeconfig's path, named in error messages.
	Kubeconfig string
	// Resources are kubectl-style names (configmaps, deployments.apps,
	// widgets.example.com). Empty with All.
	Resources []string
	// All selects every resource SelectAll returns.
	All bool
	// Auto migrates, of the selected resources (all when Resources is
	// empty), only those whose storageVersionHash differs from the one
	// recorded at their last complete migration, or that never had one.
	Auto bool
	// QPS is the most requests per second to the API server, all workers,
	// lists and checks together; 0 means no limit. Burst is the bucket's
	// size (0: QPS, at least 1).
	QPS   float64
	Burst int
	// Workers is the number of concurrent updates (0: DefaultWorkers).
	Workers int
	// ChunkSize is the list limit (0: DefaultChunkSize).
	ChunkSize int64
	// Dir is the Steward directory, which holds the state database.
	Dir string
	// Progress receives progress lines (nil: none); Terminal makes them a
	// bar redrawn in place. ProgressInterval is the period of plain lines
	// (0: 10 s).
	Progress         io.Writer
	Terminal         bool
	ProgressInterval time.Duration
	// Metrics (optional) are updated as objects are done.
	Metrics *Metrics
	// Log (optional) receives retries and other details at debug level.
	Log *slog.Logger
	// Backoff is the retry policy for transient failures.
	Backoff Backoff
	// MaxConflicts is the number of times an object is fetched again after
	// a conflict before it is recorded as failed (0: 5).
	MaxConflicts int
	// RequestTimeout bounds each request (0: 60 s).
	RequestTimeout time.Duration
	// JSON makes every request JSON. By default built-in resources
	// (UsesProtobuf) are read and written in protobuf, which costs the API
	// server and Steward less; custom resources are always JSON.
	JSON bool
}

// ErrIncomplete is wrapped by Run's error when the report has resources
// not migrated: failed objects, a resource that could not be listed, an
// interruption.
var ErrIncomplete = errors.New("migration incomplete")

// ErrOptions is wrapped by Run's error when Options are invalid (nothing
// selected, a selection made twice, a negative rate); the message names
// the Options fields, and a command checks its flags first.
var ErrOptions = errors.New("invalid migration options")

// Run migrates the selected resources one at a time: each object is
// listed in chunks and sent back unchanged with an update, so that the
// API server stores it again in the current storage version and under the
// current encryption key. Progress is saved in the state database after
// each chunk; a run that was killed resumes where it stopped.
//
// Before changing anything it checks that the API server answers, that
// every named resource exists, and (SelfSubjectAccessReview) that the
// credentials may list, get and update each selected resource; any
// problem is an error and nothing is migrated. The report is returned
// whenever the migration started; the error then wraps ErrIncomplete
// unless every resource was migrated or up to date.
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	if o.Config == nil {
		return nil, fmt.Errorf("%w: no client configuration", ErrOptions)
	}
	if o.All && len(o.Resources) > 0 {
		return nil, fmt.Errorf("%w: All and Resources both select resources: give one", ErrOptions)
	}
	if !o.All && !o.Auto && len(o.Resources) == 0 {
		return nil, fmt.Errorf("%w: no resources selected: name them in Resources, or set All or Auto", ErrOptions)
	}
	if o.QPS < 0 || o.Workers < 0 || o.ChunkSize < 0 {
		return nil, fmt.Errorf("%w: QPS, Workers and ChunkSize must not be negative", ErrOptions)
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.MaxConflicts <= 0 {
		o.MaxConflicts = 5
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = time.Minute
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prog := newProgress(o.Progress, o.Terminal, o.ProgressInterval)
	defer prog.close()

	cfg := clientConfig(o, prog)
	server := cfg.Host
	rc, err := rest.UnversionedRESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s (kubeconfig %s): %w", server, o.Kubeconfig, err)
	}

	// Discovery: what the server serves, and its storage version hashes
	// (only the unaggregated documents carry them).
	all, failedGroups, err := discover(cfg)
	if err != nil {
		return nil, serverError(server, o.Kubeconfig, err)
	}
	var sel []Resource
	var excluded []Excluded
	if len(o.Resources) == 0 {
		sel, excluded = SelectAll(all)
		for gv, gerr := range failedGroups {
			excluded = append(excluded, Excluded{gv, "discovery failed: " + gerr.Error()})
		}
		sort.Slice(excluded, func(i, j int) bool { return excluded[i].Resource < excluded[j].Resource })
	} else if sel, err = Select(all, o.Resources); err != nil {
		if len(failedGroups) > 0 {
			var gs []string
			for gv := range failedGroups {
				gs = append(gs, gv)
			}
			sort.Strings(gs)
			err = fmt.Errorf("%w (discovery failed for %s)", err, strings.Join(gs, ", "))
		}
		return nil, err
	}

	rep := &Report{Server: server, StateFile: StatePath(o.Dir), Auto: o.Auto, Excluded: excluded, Resources: []ResourceReport{}}
	states, err := ReadState(o.Dir)
	if err != nil {
		return nil, err
	}
	var todo []Resource
	upToDate := map[string]bool{}
	for _, r := range sel {
		st := states[r.Name()]
		if o.Auto && r.StorageVersionHash != "" && st.MigratedHash == r.StorageVersionHash && (st.Run == nil || st.Run.Done) {
			upToDate[r.Name()] = true
			continue
		}
		todo = append(todo, r)
	}

	if len(todo) > 0 {
		missing, err := checkAccess(ctx, rc, todo, o.Workers)
		if err != nil {
			return nil, serverError(server, o.Kubeconfig, err)
		}
		if len(missing) > 0 {
			return nil, missingRightsError(whoAmI(ctx, rc), o.Kubeconfig, missing)
		}
	}

	m := &migrator{o: o, rc: rc, log: log, prog: prog}
	if len(todo) > 0 {
		st, err := OpenState(o.Dir)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		m.state = st
	}
	var fatal error
	idx := 0
	for _, r := range sel {
		if upToDate[r.Name()] {
			st := states[r.Name()]
			rep.Resources = append(rep.Resources, ResourceReport{Resource: r.Name(), Group: r.Group, Version: r.Version,
				StorageVersionHash: r.StorageVersionHash, Result: ResultUpToDate, Failures: []Failure{}, Counts: runCounts(st.Run)})
			continue
		}
		idx++
		if fatal != nil {
			rep.Resources = append(rep.Resources, ResourceReport{Resource: r.Name(), Group: r.Group, Version: r.Version,
				StorageVersionHash: r.StorageVersionHash, Result: ResultNotStarted, Failures: []Failure{}})
			continue
		}
		var rr ResourceReport
		rr, fatal = m.resource(ctx, idx, len(todo), r)
		rep.Resources = append(rep.Resources, rr)
	}
	rep.total()
	rep.Duration = time.Since(start)
	if fatal != nil {
		return rep, fmt.Errorf("%w: %w; run the same command again to resume after the last saved chunk", ErrIncomplete, fatal)
	}
	if !rep.OK() {
		var parts []string
		for _, rr := range rep.Resources {
			switch {
			case rr.Error != "":
				parts = append(parts, rr.Resource+": "+rr.Error)
			case rr.Failed > 0:
				parts = append(parts, fmt.Sprintf("%s: %d %s refused", rr.Resource, rr.Failed, plural(rr.Failed, "object", "objects")))
			}
		}
		return rep, fmt.Errorf("%w: %s (the summary lists the objects and reasons)", ErrIncomplete, strings.Join(parts, "; "))
	}
	return rep, nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func runCounts(r *RunState) Counts {
	if r == nil {
		return Counts{}
	}
	return Counts{Migrated: r.Migrated, Skipped: r.Skipped, Failed: r.Failed}
}

// clientConfig returns a copy of the client configuration with the
// migration's rate limit (one token bucket for every request of the run,
// so that client-go's own limiter does not apply another), JSON by default
// (the lists and gets of built-in resources ask for protobuf, and each
// update says what its body is), and warnings shown once each.
func clientConfig(o Options, prog *progress) *rest.Config {
	cfg := rest.CopyConfig(o.Config)
	cfg.UserAgent = "steward-migrate"
	if o.QPS > 0 {
		burst := o.Burst
		if burst <= 0 {
			burst = max(1, int(o.QPS))
		}
		cfg.QPS, cfg.Burst = float32(o.QPS), burst
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	} else {
		cfg.QPS, cfg.Burst, cfg.RateLimiter = -1, 0, nil // no client-side limit
	}
	cfg.ContentConfig = rest.ContentConfig{
		ContentType:          "application/json",
		AcceptContentTypes:   "application/json",
		NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
	}
	cfg.GroupVersion, cfg.APIPath = nil, ""
	cfg.WarningHandler = &warnings{prog: prog}
	return cfg
}

// warnings prints each distinct warning of the API server once. client-go
// calls it from any request's goroutine: seen is a sync.Map and prog locks
// for itself.
type warnings struct {
	prog *progress
	seen sync.Map
}

func (w *warnings) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	if _, dup := w.seen.LoadOrStore(text, true); !dup {
		w.prog.printf("warning: %s", text)
	}
}

// discover returns the resources of every group's preferred version, and
// the group versions whose discovery failed (an aggregated API server
// that is down) when the others answered.
func discover(cfg *rest.Config) ([]Resource, map[string]error, error) {
	dcfg := rest.CopyConfig(cfg)
	if dcfg.Timeout == 0 {
		dcfg.Timeout = 30 * time.Second
	}
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return nil, nil, err
	}
	lists, err := dc.WithLegacy().ServerPreferredResources()
	var failed map[string]error
	if err != nil {
		var gerr *discovery.ErrGroupDiscoveryFailed
		if !errors.As(err, &gerr) || len(lists) == 0 {
			return nil, nil, err
		}
		failed = map[string]error{}
		for gv, e := range gerr.Groups {
			failed[gv.String()] = e
		}
	}
	return ResourcesFrom(lists), failed, nil
}

// serverError explains an error of the first requests: an API server that
// cannot be reached, or that refuses the credentials.
func serverError(server, kubeconfig string, err error) error {
	var ue *url.Error
	var ne net.Error
	var oe *net.OpError
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server %s refused the credentials of kubeconfig %s (401 Unauthorized: %w); nothing was migrated", server, kubeconfig, err)
	case errors.As(err, &oe), errors.As(err, &ne), errors.As(err, &ue):
		cause := err
		if oe != nil {
			cause = oe
		}
		return fmt.Errorf("cannot reach the API server %s (kubeconfig %s): %w; nothing was migrated", server, kubeconfig, cause)
	}
	return fmt.Errorf("the API server %s (kubeconfig %s): %w; nothing was migrated", server, kubeconfig, err)
}

// migrator runs the migration of one resource after another.
//
// Goroutines, per resource: the resource goroutine (resource), one lister
// and o.Workers updaters. o, rc, log and prog never change (rc, log and
// prog are safe for concurrent use); state (the bbolt database) is used by
// the resource goroutine only.
type migrator struct {
	o     Options
	rc    rest.Interface
	state *State
	log   *slog.Logger
	prog  *progress

	// Per resource: counted by the updaters and the lister (onRetry),
	// reset and read by the resource goroutine while none of them runs.
	retries, conflicts atomic.Int64
}

// result is what became of one object.
type result struct {
	outcome Outcome // Done, Skip or Reject
	failure Failure
	err     error // the run must stop
}

// chunk is one list page handed from the lister to the updaters.
type chunk struct {
	objs      []object
	token     string // the continue token after the chunk
	lastKey   string
	total     int64 // estimated objects of the resource; -1 unknown
	restarts  int64
	fromStart int64
	err       error
}

// resource migrates one resource. The returned error stops the run (an
// interruption, or an API server that kept failing); other problems are
// in the report.
func (m *migrator) resource(ctx context.Context, idx, n int, r Resource) (ResourceReport, error) {
	start := time.Now()
	name := r.Name()
	rr := ResourceReport{Resource: name, Group: r.Group, Version: r.Version, StorageVersionHash: r.StorageVersionHash, Failures: []Failure{}}
	m.retries.Store(0)
	m.conflicts.Store(0)

	rs, _, err := m.state.Get(name)
	if err != nil {
		return rr, err
	}
	rs.Resource = name
	run := rs.Run
	reset := false
	switch {
	case run != nil && !run.Done && run.StorageVersionHash == r.StorageVersionHash:
		rr.Resumed = true
		if run.Chunks == 0 {
			m.prog.printf("[%d/%d] %s: resuming (no chunk was finished: from the beginning)", idx, n, name)
		} else {
			m.prog.printf("[%d/%d] %s: resuming after %s (%d objects done)", idx, n, name, strconv.Quote(run.LastKey), run.Processed())
		}
	default:
		if run != nil && !run.Done {
			m.prog.printf("[%d/%d] %s: the storage version changed since the interrupted migration: starting again", idx, n, name)
		} else {
			m.prog.printf("[%d/%d] %s: migrating", idx, n, name)
		}
		run = &RunState{StorageVersionHash: r.StorageVersionHash, StartedAt: time.Now().UTC()}
		reset = true
	}
	run.Version = r.Version
	rs.Run = run
	if err := m.state.Save(rs, nil, reset); err != nil {
		return rr, err
	}
	before := runCounts(run)
	baseRestarts := run.ListRestarts
	m.prog.begin(name, idx, n, run)
	m.o.Metrics.begin(name)
	defer m.prog.end()

	// Ownership below: run and rs belong to this goroutine. The lister
	// goroutine owns lst and reads run only before its first send on
	// chunks (this goroutine changes run only after it received a chunk);
	// it hands everything else over through chunks. Each updater job
	// writes only its own results[i], read here after wg.Wait.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lst := newLister(m.listFunc(r), run.Continue, run.LastKey)
	chunks := make(chan chunk, 1)
	var listerDone sync.WaitGroup
	listerDone.Add(1)
	go func() {
		defer listerDone.Done()
		defer close(chunks)
		listed := run.Processed()
		for !lst.done {
			objs, tok, remaining, err := lst.next(rctx)
			c := chunk{objs: objs, token: tok, lastKey: lst.lastKey, total: -1, restarts: lst.restarts, fromStart: lst.fromStart, err: err}
			if err == nil {
				listed += int64(len(objs))
				switch {
				case remaining >= 0:
					c.total = listed + remaining
				case tok == "":
					c.total = listed
				}
			}
			select {
			case chunks <- c:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		for range chunks { //nolint:revive // drain so that the lister ends
		}
		listerDone.Wait()
	}()

	jobs := make(chan func())
	var workers sync.WaitGroup
	for w := 0; w < m.o.Workers; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for j := range jobs {
				j()
			}
		}()
	}
	defer func() { close(jobs); workers.Wait() }()

	finish := func(result string, fatal error) (ResourceReport, error) {
		rr.Result = result
		rr.Counts = runCounts(run)
		rr.ThisRun = Counts{Migrated: run.Migrated - before.Migrated, Skipped: run.Skipped - before.Skipped, Failed: run.Failed - before.Failed}
		rr.Retries, rr.Conflicts, rr.ListRestarts = m.retries.Load(), m.conflicts.Load(), run.ListRestarts-baseRestarts
		rr.Duration = time.Since(start)
		if f, err := m.state.Failures(name, MaxReportedFailures); err == nil {
			rr.Failures = f
		}
		return rr, fatal
	}

	var total int64 = -1
	for c := range chunks {
		if c.err != nil {
			out, _ := Classify(c.err)
			err := fmt.Errorf("list %s: %w", name, c.err)
			if out == Abort || errors.Is(c.err, ErrUnavailable) || ctx.Err() != nil {
				m.prog.printf("[%d/%d] %s: stopped: %v", idx, n, name, err)
				return finish(ResultInterrupted, err)
			}
			rr.Error = err.Error()
			m.prog.printf("[%d/%d] %s: %v", idx, n, name, err)
			return finish(ResultError, nil)
		}
		if c.total >= 0 {
			total = c.total
			m.prog.setTotal(total)
		}
		if c.restarts > run.ListRestarts-baseRestarts {
			how := "continuing after the last object listed at the current revision"
			if c.fromStart > 0 {
				how = "listing again from the beginning, skipping what was done"
			}
			m.prog.printf("[%d/%d] %s: the continue token expired (410 Gone): %s", idx, n, name, how)
			run.ListRestarts = baseRestarts + c.restarts
		}

		results := make([]result, len(c.objs))
		var wg sync.WaitGroup
		for i := range c.objs {
			wg.Add(1)
			jobs <- func() {
				defer wg.Done()
				res := m.update(rctx, r, c.objs[i])
				results[i] = res
				if res.err != nil {
					cancel() // the other updates of the chunk stop too
				} else {
					m.prog.add(res.outcome)
					m.o.Metrics.object(name, res.outcome)
				}
			}
		}
		wg.Wait()

		var failures []Failure
		var fatal error
		delta := Counts{}
		for _, res := range results {
			switch {
			case res.err != nil:
				if fatal == nil || errors.Is(fatal, context.Canceled) {
					fatal = res.err
				}
			case res.outcome == Done:
				delta.Migrated++
			case res.outcome == Skip:
				delta.Skipped++
			default:
				delta.Failed++
				failures = append(failures, res.failure)
			}
		}
		if fatal != nil {
			// The chunk is not saved: a new run does it again (an update
			// that changes nothing can be sent twice).
			if ctx.Err() != nil {
				fatal = fmt.Errorf("interrupted: %w", ctx.Err())
			}
			m.prog.printf("[%d/%d] %s: stopped: %v", idx, n, name, fatal)
			return finish(ResultInterrupted, fatal)
		}
		run.Migrated += delta.Migrated
		run.Skipped += delta.Skipped
		run.Failed += delta.Failed
		run.Continue = c.token
		run.LastKey = c.lastKey
		run.Chunks++
		if c.token == "" {
			run.Done = true
			run.FinishedAt = time.Now().UTC()
			if run.Failed == 0 && r.StorageVersionHash != "" {
				rs.MigratedHash, rs.MigratedAt = r.StorageVersionHash, run.FinishedAt
			}
		}
		if err := m.state.Save(rs, failures, false); err != nil {
			return finish(ResultInterrupted, err)
		}
		if total >= 0 {
			m.o.Metrics.setRemaining(name, max(0, total-run.Processed()))
		}
		m.log.Debug("chunk saved", "resource", name, "chunk", run.Chunks, "lastKey", run.LastKey, "migrated", run.Migrated)
	}
	if !run.Done {
		err := ctx.Err()
		if err == nil {
			err = errors.New("the list ended early")
		}
		return finish(ResultInterrupted, fmt.Errorf("interrupted: %w", err))
	}
	m.o.Metrics.setRemaining(name, 0)
	result := ResultMigrated
	if run.Failed > 0 {
		result = ResultFailed
	}
	rr, err = finish(result, nil)
	m.prog.printf("[%d/%d] %s: %s: %d migrated, %d skipped, %d failed (this run %d, %d, %d) in %s", idx, n, name, result,
		rr.Migrated, rr.Skipped, rr.Failed, rr.ThisRun.Migrated, rr.ThisRun.Skipped, rr.ThisRun.Failed, rr.Duration.Round(time.Millisecond))
	return rr, err
}

// listFunc lists a resource in all namespaces, one chunk per call,
// retrying transient failures.
func (m *migrator) listFunc(r Resource) listFunc {
	limit := strconv.FormatInt(m.o.ChunkSize, 10)
	accept := m.accept(r)
	return func(ctx context.Context, token string) (page, error) {
		var p page
		err := retry(ctx, m.o.Backoff, func() error {
			req := m.rc.Get().AbsPath(r.apiPath()).Resource(r.Resource).Param("limit", limit).
				SetHeader("Accept", accept).MaxRetries(0).Timeout(m.o.RequestTimeout)
			if token != "" {
				req = req.Param("continue", token)
			}
			res := req.Do(ctx)
			body, err := res.Raw()
			if err != nil {
				return res.Error()
			}
			var ct string
			res.ContentType(&ct)
			p, err = decodePage(body, ct)
			return err
		}, m.onRetry(r, "list"))
		return p, err
	}
}

// accept is the Accept header of the lists and gets of a resource:
// protobuf for built-in resources (unless Options.JSON), else JSON.
func (m *migrator) accept(r Resource) string {
	if !m.o.JSON && UsesProtobuf(r) {
		return acceptProtobuf
	}
	return mediaJSON
}

func (m *migrator) onRetry(r Resource, what string) func(int, error, time.Duration) {
	return func(attempt int, err error, wait time.Duration) {
		m.retries.Add(1)
		m.o.Metrics.retry(r.Name())
		m.log.Debug("retrying", "resource", r.Name(), "request", what, "attempt", attempt, "wait", wait, "error", err)
	}
}

// update sends the object back unchanged. On a conflict it gets the
// object again and retries, a bounded number of times.
func (m *migrator) update(ctx context.Context, r Resource, o object) result {
	body, contentType := o.body, o.contentType
	conflicts := 0
	fail := func(err error) result {
		var st apierrors.APIStatus
		f := Failure{Namespace: o.namespace, Name: o.name, Reason: err.Error()}
		if errors.As(err, &st) {
			f.Code = int(st.Status().Code)
			if msg := st.Status().Message; msg != "" {
				f.Reason = msg
			}
		}
		return result{outcome: Reject, failure: f}
	}
	stop := func(what string, err error) result {
		return result{err: fmt.Errorf("%s %s %s: %w", what, r.Name(), o.key(), err)}
	}
	for {
		err := retry(ctx, m.o.Backoff, func() error {
			res := m.rc.Put().AbsPath(r.apiPath()).NamespaceIfScoped(o.namespace, r.Namespaced).Resource(r.Resource).Name(o.name).
				Body(body).SetHeader("Content-Type", contentType).SetHeader("Accept", metadataOnly).
				MaxRetries(0).Timeout(m.o.RequestTimeout).Do(ctx)
			if _, err := res.Raw(); err != nil {
				return res.Error()
			}
			return nil
		}, m.onRetry(r, "update"))
		if errors.Is(err, ErrUnavailable) {
			return stop("update", err)
		}
		switch out, _ := Classify(err); out {
		case Done, Skip:
			return result{outcome: out}
		case Reject:
			return fail(err)
		case Refetch:
			conflicts++
			m.conflicts.Add(1)
			if conflicts > m.o.MaxConflicts {
				r := fail(err)
				r.failure.Reason = fmt.Sprintf("still conflicting after getting it again %d times: %s", m.o.MaxConflicts, r.failure.Reason)
				return r
			}
			var got []byte
			var gotType string
			gerr := retry(ctx, m.o.Backoff, func() error {
				res := m.rc.Get().AbsPath(r.apiPath()).NamespaceIfScoped(o.namespace, r.Namespaced).Resource(r.Resource).Name(o.name).
					SetHeader("Accept", m.accept(r)).MaxRetries(0).Timeout(m.o.RequestTimeout).Do(ctx)
				b, err := res.Raw()
				if err != nil {
					return res.Error()
				}
				// A single object comes whole (with apiVersion and kind, or
				// in its envelope): it is sent back as it is.
				got = b
				res.ContentType(&gotType)
				return nil
			}, m.onRetry(r, "get"))
			if errors.Is(gerr, ErrUnavailable) {
				return stop("get", gerr)
			}
			switch gout, _ := Classify(gerr); gout {
			case Done:
				body, contentType = got, gotType
			case Skip:
				return result{outcome: Skip}
			case Reject:
				return fail(gerr)
			default:
				return stop("get", gerr)
			}
		default:
			return stop("update", err)
		}
	}
}
