//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// backupFigures are what a backup and its restore took.
type backupFigures struct {
	keys, bytes       int64
	backup, restore   time.Duration
	archiveBytes      int64
	restored          *v1alpha1.ApiServerConfig
	configMaps        map[string]string
	secrets           map[string][]byte
	restoredClientset *kubernetes.Clientset
}

// backupAndRestore stores objects ConfigMaps and Secrets (a tenth of them
// Secrets) in the tenant cfg, backs it up to storage,
// deletes the tenant with its data,
// and restores the backup into a new tenant of another name and prefix,
// Ready; it times the backup (creation to Completed) and the restore
// (creation to status.dataPrefix).
func backupAndRestore(t testing.TB, c client.Client, cfg *v1alpha1.ApiServerConfig, tenant *kubernetes.Clientset, objects int, storage v1alpha1.BackupStorage) backupFigures {
	t.Helper()
	ctx := context.Background()
	var f backupFigures
	f.configMaps, f.secrets = storeObjects(t, tenant, objects-objects/10, objects/10)
	waitEncrypted(t, c, cfg, 5*time.Minute)

	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name + "-backup"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: cfg.Name, Storage: storage}}
	start := time.Now()
	if err := c.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(b), b); err != nil {
			t.Fatal(err)
		}
		if b.Status.Phase == v1alpha1.BackupCompleted {
			break
		}
		if b.Status.Phase == v1alpha1.BackupFailed || time.Now().After(deadline) {
			t.Fatalf("the backup is %q: %v", b.Status.Phase, b.Status.Conditions)
		}
	}
	f.backup, f.keys, f.bytes, f.archiveBytes = time.Since(start), b.Status.Keys, b.Status.Bytes, b.Status.ArchiveBytes
	if f.keys < int64(objects) {
		t.Fatalf("the backup holds %d keys, fewer than the %d objects stored", f.keys, objects)
	}

	if err := c.Delete(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, c, cfg, 3*time.Minute)
	f.restored = localTenant(t, cfg.Namespace, cfg.Name+"-restored")
	f.restored.Spec.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name}
	start = time.Now()
	if err := c.Create(ctx, f.restored); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		got := &v1alpha1.ApiServerConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(f.restored), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.DataPrefix != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restore did not end within 5 minutes: %v", got.Status.Conditions)
		}
	}
	f.restore = time.Since(start)
	waitReady(t, c, f.restored, 3*time.Minute)
	f.restoredClientset, _ = tenantClient(t, c, f.restored)
	waitReachable(t, f.restoredClientset)
	return f
}

func (f backupFigures) log(tb testing.TB) {
	tb.Helper()
	tb.Logf("backup of %d keys (%.1f MiB, archive %.1f MiB): %s, %.0f keys/s, %.1f MiB/s; restore: %s, %.0f keys/s, %.1f MiB/s",
		f.keys, mib(f.bytes), mib(f.archiveBytes), f.backup.Round(time.Millisecond), float64(f.keys)/f.backup.Seconds(), mib(f.bytes)/f.backup.Seconds(),
		f.restore.Round(time.Millisecond), float64(f.keys)/f.restore.Seconds(), mib(f.bytes)/f.restore.Seconds())
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// s3Bucket makes a bucket of its own on the local cluster's S3 server
// (versitygw, built from its module) and the credentials Secret in
// namespace, and returns the storage of a backup there.
func s3Bucket(t testing.TB, c client.Client, namespace string) *v1alpha1.S3Storage {
	t.Helper()
	s3 := cluster.S3()
	cli, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKeyID, s3.SecretAccessKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := "backups-" + namespace
	if err := cli.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s on the local cluster's S3 server: %v", bucket, err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "s3-credentials"},
		Data: map[string][]byte{"accessKeyID": []byte(s3.AccessKeyID), "secretAccessKey": []byte(s3.SecretAccessKey)}}
	if err := c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	return &v1alpha1.S3Storage{Endpoint: s3.Endpoint, Bucket: bucket, CredentialsSecretName: secret.Name, Insecure: true}
}

// Scenario (backup and restore): a tenant with 10 000 objects is backed up
// to an S3-compatible bucket, deleted with its data, and restored into a
// new tenant of another name and prefix: every ConfigMap and Secret reads back byte for byte
// (decrypted by the restored apiservers, with the restored key), the
// tenant is Ready, and a client whose informer watched the old tenant
// goes on against the new one (it lists again, then sees new objects).
func TestOperator_ABackupRestoresIntoANewTenantAndAWatchGoesOn(t *testing.T) {
	ctx := context.Background()
	c, cfg, tenant := startTenant(t, "backedup", nil)
	_, rc := tenantClient(t, c, cfg)

	// The client reaches "the tenant" at an address that a platform would
	// move (a DNS name, a load balancer): the old tenant's, then the new
	// one's. It verifies kubernetes.default.svc, a name of both serving
	// certificates, both signed by the CA the restore brings back.
	u, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	var address atomic.Value
	address.Store(u.Host)
	watching := *rc
	watching.TLSClientConfig.ServerName = "kubernetes.default.svc"
	watching.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address.Load().(string))
	}
	watcher, err := kubernetes.NewForConfig(&watching)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	informer := informers.NewSharedInformerFactoryWithOptions(watcher, 0, informers.WithNamespace("default")).Core().V1().ConfigMaps().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			mu.Lock()
			seen[cm.Name] = true
			mu.Unlock()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go informer.Run(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}

	f := backupAndRestore(t, c, cfg, tenant, 10000, v1alpha1.BackupStorage{S3: s3Bucket(t, c, cfg.Namespace)})
	f.log(t)
	restored := f.restoredClientset
	cms, err := restored.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	matched := 0
	for _, cm := range cms.Items {
		if want, ok := f.configMaps[cm.Name]; ok && cm.Data["value"] == want {
			matched++
		}
	}
	ss, err := restored.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss.Items {
		if want, ok := f.secrets[s.Name]; ok && bytes.Equal(s.Data["value"], want) {
			matched++
		}
	}
	if want := len(f.configMaps) + len(f.secrets); matched != want {
		t.Fatalf("%d of the %d objects read back equal from the restored tenant", matched, want)
	}
	assertEncryptedWith(t, f.restored, "key-1", []byte("configuration 1 of the tenant"))

	// The client's informer, now sent to the restored tenant, goes on.
	svcAddress := func() string {
		_, rrc := tenantClient(t, c, f.restored)
		ru, err := url.Parse(rrc.Host)
		if err != nil {
			t.Fatal(err)
		}
		return ru.Host
	}()
	address.Store(svcAddress)
	if _, err := restored.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restore"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		mu.Lock()
		ok := seen["after-restore"]
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the informer that watched the old tenant did not see an object created in the restored one within 3 minutes")
		}
	}
	if n := len(informer.GetStore().ListKeys()); n < len(f.configMaps) {
		t.Fatalf("the informer holds %d ConfigMaps after the restore, fewer than the %d restored", n, len(f.configMaps))
	}
}

// BenchmarkTenantBackupRestore: backup and restore throughput of a tenant
// with BENCH_BACKUP_OBJECTS objects (10 000 by default), on the local
// cluster's etcd and the operator's backup volume.
func BenchmarkTenantBackupRestore(b *testing.B) {
	objects := 10000
	if v := os.Getenv("BENCH_BACKUP_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			b.Fatalf("BENCH_BACKUP_OBJECTS=%q: want a number of at least 10", v)
		}
		objects = n
	}
	var last backupFigures
	for i := range b.N {
		c, cfg, tenant := startTenant(b, fmt.Sprintf("bench-backup-%d", i), nil)
		last = backupAndRestore(b, c, cfg, tenant, objects, v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}})
		last.log(b)
		b.ReportMetric(float64(last.keys)/last.backup.Seconds(), "backup-keys/s")
		b.ReportMetric(mib(last.bytes)/last.backup.Seconds(), "backup-MiB/s")
		b.ReportMetric(float64(last.keys)/last.restore.Seconds(), "restore-keys/s")
		b.ReportMetric(mib(last.bytes)/last.restore.Seconds(), "restore-MiB/s")
	}
}
