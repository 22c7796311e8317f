package operator_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/operator"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// TestOperatorVolumeBackupsOwnCA: a one-member EtcdCluster keeps its
// continuous backups on a PersistentVolumeClaim of the user's
// (spec.backup.volume, ReadWriteOnce: one member) and has its certificates
// issued by the user's CA (spec.tls.caSecret). It becomes Ready with
// BackupReady; writes through NAME-client land as authenticated full and
// delta backups in Steward's local layout on the claim's volume (read on
// the node's disk under the key of Secret NAME-backup-key; the store's
// directory made 0700); the member serves a certificate the user's CA
// issued (verified against that CA alone, the test's own pool), and
// NAME-ca and NAME-client-tls carry that CA. A second EtcdCluster naming a
// Secret whose certificate is not a CA is refused (Ready False, reason
// CARefused) with no StatefulSet made.
func TestOperatorVolumeBackupsOwnCA(t *testing.T) {
	t.Parallel() // beside the other tests of setupShared
	harness.ForEachLocalKube(t, operatorVolumeBackupsOwnCA)
}

func operatorVolumeBackupsOwnCA(t *testing.T, c *localkube.Cluster) {
	const ns = "op-volume"
	image := operatorfixture.StewardImage(t, c)
	cs, cl := operatorfixture.SetupShared(t, c, ns, image)
	ctx := t.Context()

	// The user's CA, and a Secret whose certificate is a leaf.
	caPEM, caKeyPEM := userCA(t, true)
	leafPEM, leafKeyPEM := userCA(t, false)
	for name, d := range map[string][2][]byte{"users-ca": {caPEM, caKeyPEM}, "not-a-ca": {leafPEM, leafKeyPEM}} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": d[0], "tls.key": d[1]}}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The backup claim: the user's, ReadWriteOnce (one member).
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "etcd-backups"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 1,
			Backup:   &v1alpha1.Backup{Volume: &v1alpha1.BackupVolume{ClaimName: "etcd-backups"}},
			Recovery: v1alpha1.Recovery{Mode: "manual"},
			TLS:      v1alpha1.TLS{CASecret: "users-ca"}},
	}
	refused := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "leaf", Namespace: ns},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: 1, TLS: v1alpha1.TLS{CASecret: "not-a-ca"}},
	}
	operatorfixture.CreateClusters(t, cs, cl, ec, refused)

	var got v1alpha1.EtcdCluster
	harness.Eventually(t, 6*time.Minute, 2*time.Second, "EtcdCluster db Ready with BackupReady and a last backup", func() error {
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db"}, &got); err != nil {
			return err
		}
		if err := operatorfixture.ConditionsTrue(got.Status, v1alpha1.ConditionReady, v1alpha1.ConditionAllMembersReady, v1alpha1.ConditionBackupReady); err != nil {
			return err
		}
		if got.Status.LastBackupTime == nil {
			return fmt.Errorf("no last backup time")
		}
		return nil
	})

	// Writes through the client Service.
	cli := operatorfixture.ServiceClient(t, c, cs, ec)
	var rev int64
	for i := range 20 {
		r, err := cli.Put(ctx, fmt.Sprintf("/volume/k%02d", i), strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}

	// The backups on the claim's volume: the node's directory of its
	// PersistentVolume, listed under the cluster backup key.
	var err error
	if pvc, err = cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "etcd-backups", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.Local == nil {
		t.Fatalf("the backup claim's volume %q: %v", pvc.Spec.VolumeName, err)
	}
	dir := pv.Spec.Local.Path
	keySec, err := cs.CoreV1().Secrets(ns).Get(ctx, operator.BackupKeySecret(ec), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := operator.BackupKeyFromSecret(keySec.Name, keySec.Data)
	if err != nil {
		t.Fatal(err)
	}
	store := &backup.LocalStore{Dir: dir}
	harness.Eventually(t, time.Minute, time.Second, fmt.Sprintf("backups up to revision %d on the claim's volume %s", rev, dir), func() error {
		l, err := backup.List(ctx, store, backup.ListOptions{Key: key})
		if err != nil {
			return err
		}
		full, end := 0, int64(0)
		for _, m := range l.Backups {
			if m.Kind == backup.KindFull {
				full++
			}
			end = max(end, m.EndRevision)
		}
		if full == 0 || end < rev || len(l.Ignored) > 0 {
			return fmt.Errorf("%d backups (%d full) up to revision %d, %d ignored", len(l.Backups), full, end, len(l.Ignored))
		}
		return nil
	})
	if fi, err := os.Stat(dir); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("the backup store's directory %s has mode %v, want 0700", dir, fi.Mode().Perm())
	}

	// The member serves a certificate the user's CA issued.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	clientTLS, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-client-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	caSec, err := cs.CoreV1().Secrets(ns).Get(ctx, "db-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(caSec.Data["ca.crt"]) != string(caPEM) || string(clientTLS.Data["ca.crt"]) != string(caPEM) {
		t.Errorf("db-ca or db-client-tls does not carry the user's CA")
	}
	pair, err := tls.X509KeyPair(clientTLS.Data["tls.crt"], clientTLS.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, "db-client", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	conn, err := operatorfixture.DialInNetns(hctx, filepath.Join("/run/netns", c.Nodes[0].Netns), net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(operator.ClientPort)))
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, &tls.Config{RootCAs: pool, ServerName: "db-client." + ns + ".svc", Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	defer tc.Close()
	if err := tc.HandshakeContext(hctx); err != nil {
		t.Fatalf("the member's certificate does not verify against the user's CA: %v", err)
	}
	served := tc.ConnectionState().PeerCertificates[0]
	if _, err := served.Verify(x509.VerifyOptions{Roots: pool, DNSName: "db-client." + ns + ".svc"}); err != nil {
		t.Errorf("served certificate %s: %v", served.Subject, err)
	}
	t.Logf("db-0 serves %s, issued by %s", served.Subject.CommonName, served.Issuer.CommonName)
	operatorfixture.RequireEvents(t, cs, ns, "db", "Initialized", "Started", "BackupsOn")

	// A Secret whose certificate is not a CA: refused, nothing made.
	harness.Eventually(t, time.Minute, time.Second, "EtcdCluster leaf refused with reason CARefused", func() error {
		var l v1alpha1.EtcdCluster
		if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: "leaf"}, &l); err != nil {
			return err
		}
		for _, cd := range l.Status.Conditions {
			if cd.Type == v1alpha1.ConditionReady && cd.Reason == operator.ReasonCARefused {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", l.Status.Conditions)
	})
	if _, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "leaf", metav1.GetOptions{}); err == nil {
		t.Error("a StatefulSet was made for a refused CA")
	}
}

// userCA is a self-signed ECDSA CA valid for five years (a leaf that may not
// sign certificates when !isCA), as PEM certificate and key.
func userCA(t *testing.T, isCA bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "users-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(5 * 365 * 24 * time.Hour),
		BasicConstraintsValid: true, IsCA: isCA, KeyUsage: x509.KeyUsageDigitalSignature}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	} else {
		tmpl.Subject.CommonName = "a-leaf"
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
