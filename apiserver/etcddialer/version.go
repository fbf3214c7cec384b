package etcddialer

// Version tags the dialer's image (apiserver.EtcdDialerVersion repeats
// it). A tag names one content for good, and pods whose sidecar did not
// change are not rolled when the operator is upgraded: bump Version (and
// apiserver.EtcdDialerVersion) with every change of the dialer's code, and
// set CodeHash to what TestVersionFollowsTheCode prints.
const Version = "v1"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "8b04f7790cc8f4a1845a98eda7eb63e13b4157ac90d8b3e6db30e20ec3309a4e"
