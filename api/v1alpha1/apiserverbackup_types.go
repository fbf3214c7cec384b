package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApiServerBackupSpec says which tenant to back up, and where to.
type ApiServerBackupSpec struct {
	// ApiServerConfigName is the tenant to back up, in the backup's
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="apiServerConfigName is immutable: create another backup"
	ApiServerConfigName string `json:"apiServerConfigName"`

	// Storage is where the archive is kept.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="storage is immutable: create another backup"
	Storage BackupStorage `json:"storage"`
}

// BackupStorage is where an archive is kept.
//
// +kubebuilder:validation:XValidation:rule="has(self.volume)",message="set storage.volume: the operator's backup volume is the only storage so far"
type BackupStorage struct {
	// Volume keeps the archive as a file on the operator's backup volume
	// (its --backup-dir), at <namespace>/<backup name>.backup.
	// +optional
	Volume *VolumeStorage `json:"volume,omitempty"`
}

// VolumeStorage keeps archives on the operator's backup volume.
type VolumeStorage struct{}

// ApiServerBackupStatus is what the backup holds.
type ApiServerBackupStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready once the archive is complete and stored, Stalled
	// when it cannot be (with the reason), Reconciling meanwhile.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Phase is Running, Completed or Failed.
	// +optional
	Phase string `json:"phase,omitempty"`

	// StartTime and CompletionTime bound the backup.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Location is where the archive is: file://<path on the backup
	// volume>.
	// +optional
	Location string `json:"location,omitempty"`

	// Prefix is the tenant's etcd prefix the keys were read under.
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Keys and Bytes count what was read from etcd (keys and values);
	// ArchiveBytes is the archive's size, compressed and sealed.
	// +optional
	Keys int64 `json:"keys,omitempty"`
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	ArchiveBytes int64 `json:"archiveBytes,omitempty"`

	// Revisions are the etcd revisions the keys were read at, one per
	// etcd of the tenant, main first.
	// +optional
	Revisions []int64 `json:"revisions,omitempty"`

	// SHA256 is the hash of the archive's content, which its last record
	// repeats.
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// KeySecretName names the Secret, in the backup's namespace, whose
	// age identity unseals the archive: without it, the archive cannot be
	// read. It goes with the backup.
	// +optional
	KeySecretName string `json:"keySecretName,omitempty"`
}

// ApiServerBackup is one backup of a tenant: every key under its etcd
// prefix, on each etcd it stores in, read at one revision of each, with
// the Secrets that read and trust them (encryption keys, CAs,
// service-account key), sealed for an identity of its own. A new ApiServerConfig starts from it with
// spec.restore.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=asb,categories=controlplane
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.apiServerConfigName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Keys",type=integer,JSONPath=`.status.keys`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.status.archiveBytes`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApiServerBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApiServerBackupSpec `json:"spec"`

	// +optional
	Status ApiServerBackupStatus `json:"status,omitempty"`
}

// ApiServerBackupList is a list of ApiServerBackup.
//
// +kubebuilder:object:root=true
type ApiServerBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApiServerBackup `json:"items"`
}

// RestoreSpec starts a new tenant from a backup.
type RestoreSpec struct {
	// BackupName names a completed ApiServerBackup in the tenant's
	// namespace. Before the tenant's first apiserver starts, the operator
	// writes the backup's keys under the tenant's own prefix (which must
	// be empty), on its own etcds, and takes the backup's encryption keys,
	// CAs and service-account key as the tenant's.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackupName string `json:"backupName"`
}

// Backup phases.
const (
	BackupRunning   = "Running"
	BackupCompleted = "Completed"
	BackupFailed    = "Failed"
)
