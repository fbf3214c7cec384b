package apiserver

import (
	"strings"
	"testing"
)

// TestParseAuditErrors_CountsEventsLostByPlugin: the counts of each
// plugin, summed over series, from kube-apiserver's text format; a value
// that is not a whole, non-negative count says nothing of what was lost.
func TestParseAuditErrors_CountsEventsLostByPlugin(t *testing.T) {
	const metrics = `# HELP apiserver_audit_error_total [ALPHA] Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.
# TYPE apiserver_audit_error_total counter
apiserver_audit_error_total{plugin="buffered"} 10
apiserver_audit_error_total{plugin="webhook"} 3
apiserver_audit_error_total{plugin="truncate"} 1
`
	got, err := ParseAuditErrors(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	if got["buffered"] != 10 || got["webhook"] != 3 || got["truncate"] != 1 || got.Total() != 14 {
		t.Fatalf("counts: %v", got)
	}
	if s := got.String(); s != "10 dropped from a full buffer, 1 cut for their size, 3 not taken by the webhook" {
		t.Errorf("in words: %q", s)
	}
	if none, err := ParseAuditErrors(strings.NewReader("# TYPE apiserver_audit_event_total counter\napiserver_audit_event_total 12\n")); err != nil || len(none) != 0 {
		t.Errorf("an apiserver that lost nothing: %v, %v", none, err)
	}
	// A plugin kube-apiserver does not have (a tenant's own image may name
	// anything) is folded into "other".
	if odd, err := ParseAuditErrors(strings.NewReader("# TYPE apiserver_audit_error_total counter\napiserver_audit_error_total{plugin=\"x-very-long-name\"} 2\n")); err != nil || len(odd) != 1 || odd["other"] != 2 {
		t.Errorf("an unknown plugin: %v, %v", odd, err)
	}
	for _, bad := range []string{"-1", "2.5", "NaN"} {
		if _, err := ParseAuditErrors(strings.NewReader("# TYPE apiserver_audit_error_total counter\napiserver_audit_error_total{plugin=\"webhook\"} " + bad + "\n")); err == nil {
			t.Errorf("a count of %s was taken", bad)
		}
	}
	// Since: a restarted apiserver counts again from 0.
	before := AuditErrors{"webhook": 5, "buffered": 2}
	if d := (AuditErrors{"webhook": 7, "buffered": 2}).Since(before); len(d) != 1 || d["webhook"] != 2 {
		t.Errorf("since before: %v", d)
	}
	if d := (AuditErrors{"webhook": 1}).Since(before); len(d) != 1 || d["webhook"] != 1 {
		t.Errorf("after a restart: %v", d)
	}
	if d := (AuditErrors{"webhook": 1}).Since(nil); d["webhook"] != 1 {
		t.Errorf("a first read: %v", d)
	}
}
