package etcddialer

// Version tags the dialer's image (apiserver.DefaultEtcdDialerImage). A tag
// names one content for good, and pods whose sidecar did not change are
// not rolled when the operator is upgraded: bump Version with every change
// of the dialer's code, and set CodeHash to what TestVersionFollowsTheCode
// prints.
const Version = "v1"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "9cfdb4746df2fd3935df515d8c15a06acfb5997786ffdf6f822c39a2df78e635"
