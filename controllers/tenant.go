package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TenantAPI is what the operator does through a tenant's own API: the
// re-encryption rewrites stored objects there, so that kube-apiserver
// encrypts them again with the key that encrypts now.
type TenantAPI interface {
	// Resources are the group/resources the tenant serves that can be
	// rewritten (listed, patched), custom resources included. When a
	// group's discovery failed, the others come with an error.
	Resources(ctx context.Context) (map[schema.GroupResource]TenantResource, error)
	// Rewrite writes an object back unchanged. An object that is gone is
	// not an error: whatever replaced it was written with the current key.
	Rewrite(ctx context.Context, r TenantResource, namespace, name string) error
	// Metrics reads the /metrics of the apiserver pod at podIP (each
	// apiserver counts its own requests).
	Metrics(ctx context.Context, podIP string) ([]byte, error)
}

// TenantResource is one resource a tenant serves.
type TenantResource struct {
	// Version is the served version the operator talks to (the
	// preferred one).
	schema.GroupVersionResource
	Namespaced bool
	// Custom: a custom resource (a CRD's), stored under group/resource.
	Custom bool
}

// TenantConnector opens a tenant's API as its administrator.
type TenantConnector func(ctx context.Context, p *pass) (TenantAPI, error)

// tenantTimeout bounds each call to a tenant's API.
const tenantTimeout = 10 * time.Second

// connectTenant reaches a tenant at its Service's ClusterIP (a SAN of its
// serving certificate), with the admin kubeconfig the operator writes:
// from inside the management cluster, whatever spec.serving says.
func connectTenant(_ context.Context, p *pass) (TenantAPI, error) {
	if p.pki == nil || len(p.pki.secrets.AdminKubeconfig) == 0 || p.in.ServiceClusterIP == "" || p.in.ServiceClusterIP == "None" {
		return nil, fmt.Errorf("connecting to the tenant's API: no admin kubeconfig or Service address yet")
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(p.pki.secrets.AdminKubeconfig)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API: reading the admin kubeconfig: %w", err)
	}
	rc.Host = "https://" + net.JoinHostPort(p.in.ServiceClusterIP, strconv.Itoa(int(p.c.Spec.Serving.Service.Port)))
	rc.Timeout = tenantTimeout
	// The operator paces its own writes (spec.encryption.rewritesPerSecond).
	rc.QPS, rc.Burst = -1, 0
	rc.UserAgent = "apiserver-operator"
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the tenant's API at %s: %w", rc.Host, err)
	}
	return &tenantClient{dyn: dyn, disc: disc, host: rc.Host, rc: rc, clusterIP: p.in.ServiceClusterIP, port: p.c.Spec.Serving.SecurePort}, nil
}

type tenantClient struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	host string
	// rc reaches the Service; clusterIP (a SAN of the serving
	// certificate) verifies a pod reached at its own address, on port.
	rc        *rest.Config
	clusterIP string
	port      int32
}

// Metrics implements TenantAPI.
func (t *tenantClient) Metrics(ctx context.Context, podIP string) ([]byte, error) {
	rc := rest.CopyConfig(t.rc)
	rc.Host = "https://" + net.JoinHostPort(podIP, strconv.Itoa(int(t.port)))
	rc.TLSClientConfig.ServerName = t.clusterIP
	rc.GroupVersion, rc.NegotiatedSerializer = &schema.GroupVersion{}, scheme.Codecs.WithoutConversion()
	rcl, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("reaching the apiserver pod at %s: %w", rc.Host, err)
	}
	data, err := rcl.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the metrics of the apiserver pod at %s: %w", rc.Host, err)
	}
	return data, nil
}

// crdResource is where a tenant lists its custom resource definitions.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// Resources implements TenantAPI.
func (t *tenantClient) Resources(ctx context.Context) (map[schema.GroupResource]TenantResource, error) {
	lists, discoveryErr := t.disc.ServerPreferredResources()
	if discoveryErr != nil && len(lists) == 0 {
		return nil, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	crds, err := t.dyn.Resource(crdResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the custom resource definitions of the tenant's API at %s: %w", t.host, err)
	}
	custom := map[schema.GroupResource]bool{}
	for _, crd := range crds.Items {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
		custom[schema.GroupResource{Group: group, Resource: plural}] = true
	}
	out := map[schema.GroupResource]TenantResource{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !canRewrite(r) {
				continue
			}
			gr := schema.GroupResource{Group: gv.Group, Resource: r.Name}
			out[gr] = TenantResource{GroupVersionResource: gv.WithResource(r.Name), Namespaced: r.Namespaced, Custom: custom[gr]}
		}
	}
	if discoveryErr != nil {
		// A group whose discovery failed (an aggregated API that is down):
		// enough to rewrite with, not to prove that nothing was missed.
		return out, fmt.Errorf("reading the discovery of the tenant's API at %s: %w", t.host, discoveryErr)
	}
	return out, nil
}

func canRewrite(r metav1.APIResource) bool {
	has := func(verb string) bool {
		for _, v := range r.Verbs {
			if v == verb {
				return true
			}
		}
		return false
	}
	return has("list") && has("patch")
}

// Rewrite implements TenantAPI with an empty merge patch: kube-apiserver
// writes an unchanged object again only when it read it with a key that no
// longer encrypts (the value is stale), which is exactly what must be
// rewritten; an object already under the current key costs no write.
func (t *tenantClient) Rewrite(ctx context.Context, r TenantResource, namespace, name string) error {
	ri := t.dyn.Resource(r.GroupVersionResource)
	var err error
	if r.Namespaced {
		_, err = ri.Namespace(namespace).Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	} else {
		_, err = ri.Patch(ctx, name, types.MergePatchType, []byte("{}"), metav1.PatchOptions{FieldManager: "apiserver-operator-reencrypt"})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
