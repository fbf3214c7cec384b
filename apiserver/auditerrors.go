package apiserver

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// AuditErrorsMetric counts, by plugin, the audit events kube-apiserver
// could not record (k8s.io/apiserver's pkg/audit): "webhook", events the
// webhook refused or did not take; "buffered", events dropped from a full
// buffer or never sent before shutdown; "truncate", events cut for their
// size; "log", events the log could not take.
const AuditErrorsMetric = "apiserver_audit_error_total"

// AuditErrors are an apiserver's counts of AuditErrorsMetric, by plugin.
type AuditErrors map[string]float64

// ParseAuditErrors reads AuditErrorsMetric from the /metrics of one
// apiserver. A series that is not a whole, non-negative count is an error:
// it cannot say how many events were lost. An apiserver that lost nothing
// has no series.
func ParseAuditErrors(metrics io.Reader) (AuditErrors, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(metrics)
	if err != nil {
		return nil, fmt.Errorf("parsing kube-apiserver's metrics: %w", err)
	}
	out := AuditErrors{}
	f := families[AuditErrorsMetric]
	if f == nil {
		return out, nil
	}
	for _, m := range f.GetMetric() {
		v := m.GetCounter().GetValue()
		if m.GetCounter() == nil || v < 0 || v != float64(int64(v)) {
			return nil, fmt.Errorf("parsing kube-apiserver's metrics: %s{%v} is not a count of events", AuditErrorsMetric, metricLabels(m))
		}
		plugin := metricLabels(m)["plugin"]
		if _, ok := auditPluginWords[plugin]; !ok {
			// An apiserver of the tenant's own image may name anything:
			// the operator's metric and status do not take its words.
			plugin = "other"
		}
		out[plugin] += v
	}
	return out, nil
}

// auditPluginWords say what happened to the events each plugin lost.
var auditPluginWords = map[string]string{
	"webhook":  "not taken by the webhook",
	"buffered": "dropped from a full buffer",
	"truncate": "cut for their size",
	"log":      "not written to the log",
	"other":    "lost by another audit plugin",
}

// Since are the events lost since before, the counts of the same
// apiserver earlier: a count below before's is of a restarted
// kube-apiserver, whose counts started again from 0.
func (e AuditErrors) Since(before AuditErrors) AuditErrors {
	out := AuditErrors{}
	for plugin, v := range e {
		d := v - before[plugin]
		if d < 0 {
			d = v // counted again from 0
		}
		if d > 0 {
			out[plugin] = d
		}
	}
	return out
}

// Total is the number of events lost, all plugins together.
func (e AuditErrors) Total() float64 {
	var n float64
	for _, v := range e {
		n += v
	}
	return n
}

// String says what was lost, plugin by plugin, in the words of what
// happened: "3 not taken by the webhook, 10 dropped from a full buffer".
func (e AuditErrors) String() string {
	var parts []string
	for _, plugin := range slices.Sorted(maps.Keys(e)) {
		parts = append(parts, fmt.Sprintf("%d %s", int64(e[plugin]), auditPluginWords[plugin]))
	}
	return strings.Join(parts, ", ")
}
