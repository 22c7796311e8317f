package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
)

// chainOf reads a certificate file: the leaf and the certificates after it.
func chainOf(t *testing.T, path string) (*x509.Certificate, *x509.CertPool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var leaf *x509.Certificate
	inter := x509.NewCertPool()
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if leaf == nil {
			leaf = c
		} else {
			inter.AddCert(c)
		}
	}
	return leaf, inter
}

func poolOf(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	p, err := pki.CAPool(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func verifies(leaf *x509.Certificate, inter, roots *x509.CertPool) error {
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// TestRotation: the phases of a CA rotation on files. After the leaves are
// reissued, each verifies against the old CA alone (through the
// cross-signed CA it carries), the new alone and the bundle; after the
// drop ca.crt is the new CA alone, ca.key its key, the old pair is kept,
// and a leaf of the old CA no longer verifies. Every phase run twice
// changes nothing the second time.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.IssueClient(dir, "c1", "writer", 0, "", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	oldCAFile := filepath.Join(t.TempDir(), "old-ca.crt")
	oldCA, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err := os.WriteFile(oldCAFile, oldCA, 0o644); err != nil {
		t.Fatal(err)
	}
	oldClient, _ := os.ReadFile(filepath.Join(dir, pki.ClientsDir, "writer.crt"))

	for range 2 {
		if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
			t.Fatal(err)
		}
	}
	next, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert))
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert)); !bytes.Equal(again, next) {
		t.Fatal("a second prepare replaced the next CA")
	}
	if st, err := os.Stat(filepath.Join(dir, pki.CANextKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("next CA key: %v %v, want mode 0600", st, err)
	}
	for range 2 {
		if err := RotationTrustBoth(dir); err != nil {
			t.Fatal(err)
		}
	}
	bundle, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if !bytes.Equal(bundle, append(oldCA, next...)) {
		t.Fatalf("ca.crt is not old + new:\n%s", bundle)
	}
	rs, err := RotationReissue(dir, pki.Validity{}, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 { // server, peer, client, clients/writer
		t.Fatalf("reissued %d leaves, want 4: %+v", len(rs), rs)
	}
	if rs, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err != nil || len(rs) != 0 {
		t.Fatalf("second reissue: %+v, %v; want nothing to do", rs, err)
	}
	nextFile := filepath.Join(dir, pki.CANextCert)
	for _, n := range []string{pki.ServerCert, pki.PeerCert, pki.ClientCert, filepath.Join(pki.ClientsDir, "writer.crt")} {
		leaf, inter := chainOf(t, filepath.Join(dir, n))
		for _, roots := range []string{oldCAFile, nextFile, filepath.Join(dir, pki.CACert)} {
			if err := verifies(leaf, inter, poolOf(t, roots)); err != nil {
				t.Errorf("%s does not verify against %s: %v", n, filepath.Base(roots), err)
			}
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, n), filepath.Join(dir, n[:len(n)-len(".crt")]+".key")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}

	// While the rotation runs, the leaves of the next CA are accepted, and
	// anything to issue or renew is refused with one error.
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Errorf("ensure during the rotation, nothing to issue: %v", err)
	}
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.2"}); !errors.Is(err, pki.ErrRotationInProgress) {
		t.Errorf("ensure during the rotation with a new host: %v, want ErrRotationInProgress", err)
	}
	if _, err := RenewDir(dir, pki.Validity{}, nil, true, time.Now()); !errors.Is(err, pki.ErrRotationInProgress) {
		t.Errorf("renew during the rotation: %v, want ErrRotationInProgress", err)
	}

	for range 2 {
		if err := RotationDrop(dir); err != nil {
			t.Fatal(err)
		}
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(ca, next) {
		t.Fatalf("ca.crt after the drop is not the new CA alone:\n%s", ca)
	}
	if kept, _ := os.ReadFile(filepath.Join(dir, pki.CAOldCert)); !bytes.Equal(kept, oldCA) {
		t.Fatal("the old CA is not kept as ca-old.crt")
	}
	if st, err := os.Stat(filepath.Join(dir, pki.CAOldKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("old CA key: %v %v, want mode 0600", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, pki.CANextCert)); !os.IsNotExist(err) {
		t.Fatalf("ca-next.crt still there after the drop: %v", err)
	}
	leaf, inter := chainOf(t, filepath.Join(dir, pki.ServerCert))
	if err := verifies(leaf, inter, poolOf(t, filepath.Join(dir, pki.CACert))); err != nil {
		t.Errorf("server certificate against the new CA: %v", err)
	}
	oc := filepath.Join(t.TempDir(), "old.crt")
	if err := os.WriteFile(oc, oldClient, 0o644); err != nil {
		t.Fatal(err)
	}
	if ol, _ := chainOf(t, oc); verifies(ol, nil, poolOf(t, filepath.Join(dir, pki.CACert))) == nil {
		t.Error("a client certificate of the old CA still verifies against ca.crt after the drop")
	}
	// The new CA and its key work as the CA: a forced renewal signs with it.
	if rs, err := RenewDir(dir, pki.Validity{}, []string{"server"}, true, time.Now()); err != nil || len(rs) != 1 {
		t.Fatalf("renew after the rotation: %+v, %v", rs, err)
	}
}

// TestRotationRefusals: the steps after prepare refuse without a next CA,
// changing nothing.
func TestRotationRefusals(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err := RotationTrustBoth(dir); err == nil {
		t.Error("trust both without a next CA: no error")
	}
	if _, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err == nil {
		t.Error("reissue without a next CA: no error")
	}
	if err := RotationDrop(dir); err == nil {
		t.Error("drop without a next CA: no error")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(before, after) {
		t.Error("a refused step changed ca.crt")
	}
}

// TestAgentServerTLSReadsCAPerHandshake: an agent's API trusts what ca.crt
// holds at each handshake, so a CA rotation reaches it without a restart:
// the admin certificate of another CA is refused, accepted once that CA is
// in the bundle, and refused again once it is dropped.
func TestAgentServerTLSReadsCAPerHandshake(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if err := pki.Ensure(d, "c1", nil); err != nil {
			t.Fatal(err)
		}
	}
	// The agent serves the server pair (server auth) as its own.
	for from, to := range map[string]string{pki.ServerCert: pki.AgentCert, pki.ServerKey: pki.AgentKey} {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := pki.AgentServerTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := pki.FilesIn(other)
	pair, err := tls.LoadX509KeyPair(o.ClientCert, o.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	handshake := func() error {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		errc := make(chan error, 1)
		go func() { errc <- tls.Server(a, srv).HandshakeContext(t.Context()) }()
		cli := tls.Client(b, &tls.Config{Certificates: []tls.Certificate{pair}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}) // the server's chain is not what is tested
		cerr := cli.HandshakeContext(t.Context())
		if cerr == nil {
			// TLS 1.3: the server's verdict on the client comes after.
			_ = b.SetReadDeadline(time.Now().Add(time.Second))
			_, cerr = cli.Read(make([]byte, 1))
			if ne, ok := cerr.(net.Error); ok && ne.Timeout() {
				cerr = nil
			}
		}
		serr := <-errc
		return errors.Join(serr, cerr)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	oca, _ := os.ReadFile(o.CA)
	if handshake() == nil {
		t.Fatal("the agent accepted an admin certificate of another CA")
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CACert), append(ca, oca...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := handshake(); err != nil {
		t.Fatalf("the agent refused an admin certificate of a CA added to ca.crt: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.CACert), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	if handshake() == nil {
		t.Fatal("the agent accepted an admin certificate of a CA dropped from ca.crt")
	}
}

// TestRotationAfterInterruptedDrop: a drop that stopped after installing
// the new CA key and before writing ca.crt, then an abort: a new rotation
// finishes that drop instead of failing on a ca.key that matches no CA in
// ca.crt, and a later rotation keeps the first rotation's old CA aside
// instead of overwriting it. Issuing a client or a host's certificates is
// refused while a rotation runs (the old CA would sign them).
func TestRotationAfterInterruptedDrop(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.IssueClient(dir, "c1", "late", 0, "", pki.Validity{}); !errors.Is(err, pki.ErrRotationInProgress) {
		t.Errorf("issue-client during a rotation: %v, want ErrRotationInProgress", err)
	}
	if _, err := pki.IssueHost(dir, "c1", "h9", "10.0.0.9", pki.Validity{}); !errors.Is(err, pki.ErrRotationInProgress) {
		t.Errorf("host certificates during a rotation: %v, want ErrRotationInProgress", err)
	}
	if _, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	next, _ := os.ReadFile(filepath.Join(dir, pki.CANextCert))
	// The interrupted drop: the old pair kept, the new key installed,
	// ca.crt still the bundle.
	oldCert, oldKey, err := pki.LoadPair(filepath.Join(dir, pki.CACert), filepath.Join(dir, pki.CAKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.WritePair(filepath.Join(dir, pki.CAOldCert), filepath.Join(dir, pki.CAOldKey), oldCert.Raw, oldKey, true); err != nil {
		t.Fatal(err)
	}
	kb, _ := os.ReadFile(filepath.Join(dir, pki.CANextKey))
	if err := os.WriteFile(filepath.Join(dir, pki.CAKey), kb, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatalf("prepare after an interrupted drop: %v", err)
	}
	if kept, _ := os.ReadFile(filepath.Join(dir, pki.CAOldCert)); !bytes.Equal(kept, first) {
		t.Fatal("the first rotation's old CA is not kept as ca-old.crt")
	}
	if ca, _ := os.ReadFile(filepath.Join(dir, pki.CACert)); !bytes.Equal(ca, next) {
		t.Fatalf("the interrupted drop was not finished: ca.crt is not the first rotation's new CA:\n%s", ca)
	}
	// The prepare went on to a second rotation; its drop keeps the first
	// old CA aside, under its serial.
	if err := RotationTrustBoth(dir); err != nil {
		t.Fatal(err)
	}
	if err := RotationDrop(dir); err != nil {
		t.Fatal(err)
	}
	if kept, _ := os.ReadFile(filepath.Join(dir, pki.CAOldCert)); !bytes.Equal(kept, next) {
		t.Error("ca-old.crt after the second rotation is not the second rotation's old CA")
	}
	aside, _ := filepath.Glob(filepath.Join(dir, pki.CAOldCert+".*"))
	if len(aside) != 1 {
		t.Fatalf("the first rotation's old CA moved aside: %v, want one file", aside)
	}
	if b, _ := os.ReadFile(aside[0]); !bytes.Equal(b, first) {
		t.Error("the file moved aside is not the first rotation's old CA")
	}
}

// TestInventoryDuringRotation: while ca.crt is the bundle of two CAs and
// the next CA waits in ca-next.crt, the inventory lists both CAs of the
// bundle and the next one, so their expiry is seen too.
func TestInventoryDuringRotation(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", nil); err != nil {
		t.Fatal(err)
	}
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(dir); err != nil {
		t.Fatal(err)
	}
	inv, err := pki.Inventory(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]pki.CertInfo{}
	for _, i := range inv {
		got[i.Name] = i
	}
	next, err := pki.ParseCertFile(filepath.Join(dir, pki.CANextCert))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"ca", "ca#2", "ca-next"} {
		if i, ok := got[n]; !ok || !i.IsCA || i.Error != "" {
			t.Errorf("inventory entry %s: %+v (present %v)", n, i, ok)
		}
	}
	if got["ca#2"].Serial != got["ca-next"].Serial || got["ca-next"].Serial != next.SerialNumber.Text(16) {
		t.Errorf("the bundle's second CA (%s) is not the next CA (%s)", got["ca#2"].Serial, next.SerialNumber.Text(16))
	}
}

// TestRotationRetireCross: the last phase of a rotation on files. Refused
// while the old CA is not dropped (nothing written); after the drop every
// leaf (server, peer, client, an issued client) is rewritten as the leaf
// alone, as a fresh directory's leaves are: the same certificate and key,
// verified by the new CA alone and no longer by the old CA alone, no
// certificate the old CA signed left in the file. A second run changes
// nothing. A leaf another CA signed is refused with nothing written; the
// host variant does the same for a joined host's leaf.
func TestRotationRetireCross(t *testing.T) {
	dir := t.TempDir()
	if err := pki.Ensure(dir, "c1", []string{"10.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.IssueClient(dir, "c1", "writer", 0, "", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	leafFiles := []string{pki.ServerCert, pki.PeerCert, pki.ClientCert, filepath.Join(pki.ClientsDir, "writer.crt")}
	fresh := map[string]int{}
	for _, n := range leafFiles {
		b, _ := os.ReadFile(filepath.Join(dir, n))
		fresh[n] = bytes.Count(b, []byte("BEGIN CERTIFICATE"))
	}
	oldCAFile := filepath.Join(t.TempDir(), "old-ca.crt")
	oldCAPEM, _ := os.ReadFile(filepath.Join(dir, pki.CACert))
	if err := os.WriteFile(oldCAFile, oldCAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	oldCA, err := pki.ParseCertPEM(oldCAPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := RotationPrepare(dir, "c1", pki.Validity{}); err != nil {
		t.Fatal(err)
	}
	if err := RotationTrustBoth(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := RotationReissue(dir, pki.Validity{}, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for _, n := range append(leafFiles, pki.CACert, pki.CANextCert) {
			b, _ := os.ReadFile(filepath.Join(dir, n))
			out[n] = string(b)
		}
		return out
	}
	before := snapshot()
	if names, err := RotationRetireCross(dir); !errors.Is(err, ErrOldCANotDropped) || len(names) != 0 {
		t.Fatalf("retire before the drop: %v, %v; want ErrOldCANotDropped", names, err)
	}
	for k, v := range snapshot() {
		if before[k] != v {
			t.Errorf("the refused retire changed %s", k)
		}
	}
	if err := RotationDrop(dir); err != nil {
		t.Fatal(err)
	}
	// After the drop (and the restarts) the leaves still carry the
	// cross-signed CA: the old CA alone verifies them.
	served := map[string]*x509.Certificate{}
	for _, n := range leafFiles {
		leaf, inter := chainOf(t, filepath.Join(dir, n))
		if err := verifies(leaf, inter, poolOf(t, oldCAFile)); err != nil {
			t.Fatalf("%s before the retire step does not verify against the old CA: %v", n, err)
		}
		served[n] = leaf
	}
	names, err := RotationRetireCross(dir)
	if err != nil || len(names) != len(leafFiles) {
		t.Fatalf("retire: %v, %v; want the %d leaves", names, err, len(leafFiles))
	}
	after := snapshot()
	if again, err := RotationRetireCross(dir); err != nil || len(again) != 0 {
		t.Fatalf("retire again: %v, %v; want nothing to do", again, err)
	}
	for k, v := range snapshot() {
		if after[k] != v {
			t.Errorf("a second retire changed %s", k)
		}
	}
	newCAFile := filepath.Join(dir, pki.CACert)
	for _, n := range leafFiles {
		b, _ := os.ReadFile(filepath.Join(dir, n))
		if c := bytes.Count(b, []byte("BEGIN CERTIFICATE")); c != 1 || c != fresh[n] {
			t.Errorf("%s holds %d certificates after the retire step, want the leaf alone as a fresh directory's (%d)", n, c, fresh[n])
		}
		leaf, chain, err := pki.ParseLeafChainPEM(b)
		if err != nil {
			t.Fatal(err)
		}
		if !leaf.Equal(served[n]) {
			t.Errorf("%s: the leaf changed (serial %x, was %x)", n, leaf.SerialNumber, served[n].SerialNumber)
		}
		for _, c := range append([]*x509.Certificate{leaf}, chain...) {
			if c.CheckSignatureFrom(oldCA) == nil {
				t.Errorf("%s still holds %q, which the old CA signed", n, c.Subject.CommonName)
			}
		}
		if err := verifies(leaf, nil, poolOf(t, newCAFile)); err != nil {
			t.Errorf("%s does not verify against the new CA alone: %v", n, err)
		}
		if err := verifies(leaf, nil, poolOf(t, oldCAFile)); err == nil {
			t.Errorf("%s still verifies against the old CA alone", n)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(dir, n), filepath.Join(dir, n[:len(n)-len(".crt")]+".key")); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}

	// The host variant: a leaf with the cross-signed CA after it becomes
	// the leaf alone; one alone is done; another CA's is refused.
	crossPEM, _ := os.ReadFile(filepath.Join(dir, pki.CACross))
	cross, err := pki.ParseCertPEM(crossPEM)
	if err != nil {
		t.Fatal(err)
	}
	got, done, err := RotationRetireCrossHost(dir, served[pki.ServerCert], []*x509.Certificate{cross})
	if err != nil || done || !bytes.Equal(got, pki.PEM(served[pki.ServerCert].Raw)) {
		t.Errorf("host retire: done %v, %v, %q; want the leaf alone", done, err, got)
	}
	if _, done, err := RotationRetireCrossHost(dir, served[pki.ServerCert], nil); err != nil || !done {
		t.Errorf("host retire of a leaf alone: done %v, %v; want done", done, err)
	}
	other := t.TempDir()
	if err := pki.Ensure(other, "c2", nil); err != nil {
		t.Fatal(err)
	}
	foreign, _ := chainOf(t, filepath.Join(other, pki.ServerCert))
	if _, _, err := RotationRetireCrossHost(dir, foreign, []*x509.Certificate{cross}); !errors.Is(err, pki.ErrNotSignedByCA) {
		t.Errorf("host retire of another CA's leaf: %v, want ErrNotSignedByCA", err)
	}

	// A leaf file of another CA with a CA certificate after it: refused,
	// nothing written (not even the leaves that would pass).
	fb, _ := os.ReadFile(filepath.Join(other, pki.ServerCert))
	fk, _ := os.ReadFile(filepath.Join(other, "server.key"))
	if err := os.WriteFile(filepath.Join(dir, pki.ClientsDir, "alien.crt"), append(fb, crossPEM...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.ClientsDir, "alien.key"), fk, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, pki.ServerCert), []byte(before[pki.ServerCert]), 0o644); err != nil {
		t.Fatal(err)
	}
	if names, err := RotationRetireCross(dir); !errors.Is(err, pki.ErrNotSignedByCA) || len(names) != 0 {
		t.Errorf("retire with another CA's leaf: %v, %v; want ErrNotSignedByCA", names, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, pki.ServerCert)); string(b) != before[pki.ServerCert] {
		t.Error("a refused retire rewrote server.crt")
	}
}
