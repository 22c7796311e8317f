package operatorapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/test/harness"
)

// kubectlBinary is the kubectl of the kube-apiserver's version, as `make
// kube-binaries` builds it (STEWARD_KUBE_CACHE/<version>/bin, the cache
// .cache/kube by default); STEWARD_TEST_KUBECTL overrides it.
func kubectlBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("STEWARD_TEST_KUBECTL")
	if p == "" {
		cache := os.Getenv("STEWARD_KUBE_CACHE")
		if cache == "" {
			cache = filepath.Join(harness.RepoRoot(t), ".cache", "kube")
		}
		p = filepath.Join(cache, harness.Kubernetes, "bin", "kubectl")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kubectl %s is missing: run `make kube-binaries KUBE_VERSIONS=%s` (or set STEWARD_KUBE_CACHE)", p, harness.Kubernetes)
	}
	return p
}

// kubectl runs one kubectl against the test's kube-apiserver.
type kubectl struct {
	t                      *testing.T
	bin, kubeconfig, cache string
}

// run runs kubectl with args (stdin on its standard input) and returns its
// standard output and error.
func (k kubectl) run(stdin string, args ...string) (string, string, error) {
	args = append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cache}, args...)
	cmd := exec.CommandContext(k.t.Context(), k.bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// with returns k failing t (a subtest) instead.
func (k kubectl) with(t *testing.T) kubectl {
	k.t = t
	return k
}

// must runs kubectl and fails the test unless it succeeds.
func (k kubectl) must(stdin string, args ...string) string {
	k.t.Helper()
	out, errOut, err := k.run(stdin, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// getJSON returns the object kubectl get prints as JSON, nil when it is
// not found.
func (k kubectl) getJSON(args ...string) map[string]any {
	k.t.Helper()
	out, errOut, err := k.run("", append([]string{"get", "-o", "json"}, args...)...)
	if err != nil {
		if strings.Contains(errOut, "NotFound") || strings.Contains(errOut, "not found") {
			return nil
		}
		k.t.Fatalf("kubectl get %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		k.t.Fatalf("kubectl get %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return obj
}

// field returns the value at a dotted path of obj (nil when absent).
func field(obj map[string]any, path string) any {
	var v any = obj
	for p := range strings.SplitSeq(path, ".") {
		if l, ok := v.([]any); ok {
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(l) {
				return nil
			}
			v = l[i]
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

const (
	ns  = "etcd-api"
	crd = "etcdclusters.steward.etcd.io"
)

// etcdCluster is the YAML of an EtcdCluster name in ns with the spec
// lines spec (indented by two spaces already).
func etcdCluster(name, spec string) string {
	return fmt.Sprintf("apiVersion: steward.etcd.io/v1alpha1\nkind: EtcdCluster\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", name, ns, spec)
}

const s3Store = `
    s3:
      endpoint: https://s3.example.com
      bucket: etcd-backups
      credentialsSecret: s3-credentials`

// TestOperatorAPI installs deploy/operator with `kubectl apply -k` on a
// real kube-apiserver (one Steward etcd member beneath) and checks the API
// as a user meets it through kubectl, then uninstalls it with `kubectl
// delete -k`.
func TestOperatorAPI(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[len(harness.Versions())-1])
	kas := e.StartKubeAPIServer()
	k := kubectl{t: t, bin: kubectlBinary(t), kubeconfig: kas.Kubeconfig, cache: t.TempDir()}
	base := filepath.Join(harness.RepoRoot(t), "deploy", "operator")

	if !t.Run("install", func(t *testing.T) {
		k := k.with(t)
		k.must("", "apply", "-k", base)
		k.must("", "wait", "--for=condition=Established", "crd/"+crd, "--timeout=60s")
		d := k.getJSON("-n", "steward-system", "deployment/steward-operator")
		if d == nil {
			t.Fatal("deployment steward-system/steward-operator not created")
		}
		for path, want := range map[string]any{
			"spec.replicas":                                          1.0,
			"spec.strategy.type":                                     "Recreate",
			"spec.template.spec.serviceAccountName":                  "steward-operator",
			"spec.template.spec.securityContext.seccompProfile.type": "RuntimeDefault",
			"spec.template.spec.containers.0.securityContext.allowPrivilegeEscalation": false,
			"spec.template.spec.containers.0.securityContext.readOnlyRootFilesystem":   true,
			// Not root: 65532, after the init step made the state volume
			// that user's (docs/operator.md, Security).
			"spec.template.spec.securityContext.runAsUser":                           65532.0,
			"spec.template.spec.securityContext.runAsNonRoot":                        true,
			"spec.template.spec.containers.0.securityContext.runAsNonRoot":           true,
			"spec.template.spec.initContainers.0.name":                               "prepare",
			"spec.template.spec.initContainers.0.image":                              "steward.etcd.io/steward:latest",
			"spec.template.spec.initContainers.0.securityContext.runAsUser":          0.0,
			"spec.template.spec.initContainers.0.securityContext.capabilities.add.0": "CHOWN",
		} {
			if got := field(d, path); got != want {
				t.Errorf("deployment %s = %v, want %v", path, got, want)
			}
		}
		c := field(d, "spec.template.spec.containers").([]any)[0].(map[string]any)
		if got, want := c["image"], "steward.etcd.io/steward:latest"; got != want {
			t.Errorf("image %v, want %v", got, want)
		}
		var args []string
		for _, a := range c["args"].([]any) {
			args = append(args, a.(string))
		}
		if want := []string{"operator", "--state-dir", "/var/lib/steward-operator", "--leader-elect", "--metrics-address", ":8443", "--health-address", ":8081"}; !slices.Equal(args, want) {
			t.Errorf("args %q, want %q", args, want)
		}
		for path, want := range map[string]any{
			"livenessProbe.httpGet.path":               "/healthz",
			"readinessProbe.httpGet.path":              "/readyz",
			"securityContext.readOnlyRootFilesystem":   true,
			"securityContext.allowPrivilegeEscalation": false,
		} {
			if got := field(c, path); got != want {
				t.Errorf("container %s = %v, want %v", path, got, want)
			}
		}
		if field(c, "resources.requests.cpu") == nil || field(c, "resources.requests.memory") == nil {
			t.Errorf("container has no cpu and memory requests: %v", c["resources"])
		}
		pvc := k.getJSON("-n", "steward-system", "pvc/steward-operator-state")
		if got := field(pvc, "spec.resources.requests.storage"); got != "1Gi" {
			t.Errorf("state claim size %v, want 1Gi", got)
		}
		mounted := false
		for _, m := range c["volumeMounts"].([]any) {
			if field(m.(map[string]any), "mountPath") == "/var/lib/steward-operator" {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("the state volume is not mounted at /var/lib/steward-operator: %v", c["volumeMounts"])
		}
		for _, o := range []string{"serviceaccount/steward-operator", "role/steward-operator-leader-election", "rolebinding/steward-operator-leader-election"} {
			if k.getJSON("-n", "steward-system", o) == nil {
				t.Errorf("%s not created in steward-system", o)
			}
		}
		for _, o := range []string{"clusterrole/steward-operator", "clusterrolebinding/steward-operator"} {
			if k.getJSON(o) == nil {
				t.Errorf("%s not created", o)
			}
		}
	}) {
		t.FailNow()
	}

	t.Run("least privilege", func(t *testing.T) {
		k := k.with(t)
		// What the operator's ServiceAccount may do, as the API server's
		// RBAC authorizer decides.
		sa := "system:serviceaccount:steward-system:steward-operator"
		for _, c := range []struct {
			verb, resource, namespace string
			allowed                   bool
		}{
			{"watch", "etcdclusters.steward.etcd.io", "any", true},
			{"update", "etcdclusters.steward.etcd.io/status", "any", true},
			{"patch", "etcdclusters.steward.etcd.io/status", "any", false},
			{"update", "etcdclusters.steward.etcd.io", "any", false}, // only its status
			{"create", "etcdclusters.steward.etcd.io", "any", false},
			{"delete", "etcdclusters.steward.etcd.io", "any", false},
			{"create", "statefulsets.apps", "any", true},
			{"delete", "statefulsets.apps", "any", false}, // its objects go with the EtcdCluster (owner references)
			{"get", "persistentvolumeclaims", "any", true},
			{"list", "persistentvolumeclaims", "any", false},   // read uncached, one by one
			{"delete", "persistentvolumeclaims", "any", false}, // claims are kept: never deleted by the operator
			{"update", "leases.coordination.k8s.io", "any", true},
			{"watch", "leases.coordination.k8s.io", "any", false}, // not every node's and application's Leases
			{"get", "secrets", "any", true},
			{"watch", "secrets", "any", true}, // its own (the cache's label selector)
			{"delete", "secrets", "any", false},
			{"create", "rolebindings.rbac.authorization.k8s.io", "any", true},
			{"list", "roles.rbac.authorization.k8s.io", "any", false},
			{"create", "poddisruptionbudgets.policy", "any", true},
			{"create", "events.events.k8s.io", "any", true},
			{"get", "pods", "any", false},
			{"get", "pods", "steward-system", true}, // its own pod: the member image
			{"delete", "pods", "any", false},
			{"create", "pods", "any", false},
			{"create", "pods/exec", "any", false},
			{"list", "nodes", "", false},
			{"create", "clusterrolebindings.rbac.authorization.k8s.io", "", false},
			{"delete", "namespaces", "", false},
			{"create", "deployments.apps", "any", false},
			{"create", "leases.coordination.k8s.io", "steward-system", true},
			// Leader election's Lease lock gets, creates and updates only.
			{"delete", "leases.coordination.k8s.io", "steward-system", false},
			{"list", "leases.coordination.k8s.io", "steward-system", false},
		} {
			// RESOURCE/SUB is a subresource (kubectl reads RESOURCE/NAME
			// as an object's name).
			res, sub, _ := strings.Cut(c.resource, "/")
			args := []string{"auth", "can-i", c.verb, res, "--as", sa}
			if sub != "" {
				args = append(args, "--subresource", sub)
			}
			if c.namespace != "" {
				args = append(args, "-n", c.namespace)
			}
			out, _, _ := k.run("", args...) // exit 1 for "no"
			if got := strings.TrimSpace(out) == "yes"; got != c.allowed {
				t.Errorf("the operator may %s %s: %v, want %v", c.verb, c.resource, got, c.allowed)
			}
		}
	})

	t.Run("image tag", func(t *testing.T) {
		k := k.with(t)
		// An overlay setting the tag, as `kustomize edit set image
		// steward.etcd.io/steward:TAG` writes it, changes the Deployment's
		// image and nothing else.
		overlay := t.TempDir()
		rel, err := filepath.Rel(overlay, base) // kustomize refuses an absolute base
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(
			"resources:\n- "+rel+"\nimages:\n- name: steward.etcd.io/steward\n  newTag: v0.9.1-3-gabcdef0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := k.must("", "kustomize", overlay)
		if !strings.Contains(out, "image: steward.etcd.io/steward:v0.9.1-3-gabcdef0\n") || strings.Contains(out, "steward:latest") {
			t.Errorf("the overlay's tag is not the Deployment's image:\n%s", out)
		}
	})

	k.must("", "create", "namespace", ns)

	t.Run("defaults", func(t *testing.T) {
		k := k.with(t)
		k.must(etcdCluster("plain", "  replicas: 3\n"), "apply", "-f", "-")
		o := k.getJSON("-n", ns, "etcdcluster/plain")
		for path, want := range map[string]any{
			"spec.replicas":                    3.0,
			"spec.storage.size":                "8Gi",
			"spec.recovery.mode":               "auto",
			"spec.recovery.gracePeriodSeconds": 120.0,
			"spec.backup":                      nil,
			"spec.version":                     nil,
			"spec.restoreFrom":                 nil,
		} {
			if got := field(o, path); got != want {
				t.Errorf("%s = %v, want %v", path, got, want)
			}
		}
		k.must(etcdCluster("backed-up", "  replicas: 1\n  backup:"+s3Store+"\n    retention:\n      keepHourly: 0\n"), "apply", "-f", "-")
		o = k.getJSON("-n", ns, "etcdcluster/backed-up")
		for path, want := range map[string]any{
			"spec.backup.fullSchedule":         "0 * * * *",
			"spec.backup.deltaMaxAgeMs":        250.0,
			"spec.backup.retention.keepLast":   3.0,
			"spec.backup.retention.keepHourly": 0.0, // given: not the default
			"spec.backup.retention.keepDaily":  7.0,
			"spec.backup.s3.prefix":            nil, // NAMESPACE/NAME, by the operator
		} {
			if got := field(o, path); got != want {
				t.Errorf("%s = %v, want %v", path, got, want)
			}
		}
	})

	t.Run("accepted changes", func(t *testing.T) {
		k := k.with(t)
		k.must(etcdCluster("changes", "  replicas: 3\n  version: 3.5.35\n  storage:\n    size: 10Gi\n    storageClassName: fast\n  restoreFrom:"+s3Store+"\n"), "apply", "-f", "-")
		// Two minors in one edit: the upgrade plan steps through 3.6 as on
		// hosts. The volume grows, restoreFrom is given again unchanged,
		// and the cluster hibernates.
		k.must(etcdCluster("changes", "  replicas: 0\n  version: 3.7.3\n  storage:\n    size: 12Gi\n    storageClassName: fast\n  restoreFrom:"+s3Store+"\n"), "apply", "-f", "-")
		o := k.getJSON("-n", ns, "etcdcluster/changes")
		if field(o, "spec.version") != "3.7.3" || field(o, "spec.storage.size") != "12Gi" || field(o, "spec.replicas") != 0.0 {
			t.Errorf("changes not stored: %v", o["spec"])
		}
	})

	t.Run("refused", func(t *testing.T) {
		k := k.with(t)
		full := "  replicas: 3\n  version: 3.6.16\n  storage:\n    size: 10Gi\n    storageClassName: fast\n  restoreFrom:" + s3Store + "\n    revision: 5\n"
		volume := "  replicas: 1\n  recovery:\n    mode: manual\n  backup:\n    volume:\n      claimName: backups\n"
		for i, c := range []struct {
			name         string
			before, spec string // before "": the bad spec is a creation
			path, want   string
		}{
			{"even replicas", "", "  replicas: 4\n", "spec.replicas", "replicas must be 0 (hibernate), 1, 3, 5 or 7: an even number of members tolerates no more failures than one fewer"},
			{"nine replicas", "", "  replicas: 9\n", "spec.replicas", "replicas must be 0 (hibernate), 1, 3, 5 or 7"},
			{"even replicas later", "  replicas: 3\n", "  replicas: 2\n", "spec.replicas", "replicas must be 0 (hibernate), 1, 3, 5 or 7"},
			{"version without patch", "", "  replicas: 3\n  version: \"3.6\"\n", "spec.version", "version must be an etcd 3 release, 3.MINOR.PATCH (e.g. 3.6.16)"},
			{"version with v", "", "  replicas: 3\n  version: v3.6.16\n", "spec.version", "version must be an etcd 3 release, 3.MINOR.PATCH"},
			{"version 4", "  replicas: 3\n  version: 3.6.16\n", "  replicas: 3\n  version: 4.0.0\n", "spec.version", "version must be an etcd 3 release, 3.MINOR.PATCH"},
			{"version removed", "  replicas: 3\n  version: 3.6.16\n", "  replicas: 3\n", "spec.version", "version cannot be removed once set"},
			{"storage shrink", full, strings.Replace(full, "10Gi", "9000Mi", 1), "spec.storage.size", "size cannot shrink: a member's volume is never made smaller"},
			{"storage size removed (8Gi)", full, strings.Replace(full, "    size: 10Gi\n", "", 1), "spec.storage.size", "size cannot shrink"},
			{"storage class change", full, strings.Replace(full, "fast", "slow", 1), "spec.storage.storageClassName", "storageClassName cannot change (nor be added or removed) once the cluster is created"},
			{"storage class added", "  replicas: 3\n", "  replicas: 3\n  storage:\n    storageClassName: fast\n", "spec.storage.storageClassName", "storageClassName cannot change"},
			{"storage class removed", full, strings.Replace(full, "    storageClassName: fast\n", "", 1), "spec.storage.storageClassName", "storageClassName cannot change"},
			{"two backup stores", "", "  replicas: 3\n  backup:" + s3Store + "\n    volume:\n      claimName: backups\n", "spec.backup", "backup needs exactly one store, s3 (a bucket) or volume (a claim)"},
			{"no backup store", "", "  replicas: 3\n  backup:\n    fullSchedule: \"0 * * * *\"\n", "spec.backup", "backup needs exactly one store"},
			{"restoreFrom added", "  replicas: 3\n", "  replicas: 3\n  restoreFrom:" + s3Store + "\n", "spec.restoreFrom", "restoreFrom is read once, when the cluster is created: it cannot be added or removed later"},
			{"restoreFrom changed", full, strings.Replace(full, "revision: 5", "revision: 6", 1), "spec.restoreFrom", "restoreFrom is read once, when the cluster is created, and cannot change"},
			{"restoreFrom removed", full, full[:strings.Index(full, "  restoreFrom:")], "spec.restoreFrom", "restoreFrom is read once, when the cluster is created: it cannot be added or removed later"},
			{"restoreFrom two stores", "", "  replicas: 3\n  restoreFrom:" + s3Store + "\n    volume:\n      claimName: backups\n", "spec.restoreFrom", "restoreFrom needs exactly one store"},
			{"volume with automatic recovery", "", "  replicas: 1\n  backup:\n    volume:\n      claimName: backups\n", "spec.recovery", "backup.volume needs recovery.mode: manual: the operator cannot mount the claim"},
			{"volume added", "  replicas: 1\n  recovery:\n    mode: manual\n", "  replicas: 1\n  recovery:\n    mode: manual\n  backup:\n    volume:\n      claimName: backups\n", "spec.backup", "backup.volume is read when the cluster is created (every member pod mounts the claim): it cannot be added, changed or removed later"},
			{"volume changed", volume, strings.Replace(volume, "claimName: backups", "claimName: others", 1), "spec.backup", "backup.volume is read when the cluster is created"},
			{"volume removed", volume, "  replicas: 1\n  recovery:\n    mode: manual\n", "spec.backup", "backup.volume is read when the cluster is created"},
			{"caSecret added", "  replicas: 1\n", "  replicas: 1\n  tls:\n    caSecret: users-ca\n", "spec.tls", "tls.caSecret is read when the cluster is created and cannot be added, changed or removed"},
			{"caSecret changed", "  replicas: 1\n  tls:\n    caSecret: users-ca\n", "  replicas: 1\n  tls:\n    caSecret: next-ca\n", "spec.tls", "tls.caSecret is read when the cluster is created and cannot be added, changed or removed"},
			{"caSecret removed", "  replicas: 1\n  tls:\n    caSecret: users-ca\n", "  replicas: 1\n", "spec.tls", "tls.caSecret is read when the cluster is created"},
			{"election timeout", "", "  replicas: 3\n  etcd:\n    heartbeatIntervalMs: 100\n    electionTimeoutMs: 400\n", "spec.etcd.electionTimeoutMs", "electionTimeoutMs must be at least 5 times heartbeatIntervalMs"},
			{"endpoint with a path", "", "  replicas: 3\n  backup:\n    s3:\n      endpoint: https://s3.example.com/etcd-backups\n      bucket: etcd-backups\n      credentialsSecret: s3-credentials\n", "spec.backup.s3.endpoint", "endpoint must be the server's URL, https://HOST[:PORT]"},
			{"cron", "", "  replicas: 3\n  backup:" + s3Store + "\n    fullSchedule: hourly\n", "spec.backup.fullSchedule", "fullSchedule must be a cron expression of 5 fields"},
			{"recovery mode", "", "  replicas: 3\n  recovery:\n    mode: automatic\n", "spec.recovery.mode", `supported values: "auto", "manual"`},
		} {
			t.Run(c.name, func(t *testing.T) {
				k := k.with(t)
				name := fmt.Sprintf("bad-%d", i)
				var before map[string]any
				if c.before != "" {
					k.must(etcdCluster(name, c.before), "apply", "-f", "-")
					before = k.getJSON("-n", ns, "etcdcluster/"+name)
				}
				out, errOut, err := k.run(etcdCluster(name, c.spec), "apply", "-f", "-")
				var exit *exec.ExitError
				if !errors.As(err, &exit) || exit.ExitCode() != 1 {
					t.Fatalf("kubectl apply: %v, want exit 1\n%s%s", err, out, errOut)
				}
				if !strings.Contains(errOut, c.path+": ") || !strings.Contains(errOut, c.want) {
					t.Errorf("kubectl apply said\n%s\nwant %q at %s", errOut, c.want, c.path)
				}
				// One message naming a field. A refusal by the schema's
				// structural checks (an enum here) is followed by the API
				// server's own "some validation rules were not checked"
				// line, which names none.
				if n := strings.Count(errOut, "spec."); n != 1 {
					t.Errorf("%d messages, want one:\n%s", n, errOut)
				}
				after := k.getJSON("-n", ns, "etcdcluster/"+name)
				switch {
				case before == nil && after != nil:
					t.Errorf("refused, yet stored: %v", after["spec"])
				case before != nil && field(after, "metadata.resourceVersion") != field(before, "metadata.resourceVersion"):
					t.Errorf("refused, yet changed: %v, was %v", after["spec"], before["spec"])
				}
			})
		}
	})

	t.Run("scale", func(t *testing.T) {
		k := k.with(t)
		k.must(etcdCluster("scaled", "  replicas: 3\n"), "apply", "-f", "-")
		k.must("", "-n", ns, "patch", "etcdcluster/scaled", "--subresource=status", "--type=merge",
			"-p", `{"status":{"replicas":3,"selector":"app.kubernetes.io/instance=scaled,app.kubernetes.io/name=etcd"}}`)
		k.must("", "-n", ns, "scale", "etcdcluster/scaled", "--replicas", "5")
		if got := field(k.getJSON("-n", ns, "etcdcluster/scaled"), "spec.replicas"); got != 5.0 {
			t.Errorf("spec.replicas %v after kubectl scale --replicas 5", got)
		}
		var scale map[string]any
		if err := json.Unmarshal([]byte(k.must("", "get", "--raw", "/apis/steward.etcd.io/v1alpha1/namespaces/"+ns+"/etcdclusters/scaled/scale")), &scale); err != nil {
			t.Fatal(err)
		}
		if field(scale, "spec.replicas") != 5.0 || field(scale, "status.replicas") != 3.0 ||
			field(scale, "status.selector") != "app.kubernetes.io/instance=scaled,app.kubernetes.io/name=etcd" {
			t.Errorf("scale subresource %v", scale)
		}
		before := k.getJSON("-n", ns, "etcdcluster/scaled")
		_, errOut, err := k.run("", "-n", ns, "scale", "etcdcluster/scaled", "--replicas", "4")
		if err == nil || !strings.Contains(errOut, "replicas must be 0 (hibernate), 1, 3, 5 or 7") {
			t.Errorf("kubectl scale --replicas 4: %v\n%s", err, errOut)
		}
		after := k.getJSON("-n", ns, "etcdcluster/scaled")
		if field(after, "spec.replicas") != 5.0 || field(after, "metadata.resourceVersion") != field(before, "metadata.resourceVersion") {
			t.Errorf("refused scale changed the cluster: %v", after["spec"])
		}
	})

	t.Run("columns", func(t *testing.T) {
		k := k.with(t)
		k.must(etcdCluster("shown", "  replicas: 3\n"), "apply", "-f", "-")
		k.must("", "-n", ns, "patch", "etcdcluster/shown", "--subresource=status", "--type=merge", "-p",
			fmt.Sprintf(`{"status":{"readyReplicasText":"3/3","version":"3.6.16","leader":"shown-1","lastBackupTime":%q}}`,
				time.Now().Add(-90*time.Second).UTC().Format(time.RFC3339)))
		out := k.must("", "-n", ns, "get", "etcdcluster", "shown")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get etcdcluster shown:\n%s", out)
		}
		if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"NAME", "READY", "VERSION", "LEADER", "BACKUP", "AGE"}) {
			t.Errorf("columns %q", h)
		}
		if r := strings.Fields(lines[1]); len(r) != 6 || r[0] != "shown" || r[1] != "3/3" || r[2] != "3.6.16" || r[3] != "shown-1" || !strings.HasSuffix(r[4], "s") {
			t.Errorf("row %q", r)
		}
		// The short names.
		for _, n := range []string{"etcd", "ec"} {
			if out := k.must("", "-n", ns, "get", n, "shown", "-o", "name"); strings.TrimSpace(out) != "etcdcluster.steward.etcd.io/shown" {
				t.Errorf("kubectl get %s shown: %q", n, out)
			}
		}
	})

	t.Run("explain", func(t *testing.T) {
		k := k.with(t)
		out := k.must("", "explain", "etcdcluster.spec.backup.s3")
		for _, w := range []string{"endpoint", "bucket", "prefix", "region", "credentialsSecret", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "caSecret", "-required-"} {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl explain etcdcluster.spec.backup.s3 lacks %q:\n%s", w, out)
			}
		}
		// Every property of the schema the server holds has a description,
		// so kubectl explain has something to say about each.
		c := k.getJSON("crd/" + crd)
		versions := field(c, "spec.versions").([]any)
		for _, v := range versions {
			schema := field(v.(map[string]any), "schema.openAPIV3Schema").(map[string]any)
			var missing []string
			walkSchema("", schema, func(path string, s map[string]any) {
				if d, _ := s["description"].(string); strings.TrimSpace(d) == "" && path != "" && path != ".apiVersion" && path != ".kind" && path != ".metadata" {
					missing = append(missing, path)
				}
			})
			if len(missing) > 0 {
				t.Errorf("%d fields without a description (kubectl explain has nothing to say): %s", len(missing), strings.Join(missing, " "))
			}
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		k := k.with(t)
		// No kube-controller-manager runs here, so namespaced objects with
		// finalizers (the namespace, the state claim) stay Terminating;
		// the API server's own finalizer removes the CRD with its
		// EtcdClusters.
		k.must("", "delete", "-k", base, "--wait=false")
		harness.Eventually(t, time.Minute, 200*time.Millisecond, "deploy/operator removed", func() error {
			for _, o := range []string{"crd/" + crd, "clusterrole/steward-operator", "clusterrolebinding/steward-operator"} {
				if k.getJSON(o) != nil {
					return fmt.Errorf("%s still there", o)
				}
			}
			for _, o := range []string{"deployment/steward-operator", "serviceaccount/steward-operator", "role/steward-operator-leader-election", "rolebinding/steward-operator-leader-election", "pvc/steward-operator-state"} {
				if obj := k.getJSON("-n", "steward-system", o); obj != nil && field(obj, "metadata.deletionTimestamp") == nil {
					return fmt.Errorf("%s still there", o)
				}
			}
			if obj := k.getJSON("namespace/steward-system"); obj != nil && field(obj, "metadata.deletionTimestamp") == nil {
				return errors.New("namespace steward-system not being deleted")
			}
			return nil
		})
		if out, errOut, err := k.run("", "-n", ns, "get", "etcdclusters"); err == nil || !strings.Contains(errOut, "the server doesn't have a resource type") && !strings.Contains(errOut, "could not find the requested resource") {
			t.Errorf("EtcdClusters still served after delete -k: %v\n%s%s", err, out, errOut)
		}
	})
}

// walkSchema calls f on every schema under s (its properties, items and
// additionalProperties), with its path.
func walkSchema(path string, s map[string]any, f func(string, map[string]any)) {
	f(path, s)
	if props, ok := s["properties"].(map[string]any); ok {
		for name, p := range props {
			walkSchema(path+"."+name, p.(map[string]any), f)
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		walkItems(path+"[]", items, f)
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok {
		walkItems(path+"{}", ap, f)
	}
}

// walkItems walks the schema of a list's items or a map's values, which
// are described by their list or map: only their own properties are
// checked.
func walkItems(path string, s map[string]any, f func(string, map[string]any)) {
	walkSchema(path, s, func(p string, sub map[string]any) {
		if p != path {
			f(p, sub)
		}
	})
}
