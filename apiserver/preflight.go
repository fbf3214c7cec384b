package apiserver

import (
	"fmt"
	"io"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// The pre-flight of a minor upgrade: kube-apiserver counts, in its own
// metrics, the requests clients make to deprecated APIs and the release
// that removes each (apiserver_requested_deprecated_apis, label
// removed_release). Before a minor upgrade the operator reads them from
// the running apiservers: a client still calling an API the target no
// longer serves would break at the upgrade, so the upgrade waits.

// AllowRemovedAPICallsAnnotation, set to the target version, lets an
// upgrade to that version go ahead although clients called APIs it no
// longer serves. Naming the version keeps the acknowledgement from
// carrying over to the next upgrade.
const AllowRemovedAPICallsAnnotation = "controlplane.apiserver-operator.dev/allow-removed-api-calls"

// RemovedAPICalls are the calls one kind of request made to an API that a
// release removes.
type RemovedAPICalls struct {
	Group, Version, Resource string
	// RemovedRelease is the minor that no longer serves it, "1.37".
	RemovedRelease string
	// Requests is how many requests the apiservers served for it since
	// they started (apiserver_request_total, summed).
	Requests int64
}

// String is "networking.k8s.io/v1beta1/ipaddresses (removed in 1.37, 12 requests)".
func (c RemovedAPICalls) String() string {
	gv := c.Version
	if c.Group != "" {
		gv = c.Group + "/" + c.Version
	}
	return fmt.Sprintf("%s/%s (removed in %s, %d requests)", gv, c.Resource, c.RemovedRelease, c.Requests)
}

func (c RemovedAPICalls) key() string { return c.Group + "/" + c.Version + "/" + c.Resource }

// The metric families ParseRemovedAPICalls reads: all an apiserver's
// /metrics needs to hold for it (RemovedAPIMetrics).
const (
	deprecatedAPIsMetric = "apiserver_requested_deprecated_apis"
	requestsMetric       = "apiserver_request_total"
)

// RemovedAPIMetrics are the metric families ParseRemovedAPICalls reads:
// the operator reads no other of an apiserver's /metrics.
var RemovedAPIMetrics = []string{deprecatedAPIsMetric, requestsMetric}

// ParseRemovedAPICalls reads the deprecated APIs clients requested, with
// the number of requests each got, from the /metrics of one apiserver.
func ParseRemovedAPICalls(metrics io.Reader) ([]RemovedAPICalls, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(metrics)
	if err != nil {
		return nil, fmt.Errorf("parsing kube-apiserver's metrics: %w", err)
	}
	calls := map[string]*RemovedAPICalls{}
	if f := families[deprecatedAPIsMetric]; f != nil {
		for _, m := range f.GetMetric() {
			l := metricLabels(m)
			if l["removed_release"] == "" || m.GetGauge().GetValue() == 0 {
				continue
			}
			c := RemovedAPICalls{Group: l["group"], Version: l["version"], Resource: l["resource"], RemovedRelease: l["removed_release"]}
			calls[c.key()] = &c
		}
	}
	if f := families[requestsMetric]; f != nil {
		for _, m := range f.GetMetric() {
			l := metricLabels(m)
			if c := calls[l["group"]+"/"+l["version"]+"/"+l["resource"]]; c != nil {
				c.Requests += int64(m.GetCounter().GetValue())
			}
		}
	}
	out := make([]RemovedAPICalls, 0, len(calls))
	for _, c := range calls {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out, nil
}

func metricLabels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// MergeRemovedAPICalls adds up what several apiservers saw.
func MergeRemovedAPICalls(lists ...[]RemovedAPICalls) []RemovedAPICalls {
	byKey := map[string]*RemovedAPICalls{}
	for _, list := range lists {
		for _, c := range list {
			if have := byKey[c.key()]; have != nil {
				have.Requests += c.Requests
				continue
			}
			cp := c
			byKey[c.key()] = &cp
		}
	}
	out := make([]RemovedAPICalls, 0, len(byKey))
	for _, c := range byKey {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// RemovedBy keeps the calls to APIs that target (a version) no longer
// serves: removed at or before its minor.
func RemovedBy(calls []RemovedAPICalls, target string) []RemovedAPICalls {
	t, err := utilversion.ParseGeneric(target)
	if err != nil {
		return nil
	}
	var out []RemovedAPICalls
	for _, c := range calls {
		r, err := utilversion.ParseGeneric(c.RemovedRelease)
		if err != nil {
			continue
		}
		if r.Major() < t.Major() || (r.Major() == t.Major() && r.Minor() <= t.Minor()) {
			out = append(out, c)
		}
	}
	return out
}

// TotalRequests adds up the requests of calls.
func TotalRequests(calls []RemovedAPICalls) int64 {
	var n int64
	for _, c := range calls {
		n += c.Requests
	}
	return n
}

// DescribeRemovedAPICalls lists calls for a condition message.
func DescribeRemovedAPICalls(calls []RemovedAPICalls) string {
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = c.String()
	}
	return strings.Join(parts, ", ")
}

// IsMinorUpgrade reports whether going from running to desired changes
// the minor version upwards.
func IsMinorUpgrade(running, desired string) bool {
	r, err1 := utilversion.ParseSemantic(running)
	d, err2 := utilversion.ParseSemantic(desired)
	if err1 != nil || err2 != nil {
		return false
	}
	return d.Major() > r.Major() || (d.Major() == r.Major() && d.Minor() > r.Minor())
}
