package backups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver/backup"
	"github.com/apiserver-operator/apiserver-operator/controllers/archives"
)

// S3 credentials' keys, in the Secret storage.s3.credentialsSecretName
// names.
const (
	S3AccessKeyIDKey     = "accessKeyID"
	S3SecretAccessKeyKey = "secretAccessKey"
)

// ArchivePlaces are where the platform lets archives be kept.
type ArchivePlaces struct {
	// Dir is the backup volume (--backup-dir); empty refuses
	// storage.volume.
	Dir string
	// S3Endpoints are the S3 endpoints storage.s3 may name
	// (--backup-s3-endpoints): host:port, or a host with any port; any
	// endpoint when empty. An endpoint is reached from the operator's own
	// network position.
	S3Endpoints []string
}

// allowsS3 reports whether endpoint (host[:port]) is one the platform
// allows.
func (a ArchivePlaces) allowsS3(endpoint string) bool {
	if len(a.S3Endpoints) == 0 {
		return true
	}
	host := endpoint
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	for _, allowed := range a.S3Endpoints {
		if strings.EqualFold(allowed, endpoint) || (!strings.Contains(allowed, ":") && strings.EqualFold(allowed, host)) {
			return true
		}
	}
	return false
}

// storeOf is where b's archive is kept. It follows from the backup's spec,
// namespace and name only, never from its status (a status is anyone's
// who may write it).
func storeOf(ctx context.Context, reader client.Reader, places ArchivePlaces, b *v1alpha1.ApiServerBackup) (archives.Store, error) {
	name := b.Name + ".backup"
	dir := places.Dir
	switch {
	case b.Spec.Storage.Volume != nil:
		if dir == "" {
			return nil, fail("NoBackupVolume", "the operator has no backup volume (its --backup-dir is empty): ask the platform to mount one, or use storage.s3")
		}
		return archives.Volume(filepath.Join(dir, b.Namespace, name)), nil
	case b.Spec.Storage.S3 != nil:
		spec := b.Spec.Storage.S3
		if !places.allowsS3(spec.Endpoint) {
			return nil, fail("S3EndpointNotAllowed", "storage.s3.endpoint %s is not one the platform allows (%s): ask the platform to allow it, or use another", spec.Endpoint, strings.Join(places.S3Endpoints, ", "))
		}
		creds := &corev1.Secret{}
		if err := reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: spec.CredentialsSecretName}, creds); err != nil {
			return nil, fmt.Errorf("reading the S3 credentials (Secret %s named by storage.s3.credentialsSecretName): %w", spec.CredentialsSecretName, err)
		}
		object := b.Namespace + "/" + name
		if spec.Prefix != "" {
			object = strings.TrimSuffix(spec.Prefix, "/") + "/" + object // never another namespace's
		}
		o := archives.S3Options{Endpoint: spec.Endpoint, Bucket: spec.Bucket, Object: object, Region: spec.Region,
			AccessKeyID: string(creds.Data[S3AccessKeyIDKey]), SecretAccessKey: string(creds.Data[S3SecretAccessKeyKey]), Insecure: spec.Insecure}
		if o.AccessKeyID == "" || o.SecretAccessKey == "" {
			return nil, fmt.Errorf("the Secret %s has no %s or no %s: storage.s3 needs both", spec.CredentialsSecretName, S3AccessKeyIDKey, S3SecretAccessKeyKey)
		}
		if spec.CAConfigMapName != "" {
			cm := &corev1.ConfigMap{}
			if err := reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: spec.CAConfigMapName}, cm); err != nil {
				return nil, fmt.Errorf("reading the S3 service's CA (ConfigMap %s named by storage.s3.caConfigMapName): %w", spec.CAConfigMapName, err)
			}
			o.CA = []byte(cm.Data["ca.crt"])
		}
		store, err := archives.S3(o)
		if err != nil {
			return nil, fail(v1alpha1.ReasonInvalidSpec, "storage.s3: %v", err)
		}
		return store, nil
	}
	return nil, fail("UnsupportedStorage", "spec.storage names no storage this operator knows: set storage.volume or storage.s3")
}

// removeArchive removes what the backup stored. Without the credentials
// to reach its bucket (their Secret gone), the backup goes, and its
// archive, sealed for an identity that goes with it, stays unreadable.
func (r *Reconciler) removeArchive(ctx context.Context, b *v1alpha1.ApiServerBackup) error {
	if b.Status.Phase != v1alpha1.BackupCompleted {
		return nil // an archive exists only once the backup completed
	}
	store, err := storeOf(ctx, r.APIReader, ArchivePlaces{Dir: r.Dir, S3Endpoints: r.S3Endpoints}, b)
	var failed *backupFailure
	switch {
	case apierrors.IsNotFound(err) || errors.As(err, &failed):
		ctrl.LoggerFrom(ctx).Info("A deleted backup's archive is left where it is: the operator cannot reach it", "apiServerBackup", b.Namespace+"/"+b.Name, "reason", err.Error())
		r.event(b, corev1.EventTypeWarning, "ArchiveLeft", "Delete", "The archive at %s was not removed (%v); it stays sealed for an identity that goes with the backup", b.Status.Location, err)
		return nil
	case err != nil:
		return err
	}
	return store.Remove(ctx)
}

// openArchive reads a completed backup's archive, unsealed, with the
// identity Secret the operator made for it.
func openArchive(ctx context.Context, reader client.Reader, places ArchivePlaces, b *v1alpha1.ApiServerBackup) (io.ReadCloser, error) {
	s := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: KeySecretName(b.Name)}, s); err != nil {
		return nil, fmt.Errorf("reading the identity of backup %s (Secret %s): %w", b.Name, KeySecretName(b.Name), err)
	}
	if !metav1.IsControlledBy(s, b) {
		return nil, fmt.Errorf("%w: Secret %s is not backup %s's own", backup.ErrCorrupt, s.Name, b.Name)
	}
	store, err := storeOf(ctx, reader, places, b)
	if err != nil {
		return nil, err
	}
	f, err := store.Open(ctx)
	if err != nil {
		return nil, err
	}
	r, err := backup.Unseal(f, string(s.Data[backup.IdentityKey]))
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return readCloser{Reader: r, Closer: f}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// LogStoreDetail logs what an archive store's failure in err was, which
// status does not say (archives.StoreError).
func LogStoreDetail(ctx context.Context, obj client.Object, err error) {
	var store *archives.StoreError
	if errors.As(err, &store) && store.Detail != nil {
		ctrl.LoggerFrom(ctx).Info("An archive store failed", "object", klog.KObj(obj), "what", store.What, "location", store.Location, "error", store.Detail.Error())
	}
}
