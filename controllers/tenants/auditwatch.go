package tenants

import (
	"bytes"
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/controllers/tenantwatch"
)

// runningAPIServers are the apiserver pods that run, by name, ready or
// not: a pod whose readiness flaps keeps where its counts stood.
func runningAPIServers(pods []corev1.Pod) []tenantwatch.Server {
	var out []tenantwatch.Server
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || podEnded(pod) || pod.Status.PodIP == "" {
			continue
		}
		out = append(out, tenantwatch.Server{Pod: pod.Name, IP: pod.Status.PodIP, Ready: true})
	}
	slices.SortFunc(out, func(a, b tenantwatch.Server) int { return strings.Compare(a.Pod, b.Pod) })
	return out
}

// reconcileAudit is the pass's step for the AuditDelivered condition:
// what the audit watch last found of the pods the pass finds, or else a
// read of the pass's own (new pods), which the watch then compares its
// reads with.
func (r *Reconciler) reconcileAudit(ctx context.Context, p *pass) error {
	key := client.ObjectKeyFromObject(p.cfg)
	if p.cfg.Spec.Audit.Webhook == nil || ptr.Deref(p.cfg.Spec.MasterCount, 1) == 0 {
		p.obs.audit = &tenantwatch.AuditDecision{}
		r.forgetAudit(key)
		return nil
	}
	pods := runningAPIServers(p.pods)
	var read tenantwatch.AuditReader
	if len(pods) > 0 {
		api, err := r.connect(ctx, p)
		if err == nil {
			read = func(ctx context.Context, podIP string) (apiserver.AuditErrors, error) {
				data, err := api.Metrics(ctx, podIP, apiserver.AuditErrorsMetric)
				if err != nil {
					return nil, err
				}
				return apiserver.ParseAuditErrors(bytes.NewReader(data))
			}
		}
	}
	var look, before tenantwatch.AuditLook
	ok := false
	if r.memory.auditWatch != nil {
		look, before, ok = r.memory.auditWatch.Recent(key, pods, p.now)
	}
	if !ok {
		if read != nil {
			look = tenantwatch.ReadAudit(ctx, pods, read, before, nil)
			look.At = p.now // the pass's clock, which recent compares with
			tenantwatch.CountAuditLoss(key, look)
		} else {
			// Not read: what was read before stays to compare with.
			look = tenantwatch.AuditLook{Counts: before.Counts, At: p.now}
		}
	}
	d := tenantwatch.DecideAudit(pods, look)
	if r.memory.auditWatch != nil {
		r.memory.auditWatch.Record(key, pods, read, look, d)
	}
	if d.Status == metav1.ConditionFalse {
		if prev := meta.FindStatusCondition(p.before.Status.Conditions, v1alpha1.ConditionAuditDelivered); prev == nil || prev.Status != metav1.ConditionFalse {
			r.event(p.cfg, corev1.EventTypeWarning, d.Reason, "Audit", "%s", d.Message)
		}
	}
	p.obs.audit = &d
	return nil
}

func (r *Reconciler) forgetAudit(key types.NamespacedName) {
	if r.memory.auditWatch != nil {
		r.memory.auditWatch.Forget(key)
	}
	tenantwatch.AuditEventsLost.DeletePartialMatch(map[string]string{"namespace": key.Namespace, "name": key.Name})
}

// auditCondition is AuditDelivered as d decided it.
func auditCondition(d tenantwatch.AuditDecision, generation int64) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.ConditionAuditDelivered, Status: d.Status, Reason: d.Reason, Message: d.Message, ObservedGeneration: generation}
}
