package nodegroup

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Conditions returns the NodeGroup's status.conditions; entries that are not conditions are
// left out.
func Conditions(ng *unstructured.Unstructured) []metav1.Condition {
	raw, _, _ := unstructured.NestedSlice(ng.Object, "status", "conditions")
	out := make([]metav1.Condition, 0, len(raw))
	for _, item := range raw {
		m, ok := item.(map[string]any)
		if !ok {
			continue
		}
		var c metav1.Condition
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &c) == nil {
			out = append(out, c)
		}
	}
	return out
}

// toMap turns a condition into the map an unstructured object holds.
func toMap(c metav1.Condition) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&c)
}
