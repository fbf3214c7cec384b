// Command manager runs the apiserver-operator: a controller-runtime manager
// that reconciles ApiServerConfig objects into running kube-apiservers.
//
// This file only wires things together; the behaviour lives in controllers/
// and apiserver/.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/admission"
	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
	"github.com/apiserver-operator/apiserver-operator/controllers/admincredentials"
	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/managercache"
	"github.com/apiserver-operator/apiserver-operator/controllers/ownership"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantindex"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenants"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
	"github.com/apiserver-operator/apiserver-operator/controllers/webhooks"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "render" {
		if err := runRender(os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "apiserver-operator render: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "validators" {
		if err := runValidators(ctrl.SetupSignalHandler(), os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "apiserver-operator validators: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctrl.SetupSignalHandler(), flag.CommandLine, os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "apiserver-operator: %v\n", err)
		os.Exit(1)
	}
}

// options are the command-line flags of the manager.
type options struct {
	metricsAddr          string
	secureMetrics        bool
	probeAddr            string
	leaderElect          bool
	leaderElectionNS     string
	enableHTTP2          bool
	webhookCertDir       string
	webhooks             bool
	controllers          bool
	shutdownDelay        time.Duration
	etcdWatchInterval    time.Duration
	agentWatchInterval   time.Duration
	auditWatchInterval   time.Duration
	removedAPIQuiet      time.Duration
	webhookCerts         string
	webhookSecret        string
	webhookService       string
	webhookConfiguration string
	// mutatingWebhookConfiguration: see --mutating-webhook-configuration.
	mutatingWebhookConfiguration string
	imageRepository              string
	etcdDialerImage              string
	konnectivityServerImage      string
	konnectivityAgentImage       string
	concurrency                  int
	pprofAddr                    string
	metricsCertDir               string
	zap                          zap.Options
	leaderElectionID             string
	watchNamespaceFilter         string
	watchFilter                  string
	validatorDir                 string
	validatorSocket              string
	admissionRetainedData        bool
	requireDryRunGuard           bool
	backupDir                    string
	datastoreNamespace           string
	datastoreReload              time.Duration
	webhookHost                  string
	webhookPort                  int
	nodePortRange                string
	// allowedImages and allowedClasses are nil unless their flag is given.
	allowedImages, allowedClasses []string
	namespacedPrefixes            bool
	deletionConfirmation          bool
	stallAfter                    time.Duration
	caTrustPropagation            time.Duration
	ownershipKey                  string
	backupMinInterval             time.Duration
	backupS3Endpoints             []string
	backupTimeout                 time.Duration
	backupMaxBytes                int64
	// tenantEgress: --tenant-egress-deny and --tenant-egress-allow.
	tenantEgress  apiserver.EgressRanges
	readBudget    int64
	backupWorkers int
}

func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{zap: zap.Options{Development: false}}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443",
		"Address the metrics endpoint binds to: :8443 for HTTPS, :8080 for HTTP, 0 to turn it off.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true,
		"Serve metrics over HTTPS, to callers authenticated and authorized by the cluster (TokenReview and SubjectAccessReview).")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "",
		"Directory with tls.crt and tls.key for the metrics endpoint; a self-signed certificate is generated when empty.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address to serve Go's /debug/pprof profiles on, such as 127.0.0.1:8082; empty serves none.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader so that only one replica of the manager reconciles at a time.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "",
		"Namespace of the leader election lease; the manager's own namespace when empty.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "apiserver-operator.controlplane.apiserver-operator.dev",
		"Name of the leader election lease.")
	fs.StringVar(&o.watchNamespaceFilter, "watch-namespace", os.Getenv("WATCH_NAMESPACE"),
		"Only reconcile ApiServerConfigs in this namespace; all namespaces when empty. Default: $WATCH_NAMESPACE (which the OLM bundle sets from the OperatorGroup's target namespace).")
	fs.StringVar(&o.watchFilter, "watch-filter", "",
		"Only reconcile the ApiServerConfigs labelled "+apiserver.WatchFilterLabel+"=<this value>, with a leader election of their own (the lease is --leader-election-id suffixed with -<value>): several instances each own a labelled part of the fleet. Empty reconciles the ApiServerConfigs without the label.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Serve metrics and webhooks over HTTP/2 as well; off because of the HTTP/2 Stream Cancellation and Rapid Reset CVEs.")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "",
		"Directory with tls.crt and tls.key for the admission webhook server.")
	fs.IntVar(&o.concurrency, "max-concurrent-reconciles", tenants.DefaultMaxConcurrentReconciles,
		"How many ApiServerConfigs are reconciled at once. Each one is reconciled by one worker at a time.")
	fs.StringVar(&o.imageRepository, "apiserver-image-repository", apiserver.DefaultImageRepository,
		"Repository of the bundled kube-apiserver image; its tag is the ApiServerConfig's version.")
	fs.StringVar(&o.etcdDialerImage, "etcd-dialer-image", apiserver.DefaultEtcdDialerImage,
		"Image of the etcd dialer, the sidecar through which each kube-apiserver reaches etcd: it holds kube-apiserver's connection while etcd is down, so that kube-apiserver serves again within moments of etcd's return.")
	fs.StringVar(&o.konnectivityServerImage, "konnectivity-server-image", apiserver.DefaultKonnectivityServerImage,
		"Image of the konnectivity server, the sidecar through which each kube-apiserver of a tenant with spec.konnectivity reaches the tenant's nodes (upstream's apiserver-network-proxy server, "+apiserver.KonnectivityVersion+").")
	fs.StringVar(&o.konnectivityAgentImage, "konnectivity-agent-image", apiserver.DefaultKonnectivityAgentImage,
		"Image of the konnectivity agents of a tenant's nodes, in the manifests the operator publishes for the tenant (ConfigMap <name>-konnectivity-agent): where the tenant's nodes pull it from.")
	fs.BoolVar(&o.webhooks, "webhooks", true,
		"Serve the admission webhooks; turn off only where no webhook configuration points at this manager.")
	fs.DurationVar(&o.shutdownDelay, "webhook-shutdown-delay", 1500*time.Millisecond,
		"How long the webhook keeps serving after SIGTERM, its readiness failing meanwhile, so that the webhook Service stops sending it requests before it stops listening. Within the 2 s kubelet grants a forcibly deleted pod.")
	fs.DurationVar(&o.etcdWatchInterval, "etcd-watch-interval", tenantwatch.DefaultEtcdWatchInterval,
		"How often every tenant's etcd servers are looked at between reconciles: an outage that changes nothing else (an override etcd down) is reported within it.")
	fs.DurationVar(&o.agentWatchInterval, "konnectivity-watch-interval", tenantwatch.DefaultKonnectivityWatchInterval,
		"How often the konnectivity servers of every tenant with spec.konnectivity are asked how many agents hold a tunnel to them (one GET of each server's /metrics, and a count of the tenant's nodes in etcd when a ready server holds none): status.konnectivity and the KonnectivityAgentsConnected condition follow the tenant's nodes within it.")
	fs.DurationVar(&o.auditWatchInterval, "audit-watch-interval", tenantwatch.DefaultAuditWatchInterval,
		"How often the audit error counters of every apiserver of a tenant with spec.audit.webhook are read (one GET of its /metrics): the AuditDelivered condition and apiserver_operator_audit_events_lost_total follow lost audit events within it.")
	fs.BoolVar(&o.controllers, "controllers", true,
		"Reconcile ApiServerConfigs. config/manager runs the controllers and the webhook as two processes of each pod (--webhooks=false in one, --controllers=false in the other), so that the death of the leading controller never fails an admission.")
	fs.StringVar(&o.webhookCerts, "webhook-cert-management", "self",
		"Who provides the webhook's certificate: self (the manager issues and renews it, and sets the caBundle) or external (cert-manager or another tool fills --webhook-cert-dir).")
	fs.StringVar(&o.webhookSecret, "webhook-cert-secret", "apiserver-operator-webhook-cert",
		"Secret, in the manager's namespace, that holds the self-managed webhook CA and certificate.")
	fs.StringVar(&o.webhookService, "webhook-service", "apiserver-operator-webhook-service",
		"Service, in the manager's namespace, through which kube-apiserver calls the webhook.")
	fs.StringVar(&o.webhookConfiguration, "webhook-configuration", "apiserver-operator-validating-webhook-configuration",
		"ValidatingWebhookConfiguration whose caBundle the manager keeps with self-managed certificates.")
	fs.StringVar(&o.mutatingWebhookConfiguration, "mutating-webhook-configuration", "apiserver-operator-mutating-webhook-configuration",
		"MutatingWebhookConfiguration whose caBundle the manager keeps with self-managed certificates; empty for none.")
	fs.StringVar(&o.webhookHost, "webhook-bind-host", "", "Address the webhook server binds to; all addresses when empty.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port of the webhook server.")
	fs.StringVar(&o.nodePortRange, "management-node-port-range", webhooks.DefaultManagementNodePortRange,
		"The management cluster's --service-node-port-range: admission refuses a spec.serving.service.nodePort outside it (no API tells it, and a dry run does not check it).")
	fs.Func("allowed-image-repositories",
		"Comma-separated repositories spec.image may name: an entry ending with / admits every image under it, any other that repository with any tag or digest; images are matched as written, registry included. The image runs with the tenant's service-account signing key and etcd client key. Default: the directory of --apiserver-image-repository. Checked when a spec sets or changes the image.",
		func(v string) error { o.allowedImages = splitList(v); return nil })
	fs.Func("allowed-priority-classes",
		"Comma-separated priority classes spec.priorityClassName may name (empty: none). Default: any class but the system's own (system-*). Checked when a spec sets or changes the class.",
		func(v string) error { o.allowedClasses = splitList(v); return nil })
	fs.BoolVar(&o.namespacedPrefixes, "namespaced-etcd-prefixes", false,
		"Admit only etcd prefixes under /tenants/<namespace>/ (what a tenant without a prefix gets), so that on an etcd shared by tenants of several namespaces none can take a prefix above another namespace's and refuse its tenants. Checked when a spec sets or changes its prefix.")
	fs.BoolVar(&o.deletionConfirmation, "require-deletion-confirmation", false,
		"Refuse the deletion of any ApiServerConfig whose deletion deletes its data (deletionPolicy Delete, a tenant that stored data) until it carries the annotation "+controlplanev1alpha1.ConfirmDeletionAnnotation+"=true, as the annotation "+controlplanev1alpha1.DeletionProtectionAnnotation+"=true does for one tenant. A namespace's deletion waits for it too.")
	fs.StringVar(&o.datastoreNamespace, "etcd-datastore-namespace", "",
		"Namespace of the platform's etcd datastores: Secrets labelled "+datastores.Label+"=true naming etcd servers run with authentication and their client CA, on which each tenant gets an etcd user limited to its prefix. Empty is the operator's own namespace ($POD_NAMESPACE).")
	fs.DurationVar(&o.datastoreReload, "etcd-datastore-reload", datastores.DefaultReload,
		"How long the etcd datastores read last are used before they are listed again: a new or changed datastore is taken up within it.")
	fs.StringVar(&o.ownershipKey, "ownership-key-secret", "",
		"Secret, as <namespace>/<name>, of the key with which the controllers prove that they wrote a tenant's Secrets and Deployment (made at the first start; back it up with the platform's Secrets). Default: "+ownership.DefaultSecretName+" in the manager's namespace ($POD_NAMESPACE).")
	fs.DurationVar(&o.backupMinInterval, "backup-schedule-min-interval", backups.DefaultMinInterval,
		"The least time an ApiServerBackupSchedule may leave between two of its backups; a schedule of shorter gaps is refused in its status (backups share --backup-workers).")
	fs.Func("backup-s3-endpoints",
		"Comma-separated S3 endpoints that storage.s3 of an ApiServerBackup may name: host:port, or a host with any port. The operator reaches them from its own network position. Default: any endpoint.",
		func(v string) error { o.backupS3Endpoints = splitList(v); return nil })
	fs.Func("tenant-egress-deny",
		"Comma-separated address ranges (CIDRs) of the management cluster that no tenant's apiserver may call, whatever its NetworkPolicy and the network plugin: give the networks of the nodes and of the pods. "+
			"The egress filter of every apiserver pod (webhooks, aggregated APIs, issuers, kubelets) always refuses its own node, itself, the management kube-apiserver's Service and the link-local, loopback and metadata ranges, and the Service ranges (ServiceCIDRs) read at start. A change rolls every tenant's pods once.",
		prefixFlag(&o.tenantEgress.Denied))
	fs.Func("tenant-egress-allow",
		"Comma-separated address ranges (CIDRs) the tenants' apiservers may call although a refused range holds them: a webhook or issuer the platform runs in the management cluster, say.",
		prefixFlag(&o.tenantEgress.Allowed))
	fs.Int64Var(&o.readBudget, "tenant-read-budget", tenantio.DefaultReadBudgetBytes,
		"The most the controllers hold, in bytes, of the answers they are reading from every tenant's API at once: a read past it waits for room, within its deadline. At least one answer's cap (32 MiB).")
	fs.IntVar(&o.backupWorkers, "backup-workers", backups.DefaultWorkers,
		"How many backups run at once, one per namespace at most: a namespace's backups wait their turn, beside other namespaces'.")
	fs.DurationVar(&o.backupTimeout, "backup-timeout", backups.DefaultTimeout,
		"The longest one backup or one restore may take: a backup that takes longer fails, a restore is held and starts over later.")
	fs.Int64Var(&o.backupMaxBytes, "backup-max-bytes", backups.DefaultMaxBytes,
		"The largest archive one backup may write: a backup whose archive would be larger fails and keeps nothing (the backup volume and buckets are shared by every namespace).")
	fs.StringVar(&o.backupDir, "backup-dir", "",
		"The backup volume: where ApiServerBackups with storage.volume keep their archives, as <namespace>/<name>.backup (mount a persistent volume there). Empty refuses storage.volume.")
	fs.StringVar(&o.validatorDir, "validator-dir", defaultValidatorDir(),
		"Directory with the validators of the bundled kube-apiserver versions ("+validatorpool.BinaryPrefix+"<version>): admission runs each version's own code on the rendered command line, and refuses every spec when its version's validator is missing. Default: the manager binary's directory.")
	fs.StringVar(&o.validatorSocket, "validator-socket", "",
		"Unix socket on which \"manager validators\" serves the validators, in a container of their own (config/webhook): they then run under a user of their own, without the service account token. Empty runs them in this process's own container, from --validator-dir.")
	fs.BoolVar(&o.admissionRetainedData, "admission-checks-retained-data", true,
		"Admission refuses an etcd prefix over the data a deleted tenant kept (deletionPolicy Retain), which it finds by the labels of the Secrets kept with it: that takes the right to list and watch Secrets. Default: true where this process runs the controllers too, false in a webhook of its own (--controllers=false, config/webhook), whose ServiceAccount reads no Secret; the controllers then hold such a tenant (reason RetainedKeyspace) and touch none of the data.")
	fs.BoolVar(&o.requireDryRunGuard, "require-dry-run-guard", true,
		"The webhook is not ready until the ValidatingAdmissionPolicy and binding "+webhooks.DryRunGuard+" (config/webhook/dryrun_guard.yaml, which OLM does not install) exist: without them its ServiceAccount may create Services, Deployments, PodDisruptionBudgets and NetworkPolicies for real. Turn off only where other admission control refuses its writes that are not dry runs.")
	fs.DurationVar(&o.removedAPIQuiet, "removed-api-quiet-period", tenants.DefaultRemovedAPIQuietPeriod,
		"Before a minor upgrade, how long no client may have called an API the target version no longer serves (as the running apiservers count them) before the upgrade goes ahead; the annotation "+apiserver.AllowRemovedAPICallsAnnotation+"=<version> lets it go at once.")
	fs.DurationVar(&o.stallAfter, "stall-after", tenants.DefaultStallAfter,
		"How long an environment failure (a Secret or ConfigMap the spec names missing, etcd unreachable, apiserver pods that cannot be scheduled, pull their image or stay up) lasts before the ApiServerConfig is marked Stalled, which GitOps tools read as failed.")
	fs.DurationVar(&o.caTrustPropagation, "ca-trust-propagation", tenants.DefaultCATrustPropagation,
		"How long a new CA of a tenant is trusted beside the old one before it signs, in a CA rotation: long enough for kubelet to write the new bundle into the apiserver pods (at its next sync of them), for kube-apiserver to re-read it, and for the clients of the admin kubeconfig to fetch it again.")
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if o.concurrency < 1 {
		return nil, fmt.Errorf("--max-concurrent-reconciles is %d: it must be at least 1", o.concurrency)
	}
	if o.backupWorkers < 1 {
		return nil, fmt.Errorf("--backup-workers is %d: it must be at least 1", o.backupWorkers)
	}
	if o.readBudget < tenantio.MaxAPIResponseBytes {
		return nil, fmt.Errorf("--tenant-read-budget is %d: it must hold at least one whole answer of a tenant, %d bytes", o.readBudget, tenantio.MaxAPIResponseBytes)
	}
	if o.removedAPIQuiet <= 0 {
		return nil, fmt.Errorf("--removed-api-quiet-period is %s: it must be positive", o.removedAPIQuiet)
	}
	if o.stallAfter <= 0 {
		return nil, fmt.Errorf("--stall-after is %s: it must be positive", o.stallAfter)
	}
	if o.caTrustPropagation <= 0 {
		return nil, fmt.Errorf("--ca-trust-propagation is %s: it must be positive", o.caTrustPropagation)
	}
	if strings.Contains(o.watchNamespaceFilter, ",") {
		return nil, fmt.Errorf("--watch-namespace=%q names several namespaces: the operator watches one, or all with an empty value (OLM's MultiNamespace install mode is not supported)", o.watchNamespaceFilter)
	}
	if o.watchFilter != "" {
		if errs := validation.IsDNS1123Label(o.watchFilter); len(errs) > 0 {
			return nil, fmt.Errorf("--watch-filter=%q: %s (it is a label value and names the instance's lease)", o.watchFilter, strings.Join(errs, "; "))
		}
		o.leaderElectionID += "-" + o.watchFilter
	}
	if o.ownershipKey == "" && os.Getenv("POD_NAMESPACE") != "" {
		o.ownershipKey = os.Getenv("POD_NAMESPACE") + "/" + ownership.DefaultSecretName
	}
	if ns, name, ok := strings.Cut(o.ownershipKey, "/"); o.ownershipKey != "" && (!ok || ns == "" || name == "") {
		return nil, fmt.Errorf("--ownership-key-secret=%q: give the Secret of the ownership key as <namespace>/<name>", o.ownershipKey)
	}
	if !o.controllers && !o.webhooks {
		return nil, errors.New("--controllers=false and --webhooks=false leave the manager nothing to do: turn one on")
	}
	if !o.controllers {
		// Only the controllers need a single leader; every webhook serves.
		o.leaderElect = false
		// A webhook of its own has a ServiceAccount that may not list
		// Secrets (config/webhook), unless told otherwise.
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "admission-checks-retained-data" })
		if !given {
			o.admissionRetainedData = false
		}
	}
	return o, nil
}

// skipControllerNameValidation lets the tests run a manager more than once
// in one process: controller-runtime refuses a second controller of a name
// (they would report the same metrics), which one manager per process never
// has.
var skipControllerNameValidation bool

// defaultValidatorDir is the directory of the manager's own executable,
// where the image and `make` put the validators.
func defaultValidatorDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "."
	}
	return filepath.Dir(exe)
}

// run parses args with fs and runs the manager until ctx is done. The
// kubeconfig comes from --kubeconfig (registered on flag.CommandLine by
// controller-runtime), $KUBECONFIG or the in-cluster configuration.
func run(ctx context.Context, fs *flag.FlagSet, args []string) error {
	o, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	setupLog := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(controlplanev1alpha1.AddToScheme(scheme))

	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}

	metricsOpts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.secureMetrics,
		CertDir:       o.metricsCertDir,
		TLSOpts:       tlsOpts,
	}
	if o.secureMetrics {
		metricsOpts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}

	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig of the management cluster: %w", err)
	}
	if err := tenantio.SetReadBudget(o.readBudget); err != nil {
		return fmt.Errorf("--tenant-read-budget: %w", err)
	}
	// The ownership key comes first: the cache keeps whole only the
	// Secrets and Deployments it proves.
	var owners *apiserver.Ownership
	if o.controllers {
		if o.ownershipKey == "" {
			return errors.New("the controllers need the Secret of their ownership key: set --ownership-key-secret=<namespace>/<name>, or $POD_NAMESPACE for the default")
		}
		ns, name, _ := strings.Cut(o.ownershipKey, "/")
		direct, err := client.New(restConfig, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("creating a client for the ownership key: %w", err)
		}
		if owners, err = ownership.Load(ctx, direct, types.NamespacedName{Namespace: ns, Name: name}); err != nil {
			return err
		}
		management, missing, err := tenants.ManagementRanges(ctx, direct)
		if err != nil {
			return err
		}
		for _, m := range missing {
			setupLog.Error(nil, "The tenants' apiservers may call what the operator could not read: give it in --tenant-egress-deny", "unread", m)
		}
		if len(o.tenantEgress.Denied) == 0 {
			setupLog.Error(nil, "--tenant-egress-deny is empty: the tenants' apiservers may call the management cluster's nodes and pods, but for their own node, wherever their NetworkPolicy and the network plugin let them")
		}
		o.tenantEgress.Denied = append(o.tenantEgress.Denied, management...)
		setupLog.Info("The tenants' apiservers may not call these ranges (besides their node, themselves, the management kube-apiserver and the link-local, loopback and metadata ranges)",
			"denied", o.tenantEgress.Denied, "allowed", o.tenantEgress.Allowed)
	}

	// stopping is set at SIGTERM: see drain.
	var stopping atomic.Bool
	if o.webhooks && o.webhookCertDir == "" {
		o.webhookCertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")
	}
	mgrOpts := ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsOpts,
		WebhookServer: webhooks.DrainingServer{
			Server:   webhook.NewServer(webhook.Options{Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir, TLSOpts: tlsOpts}),
			Draining: stopping.Load,
		},
		HealthProbeBindAddress:  o.probeAddr,
		PprofBindAddress:        o.pprofAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.leaderElectionID,
		LeaderElectionNamespace: o.leaderElectionNS,
		// The manager exits as soon as it loses the lease, so a new leader
		// can start without waiting for this one's caches to drain.
		LeaderElectionReleaseOnCancel: true,
		Cache:                         managercache.CacheOptions(o.watchFilter, owners),
	}
	if skipControllerNameValidation {
		mgrOpts.Controller.SkipNameValidation = &skipControllerNameValidation
	}
	if o.watchNamespaceFilter != "" {
		mgrOpts.Cache.DefaultNamespaces = map[string]cache.Config{o.watchNamespaceFilter: {}}
	}

	mgr, err := ctrl.NewManager(restConfig, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating the controller manager: %w", err)
	}

	// Every ApiServerConfig, whatever this instance watches: what
	// admission and the deletion of a tenant's data compare a tenant with.
	var indexOpts []tenantindex.Option
	if owners != nil {
		indexOpts = append(indexOpts, tenantindex.WithMarkProofs(owners))
	}
	switch {
	case !o.controllers && !o.admissionRetainedData:
		indexOpts = append(indexOpts, tenantindex.WithoutRetainedData())
	case o.watchNamespaceFilter != "":
		indexOpts = append(indexOpts, tenantindex.RetainedDataIn(o.watchNamespaceFilter))
	}
	index, err := tenantindex.New(mgr.GetConfig(), mgr.GetScheme(), indexOpts...)
	if err != nil {
		return err
	}
	if err := mgr.Add(index); err != nil {
		return fmt.Errorf("adding the index of every ApiServerConfig: %w", err)
	}
	var stores *datastores.Registry
	if ns := cmp.Or(o.datastoreNamespace, os.Getenv("POD_NAMESPACE")); ns != "" {
		stores = datastores.New(mgr.GetAPIReader(), ns, o.datastoreReload)
	}
	reconciler := &tenants.Reconciler{
		Client:                    mgr.GetClient(),
		Ownership:                 owners,
		APIReader:                 mgr.GetAPIReader(),
		Scheme:                    mgr.GetScheme(),
		Recorder:                  mgr.GetEventRecorder("apiserver-operator"),
		Reach:                     tenantio.Real{},
		ImageRepository:           o.imageRepository,
		EtcdDialerImage:           o.etcdDialerImage,
		KonnectivityServerImage:   o.konnectivityServerImage,
		KonnectivityAgentImage:    o.konnectivityAgentImage,
		TenantEgress:              o.tenantEgress,
		MaxConcurrentReconciles:   o.concurrency,
		Namespaces:                mgrOpts.Cache.DefaultNamespaces,
		StallAfter:                o.stallAfter,
		EtcdWatchInterval:         o.etcdWatchInterval,
		KonnectivityWatchInterval: o.agentWatchInterval,
		AuditWatchInterval:        o.auditWatchInterval,
		RemovedAPIQuietPeriod:     o.removedAPIQuiet,
		CATrustPropagation:        o.caTrustPropagation,
		TenantIndex:               index,
		BackupDir:                 o.backupDir,
		BackupS3Endpoints:         o.backupS3Endpoints,
		BackupTimeout:             o.backupTimeout,
		Datastores:                stores,
	}
	if o.controllers {
		if err := reconciler.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the ApiServerConfig controller: %w", err)
		}
		backupReconciler := &backups.Reconciler{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("apiserver-operator"), Etcd: tenantio.EtcdV3{}, Dir: o.backupDir,
			EtcdTLS: datastores.Reach(mgr.GetAPIReader(), stores), Ownership: owners, S3Endpoints: o.backupS3Endpoints, Timeout: o.backupTimeout,
			MaxBytes: o.backupMaxBytes, Workers: o.backupWorkers,
		}
		if err := backupReconciler.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the ApiServerBackup controller: %w", err)
		}
		schedules := &backups.ScheduleReconciler{Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("apiserver-operator"),
			MinInterval: o.backupMinInterval}
		if err := schedules.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the ApiServerBackupSchedule controller: %w", err)
		}
		credentials := &admincredentials.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
			Recorder: mgr.GetEventRecorder("apiserver-operator"), Ownership: owners}
		if err := credentials.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the AdminCredentialRequest controller: %w", err)
		}
	}

	readyz := healthz.Ping
	var delay time.Duration
	if err := setupWebhookCertificates(ctx, o, restConfig, scheme, mgr, setupLog); err != nil {
		return err
	}
	if o.webhooks {
		var validators validatorpool.Validator
		// ready: the validators answer (always, in this process).
		ready := func(context.Context) error { return nil }
		if o.validatorSocket != "" {
			remote := validatorpool.NewRemote(o.validatorSocket)
			validators, ready = remote, remote.Ready
		} else {
			pool := startValidators(o.validatorDir, setupLog)
			defer pool.Close()
			validators = pool
		}
		// The tenants' pods run on the manager's pod network: their
		// --advertise-address has the family of the manager's own IP.
		gates := &admission.Gates{ImageRepositories: o.allowedImages, PriorityClasses: o.allowedClasses, NamespacedEtcdPrefixes: o.namespacedPrefixes, DeletionConfirmation: o.deletionConfirmation}
		if gates.ImageRepositories == nil {
			gates.ImageRepositories = admission.DefaultImageRepositories(o.imageRepository)
		}
		judge := admission.Admission{Validator: validators, PodIP: os.Getenv("POD_IP"), Gates: gates}
		if err := webhooks.SetupWithManager(mgr, judge, o.nodePortRange, index); err != nil {
			return fmt.Errorf("setting up the validating webhook: %w", err)
		}
		// Ready only once the webhook serves and the index of tenants is
		// filled, or admission would fail; not ready once it is stopping
		// (see drain).
		started := mgr.GetWebhookServer().StartedChecker()
		readyz = func(req *http.Request) error {
			if stopping.Load() {
				return errors.New("the webhook is shutting down")
			}
			if err := ready(req.Context()); err != nil {
				return err
			}
			// Admission compares a spec with every other tenant's.
			if err := index.Ready(req.Context()); err != nil {
				return err
			}
			return started(req)
		}
		delay = o.shutdownDelay
		if o.requireDryRunGuard {
			if err := mgr.AddReadyzCheck("dry-run-guard", webhooks.NewDryRunGuardCheck(mgr.GetAPIReader()).Check); err != nil {
				return fmt.Errorf("adding the dry-run guard's readiness check: %w", err)
			}
		}
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}

	setupLog.Info("Starting the manager", "controllers", o.controllers, "webhooks", o.webhooks, "leaderElection", o.leaderElect,
		"leaderElectionID", o.leaderElectionID, "watchFilter", o.watchFilter, "metricsAddress", o.metricsAddr)
	if err := mgr.Start(drain(ctx, delay, &stopping)); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
}

// setupWebhookCertificates keeps the self-managed webhook certificate
// (--webhook-cert-management=self): the controllers issue and renew it
// into a Secret of their namespace and set the caBundle of the webhook
// configurations; the webhook only reads that Secret into its certificate
// directory, so that its ServiceAccount may read one Secret and patch no
// webhook configuration. One process with both does both.
func setupWebhookCertificates(ctx context.Context, o *options, restConfig *rest.Config, scheme *runtime.Scheme, mgr ctrl.Manager, log logr.Logger) error {
	switch {
	case o.webhookCerts == "external":
		return nil
	case o.webhookCerts != "self":
		return fmt.Errorf("--webhook-cert-management is %q: use self or external", o.webhookCerts)
	}
	namespace := os.Getenv("POD_NAMESPACE")
	if namespace == "" {
		if !o.webhooks {
			log.Info("Not issuing the webhook certificate: $POD_NAMESPACE (set by config/manager) is empty")
			return nil
		}
		return errors.New("self-managed webhook certificates need the manager's namespace in $POD_NAMESPACE (set by config/webhook), or --webhook-cert-management=external")
	}
	direct, err := client.New(restConfig, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("creating a client for the webhook certificates: %w", err)
	}
	certs := &webhooks.Certificates{
		Client: direct, Clock: clock.RealClock{}, Namespace: namespace, ServiceName: o.webhookService,
		SecretName: o.webhookSecret, WebhookConfiguration: o.webhookConfiguration, MutatingWebhookConfiguration: o.mutatingWebhookConfiguration,
		ReadOnly: !o.controllers,
	}
	if o.webhooks {
		certs.CertDir = o.webhookCertDir
		// The files must exist before the webhook server starts; a new
		// install's controllers may not have issued the certificate yet.
		if err := waitForCertificate(ctx, certs, log); err != nil {
			return err
		}
	}
	if err := mgr.Add(certs); err != nil {
		return fmt.Errorf("adding the webhook certificate renewal: %w", err)
	}
	return nil
}

// certificateWait bounds how long the webhook waits, at start, for the
// controllers to issue its certificate.
const certificateWait = 3 * time.Minute

func waitForCertificate(ctx context.Context, certs *webhooks.Certificates, log logr.Logger) error {
	deadline := time.Now().Add(certificateWait)
	for {
		_, err := certs.Ensure(ctx)
		if err == nil || !errors.Is(err, webhooks.ErrNotIssued) || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("preparing the webhook certificate: %w", err)
			}
			return nil
		}
		log.Info("Waiting for the controllers to issue the webhook certificate", "reason", err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("preparing the webhook certificate: %w", ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// drain is ctx ended delay later: once ctx ends (SIGTERM), stopping is set,
// which fails readiness, and the manager keeps serving for delay, so that
// the Service's endpoints drop the pod before its webhook stops listening.
func drain(ctx context.Context, delay time.Duration, stopping *atomic.Bool) context.Context {
	if delay <= 0 {
		return ctx
	}
	drained, stop := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		stopping.Store(true)
		timer := time.NewTimer(delay)
		defer timer.Stop()
		<-timer.C
		stop()
	}()
	return drained
}

// prefixFlag parses a comma-separated list of address ranges (CIDRs; an
// address is a range of one) into *into.
func prefixFlag(into *[]netip.Prefix) func(string) error {
	return func(v string) error {
		for _, e := range splitList(v) {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				a, aerr := netip.ParseAddr(e)
				if aerr != nil {
					return fmt.Errorf("%q is no address range (CIDR) nor address", e)
				}
				p = netip.PrefixFrom(a, a.BitLen())
			}
			*into = append(*into, etcddialer.UnmapPrefix(p).Masked())
		}
		return nil
	}
}

// splitList splits a comma-separated flag value, dropping empty entries:
// "" is the empty list, not nil.
func splitList(v string) []string {
	out := []string{}
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
