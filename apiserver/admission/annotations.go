package admission

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/apiserver-operator/apiserver-operator/api/v1alpha1"
)

// switches are the annotations a user turns on with "true": any other
// value turns them off, so a value that only looks like a yes ("True",
// "yes", "1") would do the opposite of what was meant without a word.
var switches = []string{v1alpha1.PausedAnnotation, v1alpha1.DeletionProtectionAnnotation, v1alpha1.ConfirmDeletionAnnotation}

// checkSwitches refuses a switch set or changed to anything but "true"
// or "false"; a value admitted before stays admitted.
func checkSwitches(old, cfg *v1alpha1.ApiServerConfig) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("metadata", "annotations")
	for _, key := range switches {
		v, set := cfg.Annotations[key]
		if !set || v == "true" || v == "false" || (old != nil && old.Annotations[key] == v) {
			continue
		}
		errs = append(errs, field.NotSupported(path.Key(key), v, []string{"true", "false"}))
	}
	return errs
}
