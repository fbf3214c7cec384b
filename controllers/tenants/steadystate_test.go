package tenants

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// countingClient counts the writes that go through it, in all and per
// object.
type countingClient struct {
	client.Client
	writes atomic.Int64
	log    atomic.Value // last write, for the failure message

	mu       sync.Mutex
	byObject map[string]int // "Kind name" -> writes since reset
}

func (c *countingClient) note(verb string, obj any) {
	c.writes.Add(1)
	named, ok := obj.(interface{ GetName() string })
	if !ok {
		return
	}
	kind := fmt.Sprintf("%T", obj)
	if k, ok := obj.(interface{ GetKind() string }); ok && k.GetKind() != "" {
		kind = k.GetKind()
	}
	kind = strings.TrimPrefix(kind, "*v1.")
	if strings.HasPrefix(verb, "status") {
		kind += " status"
	}
	c.log.Store(fmt.Sprintf("%s %s %s", verb, kind, named.GetName()))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byObject == nil {
		c.byObject = map[string]int{}
	}
	c.byObject[kind+" "+named.GetName()]++
}

// reset returns the writes per object since the last reset.
func (c *countingClient) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.byObject
	c.byObject = nil
	return out
}
func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.note("create", obj)
	return c.Client.Create(ctx, obj, opts...)
}
func (c *countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.note("update", obj)
	return c.Client.Update(ctx, obj, opts...)
}
func (c *countingClient) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.note("patch", obj)
	return c.Client.Patch(ctx, obj, p, opts...)
}
func (c *countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.note("delete", obj)
	return c.Client.Delete(ctx, obj, opts...)
}
func (c *countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.note("apply", obj)
	return c.Client.Apply(ctx, obj, opts...)
}
func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

type countingStatus struct {
	client.SubResourceWriter
	c *countingClient
}

func (s *countingStatus) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.c.note("status patch", obj)
	return s.SubResourceWriter.Patch(ctx, obj, p, opts...)
}
func (s *countingStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.c.note("status update", obj)
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func TestApiServerConfigReconciler_ConvergedObjectCausesNoWrites(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "quiet", func(s *v1alpha1.ApiServerConfigSpec) {
		s.MasterCount = ptr.To[int32](3)
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
	})
	createReady(t, cfg)

	// A reconciler that counts its writes, as a restarted operator would
	// be: its first pass may re-apply what it has no memory of, every pass
	// after that must write nothing.
	counting := &countingClient{Client: env.Client}
	r := &Reconciler{Ownership: ownershipKey, Client: counting, APIReader: env.Client, Scheme: env.Scheme, Clock: reconciler.Clock,
		Reach: reconciler.Reach, ResizePolicy: reconciler.ResizePolicy, AutoSizingInterval: reconciler.AutoSizingInterval}
	if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
		t.Fatal(err)
	}
	first := counting.writes.Load()
	for range 10 {
		if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
			t.Fatal(err)
		}
	}
	if n := counting.writes.Load() - first; n != 0 {
		t.Fatalf("10 passes over a converged object made %d writes (last: %v)", n, counting.log.Load())
	}
	t.Logf("First pass of a fresh reconciler: %d writes (no-op server-side applies); then 10 passes: 0", first)
}

func TestApiServerConfigReconciler_AutoSizingResizesOnceThenStaysPut(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	prefix := "/tenants/" + ns + "/auto"
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	// Synthetic objects of a tenant, written where kube-apiserver keeps
	// them: nodes under /minions/, pods under /pods/.
	put := func(kind string, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("%s/%s/n%05d", prefix, kind, i), "x"); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("minions", 0, 1000)
	put("pods", 0, 3000)

	cfg := tenant(ns, "auto", func(s *v1alpha1.ApiServerConfigSpec) {
		s.CacheSizing.Policy = v1alpha1.CacheSizingAuto
		s.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Gi")}
	})
	// The keys written before it are its own (a cluster it takes over).
	cfg.Annotations = map[string]string{v1alpha1.AdoptDataAnnotation: cfg.Spec.Etcd.Prefix}
	if err := env.Client.Create(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	d := waitForDeployment(t, cfg)
	inflight := func() string {
		v := argValues(get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}), "max-requests-inflight")
		return strings.Join(v, ",")
	}
	// 1000 nodes: 400 + 2600 x 500/4500, rounded to tens.
	eventually(t, 20*time.Second, "the apiservers are sized for 1000 nodes", func() error {
		if got := inflight(); got != "690" {
			return fmt.Errorf("--max-requests-inflight is %s", got)
		}
		return nil
	})
	// Status is written at the end of the pass that changed the args.
	var sized *v1alpha1.CacheSizingStatus
	eventually(t, 10*time.Second, "status records the sizing", func() error {
		sized = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}).Status.CacheSizing
		if sized == nil || sized.SizedForNodes == nil || *sized.SizedForNodes != 1000 || sized.EstimatedClusterSize != 1000 || sized.MaxInflight != 690 {
			return fmt.Errorf("status does not record the sizing: %+v", sized)
		}
		return nil
	})
	hash := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]

	// 5% more nodes is below the threshold: observed, not acted upon.
	put("minions", 1000, 1050)
	eventually(t, 20*time.Second, "the new count is observed", func() error {
		st := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}).Status.CacheSizing
		if st.ObservedNodes == nil || *st.ObservedNodes != 1050 {
			return fmt.Errorf("observed %v nodes", st.ObservedNodes)
		}
		return nil
	})
	// A pass that observed it past the minimum interval between resizes
	// (2 s here) decided not to resize.
	st := observedAfter(t, cfg, sized.LastResizeTime.Add(2*time.Second))
	if *st.SizedForNodes != 1000 || !st.LastResizeTime.Equal(sized.LastResizeTime) {
		t.Fatalf("a 5%% change resized the apiservers: %+v", st)
	}
	if got := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]; got != hash {
		t.Fatal("a 5% change rolled the apiservers")
	}

	// 55% more is a resize, once.
	put("minions", 1050, 1550)
	eventually(t, 20*time.Second, "the apiservers are resized for 1550 nodes", func() error {
		if got := inflight(); got != "1010" {
			return fmt.Errorf("--max-requests-inflight is %s", got)
		}
		return nil
	})
	hash = get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]
	resized := observedAfter(t, cfg, time.Time{}).LastResizeTime
	// Two passes observed the cluster again, past the minimum interval.
	observedAfter(t, cfg, resized.Add(3*time.Second))
	if got := get(t, &appsv1.Deployment{ObjectMeta: d.ObjectMeta}).Spec.Template.Annotations[apiserver.ConfigHashAnnotation]; got != hash {
		t.Fatal("the sizing kept moving with no change in the cluster")
	}
}

// observedAfter waits for a pass that counted the tenant's nodes later than
// at, and returns the sizing status it wrote.
func observedAfter(t *testing.T, cfg *v1alpha1.ApiServerConfig, at time.Time) *v1alpha1.CacheSizingStatus {
	t.Helper()
	var st *v1alpha1.CacheSizingStatus
	eventually(t, 20*time.Second, "the operator counts the nodes again", func() error {
		st = get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}).Status.CacheSizing
		if st == nil || st.ObservationTime == nil || !st.ObservationTime.After(at) {
			return fmt.Errorf("last observation %v", st)
		}
		return nil
	})
	return st
}
