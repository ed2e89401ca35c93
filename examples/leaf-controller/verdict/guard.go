package verdict

import (
	"context"
	"fmt"
	"time"
)

// Action is what the controller is about to do outside the cluster.
type Action int

// The actions a guard tells apart: deletes cannot be undone, so by default they are held back
// whenever the verdict cannot be trusted.
const (
	Create Action = iota
	Update
	Delete
)

func (a Action) String() string {
	switch a {
	case Create:
		return "create"
	case Update:
		return "update"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Mode says what to do when no verdict can be trusted: kausality-stream unreachable or
// answering an error, a stale verdict, or a class that says nothing (undetermined).
type Mode int

const (
	// FailClosed holds the action back until a verdict can be trusted.
	FailClosed Mode = iota
	// FailOpen goes on as if there were no guard.
	FailOpen
)

// Asker is what a Guard asks: a *Client, or a stand-in in tests.
type Asker interface {
	Ask(ctx context.Context, q Query) (*Verdict, error)
}

// DefaultMaxAge is the oldest a verdict's newest event may be before the verdict is not
// trusted. kube-apiserver's webhook backend sends audit events in batches (by default at most
// 30 s apart, --audit-webhook-batch-max-wait), so a younger limit would call a healthy stream
// stale between batches.
const DefaultMaxAge = 60 * time.Second

// Guard decides from a verdict whether an action may go ahead.
type Guard struct {
	Asker Asker
	// MaxAge: a verdict whose newest event is older is not trusted. Zero: DefaultMaxAge.
	MaxAge time.Duration
	// Unsure says what to do per action when no verdict can be trusted. Nil: DefaultUnsure.
	Unsure func(Action) Mode
	// Behind says what to do per action when the verdict's parent is behind the generation or
	// observed generation the query says the controller read (Query.Generation,
	// Query.ObservedGeneration). Nil: AlwaysClosed, because the stream catches up within its
	// batching delay, and a verdict behind the controller's own report that it is done would
	// read `expected` where the truth is `drift`.
	Behind func(Action) Mode
}

// DefaultUnsure fails closed for deletes (they cannot be undone) and open for the rest (a
// create or update that turns out to be drift can be taken back).
func DefaultUnsure(a Action) Mode {
	if a == Delete {
		return FailClosed
	}
	return FailOpen
}

// AlwaysClosed holds every action back when no verdict can be trusted.
func AlwaysClosed(Action) Mode { return FailClosed }

// Decision is a guard's answer.
type Decision struct {
	// Proceed: the action may go ahead.
	Proceed bool
	// Reason says why, in words fit for an event or a condition.
	Reason string
	// Verdict is the answer the decision was made from; nil when there was none.
	Verdict *Verdict
	// Trusted: the decision was made from a verdict that could be trusted (false: the Mode
	// for an unsure answer decided).
	Trusted bool
	// Behind: the verdict was behind the object the controller read; asking again in a few
	// seconds (once the audit stream has caught up) gives one that can be trusted.
	Behind bool
}

// Check asks for the verdict on q and decides whether action a may go ahead:
//   - a verdict whose parent is behind the generation or observed generation q says the
//     controller read: as Behind(a) says (held back by default), with Decision.Behind set;
//   - expected, initializing, deleting, origin: go ahead;
//   - drift approved by the parent's annotations or a platform policy: go ahead;
//   - drift unresolved or rejected, or a frozen parent: hold back;
//   - no verdict, a stale one, or undetermined: as Unsure(a) says.
func (g *Guard) Check(ctx context.Context, q Query, a Action) Decision {
	v, err := g.Asker.Ask(ctx, q)
	if err != nil {
		return g.unsure(a, nil, fmt.Sprintf("no verdict (%v)", err))
	}
	age, ok := v.Freshness.Age()
	if !ok {
		return g.unsure(a, v, "no verdict to trust: kausality-stream has applied no event of this cluster yet")
	}
	if limit := g.maxAge(); age > limit {
		return g.unsure(a, v, fmt.Sprintf("stale verdict: the newest event kausality-stream applied is %s old (limit %s); the audit stream may be stalled", age.Round(time.Second), limit))
	}
	if why, behind := behindObject(q, v); behind {
		mode := AlwaysClosed
		if g.Behind != nil {
			mode = g.Behind
		}
		d := decide(mode, a, v, why)
		d.Behind = true
		return d
	}
	if v.FreezeViolation {
		return Decision{Reason: fmt.Sprintf("held back: the parent is frozen (%s)", v.Reason), Verdict: v, Trusted: true}
	}
	switch v.Class {
	case Expected, Initializing, Deleting, Origin:
		return Decision{Proceed: true, Reason: fmt.Sprintf("%s: %s", v.Class, v.Reason), Verdict: v, Trusted: true}
	case Drift:
		if v.Resolution == Approved {
			return Decision{Proceed: true, Reason: fmt.Sprintf("drift approved by %s: %s", policyName(v), v.Reason), Verdict: v, Trusted: true}
		}
		if v.Resolution == Rejected {
			return Decision{Reason: fmt.Sprintf("held back: drift rejected by %s: %s", policyName(v), v.Reason), Verdict: v, Trusted: true}
		}
		return Decision{Reason: fmt.Sprintf("held back: this %s would be drift (%s); approve it with kausality.io/approvals on the parent, or change the parent's spec", a, v.Reason), Verdict: v, Trusted: true}
	}
	return g.unsure(a, v, fmt.Sprintf("verdict %s: %s", v.Class, v.Reason))
}

func policyName(v *Verdict) string {
	if v.Policy == "" {
		return "policy"
	}
	return v.Policy
}

func (g *Guard) maxAge() time.Duration {
	if g.MaxAge > 0 {
		return g.MaxAge
	}
	return DefaultMaxAge
}

// behindObject says whether the verdict's parent is behind the generation or the observed
// generation the controller read, and how.
func behindObject(q Query, v *Verdict) (string, bool) {
	p := v.Parent
	if q.Generation > 0 && (p.Generation == nil || *p.Generation < q.Generation) {
		return fmt.Sprintf("the verdict is behind the object: kausality-stream has the parent at generation %s, the API server at %d (the audit stream has not shown the latest spec change yet)", orNone(p.Generation), q.Generation), true
	}
	if q.ObservedGeneration > 0 && (p.ObservedGeneration == nil || *p.ObservedGeneration < q.ObservedGeneration) {
		return fmt.Sprintf("the verdict is behind the object: kausality-stream has the parent's observed generation at %s, the API server at %d (the audit stream has not shown the controller's latest status write yet)", orNone(p.ObservedGeneration), q.ObservedGeneration), true
	}
	return "", false
}

func orNone(n *int64) string {
	if n == nil {
		return "none"
	}
	return fmt.Sprint(*n)
}

func (g *Guard) unsure(a Action, v *Verdict, why string) Decision {
	mode := DefaultUnsure
	if g.Unsure != nil {
		mode = g.Unsure
	}
	return decide(mode, a, v, why)
}

// decide applies mode to an answer that cannot be trusted.
func decide(mode func(Action) Mode, a Action, v *Verdict, why string) Decision {
	if mode(a) == FailOpen {
		return Decision{Proceed: true, Reason: fmt.Sprintf("%s; going on (fail-open for %s)", why, a), Verdict: v}
	}
	return Decision{Reason: fmt.Sprintf("held back: %s (fail-closed for %s)", why, a), Verdict: v}
}
