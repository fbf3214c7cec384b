// Package ownership keeps the operator's ownership key: the secret with
// which it proves that it wrote a tenant's Secrets and Deployment
// (apiserver.Ownership), so that an object a namespace's user planted with
// the operator's labels and owner references is never taken as a tenant's
// key material or as evidence that a tenant ran.
package ownership

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
)

// DefaultSecretName is the Secret, in the operator's namespace, that holds
// the key.
const DefaultSecretName = "apiserver-operator-ownership-key"

// KeyKey is the key of the Secret's data that holds the key.
const KeyKey = "key"

// loadAttempts bounds the reads and creations of Load: two replicas that
// start together create the Secret once, the other reads it.
const loadAttempts = 5

// HandoverGrace is how long after the key was made, on a cluster whose
// tenants a release before proofs ran, objects still count as written
// before it: the new release's first replica makes the key at its start,
// while the previous release's leader goes on writing (unproven) until it
// hands over its lease.
const HandoverGrace = 10 * time.Minute

// SinceAnnotation of the key's Secret says from when objects must carry a
// proof, when that is not the Secret's creation (an upgrade: see
// HandoverGrace).
const SinceAnnotation = "controlplane.apiserver-operator.dev/proofs-since"

// sinceOf is from when objects must carry a proof of s's key.
func sinceOf(s *corev1.Secret) time.Time {
	if v := s.Annotations[SinceAnnotation]; v != "" {
		if t, err := time.Parse(time.RFC3339, v); err == nil && t.After(s.CreationTimestamp.Time) {
			return t
		}
	}
	return s.CreationTimestamp.Time
}

// Load reads the ownership key from Secret name, or makes it (immutable)
// when there is none. The Secret's creation time (HandoverGrace later on an
// upgrade) is when the key was made: what the operator wrote before was
// written by a release that proved nothing (apiserver.Ownership.Claim). c must read the API server, not a
// cache that may not hold the Secret yet.
func Load(ctx context.Context, c client.Client, name types.NamespacedName) (*apiserver.Ownership, error) {
	var lastErr error
	for range loadAttempts {
		s := &corev1.Secret{}
		err := c.Get(ctx, name, s)
		switch {
		case err == nil:
			if s.CreationTimestamp.IsZero() {
				return nil, fmt.Errorf("reading the ownership key of Secret %s: it has no creation time", name)
			}
			o, err := apiserver.NewOwnership(s.Data[KeyKey], sinceOf(s))
			if err != nil {
				return nil, fmt.Errorf("reading the ownership key of Secret %s (restore it from a backup; see docs/security.md#the-ownership-key): %w", name, err)
			}
			return o, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading the ownership key of Secret %s: %w", name, err)
		}
		// Tenants exist: a release before proofs runs them, and its
		// leader goes on writing until it hands over.
		tenants := &v1alpha1.ApiServerConfigList{}
		if err := c.List(ctx, tenants, client.Limit(1)); err != nil {
			return nil, fmt.Errorf("looking for tenants written before the ownership key: %w", err)
		}
		annotations := map[string]string{}
		if len(tenants.Items) > 0 {
			annotations[SinceAnnotation] = time.Now().Add(HandoverGrace).UTC().Format(time.RFC3339)
		}
		key := make([]byte, apiserver.OwnershipKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("making the ownership key: %w", err)
		}
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name, Annotations: annotations,
				Labels: map[string]string{"app.kubernetes.io/managed-by": apiserver.FieldOwner}},
			Type:      corev1.SecretTypeOpaque,
			Immutable: ptr.To(true),
			Data:      map[string][]byte{KeyKey: key},
		}
		switch err := c.Create(ctx, s); {
		case err == nil && !s.CreationTimestamp.IsZero():
			return apiserver.NewOwnership(key, sinceOf(s))
		case err != nil && !apierrors.IsAlreadyExists(err):
			return nil, fmt.Errorf("making the ownership key in Secret %s: %w", name, err)
		}
		// Another replica made it first: read it.
		lastErr = fmt.Errorf("the ownership key Secret %s was made by another replica but could not be read back", name)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, lastErr
}
