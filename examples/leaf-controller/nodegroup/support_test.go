package nodegroup

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"kausality-stream/examples/leaf-controller/internal/audit"
	"kausality-stream/examples/leaf-controller/verdict"
)

// The users of the recorded stream.
const (
	controllerUser = "system:serviceaccount:infra:nodegroup-controller"
	person         = "alice@example.com"
)

// fakeCloud is the cloud API: it counts nodes per group and records every call that changes
// something.
type fakeCloud struct {
	mu    sync.Mutex
	nodes map[string]int64
	calls []string
}

func newCloud(group string, nodes int64) *fakeCloud {
	return &fakeCloud{nodes: map[string]int64{group: nodes}}
}

func (c *fakeCloud) Nodes(_ context.Context, group string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[group], nil
}

func (c *fakeCloud) AddNodes(_ context.Context, group string, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[group] += n
	c.calls = append(c.calls, fmt.Sprintf("add %s %d", group, n))
	return nil
}

func (c *fakeCloud) RemoveNodes(_ context.Context, group string, n int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[group] -= n
	c.calls = append(c.calls, fmt.Sprintf("remove %s %d", group, n))
	return nil
}

// set is a change made behind the controller's back (someone in the cloud's console).
func (c *fakeCloud) set(group string, nodes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[group] = nodes
}

func (c *fakeCloud) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}

// story is a recorded stream with known intent: a person creates a NodeGroup; its controller
// creates the group's inventory ConfigMap (a child with a controller ownerReference to it)
// and reports the generation observed, Ready, nothing in progress.
type story struct {
	api   *audit.APIServer
	group audit.Ref
	// pending holds the events not yet posted.
	pending []audit.Object
}

func newStory(prefix string, start time.Time, size int64) *story {
	api := audit.NewAPIServer(prefix, start)
	s := &story{api: api}
	var ev audit.Object
	s.group, ev = api.Create(person, "nodegroups", audit.Object{
		"apiVersion": GVK.GroupVersion().String(), "kind": GVK.Kind,
		"metadata": audit.Object{"name": "gpu", "namespace": "infra"},
		"spec":     audit.Object{"size": size, "instanceType": "gpu.large"},
	})
	s.pending = append(s.pending, ev)
	_, ev = api.Create(controllerUser, "configmaps", audit.Object{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": audit.Object{"name": "gpu-nodes", "namespace": "infra", "ownerReferences": audit.OwnerRef(s.group)},
		"data":     audit.Object{"nodes": fmt.Sprint(size)},
	})
	s.pending = append(s.pending, ev)
	s.report()
	return s
}

// report is the controller's status write: the current generation observed, Ready, Synced.
func (s *story) report() {
	gen := s.api.Generation(s.group)
	cond := func(t string) audit.Object {
		return audit.Object{"type": t, "status": "True", "reason": "Scaled", "observedGeneration": gen, "lastTransitionTime": s.api.Now().UTC().Format(time.RFC3339)}
	}
	s.pending = append(s.pending, s.api.UpdateStatus(controllerUser, s.group, audit.Object{
		"observedGeneration": gen, "conditions": []any{cond("Ready"), cond("Synced")},
	}))
}

// resize is a person's change of spec.size: a new generation.
func (s *story) resize(size int64) {
	s.pending = append(s.pending, s.api.Update(person, s.group, func(o audit.Object) {
		o["spec"].(audit.Object)["size"] = size
	}))
}

// annotate is a person's metadata-only write: the generation stays.
func (s *story) annotate(key, value string) {
	s.pending = append(s.pending, s.api.Update(person, s.group, func(o audit.Object) {
		md := o["metadata"].(audit.Object)
		a, _ := md["annotations"].(audit.Object)
		if a == nil {
			a = audit.Object{}
		}
		a[key] = value
		md["annotations"] = a
	}))
}

// post sends the pending events to the server and waits until it has applied them; returns
// the controller's verdict then.
func (s *story) post(t *testing.T, kaus interface {
	Post(testing.TB, string, []audit.Object)
	WaitApplied(testing.TB, verdict.Query, time.Time) *verdict.Verdict
}, cluster string) *verdict.Verdict {
	t.Helper()
	kaus.Post(t, cluster, s.pending)
	s.pending = nil
	return kaus.WaitApplied(t, s.query(cluster), s.api.Now())
}

func (s *story) query(cluster string) verdict.Query {
	return verdict.Query{Cluster: cluster, ParentUID: s.group.UID, User: controllerUser, ChildKind: "Node"}
}

// reconcile runs one Reconcile of the NodeGroup as the stream has it now, with a client
// holding that object; returns the result, the object as the reconciler left it, and the
// events it recorded.
func (s *story) reconcile(t *testing.T, r Reconciler) (ctrl.Result, *unstructured.Unstructured, []string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: s.api.Get(s.group)}
	c := fakeClient(t, obj)
	rec := events.NewFakeRecorder(16)
	r.Client, r.Recorder = c, rec
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "infra", Name: "gpu"}})
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	after := New()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), after); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(rec.Events) > 0 {
		got = append(got, <-rec.Events)
	}
	return res, after, got
}

// fakeClient is a controller-runtime client holding obj, with a status subresource.
func fakeClient(t *testing.T, obj *unstructured.Unstructured) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(GVK, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(GVK.GroupVersion().WithKind(GVK.Kind+"List"), &unstructured.UnstructuredList{})
	mapper := apimeta.NewDefaultRESTMapper(nil)
	mapper.Add(GVK, apimeta.RESTScopeNamespace)
	return fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithObjects(obj).WithStatusSubresource(obj).Build()
}

// condition returns the status and message of the condition cond of obj.
func condition(obj *unstructured.Unstructured, cond string) (string, string, string) {
	for _, c := range Conditions(obj) {
		if c.Type == cond {
			return string(c.Status), c.Reason, c.Message
		}
	}
	return "", "", ""
}

func observed(obj *unstructured.Unstructured) int64 {
	g, _, _ := unstructured.NestedInt64(obj.Object, "status", "observedGeneration")
	return g
}

func has(events []string, prefix, part string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) && strings.Contains(e, part) {
			return true
		}
	}
	return false
}
