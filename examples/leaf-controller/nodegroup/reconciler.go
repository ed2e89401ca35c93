// Package nodegroup is a leaf controller: it keeps a cloud's node group at the size a NodeGroup
// object asks for, and asks kausality-stream before every change it makes out there, because
// nothing in the cluster can undo a cloud API call.
//
// The NodeGroup (infra.example.com/v1alpha1) stands in for a managed resource of Crossplane,
// ACK or an OpenTofu controller: spec.size is the desired number of nodes; status carries
// observedGeneration and the conditions Ready and Synced. It is handled as an unstructured
// object so that the example needs no generated types.
package nodegroup

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"kausality-stream/examples/leaf-controller/verdict"
)

// GVK is the NodeGroup's group, version and kind.
var GVK = schema.GroupVersionKind{Group: "infra.example.com", Version: "v1alpha1", Kind: "NodeGroup"}

// New returns an empty NodeGroup to read into.
func New() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	return u
}

// Cloud is the external API the controller drives. Nothing kausality-stream sees: it learns of
// these calls only through the NodeGroup's status.
type Cloud interface {
	// Nodes is how many nodes the group has now.
	Nodes(ctx context.Context, group string) (int64, error)
	AddNodes(ctx context.Context, group string, n int64) error
	RemoveNodes(ctx context.Context, group string, n int64) error
}

// Reasons of the events and conditions the controller writes.
const (
	ReasonHeldBack = "HeldBack"
	ReasonScaled   = "Scaled"
	ReasonInSync   = "InSync"
	ReasonFailed   = "CloudCallFailed"
)

// Reconciler keeps the cloud's node groups at their NodeGroup's size.
type Reconciler struct {
	Client   client.Client
	Cloud    Cloud
	Recorder events.EventRecorder
	// Guard decides from kausality-stream's verdict whether a cloud call may go ahead.
	Guard *verdict.Guard
	// Cluster is the cluster's name in kausality-stream (its webhook path /audit/{cluster}).
	Cluster string
	// User is this controller's user as the API server's audit events name it.
	User string
	// ChildKind is the kind the verdict is asked for: approvals on the NodeGroup name it.
	ChildKind string
	// HoldRequeue is how long a held-back reconcile waits before asking again. Zero: 30 s.
	HoldRequeue time.Duration
	// BehindRequeue is how long a reconcile held back by a verdict behind the NodeGroup waits
	// before asking again: about the audit stream's batching delay. Zero: 2 s.
	BehindRequeue time.Duration
}

// SetupWithManager registers the controller with a manager: it watches NodeGroups.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(New()).Named("nodegroup").Complete(r)
}

// Reconcile compares the NodeGroup's spec.size with the cloud and, when they differ, asks the
// guard before it adds or removes nodes. Held back, it writes why (an event and the Synced
// condition) and asks again after HoldRequeue; its observedGeneration stays where it was, so
// a spec change still reads as work to do.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ng := New()
	if err := r.Client.Get(ctx, req.NamespacedName, ng); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if ng.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	want, found, err := unstructured.NestedInt64(ng.Object, "spec", "size")
	if err != nil || !found || want < 0 {
		return ctrl.Result{}, r.setSynced(ctx, ng, metav1.ConditionFalse, "InvalidSpec", "spec.size must be a number of nodes, 0 or more", false)
	}
	group := req.String()
	have, err := r.Cloud.Nodes(ctx, group)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("reading node group %s: %w", group, err)
	}
	if have == want {
		return ctrl.Result{}, r.setSynced(ctx, ng, metav1.ConditionTrue, ReasonInSync, fmt.Sprintf("%d nodes", have), true)
	}

	action := verdict.Create
	if want < have {
		action = verdict.Delete
	}
	d := r.Guard.Check(ctx, r.query(ng), action)
	if !d.Proceed && d.Behind {
		// The stream has not shown this NodeGroup as read here yet: ask again once it has,
		// without a warning (nothing was judged) or a status write (which would be one more
		// write for the stream to catch up with).
		ctrl.LoggerFrom(ctx).Info("cloud call waits for the audit stream", "group", group, "reason", d.Reason)
		return ctrl.Result{RequeueAfter: r.behindRequeue()}, nil
	}
	if !d.Proceed {
		r.Recorder.Eventf(ng, nil, corev1.EventTypeWarning, ReasonHeldBack, "Scale", "%d to %d nodes %s", have, want, d.Reason)
		return ctrl.Result{RequeueAfter: r.holdRequeue()}, r.setSynced(ctx, ng, metav1.ConditionFalse, ReasonHeldBack, d.Reason, false)
	}
	if action == verdict.Delete {
		err = r.Cloud.RemoveNodes(ctx, group, have-want)
	} else {
		err = r.Cloud.AddNodes(ctx, group, want-have)
	}
	if err != nil {
		r.Recorder.Eventf(ng, nil, corev1.EventTypeWarning, ReasonFailed, "Scale", "%d to %d nodes: %v", have, want, err)
		return ctrl.Result{}, fmt.Errorf("scaling node group %s: %w", group, err)
	}
	r.Recorder.Eventf(ng, nil, corev1.EventTypeNormal, ReasonScaled, "Scale", "%d to %d nodes (%s)", have, want, d.Reason)
	return ctrl.Result{}, r.setSynced(ctx, ng, metav1.ConditionTrue, ReasonScaled, fmt.Sprintf("%d nodes", want), true)
}

// query asks about a child write to ng, with ng's generation and observed generation as read
// here: the guard does not trust a verdict whose parent is behind them.
func (r *Reconciler) query(ng *unstructured.Unstructured) verdict.Query {
	observed, _, _ := unstructured.NestedInt64(ng.Object, "status", "observedGeneration")
	return verdict.Query{Cluster: r.Cluster, ParentUID: string(ng.GetUID()), User: r.User, ChildKind: r.ChildKind,
		Generation: ng.GetGeneration(), ObservedGeneration: observed}
}

func (r *Reconciler) behindRequeue() time.Duration {
	if r.BehindRequeue > 0 {
		return r.BehindRequeue
	}
	return 2 * time.Second
}

func (r *Reconciler) holdRequeue() time.Duration {
	if r.HoldRequeue > 0 {
		return r.HoldRequeue
	}
	return 30 * time.Second
}

// setSynced writes the Synced condition; done also reports the generation observed and Ready.
func (r *Reconciler) setSynced(ctx context.Context, ng *unstructured.Unstructured, status metav1.ConditionStatus, reason, message string, done bool) error {
	conds := Conditions(ng)
	// Held back, the generation observed stays the one last carried out: kausality-stream
	// reads status.observedGeneration (and else the Synced condition's) as the generation the
	// controller has taken in, and a spec change must keep reading as work to do.
	observed, _, _ := unstructured.NestedInt64(ng.Object, "status", "observedGeneration")
	if done {
		observed = ng.GetGeneration()
		apimeta.SetStatusCondition(&conds, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: observed})
		if err := unstructured.SetNestedField(ng.Object, observed, "status", "observedGeneration"); err != nil {
			return err
		}
	}
	apimeta.SetStatusCondition(&conds, metav1.Condition{Type: "Synced", Status: status, Reason: reason, Message: message, ObservedGeneration: observed})
	list := make([]any, 0, len(conds))
	for _, c := range conds {
		m, err := toMap(c)
		if err != nil {
			return err
		}
		list = append(list, m)
	}
	if err := unstructured.SetNestedSlice(ng.Object, list, "status", "conditions"); err != nil {
		return err
	}
	return r.Client.Status().Update(ctx, ng)
}
