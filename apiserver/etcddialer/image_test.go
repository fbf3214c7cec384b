package etcddialer_test

import (
	"strings"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/etcddialer"
)

// TestTheOperatorRunsThisVersion: the image the operator renders for the
// sidecar is tagged with the dialer's Version.
func TestTheOperatorRunsThisVersion(t *testing.T) {
	if !strings.HasSuffix(apiserver.DefaultEtcdDialerImage, ":"+etcddialer.Version) || apiserver.EtcdDialerVersion != etcddialer.Version {
		t.Fatalf("the operator renders the sidecar image %s, but the dialer is %s: set apiserver.EtcdDialerVersion to %q", apiserver.DefaultEtcdDialerImage, etcddialer.Version, etcddialer.Version)
	}
}

// TestTheOperatorGivesTheFilterItsAddresses: the environment the operator
// renders for the sidecar is the one its egress filter reads.
func TestTheOperatorGivesTheFilterItsAddresses(t *testing.T) {
	if apiserver.EgressHostIPsEnv != etcddialer.HostIPsEnv || apiserver.EgressPodIPsEnv != etcddialer.PodIPsEnv {
		t.Fatalf("the operator renders $%s and $%s for the sidecar, but its filter reads $%s and $%s",
			apiserver.EgressHostIPsEnv, apiserver.EgressPodIPsEnv, etcddialer.HostIPsEnv, etcddialer.PodIPsEnv)
	}
}
