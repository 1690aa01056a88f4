package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The subset of Kubernetes' objects the manifests use, as the tests read
// them (unknown fields are ignored: this is no schema check, which a
// cluster's `kubectl apply --dry-run=server` does).

type meta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

type header struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   meta   `yaml:"metadata"`
}

type configMap struct {
	Metadata meta              `yaml:"metadata"`
	Data     map[string]string `yaml:"data"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type service struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		ClusterIP                string            `yaml:"clusterIP"`
		PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
		Selector                 map[string]string `yaml:"selector"`
		Ports                    []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port string `yaml:"port"`
	} `yaml:"tcpSocket"`
}

func (p *probe) port() string {
	switch {
	case p == nil:
		return ""
	case p.HTTPGet != nil:
		return p.HTTPGet.Port
	case p.TCPSocket != nil:
		return p.TCPSocket.Port
	}
	return ""
}

type containerSpec struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name string `yaml:"name"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// containerPort is the port named name, or 0.
func (c containerSpec) containerPort(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

type statefulSet struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		ServiceName         string `yaml:"serviceName"`
		Replicas            int    `yaml:"replicas"`
		PodManagementPolicy string `yaml:"podManagementPolicy"`
		Selector            struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata meta `yaml:"metadata"`
			Spec     struct {
				SecurityContext struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
					FSGroup      int  `yaml:"fsGroup"`
				} `yaml:"securityContext"`
				Containers []containerSpec `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata meta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
	} `yaml:"spec"`
}

type disruptionBudget struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

// manifests are the objects of deploy/kubernetes, by kind.
type manifests struct {
	files        []string // the YAML files but kustomization.yaml
	namespace    string
	configMaps   map[string]configMap
	services     map[string]service
	statefulSets map[string]statefulSet
	budgets      map[string]disruptionBudget
	kustomize    []string // kustomization.yaml's resources
}

// loadManifests parses every YAML file of deploy/kubernetes.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{configMaps: map[string]configMap{}, services: map[string]service{},
		statefulSets: map[string]statefulSet{}, budgets: map[string]disruptionBudget{}}
	paths, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests under deploy/kubernetes: %v", err)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(path) == "kustomization.yaml" {
			var k struct {
				Resources []string `yaml:"resources"`
			}
			if err := yaml.Unmarshal(b, &k); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			m.kustomize = k.Resources
			continue
		}
		m.files = append(m.files, filepath.Base(path))
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for i := 0; ; i++ {
			var doc yaml.Node
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s, document %d: %v", path, i, err)
			}
			var h header
			if err := doc.Decode(&h); err != nil {
				t.Fatalf("%s, document %d: %v", path, i, err)
			}
			where := fmt.Sprintf("%s: %s %q", filepath.Base(path), h.Kind, h.Metadata.Name)
			if h.APIVersion == "" || h.Kind == "" || h.Metadata.Name == "" {
				t.Fatalf("%s, document %d: apiVersion, kind and metadata.name are required", path, i)
			}
			decode := func(v any) {
				if err := doc.Decode(v); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
			}
			switch h.Kind {
			case "Namespace":
				m.namespace = h.Metadata.Name
				continue
			case "ConfigMap":
				var c configMap
				decode(&c)
				m.configMaps[h.Metadata.Name] = c
			case "Service":
				var s service
				decode(&s)
				m.services[h.Metadata.Name] = s
			case "StatefulSet":
				var s statefulSet
				decode(&s)
				m.statefulSets[h.Metadata.Name] = s
			case "PodDisruptionBudget":
				var d disruptionBudget
				decode(&d)
				m.budgets[h.Metadata.Name] = d
			default:
				t.Fatalf("%s: a kind the test does not check; teach it", where)
			}
			if h.Metadata.Namespace == "" {
				t.Errorf("%s: no namespace", where)
			}
		}
	}
	return m
}

// selects reports whether selector picks labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// podDNS is the stable name of a StatefulSet's pod i:
// POD.SERVICE.$(POD_NAMESPACE).svc.cluster.local, or POD.SERVICE relative
// to the namespace.
func podDNS(s statefulSet, i int, full bool) string {
	name := fmt.Sprintf("%s-%d.%s", s.Metadata.Name, i, s.Spec.ServiceName)
	if full {
		name += ".$(POD_NAMESPACE).svc.cluster.local"
	}
	return name
}

// flagValue is the value of --name=VALUE among args, and whether it is
// there.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// brokerConf parses a broker.conf (key=value lines, # comments: what the
// manifests use of Java's properties syntax).
func brokerConf(t *testing.T, text string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("broker.conf line %q: want key=value", line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return kv
}

var varRef = regexp.MustCompile(`\$\(([A-Z_][A-Z0-9_]*)\)`)

// TestManifests parses deploy/kubernetes and checks that the objects fit
// together and fit the binaries: kustomization.yaml lists every file;
// each StatefulSet's Service is headless and selects its pods; every
// Service's target ports, probe ports and volume mounts name something
// that exists; pods run as the image's user; every $(VAR) in args is
// defined; the controllers' --peers name exactly the StatefulSet's pods by
// their stable names; broker.conf's controllerAddr and namesrvAddr name
// those pods and its ports match the container's; and (without -short,
// from binaries built for it) every flag the manifests give is one the
// command accepts and every broker.conf key one the broker applies.
func TestManifests(t *testing.T) {
	m := loadManifests(t)
	if m.namespace == "" {
		t.Error("no Namespace object")
	}
	for _, f := range m.files {
		if !slices.Contains(m.kustomize, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	for _, r := range m.kustomize {
		if !slices.Contains(m.files, r) {
			t.Errorf("kustomization.yaml lists %s, which is not in deploy/kubernetes", r)
		}
	}
	for name, s := range m.services {
		picked := 0
		for _, set := range m.statefulSets {
			if !selects(s.Spec.Selector, set.Spec.Template.Metadata.Labels) {
				continue
			}
			picked++
			for _, p := range s.Spec.Ports {
				if set.Spec.Template.Spec.Containers[0].containerPort(p.TargetPort) == 0 {
					t.Errorf("Service %s: target port %q is no container port of StatefulSet %s", name, p.TargetPort, set.Metadata.Name)
				}
			}
		}
		if picked != 1 {
			t.Errorf("Service %s selects the pods of %d StatefulSets, want 1", name, picked)
		}
	}
	for name, d := range m.budgets {
		if !slices.ContainsFunc(slices.Collect(mapValues(m.statefulSets)), func(s statefulSet) bool {
			return selects(d.Spec.Selector.MatchLabels, s.Spec.Template.Metadata.Labels)
		}) {
			t.Errorf("PodDisruptionBudget %s selects no StatefulSet's pods", name)
		}
	}
	for name, s := range m.statefulSets {
		checkStatefulSet(t, m, name, s)
	}
	checkControllers(t, m)
	checkBrokerConf(t, m)
	if testing.Short() {
		t.Log("-short: the flags and broker.conf keys are not checked against the binaries")
		return
	}
	checkFlags(t, m)
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

func checkStatefulSet(t *testing.T, m *manifests, name string, s statefulSet) {
	t.Helper()
	svc, ok := m.services[s.Spec.ServiceName]
	switch {
	case !ok:
		t.Errorf("StatefulSet %s: serviceName %q is no Service", name, s.Spec.ServiceName)
	case svc.Spec.ClusterIP != "None":
		t.Errorf("StatefulSet %s: its Service %s is not headless (clusterIP: None): its pods get no stable names", name, svc.Metadata.Name)
	}
	if !selects(s.Spec.Selector.MatchLabels, s.Spec.Template.Metadata.Labels) {
		t.Errorf("StatefulSet %s: the selector does not select the template's labels", name)
	}
	if s.Spec.Replicas < 1 {
		t.Errorf("StatefulSet %s: replicas %d", name, s.Spec.Replicas)
	}
	pod := s.Spec.Template.Spec
	if sc := pod.SecurityContext; !sc.RunAsNonRoot || sc.RunAsUser != 65532 || sc.FSGroup != 65532 {
		t.Errorf("StatefulSet %s: securityContext %+v, want runAsNonRoot, runAsUser and fsGroup 65532 (the image's user, the volumes' group)", name, sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("StatefulSet %s: %d containers, want 1", name, len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Command) != 1 || !slices.Contains([]string{"apogee-broker", "apogee-namesrv", "apogee-controller"}, c.Command[0]) {
		t.Errorf("StatefulSet %s: command %q, want one of the image's servers", name, c.Command)
	}
	for what, p := range map[string]*probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil {
			if what != "startup" {
				t.Errorf("StatefulSet %s: no %s probe", name, what)
			}
			continue
		}
		if c.containerPort(p.port()) == 0 {
			t.Errorf("StatefulSet %s: the %s probe's port %q is no container port", name, what, p.port())
		}
		if p.HTTPGet != nil && (c.Command[0] != "apogee-broker" || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != "operator") {
			t.Errorf("StatefulSet %s: the %s probe asks %s on %s; only the broker's operator port answers HTTP (/healthz)", name, what, p.HTTPGet.Path, p.HTTPGet.Port)
		}
	}
	if c.Resources.Requests["cpu"] == "" || c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Errorf("StatefulSet %s: resources %+v, want cpu and memory requests and a memory limit", name, c.Resources)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = true
		if v.ConfigMap != nil {
			if _, ok := m.configMaps[v.ConfigMap.Name]; !ok {
				t.Errorf("StatefulSet %s: volume %s names ConfigMap %q, which no manifest defines", name, v.Name, v.ConfigMap.Name)
			}
		}
	}
	for _, v := range s.Spec.VolumeClaimTemplates {
		volumes[v.Metadata.Name] = true
	}
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		if !volumes[vm.Name] {
			t.Errorf("StatefulSet %s: mount %s names no volume", name, vm.Name)
		}
		mounts[vm.MountPath] = vm.Name
	}
	if mounts["/data"] == "" || mounts["/tmp"] == "" {
		t.Errorf("StatefulSet %s: mounts %v, want /data and /tmp (the root file system is read-only)", name, mounts)
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, a := range c.Args {
		for _, ref := range varRef.FindAllStringSubmatch(a, -1) {
			if !env[ref[1]] {
				t.Errorf("StatefulSet %s: argument %q refers to $(%s), which the container's env does not define", name, a, ref[1])
			}
		}
	}
}

// checkControllers: --peers lists each pod of the controllers' StatefulSet
// as POD=its stable name:raft port, --id is the pod's name, and
// --advertise-addr its stable name with the remoting port.
func checkControllers(t *testing.T, m *manifests) {
	t.Helper()
	s, ok := m.statefulSets["apogee-controller"]
	if !ok {
		t.Fatal("no StatefulSet apogee-controller")
	}
	c := s.Spec.Template.Spec.Containers[0]
	if s.Spec.Replicas%2 != 1 {
		t.Errorf("controllers: %d replicas; a Raft group wants an odd number", s.Spec.Replicas)
	}
	raft, remoting := c.containerPort("raft"), c.containerPort("remoting")
	var want []string
	for i := range s.Spec.Replicas {
		want = append(want, fmt.Sprintf("%s-%d=%s:%d", s.Metadata.Name, i, podDNS(s, i, true), raft))
	}
	if peers, _ := flagValue(c.Args, "peers"); peers != strings.Join(want, ",") {
		t.Errorf("controllers: --peers=%s\nwant %s", peers, strings.Join(want, ","))
	}
	if id, _ := flagValue(c.Args, "id"); id != "$(POD_NAME)" {
		t.Errorf("controllers: --id=%s, want $(POD_NAME)", id)
	}
	wantAdv := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%d", s.Spec.ServiceName, remoting)
	if adv, _ := flagValue(c.Args, "advertise-addr"); adv != wantAdv {
		t.Errorf("controllers: --advertise-addr=%s, want %s", adv, wantAdv)
	}
	for flag, port := range map[string]int{"raft-listen": raft, "listen": remoting} {
		if v, _ := flagValue(c.Args, flag); v != "0.0.0.0:"+strconv.Itoa(port) {
			t.Errorf("controllers: --%s=%s, want 0.0.0.0:%d (the container port)", flag, v, port)
		}
	}
	if !m.services[s.Spec.ServiceName].Spec.PublishNotReadyAddresses {
		t.Errorf("controllers: Service %s does not publish pods before they are ready: the members could not find each other to elect a first leader", s.Spec.ServiceName)
	}
}

// checkBrokerConf: the broker StatefulSets' broker.conf names every
// controller and name server pod by its stable name, with their ports;
// its ports are the container's; the broker advertises its stable name.
func checkBrokerConf(t *testing.T, m *manifests) {
	t.Helper()
	ctl, ns := m.statefulSets["apogee-controller"], m.statefulSets["apogee-namesrv"]
	addrs := func(s statefulSet, port string) string {
		var a []string
		for i := range s.Spec.Replicas {
			a = append(a, fmt.Sprintf("%s:%d", podDNS(s, i, false), s.Spec.Template.Spec.Containers[0].containerPort(port)))
		}
		return strings.Join(a, ";")
	}
	brokers := 0
	for name, s := range m.statefulSets {
		c := s.Spec.Template.Spec.Containers[0]
		if c.Command[0] != "apogee-broker" {
			continue
		}
		brokers++
		path, _ := flagValue(c.Args, "config")
		dir, file := filepath.Split(path)
		var cm configMap
		for _, vm := range c.VolumeMounts {
			if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
				for _, v := range s.Spec.Template.Spec.Volumes {
					if v.Name == vm.Name && v.ConfigMap != nil {
						cm = m.configMaps[v.ConfigMap.Name]
					}
				}
			}
		}
		text, ok := cm.Data[file]
		if !ok {
			t.Errorf("broker %s: --config=%s is no key of a ConfigMap mounted at %s", name, path, dir)
			continue
		}
		conf := brokerConf(t, text)
		if conf["enableControllerMode"] != "true" {
			t.Errorf("broker %s: not in controller mode", name)
		}
		if got, want := conf["controllerAddr"], addrs(ctl, "remoting"); got != want {
			t.Errorf("broker %s: controllerAddr=%s\nwant %s", name, got, want)
		}
		if got, want := conf["namesrvAddr"], addrs(ns, "remoting"); got != want {
			t.Errorf("broker %s: namesrvAddr=%s\nwant %s", name, got, want)
		}
		for key, port := range map[string]string{"listenPort": "remoting", "haListenPort": "ha", "grpcServerPort": "grpc", "metricsPromExporterPort": "operator"} {
			if conf[key] != strconv.Itoa(c.containerPort(port)) {
				t.Errorf("broker %s: %s=%s, but the container's %s port is %d", name, key, conf[key], port, c.containerPort(port))
			}
		}
		if conf["storePathRootDir"] != "/data" {
			t.Errorf("broker %s: storePathRootDir=%s, want /data (the volume claim)", name, conf["storePathRootDir"])
		}
		wantAdv := fmt.Sprintf("$(POD_NAME).%s.$(POD_NAMESPACE).svc.cluster.local:%d", s.Spec.ServiceName, c.containerPort("remoting"))
		if adv, _ := flagValue(c.Args, "advertise-addr"); adv != wantAdv {
			t.Errorf("broker %s: --advertise-addr=%s, want %s (clients reach it by its stable name)", name, adv, wantAdv)
		}
		if !m.services[s.Spec.ServiceName].Spec.PublishNotReadyAddresses {
			t.Errorf("broker %s: Service %s does not publish pods before they are ready: slaves and controllers could not reach a starting member", name, s.Spec.ServiceName)
		}
	}
	if brokers == 0 {
		t.Error("no broker StatefulSet")
	}
}

// buildServers builds the three servers into a directory of the test's.
func buildServers(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, cmd := range []string{"apogee-broker", "apogee-namesrv", "apogee-controller"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, cmd), "../cmd/"+cmd).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", cmd, err, out)
		}
	}
	return dir
}

var helpFlag = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)`)

// knownFlags are the flags a command's --help lists.
func knownFlags(t *testing.T, bin string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput() // pflag's --help exits 0 or 2 by version; the text is what counts
	flags := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) < 5 {
		t.Fatalf("%s --help lists %d flags:\n%s", bin, len(flags), out)
	}
	return flags
}

// appliedKeys are the broker.conf keys docs/operations.md's key table
// (kept equal to the broker's by cmd/apogee-broker's TestKeyTableInDocs)
// says the broker applies.
func appliedKeys(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "| key | Java class | flag that wins | what Apogee does |")
	if !ok {
		t.Fatal("docs/operations.md: the broker.conf key table's header is not found")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	keys := map[string]bool{}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for _, line := range strings.Split(table, "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			keys[m[1]] = true
		}
	}
	if len(keys) < 50 {
		t.Fatalf("docs/operations.md's key table: %d keys read", len(keys))
	}
	return keys
}

func checkFlags(t *testing.T, m *manifests) {
	t.Helper()
	dir := buildServers(t)
	known := map[string]map[string]bool{}
	for name, s := range m.statefulSets {
		c := s.Spec.Template.Spec.Containers[0]
		cmd := c.Command[0]
		if known[cmd] == nil {
			known[cmd] = knownFlags(t, filepath.Join(dir, cmd))
		}
		for _, a := range c.Args {
			flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !strings.HasPrefix(a, "--") || !known[cmd][flag] {
				t.Errorf("StatefulSet %s: %s has no flag %q", name, cmd, a)
			}
		}
	}
	keys := appliedKeys(t)
	for name, cm := range m.configMaps {
		for file, text := range cm.Data {
			for k := range brokerConf(t, text) {
				if !keys[k] {
					t.Errorf("ConfigMap %s, %s: key %s is not one the broker applies (docs/operations.md's key table)", name, file, k)
				}
			}
		}
	}
}
