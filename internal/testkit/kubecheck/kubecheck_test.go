package kubecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const root = "../../.."

// TestPostgresCluster: deploy/kubernetes's CloudNativePG Cluster decodes
// strictly (a field its struct does not know fails, as a misspelt field of
// a built-in kind does); its replication is synchronous and never falls
// back to asynchronous; it makes the database and the two roles the
// service runs as; and the API and the worker read the URL that
// docs/containers.md puts on the operator's read-write Service.
func TestPostgresCluster(t *testing.T) {
	t.Parallel()
	m := Load(t, root)
	c := m.Clusters["oncepay-db"]
	require.NotNil(t, c, "no oncepay-db Cluster")

	sync := c.Spec.PostgreSQL.Synchronous
	require.NotNil(t, sync, "an acknowledged commit must be on a standby: synchronous replication")
	require.Contains(t, []string{"any", "first"}, sync.Method)
	require.GreaterOrEqual(t, sync.Number, 1)
	require.Contains(t, []string{"", "required"}, sync.DataDurability,
		"preferred goes on alone without a standby: a failover then loses commits")
	require.Greater(t, c.Spec.Instances, sync.Number, "a primary and its synchronous standbys")
	require.Equal(t, "oncepay", c.Spec.Bootstrap.InitDB.Database)
	require.Equal(t, "oncepay_owner", c.Spec.Bootstrap.InitDB.Owner, "migrations run as the schema's owner")
	var app bool
	for _, r := range c.Spec.Managed.Roles {
		app = app || (r.Name == "oncepay_app" && r.Login && r.PasswordSecret != nil)
	}
	require.True(t, app, "the runtime role, with its password secret")

	for _, name := range []string{"oncepay-api", "oncepay-worker"} {
		d := m.Deployments[name]
		require.NotNil(t, d, name)
		var ref string
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "DATABASE_URL" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			}
		}
		require.Equal(t, "oncepay-database/app-url", ref, "%s's DATABASE_URL", name)
	}
	docs, err := os.ReadFile(filepath.Join(root, "docs", "containers.md"))
	require.NoError(t, err)
	service := "@" + c.Metadata.Name + "-rw:5432/" + c.Spec.Bootstrap.InitDB.Database + "?"
	require.Contains(t, string(docs), `--from-literal=owner-url="postgres://oncepay_owner:$OWNER_PASSWORD`+service,
		"docs/containers.md: the owner's URL on the read-write Service")
	require.Contains(t, string(docs), `--from-literal=app-url="postgres://oncepay_app:$APP_PASSWORD`+service,
		"docs/containers.md: the runtime role's URL on the read-write Service")

	manifest, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "postgres.yaml"))
	require.NoError(t, err)
	for field, doc := range map[string]string{
		"an unknown field":      strings.Replace(string(manifest), "\n  instances:", "\n  synchronousReplicas: 1\n  instances:", 1),
		"a misspelt field":      strings.Replace(string(manifest), "dataDurability:", "dataDurablity:", 1),
		"a field of wrong type": strings.Replace(string(manifest), "number: 1", "number: one", 1),
	} {
		require.NotEqual(t, string(manifest), doc, field)
		require.Error(t, newManifests().decode([]byte(doc)), "%s is refused", field)
	}
	require.NoError(t, newManifests().decode(manifest))
}
