package backups_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/backups"
	"github.com/apiserver-operator/apiserver-operator/controllers/controllertest"
	"github.com/apiserver-operator/apiserver-operator/controllers/datastores"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/test/envtest"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

func waitCompleted(t *testing.T, b *v1alpha1.ApiServerBackup) *v1alpha1.ApiServerBackup {
	t.Helper()
	var got *v1alpha1.ApiServerBackup
	controllertest.Eventually(t, 30*time.Second, "the backup is Completed", func() error {
		got = controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackup{ObjectMeta: b.ObjectMeta})
		if got.Status.Phase != v1alpha1.BackupCompleted {
			return fmt.Errorf("the backup is %q: %v", got.Status.Phase, got.Status.Conditions)
		}
		return nil
	})
	return got
}

// decrypted reads what a tenant with the keys of its encryption Secret
// stored under key.
func decrypted(t *testing.T, cfg *v1alpha1.ApiServerConfig, key string, stored []byte) []byte {
	t.Helper()
	s := controllertest.Get(t, env.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.EncryptionSecretName(cfg.Name)}})
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := apiserver.NewDecrypter(keys)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Reads([]byte(key), stored) {
		return nil
	}
	return stored
}

// A tenant's backup, restored into a new tenant under a new prefix: the
// same keys and values (aesgcm ones encrypted again for their new key),
// the same CA and encryption key; the archive holds no plain text, and
// goes with the backup.
func TestApiServerConfigReconciler_ABackupRestoresIntoANewTenant(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	src := env.Tenant(ns, "source", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionAESGCM}
	})
	env.CreateReady(t, src)
	prefix := src.Spec.Etcd.Prefix
	s := controllertest.Get(t, env.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName(src.Name)}})
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		env.PutEncryptedWith(t, keys.Current.Key, fmt.Sprintf("%s/secrets/default/s-%02d", prefix, i), fmt.Sprintf("hunter%d", i))
	}
	env.PutKeys(t, prefix+"/configmaps/default/cm-", 700)
	before := env.StoredUnder(t, prefix)

	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	done := waitCompleted(t, b)
	if done.Status.Keys != int64(len(before)) || done.Status.ArchiveBytes == 0 || len(done.Status.Revisions) != 1 || done.Status.SHA256 == "" ||
		done.Status.Prefix != prefix || !strings.HasPrefix(done.Status.Location, "file://"+backupDir+"/"+ns+"/nightly.backup") {
		t.Fatalf("the completed backup says %+v; want %d keys", done.Status, len(before))
	}
	if c := meta.FindStatusCondition(done.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Ready is %v", c)
	}
	archive, err := os.ReadFile(strings.TrimPrefix(done.Status.Location, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range [][]byte{[]byte("cm-1"), []byte("stored"), keys.Current.Key.Secret} {
		if bytes.Contains(archive, plain) {
			t.Fatalf("the archive holds %q in plain text", plain)
		}
	}

	// The tenant goes, with its data; a new one starts from the backup.
	if err := env.Client.Delete(ctx, src); err != nil {
		t.Fatal(err)
	}
	env.WaitGone(t, src)
	restored := env.Tenant(ns, "restored", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionAESGCM}
		s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name}
	})
	env.CreateReady(t, restored)
	got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerConfig{ObjectMeta: restored.ObjectMeta})
	if got.Status.DataPrefix != restored.Spec.Etcd.Prefix || got.Status.RestoredFrom != b.Name {
		t.Fatalf("status.dataPrefix %q, restoredFrom %q", got.Status.DataPrefix, got.Status.RestoredFrom)
	}
	after := env.StoredUnder(t, restored.Spec.Etcd.Prefix)
	if len(after) != len(before) {
		t.Fatalf("%d keys restored, %d backed up", len(after), len(before))
	}
	for rel, was := range before {
		now, ok := after[rel]
		switch {
		case !ok:
			t.Fatalf("%s was not restored", rel)
		case strings.HasPrefix(rel, "/secrets/"):
			if bytes.Equal(now, was) {
				t.Fatalf("%s was restored as it was: aesgcm binds it to its old key", rel)
			}
			if decrypted(t, got, restored.Spec.Etcd.Prefix+rel, now) == nil {
				t.Fatalf("%s does not decrypt under its new key with the restored encryption key", rel)
			}
		case !bytes.Equal(now, was):
			t.Fatalf("%s holds %q, was %q", rel, now, was)
		}
	}
	if !bytes.Equal(controllertest.Get(t, env.Client, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName(restored.Name)}}).Data[apiserver.EncryptionKeysKey],
		s.Data[apiserver.EncryptionKeysKey]) {
		t.Fatal("the restored tenant has another encryption key")
	}

	// A backup that is deleted takes its archive with it.
	if err := env.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "the archive is removed", func() error {
		if _, err := os.Stat(strings.TrimPrefix(done.Status.Location, "file://")); !os.IsNotExist(err) {
			return fmt.Errorf("the archive is still there (%w)", err)
		}
		return nil
	})
}

// A restore never writes into a prefix that holds keys, and says why.
func TestApiServerConfigReconciler_ARestoreNeedsAnEmptyPrefix(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	src := env.Tenant(ns, "src", nil)
	env.CreateReady(t, src)
	env.PutKeys(t, src.Spec.Etcd.Prefix+"/configmaps/default/cm-", 3)
	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "once"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, b)
	dst := env.Tenant(ns, "dst", func(s *v1alpha1.ApiServerConfigSpec) { s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name} })
	env.PutKeys(t, dst.Spec.Etcd.Prefix+"/configmaps/default/there-", 2)
	if err := env.Client.Create(ctx, dst); err != nil {
		t.Fatal(err)
	}
	env.WaitHeld(t, dst, v1alpha1.ReasonRestoreFailed, "prefix "+dst.Spec.Etcd.Prefix+" holds keys already")
	if n := env.KeysUnder(t, dst.Spec.Etcd.Prefix+"/"); n != 2 {
		t.Fatalf("%d keys under the prefix, want the 2 that were there", n)
	}
}

// s3Server starts the S3-compatible server of bin/ (versitygw, its posix
// backend on a directory of the test's) on a port of the test's, with
// bucket, and returns its endpoint and a client.
func s3Server(t *testing.T, bucket string) (string, *minio.Client) {
	t.Helper()
	endpoint := fmt.Sprintf("127.0.0.1:%d", testport.Get(t))
	cmd := exec.Command(filepath.Join(envtest.BinDir(), "versitygw"), "--access", "test-access", "--secret", "test-secret-key",
		"--port", endpoint, "--quiet", "posix", t.TempDir())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the S3 server of bin/ (make versitygw builds it): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cli, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4("test-access", "test-secret-key", "")})
	if err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "the S3 server makes the bucket", func() error {
		return cli.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{})
	})
	return endpoint, cli
}

// A backup kept in an S3 bucket (a real S3-compatible server) restores
// like one on the volume; the object appears only once complete, holds no
// plain text, and goes with the backup.
func TestApiServerConfigReconciler_ABackupInAnS3BucketRestores(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	endpoint, s3 := s3Server(t, "tenant-backups")
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s3-credentials"},
		Data: map[string][]byte{backups.S3AccessKeyIDKey: []byte("test-access"), backups.S3SecretAccessKeyKey: []byte("test-secret-key")}}
	if err := env.Client.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	src := env.Tenant(ns, "bucketed", nil)
	env.CreateReady(t, src)
	env.PutKeys(t, src.Spec.Etcd.Prefix+"/configmaps/default/cm-", 1200)
	before := env.StoredUnder(t, src.Spec.Etcd.Prefix)

	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "to-s3"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{
			Endpoint: endpoint, Bucket: "tenant-backups", Prefix: "prod/", CredentialsSecretName: creds.Name, Insecure: true}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	done := waitCompleted(t, b)
	object := "prod/" + ns + "/to-s3.backup"
	if want := "s3://" + endpoint + "/tenant-backups/" + object; done.Status.Location != want || done.Status.Keys != int64(len(before)) {
		t.Fatalf("the backup is at %s with %d keys; want %s with %d", done.Status.Location, done.Status.Keys, want, len(before))
	}
	info, err := s3.StatObject(ctx, "tenant-backups", object, minio.StatObjectOptions{})
	if err != nil || info.Size != done.Status.ArchiveBytes {
		t.Fatalf("the object is %d bytes (%v), the backup says %d", info.Size, err, done.Status.ArchiveBytes)
	}
	obj, err := s3.GetObject(ctx, "tenant-backups", object, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(obj)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(archive, []byte("configmaps")) {
		t.Fatal("the object holds plain text")
	}

	if err := env.Client.Delete(ctx, src); err != nil {
		t.Fatal(err)
	}
	env.WaitGone(t, src)
	restored := env.Tenant(ns, "from-s3", func(s *v1alpha1.ApiServerConfigSpec) { s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name} })
	env.CreateReady(t, restored)
	after := env.StoredUnder(t, restored.Spec.Etcd.Prefix)
	if len(after) != len(before) {
		t.Fatalf("%d keys restored from the bucket, %d backed up", len(after), len(before))
	}
	for rel, was := range before {
		if !bytes.Equal(after[rel], was) {
			t.Fatalf("%s holds %q after the restore, was %q", rel, after[rel], was)
		}
	}

	if err := env.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 20*time.Second, "the object is removed", func() error {
		if _, err := s3.StatObject(ctx, "tenant-backups", object, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
			return fmt.Errorf("the object is still there (%w)", err)
		}
		return nil
	})
}

// A schedule takes a backup each time one is due, and keeps the newest
// of them: the older ones go, with their archives.
func TestApiServerConfigReconciler_ABackupScheduleKeepsTheNewestBackups(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	cfg := env.Tenant(ns, "scheduled", nil)
	env.CreateReady(t, cfg)
	env.PutKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/cm-", 10)
	keep := int32(2)
	s := &v1alpha1.ApiServerBackupSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "often"},
		Spec: v1alpha1.ApiServerBackupScheduleSpec{Schedule: "@every 2s", Keep: &keep,
			Template: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: cfg.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}}
	if err := env.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	taken := map[string]bool{}
	controllertest.Eventually(t, 40*time.Second, "the schedule took 4 backups, keeping 2", func() error {
		got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: s.ObjectMeta})
		if got.Status.LastBackupName != "" {
			taken[got.Status.LastBackupName] = true
		}
		list := &v1alpha1.ApiServerBackupList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.BackupScheduleLabel: s.Name}); err != nil {
			return err
		}
		completed := 0
		for _, b := range list.Items {
			if b.Status.Phase == v1alpha1.BackupCompleted && b.DeletionTimestamp.IsZero() {
				completed++
			}
		}
		// A third one completes a moment before the schedule's next pass
		// prunes: what holds is the state it settles in.
		if len(taken) < 4 || completed != 2 {
			return fmt.Errorf("%d backups taken so far, %d completed kept", len(taken), completed)
		}
		return nil
	})
	// The archives of the backups that went are gone too.
	controllertest.Eventually(t, 20*time.Second, "only the kept backups' archives are left", func() error {
		files, err := filepath.Glob(filepath.Join(backupDir, ns, "*.backup"))
		if err != nil {
			return err
		}
		list := &v1alpha1.ApiServerBackupList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(files) > len(list.Items) {
			return fmt.Errorf("%d archives for %d backups", len(files), len(list.Items))
		}
		return nil
	})
	// A suspended schedule says so, and has no next time.
	got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: s.ObjectMeta})
	patch := client.MergeFrom(got.DeepCopy())
	got.Spec.Suspend = true
	if err := env.Client.Patch(ctx, got, patch); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 10*time.Second, "the schedule says it is suspended", func() error {
		got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: s.ObjectMeta})
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); c == nil || c.Reason != "Suspended" || c.ObservedGeneration != got.Generation || got.Status.NextScheduleTime != nil {
			return fmt.Errorf("Ready is %v, the next backup due at %v", c, got.Status.NextScheduleTime)
		}
		return nil
	})
}

// A schedule that never comes, or that comes more often than the platform
// allows, is refused in status, with no backup taken; the worker does not
// spin on it (the next schedule is still served).
func TestApiServerConfigReconciler_ABackupScheduleThatNeverComesIsInvalid(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	never := &v1alpha1.ApiServerBackupSchedule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "february"},
		Spec: v1alpha1.ApiServerBackupScheduleSpec{Schedule: "0 0 30 2 *",
			Template: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: "any", Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}}
	// Below the platform's floor (2 s in the tests, 15 min by default).
	tooOften := never.DeepCopy()
	tooOften.Name, tooOften.Spec.Schedule = "too-often", "@every 1s"
	next := never.DeepCopy()
	next.Name, next.Spec.Schedule = "daily", "@daily"
	for _, s := range []*v1alpha1.ApiServerBackupSchedule{never, tooOften, next} {
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	controllertest.Eventually(t, 20*time.Second, "both schedules have a status", func() error {
		n := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: never.ObjectMeta})
		if c := meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "never comes") {
			return fmt.Errorf("the impossible schedule's Stalled is %v", c)
		}
		o := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: tooOften.ObjectMeta})
		if c := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue ||
			!strings.Contains(c.Message, "takes a backup every 1s: the platform allows one every 2s at most") || o.Status.LastBackupName != "" {
			return fmt.Errorf("the schedule of every second: Stalled is %v, last backup %q", c, o.Status.LastBackupName)
		}
		d := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackupSchedule{ObjectMeta: next.ObjectMeta})
		if d.Status.NextScheduleTime == nil || time.Until(d.Status.NextScheduleTime.Time) > 24*time.Hour {
			return fmt.Errorf("the daily schedule's next time is %v", d.Status.NextScheduleTime)
		}
		return nil
	})
}

// An archive altered on its volume is refused before anything is written.
func TestApiServerConfigReconciler_AnAlteredArchiveIsNotRestored(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	src := env.Tenant(ns, "orig", nil)
	env.CreateReady(t, src)
	env.PutKeys(t, src.Spec.Etcd.Prefix+"/configmaps/default/cm-", 300)
	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "altered"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	done := waitCompleted(t, b)
	path := strings.TrimPrefix(done.Status.Location, "file://")
	archive, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	archive[len(archive)/2] ^= 0x01
	if err := os.WriteFile(path, archive, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := env.Tenant(ns, "copy", func(s *v1alpha1.ApiServerConfigSpec) { s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name} })
	if err := env.Client.Create(ctx, dst); err != nil {
		t.Fatal(err)
	}
	env.WaitHeld(t, dst, v1alpha1.ReasonRestoreFailed, "ApiServerBackup altered cannot be restored")
	if n := env.KeysUnder(t, dst.Spec.Etcd.Prefix+"/"); n != 0 {
		t.Fatalf("%d keys were written from an altered archive", n)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: apiserver.CASecretName(dst.Name)}, &corev1.Secret{}); err == nil {
		t.Fatal("a Secret was restored from an altered archive")
	}
}

// A backup whose archive would pass the platform's cap fails, keeps no
// file on the shared volume, and says why.
func TestApiServerBackupReconciler_AnArchivePastTheCapIsNotKept(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	cfg := env.Tenant(ns, "large", nil)
	env.CreateReady(t, cfg)
	env.PutKeys(t, cfg.Spec.Etcd.Prefix+"/configmaps/default/cm-", 300)
	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "capped",
		// Only this test's reconciler takes it.
		Labels: map[string]string{apiserver.WatchFilterLabel: "capped"}},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: cfg.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	r := &backups.Reconciler{Client: env.Client, APIReader: env.Client, Scheme: env.Scheme, Clock: clock.RealClock{}, EtcdTLS: datastores.Reach(env.Client, nil),
		Etcd: tenantio.EtcdV3{Timeout: 2 * time.Second}, Dir: backupDir, Ownership: env.Ownership, MaxBytes: 2048}
	var got *v1alpha1.ApiServerBackup
	for i := 0; ; i++ {
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(b)}); err != nil {
			t.Fatal(err)
		}
		if got = controllertest.Get(t, env.Client, b.DeepCopy()); got.Status.Phase == v1alpha1.BackupFailed || got.Status.Phase == v1alpha1.BackupCompleted {
			break
		}
		if i == 10 {
			t.Fatalf("the backup did not end after 10 passes: %+v", got.Status)
		}
	}
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	if got.Status.Phase != v1alpha1.BackupFailed || c == nil || c.Reason != "TooLarge" || !strings.Contains(c.Message, "passed 2048 bytes") {
		t.Fatalf("a backup past the cap: phase %s, Ready %v", got.Status.Phase, c)
	}
	files, err := filepath.Glob(filepath.Join(backupDir, ns, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) > 0 {
		t.Fatalf("the failed backup left %v on the volume", files)
	}
}

// A namespace's backups run one at a time, beside other namespaces': while
// one hangs on its S3 endpoint, the namespace's next waits its turn and
// says so, and another namespace's backup completes.
func TestApiServerBackupReconciler_ANamespacesBackupsTakeTurns(t *testing.T) {
	ctx := context.Background()
	nsA, nsB := env.Namespace(t, nil), env.Namespace(t, nil)
	target, _ := s3Server(t, "turn-backups")
	proxy := newStallingProxy(t, target)
	proxy.stalled.Store(true)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "s3-credentials"},
		Data: map[string][]byte{backups.S3AccessKeyIDKey: []byte("test-access"), backups.S3SecretAccessKeyKey: []byte("test-secret-key")}}
	if err := env.Client.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	a, b := env.Tenant(nsA, "turns", nil), env.Tenant(nsB, "turns", nil)
	env.CreateReady(t, a)
	env.CreateReady(t, b)
	backup := func(ns, name, tenant string, storage v1alpha1.BackupStorage) *v1alpha1.ApiServerBackup {
		bk := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: tenant, Storage: storage}}
		if err := env.Client.Create(ctx, bk); err != nil {
			t.Fatal(err)
		}
		return bk
	}
	hung := backup(nsA, "hangs", a.Name, v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{
		Endpoint: proxy.lis.Addr().String(), Bucket: "turn-backups", CredentialsSecretName: creds.Name, Insecure: true}})
	controllertest.Eventually(t, 10*time.Second, "the hanging backup runs", func() error {
		if got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackup{ObjectMeta: hung.ObjectMeta}); !controllerutil.ContainsFinalizer(got, backups.Finalizer) {
			return errors.New("not started")
		}
		return nil
	})
	next := backup(nsA, "next", a.Name, v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}})
	other := backup(nsB, "other", b.Name, v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}})
	controllertest.Eventually(t, 10*time.Second, "the namespace's next backup waits its turn", func() error {
		c := meta.FindStatusCondition(controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackup{ObjectMeta: next.ObjectMeta}).Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != "WaitingForTurn" || !strings.Contains(c.Message, "one at a time") {
			return fmt.Errorf("Ready is %v", c)
		}
		return nil
	})
	waitCompleted(t, other)
	if got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackup{ObjectMeta: hung.ObjectMeta}); got.Status.Phase == v1alpha1.BackupCompleted {
		t.Fatal("the backup to the hanging endpoint completed")
	}
	// Once the hanging backup is gone, the namespace's next one runs.
	if err := env.Client.Delete(ctx, hung); err != nil {
		t.Fatal(err)
	}
	controllertest.Eventually(t, 90*time.Second, "the namespace's next backup completes", func() error {
		if got := controllertest.Get(t, env.Client, &v1alpha1.ApiServerBackup{ObjectMeta: next.ObjectMeta}); got.Status.Phase != v1alpha1.BackupCompleted {
			return fmt.Errorf("the backup is %q: %v", got.Status.Phase, got.Status.Conditions)
		}
		return nil
	})
}
