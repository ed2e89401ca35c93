// Package kausalitytest starts a real `kausality-stream serve` for tests: the binary named by
// KAUSALITY_BIN, else the one `cargo build` makes from the repository this example lives in.
// Its webhook, metrics and query listeners take free ports on 127.0.0.1 (port 0; the
// addresses are read from its JSON log).
package kausalitytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"kausality-stream/examples/leaf-controller/internal/audit"
	"kausality-stream/examples/leaf-controller/verdict"
)

// Server is a running kausality-stream.
type Server struct {
	// Webhook is the audit webhook's base URL (POST {Webhook}/audit/{cluster}).
	Webhook string
	// Query is the query API's base URL.
	Query string
	cmd   *exec.Cmd
	log   *tail
}

// pipeline is the test's pipeline file: the webhook, metrics and query API on loopback, a
// reorder window shorter than the default (the test waits it out after each batch), enriched
// events to a file, no snapshot.
const pipeline = `cluster = "default"

[options]
reorder_window = "100ms"

[[sources]]
type = "webhook"
listen = "127.0.0.1:0"
plain_http = true

[[sinks]]
type = "jsonl"
path = %q

[metrics]
listen = "127.0.0.1:0"

[query]
listen = "127.0.0.1:0"
`

// Binary returns the kausality-stream binary: $KAUSALITY_BIN, else built with cargo from the
// repository root above the working directory. It fails the test when neither works: the
// example's tests are part of the project's, they are never skipped.
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("KAUSALITY_BIN"); bin != "" {
		abs, err := filepath.Abs(bin)
		if err != nil {
			t.Fatalf("KAUSALITY_BIN=%s: %v", bin, err)
		}
		if st, err := os.Stat(abs); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			t.Fatalf("KAUSALITY_BIN=%s is not an executable file (%v)", bin, err)
		}
		return abs
	}
	buildOnce.Do(func() { built, buildErr = cargoBuild() })
	if buildErr != nil {
		t.Fatalf("no kausality-stream binary: KAUSALITY_BIN is not set and %v", buildErr)
	}
	return built
}

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// cargoBuild builds the binary in the repository root and returns the path cargo reports.
func cargoBuild() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("cargo", "build", "--locked", "--bin", "kausality-stream", "--message-format=json-render-diagnostics")
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("cargo build in %s failed: %w", root, err)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	exe := ""
	for sc.Scan() {
		var m struct {
			Reason     string `json:"reason"`
			Executable string `json:"executable"`
			Target     struct {
				Name string `json:"name"`
			} `json:"target"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Reason == "compiler-artifact" && m.Target.Name == "kausality-stream" && m.Executable != "" {
			exe = m.Executable
		}
	}
	if exe == "" {
		return "", errors.New("cargo build reported no kausality-stream executable")
	}
	return exe, nil
}

// repoRoot is the first directory above the working directory with kausality-stream's
// Cargo.toml.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "Cargo.toml"))
		if err == nil && bytes.Contains(b, []byte(`name = "kausality-stream"`)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no kausality-stream repository above the working directory to build it in")
		}
		dir = parent
	}
}

// Start runs `kausality-stream serve` with the test pipeline and waits until its webhook and
// query API listen; it is stopped (SIGTERM) when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "pipeline.toml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(pipeline, filepath.Join(dir, "enriched.jsonl"))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--log-format", "json", "serve", "--pipeline", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "RUST_LOG=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	s := &Server{cmd: cmd, log: &tail{}}
	t.Cleanup(func() { s.stop(t) })

	addrs := make(chan [2]string, 1)
	logEnded := make(chan struct{})
	go func() {
		s.readLog(stderr, addrs)
		close(logEnded)
	}()
	select {
	case a := <-addrs:
		s.Webhook, s.Query = "http://"+a[0], "http://"+a[1]
	case <-logEnded:
		t.Fatalf("kausality-stream exited before its webhook and query listeners were up; its log:\n%s", s.log)
	case <-time.After(30 * time.Second):
		t.Fatalf("kausality-stream did not report its webhook and query listeners within 30 s; its log:\n%s", s.log)
	}
	return s
}

// readLog keeps the log's last lines and sends the webhook's and the query API's addresses
// once both were logged.
func (s *Server) readLog(r io.Reader, addrs chan<- [2]string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var webhook, query string
	sent := false
	for sc.Scan() {
		line := sc.Text()
		s.log.add(line)
		var m struct {
			Fields struct {
				Message string `json:"message"`
				Addr    string `json:"addr"`
			} `json:"fields"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m.Fields.Message {
		case "webhook listening":
			webhook = m.Fields.Addr
		case "query API listening":
			query = m.Fields.Addr
		}
		if !sent && webhook != "" && query != "" {
			addrs <- [2]string{webhook, query}
			sent = true
		}
	}
}

func (s *Server) stop(t testing.TB) {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && !t.Failed() {
			t.Errorf("kausality-stream exited with %v; its log:\n%s", err, s.log)
		}
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		t.Errorf("kausality-stream did not stop within 15 s of SIGTERM; its log:\n%s", s.log)
	}
	if t.Failed() {
		t.Logf("kausality-stream's log:\n%s", s.log)
	}
}

// Post sends events to the webhook as one EventList for cluster.
func (s *Server) Post(t testing.TB, cluster string, events []audit.Object) {
	t.Helper()
	resp, err := http.Post(s.Webhook+"/audit/"+cluster, "application/json", bytes.NewReader(audit.EventList(events)))
	if err != nil {
		t.Fatalf("posting %d audit events: %v", len(events), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("posting %d audit events: %d %s", len(events), resp.StatusCode, body)
	}
}

// Client returns a verdict client of the query API.
func (s *Server) Client() *verdict.Client {
	return &verdict.Client{BaseURL: s.Query}
}

// WaitApplied asks for the verdict q until the server has applied the events up to until
// (their stageTimestamp): the verdict is then the one of the stream as posted. Returns it.
func (s *Server) WaitApplied(t testing.TB, q verdict.Query, until time.Time) *verdict.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		v, err := s.Client().Ask(ctx, q)
		switch {
		case err != nil:
			last = err
		case v.Freshness.NewestEventTime == nil:
			last = errors.New("no event applied yet")
		case v.Freshness.NewestEventTime.Before(until.Truncate(time.Microsecond)):
			last = fmt.Errorf("applied up to %s, waiting for %s", v.Freshness.NewestEventTime.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
		default:
			return v
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the events up to %s were not applied within 15 s: %v", until.Format(time.RFC3339Nano), last)
	return nil
}

// tail keeps the last lines of a log.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (l *tail) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
	if len(l.lines) > 200 {
		l.lines = l.lines[len(l.lines)-200:]
	}
}

func (l *tail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
