package tenants

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
	"github.com/apiserver-operator/apiserver-operator/test/testport"
)

// switchableProxy forwards a port to an etcd and can be switched off (new
// connections refused, open ones cut) and on again: an etcd outage.
type switchableProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
}

func (p *switchableProxy) on(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for range 100000 { // bounded: off() ends it
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // switched off meanwhile
				p.mu.Unlock()
				_ = in.Close()
				_ = out.Close()
				continue
			}
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
			go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
		}
	}()
}

func (p *switchableProxy) off() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// An override etcd that goes away from a converged tenant changes nothing
// the operator watches (its apiservers stay ready): the etcd watch brings
// the tenant back, and status says so, then says it returned.
func TestApiServerConfigReconciler_SeesAnEtcdOutageWithoutAnyOtherEvent(t *testing.T) {
	proxy := &switchableProxy{addr: fmt.Sprintf("127.0.0.1:%d", testport.Get(t)), target: env.ControlPlane.Etcd.URL.Host}
	proxy.on(t)
	t.Cleanup(proxy.off)
	events := "http://" + proxy.addr
	ns := namespace(t, nil)
	cfg := tenant(ns, "etcdwatch", func(s *v1alpha1.ApiServerConfigSpec) {
		s.Etcd.Overrides = []v1alpha1.EtcdOverride{{Resource: "events", Servers: []string{events}}}
	})
	if err := env.Client.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	actAsDeploymentController(t, waitForDeployment(t, cfg))
	etcdIs := func(status metav1.ConditionStatus, contains string) func() error {
		return func() error {
			got := get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta})
			c := conditionOf(got, v1alpha1.ConditionEtcdAvailable)
			if c == nil || c.Status != status || !strings.Contains(c.Message, contains) {
				return fmt.Errorf("EtcdAvailable is %v", c)
			}
			if r := conditionOf(got, v1alpha1.ConditionReady); status == metav1.ConditionTrue && (r == nil || r.Status != metav1.ConditionTrue) {
				return fmt.Errorf("Ready is %v", r)
			}
			return nil
		}
	}
	eventually(t, 20*time.Second, "the tenant is Ready with its etcd reachable", etcdIs(metav1.ConditionTrue, ""))

	proxy.off()
	eventually(t, 20*time.Second, "EtcdAvailable turns False naming the events etcd", etcdIs(metav1.ConditionFalse, events))
	// Once Stalled, the operator itself looks again only after
	// etcdRetryInterval (30 s): a return seen sooner is the watch's.
	eventually(t, 20*time.Second, "the tenant stalls", func() error {
		if c := conditionOf(get(t, &v1alpha1.ApiServerConfig{ObjectMeta: cfg.ObjectMeta}), v1alpha1.ConditionStalled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("Stalled is %v", c)
		}
		return nil
	})
	proxy.on(t)
	eventually(t, 15*time.Second, "EtcdAvailable turns True again", etcdIs(metav1.ConditionTrue, ""))
}

// The kept connections: one per server across rounds against a real etcd,
// at most the bound, a failed one not kept, and none left open once the
// watch stops.
func TestEtcdConnections_KeptAndBounded(t *testing.T) {
	endpoint := env.ControlPlane.Etcd.URL.String()
	probeAll := func(conns *tenantio.Connections) {
		t.Helper()
		for _, id := range []string{"a", "b", "c"} {
			if err := conns.Probe(context.Background(), endpoint, nil, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	bounded := tenantio.NewConnections(tenantio.EtcdV3{Timeout: 2 * time.Second}, 2)
	for range 3 {
		probeAll(bounded)
		if got := bounded.Open(); got != 2 {
			t.Fatalf("%d connections kept, want the bound 2", got)
		}
	}
	bounded.Close()
	if got := bounded.Open(); got != 0 {
		t.Fatalf("%d connections open after close", got)
	}
	roomy := tenantio.NewConnections(tenantio.EtcdV3{Timeout: 2 * time.Second}, 4)
	defer roomy.Close()
	probeAll(roomy)
	if err := roomy.Probe(context.Background(), "http://127.0.0.1:1", nil, ""); err == nil {
		t.Fatal("a server nothing listens on answered")
	}
	if got := roomy.Open(); got != 3 {
		t.Fatalf("%d connections kept after a failed look, want the 3 that answered", got)
	}
}
