// Package k8s holds the Kubernetes manifests of a deskd fleet and the test
// that validates them against the upstream API types. It is a module of
// its own so the daemon's dependencies stay small.
package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
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
	var policies []networkingv1.NetworkPolicy
	for _, o := range load(t) {
		kinds[o.kind]++
		switch o.kind {
		case "Pod":
			var p corev1.Pod
			decodeStrict(t, o.doc, &p)
			checkSandboxPod(t, &p)
			checkRestricted(t, "pod "+p.Name, &p.Spec)
		case "Deployment":
			var d appsv1.Deployment
			decodeStrict(t, o.doc, &d)
			checkGateway(t, &d)
			checkRestricted(t, "deployment "+d.Name, &d.Spec.Template.Spec)
		case "NetworkPolicy":
			var np networkingv1.NetworkPolicy
			decodeStrict(t, o.doc, &np)
			policies = append(policies, np)
		case "PodDisruptionBudget":
			var pdb policyv1.PodDisruptionBudget
			decodeStrict(t, o.doc, &pdb)
			if pdb.Spec.Selector == nil || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "panelgw" || pdb.Spec.MinAvailable == nil {
				t.Errorf("PodDisruptionBudget %s must keep a gateway up: %+v", o.name, pdb.Spec)
			}
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
	for _, k := range []string{"Pod", "Deployment", "Service", "Secret", "NetworkPolicy", "PodDisruptionBudget"} {
		if kinds[k] == 0 {
			t.Errorf("no %s among the manifests", k)
		}
	}
	checkNetwork(t, policies)
}

// checkNetwork: sandboxes take panel traffic from the gateway only and
// metrics scrapes from the monitoring namespace only, and cannot reach
// the metadata address or the cluster's own networks.
func checkNetwork(t *testing.T, policies []networkingv1.NetworkPolicy) {
	var ingress, egress *networkingv1.NetworkPolicy
	for i, np := range policies {
		if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != "deskd" {
			continue
		}
		for _, pt := range np.Spec.PolicyTypes {
			switch pt {
			case networkingv1.PolicyTypeIngress:
				ingress = &policies[i]
			case networkingv1.PolicyTypeEgress:
				egress = &policies[i]
			}
		}
	}
	if ingress == nil || egress == nil {
		t.Fatalf("sandboxes need an ingress and an egress NetworkPolicy (have %d policies)", len(policies))
	}
	for _, rule := range ingress.Spec.Ingress {
		if len(rule.From) == 0 || len(rule.Ports) == 0 {
			t.Errorf("an ingress rule open to every source or port: %+v", rule)
			continue
		}
		for _, p := range rule.Ports {
			switch p.Port.IntValue() {
			case 8080:
				for _, f := range rule.From {
					if f.PodSelector == nil || f.PodSelector.MatchLabels["app.kubernetes.io/name"] != "panelgw" || f.NamespaceSelector != nil || f.IPBlock != nil {
						t.Errorf("the panel port admits more than the gateway: %+v", f)
					}
				}
			case 9090:
				for _, f := range rule.From {
					if f.NamespaceSelector == nil || f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" || f.IPBlock != nil {
						t.Errorf("the ops port admits more than the monitoring namespace: %+v", f)
					}
				}
			default:
				t.Errorf("ingress to port %v", p.Port)
			}
		}
	}
	blocked := map[string]bool{}
	for _, rule := range egress.Spec.Egress {
		for _, to := range rule.To {
			if to.IPBlock == nil {
				continue
			}
			if to.IPBlock.CIDR == "0.0.0.0/0" || to.IPBlock.CIDR == "::/0" {
				for _, e := range to.IPBlock.Except {
					blocked[e] = true
				}
			}
		}
	}
	for _, need := range []string{"169.254.0.0/16", "10.0.0.0/8", "fd00::/8"} {
		if !blocked[need] {
			t.Errorf("sandbox egress reaches %s (metadata address, cluster networks)", need)
		}
	}
}

// checkRestricted applies the "restricted" Pod Security Standard
// (kubernetes.io/docs/concepts/security/pod-security-standards), its
// baseline rules included, to a pod spec.
func checkRestricted(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	fail := func(format string, args ...any) { t.Errorf(what+": restricted: "+format, args...) }
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		fail("host namespaces")
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	if psc.WindowsOptions != nil && psc.WindowsOptions.HostProcess != nil && *psc.WindowsOptions.HostProcess {
		fail("host process")
	}
	for _, s := range psc.Sysctls {
		switch s.Name {
		case "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range":
		default:
			fail("unsafe sysctl %s", s.Name)
		}
	}
	for _, v := range spec.Volumes {
		vs := v.VolumeSource
		if vs.ConfigMap == nil && vs.CSI == nil && vs.DownwardAPI == nil && vs.EmptyDir == nil && vs.Ephemeral == nil &&
			vs.PersistentVolumeClaim == nil && vs.Projected == nil && vs.Secret == nil {
			fail("volume %s is of a type the standard does not allow", v.Name)
		}
	}
	podNonRoot := psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	podSeccomp := psc.SeccompProfile != nil && (psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault || psc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost)
	if psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		fail("pod runAsUser 0")
	}
	if psc.SELinuxOptions != nil && psc.SELinuxOptions.Type != "" && !slices.Contains([]string{"container_t", "container_init_t", "container_kvm_t", "container_engine_t"}, psc.SELinuxOptions.Type) {
		fail("SELinux type %s", psc.SELinuxOptions.Type)
	}
	all := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		if sc.Privileged != nil && *sc.Privileged {
			fail("%s is privileged", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			fail("%s: allowPrivilegeEscalation must be false", c.Name)
		}
		if nonRoot := sc.RunAsNonRoot; !(nonRoot != nil && *nonRoot) && !(nonRoot == nil && podNonRoot) {
			fail("%s: runAsNonRoot must be true", c.Name)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			fail("%s: runAsUser 0", c.Name)
		}
		seccomp := podSeccomp
		if sc.SeccompProfile != nil {
			seccomp = sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault || sc.SeccompProfile.Type == corev1.SeccompProfileTypeLocalhost
		}
		if !seccomp {
			fail("%s: seccompProfile must be RuntimeDefault or Localhost", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			fail("%s: capabilities must drop ALL", c.Name)
		}
		if sc.Capabilities != nil {
			for _, a := range sc.Capabilities.Add {
				if a != "NET_BIND_SERVICE" {
					fail("%s: adds capability %s", c.Name, a)
				}
			}
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			fail("%s: procMount %s", c.Name, *sc.ProcMount)
		}
		if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
			fail("%s: AppArmor unconfined", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				fail("%s: host port %d", c.Name, p.HostPort)
			}
		}
		if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image[strings.LastIndex(c.Image, "/")+1:], ":") && !strings.Contains(c.Image, "@sha256:") {
			t.Errorf("%s: %s: image %q is not pinned to a release", what, c.Name, c.Image)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
			req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
			if req.IsZero() || lim.IsZero() {
				t.Errorf("%s: %s: %s needs a request and a limit", what, c.Name, r)
			}
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
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/livez"}, {"startup", c.StartupProbe, "/livez"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "ops" {
			t.Errorf("%s must be %s on the ops port: %+v", p.name, p.path, p.probe)
		}
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
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsUser == nil || *sc.RunAsUser != 1000 ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 {
		t.Errorf("security context: deskd runs as the GUI user (1000) with no capability and a read-only root: %+v", sc)
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
	var disk int64
	for _, v := range p.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		if v.EmptyDir.SizeLimit == nil {
			t.Errorf("emptyDir %s has no sizeLimit (an upload can fill the node's disk)", v.Name)
		} else if v.EmptyDir.Medium != corev1.StorageMediumMemory {
			disk += v.EmptyDir.SizeLimit.Value()
		}
	}
	if lim := c.Resources.Limits[corev1.ResourceEphemeralStorage]; lim.Value() < disk {
		t.Errorf("ephemeral-storage limit %s is below the emptyDirs' %d bytes", lim.String(), disk)
	}
	if e, ok := env(c, "DESKD_MAX_UPLOAD_MIB"); !ok || vols[mounts["/home/desktop"]].EmptyDir == nil {
		t.Error("uploads must be bounded below the home's sizeLimit (DESKD_MAX_UPLOAD_MIB)")
	} else if home := vols[mounts["/home/desktop"]].EmptyDir.SizeLimit; home != nil {
		var mib int64
		fmt.Sscan(e.Value, &mib)
		if mib<<20 >= home.Value() {
			t.Errorf("DESKD_MAX_UPLOAD_MIB %s does not fit the home's %s", e.Value, home.String())
		}
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
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.ReadinessProbe == nil {
		t.Error("the gateway needs liveness and readiness probes")
	}
}
