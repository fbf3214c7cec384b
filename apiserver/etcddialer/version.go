package etcddialer

// Version tags the dialer's image (apiserver.EtcdDialerVersion repeats
// it). A tag names one content for good, and pods whose sidecar did not
// change are not rolled when the operator is upgraded: bump Version (and
// apiserver.EtcdDialerVersion) with every change of the dialer's code, and
// set CodeHash to what TestVersionFollowsTheCode prints.
const Version = "v4"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "23c70750c188ab0b5384499fe6b67e9141714ba70968ac170d945917de1d5e74"
