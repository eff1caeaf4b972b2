package layoutcheck_test

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pkg is what `go list -json` says of one package.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
}

// list runs `go list -json` on patterns in the module's root.
func list(t *testing.T, root string, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", args)
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		err := dec.Decode(&p)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// TestLayout enforces the three kinds of code and their places:
//
//   - cmd/ holds only what is deployed: cmd/api and cmd/worker;
//   - every package under internal/, but the test kit, is compiled into
//     one of them, and nothing of the test kit or of tools/ is;
//   - the test kit (internal/testkit/...) is imported only by tests, by
//     the test kit itself and by tools/;
//   - the platform (internal/platform/...), what every part stands on
//     (the pool, request bodies, problems, ids, money, serving), knows
//     nothing of the service above it: no kind, engine or surface;
//   - errors (internal/platform/problem) know nothing of storage.
func TestLayout(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	out, err := exec.Command("go", "list", "-m").Output()
	require.NoError(t, err)
	module := strings.TrimSpace(string(out))
	under := func(path, dir string) bool {
		return path == module+"/"+dir || strings.HasPrefix(path, module+"/"+dir+"/")
	}

	entries, err := os.ReadDir(filepath.Join(root, "cmd"))
	require.NoError(t, err)
	var deployables []string
	for _, e := range entries {
		deployables = append(deployables, e.Name())
	}
	require.Equal(t, []string{"api", "worker"}, deployables, "cmd/ holds only what is deployed; a developer program goes under tools/")

	built := map[string]bool{}
	for _, p := range list(t, root, "-deps", "./cmd/api", "./cmd/worker") {
		built[p.ImportPath] = true
		require.False(t, under(p.ImportPath, "internal/testkit") || under(p.ImportPath, "tools"),
			"%s is compiled into a deployable, but belongs to the test kit or the tools", p.ImportPath)
	}

	for _, p := range list(t, root, "./...") {
		switch {
		case under(p.ImportPath, "internal/testkit"):
		case under(p.ImportPath, "internal"):
			require.True(t, built[p.ImportPath], "%s is under internal/ but compiled into neither cmd/api nor cmd/worker: "+
				"service code belongs there, test helpers under internal/testkit, developer programs under tools/", p.ImportPath)
		}
		if under(p.ImportPath, "internal/testkit") || under(p.ImportPath, "tools") {
			continue
		}
		for _, imp := range p.Imports {
			require.False(t, under(imp, "internal/testkit"), "%s imports the test kit %s outside its tests", p.ImportPath, imp)
			require.False(t, under(imp, "tools"), "%s imports the tool %s outside its tests", p.ImportPath, imp)
		}
	}
	platform := list(t, root, "./internal/platform/...")
	require.NotEmpty(t, platform)
	for _, p := range platform {
		for _, imp := range p.Imports {
			require.True(t, !under(imp, "internal") || under(imp, "internal/platform"),
				"%s is of the platform, which knows nothing of the service above it, but imports %s: "+
					"the platform's code moves up beside what it serves, or what it needs moves down into internal/platform", p.ImportPath, imp)
		}
	}
	// Errors say what a client may be told; which storage failures are
	// worth a retry is storage's business (internal/platform/respond joins
	// the two).
	for _, p := range list(t, root, "-deps", "./internal/platform/problem") {
		require.False(t, under(p.ImportPath, "internal/platform/postgres") || strings.HasPrefix(p.ImportPath, "github.com/jackc/"),
			"internal/platform/problem depends on the database through %s", p.ImportPath)
	}
	require.True(t, slices.ContainsFunc(list(t, root, "./internal/testkit/..."), func(p pkg) bool { return p.Name != "" }), "the test kit is where this test looks")
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// TestClientIsItsOwnModule: the client's module requires nothing, so a
// service that calls this one imports nothing of the server.
func TestClientIsItsOwnModule(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "client", "go.mod"))
	require.NoError(t, err)
	require.Contains(t, string(data), "module github.com/oncepay/oncepay/client\n")
	require.NotContains(t, string(data), "require", "client/go.mod must require nothing")
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./...")
	cmd.Dir = filepath.Join(moduleRoot(t), "client")
	out, err := cmd.Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		if !strings.HasPrefix(dep, "github.com/oncepay/oncepay/client") {
			t.Errorf("the client depends on %s, outside the standard library", dep)
		}
	}
}

// TestBenchPeersAreAModuleOfTheirOwn: the bench's peers (tools/bench/peers)
// are a module of their own, so the service's go.mod carries none of what
// they need (DBOS Transact and its requirements), and the River they are
// measured with is the service's.
func TestBenchPeersAreAModuleOfTheirOwn(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	service, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	peers, err := os.ReadFile(filepath.Join(root, "tools", "bench", "peers", "go.mod"))
	require.NoError(t, err)
	module := strings.TrimPrefix(strings.SplitN(string(service), "\n", 2)[0], "module ")
	require.Contains(t, string(peers), "module "+module+"/tools/bench/peers\n")
	require.NotContains(t, string(service), "dbos-inc", "the service's go.mod requires what only the peers need")
	require.NotContains(t, string(peers), "replace ", "the peers need nothing of the service's code")
	river := func(gomod []byte) string {
		for line := range strings.Lines(string(gomod)) {
			if fields := strings.Fields(line); len(fields) >= 2 && fields[0] == "github.com/riverqueue/river" {
				return fields[1]
			}
		}
		return ""
	}
	require.NotEmpty(t, river(service))
	require.Equal(t, river(service), river(peers), "the River peer runs the service's River")
}
