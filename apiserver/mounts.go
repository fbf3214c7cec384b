package apiserver

import (
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// MountedObject is one Secret or ConfigMap whose keys kube-apiserver reads
// as files. MountedObjects is the one table of them: the pod's volumes, the
// hash that rolls the pods, the files the validator is given and the owned
// Secrets all derive from it.
type MountedObject struct {
	// Volume is the pod volume that carries the object (podVolumeDirs).
	Volume string
	// Kind is KindSecret or KindConfigMap; Name the object's name.
	Kind string
	Name string
	// Owned objects are written by the operator; the others are the
	// user's, named by the spec.
	Owned bool
	// WholeObject projects every key of the object under its own name;
	// Files then lists those kube-apiserver reads.
	WholeObject bool
	Files       []MountedFile
	// Named: every key of the object besides Files is a file too, read
	// by kube-apiserver because one of Files names it, in kubelet's
	// ..data directory of the volume (the kubeconfigs of the
	// authorization webhooks, AuthorizationKubeconfigDir). WholeObject
	// only.
	Named bool
}

// MountedFile is one key of a MountedObject and where it lands.
type MountedFile struct {
	Key string
	// Path is the file's absolute path in the container.
	Path string
	// HotReloaded files are re-read by kube-apiserver about every minute
	// without a restart (the serving certificate and key, the client CA,
	// the request-header CA): a change of them rolls no pod.
	HotReloaded bool
}

// podVolumeDirs are the pod's volumes in order and where they are mounted;
// a volume that carries several objects is projected.
var podVolumeDirs = []struct {
	name, dir string
	projected bool
}{
	{"pki", PKIDir, true},
	{"config", ConfigDir, true},
	{auditLogVolume, AuditLogDir, false},
	{etcdDialerVolume, EtcdDialerDir, false},
	{"encryption", path.Dir(EncryptionConfigFile), false},
	{"authz-webhook", path.Dir(AuthorizationWebhookKubeconfigFile), false},
	{"audit-webhook", path.Dir(AuditWebhookKubeconfigFile), false},
	{"oidc-ca", path.Dir(OIDCCAFile), false},
	{"authorization", AuthorizationDir, false},
	// With spec.konnectivity only: the server's socket, and its own
	// files, which only its container mounts (konnectivityServer).
	{konnectivitySocketVolume, KonnectivityDir, false},
	{konnectivityServerVolume, KonnectivityServerDir, true},
}

// auditLogVolume is an emptyDir, not an object: the audit log is rotated by
// size in the pod and kept across container restarts.
const auditLogVolume = "audit-log"

// etcdDialerVolume is the emptyDir of the etcd dialer's socket: written by
// the dialer sidecar, read-only for kube-apiserver (connecting to a socket
// needs no write access to its file system).
const etcdDialerVolume = "etcd-dialer"

// MountedObjects are the objects c's pods mount, in the order of their
// volumes.
func MountedObjects(c *Completed) []MountedObject {
	n := c.Name
	secret := func(name string, owned bool, files ...MountedFile) MountedObject {
		return MountedObject{Volume: "pki", Kind: KindSecret, Name: name, Owned: owned, Files: files}
	}
	file := func(key, path string) MountedFile { return MountedFile{Key: key, Path: path} }
	reloaded := func(key, path string) MountedFile { return MountedFile{Key: key, Path: path, HotReloaded: true} }
	out := []MountedObject{
		secret(CASecretName(n), true, reloaded(CABundleKey, CAFile)),
		secret(ServingSecretName(n), true, reloaded(corev1.TLSCertKey, ServingCertFile), reloaded(corev1.TLSPrivateKeyKey, ServingKeyFile)),
		secret(KubeletClientSecretName(n), true, file(corev1.TLSCertKey, KubeletClientCertFile), file(corev1.TLSPrivateKeyKey, KubeletClientKeyFile)),
		secret(FrontProxyCASecretName(n), true, reloaded(CABundleKey, FrontProxyCAFile)),
		secret(FrontProxyClientSecretName(n), true, file(corev1.TLSCertKey, FrontProxyClientCertFile), file(corev1.TLSPrivateKeyKey, FrontProxyClientKeyFile)),
		secret(ServiceAccountSecretName(n), true, file(ServiceAccountPrivateKeyKey, ServiceAccountSigningKeyFile), file(ServiceAccountPublicKeysKey, ServiceAccountKeyFile)),
	}
	if tls := c.Spec.Etcd.TLS; tls != nil {
		// The operator's own for a tenant of a datastore (Completed.EtcdUser).
		out = append(out, secret(tls.SecretName, c.EtcdUser != "", file(tls.CAKey, EtcdCAFile), file(tls.CertKey, EtcdCertFile), file(tls.KeyKey, EtcdKeyFile)))
	}
	config := MountedObject{Volume: "config", Kind: KindConfigMap, Name: ConfigMapName(n), Owned: true, WholeObject: true,
		Files: []MountedFile{file(AuthenticationConfigKey, AuthenticationConfigFile), file(EgressSelectorConfigKey, EgressSelectorConfigFile)}}
	audit := MountedObject{Volume: "config", Kind: KindConfigMap, Name: c.Spec.Audit.PolicyConfigMapName, Files: []MountedFile{file("policy.yaml", AuditPolicyFile)}}
	if audit.Name == "" {
		config.Files = append(config.Files, file(AuditPolicyKey, AuditPolicyFile))
	}
	if usesAdmissionConfig(c) {
		config.Files = append(config.Files, file(AdmissionConfigKey, AdmissionConfigFile))
	}
	out = append(out, config)
	if audit.Name != "" {
		out = append(out, audit)
	}
	if e := c.Spec.Encryption; e != nil {
		o := MountedObject{Volume: "encryption", Kind: KindSecret, Name: EncryptionSecretName(n), Owned: true,
			Files: []MountedFile{file(EncryptionConfigKey, EncryptionConfigFile)}}
		if e.ConfigSecretName != "" {
			o.Name, o.Owned = e.ConfigSecretName, false
		}
		out = append(out, o)
	}
	if w := c.Spec.Authorization.Webhook; w != nil {
		out = append(out, MountedObject{Volume: "authz-webhook", Kind: KindSecret, Name: w.KubeconfigSecretName,
			Files: []MountedFile{file("kubeconfig", AuthorizationWebhookKubeconfigFile)}})
	}
	if usesAuthorizers(c) {
		// Reloaded by kube-apiserver with the kubeconfigs it names, in
		// the same Secret: kubelet updates them at once.
		out = append(out, MountedObject{Volume: "authorization", Kind: KindSecret, Name: AuthorizationSecretName(n), Owned: true, WholeObject: true, Named: true,
			Files: []MountedFile{reloaded(AuthorizationConfigKey, AuthorizationConfigFile)}})
	}
	if w := c.Spec.Audit.Webhook; w != nil {
		// Read once, when kube-apiserver builds its audit backend.
		out = append(out, MountedObject{Volume: "audit-webhook", Kind: KindSecret, Name: w.KubeconfigSecretName,
			Files: []MountedFile{file("kubeconfig", AuditWebhookKubeconfigFile)}})
	}
	if usesKonnectivity(c) {
		// kube-apiserver's certificate for the agents
		// (--tls-sni-cert-key): upstream's SNI certificates are
		// dynamiccertificates.NewDynamicSNIContentFromFiles, whose
		// controller watches the files and reads them again at least
		// every minute, as for the serving certificate.
		out = append(out, secret(KonnectivityAPIServerSecretName(n), true,
			reloaded(corev1.TLSCertKey, KonnectivityAPIServerCertFile), reloaded(corev1.TLSPrivateKeyKey, KonnectivityAPIServerKeyFile)))
		// The konnectivity server reads its files only at start.
		in := func(kind, name string, files ...MountedFile) MountedObject {
			return MountedObject{Volume: konnectivityServerVolume, Kind: kind, Name: name, Owned: true, Files: files}
		}
		out = append(out,
			in(KindSecret, KonnectivityServerSecretName(n), file(corev1.TLSCertKey, KonnectivityAgentServingCertFile), file(corev1.TLSPrivateKeyKey, KonnectivityAgentServingKeyFile)),
			in(KindSecret, KonnectivityClientSecretName(n), file(corev1.TLSCertKey, KonnectivityClientCertFile), file(corev1.TLSPrivateKeyKey, KonnectivityClientKeyFile), file(CABundleKey, KonnectivityCAFile)),
			in(KindConfigMap, ConfigMapName(n), file(KonnectivityServerKubeconfigKey, KonnectivityKubeconfigFile)))
	}
	if o := c.Spec.Authentication.OIDC; o != nil && o.CAConfigMapName != "" && !usesAuthenticationConfig(c) {
		// With an AuthenticationConfiguration the CA is inlined there.
		out = append(out, MountedObject{Volume: "oidc-ca", Kind: KindConfigMap, Name: o.CAConfigMapName,
			Files: []MountedFile{file("ca.crt", OIDCCAFile)}})
	}
	return out
}

// ObjectData finds the data of a mounted object; nil for one it does not
// know.
type ObjectData func(kind, name string) map[string][]byte

// ObjectsData finds data among secrets and configMaps (nil entries are
// skipped).
func ObjectsData(secrets []*corev1.Secret, configMaps ...*corev1.ConfigMap) ObjectData {
	return func(kind, name string) map[string][]byte {
		switch kind {
		case KindSecret:
			for _, s := range secrets {
				if s != nil && s.Name == name {
					return s.Data
				}
			}
		case KindConfigMap:
			for _, cm := range configMaps {
				if cm != nil && cm.Name == name {
					data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
					for k, v := range cm.Data {
						data[k] = []byte(v)
					}
					maps.Copy(data, cm.BinaryData)
					return data
				}
			}
		}
		return nil
	}
}

// PodFiles are the contents of the files c's pods read, keyed by their
// path in the container (nil for an object data does not know).
func PodFiles(c *Completed, data ObjectData) map[string][]byte {
	files := map[string][]byte{}
	for _, o := range MountedObjects(c) {
		d := data(o.Kind, o.Name)
		for _, f := range o.Files {
			files[f.Path] = d[f.Key]
		}
		if o.Named {
			// Where the configuration names them, kubelet's ..data.
			for key, v := range d {
				if !slices.ContainsFunc(o.Files, func(f MountedFile) bool { return f.Key == key }) {
					files[volumeDir(o.Volume)+"/..data/"+key] = v
				}
			}
		}
	}
	return files
}

// volumeDir is where the pod volume name is mounted.
func volumeDir(name string) string {
	for _, v := range podVolumeDirs {
		if v.name == name {
			return v.dir
		}
	}
	return ""
}

// restartFiles are the paths of the files kube-apiserver reads only when
// it starts.
func restartFiles(c *Completed) map[string]bool {
	out := map[string]bool{}
	for _, o := range MountedObjects(c) {
		for _, f := range o.Files {
			if !f.HotReloaded {
				out[f.Path] = true
			}
		}
	}
	return out
}

// podVolumes mounts MountedObjects, the audit log's emptyDir, the etcd
// dialer's and the konnectivity server's; the mounts are kube-apiserver's,
// which has no access to the konnectivity server's own files.
func podVolumes(c *Completed) ([]corev1.Volume, []corev1.VolumeMount) {
	byVolume := map[string][]MountedObject{}
	for _, o := range MountedObjects(c) {
		byVolume[o.Volume] = append(byVolume[o.Volume], o)
	}
	var volumes []corev1.Volume
	var mounts []corev1.VolumeMount
	for _, v := range podVolumeDirs {
		objects := byVolume[v.name]
		var source corev1.VolumeSource
		switch {
		case v.name == auditLogVolume:
			source.EmptyDir = &corev1.EmptyDirVolumeSource{}
		case v.name == etcdDialerVolume, v.name == konnectivitySocketVolume && usesKonnectivity(c):
			source.EmptyDir = &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}
		case len(objects) == 0:
			continue
		case v.projected:
			projected := &corev1.ProjectedVolumeSource{}
			for _, o := range objects {
				projected.Sources = append(projected.Sources, projection(o, v.dir))
			}
			source.Projected = projected
		case objects[0].Kind == KindSecret:
			source.Secret = &corev1.SecretVolumeSource{SecretName: objects[0].Name, Items: items(objects[0], v.dir)}
			if objects[0].WholeObject {
				source.Secret.DefaultMode = ptr.To[int32](0o400)
			}
		default:
			source.ConfigMap = &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: objects[0].Name}, Items: items(objects[0], v.dir)}
		}
		volumes = append(volumes, corev1.Volume{Name: v.name, VolumeSource: source})
		if v.name != konnectivityServerVolume {
			mounts = append(mounts, corev1.VolumeMount{Name: v.name, MountPath: v.dir, ReadOnly: v.name != auditLogVolume})
		}
	}
	return volumes, mounts
}

func projection(o MountedObject, dir string) corev1.VolumeProjection {
	ref := corev1.LocalObjectReference{Name: o.Name}
	if o.Kind == KindSecret {
		return corev1.VolumeProjection{Secret: &corev1.SecretProjection{LocalObjectReference: ref, Items: items(o, dir)}}
	}
	return corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: ref, Items: items(o, dir)}}
}

// items place o's files under dir. Files from Secrets, keys and
// certificates alike, are 0400: kubelet adds read access for the pod's
// fsGroup, the group kube-apiserver runs as, and nobody else.
func items(o MountedObject, dir string) []corev1.KeyToPath {
	if o.WholeObject {
		return nil
	}
	out := make([]corev1.KeyToPath, 0, len(o.Files))
	for _, f := range o.Files {
		item := corev1.KeyToPath{Key: f.Key, Path: strings.TrimPrefix(f.Path, dir+"/")}
		if o.Kind == KindSecret {
			item.Mode = ptr.To[int32](0o400)
		}
		out = append(out, item)
	}
	return out
}
