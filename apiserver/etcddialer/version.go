package etcddialer

// Version tags the dialer's image (apiserver.DefaultEtcdDialerImage). A tag
// names one content for good, and pods whose sidecar did not change are
// not rolled when the operator is upgraded: bump Version with every change
// of the dialer's code, and set CodeHash to what TestVersionFollowsTheCode
// prints.
const Version = "v1"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "ca8bfa97fc806ca687777a313e3cd890e4b1b51ded75e4c289dc79fc190919ea"
