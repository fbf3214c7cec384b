package apiserver

import (
	"strings"
	"testing"
)

// A piece of kube-apiserver's /metrics, in its own format: two deprecated
// APIs requested (one removed in 1.37, one in 1.41), and the requests each
// group/version/resource got, by verb and code.
const sampleMetrics = `# HELP apiserver_requested_deprecated_apis [STABLE] Gauge of deprecated APIs that have been requested, broken out by API group, version, resource, subresource, and removed_release.
# TYPE apiserver_requested_deprecated_apis gauge
apiserver_requested_deprecated_apis{group="networking.k8s.io",removed_release="1.37",resource="ipaddresses",subresource="",version="v1beta1"} 1
apiserver_requested_deprecated_apis{group="storagemigration.k8s.io",removed_release="1.41",resource="storageversionmigrations",subresource="",version="v1beta1"} 1
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="networking.k8s.io",resource="ipaddresses",scope="cluster",subresource="",verb="LIST",version="v1beta1"} 7
apiserver_request_total{code="404",component="apiserver",dry_run="",group="networking.k8s.io",resource="ipaddresses",scope="resource",subresource="",verb="GET",version="v1beta1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="networking.k8s.io",resource="ipaddresses",scope="cluster",subresource="",verb="LIST",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="storagemigration.k8s.io",resource="storageversionmigrations",scope="cluster",subresource="",verb="LIST",version="v1beta1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 100
`

func TestRemovedAPICalls_FromTheApiserversMetrics(t *testing.T) {
	calls, err := ParseRemovedAPICalls(strings.NewReader(sampleMetrics))
	if err != nil {
		t.Fatal(err)
	}
	if got := DescribeRemovedAPICalls(calls); got != "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 9 requests), storagemigration.k8s.io/v1beta1/storageversionmigrations (removed in 1.41, 3 requests)" {
		t.Fatalf("parsed %s", got)
	}
	// Two apiservers, each counting its own requests.
	both := MergeRemovedAPICalls(calls, calls)
	for _, tc := range []struct {
		target string
		want   string
	}{
		{"v1.36.4", ""},
		{"v1.37.1", "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 18 requests)"},
		{"v1.38.0", "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 18 requests)"},
		{"v1.41.0", "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 18 requests), storagemigration.k8s.io/v1beta1/storageversionmigrations (removed in 1.41, 6 requests)"},
		{"v2.0.0", "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 18 requests), storagemigration.k8s.io/v1beta1/storageversionmigrations (removed in 1.41, 6 requests)"},
	} {
		removed := RemovedBy(both, tc.target)
		if got := DescribeRemovedAPICalls(removed); got != tc.want {
			t.Errorf("removed by %s: %q, want %q", tc.target, got, tc.want)
		}
	}
	if n := TotalRequests(RemovedBy(both, "v1.41.0")); n != 24 {
		t.Errorf("TotalRequests = %d, want 24", n)
	}
	none, err := ParseRemovedAPICalls(strings.NewReader("# TYPE apiserver_request_total counter\n" +
		`apiserver_request_total{code="200",group="",resource="pods",verb="LIST",version="v1"} 5` + "\n"))
	if err != nil || len(none) != 0 {
		t.Fatalf("metrics without deprecated requests: %v, %v", none, err)
	}
	if _, err := ParseRemovedAPICalls(strings.NewReader("not { metrics")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestIsMinorUpgrade(t *testing.T) {
	for _, tc := range []struct {
		running, desired string
		want             bool
	}{
		{"v1.36.4", "v1.37.1", true}, {"v1.37.0", "v1.37.1", false}, {"v1.37.1", "v1.37.1", false},
		{"v1.37.1", "v1.36.4", false}, {"", "v1.37.1", false}, {"v1.37.1", "v2.0.0", true},
	} {
		if got := IsMinorUpgrade(tc.running, tc.desired); got != tc.want {
			t.Errorf("IsMinorUpgrade(%q, %q) = %t", tc.running, tc.desired, got)
		}
	}
}
