package nodegroup

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"kausality-stream/examples/leaf-controller/internal/kausalitytest"
	"kausality-stream/examples/leaf-controller/verdict"
)

// The whole loop on a real control plane (etcd and kube-apiserver of scripts/controlplane.sh,
// its audit webhook pointed at a real kausality-stream): a person (impersonated) creates and
// changes a NodeGroup; the reconciler runs in a controller-runtime manager as its own user,
// reads the NodeGroup from the API server and writes its status there; kausality-stream learns
// who the controller is and whether the generation is done only from the audit events of those
// writes. The cloud is the test's: it records the calls.
//
// KAUSALITY_CONTROLPLANE names scripts/controlplane.sh with its binaries built
// (scripts/leaf-controller.sh builds them, cached, and sets it).
func TestReconcilerOnARealControlPlane(t *testing.T) {
	script := os.Getenv("KAUSALITY_CONTROLPLANE")
	if script == "" {
		t.Skip("KAUSALITY_CONTROLPLANE is not set (scripts/controlplane.sh with its binaries built): scripts/leaf-controller.sh sets it")
	}
	kaus := kausalitytest.Start(t)
	admin := startControlPlane(t, script, kaus.Webhook+"/audit/real")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	adminClient := newClient(t, admin)
	installCRD(ctx, t, adminClient)
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "infra"}}}
	if err := adminClient.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace infra: %v", err)
	}
	alice := newClient(t, as(admin, person))
	ng := New()
	ng.SetNamespace("infra")
	ng.SetName("gpu")
	ng.Object["spec"] = map[string]any{"size": int64(3), "instanceType": "gpu.large"}
	if err := alice.Create(ctx, ng); err != nil {
		t.Fatalf("%s creating the NodeGroup: %v", person, err)
	}
	key := types.NamespacedName{Namespace: "infra", Name: "gpu"}
	q := verdict.Query{Cluster: "real", ParentUID: string(ng.GetUID()), User: controllerUser, ChildKind: "Node"}

	cloud := newCloud(group, 3)
	runManager(ctx, t, as(admin, controllerUser), &Reconciler{
		Cloud: cloud, Guard: &verdict.Guard{Asker: kaus.Client()}, Cluster: "real", User: controllerUser,
		ChildKind: "Node", HoldRequeue: 2 * time.Second, BehindRequeue: 300 * time.Millisecond,
	})

	// The controller finds the cloud in sync and reports generation 1 done, Ready. Once the
	// stream has shown that status write, a write by the controller would be drift, and the
	// controller is known by that write alone.
	waitFor(ctx, t, adminClient, key, "generation 1 reported done", func(o *unstructured.Unstructured) bool {
		st, reason, _ := condition(o, "Synced")
		return observed(o) == 1 && st == "True" && reason == ReasonInSync
	})
	v := waitVerdict(ctx, t, kaus.Client(), q, "the controller's report of generation 1", func(v *verdict.Verdict) bool {
		return at(v.Parent.ObservedGeneration, 1) && v.Parent.Finished != nil && *v.Parent.Finished
	})
	if v.Class != verdict.Drift || v.Resolution != verdict.Unresolved || !at(v.Parent.Generation, 1) {
		t.Fatalf("stable NodeGroup: %s/%s (%s), parent generation %v: want drift/unresolved at generation 1", v.Class, v.Resolution, v.Reason, v.Parent.Generation)
	}
	if v.Actor.IsController == nil || !*v.Actor.IsController || !reflect.DeepEqual(v.Actor.Controllers, []string{controllerUser}) {
		t.Fatalf("actor %+v: want the controller known from its status write", v.Actor)
	}

	// A: someone scaled the group to 5 in the cloud's console; a person's annotation (no new
	// generation) makes the controller look. Removing 2 would be drift: held back.
	cloud.set(group, 5)
	poke(ctx, t, alice, key, "1")
	got := waitFor(ctx, t, adminClient, key, "held back", func(o *unstructured.Unstructured) bool {
		st, reason, _ := condition(o, "Synced")
		return st == "False" && reason == ReasonHeldBack
	})
	if _, _, msg := condition(got, "Synced"); !strings.Contains(msg, "this delete would be drift") || observed(got) != 1 {
		t.Fatalf("A: Synced message %q, observedGeneration %d: want drift held back at 1", msg, observed(got))
	}
	time.Sleep(3 * time.Second) // at least one more ask after HoldRequeue
	if calls := cloud.Calls(); len(calls) != 0 {
		t.Fatalf("A: cloud calls %v on drift, want none", calls)
	}

	// B: the person asks for 8 nodes (generation 2): the controller adds 3 (expected; asked
	// again if the stream has not shown the change yet) and reports generation 2 done.
	resize(ctx, t, alice, key, 8)
	waitFor(ctx, t, adminClient, key, "generation 2 carried out", func(o *unstructured.Unstructured) bool {
		st, _, _ := condition(o, "Synced")
		return observed(o) == 2 && st == "True"
	})
	if calls := cloud.Calls(); !reflect.DeepEqual(calls, []string{"add infra/gpu 3"}) {
		t.Fatalf("B: cloud calls %v, want one add of 3", calls)
	}

	// B': right after that report (the stream may not have shown it yet: the verdict is then
	// `expected` of an unfinished generation 2, and behind the object), a node is lost. A
	// replacement nobody asked for is held back, as drift once the stream has caught up.
	cloud.set(group, 7)
	poke(ctx, t, alice, key, "2")
	got = waitFor(ctx, t, adminClient, key, "the replacement held back", func(o *unstructured.Unstructured) bool {
		st, reason, msg := condition(o, "Synced")
		return st == "False" && reason == ReasonHeldBack && strings.Contains(msg, "this create would be drift")
	})
	if observed(got) != 2 {
		t.Fatalf("B': observedGeneration %d, want 2", observed(got))
	}
	if calls := cloud.Calls(); len(calls) != 1 {
		t.Fatalf("B': cloud calls %v, want only the add of generation 2", calls)
	}
	v = waitVerdict(ctx, t, kaus.Client(), q, "the report of generation 2", func(v *verdict.Verdict) bool {
		return at(v.Parent.ObservedGeneration, 2)
	})
	if v.Class != verdict.Drift || !at(v.Parent.Generation, 2) || v.Parent.Finished == nil || !*v.Parent.Finished {
		t.Fatalf("B': verdict %s (%s), parent %+v: want drift, generation 2 finished", v.Class, v.Reason, v.Parent)
	}
}

// startControlPlane runs `controlplane.sh start` in a directory of the test with its audit
// webhook at webhook, stops it when the test ends, and returns the admin's client config.
func startControlPlane(t *testing.T, script, webhook string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	logFile := filepath.Join(dir, "controlplane.log")
	run := func(sub string, extra ...string) ([]byte, error) {
		cmd := exec.Command("bash", script, sub)
		cmd.Env = append(os.Environ(), append([]string{"CONTROLPLANE_DIR=" + dir}, extra...)...)
		log, err := os.OpenFile(logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		defer log.Close()
		cmd.Stderr = log
		return cmd.Output()
	}
	if _, err := run("start", "AUDIT_WEBHOOK_URL="+webhook, "AUDIT_WEBHOOK_BATCH_MAX_WAIT=500ms", "CONTROLPLANE_NODES=1"); err != nil {
		text, _ := os.ReadFile(logFile)
		t.Fatalf("controlplane.sh start: %v\n%s", err, lastLines(string(text), 60))
	}
	t.Cleanup(func() {
		if _, err := run("stop"); err != nil {
			text, _ := os.ReadFile(logFile)
			t.Errorf("controlplane.sh stop: %v\n%s", err, lastLines(string(text), 30))
		}
	})
	out, err := run("env")
	if err != nil {
		t.Fatalf("controlplane.sh env: %v", err)
	}
	var kubeconfig string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "export KUBECONFIG="); ok {
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			kubeconfig = strings.Trim(v, "'")
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("the admin kubeconfig %q: %v", kubeconfig, err)
	}
	return cfg
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// as is the admin's config impersonating user (with the admin's group, so that no RBAC is
// needed): the audit events name user as the impersonated user, the one kausality-stream judges.
func as(admin *rest.Config, user string) *rest.Config {
	c := rest.CopyConfig(admin)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	return c
}

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	s.AddKnownTypeWithName(GVK, &unstructured.Unstructured{})
	s.AddKnownTypeWithName(GVK.GroupVersion().WithKind(GVK.Kind+"List"), &unstructured.UnstructuredList{})
	return s
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: testScheme()})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	return c
}

// installCRD creates NodeGroup's CustomResourceDefinition (a status subresource, any fields)
// and waits until it is established.
func installCRD(ctx context.Context, t *testing.T, c client.Client) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "nodegroups.infra.example.com"},
		"spec": map[string]any{
			"group": GVK.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "nodegroups", "singular": "nodegroup", "kind": GVK.Kind, "listKind": GVK.Kind + "List"},
			"versions": []any{map[string]any{
				"name": GVK.Version, "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if err := c.Create(ctx, crd); err != nil {
		t.Fatalf("creating the NodeGroup CRD: %v", err)
	}
	for {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
		if err := c.Get(ctx, client.ObjectKey{Name: "nodegroups.infra.example.com"}, got); err == nil && established(got) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the NodeGroup CRD was not established")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// runManager starts a manager with the reconciler as cfg's user until the test ends.
func runManager(ctx context.Context, t *testing.T, cfg *rest.Config, r *Reconciler) {
	t.Helper()
	// The controller's name is checked unique per process: TestSetupWithManager registers
	// its own.
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: &skip}})
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	r.Client, r.Recorder = mgr.GetClient(), mgr.GetEventRecorder("nodegroup-controller")
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatalf("SetupWithManager: %v", err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("the manager did not stop within 30 s")
		}
	})
}

// waitFor reads the NodeGroup from the API server until ok says yes; returns it.
func waitFor(ctx context.Context, t *testing.T, c client.Client, key types.NamespacedName, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var last *unstructured.Unstructured
	for {
		o := New()
		if err := c.Get(ctx, key, o); err == nil {
			last = o
			if ok(o) {
				return o
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within 60 s; the NodeGroup's status: %v", what, statusOf(last))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func statusOf(o *unstructured.Unstructured) any {
	if o == nil {
		return nil
	}
	return o.Object["status"]
}

// waitVerdict asks kausality-stream until ok says yes; returns the verdict.
func waitVerdict(ctx context.Context, t *testing.T, c *verdict.Client, q verdict.Query, what string, ok func(*verdict.Verdict) bool) *verdict.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last any
	for {
		v, err := c.Ask(ctx, q)
		if err == nil && ok(v) {
			return v
		}
		last = err
		if err == nil {
			last = fmt.Sprintf("%+v", *v)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the verdict did not show %s within 30 s: %v", what, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func at(n *int64, want int64) bool { return n != nil && *n == want }

// poke is the person's annotation of the NodeGroup: no new generation, a watch event.
func poke(ctx context.Context, t *testing.T, c client.Client, key types.NamespacedName, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"example.com/poked":%q}}}`, value)
	o := New()
	o.SetNamespace(key.Namespace)
	o.SetName(key.Name)
	if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("annotating the NodeGroup: %v", err)
	}
}

// resize is the person's change of spec.size: a new generation.
func resize(ctx context.Context, t *testing.T, c client.Client, key types.NamespacedName, size int64) {
	t.Helper()
	o := New()
	o.SetNamespace(key.Namespace)
	o.SetName(key.Name)
	if err := c.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"size":%d}}`, size)))); err != nil {
		t.Fatalf("resizing the NodeGroup: %v", err)
	}
}
