package verdict

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

type answer struct {
	v   *Verdict
	err error
}

func (a answer) Ask(context.Context, Query) (*Verdict, error) { return a.v, a.err }

func fresh(class Class, res Resolution) *Verdict {
	age := 1.5
	now := time.Now()
	return &Verdict{Class: class, Resolution: res, Reason: "r", Freshness: Freshness{NewestEventTime: &now, AgeSeconds: &age}}
}

func TestGuardDecidesEachClassAndResolution(t *testing.T) {
	frozen := fresh(Expected, "")
	frozen.FreezeViolation = true
	noAge := fresh(Expected, "")
	noAge.Freshness = Freshness{}
	old := fresh(Expected, "")
	hour := 3600.0
	old.Freshness.AgeSeconds = &hour
	approved := fresh(Drift, Approved)
	approved.Policy = "kausality.io/approvals"
	cases := []struct {
		name    string
		a       answer
		action  Action
		proceed bool
		trusted bool
		says    string
	}{
		{"expected", answer{v: fresh(Expected, "")}, Delete, true, true, "expected: r"},
		{"initializing", answer{v: fresh(Initializing, "")}, Delete, true, true, "initializing"},
		{"deleting", answer{v: fresh(Deleting, "")}, Delete, true, true, "deleting"},
		{"origin", answer{v: fresh(Origin, "")}, Delete, true, true, "origin"},
		{"drift unresolved", answer{v: fresh(Drift, Unresolved)}, Create, false, true, "this create would be drift (r)"},
		{"drift without a resolution", answer{v: fresh(Drift, "")}, Update, false, true, "this update would be drift"},
		{"drift rejected", answer{v: fresh(Drift, Rejected)}, Create, false, true, "drift rejected by policy"},
		{"drift approved", answer{v: approved}, Delete, true, true, "drift approved by kausality.io/approvals"},
		{"frozen, even expected", answer{v: frozen}, Create, false, true, "the parent is frozen"},
		{"undetermined delete", answer{v: fresh(Undetermined, "")}, Delete, false, false, "verdict undetermined: r (fail-closed for delete)"},
		{"undetermined create", answer{v: fresh(Undetermined, "")}, Create, true, false, "fail-open for create"},
		{"a class this guard does not know", answer{v: fresh("unowned", "")}, Delete, false, false, "verdict unowned"},
		{"no event applied yet", answer{v: noAge}, Delete, false, false, "applied no event of this cluster yet"},
		{"stale delete", answer{v: old}, Delete, false, false, "stale verdict: the newest event kausality-stream applied is 1h0m0s old (limit 1m0s)"},
		{"stale update", answer{v: old}, Update, true, false, "fail-open for update"},
		{"unreachable delete", answer{err: errors.New("connection refused")}, Delete, false, false, "no verdict (connection refused)"},
		{"unreachable create", answer{err: errors.New("connection refused")}, Create, true, false, "going on (fail-open for create)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := (&Guard{Asker: c.a}).Check(context.Background(), Query{}, c.action)
			if d.Proceed != c.proceed || d.Trusted != c.trusted || !strings.Contains(d.Reason, c.says) {
				t.Fatalf("got proceed=%v trusted=%v %q, want proceed=%v trusted=%v saying %q", d.Proceed, d.Trusted, d.Reason, c.proceed, c.trusted, c.says)
			}
			if d.Verdict != c.a.v {
				t.Fatalf("the decision does not carry the verdict it was made from")
			}
		})
	}
}

func TestGuardLimitsAndModesAreConfigurable(t *testing.T) {
	old := fresh(Expected, "")
	age := 90.0
	old.Freshness.AgeSeconds = &age
	if d := (&Guard{Asker: answer{v: old}}).Check(context.Background(), Query{}, Delete); d.Proceed {
		t.Fatalf("90 s old under the default limit of 60 s: %q, want held back", d.Reason)
	}
	if d := (&Guard{Asker: answer{v: old}, MaxAge: 2 * time.Minute}).Check(context.Background(), Query{}, Delete); !d.Proceed || !d.Trusted {
		t.Fatalf("90 s old under a limit of 2 min: %q, want trusted", d.Reason)
	}
	down := answer{err: errors.New("down")}
	if d := (&Guard{Asker: down, Unsure: AlwaysClosed}).Check(context.Background(), Query{}, Create); d.Proceed {
		t.Fatalf("AlwaysClosed let a create through: %q", d.Reason)
	}
	open := func(Action) Mode { return FailOpen }
	if d := (&Guard{Asker: down, Unsure: open}).Check(context.Background(), Query{}, Delete); !d.Proceed {
		t.Fatalf("fail-open everywhere held a delete back: %q", d.Reason)
	}
}

func TestClientSendsTheQueryAndReadsTheAnswer(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"class":"drift","reason":"stable","resolution":"approved","policy":"gpu-team","freezeViolation":false,
			"snoozed":false,"revertsPerson":true,
			"parent":{"apiVersion":"infra.example.com/v1alpha1","kind":"NodeGroup","namespace":"infra","name":"gpu","uid":"u1",
			          "generation":2,"observedGeneration":2,"finished":true,"phase":"initialized"},
			"actor":{"isController":true,"controllers":["system:serviceaccount:infra:nodegroup-controller"]},
			"child":{"apiVersion":"v1","kind":"ConfigMap","namespace":"infra","name":"gpu-nodes","uid":"c1"},
			"freshness":{"newestEventTime":"2026-11-24T18:00:00.000001Z","reorderLagSeconds":0.5,"ageSeconds":1.25}}`))
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/", Token: "s3cret"}
	v, err := c.Ask(context.Background(), Query{Cluster: "prod", ParentKind: "NodeGroup.infra.example.com", Namespace: "infra", ParentName: "gpu", User: "system:serviceaccount:infra:nodegroup-controller", ChildKind: "Node"})
	if err != nil {
		t.Fatal(err)
	}
	q := got.URL.Query()
	if got.URL.Path != "/v1/verdict" || q.Get("cluster") != "prod" || q.Get("parentKind") != "NodeGroup.infra.example.com" || q.Get("namespace") != "infra" ||
		q.Get("parentName") != "gpu" || q.Get("user") != "system:serviceaccount:infra:nodegroup-controller" || q.Get("childKind") != "Node" || q.Has("parentUid") || q.Has("childName") {
		t.Fatalf("request %s", got.URL)
	}
	if got.Header.Get("Authorization") != "Bearer s3cret" {
		t.Fatalf("Authorization %q", got.Header.Get("Authorization"))
	}
	age, ok := v.Freshness.Age()
	if v.Class != Drift || v.Resolution != Approved || v.Policy != "gpu-team" || !v.RevertsPerson || *v.Parent.Generation != 2 || !*v.Parent.Finished ||
		!*v.Actor.IsController || v.Child == nil || v.Child.Name != "gpu-nodes" || !ok || age != 1250*time.Millisecond || v.Freshness.NewestEventTime.Nanosecond() != 1000 {
		t.Fatalf("verdict %+v", v)
	}
}

func TestClientErrors(t *testing.T) {
	status, body := 0, ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	c := &Client{BaseURL: srv.URL}
	for _, tc := range []struct {
		status   int
		body     string
		notFound bool
		says     string
	}{
		{404, `{"error":"no object of UID u1 in the live state"}`, true, "answered 404: no object of UID u1"},
		{400, `{"error":"user is required"}`, false, "answered 400: user is required"},
		{401, `unauthorized`, false, "answered 401: unauthorized"},
		{200, `{"reason":"no class"}`, false, "the verdict has no class"},
		{200, `not json`, false, "not the JSON expected"},
	} {
		status, body = tc.status, tc.body
		_, err := c.Ask(context.Background(), Query{ParentUID: "u1", User: "u"})
		if err == nil || !strings.Contains(err.Error(), tc.says) || IsNotFound(err) != tc.notFound {
			t.Fatalf("%d %s: error %v, want one saying %q (not found: %v)", tc.status, tc.body, err, tc.says, tc.notFound)
		}
	}
	srv.Close()
	if _, err := c.Ask(context.Background(), Query{ParentUID: "u1", User: "u"}); err == nil || !strings.Contains(err.Error(), "asking kausality-stream for a verdict") {
		t.Fatalf("closed server: %v", err)
	}
}

// A verdict made before the stream showed what the controller read (a person's spec change, or
// the controller's own report that it is done) is not trusted: held back by default whatever
// the class, with Behind set; the Behind mode can let it through; a verdict that has caught up
// (equal, or ahead of what a lagging cache read) is trusted.
func TestGuardHoldsBackAVerdictBehindTheObject(t *testing.T) {
	at := func(class Class, gen, observed *int64) *Verdict {
		v := fresh(class, "")
		v.Parent.Generation, v.Parent.ObservedGeneration = gen, observed
		return v
	}
	n := func(i int64) *int64 { return &i }
	cases := []struct {
		name     string
		v        *Verdict
		gen, obs int64
		action   Action
		behind   bool
		proceed  bool
		says     string
	}{
		{"a spec change not shown yet: drift of the old generation", at(Drift, n(1), n(1)), 2, 1, Delete, true, false, "kausality-stream has the parent at generation 1, the API server at 2"},
		{"the controller's report not shown yet: expected of the unfinished generation", at(Expected, n(2), n(1)), 2, 2, Create, true, false, "the parent's observed generation at 1, the API server at 2"},
		{"no observed generation in the state yet", at(Expected, n(1), nil), 1, 1, Update, true, false, "observed generation at none"},
		{"no generation in the state", at(Expected, nil, nil), 3, 0, Create, true, false, "at generation none, the API server at 3"},
		{"caught up", at(Drift, n(2), n(2)), 2, 2, Delete, false, false, "would be drift"},
		{"caught up, expected", at(Expected, n(2), n(1)), 2, 1, Delete, false, true, "expected"},
		{"ahead of a cache that lags", at(Expected, n(3), n(2)), 2, 1, Create, false, true, "expected"},
		{"nothing read given", at(Expected, nil, nil), 0, 0, Delete, false, true, "expected"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := Query{Generation: c.gen, ObservedGeneration: c.obs}
			d := (&Guard{Asker: answer{v: c.v}}).Check(context.Background(), q, c.action)
			if d.Behind != c.behind || d.Proceed != c.proceed || !strings.Contains(d.Reason, c.says) {
				t.Fatalf("got behind=%v proceed=%v %q, want behind=%v proceed=%v saying %q", d.Behind, d.Proceed, d.Reason, c.behind, c.proceed, c.says)
			}
			if c.behind && (d.Trusted || !strings.Contains(d.Reason, "fail-closed for "+c.action.String())) {
				t.Fatalf("a verdict behind the object was trusted or did not say its mode: %q", d.Reason)
			}
		})
	}
	open := func(Action) Mode { return FailOpen }
	d := (&Guard{Asker: answer{v: at(Drift, n(1), n(1))}, Behind: open}).Check(context.Background(), Query{Generation: 2}, Delete)
	if !d.Proceed || !d.Behind || d.Trusted {
		t.Fatalf("Behind fail-open: proceed=%v behind=%v trusted=%v %q, want it to go on untrusted", d.Proceed, d.Behind, d.Trusted, d.Reason)
	}
	// Stale beats behind: the age says more about the stream than the generation does.
	old := at(Drift, n(1), n(1))
	hour := 3600.0
	old.Freshness.AgeSeconds = &hour
	if d := (&Guard{Asker: answer{v: old}}).Check(context.Background(), Query{Generation: 2}, Delete); d.Behind || !strings.Contains(d.Reason, "stale verdict") {
		t.Fatalf("stale and behind: behind=%v %q, want the stale reason", d.Behind, d.Reason)
	}
	// The generations read are not sent: the server answers for the parent as it has it.
	if v := (Query{ParentUID: "u", User: "x", Generation: 2, ObservedGeneration: 1}).values(); v.Has("generation") || v.Has("observedGeneration") || len(v) != 2 {
		t.Fatalf("query parameters %v, want parentUid and user only", v)
	}
}
