package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// warningRecorder keeps the warnings the API server sends back.
type warningRecorder struct {
	mu       sync.Mutex
	warnings []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.warnings = append(w.warnings, text)
}

func newConfig(ns, name string, mutate func(*v1alpha1.ApiServerConfigSpec)) *v1alpha1.ApiServerConfig {
	cfg := &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ApiServerConfigSpec{
			Etcd: v1alpha1.EtcdSpec{Servers: []string{"https://etcd:2379"}, Prefix: "/tenants/" + ns + "/" + name},
		},
	}
	mutate(&cfg.Spec)
	return cfg
}

func TestApiServerConfigValidator_RefusesWhatKubeAPIServerWouldReject(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, field, message string
		mutate               func(*v1alpha1.ApiServerConfigSpec)
	}{
		{"misspelled flag", "spec.extraArgs[0].name", "did you mean --enable-admission-plugins?", func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "enable-admision-plugins", Value: "PodNodeSelector"}}
		}},
		{"managed flag", "spec.extraArgs[0].name", "managed by the operator from spec.etcd.servers", func(s *v1alpha1.ApiServerConfigSpec) {
			s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "etcd-servers", Value: "https://other:2379"}}
		}},
		{"override of a resource that does not exist", "spec.etcd.overrides[0].resource", `did you mean "events"?`, func(s *v1alpha1.ApiServerConfigSpec) {
			s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "event", Servers: []string{"https://e:2379"}}}
		}},
		{"locked feature gate", "spec.featureGates[MultiCIDRServiceAllocator]", "locked to true", func(s *v1alpha1.ApiServerConfigSpec) {
			s.FeatureGates = map[string]bool{"MultiCIDRServiceAllocator": false}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, newConfig(ns.Name, "refused-"+string(rune('a'+i)), tc.mutate))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want the webhook to refuse the spec as Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("the refusal does not name %s and say %q: %v", tc.field, tc.message, err)
			}
			t.Logf("Refused as expected: %v", err)
		})
	}

	// An update that breaks a valid object is refused too, and the stored
	// object is left as it was.
	valid := newConfig(ns.Name, "valid", func(*v1alpha1.ApiServerConfigSpec) {})
	if err := env.Client.Create(ctx, valid); err != nil {
		t.Fatalf("a valid spec was refused: %v", err)
	}
	broken := valid.DeepCopy()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"extraArgs":[{"name":"goaway-chance","value":"often"}]}}`))
	if err := env.Client.Patch(ctx, broken, patch); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `spec.extraArgs[0].value: Invalid value: "often": kube-apiserver v1.37.1 would refuse to start: invalid argument "often" for "--goaway-chance" flag`) {
		t.Fatalf("want the update refused for its flag value, got %v", err)
	}
	stored := &v1alpha1.ApiServerConfig{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(valid), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Generation != valid.Generation || len(stored.Spec.ExtraArgs) != 0 {
		t.Fatalf("the refused update changed the stored spec")
	}
}

func TestApiServerConfigValidator_WarnsAboutDeprecatedFlags(t *testing.T) {
	ctx := context.Background()
	recorder := &warningRecorder{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = recorder
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "webhook-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	obj := newConfig(ns.Name, "deprecated", func(s *v1alpha1.ApiServerConfigSpec) {
		s.ExtraArgs = []v1alpha1.ExtraArg{{Name: "kubelet-read-only-port", Value: "0"}}
	})
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("a deprecated flag must be accepted, got %v", err)
	}
	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	if !strings.Contains(strings.Join(recorder.warnings, "\n"), "--kubelet-read-only-port is deprecated") {
		t.Fatalf("want a warning about the deprecated flag, got %q", recorder.warnings)
	}
}

// recordingServer keeps what is registered on it.
type recordingServer struct {
	webhook.Server
	handlers map[string]http.Handler
}

func (s *recordingServer) Register(path string, hook http.Handler) { s.handlers[path] = hook }

func TestDrainingServer_ClosesConnectionsOnlyWhileDraining(t *testing.T) {
	inner := &recordingServer{handlers: map[string]http.Handler{}}
	draining := false
	s := DrainingServer{Server: inner, Draining: func() bool { return draining }}
	called := 0
	s.Register("/validate", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		called++
		w.WriteHeader(http.StatusOK)
	}))
	for _, tt := range []struct {
		draining  bool
		wantClose bool
	}{{false, false}, {true, true}} {
		draining = tt.draining
		rec := httptest.NewRecorder()
		inner.handlers["/validate"].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", http.NoBody))
		if got := rec.Header().Get("Connection") == "close"; got != tt.wantClose {
			t.Errorf("draining %v: the answer closes its connection: %v, want %v", tt.draining, got, tt.wantClose)
		}
	}
	if called != 2 {
		t.Errorf("the webhook answered %d of 2 requests", called)
	}
}

func TestApiServerConfigValidator_RefusesWhatTheManagementClusterWouldRefuse(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dryrun-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// Another Service of the management cluster holds a node port.
	taken := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "holder"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 31234}}},
	}
	if err := env.Client.Create(ctx, taken); err != nil {
		t.Fatal(err)
	}
	nodePort := func(port int32) func(*v1alpha1.ApiServerConfigSpec) {
		return func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.Type = corev1.ServiceTypeNodePort
			s.Serving.Service.NodePort = ptr.To(port)
		}
	}
	for _, tc := range []struct {
		name, field, message string
		mutate               func(*v1alpha1.ApiServerConfigSpec)
	}{
		{"node port outside the cluster's range", "spec.serving.service.nodePort", "the management cluster's node ports are 30000-32767", nodePort(80)},
		{"node port another Service holds", "spec.serving.service.nodePort", "provided port is already allocated", nodePort(31234)},
		{"requests above limits", "spec.resources", "must be less than or equal to memory limit", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
			}
		}},
		{"konnectivity node port outside the cluster's range", "spec.konnectivity.nodePort", "the management cluster's node ports are 30000-32767", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.Type = corev1.ServiceTypeNodePort
			s.Konnectivity = &v1alpha1.KonnectivitySpec{NodePort: ptr.To[int32](8132), Agent: v1alpha1.KonnectivityAgentSpec{Host: "agents.example.com", Port: ptr.To[int32](8132), APIPort: ptr.To[int32](443)}}
		}},
		{"konnectivity node port another Service holds", "spec.konnectivity.nodePort", "provided port is already allocated", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Serving.Service.Type = corev1.ServiceTypeNodePort
			s.Konnectivity = &v1alpha1.KonnectivitySpec{NodePort: ptr.To[int32](31234), Agent: v1alpha1.KonnectivityAgentSpec{Host: "agents.example.com", Port: ptr.To[int32](31234), APIPort: ptr.To[int32](443)}}
		}},
		{"agents' Service annotation that is no annotation", "spec.konnectivity.serviceAnnotations", "metadata.annotations", func(s *v1alpha1.ApiServerConfigSpec) {
			s.Konnectivity = &v1alpha1.KonnectivitySpec{ServiceAnnotations: map[string]string{"not a key!": "x"}, Agent: v1alpha1.KonnectivityAgentSpec{Host: "agents.example.com"}}
		}},
		{"egress rule to a block that is no CIDR", "spec.networkPolicy.egress", "spec.egress[0].to[0].ipBlock.cidr", func(s *v1alpha1.ApiServerConfigSpec) {
			s.NetworkPolicy = &v1alpha1.NetworkPolicySpec{Mode: v1alpha1.NetworkPolicyEnforced, Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.300/32"}}},
			}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := env.Client.Create(ctx, newConfig(ns.Name, "refused", tc.mutate))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want the webhook to refuse the spec as Invalid, got %v", err)
			}
			if !strings.Contains(err.Error(), tc.field+": Invalid value") || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("the refusal does not name %s and say %q: %v", tc.field, tc.message, err)
			}
			t.Logf("Refused as expected: %v", err)
		})
	}
	// The dry runs stored nothing; a free node port is taken.
	services := &corev1.ServiceList{}
	if err := env.Client.List(ctx, services, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	if len(services.Items) != 1 {
		t.Fatalf("the namespace holds %d Services after the dry runs, want only the holder's", len(services.Items))
	}
	if err := env.Client.Create(ctx, newConfig(ns.Name, "accepted", nodePort(31235))); err != nil {
		t.Fatalf("a free node port was refused: %v", err)
	}
}

// What the management cluster refuses is judged again only with a new
// spec: a change of metadata alone (a rotation's annotation, the
// finalizer's removal during deletion) goes through even when the
// management cluster would now refuse the tenant's objects.
func TestApiServerConfigValidator_MetadataAloneIsNotJudgedByTheManagementCluster(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dryrun-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	cfg := newConfig(ns.Name, "tenant", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Serving.Service.Type = corev1.ServiceTypeNodePort
		s.Serving.Service.NodePort = ptr.To[int32](31300)
	})
	cfg.Finalizers = []string{"example.dev/hold"}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// Another Service takes the tenant's node port meanwhile.
	holder := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "holder"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80), NodePort: 31300}}},
	}
	if err := env.Client.Create(ctx, holder); err != nil {
		t.Fatal(err)
	}
	annotate := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+v1alpha1.RotateCAAnnotation+`":"1"}}}`))
	if err := env.Client.Patch(ctx, cfg, annotate); err != nil {
		t.Fatalf("a rotation's annotation was refused: %v", err)
	}
	respec := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"masterCount":2}}`))
	if err := env.Client.Patch(ctx, cfg, respec); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "provided port is already allocated") {
		t.Fatalf("a new spec whose node port is taken: want it refused, got %v", err)
	}
	if err := env.Client.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
	if err := env.Client.Patch(ctx, cfg, release); err != nil {
		t.Fatalf("removing the finalizer of a deleted tenant was refused: %v", err)
	}
}
