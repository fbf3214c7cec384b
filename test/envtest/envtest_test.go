package envtest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/mod/modfile"
	"k8s.io/client-go/discovery"

	controlplanev1alpha1 "github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// requiredVersion reads the version of module path required by the go.mod
// at file.
func requiredVersion(t *testing.T, file, path string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	mf, err := modfile.Parse(file, data, nil)
	if err != nil {
		t.Fatalf("parsing %s: %v", file, err)
	}
	for _, r := range mf.Require {
		if r.Mod.Path == path {
			return r.Mod.Version
		}
	}
	t.Fatalf("%s does not require %s", file, path)
	return ""
}

func TestBundledBinaries_ReportTheUpstreamVersions(t *testing.T) {
	root := envtest.RepoRoot()
	bundledMod := filepath.Join(root, "apiserver", "bundled", "go.mod")
	if got := requiredVersion(t, bundledMod, "k8s.io/kubernetes"); got != controlplanev1alpha1.BundledVersion {
		t.Fatalf("apiserver/bundled builds k8s.io/kubernetes %s but the API defaults spec.version to %s", got, controlplanev1alpha1.BundledVersion)
	}
	// The operator talks to etcd with the client of the etcd it bundles.
	etcdServer := requiredVersion(t, bundledMod, "go.etcd.io/etcd/server/v3")
	if client := requiredVersion(t, filepath.Join(root, "go.mod"), "go.etcd.io/etcd/client/v3"); client != etcdServer {
		t.Fatalf("the operator uses etcd client %s but bundles etcd %s", client, etcdServer)
	}

	env, err := envtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()

	run := func(name string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(env.BinDir, name), args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("kube-apiserver", "--version"); strings.TrimSpace(out) != "Kubernetes "+controlplanev1alpha1.BundledVersion {
		t.Errorf("kube-apiserver --version prints %q, want %q", strings.TrimSpace(out), "Kubernetes "+controlplanev1alpha1.BundledVersion)
	}
	for _, v := range controlplanev1alpha1.BundledVersions {
		mod := bundledMod
		if v != controlplanev1alpha1.BundledVersion {
			mod = filepath.Join(root, "apiserver", "bundled", "go."+v+".mod")
		}
		if got := requiredVersion(t, mod, "k8s.io/kubernetes"); got != v {
			t.Errorf("%s builds k8s.io/kubernetes %s, want %s", mod, got, v)
		}
		if out := run("kube-apiserver-"+v, "--version"); strings.TrimSpace(out) != "Kubernetes "+v {
			t.Errorf("kube-apiserver-%s --version prints %q, want %q", v, strings.TrimSpace(out), "Kubernetes "+v)
		}
	}
	if out := run("kubectl", "version", "--client"); !strings.Contains(out, "Client Version: "+controlplanev1alpha1.BundledVersion) {
		t.Errorf("kubectl version --client prints %q, want Client Version: %s", out, controlplanev1alpha1.BundledVersion)
	}
	if out := run("etcd", "--version"); !strings.Contains(out, "etcd Version: "+strings.TrimPrefix(etcdServer, "v")) {
		t.Errorf("etcd --version prints %q, want etcd Version: %s", out, strings.TrimPrefix(etcdServer, "v"))
	}

	// The operator's etcd client speaks to the bundled etcd.
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{env.ControlPlane.Etcd.URL.String()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("connecting to the bundled etcd at %s: %v", env.ControlPlane.Etcd.URL, err)
	}
	defer func() { _ = etcd.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, err := etcd.Status(ctx, env.ControlPlane.Etcd.URL.String())
	if err != nil {
		t.Fatalf("reading the status of the bundled etcd: %v", err)
	}
	if status.Version != strings.TrimPrefix(etcdServer, "v") {
		t.Errorf("the bundled etcd reports version %s over the wire, want %s", status.Version, etcdServer)
	}

	// What a client sees on /version of the running apiserver.
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		t.Fatalf("creating a discovery client: %v", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		t.Fatalf("reading /version: %v", err)
	}
	if info.GitVersion != controlplanev1alpha1.BundledVersion || info.Major != "1" || info.Minor != "37" || info.GitTreeState != "clean" {
		t.Errorf("/version reports %+v, want gitVersion %s, major 1, minor 37, a clean tree", info, controlplanev1alpha1.BundledVersion)
	}
}
