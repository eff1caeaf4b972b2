// Package alertrules reads deploy/alerts.yml, the Prometheus alert rules,
// for the tests that hold other code to them (the metrics they use exist,
// the console evaluates the same expressions). Tests only.
package alertrules

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// Rule is one alerting rule.
type Rule struct {
	Alert       string
	Expr        string
	For         string
	Labels      map[string]string
	Annotations map[string]string
}

// Load reads every rule of deploy/alerts.yml under root (the repository's
// root, relative to the test's package), in file order.
func Load(t *testing.T, root string) []Rule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "alerts.yml"))
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Name  string
			Rules []Rule
		}
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	require.NotEmpty(t, doc.Groups)
	var rules []Rule
	for _, g := range doc.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}
