package webhooks

import (
	"fmt"
	"io"
	"os"
	"testing"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
	"github.com/apiserver-operator/apiserver-operator/controllers/managercache"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// env is the bundled kube-apiserver and etcd with the CRD and the webhook
// configuration installed, and a manager serving the webhook only.
var env *envtest.Environment

// tenants is the webhook's index of every ApiServerConfig.
var tenants *tenantindex.Tenants

// judgements counts, by namespace, the requests that reached the webhook's
// validator pool and those it answered.
var judgements = newJudgementCounter()

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "Setting up the webhooks' test environment: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	if env, err = envtest.Start(envtest.WithWebhooks()); err != nil {
		return 0, err
	}
	defer func() { _ = env.Stop() }()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, WebhookServer: env.WebhookServer(),
		// The cache as the manager has it: the operator's own objects only.
		Cache: managercache.CacheOptions("", nil),
	})
	if err != nil {
		return 0, fmt.Errorf("creating the manager: %w", err)
	}
	if tenants, err = tenantindex.New(env.Config, env.Scheme); err != nil {
		return 0, err
	}
	if err := mgr.Add(tenants); err != nil {
		return 0, err
	}
	validators := validatorpool.NewPool(envtest.BinDir())
	defer validators.Close()
	if err := SetupWithManager(mgr, admission.Admission{Validator: countingValidator{Validator: validators, counter: judgements}, Gates: &admission.Gates{ImageRepositories: admission.DefaultImageRepositories(apiserver.DefaultImageRepository)}}, "", tenants); err != nil {
		return 0, err
	}
	return env.RunManager(m, mgr, tenants.WaitForCacheSync)
}
