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
	ApiServerConfigName string `json:"apiServerConfigName"`

	// Storage is where the archive is kept.
	Storage BackupStorage `json:"storage"`
}

// BackupStorage is where an archive is kept: exactly one of its fields.
//
// +kubebuilder:validation:XValidation:rule="has(self.volume) != has(self.s3)",message="set exactly one of storage.volume and storage.s3"
type BackupStorage struct {
	// Volume keeps the archive as a file on the operator's backup volume
	// (its --backup-dir), at <namespace>/<backup name>.backup.
	// +optional
	Volume *VolumeStorage `json:"volume,omitempty"`

	// S3 keeps the archive as an object of an S3-compatible bucket.
	// +optional
	S3 *S3Storage `json:"s3,omitempty"`
}

// VolumeStorage keeps archives on the operator's backup volume.
type VolumeStorage struct{}

// S3Storage keeps archives in a bucket of an S3-compatible service, as
// the object <prefix><namespace>/<backup name>.backup.
type S3Storage struct {
	// Endpoint is the service's host and port ("s3.example.com",
	// "10.0.0.5:7070"), without a scheme.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^/\s]+$`
	Endpoint string `json:"endpoint"`

	// Bucket holds the archives; it must exist.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// Prefix begins the object's name ("backups/").
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// CredentialsSecretName names a Secret in the backup's namespace with
	// the keys accessKeyID and secretAccessKey.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecretName string `json:"credentialsSecretName"`

	// CAConfigMapName names a ConfigMap in the backup's namespace whose
	// key ca.crt holds the CA of the service's certificate; the system's
	// CAs otherwise.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	CAConfigMapName string `json:"caConfigMapName,omitempty"`

	// Insecure speaks plain HTTP to the endpoint: only for a service that
	// nothing else can reach (the archive is sealed, the credentials are
	// not).
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

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
	// volume>, or s3://<endpoint>/<bucket>/<object>.
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

	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a backup is taken once; create another"
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

// ApiServerBackupScheduleSpec says when to back a tenant up, and how many
// backups to keep.
type ApiServerBackupScheduleSpec struct {
	// Schedule is when to take a backup: a cron expression of five fields
	// (minute, hour, day of month, month, day of week), as a CronJob's, in
	// UTC; or a descriptor such as @daily or @every 6h.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Schedule string `json:"schedule"`

	// Template is the spec of each backup.
	Template ApiServerBackupSpec `json:"template"`

	// Keep is how many completed backups of the schedule to keep: once a
	// new one completes, the oldest beyond Keep are deleted, with their
	// archives. Failed backups are deleted once newer ones exist.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Keep *int32 `json:"keep,omitempty"`

	// Suspend stops taking backups (the ones taken stay).
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ApiServerBackupScheduleStatus is what the schedule did.
type ApiServerBackupScheduleStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready while the schedule takes its backups, Stalled when
	// it cannot (an expression that does not parse).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastScheduleTime is when the last backup was due; LastBackupName
	// names it.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// +optional
	LastBackupName string `json:"lastBackupName,omitempty"`

	// NextScheduleTime is when the next backup is due.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
}

// ApiServerBackupSchedule takes ApiServerBackups of a tenant on a schedule
// and keeps the newest of them. Its backups carry the label
// controlplane.apiserver-operator.dev/backup-schedule and outlive it:
// deleting a schedule deletes no backup.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=asbs,categories=controlplane
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.template.apiServerConfigName`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.spec.schedule`
// +kubebuilder:printcolumn:name="Keep",type=integer,JSONPath=`.spec.keep`
// +kubebuilder:printcolumn:name="Last",type=date,JSONPath=`.status.lastScheduleTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApiServerBackupSchedule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApiServerBackupScheduleSpec `json:"spec"`

	// +optional
	Status ApiServerBackupScheduleStatus `json:"status,omitempty"`
}

// ApiServerBackupScheduleList is a list of ApiServerBackupSchedule.
//
// +kubebuilder:object:root=true
type ApiServerBackupScheduleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApiServerBackupSchedule `json:"items"`
}

// BackupScheduleLabel names the schedule that took a backup.
const BackupScheduleLabel = "controlplane.apiserver-operator.dev/backup-schedule"
