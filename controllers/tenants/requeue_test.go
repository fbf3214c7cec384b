package tenants

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRequeueWithin_KeepsWhatWasAskedWhateverCameBefore(t *testing.T) {
	for _, tc := range []struct {
		name string
		asks []time.Duration
		want time.Duration
	}{
		{"one short wait", []time.Duration{time.Millisecond}, time.Millisecond},
		{"short after long", []time.Duration{5 * time.Second, time.Millisecond}, time.Millisecond},
		{"long after short", []time.Duration{time.Millisecond, 5 * time.Second}, time.Millisecond},
		{"a deadline already past", []time.Duration{-time.Minute}, overdueRequeue},
		{"a past deadline after a short wait", []time.Duration{time.Millisecond, -time.Minute}, time.Millisecond},
		{"a short wait after a past deadline", []time.Duration{0, time.Millisecond}, time.Millisecond},
		{"a long wait after a past deadline", []time.Duration{-time.Minute, time.Hour}, overdueRequeue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pass{}
			for _, d := range tc.asks {
				p.requeueWithin(d)
			}
			if p.requeue != tc.want {
				t.Fatalf("after asking for %v the next pass comes in %v, want %v", tc.asks, p.requeue, tc.want)
			}
		})
	}
}

func TestTrackSigner_ADueCABringsNoPassEverySecond(t *testing.T) {
	now := time.Now()
	// Renewal reads only a certificate's validity.
	ca := &x509.Certificate{NotBefore: now.Add(-9 * time.Hour), NotAfter: now.Add(time.Hour)} // 90% of its life is gone
	res := &pkiResult{}
	res.trackSigner("ca", ca, 80)
	leaf := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(9 * time.Hour)}
	res.track("serving", leaf, 80)
	if want := leaf.NotBefore.Add(8 * time.Hour); !res.nextRenewal.Equal(want) {
		t.Fatalf("the next renewal is %v, want the serving certificate's %v: a CA no pass renews counted", res.nextRenewal, want)
	}
	if len(res.certificates) != 2 {
		t.Fatalf("status reports %d certificates, want both", len(res.certificates))
	}
}
