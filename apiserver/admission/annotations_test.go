package admission

import (
	"context"
	"testing"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// TestAdmission_SwitchesAreTrueOrFalse: a switch annotation with a value
// that only looks like a yes is refused at the annotation, before anything
// else is judged; a value admitted before is kept.
func TestAdmission_SwitchesAreTrueOrFalse(t *testing.T) {
	a := Admission{Validator: validators(t)}
	annotated := func(key, value string) *v1alpha1.ApiServerConfig {
		return tenant(func(c *v1alpha1.ApiServerConfig) { c.Annotations = map[string]string{key: value} })
	}
	for _, key := range switches {
		for _, tc := range []struct {
			value, old string
			refused    bool
		}{
			{value: "true"}, {value: "false"},
			{value: "True", refused: true}, {value: "yes", refused: true}, {value: "", refused: true},
			{value: "yes", old: "yes"},
			{value: "1", old: "yes", refused: true},
		} {
			var old *v1alpha1.ApiServerConfig
			if tc.old != "" {
				old = annotated(key, tc.old)
			}
			errs, _ := a.Admit(context.Background(), old, annotated(key, tc.value))
			if tc.refused {
				expectRefusal(t, errs, "metadata.annotations["+key+"]", `supported values: "true", "false"`)
			} else {
				expectRefusal(t, errs, "", "")
			}
		}
	}
}
