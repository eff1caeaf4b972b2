// Package kubecheck reads the Kubernetes manifests under deploy/kubernetes
// strictly into the Kubernetes API's own types (no cluster, no schema
// download): a misspelt field, a wrong type or an unknown kind fails
// make test instead of kubectl apply. It also holds the rules every
// workload follows. Tests only.
package kubecheck

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Manifests are the objects of deploy/kubernetes, by name.
type Manifests struct {
	Deployments map[string]*appsv1.Deployment
	Jobs        map[string]*batchv1.Job
	Services    map[string]*corev1.Service
	Budgets     map[string]*policyv1.PodDisruptionBudget
}

// Load decodes every document of every .yaml file under root's
// deploy/kubernetes, strictly, by its apiVersion and kind.
func Load(t *testing.T, root string) Manifests {
	t.Helper()
	m := Manifests{Deployments: map[string]*appsv1.Deployment{}, Jobs: map[string]*batchv1.Job{},
		Services: map[string]*corev1.Service{}, Budgets: map[string]*policyv1.PodDisruptionBudget{}}
	files, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	separator := regexp.MustCompile(`(?m)^---\s*$`)
	for _, file := range files {
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		for i, doc := range separator.Split(string(data), -1) {
			if len(bytes.TrimSpace([]byte(doc))) == 0 {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			require.NoError(t, yaml.Unmarshal([]byte(doc), &head), "%s, document %d", file, i+1)
			strict := func(into any) {
				require.NoError(t, yaml.UnmarshalStrict([]byte(doc), into), "%s, document %d (%s)", file, i+1, head.Kind)
			}
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				var d appsv1.Deployment
				strict(&d)
				m.Deployments[d.Name] = &d
			case "batch/v1 Job":
				var j batchv1.Job
				strict(&j)
				m.Jobs[j.Name] = &j
			case "v1 Service":
				var s corev1.Service
				strict(&s)
				m.Services[s.Name] = &s
			case "policy/v1 PodDisruptionBudget":
				var b policyv1.PodDisruptionBudget
				strict(&b)
				m.Budgets[b.Name] = &b
			default:
				t.Fatalf("%s, document %d: %s %s is no kind these checks know", file, i+1, head.APIVersion, head.Kind)
			}
		}
	}
	return m
}

// RequireHardened fails unless the pod runs as a non-root user with no
// service account token, and each container drops every capability, cannot
// escalate, writes no root filesystem and requests its resources.
func RequireHardened(t *testing.T, name string, pod corev1.PodSpec) {
	t.Helper()
	require.NotNil(t, pod.SecurityContext, name)
	require.True(t, ptrTrue(pod.SecurityContext.RunAsNonRoot), "%s: runAsNonRoot", name)
	require.False(t, pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken, "%s: mounts a service account token", name)
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		require.NotNil(t, sc, "%s/%s", name, c.Name)
		require.False(t, sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation, "%s/%s: may escalate", name, c.Name)
		require.True(t, ptrTrue(sc.ReadOnlyRootFilesystem), "%s/%s: writable root filesystem", name, c.Name)
		require.NotNil(t, sc.Capabilities, "%s/%s", name, c.Name)
		require.Contains(t, sc.Capabilities.Drop, corev1.Capability("ALL"), "%s/%s: capabilities", name, c.Name)
		require.False(t, c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero(), "%s/%s: resource requests", name, c.Name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s/%s: a memory limit", name, c.Name)
	}
}

// RequireBudget fails unless a PodDisruptionBudget selects d's pods: a
// node drain must never take every replica at once.
func RequireBudget(t *testing.T, m Manifests, d *appsv1.Deployment) {
	t.Helper()
	for _, b := range m.Budgets {
		sel := labels.SelectorFromSet(b.Spec.Selector.MatchLabels)
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			require.NotNil(t, b.Spec.MinAvailable, "budget %s", b.Name)
			return
		}
	}
	t.Fatalf("no PodDisruptionBudget selects deployment %s", d.Name)
}

// Env is a container's environment: each value as written, each secret
// reference as secrets gives it ("name/key"), for loading the binary's
// configuration from it.
func Env(t *testing.T, c corev1.Container, secrets map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		require.NotNil(t, ref, "%s: %s comes from neither a value nor a secret", c.Name, e.Name)
		value, ok := secrets[ref.Name+"/"+ref.Key]
		require.True(t, ok, "%s: %s names secret %s/%s, which the test does not know", c.Name, e.Name, ref.Name, ref.Key)
		env[e.Name] = value
	}
	return env
}

// Port returns the number of the container's port named name.
func Port(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func ptrTrue(b *bool) bool { return b != nil && *b }
