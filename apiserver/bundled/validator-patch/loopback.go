//go:build validatorpatch

// This file is not upstream's: hack/validator-module.sh adds it to a copy
// of k8s.io/apiserver's pkg/server/options, with which only the validator
// is built, and makes upstream's SecureServingOptionsWithLoopback.ApplyTo
// get its loopback certificate through generateLoopbackCertKey. The build
// tag keeps it out of every other build.
//
// kube-apiserver generates a self-signed certificate for its loopback
// client at every start-up, whatever its flags say: two 2048-bit RSA
// keys, about 80% of the CPU the validator spends judging a spec. The
// validator generates that certificate once, with upstream's own code and
// options (GenerateLoopbackCertKey), and every later validator process is
// supplied with it. Which certificate the loopback client gets cannot
// change a verdict; the operator's tests judge specs both ways and compare.

package options

import (
	"sync"

	"k8s.io/apiserver/pkg/server"
	certutil "k8s.io/client-go/util/cert"
)

// loopbackOptions are the options ApplyTo generates the loopback
// certificate with.
func loopbackOptions() certutil.SelfSignedCertKeyOptions {
	return certutil.SelfSignedCertKeyOptions{Host: server.LoopbackClientServerNameOverride, MaxAge: maxAge}
}

// GenerateLoopbackCertKey generates a loopback certificate and key as
// ApplyTo does.
func GenerateLoopbackCertKey() (certPEM, keyPEM []byte, err error) {
	return certutil.GenerateSelfSignedCertKeyWithOptions(loopbackOptions())
}

var supplied struct {
	mu        sync.Mutex
	cert, key []byte
	taken     bool
}

// SupplyLoopbackCertKey hands ApplyTo the loopback certificate and key to
// use, once.
func SupplyLoopbackCertKey(certPEM, keyPEM []byte) {
	supplied.mu.Lock()
	defer supplied.mu.Unlock()
	supplied.cert, supplied.key = certPEM, keyPEM
}

// LoopbackCertKeyTaken reports whether ApplyTo took the supplied ones.
func LoopbackCertKeyTaken() bool {
	supplied.mu.Lock()
	defer supplied.mu.Unlock()
	return supplied.taken
}

// generateLoopbackCertKey stands for upstream's call: the supplied
// certificate when asked for exactly the loopback's options, else
// upstream's generation.
func generateLoopbackCertKey(opts certutil.SelfSignedCertKeyOptions) ([]byte, []byte, error) {
	want := loopbackOptions()
	supplied.mu.Lock()
	defer supplied.mu.Unlock()
	if supplied.cert != nil && !supplied.taken && opts.Host == want.Host && opts.MaxAge == want.MaxAge &&
		len(opts.AlternateIPs) == 0 && len(opts.AlternateDNS) == 0 && opts.FixtureDirectory == "" {
		supplied.taken = true
		return supplied.cert, supplied.key, nil
	}
	return certutil.GenerateSelfSignedCertKeyWithOptions(opts)
}
