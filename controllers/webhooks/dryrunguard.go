package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DryRunGuard names the ValidatingAdmissionPolicy and its binding that
// refuse every write of the webhook's ServiceAccount that is not a dry run
// (config/webhook/dryrun_guard.yaml, with the name prefix config/default
// gives it). The webhook's role may get these two objects by this name
// only (rbac.go).
const DryRunGuard = "apiserver-operator-webhook-dry-run-only"

// DryRunGuardRecheck is how long a guard found in place is trusted before
// it is read again: the readiness probe runs every second, and the guard
// changes seldom. A missing guard is read again at every probe, so that
// installing it makes the webhook ready at once.
const DryRunGuardRecheck = time.Minute

// DryRunGuardCheck is a readiness check of the webhook: it fails while the
// dry-run guard is not installed. The webhook's ServiceAccount may create
// and patch Services, Deployments, PodDisruptionBudgets and
// NetworkPolicies, because a server-side dry run is authorized as the
// write it stands for; only the guard keeps those writes dry runs. OLM
// installs no ValidatingAdmissionPolicy from a bundle, so that a webhook
// installed there would otherwise serve with the right to start workloads.
// Not ready, it gets no admission request (and ApiServerConfigs cannot be
// written) until the guard is applied (docs/security.md).
type DryRunGuardCheck struct {
	// Reader reads the policy and its binding from the API server: the
	// webhook may get them by name, not list or watch them.
	Reader client.Reader
	// Name is the policy's and the binding's.
	Name string
	// Recheck: see DryRunGuardRecheck.
	Recheck time.Duration
	// Log tells when the guard goes missing and when it is found again:
	// the readiness endpoint withholds the reason.
	Log logr.Logger

	mu sync.Mutex
	// found is when the guard was last found in place; lastErr is the
	// last failure logged.
	found   time.Time
	lastErr string
}

// NewDryRunGuardCheck checks the guard config/default installs, reading it
// with r.
func NewDryRunGuardCheck(r client.Reader) *DryRunGuardCheck {
	return &DryRunGuardCheck{Reader: r, Name: DryRunGuard, Recheck: DryRunGuardRecheck, Log: ctrl.Log.WithName("dry-run-guard")}
}

// Check is the readiness check (a healthz.Checker).
func (c *DryRunGuardCheck) Check(req *http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.found.IsZero() && time.Since(c.found) < c.Recheck {
		return nil
	}
	err := c.read(req.Context())
	switch {
	case err == nil && (c.found.IsZero() || c.lastErr != ""):
		c.Log.Info("The webhook's dry-run guard is installed", "validatingAdmissionPolicy", c.Name)
	case err != nil && err.Error() != c.lastErr:
		c.Log.Error(err, "The webhook is not ready")
	}
	if err != nil {
		c.found, c.lastErr = time.Time{}, err.Error()
		return err
	}
	c.found, c.lastErr = time.Now(), ""
	return nil
}

// read says what is missing of the guard, or nil when it is in place.
func (c *DryRunGuardCheck) read(ctx context.Context) error {
	var missing []string
	var errs []error
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, o := range []struct {
		kind string
		obj  client.Object
	}{{"ValidatingAdmissionPolicy", policy}, {"ValidatingAdmissionPolicyBinding", binding}} {
		err := c.Reader.Get(ctx, client.ObjectKey{Name: c.Name}, o.obj)
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			missing = append(missing, "the "+o.kind+" "+c.Name)
		case meta.IsNoMatchError(err):
			return fmt.Errorf("the management cluster serves no %s (admissionregistration.k8s.io/v1, Kubernetes 1.30 and later), so nothing keeps the webhook's writes dry runs: %w; %s", o.kind, err, c.remedy())
		case apierrors.IsForbidden(err):
			return fmt.Errorf("reading the %s %s, the webhook's dry-run guard: %w; the webhook's ClusterRole (config/rbac/webhook/role.yaml, the CSV's clusterPermissions under OLM) must let it get the policy and its binding by that name", o.kind, c.Name, err)
		default:
			errs = append(errs, fmt.Errorf("reading the %s %s, the webhook's dry-run guard: %w", o.kind, c.Name, err))
		}
	}
	if len(missing) > 0 {
		verb := "is"
		if len(missing) > 1 {
			verb = "are"
		}
		return fmt.Errorf("%s %s missing: without the dry-run guard the webhook's ServiceAccount may create Services, Deployments, PodDisruptionBudgets and NetworkPolicies for real, so the webhook does not serve; %s",
			strings.Join(missing, " and "), verb, c.remedy())
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	switch {
	case binding.Spec.PolicyName != c.Name:
		return fmt.Errorf("the ValidatingAdmissionPolicyBinding %s binds the policy %q, not %s, so the webhook's writes are not kept dry runs; %s", c.Name, binding.Spec.PolicyName, c.Name, c.remedy())
	case !slices.Contains(binding.Spec.ValidationActions, admissionregistrationv1.Deny):
		return fmt.Errorf("the ValidatingAdmissionPolicyBinding %s does not deny (its validationActions are %v), so the webhook's writes are not kept dry runs; %s", c.Name, binding.Spec.ValidationActions, c.remedy())
	}
	return nil
}

// remedy says how to install the guard, or to do without it.
func (c *DryRunGuardCheck) remedy() string {
	return fmt.Sprintf("apply config/webhook/dryrun_guard.yaml as config/default renders it (named %s, its match condition naming the webhook's namespace and ServiceAccount); "+
		"under OLM, which installs no admission policy, apply it by hand as docs/security.md shows; "+
		"where another admission control refuses the webhook's writes that are not dry runs, run the webhook with --require-dry-run-guard=false instead", c.Name)
}
