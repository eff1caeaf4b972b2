// Package kubecheck reads the Kubernetes manifests under deploy/kubernetes
// strictly into the Kubernetes API's own types (no cluster, no schema
// download): a misspelt field, a wrong type or an unknown kind fails
// make test instead of kubectl apply. CloudNativePG's Cluster, which is no
// built-in kind, is read into a struct of the fields the manifests use
// (Cluster), as strictly. It also holds the rules every workload follows.
// Tests only.
package kubecheck

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Manifests are the objects of deploy/kubernetes, by name.
type Manifests struct {
	Deployments map[string]*appsv1.Deployment
	Jobs        map[string]*batchv1.Job
	Services    map[string]*corev1.Service
	Budgets     map[string]*policyv1.PodDisruptionBudget
	Clusters    map[string]*Cluster
}

// Cluster is the part of CloudNativePG's Cluster (postgresql.cnpg.io/v1, as
// the operator's API reference documents it for 1.25) that deploy/kubernetes
// uses, and no more: decoded strictly, a field the manifest gains must be
// added here first, checked against that reference, so a misspelt or
// invented one fails.
type Cluster struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ClusterSpec       `json:"spec"`
}

// ClusterSpec is the Cluster's spec, in part.
type ClusterSpec struct {
	Instances  int `json:"instances"`
	PostgreSQL struct {
		Parameters  map[string]string `json:"parameters,omitempty"`
		Synchronous *struct {
			Method         string `json:"method"` // any or first
			Number         int    `json:"number"`
			DataDurability string `json:"dataDurability,omitempty"` // required (the default) or preferred
		} `json:"synchronous,omitempty"`
	} `json:"postgresql"`
	Bootstrap struct {
		InitDB struct {
			Database string                       `json:"database"`
			Owner    string                       `json:"owner"`
			Secret   *corev1.LocalObjectReference `json:"secret,omitempty"`
		} `json:"initdb"`
	} `json:"bootstrap"`
	Managed struct {
		Roles []struct {
			Name           string                       `json:"name"`
			Ensure         string                       `json:"ensure,omitempty"`
			Login          bool                         `json:"login,omitempty"`
			PasswordSecret *corev1.LocalObjectReference `json:"passwordSecret,omitempty"`
		} `json:"roles"`
	} `json:"managed"`
	Storage struct {
		Size         string  `json:"size"`
		StorageClass *string `json:"storageClass,omitempty"`
	} `json:"storage"`
	Resources corev1.ResourceRequirements `json:"resources"`
}

// Load decodes every document of every .yaml file under root's
// deploy/kubernetes, strictly, by its apiVersion and kind.
func Load(t *testing.T, root string) Manifests {
	t.Helper()
	m := newManifests()
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
			require.NoError(t, m.decode([]byte(doc)), "%s, document %d", file, i+1)
		}
	}
	return m
}

func newManifests() Manifests {
	return Manifests{Deployments: map[string]*appsv1.Deployment{}, Jobs: map[string]*batchv1.Job{},
		Services: map[string]*corev1.Service{}, Budgets: map[string]*policyv1.PodDisruptionBudget{}, Clusters: map[string]*Cluster{}}
}

// decode reads one document strictly, by its apiVersion and kind, into m.
func (m Manifests) decode(doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return err
	}
	strict := func(into any) error {
		if err := yaml.UnmarshalStrict(doc, into); err != nil {
			return fmt.Errorf("%s: %w", head.Kind, err)
		}
		return nil
	}
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		var d appsv1.Deployment
		if err := strict(&d); err != nil {
			return err
		}
		m.Deployments[d.Name] = &d
	case "batch/v1 Job":
		var j batchv1.Job
		if err := strict(&j); err != nil {
			return err
		}
		m.Jobs[j.Name] = &j
	case "v1 Service":
		var s corev1.Service
		if err := strict(&s); err != nil {
			return err
		}
		m.Services[s.Name] = &s
	case "policy/v1 PodDisruptionBudget":
		var b policyv1.PodDisruptionBudget
		if err := strict(&b); err != nil {
			return err
		}
		m.Budgets[b.Name] = &b
	case "postgresql.cnpg.io/v1 Cluster":
		var c Cluster
		if err := strict(&c); err != nil {
			return err
		}
		m.Clusters[c.Metadata.Name] = &c
	default:
		return fmt.Errorf("%s %s is no kind these checks know", head.APIVersion, head.Kind)
	}
	return nil
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
