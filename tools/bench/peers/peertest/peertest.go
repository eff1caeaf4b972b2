// Package peertest gives the peers' tests what oncepay's test kit gives
// its own, without importing it (the peers are a module of their own): a
// database per test on a real PostgreSQL, and the Stripe simulator run as
// a process, built from the main module's source.
//
// The server is TEST_DATABASE_URL, else the one on 127.0.0.1:5432, else
// the throwaway cluster oncepay's tests start on 127.0.0.1:55432. Without
// any, a test fails when CI=true, and is skipped otherwise.
package peertest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/tools/bench/peers"
)

// adminURLs are where a server is looked for, in order, after
// TEST_DATABASE_URL.
var adminURLs = []string{
	"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
	"postgres://postgres@127.0.0.1:55432/postgres?sslmode=disable",
}

// Database creates a database of the test's own and returns its URL; it
// is dropped when the test ends.
func Database(t *testing.T) string {
	t.Helper()
	admin := adminURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("peertest: connect: %v", err)
	}
	defer conn.Close(ctx)
	name := "peers_test_" + strings.ToLower(rand.Text()[:10])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("peertest: create database: %v", err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("peertest: drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("peertest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("peertest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

var server struct {
	once sync.Once
	url  string
	err  error
}

func adminURL(t *testing.T) string {
	t.Helper()
	server.once.Do(func() {
		candidates := adminURLs
		if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
			candidates = []string{u}
		}
		var errs []error
		for _, u := range candidates {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			conn, err := pgx.Connect(ctx, u)
			cancel()
			if err == nil {
				conn.Close(context.Background())
				server.url = u
				return
			}
			errs = append(errs, err)
		}
		server.err = errors.Join(errs...)
	})
	if server.err != nil {
		msg := fmt.Sprintf("peertest: no PostgreSQL (set TEST_DATABASE_URL, or start one on 127.0.0.1:5432): %v", server.err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return server.url
}

var simulatorBinary struct {
	once sync.Once
	path string
	err  error
}

// Simulator starts the Stripe simulator (tools/stripesim of the main
// module) on a free port and returns its base URL; it is stopped when the
// test ends. The binary is built once per test binary.
func Simulator(t *testing.T) string {
	t.Helper()
	simulatorBinary.once.Do(func() { simulatorBinary.path, simulatorBinary.err = buildSimulator() })
	if simulatorBinary.err != nil {
		t.Fatalf("peertest: build the simulator: %v", simulatorBinary.err)
	}
	cmd := exec.Command(simulatorBinary.path)
	// At info, its first line says where it listens; the request lines
	// after it are read and dropped.
	cmd.Env = append(os.Environ(), "STRIPESIM_ADDR=127.0.0.1:0", "LOG_LEVEL=info")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("peertest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("peertest: start the simulator: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "stripesim listening" {
				listening <- line.Addr
			}
		}
	}()
	select {
	case addr := <-listening:
		return "http://" + addr
	case <-time.After(20 * time.Second):
		t.Fatal("peertest: the simulator did not start")
		return ""
	}
}

// mainModule is the line that names oncepay's module in its go.mod.
const mainModule = "module github.com/oncepay/oncepay\n"

// buildSimulator builds the simulator from the main module, the first
// folder above this one whose go.mod names it.
func buildSimulator() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(data, []byte(mainModule)) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of the main module above this folder")
		}
		dir = parent
	}
	bin, err := os.MkdirTemp("", "peertest-")
	if err != nil {
		return "", err
	}
	// The temporary folder outlives the binary's tests: one per test
	// binary, a few MB, in the system's temporary space.
	path := filepath.Join(bin, "stripesim")
	cmd := exec.Command("go", "build", "-o", path, "./tools/stripesim/cmd/stripesim")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s", err, out)
	}
	return path, nil
}

// Fault is a simulator fault (tools/stripesim's Fault, as its admin API
// takes it).
type Fault struct {
	Mode      string `json:"mode"`
	Status    int    `json:"status,omitempty"`
	LatencyMS int    `json:"latency_ms,omitempty"`
	Count     int    `json:"count,omitempty"`
	Path      string `json:"path,omitempty"`
}

// InjectFault adds a fault to the simulator at baseURL.
func InjectFault(t *testing.T, baseURL string, f Fault) {
	t.Helper()
	body, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(baseURL+"/_sim/faults", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("peertest: inject a fault: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		msg, _ := io.ReadAll(res.Body)
		t.Fatalf("peertest: inject a fault: %d %s", res.StatusCode, msg)
	}
}

// Intent is a payment intent in the simulator's ledger.
type Intent struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	Status         string            `json:"status"`
	IdempotencyKey string            `json:"idempotency_key"`
	Metadata       map[string]string `json:"metadata"`
}

// Intents are the payment intents the simulator at baseURL created under
// the idempotency key key.
func Intents(t *testing.T, baseURL, key string) []Intent {
	t.Helper()
	res, err := http.Get(baseURL + "/_sim/ledger")
	if err != nil {
		t.Fatalf("peertest: read the ledger: %v", err)
	}
	defer res.Body.Close()
	var ledger struct {
		Objects []Intent `json:"objects"`
	}
	if err := json.NewDecoder(res.Body).Decode(&ledger); err != nil {
		t.Fatalf("peertest: decode the ledger: %v", err)
	}
	var out []Intent
	for _, o := range ledger.Objects {
		if o.Object == "payment_intent" && o.IdempotencyKey == key {
			out = append(out, o)
		}
	}
	return out
}

// Pay sends POST /v1/payments to a peer at baseURL, as tenant with key and
// body, and returns the status and the answer.
func Pay(t *testing.T, baseURL, tenant, key, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, baseURL+"/v1/payments", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tenant)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("peertest: POST /v1/payments: %v", err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(answer)
}

// Recorded is a payment's row in a peer's payments table.
type Recorded struct {
	Status   string
	Amount   int64
	IntentID *string
}

// Record reads a payment's row from a peer's database; ok is false while
// there is none.
func Record(t *testing.T, dbURL, tenant, key string) (Recorded, bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("peertest: %v", err)
	}
	defer conn.Close(ctx)
	var r Recorded
	err = conn.QueryRow(ctx, `SELECT status, amount, provider_intent_id FROM payments WHERE tenant_id = $1 AND idempotency_key = $2`,
		tenant, key).Scan(&r.Status, &r.Amount, &r.IntentID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Recorded{}, false
	}
	if err != nil {
		t.Fatalf("peertest: read the payment: %v", err)
	}
	return r, true
}

// Peer is a peer started for a test, and where its parts are.
type Peer[S peers.Server] struct {
	Server                 S
	PeerURL, SimURL, DBURL string
}

// Start starts a peer with start, on a database of the test's own and a
// simulator of its own, 4 charges at once on 4 connections, and serves it
// until the test ends.
func Start[S peers.Server](t *testing.T, start func(context.Context, peers.Config) (S, error)) Peer[S] {
	t.Helper()
	p := Peer[S]{SimURL: Simulator(t), DBURL: Database(t)}
	s, err := start(context.Background(), peers.Config{DatabaseURL: p.DBURL, StripeAPIBase: p.SimURL, Concurrency: 4, MaxConns: 4})
	if err != nil {
		t.Fatalf("peertest: start the peer: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("peertest: close the peer: %v", err)
		}
	})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	p.Server, p.PeerURL = s, srv.URL
	return p
}
