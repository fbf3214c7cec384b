package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
	"github.com/apiserver-operator/apiserver-operator/apiserver"
	"github.com/apiserver-operator/apiserver-operator/apiserver/validatorpool"
)

// Admission decides what an ApiServerConfig may become, beyond the CRD's
// own rules. The webhook and `render` use the same one, so that they refuse
// exactly the same specs.
type Admission struct {
	// Validator runs the bundled kube-apiserver's own code. Nil admits
	// nothing that would need it (fail closed).
	Validator validatorpool.Validator
	// PodIP is an address of the pod network the tenants' pods run on
	// (the operator's own pod IP): its family is the one their
	// --advertise-address has. Empty means DefaultPodIP.
	PodIP string
	// Gates open the fields that grant power beyond the tenant. Nil checks
	// none: `render` does not know the platform's operator configuration.
	Gates *Gates
}

// Admit judges cfg, an update of old (nil for a create): the checks
// against the version's catalogs (with suggestions for misspellings), the
// operator's policy, and then kube-apiserver's own verdict on the rendered
// command line and files. Every error names the spec field it comes from.
func (a Admission) Admit(ctx context.Context, old, cfg *v1alpha1.ApiServerConfig) (field.ErrorList, []string) {
	if old != nil && apiequality.Semantic.DeepEqual(old.Spec, cfg.Spec) {
		// A change of metadata alone (a pause during an incident, the
		// finalizer's removal, a rotation's annotation) is not judged
		// again: what was admitted stays admitted, even where this
		// operator's rules or validators changed since.
		return checkSwitches(old, cfg), nil
	}
	errs, warnings := apiserver.Validate(cfg)
	if old != nil {
		// An upgrade's "removed in" replaces "unknown" on the same field.
		errs = replaceByField(errs, apiserver.ValidateUpdate(old, cfg))
	}
	errs = append(errs, checkSwitches(old, cfg)...)
	if a.Gates != nil {
		errs = append(errs, a.Gates.Check(old, cfg)...)
	}
	if len(errs) > 0 {
		return errs, warnings
	}
	// The validator's warnings (deprecated flags) are those Validate
	// already gave, with their fields.
	return a.judge(ctx, cfg), warnings
}

// judge asks the validator of cfg's version.
func (a Admission) judge(ctx context.Context, cfg *v1alpha1.ApiServerConfig) field.ErrorList {
	specPath := field.NewPath("spec")
	c, err := apiserver.Complete(cfg, apiserver.Inputs{})
	if err != nil {
		return field.ErrorList{field.Invalid(specPath, "", err.Error())}
	}
	version := a.judgeVersion(c)
	if a.Validator == nil || !a.Validator.Has(version) {
		if c.Catalog == nil {
			// Not a bundled version: there is no code of it to run. The
			// catalog warning of Validate already says so.
			return nil
		}
		return field.ErrorList{field.InternalError(specPath.Child("version"), fmt.Errorf(
			"the operator has no validator for kube-apiserver %s, so it cannot check this spec and admits nothing unchecked: the validators' --validator-dir (the validators container of the webhook's pod) must hold %s%s",
			version, validatorpool.BinaryPrefix, version))}
	}
	req, err := ValidationRequest(c, a.PodIP)
	if err != nil {
		return field.ErrorList{field.Invalid(specPath, "", fmt.Sprintf("rendering the kube-apiserver command line: %v", err))}
	}
	res, err := a.Validator.Validate(ctx, version, req)
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("it did not answer in time: %w", err)
		}
		return field.ErrorList{field.InternalError(specPath, fmt.Errorf(
			"checking the spec with kube-apiserver %s's own code failed, so nothing is admitted unchecked; retry, and if it persists look at the operator's logs: %w", version, err))}
	}
	var errs field.ErrorList
	var unplaced []validatorpool.Problem
	for _, p := range res.Problems {
		if e := problemError(c, p); e != nil {
			errs = append(errs, e)
		} else {
			unplaced = append(unplaced, p)
		}
	}
	return append(errs, a.placeByElimination(ctx, cfg, c, unplaced)...)
}

// judgeVersion is the version whose code judges c: spec.version, or, for
// another patch release of a bundled minor (spec.image), that bundled
// version, since flags, gates and validation change between minors.
func (a Admission) judgeVersion(c *apiserver.Completed) string {
	if a.Validator != nil && !a.Validator.Has(c.Spec.Version) && c.Catalog != nil {
		return c.Catalog.Version
	}
	return c.Spec.Version
}

// maxEliminations bounds the extra judgements spent on placing a problem
// whose message names no flag.
const maxEliminations = 6

// placeByElimination finds, for problems whose message names no flag, the
// extraArg without which kube-apiserver no longer reports them: it judges
// the spec again without each extraArg in turn. What it cannot place is
// reported on spec.
func (a Admission) placeByElimination(ctx context.Context, cfg *v1alpha1.ApiServerConfig, c *apiserver.Completed, problems []validatorpool.Problem) field.ErrorList {
	placed := map[string]int{} // problem message -> index of the extraArg
	for i := 0; i < len(cfg.Spec.ExtraArgs) && i < maxEliminations && len(placed) < len(problems); i++ {
		without := cfg.DeepCopy()
		without.Spec.ExtraArgs = slices.Delete(without.Spec.ExtraArgs, i, i+1)
		wc, err := apiserver.Complete(without, apiserver.Inputs{})
		if err != nil {
			continue
		}
		req, err := ValidationRequest(wc, a.PodIP)
		if err != nil {
			continue
		}
		res, err := a.Validator.Validate(ctx, a.judgeVersion(wc), req)
		if err != nil {
			break
		}
		for _, p := range problems {
			if _, done := placed[p.Message]; !done && !slices.ContainsFunc(res.Problems, func(q validatorpool.Problem) bool { return q.Message == p.Message }) {
				placed[p.Message] = i
			}
		}
	}
	var errs field.ErrorList
	for _, p := range problems {
		msg := fmt.Sprintf("kube-apiserver %s would refuse to start: %s", c.Spec.Version, p.Message)
		if i, ok := placed[p.Message]; ok {
			errs = append(errs, field.Invalid(field.NewPath("spec", "extraArgs").Index(i).Child("value"), cfg.Spec.ExtraArgs[i].Value, msg))
			continue
		}
		errs = append(errs, field.Invalid(field.NewPath("spec"), "", msg))
	}
	return errs
}

// flagOrigin is where a rendered flag comes from, ranked: the user's
// extraArgs first (written verbatim), then the field the operator renders
// it from, then the pod IP, then the operator's defaults.
type flagOrigin struct {
	path  *field.Path
	value any
	rank  int
}

// flagOrigins maps each flag of c's command line to the spec field that
// produced it.
func flagOrigins(c *apiserver.Completed) map[string]flagOrigin {
	out := map[string]flagOrigin{}
	sources := apiserver.FlagSources(c)
	for _, f := range sources {
		if f.Default {
			out[f.Name] = flagOrigin{path: field.NewPath("spec", "extraArgs"), value: "--" + f.Name + "=" + strings.Join(f.Values, ","), rank: 3}
		}
	}
	for i := len(c.Spec.ExtraArgs) - 1; i >= 0; i-- {
		a := c.Spec.ExtraArgs[i]
		out[a.Name] = flagOrigin{path: field.NewPath("spec", "extraArgs").Index(i).Child("value"), value: a.Value, rank: 0}
	}
	for _, f := range sources {
		if f.Default {
			continue
		}
		o := flagOrigin{path: specFieldPath(f.Field), value: strings.Join(f.Values, ","), rank: 1}
		if !strings.HasPrefix(f.Field, "spec.") {
			// The pod IP is no field: its family clashes with the first
			// service range, which is.
			o = flagOrigin{path: field.NewPath("spec", "serviceClusterIPRange").Index(0), value: strings.Join(c.Spec.ServiceClusterIPRange, ","), rank: 2}
		}
		out[f.Name] = o
	}
	return out
}

// specFieldPath turns a field name ("spec.serving.securePort") into a
// path.
func specFieldPath(f string) *field.Path {
	parts := strings.Split(f, ".")
	p := field.NewPath(parts[0])
	for _, part := range parts[1:] {
		p = p.Child(part)
	}
	return p
}

// pluginRef finds the admission plugin an error is about, as
// kube-apiserver names it when the plugin fails to initialise
// (`couldn't init admission plugin "EventRateLimit": ...`).
var pluginRef = regexp.MustCompile(`admission plugin "([A-Za-z0-9.]+)"`)

// pluginOrigin is the field that turns on the admission plugin a message
// is about: its configuration field, or its item of enablePlugins; nil
// for a plugin of kube-apiserver's or the operator's defaults, or a
// message about no plugin.
func pluginOrigin(c *apiserver.Completed, msg string) *flagOrigin {
	m := pluginRef.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	admission := field.NewPath("spec", "admission")
	if m[1] == apiserver.EventRateLimit && c.Spec.Admission.EventRateLimit != nil {
		return &flagOrigin{path: admission.Child("eventRateLimit"), value: field.OmitValueType{}}
	}
	if i := slices.Index(c.Spec.Admission.EnablePlugins, m[1]); i >= 0 {
		return &flagOrigin{path: admission.Child("enablePlugins").Index(i), value: m[1]}
	}
	return nil
}

// fileField finds the field of a configuration file an error of
// upstream's loader is about ("jwt[1].claimValidationRules[0].expression:
// Invalid value: ...", "authorizers[2].webhook.matchConditions[0].expression").
var fileField = regexp.MustCompile(`(?:^|[\s\[:"])(jwt|authorizers)\[(\d+)\]((?:\.[A-Za-z]+(?:\[\d+\])?)*)`)

// webhookFields are the fields of an authorization webhook.
var webhookFields = map[string]bool{
	"timeout": true, "failurePolicy": true, "authorizedTTL": true, "unauthorizedTTL": true,
	"cacheAuthorizedRequests": true, "cacheUnauthorizedRequests": true, "matchConditions": true,
	"connectionInfo": true, "subjectAccessReviewVersion": true, "matchConditionSubjectAccessReviewVersion": true,
}

// configFileField is the spec field that holds the field of a rendered
// configuration file msg is about, for the spec field origin the file's
// flag comes from; nil when msg names no entry of the spec.
//
// The authentication configuration's jwt[i] is spec.authentication.oidc
// when the spec has one (rendered first), else spec.authentication.jwt's,
// whose fields have upstream's names but for the CA, read from
// issuer.certificateAuthorityRef. The authorization configuration's
// authorizers[i] is spec.authorization.authorizers[i], whose webhook's
// connection is its kubeconfigSecretName and whose SubjectAccessReview
// versions the operator sets.
func configFileField(c *apiserver.Completed, origin, msg string) *field.Path {
	m := fileField.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	i, err := strconv.Atoi(m[2])
	if err != nil {
		return nil
	}
	var p *field.Path
	renamed := map[string]string{}
	switch {
	case m[1] == "jwt" && origin == "spec.authentication":
		a := field.NewPath("spec", "authentication")
		if c.Spec.Authentication.OIDC != nil {
			if i == 0 {
				return a.Child("oidc")
			}
			i--
		}
		if i >= len(c.Spec.Authentication.JWT) {
			return nil
		}
		p = a.Child("jwt").Index(i)
		renamed["certificateAuthority"] = "certificateAuthorityRef"
	case m[1] == "authorizers" && origin == "spec.authorization.authorizers":
		if i >= len(c.Spec.Authorization.Authorizers) {
			return nil
		}
		p = field.NewPath("spec", "authorization", "authorizers").Index(i)
		// Upstream names a webhook's fields under the authorizer itself
		// ("authorizers[2].timeout").
		if next, _, _ := strings.Cut(strings.TrimPrefix(m[3], "."), "."); webhookFields[strings.Split(next, "[")[0]] {
			p = p.Child("webhook")
		}
		renamed["connectionInfo"] = "kubeconfigSecretName"
		renamed["subjectAccessReviewVersion"] = ""
		renamed["matchConditionSubjectAccessReviewVersion"] = ""
	default:
		return nil
	}
	for _, part := range strings.Split(strings.TrimPrefix(m[3], "."), ".") {
		if part == "" {
			continue
		}
		name, index, indexed := strings.Cut(strings.TrimSuffix(part, "]"), "[")
		if to, ok := renamed[name]; ok {
			if to == "" {
				return p // set by the operator: the field above it
			}
			p = p.Child(to)
			return p // what lies under it is the operator's
		}
		p = p.Child(name)
		if indexed {
			n, err := strconv.Atoi(index)
			if err != nil {
				return p
			}
			p = p.Index(n)
		}
	}
	return p
}

// problemError reports a problem at the field of the flag it concerns
// (the best ranked, when it concerns several; among equals, the one whose
// value the message quotes at most length: "batch", a word of many
// messages, says less than "20000000"), or at the field that turns on the
// admission plugin it is about; nil when it names no flag of the command
// line.
func problemError(c *apiserver.Completed, p validatorpool.Problem) *field.Error {
	origins := flagOrigins(c)
	quoted := func(o flagOrigin) int {
		if v := fmt.Sprint(o.value); strings.Contains(p.Message, v) {
			return len(v)
		}
		return 0
	}
	var best *flagOrigin
	for _, name := range p.Flags {
		o, ok := origins[name]
		if ok && (best == nil || o.rank < best.rank || o.rank == best.rank && quoted(o) > quoted(*best)) {
			best = &o
		}
	}
	// A field the operator renders a flag or a file from, rather than a
	// value written verbatim: the leaf under it may be known.
	rendered := best != nil && best.rank == 1
	// The admission flags' fields are not where a plugin that fails to
	// initialise is chosen or configured.
	if best != nil && best.rank > 0 {
		if o := pluginOrigin(c, p.Message); o != nil {
			best, rendered = o, true
		}
	}
	msg := fmt.Sprintf("kube-apiserver %s would refuse to start: %s", c.Spec.Version, p.Message)
	if len(p.Flags) > 0 {
		flags := slices.Clone(p.Flags)
		for i, f := range flags {
			flags[i] = "--" + f
		}
		msg += fmt.Sprintf(" (%s)", strings.Join(flags, ", "))
	}
	if best == nil {
		return nil
	}
	if rendered {
		// Upstream's loaders name the field of the file: the spec's field
		// of the same name holds it.
		if f := configFileField(c, best.path.String(), p.Message); f != nil {
			if leaf, value, ok := leafOf(c, f, p.Message); ok {
				return field.Invalid(leaf, value, msg)
			}
			return field.Invalid(f, field.OmitValueType{}, msg)
		}
	}
	if rendered {
		// The value the message quotes leads to the leaf that holds it.
		if leaf, value, ok := leafOf(c, best.path, p.Message); ok {
			return field.Invalid(leaf, value, msg)
		}
	}
	return field.Invalid(best.path, best.value, msg)
}

// invalidValue finds the values a validation message quotes
// (`Invalid value: "https://x?q": URL must not contain a query`).
var invalidValue = regexp.MustCompile(`Invalid value: ("(?:[^"\\]|\\.)*"|[^\s:,]+)`)

// leafOf finds, under the spec field parent, the one leaf that holds a
// value msg quotes as invalid: the field the user wrote it in. A value
// held by none or by several leaves finds nothing.
func leafOf(c *apiserver.Completed, parent *field.Path, msg string) (*field.Path, any, bool) {
	var tree any
	raw, err := json.Marshal(c.Spec)
	if err != nil {
		return nil, nil, false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // numbers as written: 1000000, not 1e+06
	if d.Decode(&tree) != nil {
		return nil, nil, false
	}
	names := strings.Split(parent.String(), ".")
	if len(names) < 2 || names[0] != "spec" {
		return nil, nil, false
	}
	for _, name := range names[1:] {
		m, ok := tree.(map[string]any)
		if !ok {
			return nil, nil, false
		}
		tree = m[name]
	}
	for _, match := range invalidValue.FindAllStringSubmatch(msg, -1) {
		quoted := match[1]
		if unquoted, err := strconv.Unquote(quoted); err == nil {
			quoted = unquoted
		}
		var found []*field.Path
		var value any
		walkLeaves(tree, parent, func(p *field.Path, v any) {
			if fmt.Sprint(v) == quoted {
				if n, ok := v.(json.Number); ok {
					v = n.String()
					if i, err := n.Int64(); err == nil {
						v = i
					}
				}
				found, value = append(found, p), v
			}
		})
		if len(found) == 1 {
			return found[0], value, true
		}
	}
	return nil, nil, false
}

// walkLeaves calls fn with every scalar under v, at its path.
func walkLeaves(v any, at *field.Path, fn func(*field.Path, any)) {
	switch t := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			walkLeaves(t[k], at.Child(k), fn)
		}
	case []any:
		for i, e := range t {
			walkLeaves(e, at.Index(i), fn)
		}
	case nil:
	default:
		fn(at, t)
	}
}

// replaceByField drops from errs every error on a field that better
// already has an error for, then appends better: the upgrade policy's
// "removed in" says more than "unknown" on the same field.
func replaceByField(errs, better field.ErrorList) field.ErrorList {
	if len(better) == 0 {
		return errs
	}
	fields := map[string]bool{}
	for _, e := range better {
		fields[e.Field] = true
	}
	out := make(field.ErrorList, 0, len(errs)+len(better))
	for _, e := range errs {
		if !fields[e.Field] {
			out = append(out, e)
		}
	}
	return append(out, better...)
}
