package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Condition types of an ApiServerConfig. Ready, Reconciling and Stalled follow
// the kstatus conventions that GitOps tools (Flux, Argo CD) read; the others
// say which part of the control plane is or is not in order.
const (
	// ConditionReady is True when every apiserver replica serves and the
	// status reflects the current generation.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the operator works toward the
	// desired state (abnormal-true: absent or False when converged).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the operator cannot make progress
	// without a change to the spec or the environment (abnormal-true): an
	// invalid spec at once; an environment failure (a referenced Secret or
	// ConfigMap missing, etcd unreachable, apiserver pods that cannot be
	// scheduled, pull their image or stay up) once it has lasted the
	// operator's grace period (--stall-after, DefaultStallAfter). It clears
	// by itself when the cause goes away.
	ConditionStalled = "Stalled"
	// ConditionCertificatesReady is True when every certificate exists and
	// is within its renewal window.
	ConditionCertificatesReady = "CertificatesReady"
	// ConditionEtcdAvailable is True when every etcd server, overrides
	// included, answered the operator's last check.
	ConditionEtcdAvailable = "EtcdAvailable"
	// ConditionAvailable is True when at least one apiserver replica is
	// ready.
	ConditionAvailable = "Available"
	// ConditionProgressing is True while a rollout is under way.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when the control plane serves with less
	// than it should or a step fails: its reason names the cause and its
	// lastTransitionTime says since when that cause holds.
	ConditionDegraded = "Degraded"
	// ConditionEncrypted is True when every stored value of the encrypted
	// resources is encrypted: proven in etcd by the operator after the key
	// or the resources changed. False while values stored in plain text
	// are being encrypted, or when encryption is turned off; Unknown with
	// the user's own EncryptionConfiguration.
	ConditionEncrypted = "Encrypted"
	// ConditionPaused is True while PausedAnnotation stops every write the
	// operator makes for the tenant; its message lists what waits. Absent
	// when the tenant is not paused.
	ConditionPaused = "Paused"
	// ConditionKonnectivityAgentsConnected, present with spec.konnectivity,
	// says whether the tenant's nodes can be reached through the
	// konnectivity agents: True when every ready apiserver's konnectivity
	// server holds a tunnel from at least one agent, or when the tenant has
	// no node; False when it has nodes and a ready apiserver's server holds
	// none (calls from that apiserver to nodes fail: logs, exec,
	// port-forward, webhooks served on nodes); Unknown when the servers or
	// the nodes could not be counted. It leaves Ready alone: the
	// apiservers serve, and the agents run on the tenant's side.
	ConditionKonnectivityAgentsConnected = "KonnectivityAgentsConnected"
	// ConditionAuditDelivered, present with spec.audit.webhook, says
	// whether the apiservers lost audit events since the look before: the
	// webhook refused or did not answer, the buffer was full, or events
	// were cut for their size (kube-apiserver's
	// apiserver_audit_error_total). It does not take part in Ready.
	ConditionAuditDelivered = "AuditDelivered"
)

// Annotations a user sets on an ApiServerConfig.
const (
	// RotateServiceAccountKeyAnnotation starts a rotation of the
	// service-account signing key whenever its value changes.
	RotateServiceAccountKeyAnnotation = "controlplane.apiserver-operator.dev/rotate-service-account-key"
	// RotateCAAnnotation starts a rotation of the cluster CA whenever its
	// value changes.
	RotateCAAnnotation = "controlplane.apiserver-operator.dev/rotate-ca"
	// RevokeCAAnnotation revokes every certificate the cluster CA has
	// signed so far whenever its value changes: a CA rotation starts (or
	// the one under way goes on), and once the new CA signs everywhere the
	// old CAs are no longer trusted, without the overlap that keeps them
	// until they expire. Admin kubeconfigs and AdminCredentialRequest
	// credentials issued before, and any client certificate signed with
	// the old CA's key outside the operator (nodes' included), stop
	// working.
	RevokeCAAnnotation = "controlplane.apiserver-operator.dev/revoke-ca"
	// RotateEncryptionKeyAnnotation starts a rotation of the encryption
	// key (with the re-encryption of every stored object) whenever its
	// value changes.
	RotateEncryptionKeyAnnotation = "controlplane.apiserver-operator.dev/rotate-encryption-key"
	// AdoptDataAnnotation, set to the tenant's etcd prefix, lets a tenant
	// start on keys it did not write (reason ForeignData otherwise): the
	// data of a cluster whose etcd it takes over. It never adopts the data
	// another tenant kept (deletionPolicy Retain), nor values its keys do
	// not read.
	AdoptDataAnnotation = "controlplane.apiserver-operator.dev/adopt-data"
	// DeletionProtectionAnnotation "true" protects a tenant that holds data
	// from deletion with deletionPolicy Delete: admission refuses it until
	// ConfirmDeletionAnnotation is "true" (the operator's
	// --require-deletion-confirmation protects every tenant).
	DeletionProtectionAnnotation = "controlplane.apiserver-operator.dev/deletion-protection"
	// ConfirmDeletionAnnotation "true" confirms the deletion of a protected
	// tenant, and of its data.
	ConfirmDeletionAnnotation = "controlplane.apiserver-operator.dev/confirm-deletion"
	// PausedAnnotation "true" pauses the tenant: the operator writes
	// nothing for it (no object, no rotation, no etcd key, no deletion)
	// and only says in status what waits. Removing it, or any other value,
	// resumes: what waited is done then, as if it had just come due.
	PausedAnnotation = "controlplane.apiserver-operator.dev/paused"
)

// Condition reasons. A reason is CamelCase and says why a condition has its
// status, so that tools can act on it without parsing the message.
const (
	// ReasonReconciled: the desired state is in place.
	ReasonReconciled = "Reconciled"
	// ReasonPaused: PausedAnnotation stops the operator's writes.
	ReasonPaused = "Paused"
	// ReasonResumed: a paused tenant is reconciled again (an event).
	ReasonResumed = "Resumed"
	// ReasonProgressing: the operator is applying a change.
	ReasonProgressing = "Progressing"
	// ReasonInvalidSpec: the spec passed admission but cannot work; it must
	// be edited.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonHibernated: masterCount is 0, so no apiserver runs on purpose.
	ReasonHibernated = "Hibernated"
	// ReasonUpgrading: apiservers of the old version still run beside the
	// new one's (Progressing).
	ReasonUpgrading = "Upgrading"
	// ReasonRemovedAPIsInUse: a minor upgrade waits because clients called
	// APIs the target no longer serves (the pre-flight).
	ReasonRemovedAPIsInUse = "RemovedAPIsInUse"
	// ReasonEtcdUnreachable: an etcd server did not answer.
	ReasonEtcdUnreachable = "EtcdUnreachable"
	// ReasonEtcdReachable: every etcd server answered.
	ReasonEtcdReachable = "EtcdReachable"
	// ReasonCertificatesIssued: every certificate is valid and current.
	ReasonCertificatesIssued = "CertificatesIssued"
	// ReasonRotationInProgress: a CA or key rotation is between phases.
	ReasonRotationInProgress = "RotationInProgress"
	// ReasonEncryptionProven: every stored value carries the key that
	// encrypts, as read in etcd.
	ReasonEncryptionProven = "Proven"
	// ReasonReencrypting: values stored in plain text, or with a key about
	// to be dropped, are being rewritten.
	ReasonReencrypting = "Reencrypting"
	// ReasonEncryptionDisabled: spec.encryption.provider is identity.
	ReasonEncryptionDisabled = "EncryptionDisabled"
	// ReasonUserManaged: the user supplies the configuration
	// (spec.encryption.configSecretName); the operator neither rotates nor
	// proves it.
	ReasonUserManaged = "UserManaged"
	// ReasonReplicasNotReady: fewer replicas are ready than masterCount.
	ReasonReplicasNotReady = "ReplicasNotReady"
	// ReasonReconcileError: a step failed and is retried with backoff.
	ReasonReconcileError = "ReconcileError"
	// ReasonReferenceMissing: a Secret or ConfigMap the spec names, or one
	// of its keys, does not exist.
	ReasonReferenceMissing = "ReferenceMissing"
	// ReasonReferenceInvalid: a key of a Secret or ConfigMap the spec
	// names does not hold what it must (an issuer's CA that is not PEM
	// certificates).
	ReasonReferenceInvalid = "ReferenceInvalid"
	// ReasonEtcdDatastore: the platform's etcd datastore that holds the
	// tenant's etcd servers cannot be used: its Secret is malformed, or
	// the spec's servers are only partly on it.
	ReasonEtcdDatastore = "EtcdDatastore"
	// ReasonNameConflict: an object of a name the operator gives one of the
	// tenant's objects exists and is someone else's; the operator leaves
	// it untouched. It stalls at once: only a person can resolve it.
	ReasonNameConflict = "NameConflict"
	// ReasonDeleting: the ApiServerConfig is being deleted and its data
	// with it (deletionPolicy Delete).
	ReasonDeleting = "Deleting"
	// ReasonSharedKeyspace: another tenant's keys are under the prefix of
	// a tenant whose data is to be deleted; it is kept.
	ReasonSharedKeyspace = "SharedKeyspace"
	// ReasonDataDeleted: a deleted tenant's data was removed from etcd
	// (an event).
	ReasonDataDeleted = "DataDeleted"
	// ReasonForeignData: the tenant's etcd prefix holds keys it did not
	// write (a deleted tenant's that were not deleted, anything written
	// there directly), or values its keys cannot decrypt; it does not
	// start on them. It stalls at once: only a person can resolve it.
	ReasonForeignData = "ForeignData"
	// ReasonDataTakenBack: a tenant created again took back the data and
	// the keys its predecessor of the same name kept with deletionPolicy
	// Retain (an event).
	ReasonDataTakenBack = "DataTakenBack"
	// ReasonDataAdopted: a tenant started on keys it did not write, which
	// AdoptDataAnnotation said are its own (an event).
	ReasonDataAdopted = "DataAdopted"
	// ReasonUndecryptable: stored values of the tenant are encrypted with
	// keys it does not hold; kube-apiserver fails every list of their
	// resources. It stalls at once: only a person can resolve it.
	ReasonUndecryptable = "Undecryptable"
	// ReasonRestoreFailed: the backup spec.restore names cannot be
	// restored (missing, failed, not complete yet, an archive that does not
	// read, a prefix that is not empty).
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonRestoring: the tenant's data and keys are being restored from
	// the backup spec.restore names; it starts once they are written.
	ReasonRestoring = "Restoring"
	// ReasonRestored: a tenant started from a backup (an event).
	ReasonRestored = "Restored"
	// ReasonRetainedKeyspace: the tenant's etcd prefix overlaps the data a
	// deleted tenant of another name kept with deletionPolicy Retain.
	ReasonRetainedKeyspace = "RetainedKeyspace"
	// ReasonPodUnschedulable: an apiserver pod cannot be scheduled.
	ReasonPodUnschedulable = "PodUnschedulable"
	// ReasonImagePullFailed: an apiserver pod cannot pull its image.
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonCrashLoop: an apiserver container keeps exiting, or cannot be
	// created.
	ReasonCrashLoop = "CrashLoop"
)

// Reasons of the konnectivity readiness gate of the apiserver pods (a pod
// condition the operator writes), and of its event.
const (
	// ReasonWaitingForAgent: no agent holds a tunnel to the pod's
	// konnectivity server yet, while one holds a tunnel to another server
	// of the tenant (or a server could not be looked at).
	ReasonWaitingForAgent = "WaitingForAgent"
	// ReasonAgentConnected: an agent holds a tunnel to the pod's server.
	ReasonAgentConnected = "AgentConnected"
	// ReasonNoAgents: no server of the tenant holds a tunnel (a tenant
	// without nodes yet).
	ReasonNoAgents = "NoAgents"
	// ReasonNoAgentInTime: the pod waited KonnectivityGateTimeout and
	// serves without a tunnel (also the reason of a Warning event).
	ReasonNoAgentInTime = "NoAgentInTime"
)

// Reasons of the KonnectivityAgentsConnected condition (and its event).
const (
	// ReasonAgentsConnected: every ready apiserver's konnectivity server
	// holds a tunnel from an agent.
	ReasonAgentsConnected = "AgentsConnected"
	// ReasonNoNodes: the tenant has no node, so no agent is expected.
	ReasonNoNodes = "NoNodes"
	// ReasonNoAgentConnected: the tenant has nodes and the konnectivity
	// server of a ready apiserver holds no agent's tunnel (also the reason
	// of a Warning event).
	ReasonNoAgentConnected = "NoAgentConnected"
	// ReasonAgentsNotCounted: a ready apiserver's server, or the tenant's
	// nodes in etcd, could not be counted; or no apiserver is ready.
	ReasonAgentsNotCounted = "AgentsNotCounted"

	// ReasonAuditDelivering: no apiserver lost an audit event since the
	// look before.
	ReasonAuditDelivering = "Delivering"
	// ReasonAuditEventsLost: an apiserver lost audit events since the
	// look before (also the reason of a Warning event).
	ReasonAuditEventsLost = "AuditEventsLost"
	// ReasonAuditNotRead: an apiserver's audit counters could not be read,
	// or no apiserver runs.
	ReasonAuditNotRead = "AuditNotRead"
)

// NewCondition is the condition t: True when ok, with reason and message,
// for generation.
func NewCondition(t string, ok bool, reason, message string, generation int64) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
}
