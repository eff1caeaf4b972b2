// Package devstack runs oncepay on one machine as the separate processes it
// is deployed as (the simulator, the worker and the API), for `make run`,
// `make up` and the demo. It makes sure the database exists (starting a
// local cluster when no server answers on the loopback address, or, with
// HA, a pg_auto_failover formation of its own), migrates it, starts each binary with its log in a file, waits until each answers
// its readiness check, and stops exactly what it started.
package devstack

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/internal/kinds"
	"github.com/oncepay/oncepay/internal/tenant"
	"github.com/oncepay/oncepay/internal/testkit/hapg"
	"github.com/oncepay/oncepay/internal/testkit/localpg"
	"github.com/oncepay/oncepay/internal/webhooks"
)

// LocalClusterPort is where the stack's own cluster listens when no server
// answers at the database URL's loopback address.
const LocalClusterPort = 55433

// Config describes a stack.
type Config struct {
	// BinDir holds the api, worker and stripesim binaries. Defaults to "bin".
	BinDir string
	// StateDir holds the logs, the state file and the local cluster.
	// Defaults to ".run".
	StateDir string
	// DatabaseURL is the database to run on; it is created if missing.
	// When no server answers at a loopback address, a local cluster is
	// started in its place, unless DatabaseURLChosen.
	DatabaseURL string
	// HA runs the stack on a pg_auto_failover formation of its own instead
	// of DatabaseURL's server (make up DB=ha): a monitor, a primary and
	// Standbys synchronous standbys on free loopback ports, under
	// StateDir/ha, started again as they were by a later stack. The
	// processes get its multi-host URL.
	HA bool
	// Standbys is the formation's standbys with HA. Defaults to two, each
	// commit waiting for one of them, as docs/operations.md asks of
	// pg_auto_failover: with one, its version 2.0 can lose acknowledged
	// commits in a switchover (hapg.Options.Standbys).
	Standbys int
	// DatabaseURLChosen says the URL is the user's own choice (DATABASE_URL
	// was set): a server that does not answer there is an error that names
	// it, never a silent fall back to a private cluster.
	DatabaseURLChosen bool
	// StripeSecretKey is the worker's key.
	StripeSecretKey string
	// StripeAPIBase is where the worker sends provider calls. When it
	// names a loopback address the stack starts the simulator there; when
	// it is empty the worker calls Stripe itself and no simulator runs.
	StripeAPIBase string
	// APIAddr and WorkerAdminAddr are the listen addresses. Default to
	// 127.0.0.1:8080 and 127.0.0.1:8081.
	APIAddr, WorkerAdminAddr string
	// APIMetricsAddr is where the first API process serves /metrics; the
	// others, and the first when it is empty, take a free port, so that a
	// second stack (the demo beside make up) never collides.
	APIMetricsAddr string
	// MoreAPIAddrs and MoreWorkerAdminAddrs start further API and worker
	// processes (api-2, worker-2, …) beside the first, sharing the database.
	MoreAPIAddrs, MoreWorkerAdminAddrs []string
	// Env holds extra variables for every process (for instance shorter
	// worker timers for the demo).
	Env []string
	// Detached processes outlive the program that started them (make up);
	// otherwise each is signalled when that program dies.
	Detached bool
	// KeepProviderState has the simulator keep its state in StateDir across
	// restarts, as the database keeps the books (make run and make up):
	// a restarted stack's provider still has what the books name. Stacks
	// with a fresh database each run (the demo, the bench, the chaos
	// driver) start the simulator fresh too.
	KeepProviderState bool
	// PayoutDelay is how long the simulator keeps a payout pending, then
	// in transit: long enough, for a person trying the stack, to cancel
	// one. Zero leaves the simulator's own (1s, 2s). Either delay set in
	// the environment (make run STRIPESIM_PAYOUT_TRANSIT_DELAY=10m) wins.
	PayoutDelay time.Duration
	// DropDatabase makes Stop drop the stack's database once its processes
	// are gone: for a throwaway stack (the demo), which must leave nothing
	// behind on the server.
	DropDatabase bool
	// Progress receives one line per step. Defaults to io.Discard.
	Progress io.Writer
}

func (c Config) withDefaults() Config {
	c.BinDir = cmp.Or(c.BinDir, "bin")
	c.StateDir = cmp.Or(c.StateDir, ".run")
	c.APIAddr = cmp.Or(c.APIAddr, "127.0.0.1:8080")
	c.WorkerAdminAddr = cmp.Or(c.WorkerAdminAddr, "127.0.0.1:8081")
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Stack is a running set of processes.
type Stack struct {
	// DatabaseURL is the database the processes use: Config.DatabaseURL,
	// or the same database on the local cluster.
	DatabaseURL string `json:"database_url"`
	// APIURL is the API's base URL; SimURL the simulator's, if one runs.
	APIURL string `json:"api_url"`
	// APIURLs are every API process's base URLs, APIURL first.
	APIURLs []string `json:"api_urls"`
	SimURL  string   `json:"sim_url,omitempty"`
	// ConsoleURL is the operator console, on the first worker's admin
	// listener.
	ConsoleURL string `json:"console_url"`
	// ClusterDir is the local cluster's directory, if the stack started it.
	ClusterDir string `json:"cluster_dir,omitempty"`
	// FormationDir is the pg_auto_failover formation's directory, if the
	// stack runs on one (Config.HA).
	FormationDir string `json:"formation_dir,omitempty"`
	// MonitorURL is the formation's monitor, for pg_autoctl and its state.
	MonitorURL string `json:"monitor_url,omitempty"`
	// Processes are in start order.
	Processes []*Process `json:"processes"`

	cfg Config
}

// Process is one running binary.
type Process struct {
	// Name is unique in the stack ("api", "api-2"); Binary is what runs.
	Name    string   `json:"name"`
	Binary  string   `json:"binary"`
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"-"`
	PID     int      `json:"pid"`
	LogPath string   `json:"log_path"`
	// Ready is the URL that answers 200 once the process serves.
	Ready string `json:"ready"`

	cmd    *exec.Cmd
	exited chan struct{}
}

// Start brings a stack up and returns once every process is ready. On
// failure it stops whatever it had started.
func Start(ctx context.Context, cfg Config) (_ *Stack, err error) {
	cfg = cfg.withDefaults()
	s := &Stack{cfg: cfg, APIURL: "http://" + cfg.APIAddr}
	defer func() {
		if err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	simAddr, err := simulatorAddr(cfg.StripeAPIBase)
	if err != nil {
		return nil, err
	}
	// Before anything is touched: a stack that cannot start must leave a
	// running one (and its logs) as they are.
	// Every port taken is reported at once, each with the variable that
	// moves it.
	type port struct{ variable, addr, free string }
	ports := []port{{"LISTEN_ADDR", cfg.APIAddr, "127.0.0.1:18080"}, {"WORKER_ADMIN_ADDR", cfg.WorkerAdminAddr, "127.0.0.1:18081"},
		{"STRIPE_API_BASE", simAddr, "http://127.0.0.1:13111"}, {"METRICS_ADDR", cfg.APIMetricsAddr, "127.0.0.1:19080"}}
	for _, addr := range cfg.MoreAPIAddrs {
		ports = append(ports, port{"an API's address", addr, ""})
	}
	for _, addr := range cfg.MoreWorkerAdminAddrs {
		ports = append(ports, port{"a worker's admin address", addr, ""})
	}
	var taken []string
	for _, p := range ports {
		if p.addr != "" && listening(p.addr) {
			line := fmt.Sprintf("  %s: something already listens on %s", p.variable, p.addr)
			if p.free != "" {
				line += fmt.Sprintf(" (set %s to a free one, e.g. %s=%s)", p.variable, p.variable, p.free)
			}
			taken = append(taken, line)
		}
	}
	if len(taken) > 0 {
		return nil, fmt.Errorf("ports in use (a stack started by `make up`? `make down` stops it; or `make up PORTS=auto` picks free ones):\n%s",
			strings.Join(taken, "\n"))
	}
	logs := filepath.Join(cfg.StateDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	// Each run's logs start empty; a restarted process appends to its own.
	old, _ := filepath.Glob(filepath.Join(logs, "*.log"))
	for _, name := range old {
		if err := os.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	if cfg.HA {
		if err := s.startFormation(ctx); err != nil {
			return nil, err
		}
	} else {
		if s.DatabaseURL, s.ClusterDir, err = ensureServer(ctx, cfg); err != nil {
			return nil, err
		}
		if err := ensureDatabase(ctx, s.DatabaseURL); err != nil {
			return nil, err
		}
	}
	s.progress("migrating %s", redact(s.DatabaseURL))
	if out, err := s.command("api", "migrate").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("api migrate: %w\n%s", err, out)
	}
	// With the simulator, webhooks are on: it signs its events with a
	// secret made for this stack and delivers them to the first API.
	var apiEnv []string
	if simAddr != "" {
		s.SimURL = "http://" + simAddr
		secret := "whsec_" + randomHex(16)
		apiEnv = append(apiEnv, "STRIPE_WEBHOOK_SECRET="+secret)
		simEnv := []string{"STRIPESIM_ADDR=" + simAddr}
		if cfg.KeepProviderState {
			state, err := filepath.Abs(filepath.Join(cfg.StateDir, "stripesim-state.json"))
			if err != nil {
				return nil, err
			}
			simEnv = append(simEnv, "STRIPESIM_STATE_FILE="+state)
		}
		for _, name := range []string{"STRIPESIM_PAYOUT_TRANSIT_DELAY", "STRIPESIM_PAYOUT_PAID_DELAY"} {
			if _, own := os.LookupEnv(name); !own && cfg.PayoutDelay > 0 {
				simEnv = append(simEnv, name+"="+cfg.PayoutDelay.String())
			}
		}
		// The endpoint is enabled for the event types the API acts on, as a
		// Stripe endpoint should be (docs/operations.md).
		simEnv = append(simEnv, "STRIPESIM_WEBHOOK_URL=http://"+cfg.APIAddr+"/v1/webhooks/stripe", "STRIPESIM_WEBHOOK_SECRET="+secret,
			"STRIPESIM_WEBHOOK_EVENTS="+strings.Join(webhooks.EventTypes(kinds.All()), ","))
		err := s.start(&Process{Name: "stripesim", Binary: "stripesim", Env: simEnv, Ready: s.SimURL + "/_sim/faults"})
		if err != nil {
			return nil, err
		}
	}
	for i, addr := range append([]string{cfg.WorkerAdminAddr}, cfg.MoreWorkerAdminAddrs...) {
		err := s.start(&Process{Name: instance("worker", i), Binary: "worker", Env: []string{"WORKER_ADMIN_ADDR=" + addr}, Ready: "http://" + addr + "/readyz"})
		if err != nil {
			return nil, err
		}
	}
	for i, addr := range append([]string{cfg.APIAddr}, cfg.MoreAPIAddrs...) {
		metricsAddr := "127.0.0.1:0"
		if i == 0 && cfg.APIMetricsAddr != "" {
			metricsAddr = cfg.APIMetricsAddr
		}
		err := s.start(&Process{Name: instance("api", i), Binary: "api", Args: []string{"serve"},
			Env: append([]string{"LISTEN_ADDR=" + addr, "METRICS_ADDR=" + metricsAddr}, apiEnv...), Ready: "http://" + addr + "/readyz"})
		if err != nil {
			return nil, err
		}
		s.APIURLs = append(s.APIURLs, "http://"+addr)
	}
	s.ConsoleURL = "http://" + cfg.WorkerAdminAddr + "/console/"
	return s, nil
}

// simulatorAddr is the address the simulator must listen on for the
// worker's STRIPE_API_BASE to reach it, or "" when the base is not a
// loopback address (Stripe itself, or a simulator run elsewhere).
// instance names the i-th process of a binary: "api", then "api-2", ….
func instance(binary string, i int) string {
	if i == 0 {
		return binary
	}
	return fmt.Sprintf("%s-%d", binary, i+1)
}

func simulatorAddr(apiBase string) (string, error) {
	if apiBase == "" {
		return "", nil
	}
	u, err := url.Parse(apiBase)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("STRIPE_API_BASE %q is not a URL", apiBase)
	}
	if !isLoopback(u.Hostname()) {
		return "", nil
	}
	if u.Scheme != "http" || u.Port() == "" {
		return "", fmt.Errorf("STRIPE_API_BASE %q: the local simulator serves plain http on an explicit port (http://127.0.0.1:12111)", apiBase)
	}
	return u.Host, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func listening(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// ensureServer returns the database URL to use. When nothing answers at a
// loopback DatabaseURL it starts the stack's own cluster from the installed
// server binaries, durable, under the state directory, and points the URL
// at it: the same fallback the tests have, so a machine with PostgreSQL
// installed but not running still runs the stack.
func ensureServer(ctx context.Context, cfg Config) (dbURL, clusterDir string, err error) {
	u, err := url.Parse(cfg.DatabaseURL)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("DATABASE_URL=%s is not a postgres:// URL", redact(cfg.DatabaseURL))
	}
	admin := *u
	admin.Path = "/postgres"
	pingErr := localpg.Ping(ctx, admin.String())
	if pingErr == nil {
		return cfg.DatabaseURL, "", nil
	}
	if cfg.DatabaseURLChosen {
		return "", "", fmt.Errorf("DATABASE_URL=%s: %w (unset it to use, or start, the local server)", redact(cfg.DatabaseURL), pingErr)
	}
	if !isLoopback(u.Hostname()) {
		return "", "", fmt.Errorf("database server at %s: %w", u.Host, pingErr)
	}
	dir, err := filepath.Abs(filepath.Join(cfg.StateDir, "postgres"))
	if err != nil {
		return "", "", err
	}
	fmt.Fprintf(cfg.Progress, "no database server answers at %s (%v): starting a local cluster in %s on port %d\n", u.Host, pingErr, dir, LocalClusterPort)
	if _, err := localpg.Start(ctx, dir, LocalClusterPort, localpg.Options{Durable: true}); err != nil {
		return "", "", fmt.Errorf("no server at %s (%v), and the local cluster did not start: %w", u.Host, pingErr, err)
	}
	local := *u
	local.Host = fmt.Sprintf("127.0.0.1:%d", LocalClusterPort)
	local.User = url.User("postgres")
	return local.String(), dir, nil
}

// FormationDir is where a stack with Config.HA keeps its formation.
func FormationDir(stateDir string) string { return filepath.Join(stateDir, "ha") }

// startFormation starts the stack's pg_auto_failover formation, or starts
// again the one a stack before it left, and points the stack at its
// database, which the manager made.
func (s *Stack) startFormation(ctx context.Context) error {
	dir, err := filepath.Abs(FormationDir(s.cfg.StateDir))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	standbys := cmp.Or(s.cfg.Standbys, 2)
	addrs, err := FreeAddrs(2 + standbys)
	if err != nil {
		return err
	}
	ports := make([]int, len(addrs))
	for i, addr := range addrs {
		_, port, _ := net.SplitHostPort(addr)
		ports[i], _ = strconv.Atoi(port)
	}
	f, err := hapg.StartFormation(ctx, hapg.Options{Dir: dir, Standbys: standbys, Ports: ports, Durable: true, Detached: s.cfg.Detached,
		Logf: func(format string, args ...any) { s.progress(format, args...) }})
	if err != nil {
		return fmt.Errorf("the pg_auto_failover formation: %w", err)
	}
	s.FormationDir, s.MonitorURL, s.DatabaseURL = dir, f.MonitorURL(), f.URL()
	primary, err := f.Primary(ctx)
	if err != nil {
		return err
	}
	s.progress("formation ready: %s primary on port %d, its synchronous standbys on the others", primary.Name, primary.Port)
	return nil
}

// ensureDatabase creates the database dbURL names if it does not exist.
func ensureDatabase(ctx context.Context, dbURL string) error {
	conn, name, err := connectAdmin(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropDatabase drops the database dbURL names, with whatever connections
// are left.
func dropDatabase(ctx context.Context, dbURL string) error {
	conn, name, err := connectAdmin(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// connectAdmin connects to the maintenance database of dbURL's server and
// returns the name of the database dbURL names.
func connectAdmin(ctx context.Context, dbURL string) (*pgx.Conn, string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, "", err
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return nil, "", fmt.Errorf("DATABASE_URL %q names no database", redact(dbURL))
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return nil, "", fmt.Errorf("connect to %s: %w", redact(admin.String()), err)
	}
	return conn, name, nil
}

// redact hides a URL's password for logs and errors.
func redact(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func (s *Stack) progress(format string, args ...any) {
	fmt.Fprintf(s.cfg.Progress, format+"\n", args...)
}

// env is what every process gets: the caller's environment, the stack's
// settings, then the process's own.
func (s *Stack) env(own ...string) []string {
	env := append(os.Environ(),
		"DATABASE_URL="+s.DatabaseURL,
		"STRIPE_SECRET_KEY="+s.cfg.StripeSecretKey,
		"STRIPE_API_BASE="+s.cfg.StripeAPIBase,
	)
	env = append(env, s.cfg.Env...)
	return append(env, own...)
}

func (s *Stack) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.cfg.BinDir, name), args...)
	cmd.Env = s.env()
	return cmd
}

// start runs p with its output in its log file and waits until it is ready.
func (s *Stack) start(p *Process) error {
	p.Path = filepath.Join(s.cfg.BinDir, p.Binary)
	p.LogPath = filepath.Join(s.cfg.StateDir, "logs", p.Name+".log")
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = s.env(p.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A process group of its own: a Ctrl-C at the terminal reaches only
	// the stack's runner, which stops the processes in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if !s.cfg.Detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.PID, p.exited = cmd, cmd.Process.Pid, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.exited) }()
	s.Processes = append(s.Processes, p)
	if err := waitReady(p, 60*time.Second); err != nil {
		return fmt.Errorf("%w\nlast lines of %s:\n%s", err, p.LogPath, tail(p.LogPath, 15))
	}
	s.progress("%-9s ready (pid %d, log %s)", p.Name, p.PID, p.LogPath)
	return nil
}

func waitReady(p *Process, within time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(within)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited during start", p.Name)
		default:
		}
		resp, err := client.Get(p.Ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s within %s", p.Name, p.Ready, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// Process returns the named process, or nil.
func (s *Stack) Process(name string) *Process {
	for _, p := range s.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Kill SIGKILLs the named process and waits until it is gone: a crash, as
// far as anything else can tell.
func (s *Stack) Kill(name string) error {
	p := s.Process(name)
	if p == nil || p.cmd == nil {
		return fmt.Errorf("no %s process started by this program", name)
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	<-p.exited
	return nil
}

// Restart starts the named process again (after Kill) and waits until it
// is ready.
func (s *Stack) Restart(name string) error {
	p := s.Process(name)
	if p == nil {
		return fmt.Errorf("no %s process", name)
	}
	// One that never became ready is still running: stop it first.
	if err := p.stop(5 * time.Second); err != nil {
		return err
	}
	s.Processes = removeProcess(s.Processes, p)
	return s.start(&Process{Name: p.Name, Binary: p.Binary, Args: p.Args, Env: p.Env, Ready: p.Ready})
}

// AddWorker starts one more worker process beside the running ones, on a
// free admin address and with env added to its own, and returns its name
// ("worker-3"): a stack scaled out while it runs. Remove stops it.
func (s *Stack) AddWorker(env ...string) (string, error) {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return "", err
	}
	name := s.nextName("worker")
	err = s.start(&Process{Name: name, Binary: "worker", Env: append([]string{"WORKER_ADMIN_ADDR=" + addrs[0]}, env...), Ready: "http://" + addrs[0] + "/readyz"})
	return name, err
}

// AddAPI starts one more API process beside the running ones, set up as
// the first (its webhook secret included) on free addresses and with env
// added, and returns its name ("api-2", for Remove) and base URL. It is
// not among APIURLs, which name the stack's own processes.
func (s *Stack) AddAPI(env ...string) (name, baseURL string, err error) {
	addrs, err := FreeAddrs(2)
	if err != nil {
		return "", "", err
	}
	own := []string{"LISTEN_ADDR=" + addrs[0], "METRICS_ADDR=" + addrs[1]}
	if first := s.Process("api"); first != nil {
		for _, kv := range first.Env {
			if !strings.HasPrefix(kv, "LISTEN_ADDR=") && !strings.HasPrefix(kv, "METRICS_ADDR=") {
				own = append(own, kv)
			}
		}
	}
	name = s.nextName("api")
	err = s.start(&Process{Name: name, Binary: "api", Args: []string{"serve"}, Env: append(own, env...), Ready: "http://" + addrs[0] + "/readyz"})
	return name, "http://" + addrs[0], err
}

// Remove SIGKILLs the named process and forgets it.
func (s *Stack) Remove(name string) error {
	if err := s.Kill(name); err != nil {
		return err
	}
	s.Processes = removeProcess(s.Processes, s.Process(name))
	return nil
}

// nextName is the first instance name of binary no process has.
func (s *Stack) nextName(binary string) string {
	for i := 0; ; i++ {
		if name := instance(binary, i); s.Process(name) == nil {
			return name
		}
	}
}

func removeProcess(ps []*Process, p *Process) []*Process {
	out := ps[:0]
	for _, q := range ps {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// Tenant creates the named tenant if needed and returns a new API key for
// it, through the api binary as an operator would.
func (s *Stack) Tenant(name string) (tenant.Created, error) {
	var created tenant.Created
	err := s.apiJSON(&created, "tenants", "ensure", name)
	return created, err
}

// EnsureAccount gives the tenant named name the connected account
// account, unless it has one.
func (s *Stack) EnsureAccount(name, account string) error {
	var tenants []tenant.Tenant
	if err := s.apiJSON(&tenants, "tenants", "list", "--json"); err != nil {
		return err
	}
	if i := slices.IndexFunc(tenants, func(t tenant.Tenant) bool { return t.Name == name }); i >= 0 && tenants[i].StripeAccount != nil {
		return nil
	}
	return s.SetAccount(name, account)
}

// SetAccount gives the tenant named name its connected account.
func (s *Stack) SetAccount(name, account string) error {
	if out, err := s.command("api", "tenants", "set-account", name, account).CombinedOutput(); err != nil {
		return fmt.Errorf("api tenants set-account %s %s: %w: %s", name, account, err, out)
	}
	return nil
}

// OnlyKey returns a new API key of the tenant named name, made if needed,
// and ends every key the tenant had before at once: a stack started again
// and again (make up) leaves one valid key, the one it printed last.
func (s *Stack) OnlyKey(name string) (tenant.Created, error) {
	var tenants []tenant.Tenant
	if err := s.apiJSON(&tenants, "tenants", "list", "--json"); err != nil {
		return tenant.Created{}, err
	}
	if !slices.ContainsFunc(tenants, func(t tenant.Tenant) bool { return t.Name == name }) {
		// Made now, with its one key: no other key to end.
		return s.Tenant(name)
	}
	var rotated tenant.Rotated
	if err := s.apiJSON(&rotated, "tenants", "rotate-key", name, "--grace", "0s", "--json"); err != nil {
		return tenant.Created{}, err
	}
	return tenant.Created{TenantID: rotated.TenantID, APIKey: rotated.APIKey}, nil
}

// apiJSON runs an api command against the stack and decodes its JSON.
func (s *Stack) apiJSON(out any, args ...string) error {
	what := "api " + strings.Join(args, " ")
	printed, err := s.command("api", args...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("%s: %w: %s", what, err, exit.Stderr)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(printed, out); err != nil {
		return fmt.Errorf("%s printed %q: %w", what, printed, err)
	}
	return nil
}

// Stop stops the processes in the reverse order of their start (the API
// first, so nothing new is accepted while the worker finishes), each with
// SIGTERM and, after its grace, SIGKILL; then the local cluster, if the
// stack started one.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	for i := len(s.Processes) - 1; i >= 0; i-- {
		p := s.Processes[i]
		if err := p.stop(35 * time.Second); err != nil {
			errs = append(errs, err)
		} else {
			s.progress("%-9s stopped", p.Name)
		}
	}
	s.Processes = nil
	if s.cfg.DropDatabase && s.DatabaseURL != "" {
		if err := dropDatabase(ctx, s.DatabaseURL); err != nil {
			errs = append(errs, err)
		} else {
			s.progress("database dropped")
		}
	}
	if s.ClusterDir != "" {
		if err := localpg.Stop(ctx, s.ClusterDir); err != nil {
			errs = append(errs, err)
		} else {
			s.progress("local cluster stopped (its data stays in %s)", s.ClusterDir)
		}
		s.ClusterDir = ""
	}
	if s.FormationDir != "" {
		// Read again from its directory: bin/stack failover may have
		// started a node's keeper since this stack did.
		f, err := hapg.Load(s.FormationDir, nil)
		if err == nil {
			err = f.Stop()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stop the formation in %s: %w", s.FormationDir, err))
		} else {
			s.progress("formation stopped (its data stays in %s; make clean-db removes it)", s.FormationDir)
		}
		s.FormationDir = ""
	}
	return errors.Join(errs...)
}

func (p *Process) stop(grace time.Duration) error {
	if p.cmd == nil {
		return p.stopByPID(grace)
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", p.Name, grace)
	}
}

// stopByPID stops a process another program started (make up, then make
// down). The PID is signalled only while it still runs the binary the
// state file names, so a PID reused by an unrelated process is left alone.
func (p *Process) stopByPID(grace time.Duration) error {
	if !p.running() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for p.running() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM: killed", p.Name, p.PID, grace)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// Running names the stack's processes that still run: none, once a stack
// saved by make up has crashed (its processes killed, the machine
// restarted).
func (s *Stack) Running() []string {
	var names []string
	for _, p := range s.Processes {
		if p.running() {
			names = append(names, p.Name)
		}
	}
	return names
}

func (p *Process) running() bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	if err != nil {
		return false
	}
	want, err := filepath.Abs(p.Path)
	if err != nil {
		return false
	}
	// A rebuilt binary shows as "path (deleted)".
	return strings.TrimSuffix(exe, " (deleted)") == want
}

func statePath(dir string) string { return filepath.Join(dir, "stack.json") }

// Save writes the stack's state, for a later Load and Stop by another
// program (make up, then make down).
func (s *Stack) Save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(statePath(s.cfg.StateDir), data, 0o600)
}

// Load reads the state Save wrote in dir. A missing state is
// os.ErrNotExist.
func Load(dir string, progress io.Writer) (*Stack, error) {
	data, err := os.ReadFile(statePath(dir))
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: Config{StateDir: dir, Progress: progress}.withDefaults()}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("read %s: %w", statePath(dir), err)
	}
	return s, nil
}

// Forget removes the saved state.
func Forget(dir string) error {
	err := os.Remove(statePath(dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Exited is closed when a process this program started has exited.
func (p *Process) Exited() <-chan struct{} {
	if p.exited == nil {
		return nil // started by another program: never observed here
	}
	return p.exited
}

// FreeAddrs returns n loopback addresses nothing listens on right now, for
// a stack that must not collide with another (the demo beside make up).
// They are drawn below Linux's ephemeral range (32768 and up), where the
// kernel takes the local ports of outgoing connections: a port found free
// there can be taken by any connection (a test's, a database client's)
// before the stack listens on it.
func FreeAddrs(n int) ([]string, error) {
	var addrs []string
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free loopback port found from 20000 to 32767")
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+mathrand.IntN(12768)))
		if err != nil {
			continue // taken
		}
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

// Interactive reports whether w is a terminal (and NO_COLOR is unset): the
// programs around the stack colour and redraw their output only there.
func Interactive(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
