// Command validator judges a kube-apiserver command line with the bundled
// kube-apiserver's own code: the same flag sets, the same Complete and
// Validate, and the same configuration building (authentication,
// authorization, admission plugins with their configuration, runtime-config,
// encryption configuration, audit, feature-gate checks) that
// kube-apiserver runs before it starts serving. It stops where
// kube-apiserver would open its listener or contact etcd: it does neither.
//
// One process judges one request. It starts, initialises (the expensive
// part: the whole of kube-apiserver's package initialisation), prints
// "ready", reads one JSON request on standard input until EOF and prints
// one JSON response on standard output. kube-apiserver keeps its feature
// gates and component registry in process-global state that can be set
// only once, so a fresh process per request is the only way to judge two
// requests independently. The operator keeps one started process waiting
// per version, so a request does not pay the start-up.
//
// It is built with a copy of k8s.io/apiserver that differs from upstream's
// in one call (hack/validator-module.sh): the loopback certificate that
// kube-apiserver generates at every start-up, whatever its flags, is
// generated ahead and supplied (supplyLoopback), because that certificate's
// two RSA keys were most of a judgement's CPU.
//
// The request's files are written below a private directory that stands
// for the pod's file system: every absolute path in a path-valued flag is
// read from there, so a flag naming a file the pod would not have is
// refused, as it would be in the pod.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/egressselector"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/server/resourceconfig"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/controlplane"
	"sigs.k8s.io/yaml"
)

// request is what the operator sends: the command line as the pod runs it
// and the files the pod has, by their path in the pod.
type request struct {
	Args  []string          `json:"args"`
	Files map[string][]byte `json:"files"`
	// Env is the pod's environment, for $(VAR) references in Args (the
	// pod IP in --advertise-address).
	Env map[string]string `json:"env,omitempty"`
}

// problem is one reason kube-apiserver would refuse to start. Flags are the
// flags it concerns, as far as they can be told: named in the message, or
// known from the stage that failed.
type problem struct {
	Flags   []string `json:"flags,omitempty"`
	Message string   `json:"message"`
}

type response struct {
	Version  string    `json:"version"`
	Problems []problem `json:"problems,omitempty"`
	// Warnings are what kube-apiserver would log as a warning about its
	// configuration (deprecated flags).
	Warnings []string `json:"warnings,omitempty"`
	// SuppliedLoopback says whether upstream's start-up took the loopback
	// certificate supplied ahead (see supplyLoopback).
	SuppliedLoopback bool `json:"suppliedLoopback,omitempty"`
}

func main() {
	// Nothing in this process may reach a network address: discovery of
	// OIDC issuers starts in the background when the authenticator is
	// built, and goes through the proxy from the environment. A closed
	// loopback port makes every such attempt fail at once, without a DNS
	// look-up.
	for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
		_ = os.Setenv(k, "http://127.0.0.1:9")
	}
	_ = os.Unsetenv("NO_PROXY")
	_ = os.Unsetenv("no_proxy")

	if len(os.Args) == 2 && os.Args[1] == generateFlag {
		cert, key, err := genericoptions.GenerateLoopbackCertKey()
		if err != nil {
			fmt.Fprintf(os.Stderr, "generating the loopback certificate: %v\n", err)
			os.Exit(1)
		}
		_, _ = os.Stdout.Write(append(cert, key...))
		return
	}
	if err := supplyLoopback(); err != nil {
		fmt.Fprintf(os.Stdout, "supplying the loopback certificate: %v\n", err)
		os.Exit(1)
	}

	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	_ = out.Flush()

	// For measuring: KUBE_APISERVER_VALIDATOR_CPUPROFILE names a file for a
	// CPU profile of the judging.
	if path := os.Getenv("KUBE_APISERVER_VALIDATOR_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	var req request
	resp := response{Version: version.Get().GitVersion}
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 16<<20)).Decode(&req); err != nil {
		resp.Problems = []problem{{Message: fmt.Sprintf("reading the validation request: %v", err)}}
	} else {
		root, err := os.MkdirTemp("", "kube-apiserver-validator-")
		if err != nil {
			resp.Problems = []problem{{Message: fmt.Sprintf("creating the pod's file system: %v", err)}}
		} else {
			resp.Problems, resp.Warnings = judge(req, root)
			_ = os.RemoveAll(root)
			// Paths are reported as the pod sees them.
			for i := range resp.Problems {
				resp.Problems[i].Message = strings.ReplaceAll(resp.Problems[i].Message, root, "")
			}
		}
	}
	resp.SuppliedLoopback = genericoptions.LoopbackCertKeyTaken()
	_ = json.NewEncoder(out).Encode(resp)
	_ = out.Flush()
}

// loopbackEnv names a file with a loopback certificate and key (PEM) that
// the validator hands to upstream's start-up; exactEnv=1 supplies none, so
// that upstream generates its own as it does in the pod.
const (
	loopbackEnv = "KUBE_APISERVER_VALIDATOR_LOOPBACK"
	exactEnv    = "KUBE_APISERVER_VALIDATOR_EXACT"
)

// generateFlag makes the validator print a loopback certificate and key,
// generated by upstream's code as kube-apiserver's start-up does, and
// exit: the operator's Pool runs it once and supplies the result to every
// validator of that version.
const generateFlag = "--generate-loopback-cert-key"

// supplyLoopback hands upstream, before any request arrives, the loopback
// client's self-signed certificate, which kube-apiserver generates at every
// start-up whatever its flags (SecureServingOptionsWithLoopback.ApplyTo):
// two RSA keys, most of a judgement's CPU. It comes from the file
// loopbackEnv names, or is generated here, while the process waits for its
// request. No flag or file of a request influences that step.
func supplyLoopback() error {
	if os.Getenv(exactEnv) == "1" {
		return nil
	}
	path := os.Getenv(loopbackEnv)
	if path == "" {
		cert, key, err := genericoptions.GenerateLoopbackCertKey()
		if err != nil {
			return err
		}
		genericoptions.SupplyLoopbackCertKey(cert, key)
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cert, key []byte
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			cert = append(cert, pem.EncodeToMemory(block)...)
		} else {
			key = append(key, pem.EncodeToMemory(block)...)
		}
	}
	if cert == nil || key == nil {
		return fmt.Errorf("%s holds no certificate and key", path)
	}
	genericoptions.SupplyLoopbackCertKey(cert, key)
	return nil
}

// judge runs kube-apiserver's start-up up to, and not including, serving.
func judge(req request, root string) (problems []problem, warnings []string) {
	// A file may name another (an authorization configuration, the
	// kubeconfigs of its webhooks): those names move below root too, the
	// longest first, so that one path's name is not taken for another's.
	paths := slices.SortedFunc(maps.Keys(req.Files), func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(paths))
	for _, p := range paths {
		pairs = append(pairs, p, filepath.Join(root, filepath.Clean(p)))
	}
	moved := strings.NewReplacer(pairs...)
	for path, data := range req.Files {
		if !filepath.IsAbs(path) {
			return []problem{{Message: fmt.Sprintf("file %q: not an absolute path", path)}}, nil
		}
		data = []byte(moved.Replace(string(data)))
		p := filepath.Join(root, filepath.Clean(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return []problem{{Message: fmt.Sprintf("writing file %s: %v", path, err)}}, nil
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return []problem{{Message: fmt.Sprintf("writing file %s: %v", path, err)}}, nil
		}
	}

	// The command kube-apiserver builds (app.NewAPIServerCommand), flag
	// for flag.
	s := options.NewServerRunOptions()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	// Self-signed certificates, when the flags name none, go where the
	// pod would write them, below root.
	s.SecureServing.ServerCert.CertDirectory = underRoot(root, s.SecureServing.ServerCert.CertDirectory)
	namedFlagSets := s.Flags()
	verflag.AddFlags(namedFlagSets.FlagSet("global"))
	globalflag.AddGlobalFlags(namedFlagSets.FlagSet("global"), "kube-apiserver", logs.SkipLoggingConfigurationFlags())
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, f := range namedFlagSets.FlagSets {
		fs.AddFlagSet(f)
	}
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)

	set := given{values: map[string]string{}, root: root}
	args, err := podArgs(fs, root, req)
	if err != nil {
		return []problem{set.attribute(err)}, nil
	}
	if err := fs.Parse(args); err != nil {
		return []problem{set.attribute(err)}, nil
	}
	fs.Visit(func(f *pflag.Flag) {
		set.values[f.Name] = strings.ReplaceAll(f.Value.String(), root, "")
		if f.Deprecated != "" {
			warnings = append(warnings, fmt.Sprintf("--%s is deprecated: %s", f.Name, f.Deprecated))
		}
	})
	if rest := fs.Args(); len(rest) > 0 {
		return []problem{{Message: fmt.Sprintf("kube-apiserver takes no arguments, got %q", rest)}}, warnings
	}
	if v, ok := set.values["version"]; ok && v != "false" {
		return []problem{{Flags: []string{"version"}, Message: "--version makes kube-apiserver print its version and exit instead of serving"}}, warnings
	}

	// PersistentPreRunE: emulation version and feature gates.
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return []problem{set.attributeTo(err, "emulated-version", "feature-gates")}, warnings
	}
	// RunE, in its order.
	if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
		return []problem{set.attribute(err)}, warnings
	}
	// Nothing listens: the serving options get a listener that never
	// accepts, at the address and port the flags give.
	s.SecureServing.Listener = inertListener{addr: &net.TCPAddr{IP: s.SecureServing.BindAddress, Port: s.SecureServing.BindPort}}
	// Nothing contacts etcd: no health checks are built.
	s.Etcd.SkipHealthEndpoints = true

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	completed, err := s.Complete(ctx)
	if err != nil {
		return []problem{set.attribute(err)}, warnings
	}
	if errs := completed.Validate(); len(errs) != 0 {
		for _, e := range flatten(errs) {
			problems = append(problems, set.attribute(e))
		}
		return problems, warnings
	}

	// Configuration files whose errors name no flag: load them first, on
	// their own, so that the error can say which flag it concerns.
	if path := completed.Etcd.EncryptionProviderConfigFilepath; path != "" {
		encCtx, encCancel := context.WithCancel(ctx)
		_, err := encryptionconfig.LoadEncryptionConfig(encCtx, path, completed.Etcd.EncryptionProviderConfigAutomaticReload, "validator")
		encCancel()
		if err != nil {
			return []problem{set.attributeTo(err, "encryption-provider-config")}, warnings
		}
	}

	// The authentication configuration (file or flags) and the API
	// groups of --runtime-config, on their own for the same reason.
	if _, err := completed.Authentication.ToAuthenticationConfig(); err != nil {
		return []problem{set.attributeTo(err, "authentication-config", "oidc-issuer-url")}, warnings
	}
	if _, err := resourceconfig.MergeAPIResourceConfigs(controlplane.DefaultAPIResourceConfigSource(), completed.APIEnablement.RuntimeConfig, legacyscheme.Scheme); err != nil {
		return []problem{set.attributeTo(err, "runtime-config")}, warnings
	}

	// Building the configuration creates one storage (the peer endpoint
	// leases of the mixed-version proxy), whose etcd client waits for a
	// connection. After Validate has judged the etcd flags, the client is
	// pointed at an in-memory gRPC server that answers nothing.
	//
	// The egress selector configuration is judged first by upstream's own
	// reading and validation, then kept in force (the JWT issuers need
	// the selections they name) with its etcd selection moved to a socket
	// of the validator's that relays to the stand-in: the pod's etcd
	// dialer socket does not exist here. The other selections are never
	// dialed while the configuration is built.
	stopEtcd, etcdListener := standInEtcd(&completed.Etcd.StorageConfig.Transport)
	defer stopEtcd()
	if es := completed.EgressSelector; es != nil && es.ConfigFile != "" {
		if err := es.ApplyTo(&genericapiserver.Config{}); err != nil {
			return []problem{set.attributeTo(err, "egress-selector-config-file")}, warnings
		}
		// An abstract socket: no file, and no bound on the temporary
		// directory's path, which a socket's would have.
		stopRelay, err := relayEtcdSelection(es.ConfigFile, fmt.Sprintf("@kube-apiserver-validator-%d-%d", os.Getpid(), time.Now().UnixNano()), etcdListener)
		if err != nil {
			return []problem{set.attributeTo(err, "egress-selector-config-file")}, warnings
		}
		defer stopRelay()
	}

	// The configuration kube-apiserver builds before it serves: generic
	// config, authentication, authorization, admission with its plugins
	// initialised, API enablement from --runtime-config, audit, the
	// extensions and aggregator configurations.
	config, err := app.NewConfig(completed)
	if err != nil {
		return []problem{set.attributeStage(err)}, warnings
	}
	if _, err := config.Complete(); err != nil {
		return []problem{set.attributeStage(err)}, warnings
	}
	return nil, warnings
}

// pathFlagTypes are the flag types whose values are file paths when they
// start with a slash.
var pathFlagTypes = map[string]bool{"string": true, "stringArray": true, "stringSlice": true}

// notPaths are string flags whose values start with a slash but name no
// file.
var notPaths = map[string]bool{"etcd-prefix": true, "etcd-servers-overrides": true, "service-account-jwks-uri": true}

// podArgs expands $(VAR) references from the pod's environment, as
// kubelet does, and moves every file path below root.
func podArgs(fs *pflag.FlagSet, root string, req request) ([]string, error) {
	var out []string
	for _, a := range req.Args {
		for k, v := range req.Env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		f := fs.Lookup(name)
		if !ok || f == nil || notPaths[name] {
			out = append(out, a)
			continue
		}
		switch {
		case f.Value.Type() == "namedCertKey":
			// cert,key[:names]
			files, names, hasNames := strings.Cut(value, ":")
			parts := strings.Split(files, ",")
			for i, p := range parts {
				parts[i] = underRoot(root, p)
			}
			value = strings.Join(parts, ",")
			if hasNames {
				value += ":" + names
			}
		case pathFlagTypes[f.Value.Type()]:
			parts := strings.Split(value, ",")
			for i, p := range parts {
				parts[i] = underRoot(root, p)
			}
			value = strings.Join(parts, ",")
		}
		out = append(out, "--"+name+"="+value)
	}
	return out, nil
}

func underRoot(root, p string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	return filepath.Join(root, filepath.Clean(p))
}

// flatten opens aggregates, so that each problem is reported on its own.
func flatten(errs []error) []error {
	var out []error
	for _, e := range errs {
		var agg utilerrors.Aggregate
		if errors.As(e, &agg) {
			out = append(out, flatten(agg.Errors())...)
			continue
		}
		out = append(out, e)
	}
	return out
}

var flagRef = regexp.MustCompile(`--([a-z0-9][a-z0-9-]*)`)

// fileFields are the top-level fields of the configuration files whose
// validation errors name no flag, and the flag that names each file.
var fileFields = map[string]string{
	"authorizers": "authorization-config",
	"jwt":         "authentication-config",
	"anonymous":   "authentication-config",
}

// fileFieldRef finds a field of fileFields at the start of an error, or
// of one of the errors a message lists.
var fileFieldRef = regexp.MustCompile(`(?:^|[\[:] ?)(authorizers|jwt|anonymous)[\[.]`)

// given are the flags of a request, each with its value as the pod sees
// it, and the directory that stands for the pod's file system.
type given struct {
	values map[string]string
	root   string
}

// attribute finds the flags an error concerns: those it names with their
// dashes, else the set flags whose names it mentions, else those whose
// values it quotes. It reads the message as the pod would print it:
// nothing in the name of the stand-in directory may point at a flag.
func (g given) attribute(err error) problem {
	p, _ := g.attributeByValue(err)
	return p
}

// attributeByValue is attribute, and whether only quoted values found the
// flags: the weakest sign, since short values ("true", "false") turn up
// in messages about other things.
func (g given) attributeByValue(err error) (problem, bool) {
	msg := err.Error()
	if g.root != "" {
		msg = strings.ReplaceAll(msg, g.root, "")
	}
	var flags []string
	for _, m := range flagRef.FindAllStringSubmatch(msg, -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		for name := range g.values {
			// "audit-log-format" or "audit log format", or upstream's
			// own words for it ("audit truncate webhook max batch size")
			if mentions(msg, name) || mentions(msg, strings.ReplaceAll(name, "-", " ")) || upstreamWords(msg, name) {
				flags = append(flags, name)
			}
		}
	}
	if len(flags) == 0 {
		// A field of a configuration file, as upstream's validation
		// names it ("authorizers[2].timeout: Invalid value: ...").
		if m := fileFieldRef.FindStringSubmatch(msg); m != nil {
			if _, ok := g.values[fileFields[m[1]]]; ok {
				flags = append(flags, fileFields[m[1]])
			}
		}
	}
	byValue := false
	if len(flags) == 0 {
		// The message quotes a flag's value: "unknown api groups
		// foo.example.com/v1", "service IP family "fd00::/108" ...".
		for name, value := range g.values {
			for _, part := range strings.FieldsFunc(value, func(r rune) bool { return strings.ContainsRune(",[]= ", r) }) {
				if len(part) >= 4 && strings.Contains(msg, part) && !slices.Contains(flags, name) {
					flags = append(flags, name)
					byValue = true
				}
			}
		}
	}
	sort.Strings(flags)
	return problem{Flags: slices.Compact(flags), Message: err.Error()}, byValue
}

// attributeTo is attribute, with flags known from the stage that failed
// when the message names none. When only quoted values found flags, those
// of the stage among them are kept, or the stage's when none is: a CEL
// error of the authentication configuration quotes "true" and "false",
// values of unrelated flags.
func (g given) attributeTo(err error, stageFlags ...string) problem {
	p, byValue := g.attributeByValue(err)
	var stage []string
	for _, f := range stageFlags {
		if _, ok := g.values[f]; ok {
			stage = append(stage, f)
		}
	}
	switch {
	case len(p.Flags) == 0:
		p.Flags = stage
	case byValue && len(stage) > 0:
		kept := slices.DeleteFunc(slices.Clone(p.Flags), func(f string) bool { return !slices.Contains(stage, f) })
		if len(kept) == 0 {
			kept = stage
		}
		p.Flags = kept
	}
	return p
}

// stages are the prefixes kube-apiserver's configuration building puts
// before an error, and the flags that configure that stage.
var stages = []struct {
	prefix string
	flags  []string
}{
	{"failed to apply admission", []string{"enable-admission-plugins", "disable-admission-plugins", "admission-control-config-file"}},
	{"invalid authorization config", []string{"authorization-mode", "authorization-config", "authorization-webhook-config-file"}},
	{"initializing audit webhook", []string{"audit-webhook-config-file"}},
	{"service IP family", []string{"advertise-address", "service-cluster-ip-range"}},
	{"invalid authentication configuration", []string{"authentication-config"}},
}

// attributeStage is attribute, with flags known from the stage's prefix
// when the message names none.
func (g given) attributeStage(err error) problem {
	for _, st := range stages {
		if strings.Contains(err.Error(), st.prefix) {
			return g.attributeTo(err, st.flags...)
		}
	}
	return g.attribute(err)
}

// mentions reports whether msg names the flag as a word of its own.
// auditWords are the words upstream's audit options (k8s.io/apiserver's
// pkg/server/options/audit.go) name a backend's batch and truncate flags
// with, the backend ("log", "webhook") as %s: "invalid audit batch
// webhook max batch size 0" is --audit-webhook-batch-max-size. The
// messages spell no flag, and quote values ("batch") that other flags
// have.
var auditWords = map[string]string{
	"audit-%s-batch-buffer-size":       "audit batch %s buffer size",
	"audit-%s-batch-max-size":          "audit batch %s max batch size",
	"audit-%s-batch-throttle-qps":      "audit batch %s throttle QPS",
	"audit-%s-batch-throttle-burst":    "audit batch %s throttle burst",
	"audit-%s-truncate-max-event-size": "audit truncate %s max event size",
	"audit-%s-truncate-max-batch-size": "audit truncate %s max batch size",
}

// upstreamWords reports whether msg names flag name in upstream's words
// for it (auditWords).
func upstreamWords(msg, name string) bool {
	for _, backend := range []string{"log", "webhook"} {
		for flag, words := range auditWords {
			if fmt.Sprintf(flag, backend) == name && mentions(msg, fmt.Sprintf(words, backend)) {
				return true
			}
		}
	}
	return false
}

func mentions(msg, name string) bool {
	for i := 0; ; {
		j := strings.Index(msg[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		before := start == 0 || !isNameByte(msg[start-1])
		if strings.Contains(name, " ") {
			before = start == 0 || msg[start-1] == ' ' || msg[start-1] == '"'
		}
		after := end == len(msg) || !isNameByte(msg[end])
		if before && after {
			return true
		}
		i = end
	}
}

func isNameByte(b byte) bool {
	return b == '-' || b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// standInEtcd points the etcd transport at a gRPC server in this process,
// reached through an in-memory connection: the client becomes ready, and
// no socket is opened.
func standInEtcd(tr *storagebackend.TransportConfig) (stop func(), lis *bufconn.Listener) {
	lis = bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(lis) }()
	tr.ServerList = []string{"http://etcd.validator.invalid:2379"}
	tr.CertFile, tr.KeyFile, tr.TrustedCAFile = "", "", ""
	tr.EgressLookup = func(egressselector.NetworkContext) (utilnet.DialFunc, error) {
		return func(ctx context.Context, _, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, nil
	}
	return srv.Stop, lis
}

// relayEtcdSelection rewrites the egress selector configuration at path so
// that its etcd selection connects, by HTTP CONNECT, to a Unix socket at
// socket, where every connection is relayed to the stand-in etcd at lis.
// stop closes the socket.
func relayEtcdSelection(path, socket string, lis *bufconn.Listener) (stop func(), err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, err
	}
	selections, _ := cfg["egressSelections"].([]any)
	for _, sel := range selections {
		if m, ok := sel.(map[string]any); ok && strings.EqualFold(fmt.Sprint(m["name"]), "etcd") {
			m["connection"] = map[string]any{"proxyProtocol": "HTTPConnect", "transport": map[string]any{"uds": map[string]any{"udsName": socket}}}
		}
	}
	if data, err = yaml.Marshal(cfg); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go relayConnect(conn, lis)
		}
	}()
	return func() { _ = l.Close() }, nil
}

// relayConnect answers one CONNECT request and relays the connection to lis.
func relayConnect(conn net.Conn, lis *bufconn.Listener) {
	defer func() { _ = conn.Close() }()
	br := bufio.NewReader(conn)
	if _, err := http.ReadRequest(br); err != nil {
		return
	}
	up, err := lis.Dial()
	if err != nil {
		return
	}
	defer func() { _ = up.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// HTTP/2's server speaks at once, and kube-apiserver's CONNECT dialer
	// refuses bytes that come with the answer: the stand-in's are relayed
	// once the client has spoken, which it does only after the answer.
	if _, err := br.Peek(1); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(up, br)
		_ = up.Close()
	}()
	_, _ = io.Copy(conn, up)
}

// inertListener stands in for the serving socket: it has an address and
// never accepts.
type inertListener struct{ addr *net.TCPAddr }

func (l inertListener) Accept() (net.Conn, error) {
	return nil, errors.New("the validator does not serve")
}
func (l inertListener) Close() error   { return nil }
func (l inertListener) Addr() net.Addr { return l.addr }
