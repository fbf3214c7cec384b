// Package tenantwatch holds the tenant reconciler's watches that run
// between passes, each a tenantmemory.Watch: the etcd watch (every etcd
// server the tenants use, once per server and client identity, over kept
// connections), the konnectivity-agent watch (the agents each apiserver's
// konnectivity server holds, and the tenant's nodes when a ready server
// holds none) and the audit watch (the audit events the apiservers lost).
// Each brings a tenant back only when what it finds differs from what the
// tenant's last pass saw, and decides the condition it reports
// (DecideAgents, DecideAudit) the same way the pass does.
package tenantwatch
