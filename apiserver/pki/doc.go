// Package pki builds the public key infrastructure of a managed
// kube-apiserver: certificate authorities, serving and client certificates,
// service-account signing keys, the admin kubeconfig, and the pure decisions
// of when to renew a certificate and how to rotate a CA or a signing key
// without breaking the clients that trust it.
//
// Every function is pure: it reads no clock (the current time is always an
// argument), talks to no API server and touches no file. Randomness comes
// from crypto/rand. Nothing in this package puts key material in an error
// message or in the formatted form of a value.
package pki
