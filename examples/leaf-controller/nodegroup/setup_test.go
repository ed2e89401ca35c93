package nodegroup

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"kausality-stream/examples/leaf-controller/verdict"
)

// The reconciler registers with a manager as a controller of NodeGroups (nothing is started:
// there is no API server here).
func TestSetupWithManager(t *testing.T) {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(GVK, &unstructured.Unstructured{})
	mgr, err := ctrl.NewManager(&rest.Config{Host: "http://127.0.0.1:1"}, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("nodegroup-controller"), Cloud: newCloud(group, 0),
		Guard: &verdict.Guard{Asker: &verdict.Client{BaseURL: "http://127.0.0.1:1"}}, User: controllerUser}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatalf("SetupWithManager: %v", err)
	}
	if err := r.SetupWithManager(mgr); err == nil {
		t.Fatal("a second controller named nodegroup was accepted")
	}
}
