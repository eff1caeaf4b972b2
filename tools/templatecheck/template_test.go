package templatecheck_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	modulePath = "github.com/oncepay/oncepay"
	newPath    = "example.com/yourpay"
)

// TestGonewCopyBuildsAndPasses does what `gonew github.com/oncepay/oncepay
// example.com/yourpay` does (copy the module, rewrite the module path in
// go.mod and in every Go import) to the files git tracks, then builds, vets
// and runs a test subset in the copy: a path the code spells out as a
// string, or a file outside git, would break the template.
func TestGonewCopyBuildsAndPasses(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard").Output()
	require.NoError(t, err, "the template check needs git and a checkout")
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimSpace(string(files)), "\n") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in git
		}
		require.NoError(t, err)
		if name == "go.mod" || strings.HasSuffix(name, ".go") {
			data = bytes.ReplaceAll(data, []byte(`"`+modulePath), []byte(`"`+newPath))
			if name == "go.mod" {
				data = bytes.Replace(data, []byte("module "+modulePath+"\n"), []byte("module "+newPath+"\n"), 1)
			}
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dst, name), data, 0o644))
	}
	goCmd := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dst
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in the copy:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	goCmd("build", "./...")
	goCmd("vet", "./...")
	out := goCmd("test", "-count=1", "-run", "TestTransferEndpointIsIdempotent|TestParseKey|TestFingerprint", "./examples/...", "./internal/idempotency/")
	require.Contains(t, out, "ok  \t"+newPath+"/examples/transfer")

	var leftovers []string
	require.NoError(t, filepath.WalkDir(dst, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err == nil && bytes.Contains(data, []byte(modulePath+"/")) {
			leftovers = append(leftovers, path)
		}
		return err
	}))
	require.Empty(t, leftovers, "Go files still naming the old module path outside imports")
}

func repoRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	return filepath.Dir(strings.TrimSpace(string(out)))
}
