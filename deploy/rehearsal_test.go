package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// rehearsal runs the manifests' pods as containers of the image on one
// network whose DNS answers the pods' stable names, as a cluster's would:
// each container is reachable as POD.SERVICE and
// POD.SERVICE.NAMESPACE.svc.cluster.local.
type rehearsal struct {
	t      *testing.T
	r      containerRuntime
	tag    string
	net    string
	suffix string
	m      *manifests
	pods   map[string]*pod
}

// pod is one StatefulSet pod run as a container.
type pod struct {
	name      string // the pod's name (apogee-broker-g1-0)
	container string
	args      []string // the container's command and arguments, $(VAR)s expanded
	mounts    []string
}

// expand replaces $(POD_NAME) and $(POD_NAMESPACE) as the kubelet does.
func expand(s, podName, namespace string) string {
	return strings.NewReplacer("$(POD_NAME)", podName, "$(POD_NAMESPACE)", namespace).Replace(s)
}

// newPod lays out pod i of StatefulSet set: its data directory, its
// ConfigMaps as files, its arguments.
func (h *rehearsal) newPod(set string, i int) *pod {
	t := h.t
	s := h.m.statefulSets[set]
	c := s.Spec.Template.Spec.Containers[0]
	p := &pod{name: fmt.Sprintf("%s-%d", set, i)}
	p.container = p.name + "-" + h.suffix
	for _, a := range append(slices.Clone(c.Command), c.Args...) {
		p.args = append(p.args, expand(a, p.name, h.m.namespace))
	}
	data := t.TempDir()
	if err := os.Chmod(data, 0o777); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(data, 65532, 65532); err != nil {
			t.Fatal(err)
		}
	}
	p.mounts = append(p.mounts, "-v", data+":/data:Z")
	for _, vm := range c.VolumeMounts {
		for _, v := range s.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			dir := t.TempDir()
			for file, text := range h.m.configMaps[v.ConfigMap.Name].Data {
				if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p.mounts = append(p.mounts, "-v", dir+":"+vm.MountPath+":ro,Z")
		}
	}
	h.pods[p.name] = p
	return p
}

// start runs the pod's container (again, after a stop: same name, same
// volumes; its address may change, its names do not).
func (h *rehearsal) start(p *pod) {
	h.t.Helper()
	s := h.m.statefulSets[strings.TrimSuffix(p.name, p.name[strings.LastIndex(p.name, "-"):])]
	stable := p.name + "." + s.Spec.ServiceName
	args := []string{"-d", "--name", p.container, "--hostname", p.name, "--network", h.net,
		"--network-alias", stable, "--network-alias", stable + "." + h.m.namespace + ".svc.cluster.local",
		"--read-only"}
	args = append(append(args, p.mounts...), h.tag)
	if _, err := h.r.output(h.r.runArgs(append(args, p.args...)...)...); err != nil {
		h.t.Fatal(err)
	}
}

func (h *rehearsal) logs(p *pod) string {
	return (&container{r: h.r, name: p.container}).logs()
}

// ip is the container's address on the rehearsal's network (reachable
// from the host with a rootful runtime).
func (h *rehearsal) ip(p *pod) string {
	out, err := h.r.output("inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, h.net), p.container)
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// admin runs the image's apogee-admin on the network.
func (h *rehearsal) admin(args ...string) (string, error) {
	return h.r.output(h.r.runArgs(append([]string{"--rm", "--network", h.net, h.tag, "apogee-admin"}, args...)...)...)
}

// lastJSON decodes the JSON document apogee-admin --json prints on its
// last line.
func lastJSON(out string, v any) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return json.Unmarshal([]byte(lines[len(lines)-1]), v)
}

// TestImageRehearsal runs deploy/kubernetes's pods from the image as
// containers on one network that resolves the pods' stable names (no
// cluster here): the three controllers with the manifests' arguments
// elect a leader; the name servers start; the broker group's members,
// started in order with the ConfigMap's broker.conf, form one group whose
// SyncStateSet holds all three; /healthz answers on each operator port; a
// send through the name servers is stored; stopping the master with
// SIGTERM (what a rolling update does) makes another member master, which
// takes sends, and the stopped member, started again (at a new address
// perhaps, under its old name), rejoins. With APOGEE_IMAGE_TEST=1, as
// TestImage.
func TestImageRehearsal(t *testing.T) {
	if os.Getenv(imageTestEnv) != "1" {
		t.Skipf("set %s=1 to run the Kubernetes manifests' pods from the container image (podman or docker)", imageTestEnv)
	}
	m := loadManifests(t)
	suffix := fmt.Sprint(os.Getpid())
	tag := "localhost/apogee-rehearsal-test:" + suffix
	r, err := findRuntime(t, tag)
	var none *noRuntimeError
	if errors.As(err, &none) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	h := &rehearsal{t: t, r: r, tag: tag, net: "apogee-rehearsal-" + suffix, suffix: suffix, m: m, pods: map[string]*pod{}}
	if _, err := r.output("network", "create", h.net); err != nil {
		t.Skipf("%s cannot create a network with DNS here: %v", r, err)
	}
	t.Cleanup(func() {
		for _, p := range h.pods {
			if t.Failed() {
				t.Logf("%s's log:\n%s", p.name, h.logs(p))
			}
			r.remove(p.container)
		}
		_, _ = r.output("network", "rm", h.net)
	})

	ctl := m.statefulSets["apogee-controller"]
	var ctlAddrs []string
	for i := range ctl.Spec.Replicas {
		h.start(h.newPod("apogee-controller", i))
		ctlAddrs = append(ctlAddrs, fmt.Sprintf("%s:%d", podDNS(ctl, i, false), ctl.Spec.Template.Spec.Containers[0].containerPort("remoting")))
	}
	ns := m.statefulSets["apogee-namesrv"]
	var nsAddrs []string
	for i := range ns.Spec.Replicas {
		h.start(h.newPod("apogee-namesrv", i))
		nsAddrs = append(nsAddrs, fmt.Sprintf("%s:%d", podDNS(ns, i, false), ns.Spec.Template.Spec.Containers[0].containerPort("remoting")))
	}
	var meta struct {
		Leader string `json:"controllerLeaderAddress"`
	}
	wait.For(t, "the controllers to elect a leader", func() error {
		out, err := h.admin("getControllerMetaData", "-a", strings.Join(ctlAddrs, ";"), "--json")
		if err != nil {
			return err
		}
		if err := lastJSON(out, &meta); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if meta.Leader == "" {
			return fmt.Errorf("no leader yet: %s", out)
		}
		return nil
	})
	t.Logf("controller leader %s", meta.Leader)

	set := m.statefulSets["apogee-broker-g1"]
	bc := set.Spec.Template.Spec.Containers[0]
	var brokers []*pod
	for i := range set.Spec.Replicas {
		p := h.newPod(set.Metadata.Name, i)
		brokers = append(brokers, p)
		h.start(p)
		// OrderedReady: the next member starts once this one is ready
		// (its readiness probe: the remoting port accepts).
		wait.For(t, p.name+" to be ready", func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(h.ip(p), fmt.Sprint(bc.containerPort("remoting"))), 2*time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		})
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get(fmt.Sprintf("http://%s:%d/healthz", h.ip(p), bc.containerPort("operator")))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s /healthz: %d", p.name, resp.StatusCode)
		}
	}

	// The group as the controllers see it.
	type replica struct {
		ID    int64  `json:"brokerId"`
		Addr  string `json:"brokerAddress"`
		Alive bool   `json:"alive"`
	}
	type syncState struct {
		Master    string    `json:"masterAddress"`
		ID        int64     `json:"masterBrokerId"`
		InSync    []replica `json:"inSyncReplicas"`
		NotInSync []replica `json:"notInSyncReplicas"`
	}
	state := func() (syncState, string, error) {
		var doc struct {
			Brokers []syncState `json:"brokers"`
		}
		out, err := h.admin("getSyncStateSet", "-a", strings.Join(ctlAddrs, ";"), "-b", "g1", "--json")
		if err != nil {
			return syncState{}, out, err
		}
		if err := lastJSON(out, &doc); err != nil || len(doc.Brokers) != 1 {
			return syncState{}, out, fmt.Errorf("getSyncStateSet --json: %v\n%s", err, out)
		}
		return doc.Brokers[0], out, nil
	}
	var st syncState
	wait.For(t, "all three members in the SyncStateSet", func() error {
		var out string
		var err error
		if st, out, err = state(); err != nil {
			return err
		}
		if len(st.InSync) != set.Spec.Replicas {
			return fmt.Errorf("SyncStateSet %v:\n%s", st.InSync, out)
		}
		return nil
	})
	t.Logf("master %s (broker id %d), SyncStateSet %v", st.Master, st.ID, st.InSync)
	wantSuffix := fmt.Sprintf(".%s.%s.svc.cluster.local:%d", set.Spec.ServiceName, m.namespace, bc.containerPort("remoting"))
	if !strings.HasSuffix(st.Master, wantSuffix) {
		t.Fatalf("the master's address %s is not a stable name (*%s)", st.Master, wantSuffix)
	}

	send := func(body string) string {
		t.Helper()
		var res struct {
			MsgID string `json:"msgId"`
		}
		wait.For(t, "a send through the name servers", func() error {
			out, err := h.admin("sendMessage", "-n", strings.Join(nsAddrs, ";"), "-t", "RehearsalTopic", "-p", body, "--json")
			if err != nil {
				return err
			}
			if err := lastJSON(out, &res); err != nil || res.MsgID == "" {
				return fmt.Errorf("sendMessage --json: %v\n%s", err, out)
			}
			return nil
		})
		return res.MsgID
	}
	found := func(id, body string) {
		t.Helper()
		wait.For(t, "message "+id+" read back", func() error {
			out, err := h.admin("queryMsgByUniqueKey", "-n", strings.Join(nsAddrs, ";"), "-t", "RehearsalTopic", "-i", id)
			if err != nil {
				return err
			}
			if !strings.Contains(out, body) {
				return fmt.Errorf("no %q in:\n%s", body, out)
			}
			return nil
		})
	}
	first := send("before the master stopped")
	found(first, "before the master stopped")

	// Stop the master as Kubernetes does (SIGTERM, then the grace).
	master := brokers[slices.IndexFunc(brokers, func(p *pod) bool { return strings.HasPrefix(st.Master, p.name+".") })]
	c := &container{r: r, name: master.container}
	if code := c.stop(t); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM:\n%s", master.name, code, h.logs(master))
	}
	wait.For(t, "another master", func() error {
		s, out, err := state()
		if err != nil {
			return err
		}
		if s.Master == "" || s.Master == st.Master {
			return fmt.Errorf("master still %q:\n%s", s.Master, out)
		}
		return nil
	})
	second := send("after the master stopped")
	found(second, "after the master stopped")
	found(first, "before the master stopped")

	// The old master, started again on its volume under its name, rejoins.
	r.remove(master.container)
	h.start(master)
	wait.For(t, master.name+" back in the SyncStateSet", func() error {
		s, out, err := state()
		if err != nil {
			return err
		}
		if len(s.InSync) != set.Spec.Replicas || s.Master == st.Master {
			return fmt.Errorf("not yet:\n%s", out)
		}
		return nil
	})
}
