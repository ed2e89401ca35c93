// Package audit writes audit events the way kube-apiserver does (audit.k8s.io/v1, level
// RequestResponse, stage ResponseComplete), for a stream whose intent the test knows: every
// write gets the next resourceVersion, metadata.generation moves on spec changes only, status
// goes through its subresource.
package audit

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"time"
)

// Object is a Kubernetes object as JSON holds it.
type Object = map[string]any

// Ref names an object the API server holds.
type Ref struct {
	APIVersion, Kind, Resource, Namespace, Name, UID string
}

// APIServer hands out resourceVersions, UIDs, auditIDs and event times, and keeps the objects.
type APIServer struct {
	now     time.Time
	rv      int64
	ids     int
	objects map[string]Object
	// Prefix makes the UIDs and auditIDs of one stream differ from another's.
	prefix string
}

// NewAPIServer starts its clock at start: each write is one millisecond after the one before.
func NewAPIServer(prefix string, start time.Time) *APIServer {
	return &APIServer{now: start, rv: 1000, objects: map[string]Object{}, prefix: prefix}
}

// Now is the time of the last write.
func (s *APIServer) Now() time.Time { return s.now }

// Get returns a copy of the object as stored.
func (s *APIServer) Get(r Ref) Object { return clone(s.objects[r.UID]) }

func (s *APIServer) id(tag string) string {
	s.ids++
	return fmt.Sprintf("%s-%s-4000-8000-%012x", s.prefix, tag, s.ids)
}

func (s *APIServer) tick() {
	s.now = s.now.Add(time.Millisecond)
}

// Create stores obj (apiVersion, kind, metadata.name and namespace, spec) with a new UID,
// generation 1 when it has a spec; returns its reference and the audit event.
func (s *APIServer) Create(user, resource string, obj Object) (Ref, Object) {
	s.tick()
	s.rv++
	obj = clone(obj)
	md := obj["metadata"].(Object)
	md["uid"] = s.id("0b1e")
	md["resourceVersion"] = fmt.Sprint(s.rv)
	md["creationTimestamp"] = s.now.UTC().Format(time.RFC3339)
	if _, ok := obj["spec"]; ok {
		md["generation"] = int64(1)
	}
	r := Ref{APIVersion: obj["apiVersion"].(string), Kind: obj["kind"].(string), Resource: resource, Namespace: str(md["namespace"]), Name: str(md["name"]), UID: md["uid"].(string)}
	s.objects[r.UID] = obj
	return r, s.event("create", "", user, r, 201, obj)
}

// Update changes the object with f as verb update; the generation moves when the spec (or,
// for kinds without one, anything but metadata and status) changed. Status is kept: it has
// its own subresource.
func (s *APIServer) Update(user string, r Ref, f func(Object)) Object {
	s.tick()
	old := s.objects[r.UID]
	obj := clone(old)
	f(obj)
	if st, ok := old["status"]; ok {
		obj["status"] = clone(Object{"s": st})["s"]
	}
	md := obj["metadata"].(Object)
	if !reflect.DeepEqual(content(obj), content(old)) {
		if g, ok := md["generation"].(int64); ok {
			md["generation"] = g + 1
		}
	}
	if !reflect.DeepEqual(obj, old) {
		s.rv++
		md["resourceVersion"] = fmt.Sprint(s.rv)
	}
	s.objects[r.UID] = obj
	return s.event("update", "", user, r, 200, obj)
}

// UpdateStatus writes through the status subresource: only status changes.
func (s *APIServer) UpdateStatus(user string, r Ref, status Object) Object {
	s.tick()
	obj := clone(s.objects[r.UID])
	obj["status"] = clone(status)
	s.rv++
	obj["metadata"].(Object)["resourceVersion"] = fmt.Sprint(s.rv)
	s.objects[r.UID] = obj
	return s.event("update", "status", user, r, 200, obj)
}

// Generation is the object's metadata.generation.
func (s *APIServer) Generation(r Ref) int64 {
	g, _ := s.objects[r.UID]["metadata"].(Object)["generation"].(int64)
	return g
}

func (s *APIServer) event(verb, subresource, user string, r Ref, code int, response Object) Object {
	group, version := "", r.APIVersion
	if g, v, ok := strings.Cut(r.APIVersion, "/"); ok {
		group, version = g, v
	}
	prefix := "/api/" + r.APIVersion
	if group != "" {
		prefix = "/apis/" + r.APIVersion
	}
	uri := fmt.Sprintf("%s/namespaces/%s/%s", prefix, r.Namespace, r.Resource)
	ref := Object{"resource": r.Resource, "namespace": r.Namespace, "name": r.Name, "apiGroup": group, "apiVersion": version}
	if verb != "create" {
		uri += "/" + r.Name
		ref["uid"] = r.UID
	}
	if subresource != "" {
		uri += "/" + subresource
		ref["subresource"] = subresource
	}
	ts := s.now.UTC().Format("2006-01-02T15:04:05.000000Z")
	received := s.now.Add(-500 * time.Microsecond).UTC().Format("2006-01-02T15:04:05.000000Z")
	groups := []any{"system:authenticated"}
	if strings.HasPrefix(user, "system:serviceaccount:") {
		groups = []any{"system:serviceaccounts", "system:authenticated"}
	}
	return Object{
		"kind":                     "Event",
		"apiVersion":               "audit.k8s.io/v1",
		"level":                    "RequestResponse",
		"auditID":                  s.id("a0d1"),
		"stage":                    "ResponseComplete",
		"requestURI":               uri,
		"verb":                     verb,
		"user":                     Object{"username": user, "groups": groups},
		"sourceIPs":                []any{"127.0.0.1"},
		"userAgent":                "leaf-controller-test",
		"objectRef":                ref,
		"responseStatus":           Object{"metadata": Object{}, "code": int64(code)},
		"responseObject":           clone(response),
		"requestReceivedTimestamp": received,
		"stageTimestamp":           ts,
		"annotations":              Object{"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
	}
}

// EventList is the body kube-apiserver's webhook backend POSTs.
func EventList(events []Object) []byte {
	items := make([]any, len(events))
	for i, e := range events {
		items[i] = e
	}
	b, err := json.Marshal(Object{"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "metadata": Object{}, "items": items})
	if err != nil {
		panic(err)
	}
	return b
}

// OwnerRef is the controller ownerReference to r.
func OwnerRef(r Ref) []any {
	return []any{Object{"apiVersion": r.APIVersion, "kind": r.Kind, "name": r.Name, "uid": r.UID, "controller": true, "blockOwnerDeletion": true}}
}

// content is what counts for the generation: spec, or for kinds without one everything but
// apiVersion, kind, metadata and status.
func content(obj Object) any {
	if spec, ok := obj["spec"]; ok {
		return spec
	}
	m := maps.Clone(obj)
	for _, k := range []string{"apiVersion", "kind", "metadata", "status"} {
		delete(m, k)
	}
	return m
}

// clone deep-copies a JSON value.
func clone(o Object) Object {
	if o == nil {
		return nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.UseNumber()
	var out Object
	if err := d.Decode(&out); err != nil {
		panic(err)
	}
	return normalize(out).(Object)
}

// normalize turns json.Number into int64 (all numbers here are integers).
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = normalize(x)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = normalize(x)
		}
		return t
	case json.Number:
		if n, err := t.Int64(); err == nil {
			return n
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
