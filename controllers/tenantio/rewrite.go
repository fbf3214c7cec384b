package tenantio

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// rewriteWorkers is how many rewrites are in flight at once (the pace is
// rewritesPerSecond over all of them).
const rewriteWorkers = 4

// Stored is a value of a tenant's etcd to write again: the object at Key,
// under KeyPrefix, of the first of Resources the tenant serves (resources
// that share their storage share a prefix).
type Stored struct {
	Resources []schema.GroupResource
	KeyPrefix string
	Key       string
}

// RewriteAll writes the stored objects back through api, perSecond at
// most, for at most within. It returns how many it rewrote and the first
// failures: a failure does not stop the others.
func RewriteAll(ctx context.Context, api API, served map[schema.GroupResource]Resource, stored []Stored, perSecond int32, within time.Duration) (int, error) {
	limiter := rate.NewLimiter(rate.Limit(perSecond), rewriteWorkers)
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	work := make(chan Stored)
	var (
		mu        sync.Mutex
		rewritten int
		failures  []error
		wg        sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	for range rewriteWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				res, ok := servedResource(s.Resources, served)
				if !ok {
					fail(fmt.Errorf("%s: none of %v is served by the tenant's API", s.Key, s.Resources))
					continue
				}
				namespace, name := "", strings.TrimPrefix(s.Key, s.KeyPrefix)
				if res.Namespaced {
					namespace, name, _ = strings.Cut(name, "/")
				}
				if err := api.Rewrite(ctx, res, namespace, name); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("rewriting %s %s/%s: %w", res.GroupResource(), namespace, name, err))
					}
					continue
				}
				mu.Lock()
				rewritten++
				mu.Unlock()
			}
		}()
	}
	for _, s := range stored {
		if limiter.Wait(ctx) != nil {
			break // the slice is over
		}
		work <- s
	}
	close(work)
	wg.Wait()
	if len(failures) > 3 {
		failures = append(failures[:3], fmt.Errorf("and %d more", len(failures)-3))
	}
	msgs := make([]string, len(failures))
	for i, f := range failures {
		msgs[i] = f.Error()
	}
	if len(msgs) == 0 {
		return rewritten, nil
	}
	return rewritten, errors.New(strings.Join(msgs, "; "))
}

// servedResource is the first of resources the tenant serves.
func servedResource(resources []schema.GroupResource, served map[schema.GroupResource]Resource) (Resource, bool) {
	for _, gr := range resources {
		if res, ok := served[gr]; ok {
			return res, true
		}
	}
	return Resource{}, false
}
