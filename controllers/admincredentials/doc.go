// Package admincredentials is the reconciler of AdminCredentialRequests:
// each is answered once with a kubeconfig whose client certificate the
// tenant's CA signs for the user and groups it names, within a budget per
// namespace, and the credential's Secret goes when it expires. It reads
// the tenant's CA Secret, proven the operator's, and imports no other
// reconciler.
package admincredentials
