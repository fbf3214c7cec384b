package controllers

import (
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// DefaultEtcdWatchInterval is how often every tenant's etcd servers are
// looked at between passes.
const DefaultEtcdWatchInterval = 10 * time.Second

// etcdWatchConcurrency bounds the checks under way at once.
const etcdWatchConcurrency = 4

// etcdWatch looks at every tenant's etcd servers between passes. A converged
// tenant has no pass, and an outage that changes nothing else the operator
// watches goes unseen without it: with an override etcd (events) down, the
// apiservers stay ready, so no pod or Deployment event comes. A tenant is
// brought back only when what the watch finds differs from what its last
// pass saw, so the steady state still costs no pass and no API request.
type etcdWatch struct {
	client   EtcdClient
	interval time.Duration
	events   chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig]

	mu      sync.Mutex
	tenants map[types.NamespacedName]etcdTarget
}

// etcdTarget is a tenant's etcd as its last pass saw it.
type etcdTarget struct {
	endpoints []string
	tls       *tls.Config
	// unreachable is the endpoint that did not answer, "" when all did.
	unreachable string
}

func newEtcdWatch(client EtcdClient, interval time.Duration) *etcdWatch {
	return &etcdWatch{
		client:   client,
		interval: interval,
		events:   make(chan event.TypedGenericEvent[*v1alpha1.ApiServerConfig], 64),
		tenants:  map[types.NamespacedName]etcdTarget{},
	}
}

// source brings back the tenants whose etcd changed.
func (w *etcdWatch) source() source.Source {
	return source.Channel(w.events, &handler.TypedEnqueueRequestForObject[*v1alpha1.ApiServerConfig]{})
}

// record is what a pass found: the watch compares its next look with it.
func (w *etcdWatch) record(key types.NamespacedName, endpoints []string, tlsConfig *tls.Config, unreachable string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tenants[key] = etcdTarget{endpoints: slices.Clone(endpoints), tls: tlsConfig, unreachable: unreachable}
}

// forget stops looking at a tenant: deleted, or whose last pass did not
// look at its etcd (what it would compare with is stale).
func (w *etcdWatch) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.tenants, key)
}

// NeedLeaderElection: only the leader reconciles, so only it looks.
func (w *etcdWatch) NeedLeaderElection() bool { return true }

// Start looks at every tenant each interval until ctx ends.
func (w *etcdWatch) Start(ctx context.Context) error {
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			w.lookOnce(ctx)
		}
	}
}

// lookOnce checks every tenant once and brings back those whose etcd does
// not answer as their last pass found: an endpoint went away, came back, or
// another one is now the one that does not answer.
func (w *etcdWatch) lookOnce(ctx context.Context) {
	w.mu.Lock()
	targets := make(map[types.NamespacedName]etcdTarget, len(w.tenants))
	for k, t := range w.tenants {
		targets[k] = t
	}
	w.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(etcdWatchConcurrency)
	for key, t := range targets {
		g.Go(func() error {
			unreachable := unreachableEndpoint(w.client.Check(gctx, t.endpoints, t.tls))
			if unreachable == t.unreachable {
				return nil
			}
			w.mu.Lock()
			// Recorded as seen: the pass it brings records it again.
			if cur, ok := w.tenants[key]; ok {
				cur.unreachable = unreachable
				w.tenants[key] = cur
			}
			w.mu.Unlock()
			select {
			case w.events <- event.TypedGenericEvent[*v1alpha1.ApiServerConfig]{Object: &v1alpha1.ApiServerConfig{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			}}:
			case <-gctx.Done():
			}
			return nil
		})
	}
	_ = g.Wait() // the checks return no error
}
