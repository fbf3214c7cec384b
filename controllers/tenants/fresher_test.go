package tenants

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/apiserver"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

func version(rv, phase string) *v1alpha1.ApiServerConfig {
	return &v1alpha1.ApiServerConfig{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "a", ResourceVersion: rv},
		Status:     v1alpha1.ApiServerConfigStatus{Endpoint: phase},
	}
}

// A pass that starts from a cache older than the operator's own last write
// works from that write instead, so it neither writes the same status again
// nor repeats its events.
func TestApiServerConfigReconciler_WorksFromItsLastWriteWhileTheCacheLags(t *testing.T) {
	tests := []struct {
		name   string
		writes [][2]*v1alpha1.ApiServerConfig // from, to
		cached *v1alpha1.ApiServerConfig
		wantRV string
		thenRV string // what a later pass that reads version 10 works from
	}{{
		name:   "the cache has not seen the status write",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("10", ""), wantRV: "11", thenRV: "11",
	}, {
		name: "the cache is two writes behind (finalizer, then status)",
		writes: [][2]*v1alpha1.ApiServerConfig{
			{version("10", ""), version("11", "")},
			{version("11", ""), version("12", "written")},
		},
		cached: version("10", ""), wantRV: "12", thenRV: "12",
	}, {
		name:   "the cache caught up",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("11", "written"), wantRV: "11", thenRV: "10",
	}, {
		name:   "someone wrote after the operator: the cache wins, and the record is dropped",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("11", "written")}},
		cached: version("13", "user"), wantRV: "13", thenRV: "10",
	}, {
		name:   "a write the server found no change in is not a newer version",
		writes: [][2]*v1alpha1.ApiServerConfig{{version("10", ""), version("10", "")}},
		cached: version("10", ""), wantRV: "10", thenRV: "10",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Reconciler{}
			for _, w := range tt.writes {
				r.remember(w[0].ResourceVersion, w[1])
			}
			got := r.fresher(tt.cached.DeepCopy())
			if got.ResourceVersion != tt.wantRV {
				t.Fatalf("the pass works from resourceVersion %s, want %s", got.ResourceVersion, tt.wantRV)
			}
			if tt.wantRV != tt.cached.ResourceVersion && got.Status.Endpoint != "written" {
				t.Fatalf("the pass works from a copy without the written status: %+v", got.Status)
			}
			got.Status.Endpoint = "changed by the pass"
			// A later pass on the stale version of 10 still gets the write,
			// unchanged by what the first pass did to its copy.
			again := r.fresher(version("10", ""))
			if again.ResourceVersion != tt.thenRV {
				t.Fatalf("a later pass from version 10 works from %s, want %s", again.ResourceVersion, tt.thenRV)
			}
			if again.Status.Endpoint == "changed by the pass" {
				t.Fatal("the record shares memory with what a pass changed")
			}
		})
	}
}

// laggingCache answers NotFound for every Secret while lag is set, as a
// cache that has not yet seen them would.
type laggingCache struct {
	client.Client
	lag bool
}

func (l *laggingCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok && l.lag {
		return apierrors.NewNotFound(corev1.Resource("secrets"), key.Name)
	}
	return l.Client.Get(ctx, key, obj, opts...)
}

// A cache that lags behind the operator's own writes must not make it issue
// a second CA or service-account key: that would replace the ones in use.
func TestApiServerConfigReconciler_LaggingCacheIssuesNoSecondCA(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	cfg := tenant(ns, "lagging", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: "secretbox"}
	})
	createReady(t, cfg)
	// The new key's first rotation (proving what the tenant stored) rests
	// first: its passes write the encryption Secret.
	eventually(t, 30*time.Second, "the encryption rests", func() error {
		if c := encryptedStatus(t, cfg); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Encrypted is %v", c)
		}
		return nil
	})
	keys := func() map[string]string {
		out := map[string]string{}
		for _, name := range []string{apiserver.CASecretName(cfg.Name), apiserver.ServiceAccountSecretName(cfg.Name), apiserver.EncryptionSecretName(cfg.Name)} {
			s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
			out[name] = s.ResourceVersion
		}
		return out
	}
	before := keys()

	cache := &laggingCache{Client: env.Client}
	r := &Reconciler{Ownership: ownershipKey, Client: cache, APIReader: env.Client, Scheme: env.Scheme, Clock: reconciler.Clock,
		Reach: reconciler.Reach, ResizePolicy: reconciler.ResizePolicy, AutoSizingInterval: reconciler.AutoSizingInterval}
	// A pass with the cache in step: the reconciler learns what it wrote.
	if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
		t.Fatal(err)
	}
	cache.lag = true
	if _, err := r.Reconcile(ctx, reconcileRequest(cfg)); err != nil {
		t.Fatal(err)
	}
	if after := keys(); !maps.Equal(before, after) {
		t.Fatalf("a pass over a lagging cache rewrote the CA, service-account or encryption Secrets: resourceVersions %v, then %v", before, after)
	}
}
