// Package handover keeps what a coordinator knows where another can take
// it over: copies of the cluster spec and of every plan state in the
// backup store (the shared, durable thing every host reaches), each signed
// with the admin key, and a generation number that fences a coordinator
// which comes back after another took over.
//
// Objects (under coordinator/ in the backup store; never *.json, so backup
// listings do not see them):
//
//	coordinator/owner/GGGGGGGGGG            the owner record of generation G
//	coordinator/spec/GGGGGGGGGG-SSSSSSSSSSSSSSSSSSS   a spec copy
//	coordinator/plans/ID/GGGGGGGGGG-SSSSSSSSSSSSSSSSSSS  a plan state copy
//	coordinator/recovery/GGGGGGGGGG-SSSSSSSSSSSSSSSSSSS  the recovery journal ("" once finished)
//
// S is the nanosecond time of the write: the newest copy of the highest
// generation wins. Every object is an envelope: the payload, the name it
// was written as and an ECDSA signature over both by the admin client key
// (DIR/pki/client.key; only a copy read under its own name counts, see
// newest and CurrentOwner); a reader checks
// it against the cluster CA it holds. The envelope carries the signer's certificate, so copies signed
// before the admin certificate was renewed still verify; a reader accepts
// any admin certificate (CN "steward") its CA signed and that has not
// expired. Nothing read from the store is used before that check.
//
// Invariant: a coordinator writes a plan copy before each step acts
// (plan.Store's mirror), and refuses to when the store's owner generation
// is above its own: a stale coordinator stops before it changes anything.
// (The store offers no compare-and-swap: two coordinators started at the
// same moment could both pass the check once; takeover is an operator's
// act, after the old coordinator is gone.)
package handover

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
)

const prefix = "coordinator/"

// ErrSuperseded: another coordinator took over with a higher generation.
var ErrSuperseded = errors.New("another coordinator took over")

// SupersededError is the ErrSuperseded of a directory whose generation is
// Mine (0: it never took over); the command adds how to take over again
// (cli.LibraryAdvice).
type SupersededError struct {
	Mine int64
	Err  error
}

func (e *SupersededError) Error() string { return e.Err.Error() }
func (e *SupersededError) Unwrap() error { return e.Err }

// ErrBadSignature: an object in the store is not signed by the admin key.
var ErrBadSignature = errors.New("not signed by this cluster's admin key")

// Owner is the record of one generation's coordinator.
type Owner struct {
	Generation int64     `json:"generation"`
	Host       string    `json:"host"`
	Dir        string    `json:"dir"`
	Since      time.Time `json:"since"`
}

// envelope is what every object holds.
type envelope struct {
	Kind string `json:"kind"`
	// Name is the store object the copy was written as, covered by the
	// signature (empty in copies written before it was: legacy).
	Name    string `json:"name,omitempty"`
	Payload []byte `json:"payload"`
	Sig     []byte `json:"sig"`
	// Cert is the signer's certificate (DER): an admin certificate of the
	// cluster CA, not necessarily the reader's own (it may have been
	// renewed since, with a new key).
	Cert []byte `json:"cert"`
}

// Signer signs and verifies with the admin identity of a certificate dir.
type Signer struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	cas  *x509.CertPool
}

// NewSigner loads the admin certificate and key of a certificate directory
// and checks the certificate against the CA there.
func NewSigner(pkiDir string) (*Signer, error) {
	f := pki.FilesIn(pkiDir)
	pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("admin credentials in %s: %w", pkiDir, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	if cert.Subject.CommonName != pki.AdminCN {
		return nil, fmt.Errorf("%s is the certificate of %q, not the admin's (%q): only the admin signs coordinator copies", f.ClientCert, cert.Subject.CommonName, pki.AdminCN)
	}
	pool, err := pki.CAPool(f.CA)
	if err != nil {
		return nil, fmt.Errorf("admin credentials: %w", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("admin certificate %s: %w", f.ClientCert, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", f.ClientKey)
	}
	return &Signer{key: key, cert: cert, cas: pool}, nil
}

// digest is what an envelope's signature covers: its kind, payload and,
// when it has one, the name it was written as. A bound digest begins with
// a prefix no kind has, so a legacy signature never verifies as a bound
// one's or the other way round.
func digest(kind, name string, payload []byte) [32]byte {
	if name == "" {
		return sha256.Sum256(append([]byte(kind+"\x00"), payload...))
	}
	return sha256.Sum256(append([]byte("steward-handover-v2\x00"+kind+"\x00"+name+"\x00"), payload...))
}

// seal signs payload as an object of kind written under name.
func (s *Signer) seal(kind, name string, payload []byte) ([]byte, error) {
	sum := digest(kind, name, payload)
	sig, err := ecdsa.SignASN1(rand.Reader, s.key, sum[:])
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{Kind: kind, Name: name, Payload: payload, Sig: sig, Cert: s.cert.Raw})
}

// ErrOtherName: a signed copy read under another name than the one it
// was written as (copied by someone who can write the store).
var ErrOtherName = errors.New("copied under another name")

// open verifies an object of kind read under name and returns its payload
// and whether the signature covers that name (bound); a legacy copy
// (written before names were signed) verifies unbound. A copy whose
// signed name is not name is refused (ErrOtherName).
func (s *Signer) open(kind, name string, b []byte) (payload []byte, bound bool, err error) {
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, false, fmt.Errorf("%w: does not parse", ErrBadSignature)
	}
	if e.Kind != kind {
		return nil, false, fmt.Errorf("%w: a %q object where a %q was expected", ErrBadSignature, e.Kind, kind)
	}
	// The signer: an admin certificate of this cluster's CA.
	signer, err := x509.ParseCertificate(e.Cert)
	if err != nil {
		return nil, false, fmt.Errorf("%w: no signer certificate", ErrBadSignature)
	}
	if _, err := signer.Verify(x509.VerifyOptions{Roots: s.cas, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || signer.Subject.CommonName != pki.AdminCN {
		return nil, false, fmt.Errorf("%w: signed by %q, not an admin certificate of this cluster's CA", ErrBadSignature, signer.Subject.CommonName)
	}
	sum := digest(kind, e.Name, e.Payload)
	pub, ok := signer.PublicKey.(*ecdsa.PublicKey)
	if !ok || !ecdsa.VerifyASN1(pub, sum[:], e.Sig) {
		return nil, false, ErrBadSignature
	}
	if e.Name != "" && e.Name != name {
		return nil, false, fmt.Errorf("%w: written as %s", ErrOtherName, e.Name)
	}
	return e.Payload, e.Name != "", nil
}

// Coordinator writes and reads the copies of one coordinator.
type Coordinator struct {
	Store  backup.Store
	Signer *Signer
	// Dir is the coordinator's Steward directory: its generation is
	// recorded in DIR/status/coordinator-generation.
	Dir string
}

func (c *Coordinator) genPath() string {
	return filepath.Join(c.Dir, "status", "coordinator-generation")
}

// localGeneration is this directory's generation (0: none recorded).
func (c *Coordinator) localGeneration() (int64, error) {
	b, err := os.ReadFile(c.genPath())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

func (c *Coordinator) setLocalGeneration(g int64) error {
	if err := os.MkdirAll(filepath.Dir(c.genPath()), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(c.genPath(), []byte(strconv.FormatInt(g, 10)+"\n"), 0o600)
}

// CurrentOwner returns the owner of the highest generation in the store
// whose record is signed (zero Owner when none).
func (c *Coordinator) CurrentOwner(ctx context.Context) (Owner, error) {
	names, err := c.Store.List(ctx, prefix+"owner/")
	if err != nil {
		return Owner{}, fmt.Errorf("list coordinator owners in %s: %w", c.Store, err)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	for _, n := range names {
		var o Owner
		if err := c.read(ctx, n, "owner", &o); err != nil {
			continue // unsigned or forged: never trusted
		}
		// The signature covers the record, not its name: a signed
		// record copied under a higher generation's name would make an
		// old owner current again (and a superseded coordinator pass
		// Check). Only a record under its own generation's name counts.
		if n != ownerName(o.Generation) {
			continue
		}
		return o, nil
	}
	return Owner{}, nil
}

// ownerName is the store object of generation g's owner record.
func ownerName(g int64) string { return fmt.Sprintf("%sowner/%010d", prefix, g) }

// generation returns this coordinator's generation, claiming generation 1
// when neither it nor the store has one, and fails with ErrSuperseded
// when the store's owner is above it.
func (c *Coordinator) generation(ctx context.Context) (int64, error) {
	mine, err := c.localGeneration()
	if err != nil {
		return 0, err
	}
	cur, err := c.CurrentOwner(ctx)
	if err != nil {
		return 0, err
	}
	switch {
	case cur.Generation > mine && mine == 0:
		return 0, &SupersededError{Err: fmt.Errorf("%w: generation %d is coordinated from %s:%s since %s; this directory never took over",
			ErrSuperseded, cur.Generation, cur.Host, cur.Dir, cur.Since.Format(time.RFC3339))}
	case cur.Generation > mine:
		return 0, &SupersededError{Mine: mine, Err: fmt.Errorf("%w: generation %d is coordinated from %s:%s since %s, this directory holds generation %d; its plans are stale and it acts no more",
			ErrSuperseded, cur.Generation, cur.Host, cur.Dir, cur.Since.Format(time.RFC3339), mine)}
	case mine == 0:
		if err := c.claim(ctx, 1); err != nil {
			return 0, err
		}
		return 1, nil
	}
	return mine, nil
}

// Check fails with ErrSuperseded when another coordinator took over (and
// claims generation 1 when nobody ever did): a coordinator calls it before
// it changes the spec.
func (c *Coordinator) Check(ctx context.Context) error {
	_, err := c.generation(ctx)
	return err
}

// claim writes the owner record of generation g, then records g here.
func (c *Coordinator) claim(ctx context.Context, g int64) error {
	host, _ := os.Hostname()
	o := Owner{Generation: g, Host: host, Dir: c.Dir, Since: time.Now().UTC()}
	if err := c.write(ctx, ownerName(g), "owner", o); err != nil {
		return err
	}
	return c.setLocalGeneration(g)
}

func (c *Coordinator) write(ctx context.Context, name, kind string, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b, err := c.Signer.seal(kind, name, payload)
	if err != nil {
		return err
	}
	if err := c.Store.Put(ctx, name, strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("write %s to %s: %w", name, c.Store, err)
	}
	return nil
}

func (c *Coordinator) read(ctx context.Context, name, kind string, v any) error {
	payload, _, err := c.readRaw(ctx, name, kind)
	if err != nil {
		return err
	}
	return json.Unmarshal(payload, v)
}

// readRaw returns the verified payload of object name and whether its
// signature covers the name (Signer.open).
func (c *Coordinator) readRaw(ctx context.Context, name, kind string) ([]byte, bool, error) {
	rc, err := c.Store.Get(ctx, name)
	if err != nil {
		return nil, false, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	if err != nil {
		return nil, false, err
	}
	payload, bound, err := c.Signer.open(kind, name, b)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return payload, bound, nil
}

func stamp(g int64) string { return fmt.Sprintf("%010d-%019d", g, time.Now().UnixNano()) }

// SaveSpec writes a copy of the spec (its YAML).
func (c *Coordinator) SaveSpec(ctx context.Context, specYAML []byte) error {
	g, err := c.generation(ctx)
	if err != nil {
		return err
	}
	if err := c.write(ctx, prefix+"spec/"+stamp(g), "spec", string(specYAML)); err != nil {
		return err
	}
	return c.prune(ctx, prefix+"spec/", 3)
}

// SavePlan writes a copy of a plan's state; it is plan.Store's mirror,
// so it fails (and the engine stops before the step acts) when this
// coordinator was superseded.
func (c *Coordinator) SavePlan(ctx context.Context, p *plan.Plan) error {
	g, err := c.generation(ctx)
	if err != nil {
		return err
	}
	dir := prefix + "plans/" + p.ID + "/"
	if err := c.write(ctx, dir+stamp(g), "plan", p); err != nil {
		return err
	}
	return c.prune(ctx, dir, 3)
}

// SaveRecovery writes a copy of the recovery journal (pkg/recovery's
// status/recovery.json, as JSON), or "" once the recovery finished, so a
// coordinator that takes over resumes a recovery the lost one left
// unfinished. Like SavePlan, it fails with ErrSuperseded on a stale
// coordinator.
func (c *Coordinator) SaveRecovery(ctx context.Context, journal []byte) error {
	g, err := c.generation(ctx)
	if err != nil {
		return err
	}
	if err := c.write(ctx, prefix+"recovery/"+stamp(g), "recovery", string(journal)); err != nil {
		return err
	}
	return c.prune(ctx, prefix+"recovery/", 3)
}

// prune keeps the newest keep objects under dir.
func (c *Coordinator) prune(ctx context.Context, dir string, keep int) error {
	names, err := c.Store.List(ctx, dir)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for i := 0; i < len(names)-keep; i++ {
		if err := c.Store.Delete(ctx, names[i]); err != nil {
			return err
		}
	}
	return nil
}

// newest returns the newest object under dir that verifies, decoded into v.
//
// Invariant: a copy counts only under the name it was written as. Names
// order the copies (generation, then time), and the signature covers the
// payload; were the name not covered too, anyone who can write the store
// could copy an old signed spec, plan state or recovery journal under a
// higher name and have a takeover resume from it (as with owner records,
// CurrentOwner). So the signature covers the name (Signer.seal), a copy
// read under another name is refused, and a legacy copy (written by a
// Steward before names were signed; its name cannot be checked) counts
// only when no copy in dir is bound to its name: once this coordinator
// wrote one, an old copy under any name is ignored.
func (c *Coordinator) newest(ctx context.Context, dir, kind string, v any) (string, error) {
	names, err := c.Store.List(ctx, dir)
	if err != nil {
		return "", err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(names)))
	var bad []string
	legacy, legacyName := []byte(nil), ""
	for _, n := range names {
		payload, bound, err := c.readRaw(ctx, n, kind)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		if !bound {
			if legacyName == "" {
				legacy, legacyName = payload, n
			}
			continue
		}
		if err := json.Unmarshal(payload, v); err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", n, err))
			continue
		}
		return n, nil
	}
	if legacyName != "" {
		if err := json.Unmarshal(legacy, v); err != nil {
			return "", fmt.Errorf("%s: %w", legacyName, err)
		}
		return legacyName, nil
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("no copy under %s verifies: %s", dir, strings.Join(bad, "; "))
	}
	return "", os.ErrNotExist
}

// TakeOver is what a new coordinator found and claimed.
type TakeOver struct {
	Spec  []byte
	Plans []*plan.Plan
	// RecoveryJournal is the newest verified copy of the recovery journal
	// when a recovery was left unfinished; nil otherwise.
	RecoveryJournal []byte
	Generation      int64
	Previous        Owner
}

// Take reads the newest verified spec and plan copies, lets accept refuse
// them (nothing claimed then), and claims the next generation: from now on
// the previous coordinator's plan saves fail.
func (c *Coordinator) Take(ctx context.Context, accept func(specYAML []byte) error) (*TakeOver, error) {
	prev, err := c.CurrentOwner(ctx)
	if err != nil {
		return nil, err
	}
	var specYAML string
	if _, err := c.newest(ctx, prefix+"spec/", "spec", &specYAML); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no copy of the cluster spec in %s: the coordinator of this cluster never wrote one (is this the cluster's store?)", c.Store)
		}
		return nil, err
	}
	names, err := c.Store.List(ctx, prefix+"plans/")
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, n := range names {
		rest := strings.TrimPrefix(n, prefix+"plans/")
		if id, _, ok := strings.Cut(rest, "/"); ok {
			ids[id] = true
		}
	}
	out := &TakeOver{Spec: []byte(specYAML), Previous: prev}
	for id := range ids {
		var p plan.Plan
		if _, err := c.newest(ctx, prefix+"plans/"+id+"/", "plan", &p); err != nil {
			return nil, fmt.Errorf("plan %s: %w", id, err)
		}
		out.Plans = append(out.Plans, &p)
	}
	sort.Slice(out.Plans, func(i, j int) bool { return out.Plans[i].UpdatedAt.Before(out.Plans[j].UpdatedAt) })
	var journal string
	if _, err := c.newest(ctx, prefix+"recovery/", "recovery", &journal); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("recovery journal: %w", err)
	}
	if journal != "" {
		// Checked before anything is claimed: a refused takeover claims
		// nothing.
		if err := checkJournal(journal); err != nil {
			return nil, fmt.Errorf("the copy of the recovery journal in %s is not a journal (%v): nothing was claimed", c.Store, err)
		}
		out.RecoveryJournal = []byte(journal)
	}
	if accept != nil {
		if err := accept(out.Spec); err != nil {
			return nil, err
		}
	}
	out.Generation = prev.Generation + 1
	if err := c.claim(ctx, out.Generation); err != nil {
		return nil, err
	}
	return out, nil
}

// checkJournal accepts a recovery journal copy: a JSON object naming its
// seed (pkg/recovery reads the rest).
func checkJournal(journal string) error {
	var j struct {
		Seed string `json:"seed"`
	}
	if err := json.Unmarshal([]byte(journal), &j); err != nil {
		return err
	}
	if j.Seed == "" {
		return errors.New("it names no seed")
	}
	return nil
}
