// Package k8s holds the Kubernetes manifests of a deskd fleet and the test
// that validates them against the upstream API types. It is a module of
// its own so the daemon's dependencies stay small.
package k8s

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// decodeStrict decodes one YAML document into v, refusing fields the API
// type does not have (a typo in a manifest is an error, not a no-op).
func decodeStrict(t *testing.T, doc []byte, v any) {
	t.Helper()
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("yaml: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%T: %v\n%s", v, err, doc)
	}
}

type object struct {
	kind, name string
	doc        []byte
}

func load(t *testing.T) []object {
	t.Helper()
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests")
	}
	var out []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, object{tm.Kind, tm.Name, []byte(doc)})
		}
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestManifests decodes every object into its API type strictly and
// checks what deskd's deployment relies on.
func TestManifests(t *testing.T) {
	kinds := map[string]int{}
	for _, o := range load(t) {
		kinds[o.kind]++
		switch o.kind {
		case "Pod":
			var p corev1.Pod
			decodeStrict(t, o.doc, &p)
			checkSandboxPod(t, &p)
		case "Deployment":
			var d appsv1.Deployment
			decodeStrict(t, o.doc, &d)
			checkGateway(t, &d)
		case "Service":
			var s corev1.Service
			decodeStrict(t, o.doc, &s)
			if len(s.Spec.Selector) == 0 || len(s.Spec.Ports) == 0 {
				t.Errorf("service %s selects nothing or has no port", o.name)
			}
		case "Secret":
			var s corev1.Secret
			decodeStrict(t, o.doc, &s)
		default:
			t.Errorf("unexpected kind %q (%s)", o.kind, o.name)
		}
	}
	for _, k := range []string{"Pod", "Deployment", "Service", "Secret"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests", k)
		}
	}
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
	if i < 0 {
		return corev1.EnvVar{}, false
	}
	return c.Env[i], true
}

func checkSandboxPod(t *testing.T, p *corev1.Pod) {
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("pod %s: %d containers, want deskd alone", p.Name, len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Port.String() != "ops" {
		t.Errorf("readiness must be /healthz on the ops port: %+v", c.ReadinessProbe)
	}
	if e, ok := env(c, "DESKD_OPS_LISTEN"); !ok || !strings.HasSuffix(e.Value, ":9090") {
		t.Errorf("DESKD_OPS_LISTEN %q: probes need the ops listener on 9090", e.Value)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil || !slices.Contains(c.Lifecycle.PreStop.Exec.Command, "stop") {
		t.Error("preStop must run deskd stop")
	}
	if e, ok := env(c, "DESKD_SANDBOX_ID"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("DESKD_SANDBOX_ID must come from the pod's name")
	}
	if _, ok := env(c, "DESKD_PANEL_SECRET"); ok {
		t.Error("the panel key must come from a file (DESKD_PANEL_SECRET_FILE), not the environment")
	}
	if e, ok := env(c, "DESKD_PANEL_SECRET_FILE"); !ok || !strings.HasPrefix(e.Value, "/run/secrets/") {
		t.Error("DESKD_PANEL_SECRET_FILE must point into the mounted Secret")
	}
	if e, _ := env(c, "DESKD_USER"); e.Value != "1000:1000" {
		t.Errorf("DESKD_USER %q: the GUI runs as 1000:1000", e.Value)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) >= 0 {
			t.Errorf("%s: request %v (idle) must be below limit %v (active)", r, req.String(), lim.String())
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("security context: no escalation, read-only root, all capabilities dropped but what deskd needs: %+v", sc)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	vols := map[string]corev1.Volume{}
	for _, v := range p.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, path := range []string{"/run/cubepod/desktop", "/home/desktop", "/tmp", "/dev/shm", "/var/lib/xkb"} {
		v, ok := vols[mounts[path]]
		if !ok || v.EmptyDir == nil {
			t.Errorf("%s needs a writable emptyDir (the root is read-only)", path)
		}
	}
	if v := vols[mounts["/dev/shm"]]; v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory || v.EmptyDir.SizeLimit == nil {
		t.Error("/dev/shm must be a size-limited memory emptyDir")
	}
	if p.Annotations["prometheus.io/scrape"] != "true" || p.Annotations["prometheus.io/port"] != "9090" {
		t.Errorf("prometheus annotations %v", p.Annotations)
	}
	if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
		t.Error("a sandbox runs untrusted code: no service account token")
	}
}

func checkGateway(t *testing.T, d *appsv1.Deployment) {
	c := d.Spec.Template.Spec.Containers[0]
	e, ok := env(c, "PANELGW_SECRET")
	if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Error("the gateway's master secret must come from a Secret")
	}
	if d.Spec.Selector == nil || d.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != d.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Error("the gateway's selector does not select its pods")
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the gateway needs no root")
	}
}
