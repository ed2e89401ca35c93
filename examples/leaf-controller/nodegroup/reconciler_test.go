package nodegroup

import (
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"kausality-stream/examples/leaf-controller/internal/kausalitytest"
	"kausality-stream/examples/leaf-controller/verdict"
)

const group = "infra/gpu"

func reconciler(c verdict.Asker, cloud Cloud, cluster string) Reconciler {
	return Reconciler{
		Cloud:       cloud,
		Guard:       &verdict.Guard{Asker: c},
		Cluster:     cluster,
		User:        controllerUser,
		ChildKind:   "Node",
		HoldRequeue: 20 * time.Second,
	}
}

// The controller of a stable NodeGroup (generation observed, finished) asks before it acts:
// a cloud call that nobody asked for is drift and is held back (A); a person's spec change
// makes it expected (B); an approval on the parent lets a drift through (C). Each verdict
// comes from a real kausality-stream fed the recorded stream over its webhook.
func TestReconcilerAsksTheLiveVerdict(t *testing.T) {
	kaus := kausalitytest.Start(t)
	s := newStory("1eaf", time.Now().Add(-2*time.Second), 3)
	v := s.post(t, kaus, "leaf")
	if v.Class != verdict.Drift || v.Resolution != verdict.Unresolved {
		t.Fatalf("the controller's write after it reported generation 1 done: %s/%s (%s), want drift/unresolved", v.Class, v.Resolution, v.Reason)
	}
	if g, o := v.Parent.Generation, v.Parent.ObservedGeneration; g == nil || o == nil || *g != 1 || *o != 1 || v.Parent.Finished == nil || !*v.Parent.Finished {
		t.Fatalf("parent: generation %v observed %v finished %v, want 1, 1, true", g, o, v.Parent.Finished)
	}
	if v.Actor.IsController == nil || !*v.Actor.IsController || !reflect.DeepEqual(v.Actor.Controllers, []string{controllerUser}) {
		t.Fatalf("actor: %+v, want the controller identified from its status writes", v.Actor)
	}

	// A: someone scaled the group to 5 in the cloud's console; the NodeGroup says 3. Removing
	// 2 nodes now would be drift: held back, no call.
	cloud := newCloud(group, 5)
	res, after, events := s.reconcile(t, reconciler(kaus.Client(), cloud, "leaf"))
	if calls := cloud.Calls(); len(calls) != 0 {
		t.Fatalf("A: cloud calls %v on drift, want none", calls)
	}
	if res.RequeueAfter != 20*time.Second {
		t.Fatalf("A: requeue after %s, want 20s (asks again)", res.RequeueAfter)
	}
	if st, reason, msg := condition(after, "Synced"); st != "False" || reason != ReasonHeldBack || !strings.Contains(msg, "would be drift") {
		t.Fatalf("A: Synced=%s %s %q, want False HeldBack saying it would be drift", st, reason, msg)
	}
	if !has(events, "Warning HeldBack", "5 to 3 nodes held back: this delete would be drift") {
		t.Fatalf("A: events %q, want a HeldBack warning", events)
	}
	if observed(after) != 1 {
		t.Fatalf("A: observedGeneration %d, want 1", observed(after))
	}

	// B: a person asks for 8 nodes (generation 2): the same controller's call is expected.
	s.resize(8)
	v = s.post(t, kaus, "leaf")
	if v.Class != verdict.Expected || v.Resolution != "" {
		t.Fatalf("B: after a person's spec change: %s/%s (%s), want expected", v.Class, v.Resolution, v.Reason)
	}
	res, after, events = s.reconcile(t, reconciler(kaus.Client(), cloud, "leaf"))
	if calls := cloud.Calls(); !reflect.DeepEqual(calls, []string{"add infra/gpu 3"}) {
		t.Fatalf("B: cloud calls %v, want one add of 3", calls)
	}
	if res.RequeueAfter != 0 || observed(after) != 2 || !has(events, "Normal Scaled", "5 to 8 nodes (expected:") {
		t.Fatalf("B: requeue %s, observedGeneration %d, events %q: want done, 2, Scaled", res.RequeueAfter, observed(after), events)
	}
	// The controller reports generation 2 done: the stream shows the parent stable again, and
	// a node lost behind its back is not replaced without asking.
	s.report()
	if v = s.post(t, kaus, "leaf"); v.Class != verdict.Drift {
		t.Fatalf("B: after the controller reported generation 2 done: %s, want drift", v.Class)
	}
	cloud.nodes[group] = 6
	_, _, events = s.reconcile(t, reconciler(kaus.Client(), cloud, "leaf"))
	if calls := cloud.Calls(); len(calls) != 1 || !has(events, "Warning HeldBack", "this create would be drift") {
		t.Fatalf("B: replacing nodes while stable: calls %v, events %q, want held back", calls, events)
	}

	// C: an approval for another kind of child leaves it drift; one for Node children at
	// generation 2 approves it, and the call is made.
	s.annotate("kausality.io/approvals", `[{"apiVersion":"*","kind":"ConfigMap","name":"*","generation":2,"mode":"generation"}]`)
	if v = s.post(t, kaus, "leaf"); v.Class != verdict.Drift || v.Resolution != verdict.Unresolved {
		t.Fatalf("C: approval of ConfigMap children: %s/%s, want drift/unresolved", v.Class, v.Resolution)
	}
	if _, _, events = s.reconcile(t, reconciler(kaus.Client(), cloud, "leaf")); len(cloud.Calls()) != 1 {
		t.Fatalf("C: approval of another kind let the call through: %v, events %q", cloud.Calls(), events)
	}
	s.annotate("kausality.io/approvals", `[{"apiVersion":"*","kind":"Node","name":"*","generation":2,"mode":"generation"}]`)
	if v = s.post(t, kaus, "leaf"); v.Class != verdict.Drift || v.Resolution != verdict.Approved {
		t.Fatalf("C: approval of Node children at generation 2: %s/%s (%s), want drift/approved", v.Class, v.Resolution, v.Reason)
	}
	_, after, events = s.reconcile(t, reconciler(kaus.Client(), cloud, "leaf"))
	if calls := cloud.Calls(); !reflect.DeepEqual(calls, []string{"add infra/gpu 3", "add infra/gpu 2"}) {
		t.Fatalf("C: cloud calls %v, want the approved add of 2", calls)
	}
	if st, _, _ := condition(after, "Synced"); st != "True" || !has(events, "Normal Scaled", "6 to 8 nodes (drift approved by") {
		t.Fatalf("C: Synced=%s, events %q, want True and Scaled by the approval", st, events)
	}
}

// D: a verdict is no better than the stream behind it. A stream whose newest event is an hour
// old gives a verdict that is not trusted, whatever its class: a delete is held back, a
// create goes on by default (fail-open) or is held back when configured fail-closed. An
// unreachable server is the same.
func TestReconcilerDistrustsAStaleVerdict(t *testing.T) {
	kaus := kausalitytest.Start(t)
	s := newStory("57a1", time.Now().Add(-time.Hour), 3)
	s.resize(1)
	v := s.post(t, kaus, "stale")
	if v.Class != verdict.Expected {
		t.Fatalf("a person's spec change, an hour ago: %s (%s), want expected", v.Class, v.Reason)
	}
	if age, ok := v.Freshness.Age(); !ok || age < 59*time.Minute {
		t.Fatalf("freshness %+v, want an age of about an hour", v.Freshness)
	}

	// The person asked for 1 node, the cloud has 3: a delete, not trusted, held back.
	cloud := newCloud(group, 3)
	res, after, events := s.reconcile(t, reconciler(kaus.Client(), cloud, "stale"))
	if calls := cloud.Calls(); len(calls) != 0 || res.RequeueAfter == 0 {
		t.Fatalf("stale delete: calls %v, requeue %s, want none and a requeue", calls, res.RequeueAfter)
	}
	if !has(events, "Warning HeldBack", "stale verdict") || !has(events, "Warning HeldBack", "fail-closed for delete") {
		t.Fatalf("stale delete: events %q, want held back as stale, fail-closed", events)
	}
	if st, reason, _ := condition(after, "Synced"); st != "False" || reason != ReasonHeldBack || observed(after) != 1 {
		t.Fatalf("stale delete: Synced=%s %s, observedGeneration %d: want False HeldBack, 1 (generation 2 not carried out)", st, reason, observed(after))
	}

	// The cloud has 0: adding 1 goes on by default, and is held back when fail-closed.
	cloud = newCloud(group, 0)
	r := reconciler(kaus.Client(), cloud, "stale")
	r.Guard.Unsure = verdict.AlwaysClosed
	if _, _, events = s.reconcile(t, r); len(cloud.Calls()) != 0 || !has(events, "Warning HeldBack", "fail-closed for create") {
		t.Fatalf("stale create, fail-closed: calls %v, events %q, want held back", cloud.Calls(), events)
	}
	if _, _, events = s.reconcile(t, reconciler(kaus.Client(), cloud, "stale")); !reflect.DeepEqual(cloud.Calls(), []string{"add infra/gpu 1"}) ||
		!has(events, "Normal Scaled", "fail-open for create") {
		t.Fatalf("stale create, default: calls %v, events %q, want the add made, fail-open", cloud.Calls(), events)
	}

	// A fresh guard with a limit above the stream's age trusts it: the delete goes on.
	cloud = newCloud(group, 3)
	r = reconciler(kaus.Client(), cloud, "stale")
	r.Guard.MaxAge = 2 * time.Hour
	if _, _, events = s.reconcile(t, r); !reflect.DeepEqual(cloud.Calls(), []string{"remove infra/gpu 2"}) {
		t.Fatalf("delete under a 2 h limit: calls %v, events %q, want the remove made", cloud.Calls(), events)
	}

	// Nothing listens: no verdict; the delete is held back, saying why.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := &verdict.Client{BaseURL: "http://" + l.Addr().String()}
	l.Close()
	cloud = newCloud(group, 3)
	if _, _, events = s.reconcile(t, reconciler(closed, cloud, "stale")); len(cloud.Calls()) != 0 || !has(events, "Warning HeldBack", "no verdict (asking kausality-stream") {
		t.Fatalf("unreachable: calls %v, events %q, want held back", cloud.Calls(), events)
	}
}

// E: the reconciler reads the NodeGroup from the API server, which is ahead of the audit
// stream by its batching delay. A verdict made before the stream showed what was read is held
// back quietly (no warning, no status write) and asked again soon: a person's spec change not
// yet shown would read as drift of the old generation, and the controller's own report that
// it is done, not yet shown, as `expected` where the truth is drift.
func TestReconcilerWaitsForAStreamBehindTheObject(t *testing.T) {
	kaus := kausalitytest.Start(t)
	s := newStory("be41", time.Now().Add(-2*time.Second), 3)
	s.post(t, kaus, "behind")

	// A person scales the group down to 1; the stream has not shown it yet.
	s.resize(1)
	cloud := newCloud(group, 3)
	r := reconciler(kaus.Client(), cloud, "behind")
	r.BehindRequeue = 500 * time.Millisecond
	res, after, events := s.reconcile(t, r)
	if calls := cloud.Calls(); len(calls) != 0 || res.RequeueAfter != 500*time.Millisecond || len(events) != 0 {
		t.Fatalf("spec change not in the stream: calls %v, requeue %s, events %q, want none, 500ms, none", calls, res.RequeueAfter, events)
	}
	if st, _, _ := condition(after, "Synced"); st != "True" || observed(after) != 1 {
		t.Fatalf("spec change not in the stream: Synced=%s, observedGeneration %d, want the status untouched (True, 1)", st, observed(after))
	}
	// Once it is, the same reconcile goes on: expected.
	if v := s.post(t, kaus, "behind"); v.Class != verdict.Expected {
		t.Fatalf("after the spec change is shown: %s (%s), want expected", v.Class, v.Reason)
	}
	if _, _, events = s.reconcile(t, r); !reflect.DeepEqual(cloud.Calls(), []string{"remove infra/gpu 2"}) || !has(events, "Normal Scaled", "3 to 1 nodes (expected:") {
		t.Fatalf("spec change shown: calls %v, events %q, want the remove of 2, expected", cloud.Calls(), events)
	}

	// The controller reports generation 2 done; before the stream shows it, a node is lost. The
	// verdict of the stream so far is `expected` (generation 2 not finished): trusted, it would
	// let a replacement nobody asked for through. Behind the object, it is held back.
	s.report()
	cloud.nodes[group] = 0
	res, _, events = s.reconcile(t, r)
	if calls := cloud.Calls(); len(calls) != 1 || res.RequeueAfter != 500*time.Millisecond || len(events) != 0 {
		t.Fatalf("own report not in the stream: calls %v, requeue %s, events %q, want no new call, 500ms, none", calls, res.RequeueAfter, events)
	}
	if v := s.post(t, kaus, "behind"); v.Class != verdict.Drift {
		t.Fatalf("after the report is shown: %s (%s), want drift", v.Class, v.Reason)
	}
	if _, _, events = s.reconcile(t, r); len(cloud.Calls()) != 1 || !has(events, "Warning HeldBack", "this create would be drift") {
		t.Fatalf("report shown: calls %v, events %q, want held back as drift", cloud.Calls(), events)
	}
}
