package kmigrate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// MigrationVerbs are the verbs a migration uses on each resource: list
// (the chunks), update (the rewrite), get (again, after a conflict).
var MigrationVerbs = []string{"list", "update", "get"}

// MissingRight is a verb the credentials may not use on a resource.
type MissingRight struct {
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
}

func (m MissingRight) String() string { return m.Verb + " " + m.Resource }

// checkAccess asks the API server, with a SelfSubjectAccessReview for
// each verb of MigrationVerbs on each resource in all namespaces, what the
// credentials may not do. It returns the missing rights in the order of
// resources and verbs.
func checkAccess(ctx context.Context, rc rest.Interface, res []Resource, parallel int) ([]MissingRight, error) {
	type q struct {
		i    int
		verb string
		r    Resource
	}
	var qs []q
	for _, r := range res {
		for _, v := range MigrationVerbs {
			qs = append(qs, q{len(qs), v, r})
		}
	}
	allowed := make([]bool, len(qs))
	errs := make([]error, len(qs))
	work := make(chan q)
	var wg sync.WaitGroup
	for w := 0; w < max(1, min(parallel, len(qs))); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range work {
				allowed[x.i], errs[x.i] = accessReview(ctx, rc, x.verb, x.r)
			}
		}()
	}
	for _, x := range qs {
		work <- x
	}
	close(work)
	wg.Wait()
	var missing []MissingRight
	for i, x := range qs {
		if errs[i] != nil {
			return nil, fmt.Errorf("check whether the credentials may %s %s (SelfSubjectAccessReview): %w", x.verb, x.r.Name(), errs[i])
		}
		if !allowed[i] {
			missing = append(missing, MissingRight{x.verb, x.r.Name()})
		}
	}
	return missing, nil
}

func accessReview(ctx context.Context, rc rest.Interface, verb string, r Resource) (bool, error) {
	body, err := json.Marshal(authzv1.SelfSubjectAccessReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
		Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
			Verb: verb, Group: r.Group, Version: r.Version, Resource: r.Resource,
		}},
	})
	if err != nil {
		return false, err
	}
	var out authzv1.SelfSubjectAccessReview
	if err := post(ctx, rc, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body, &out); err != nil {
		return false, err
	}
	return out.Status.Allowed, nil
}

// whoAmI returns the user name the API server sees for the credentials
// (a SelfSubjectReview), or "" when it cannot tell.
func whoAmI(ctx context.Context, rc rest.Interface) string {
	body, _ := json.Marshal(authnv1.SelfSubjectReview{TypeMeta: metav1.TypeMeta{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview"}})
	var out authnv1.SelfSubjectReview
	if err := post(ctx, rc, "/apis/authentication.k8s.io/v1/selfsubjectreviews", body, &out); err != nil {
		return ""
	}
	return out.Status.UserInfo.Username
}

func post(ctx context.Context, rc rest.Interface, path string, body []byte, into any) error {
	res := rc.Post().AbsPath(path).SetHeader("Content-Type", "application/json").Body(body).Do(ctx)
	raw, err := res.Raw()
	if err != nil {
		return res.Error()
	}
	return json.Unmarshal(raw, into)
}

// missingRightsError says which verbs on which resources the credentials
// lack, and how to grant them.
func missingRightsError(user, kubeconfig string, missing []MissingRight) error {
	var parts []string
	for _, m := range missing {
		parts = append(parts, m.String())
	}
	who := "the credentials of " + kubeconfig
	if user != "" {
		who = fmt.Sprintf("user %q (kubeconfig %s)", user, kubeconfig)
	}
	return fmt.Errorf("%s may not %s (in all namespaces); a migration needs list, get and update on every resource it rewrites: grant them (a ClusterRole and ClusterRoleBinding) and run again; nothing was migrated",
		who, strings.Join(parts, ", "))
}
