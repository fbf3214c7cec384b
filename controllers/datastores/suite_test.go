package datastores

import (
	"context"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/test/envtest"
)

// env is the bundled kube-apiserver and etcd, where the datastore Secrets
// are read from.
var env *envtest.Environment

func TestMain(m *testing.M) {
	var err error
	if env, err = envtest.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "Starting the datastores' test environment: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "datastores-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
