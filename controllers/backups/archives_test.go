package backups

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// A backup's S3 endpoint is one the platform allows, or the backup fails
// before any request leaves the operator (nothing is read, not even the
// credentials).
func TestStoreOf_TakesOnlyTheS3EndpointsThePlatformAllows(t *testing.T) {
	places := ArchivePlaces{S3Endpoints: []string{"s3.example.com", "minio.backup.svc:9000"}}
	for endpoint, allowed := range map[string]bool{
		"s3.example.com":          true,
		"s3.example.com:443":      true,
		"S3.Example.com:8443":     true,
		"minio.backup.svc:9000":   true,
		"minio.backup.svc:9001":   false,
		"minio.backup.svc":        false,
		"169.254.169.254":         false,
		"127.0.0.1:10250":         false,
		"s3.example.com.evil.com": false,
	} {
		b := &v1alpha1.ApiServerBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "b"},
			Spec: v1alpha1.ApiServerBackupSpec{Storage: v1alpha1.BackupStorage{S3: &v1alpha1.S3Storage{Endpoint: endpoint, Bucket: "backups", CredentialsSecretName: "creds"}}}}
		if got := places.allowsS3(endpoint); got != allowed {
			t.Errorf("%s: allowed %v, want %v", endpoint, got, allowed)
		}
		if allowed {
			continue
		}
		_, err := storeOf(context.Background(), nil, places, b)
		var failed *backupFailure
		if !errors.As(err, &failed) || failed.reason != "S3EndpointNotAllowed" || !strings.Contains(err.Error(), endpoint) {
			t.Errorf("%s: storeOf gave %v, want S3EndpointNotAllowed naming it", endpoint, err)
		}
	}
	if !(ArchivePlaces{}).allowsS3("anything:1") {
		t.Error("without a list, an endpoint is refused")
	}
}
