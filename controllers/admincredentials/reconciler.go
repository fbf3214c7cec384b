package admincredentials

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/pki"
	"github.com/apiserver-operator/apiserver-operator/apiserver/rotation"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
)

// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=admincredentialrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=admincredentialrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=controlplane.apiserver-operator.dev,resources=admincredentialrequests/finalizers,verbs=update

// AdminCredentialSecretName names the Secret that holds the kubeconfig an
// AdminCredentialRequest of that name was answered with: no name a tenant
// gives its own objects ends so, so that a request cannot take one.
func AdminCredentialSecretName(request string) string { return request + "-credential" }

// AdminCredentialRequestLabel names, on the Secret of a credential, the
// request it answers.
const AdminCredentialRequestLabel = "controlplane.apiserver-operator.dev/admin-credential-request"

// requestTenantIndex indexes AdminCredentialRequests by the tenant they
// name, so that a tenant that appears or starts serving wakes the requests
// that wait for it.
const requestTenantIndex = ".spec.apiServerConfigName"

// Reconciler answers AdminCredentialRequests: once,
// with a client certificate of the tenant's CA for the user and groups
// they name, valid for expirationSeconds, in a kubeconfig Secret the
// request owns; it deletes that Secret when the credential expires.
type Reconciler struct {
	// Client reads the requests, the tenants and the operator's own
	// Secrets from the cache, and writes.
	Client client.Client
	// APIReader reads what the cache does not hold: the user's CA of a
	// tenant with spec.certificates.caSecretName, and the credential's
	// Secret before it is created.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Ownership checks that the tenant's CA Secret is the operator's
	// (see tenants.Reconciler.Ownership).
	Ownership *apiserver.Ownership
	// MaxConcurrentReconciles is how many requests are answered at once
	// (2 when zero): each costs a key generation and a signature.
	MaxConcurrentReconciles int
	// PerNamespace bounds the credentials issued for one namespace
	// (DefaultCredentialRate when zero): a namespace that asks for
	// thousands delays no other's.
	PerNamespace CredentialRate

	budgets namespaceBudgets
}

// CredentialRate is how many credentials a namespace gets: Burst at once,
// then PerMinute.
type CredentialRate struct {
	PerMinute float64
	Burst     int
}

// DefaultCredentialRate: a burst of 20, then one every 2 seconds.
var DefaultCredentialRate = CredentialRate{PerMinute: 30, Burst: 20}

// namespaceBudgets holds a token bucket per namespace that asked lately;
// a full bucket says nothing a new one would not, so it goes (the map holds
// the namespaces asking now, not every namespace that ever asked).
type namespaceBudgets struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// take spends one credential of namespace's budget, or says how long
// until there is one.
func (b *namespaceBudgets) take(namespace string, r CredentialRate, now time.Time) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buckets == nil {
		b.buckets = map[string]*rate.Limiter{}
	}
	if len(b.buckets) > 1024 {
		for ns, l := range b.buckets {
			if l.TokensAt(now) >= float64(l.Burst()) {
				delete(b.buckets, ns)
			}
		}
	}
	l := b.buckets[namespace]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(r.PerMinute/60), r.Burst)
		b.buckets[namespace] = l
	}
	if l.AllowN(now, 1) {
		return true, 0
	}
	wait := time.Second
	if r.PerMinute > 0 {
		wait = time.Duration(float64(time.Minute) / r.PerMinute)
	}
	return false, wait
}

// SetupWithManager registers the controller: requests, their Secrets, and
// the tenants they wait for.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 2
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.AdminCredentialRequest{}, requestTenantIndex, func(o client.Object) []string {
		return []string{o.(*v1alpha1.AdminCredentialRequest).Spec.ApiServerConfigName}
	}); err != nil {
		return fmt.Errorf("indexing AdminCredentialRequests by tenant: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.AdminCredentialRequest{}).
		Owns(&corev1.Secret{}).
		Watches(&v1alpha1.ApiServerConfig{}, handler.EnqueueRequestsFromMapFunc(r.waitingFor)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// waitingFor lists the requests of a tenant that have not been answered:
// those answered wake by their own timer.
func (r *Reconciler) waitingFor(ctx context.Context, o client.Object) []ctrl.Request {
	list := &v1alpha1.AdminCredentialRequestList{}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{requestTenantIndex: o.GetName()}); err != nil {
		return nil
	}
	var out []ctrl.Request
	for i := range list.Items {
		if list.Items[i].Status.ExpirationTimestamp == nil {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// Reconcile answers a request once, and ends the credential's Secret when
// the credential expires.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	acr := &v1alpha1.AdminCredentialRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, acr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !acr.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the Secret it owns.
		return ctrl.Result{}, nil
	}
	now := r.Clock.Now()
	if exp := acr.Status.ExpirationTimestamp; exp != nil {
		if now.Before(exp.Time) {
			return ctrl.Result{RequeueAfter: exp.Sub(now)}, nil
		}
		return ctrl.Result{}, r.expire(ctx, acr)
	}
	return r.issue(ctx, acr, now)
}

// credentialProofName is what the proof of a request's credential Secret
// binds it to (apiserver.Ownership): the request, by name and uid (an
// earlier request of the name is another), never a tenant.
func credentialProofName(acr *v1alpha1.AdminCredentialRequest) string {
	return "AdminCredentialRequest/" + acr.Name + "/" + string(acr.UID)
}

// issue answers a request: with the Secret an earlier pass created (its
// status update lost), or with a new credential.
func (r *Reconciler) issue(ctx context.Context, acr *v1alpha1.AdminCredentialRequest, now time.Time) (ctrl.Result, error) {
	name := AdminCredentialSecretName(acr.Name)
	existing := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: acr.Namespace, Name: name}, existing); {
	case err == nil:
		if !metav1.IsControlledBy(existing, acr) || !r.Ownership.Proven(credentialProofName(acr), acr.UID, existing) {
			return ctrl.Result{RequeueAfter: time.Minute}, r.refuse(ctx, acr, v1alpha1.ReasonSecretNameTaken,
				fmt.Sprintf("Secret %s/%s exists and is not this request's: delete or rename it, or create the request under another name", acr.Namespace, name))
		}
		kp := pki.KubeconfigKeyPair(existing.Data[apiserver.KubeconfigKey])
		if kp == nil {
			return ctrl.Result{}, fmt.Errorf("reading the credential of Secret %s/%s: it holds no client certificate; delete the request and create another", acr.Namespace, name)
		}
		return r.issued(ctx, acr, kp.Cert(), now)
	case !apierrors.IsNotFound(err):
		return ctrl.Result{}, fmt.Errorf("reading Secret %s/%s: %w", acr.Namespace, name, err)
	}

	tenant := &v1alpha1.ApiServerConfig{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: acr.Namespace, Name: acr.Spec.ApiServerConfigName}, tenant); err != nil || !tenant.DeletionTimestamp.IsZero() {
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("reading ApiServerConfig %s/%s: %w", acr.Namespace, acr.Spec.ApiServerConfigName, err)
		}
		return ctrl.Result{}, r.refuse(ctx, acr, v1alpha1.ReasonTenantNotFound,
			fmt.Sprintf("no ApiServerConfig %s in namespace %s: the request is answered once it exists", acr.Spec.ApiServerConfigName, acr.Namespace))
	}
	signer, bundle, why, err := r.tenantSigner(ctx, tenant)
	if err != nil {
		return ctrl.Result{}, err
	}
	if why != "" {
		return ctrl.Result{}, r.refuse(ctx, acr, v1alpha1.ReasonTenantNotServing, why+"; the request is answered as soon as that changes")
	}
	budget := r.PerNamespace
	if budget.Burst == 0 {
		budget = DefaultCredentialRate
	}
	if ok, wait := r.budgets.take(acr.Namespace, budget, now); !ok {
		return ctrl.Result{RequeueAfter: wait}, r.refuse(ctx, acr, v1alpha1.ReasonRateLimited,
			fmt.Sprintf("namespace %s asked for more than %d credentials at once and %g a minute after: this one is answered when its turn comes", acr.Namespace, budget.Burst, budget.PerMinute))
	}
	alg := tenant.Spec.Certificates.KeyAlgorithm
	if alg == "" {
		alg = v1alpha1.KeyAlgorithm("ECDSAP256")
	}
	lifetime := time.Duration(acr.Spec.ExpirationSeconds) * time.Second
	if lifetime <= 0 {
		lifetime = time.Hour
	}
	kubeconfig, cert, err := pki.Credential(signer, tenant.Name, tenant.Status.Endpoint, bundle, acr.Spec.User, acr.Spec.Groups, alg, lifetime, now)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("issuing the credential of AdminCredentialRequest %s/%s: %w", acr.Namespace, acr.Name, err)
	}
	labels := map[string]string{
		"app.kubernetes.io/managed-by": apiserver.FieldOwner,
		AdminCredentialRequestLabel:    acr.Name,
	}
	if f := acr.Labels[apiserver.WatchFilterLabel]; f != "" {
		labels[apiserver.WatchFilterLabel] = f
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: acr.Namespace, Name: name, Labels: labels, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "AdminCredentialRequest", Name: acr.Name, UID: acr.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{apiserver.KubeconfigKey: kubeconfig},
	}
	// Only a credential the operator wrote is ever handed out: one planted
	// with the request's owner reference is someone else's.
	r.Ownership.Prove(credentialProofName(acr), acr.UID, s)
	if err := r.Client.Create(ctx, s); err != nil {
		if apierrors.IsAlreadyExists(err) {
			// Another pass created it: the next one takes it.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("creating Secret %s/%s: %w", acr.Namespace, name, err)
	}
	groups := "no group"
	if len(acr.Spec.Groups) > 0 {
		groups = "groups " + strings.Join(acr.Spec.Groups, ", ")
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(tenant, acr, corev1.EventTypeNormal, "AdminCredentialIssued", "IssueCredential",
			"Issued a credential for user %s with %s, serial %s, until %s, to AdminCredentialRequest %s",
			acr.Spec.User, groups, cert.SerialNumber.Text(16), cert.NotAfter.UTC().Format(time.RFC3339), acr.Name)
	}
	return r.issued(ctx, acr, cert, now)
}

// tenantSigner is the CA that signs the tenant's client certificates and
// the bundle its clients trust; why says what the tenant lacks when it
// has neither yet. Only the tenant's own Secrets are taken: a Secret of
// the CA's name that is not the tenant's signs nothing.
func (r *Reconciler) tenantSigner(ctx context.Context, tenant *v1alpha1.ApiServerConfig) (*pki.KeyPair, []byte, string, error) {
	if tenant.Status.Endpoint == "" {
		return nil, nil, fmt.Sprintf("ApiServerConfig %s has no endpoint yet", tenant.Name), nil
	}
	own := &corev1.Secret{}
	name := apiserver.CASecretName(tenant.Name)
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: tenant.Namespace, Name: name}, own); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Sprintf("ApiServerConfig %s has no CA yet", tenant.Name), nil
		}
		return nil, nil, "", fmt.Errorf("reading Secret %s/%s: %w", tenant.Namespace, name, err)
	}
	if !ownership.Claim(r.Ownership, tenant, own).Own() {
		return nil, nil, fmt.Sprintf("Secret %s/%s is not ApiServerConfig %s's CA", tenant.Namespace, name, tenant.Name), nil
	}
	if revoke := tenant.Annotations[v1alpha1.RevokeCAAnnotation]; revoke != "" && tenant.Spec.Certificates.CASecretName == "" {
		// What the CA signs before the revocation's new CA signs is
		// revoked with it minutes later.
		state, err := apiserver.RotationStateOf(rotation.CA, own)
		if err != nil {
			return nil, nil, "", fmt.Errorf("reading the CA rotation of ApiServerConfig %s/%s: %w", tenant.Namespace, tenant.Name, err)
		}
		if state.Distrusted != revoke {
			return nil, nil, fmt.Sprintf("ApiServerConfig %s's CA is being revoked (%s=%s), and what it signs now would be revoked too", tenant.Name, v1alpha1.RevokeCAAnnotation, revoke), nil
		}
	}
	bundle := own.Data[apiserver.CABundleKey]
	signerSecret := own
	if user := tenant.Spec.Certificates.CASecretName; user != "" {
		signerSecret = &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: tenant.Namespace, Name: user}, signerSecret); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil, fmt.Sprintf("the CA Secret %s of ApiServerConfig %s does not exist", user, tenant.Name), nil
			}
			return nil, nil, "", fmt.Errorf("reading Secret %s/%s: %w", tenant.Namespace, user, err)
		}
	}
	signer, err := pki.ParseKeyPair(signerSecret.Data[corev1.TLSCertKey], signerSecret.Data[corev1.TLSPrivateKeyKey])
	switch {
	case err != nil:
		return nil, nil, fmt.Sprintf("ApiServerConfig %s's CA in Secret %s/%s does not parse (%v)", tenant.Name, tenant.Namespace, signerSecret.Name, err), nil
	case len(bundle) == 0:
		return nil, nil, fmt.Sprintf("ApiServerConfig %s has no CA bundle yet", tenant.Name), nil
	}
	return signer, bundle, "", nil
}

// issued records the answer and comes back when the credential expires.
func (r *Reconciler) issued(ctx context.Context, acr *v1alpha1.AdminCredentialRequest, cert *x509.Certificate, now time.Time) (ctrl.Result, error) {
	notAfter := cert.NotAfter
	acr.Status.SecretName = AdminCredentialSecretName(acr.Name)
	acr.Status.ExpirationTimestamp = &metav1.Time{Time: notAfter.UTC()}
	acr.Status.SerialNumber = cert.SerialNumber.Text(16)
	meta.SetStatusCondition(&acr.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonCredentialIssued, ObservedGeneration: acr.Generation,
		Message: fmt.Sprintf("Secret %s holds a kubeconfig for user %s that works until %s", acr.Status.SecretName, acr.Spec.User, notAfter.UTC().Format(time.RFC3339)),
	})
	if err := r.Client.Status().Update(ctx, acr); err != nil {
		return ctrl.Result{}, fmt.Errorf("recording the credential of AdminCredentialRequest %s/%s: %w", acr.Namespace, acr.Name, err)
	}
	return ctrl.Result{RequeueAfter: notAfter.Sub(now)}, nil
}

// expire deletes the Secret of a credential that expired, and says so.
func (r *Reconciler) expire(ctx context.Context, acr *v1alpha1.AdminCredentialRequest) error {
	if c := meta.FindStatusCondition(acr.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == v1alpha1.ReasonCredentialExpired && acr.Status.SecretName == "" {
		return nil
	}
	name := AdminCredentialSecretName(acr.Name)
	s := &corev1.Secret{}
	switch err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: acr.Namespace, Name: name}, s); {
	case err == nil && metav1.IsControlledBy(s, acr):
		if err := r.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s of an expired credential: %w", acr.Namespace, name, err)
		}
	case err != nil && !apierrors.IsNotFound(err):
		return fmt.Errorf("reading Secret %s/%s: %w", acr.Namespace, name, err)
	}
	acr.Status.SecretName = ""
	meta.SetStatusCondition(&acr.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonCredentialExpired, ObservedGeneration: acr.Generation,
		Message: fmt.Sprintf("the credential expired at %s and its Secret was deleted: create another request for a new one", acr.Status.ExpirationTimestamp.UTC().Format(time.RFC3339)),
	})
	if err := r.Client.Status().Update(ctx, acr); err != nil {
		return fmt.Errorf("recording the expiry of AdminCredentialRequest %s/%s: %w", acr.Namespace, acr.Name, err)
	}
	return nil
}

// refuse says why the request is not answered yet.
func (r *Reconciler) refuse(ctx context.Context, acr *v1alpha1.AdminCredentialRequest, reason, message string) error {
	if c := meta.FindStatusCondition(acr.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Reason == reason && c.Message == message {
		return nil
	}
	meta.SetStatusCondition(&acr.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: acr.Generation,
	})
	if err := r.Client.Status().Update(ctx, acr); err != nil {
		return fmt.Errorf("recording why AdminCredentialRequest %s/%s waits: %w", acr.Namespace, acr.Name, err)
	}
	return nil
}
