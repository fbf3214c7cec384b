package admission

import (
	"bytes"
	"maps"
	"slices"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// TestOwnedSecrets_AreWhatIsWrittenAndMounted keeps the one list of owned
// Secrets true: what the builder writes, what the pods mount of the
// operator's and what deletion, Retain and render follow are the same.
func TestOwnedSecrets_AreWhatIsWrittenAndMounted(t *testing.T) {
	// A tenant of a datastore, with the konnectivity server and an
	// authorization chain, which gets every owned Secret.
	c, err := apiserver.Complete(tenant(func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
		cfg.Spec.Konnectivity = &v1alpha1.KonnectivitySpec{}
		// A chain without webhooks: the authorization Secret then holds
		// only its configuration.
		cfg.Spec.Authorization.Authorizers = []v1alpha1.Authorizer{{Type: "Node", Name: "node"}, {Type: "RBAC", Name: "rbac"}}
	}), apiserver.Inputs{EtcdUser: "apiserver-operator:ns:t"})
	if err != nil {
		t.Fatal(err)
	}
	m, env, err := StandIns(c)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := apiserver.Desired(c, m, env)
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string][]string{}
	for _, o := range apiserver.OwnedSecrets(c.Name) {
		owned[o.Name] = o.Keys
	}
	for _, s := range objs.Secrets {
		keys := slices.Sorted(maps.Keys(s.Data))
		if want, ok := owned[s.Name]; !ok || !slices.Equal(keys, slices.Sorted(slices.Values(want))) {
			t.Errorf("Secret %s is written with keys %v; OwnedSecrets lists %v (listed: %v)", s.Name, keys, want, ok)
		}
		delete(owned, s.Name)
	}
	for name := range owned {
		t.Errorf("OwnedSecrets lists %s, which nothing writes", name)
	}
	for _, o := range apiserver.MountedObjects(c) {
		if !o.Owned || o.Kind != apiserver.KindSecret {
			continue
		}
		if !slices.ContainsFunc(apiserver.OwnedSecrets(c.Name), func(s apiserver.OwnedSecret) bool { return s.Name == o.Name }) {
			t.Errorf("the pods mount Secret %s as the operator's, but OwnedSecrets does not list it: deletion would leave it", o.Name)
		}
	}
}

// TestValidationRequest_GivesTheValidatorWhatThePodsRead: every file the
// pods read from the operator's objects, the EventRateLimit configuration
// among them, reaches the validator as the builder renders it.
func TestValidationRequest_GivesTheValidatorWhatThePodsRead(t *testing.T) {
	c, err := apiserver.Complete(tenant(func(cfg *v1alpha1.ApiServerConfig) {
		cfg.Spec.Admission.EventRateLimit = &v1alpha1.EventRateLimitSpec{}
	}), apiserver.Inputs{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := ValidationRequest(c, "")
	if err != nil {
		t.Fatal(err)
	}
	m, env, err := StandIns(c)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := apiserver.Desired(c, m, env)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(req.Args, objs.Args) {
		t.Errorf("the validator judges %v, the pods run %v", req.Args, objs.Args)
	}
	want := objs.PodFiles(c, nil)
	if len(want[apiserver.AdmissionConfigFile]) == 0 {
		t.Fatalf("the pods read no %s", apiserver.AdmissionConfigFile)
	}
	for path, data := range want {
		if len(data) > 0 && !bytes.Equal(req.Files[path], data) {
			t.Errorf("the validator is not given the pods' %s", path)
		}
	}
}
