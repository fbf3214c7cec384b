package validatorpool

import (
	"net/url"
	"regexp"
	"strings"
)

// Equivalent is the request that stands for req's equivalence class: req
// with the values that kube-apiserver's start-up does not judge replaced
// by fixed ones, so that the specs of a fleet, which differ in exactly
// these, share one judgement. ok is false when req has a value outside the
// forms this holds for; such a request is judged on its own.
//
// The values, and why no verdict depends on them (TestEquivalent_
// SharesNoVerdictItShouldNot in apiserver/render judges hostile values of
// each with the real validators of every bundled version):
//
//   - --etcd-prefix: the options copy it into the storage configuration;
//     only storage talking to etcd, after start-up, reads it. Any value of
//     the form the CRD admits (a slash, then letters, digits and ._/-)
//     stands for all others.
//   - the URLs of --etcd-servers and of --etcd-servers-overrides: start-up
//     checks that there is at least one server, and that each override is
//     group/resource#server;server with no server empty; it dials them
//     only once it serves (the validator points its etcd client at a
//     stand-in). Each http or https URL with a host and a port and
//     nothing else stands for the others of its scheme; how many there
//     are, and the overrides' resources, are kept.
func Equivalent(req Request) (class Request, ok bool) {
	args := make([]string, len(req.Args))
	for i, a := range req.Args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		args[i] = a
		if !hasValue || !strings.HasPrefix(a, "--") {
			continue
		}
		switch name {
		case "etcd-prefix":
			if !etcdPrefix.MatchString(value) {
				return Request{}, false
			}
			args[i] = "--etcd-prefix=/registry"
		case "etcd-servers":
			servers, ok := equivalentServers(strings.Split(value, ","))
			if !ok {
				return Request{}, false
			}
			args[i] = "--etcd-servers=" + strings.Join(servers, ",")
		case "etcd-servers-overrides":
			overrides := strings.Split(value, ",")
			for j, o := range overrides {
				resource, list, found := strings.Cut(o, "#")
				if !found {
					return Request{}, false
				}
				servers, ok := equivalentServers(strings.Split(list, ";"))
				if !ok {
					return Request{}, false
				}
				overrides[j] = resource + "#" + strings.Join(servers, ";")
			}
			args[i] = "--etcd-servers-overrides=" + strings.Join(overrides, ",")
		}
	}
	return Request{Args: args, Files: req.Files, Env: req.Env}, true
}

// etcdPrefix is the form of spec.etcd.prefix that the CRD admits.
var etcdPrefix = regexp.MustCompile(`^/[A-Za-z0-9._/-]{0,127}$`)

// equivalentServers replaces each etcd URL by the one of its scheme, or
// says that one is not of the form Equivalent holds for.
func equivalentServers(servers []string) ([]string, bool) {
	out := make([]string, len(servers))
	for i, s := range servers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Port() == "" ||
			u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return nil, false
		}
		out[i] = u.Scheme + "://etcd.invalid:2379"
	}
	return out, true
}
