// Package backups is the backup reconciler and its engines: it takes each
// ApiServerBackup once (every key under the tenant's prefix, with the
// Secrets that read it, sealed for the backup's own identity) into the
// places the platform allows (ArchivePlaces: the backup volume, S3);
// ScheduleReconciler takes them on a schedule and keeps the newest; and
// Restorer is the restore engine the tenant reconciler's restore step
// runs, off the reconcile workers. It imports no other reconciler: how a
// tenant's etcd is reached is passed in (EtcdTLS).
package backups
