// Package verdict asks kausality-stream's query API what a write a controller is about to make
// would be (GET /v1/verdict), and decides from the answer whether the controller may act.
//
// It is small on purpose, with no dependency beyond the standard library, so that a controller
// can copy it: Client asks, Guard decides (see guard.go). The API is described in
// docs/query-api.md of kausality-stream (with its OpenAPI document); the pattern and its
// limits in docs/leaf-controllers.md.
package verdict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Class is what kausality-stream would call the write.
type Class string

// The classes a verdict can give (DESIGN §1 of kausality-stream).
const (
	// Expected: the parent is reconciling (a person changed its spec, or the controller has
	// not finished the generation it observed): the write carries out a human intent.
	Expected Class = "expected"
	// Drift: the parent is stable and its controller would change a child anyway.
	Drift Class = "drift"
	// Origin: the user is not the parent's controller: the write would be a new intent.
	Origin Class = "origin"
	// Initializing: the parent has not been initialized yet.
	Initializing Class = "initializing"
	// Deleting: the parent (or its namespace) is being deleted: teardown.
	Deleting Class = "deleting"
	// Undetermined: the controller cannot be told from what the stream showed.
	Undetermined Class = "undetermined"
)

// Resolution says how a drift would be resolved by the parent's annotations or the platform's
// policies; empty when the class is not drift.
type Resolution string

// The resolutions of a drift.
const (
	Approved   Resolution = "approved"
	Rejected   Resolution = "rejected"
	Unresolved Resolution = "unresolved"
)

// Query names the parent (by UID, or by kind, namespace and name) and the user whose write to a
// child of it is asked about.
type Query struct {
	// Cluster as kausality-stream names it (the webhook path's /audit/{cluster}); empty: the
	// pipeline's default cluster.
	Cluster string
	// ParentUID, or ParentKind (Kind or Kind.group) with Namespace and ParentName.
	ParentUID  string
	ParentKind string
	Namespace  string
	ParentName string
	// User is the controller's own user name as the API server's audit events show it
	// (system:serviceaccount:NAMESPACE:NAME).
	User string
	// ChildKind is the kind the write goes to; approvals and rejections on the parent are
	// matched against it. Optional.
	ChildKind string
	// ChildName names an existing child of the parent, whose own recent updaters then count.
	// Optional; needs ChildKind.
	ChildName      string
	ChildNamespace string

	// Generation and ObservedGeneration are the parent's metadata.generation and
	// status.observedGeneration as the controller read them from the API server (0: not
	// given). They are not sent: the Guard compares them with the verdict's parent, and a
	// verdict whose parent is behind either was made before the audit stream showed what the
	// controller sees (a person's spec change, or the controller's own report that it is done).
	Generation         int64
	ObservedGeneration int64
}

func (q Query) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("cluster", q.Cluster)
	set("parentUid", q.ParentUID)
	set("parentKind", q.ParentKind)
	set("namespace", q.Namespace)
	set("parentName", q.ParentName)
	set("user", q.User)
	set("childKind", q.ChildKind)
	set("childName", q.ChildName)
	set("childNamespace", q.ChildNamespace)
	return v
}

// Verdict is the answer of GET /v1/verdict.
type Verdict struct {
	Class      Class      `json:"class"`
	Reason     string     `json:"reason"`
	Resolution Resolution `json:"resolution"`
	// Policy names what resolves the drift: the parent's annotation or a platform policy.
	Policy string `json:"policy"`
	// FreezeViolation: the parent is frozen (kausality.io/freeze) and the write is no teardown.
	FreezeViolation bool `json:"freezeViolation"`
	// Snoozed: the drift's report is silenced; it is drift all the same.
	Snoozed bool `json:"snoozed"`
	// RevertsPerson: the write would stand against a person's recent write.
	RevertsPerson bool   `json:"revertsPerson"`
	Parent        Parent `json:"parent"`
	Actor         Actor  `json:"actor"`
	// Child is the existing child asked about (Query.ChildName); nil for a new one.
	Child     *Child    `json:"child"`
	Freshness Freshness `json:"freshness"`
}

// Child is an existing child as the live state holds it; Name is empty when the state keeps
// no name for it.
type Child struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

// Parent is the parent as the live state holds it.
type Parent struct {
	APIVersion         string `json:"apiVersion"`
	Kind               string `json:"kind"`
	Namespace          string `json:"namespace"`
	Name               string `json:"name"`
	UID                string `json:"uid"`
	Generation         *int64 `json:"generation"`
	ObservedGeneration *int64 `json:"observedGeneration"`
	// Finished: the controller has finished the observed generation (nil without one).
	Finished *bool  `json:"finished"`
	Phase    string `json:"phase"`
}

// Actor says whether the user is the parent's controller, and who the controllers are.
type Actor struct {
	IsController *bool    `json:"isController"`
	Controllers  []string `json:"controllers"`
}

// Freshness says how current the state behind the verdict is.
type Freshness struct {
	// NewestEventTime is the event time of the newest write applied for the cluster; nil
	// before the first.
	NewestEventTime *time.Time `json:"newestEventTime"`
	// ReorderLagSeconds is how long every write waits before it is applied.
	ReorderLagSeconds float64 `json:"reorderLagSeconds"`
	// AgeSeconds is the server's now minus NewestEventTime; nil before the first write.
	AgeSeconds *float64 `json:"ageSeconds"`
}

// Age is how old the newest event behind the verdict is, and false when none was applied.
func (f Freshness) Age() (time.Duration, bool) {
	if f.AgeSeconds == nil {
		return 0, false
	}
	return time.Duration(*f.AgeSeconds * float64(time.Second)), true
}

// APIError is an answer other than 200: 400 (the query is malformed), 401 (credentials
// missing), 404 (the parent is not in the live state), 409 (more than one object answers to
// the name).
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("kausality-stream answered %d: %s", e.Status, e.Message)
}

// IsNotFound tells whether err is the server's 404: it holds no such parent (it never saw it,
// or not yet).
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

// Client asks one kausality-stream query API.
type Client struct {
	// BaseURL of the query listener, e.g. http://127.0.0.1:9091.
	BaseURL string
	// HTTP is the client used (TLS, client certificates); nil: a client with a 5 s timeout.
	HTTP *http.Client
	// Token is sent as "Authorization: Bearer" when set ([query] bearer_token_file).
	Token string
}

var defaultHTTP = &http.Client{Timeout: 5 * time.Second}

// Ask returns the verdict on a write by q.User to a child of q's parent, as of now.
func (c *Client) Ask(ctx context.Context, q Query) (*Verdict, error) {
	u := strings.TrimRight(c.BaseURL, "/") + "/v1/verdict?" + q.values().Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("verdict request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking kausality-stream for a verdict: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the verdict: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, &APIError{Status: resp.StatusCode, Message: msg}
	}
	var v Verdict
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("the verdict is not the JSON expected: %w", err)
	}
	if v.Class == "" {
		return nil, errors.New("the verdict has no class")
	}
	return &v, nil
}
