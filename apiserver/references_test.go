package apiserver

import (
	"strings"
	"testing"
)

// TestCheckWebhookKubeconfig_RefusesFilesAndCommands: a webhook kubeconfig
// may call a server with inline credentials only; every way it could make
// kube-apiserver read a file of its pod or run a command is refused, by
// name, with what to use instead.
func TestCheckWebhookKubeconfig_RefusesFilesAndCommands(t *testing.T) {
	const head = `apiVersion: v1
kind: Config
current-context: hook
contexts:
- name: hook
  context: {cluster: hook, user: apiserver}
`
	inline := head + `clusters:
- name: hook
  cluster: {server: "https://hook.example.com", certificate-authority-data: Zm9v}
users:
- name: apiserver
  user: {token: secret-token}
`
	if err := CheckWebhookKubeconfig([]byte(inline)); err != nil {
		t.Fatalf("a kubeconfig with inline credentials: %v", err)
	}
	for name, tt := range map[string]struct{ cluster, user, says string }{
		"a CA file":             {`{server: "https://h", certificate-authority: /etc/kubernetes/pki/ca.crt}`, `{token: t}`, `cluster "hook" reads certificate-authority from a file: use certificate-authority-data`},
		"a token file":          {`{server: "https://h"}`, `{tokenFile: /etc/kubernetes/pki/sa.key}`, `user "apiserver" reads tokenFile from a file: use token`},
		"a client key file":     {`{server: "https://h"}`, `{client-certificate-data: Zm9v, client-key: /etc/kubernetes/pki/etcd/tls.key}`, `user "apiserver" reads client-key from a file: use client-key-data`},
		"a client cert file":    {`{server: "https://h"}`, `{client-certificate: /etc/kubernetes/pki/apiserver.crt, client-key-data: Zm9v}`, `user "apiserver" reads client-certificate from a file`},
		"a command":             {`{server: "https://h"}`, `{exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "cat /etc/kubernetes/pki/sa.key"], interactiveMode: Never}}`, `user "apiserver" runs a command (exec)`},
		"an auth provider":      {`{server: "https://h"}`, `{auth-provider: {name: oidc, config: {idp-issuer-url: "https://i"}}}`, `auth-provider plugin "oidc"`},
		"not even a kubeconfig": {"", "", "it is not a kubeconfig"},
		"a server in the clear": {`{server: "http://hook.example.com"}`, `{token: t}`, `is not an https:// URL`},
	} {
		data := head + "clusters:\n- name: hook\n  cluster: " + tt.cluster + "\nusers:\n- name: apiserver\n  user: " + tt.user + "\n"
		if tt.cluster == "" {
			data = "{{{"
		}
		err := CheckWebhookKubeconfig([]byte(data))
		if err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tt.says)
		}
	}
	// What kube-apiserver could not load: nothing, or no context to use.
	for name, data := range map[string]string{
		"an empty kubeconfig":   "apiVersion: v1\nkind: Config\n",
		"no current context":    strings.Replace(inline, "current-context: hook\n", "", 1),
		"a context not defined": strings.Replace(inline, "current-context: hook", "current-context: other", 1),
	} {
		if err := CheckWebhookKubeconfig([]byte(data)); err == nil || !strings.Contains(err.Error(), "kube-apiserver could not load it") {
			t.Errorf("%s: %v, want an error saying that kube-apiserver could not load it", name, err)
		}
	}
}
