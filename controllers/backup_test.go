package controllers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// storedUnder is every key and value under prefix in the test's etcd,
// keyed relative to it.
func storedUnder(t *testing.T, prefix string) map[string][]byte {
	t.Helper()
	cli, err := tenantio.EtcdV3{}.Client([]string{env.ControlPlane.Etcd.URL.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Value
	}
	return out
}

func waitBackup(t *testing.T, b *v1alpha1.ApiServerBackup, phase string) *v1alpha1.ApiServerBackup {
	t.Helper()
	var got *v1alpha1.ApiServerBackup
	eventually(t, 30*time.Second, "the backup is "+phase, func() error {
		got = get(t, &v1alpha1.ApiServerBackup{ObjectMeta: b.ObjectMeta})
		if got.Status.Phase != phase {
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
	s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: apiserver.EncryptionSecretName(cfg.Name)}})
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
	ns := namespace(t, nil)
	src := tenant(ns, "source", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionAESGCM}
	})
	createReady(t, src)
	prefix := src.Spec.Etcd.Prefix
	s := get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName(src.Name)}})
	keys, err := apiserver.ParseEncryptionKeys(s.Data[apiserver.EncryptionKeysKey], apiserver.EncryptionLayout{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		putEncryptedWith(t, keys.Current.Key, fmt.Sprintf("%s/secrets/default/s-%02d", prefix, i), fmt.Sprintf("hunter%d", i))
	}
	putKeys(t, prefix+"/configmaps/default/cm-", 700)
	before := storedUnder(t, prefix)

	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nightly"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	done := waitBackup(t, b, v1alpha1.BackupCompleted)
	if done.Status.Keys != int64(len(before)) || done.Status.ArchiveBytes == 0 || len(done.Status.Revisions) != 1 || done.Status.SHA256 == "" ||
		done.Status.Prefix != prefix || !strings.HasPrefix(done.Status.Location, "file://"+backupDir+"/"+ns+"/nightly.backup") {
		t.Fatalf("the completed backup says %+v; want %d keys", done.Status, len(before))
	}
	if c := backupCondition(done, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
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
	waitGone(t, src)
	restored := tenant(ns, "restored", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Encryption = &v1alpha1.EncryptionSpec{Provider: v1alpha1.EncryptionAESGCM}
		s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name}
	})
	createReady(t, restored)
	got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: restored.ObjectMeta})
	if got.Status.DataPrefix != restored.Spec.Etcd.Prefix || got.Status.RestoredFrom != b.Name {
		t.Fatalf("status.dataPrefix %q, restoredFrom %q", got.Status.DataPrefix, got.Status.RestoredFrom)
	}
	after := storedUnder(t, restored.Spec.Etcd.Prefix)
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
	if !bytes.Equal(get(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: apiserver.EncryptionSecretName(restored.Name)}}).Data[apiserver.EncryptionKeysKey],
		s.Data[apiserver.EncryptionKeysKey]) {
		t.Fatal("the restored tenant has another encryption key")
	}

	// A backup that is deleted takes its archive with it.
	if err := env.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the archive is removed", func() error {
		if _, err := os.Stat(strings.TrimPrefix(done.Status.Location, "file://")); !os.IsNotExist(err) {
			return fmt.Errorf("the archive is still there (%w)", err)
		}
		return nil
	})
}

func backupCondition(b *v1alpha1.ApiServerBackup, kind string) *metav1.Condition {
	for i := range b.Status.Conditions {
		if b.Status.Conditions[i].Type == kind {
			return &b.Status.Conditions[i]
		}
	}
	return nil
}

// A restore never writes into a prefix that holds keys, and says why.
func TestApiServerConfigReconciler_ARestoreNeedsAnEmptyPrefix(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, nil)
	src := tenant(ns, "src", nil)
	createReady(t, src)
	putKeys(t, src.Spec.Etcd.Prefix+"/configmaps/default/cm-", 3)
	b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "once"},
		Spec: v1alpha1.ApiServerBackupSpec{ApiServerConfigName: src.Name, Storage: v1alpha1.BackupStorage{Volume: &v1alpha1.VolumeStorage{}}}}
	if err := env.Client.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitBackup(t, b, v1alpha1.BackupCompleted)
	dst := tenant(ns, "dst", func(s *v1alpha1.ApiServerConfigSpec) { s.Restore = &v1alpha1.RestoreSpec{BackupName: b.Name} })
	putKeys(t, dst.Spec.Etcd.Prefix+"/configmaps/default/there-", 2)
	if err := env.Client.Create(ctx, dst); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, dst, v1alpha1.ReasonRestoreFailed, "prefix "+dst.Spec.Etcd.Prefix+" holds keys already")
	if n := keysUnder(t, dst.Spec.Etcd.Prefix+"/"); n != 2 {
		t.Fatalf("%d keys under the prefix, want the 2 that were there", n)
	}
}
