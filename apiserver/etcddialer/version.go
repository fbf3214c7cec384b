package etcddialer

// Version tags the dialer's image (apiserver.EtcdDialerVersion repeats
// it). A tag names one content for good, and pods whose sidecar did not
// change are not rolled when the operator is upgraded: bump Version (and
// apiserver.EtcdDialerVersion) with every change of the dialer's code, and
// set CodeHash to what TestVersionFollowsTheCode prints.
const Version = "v3"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "b82c5dc6c71b710d718a272d23cf5debfe8bfac02319604d90bd2a3d01c8c151"
