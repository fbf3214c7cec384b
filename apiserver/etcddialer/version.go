package etcddialer

// Version tags the dialer's image (apiserver.DefaultEtcdDialerImage). A tag
// names one content for good, and pods whose sidecar did not change are
// not rolled when the operator is upgraded: bump Version with every change
// of the dialer's code, and set CodeHash to what TestVersionFollowsTheCode
// prints.
const Version = "v1"

// CodeHash is the SHA-256 of the dialer's code when Version was set: its
// Go files, tests and this file excepted, in path order.
const CodeHash = "23b46b7eda55665fd4e010bb0885b625bca6e36207967b27b62cf38206a7da51"
