package controller

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/apogeemq/apogee/internal/javaprops"
	"github.com/apogeemq/apogee/protocol"
)

// The controller's configuration as GET_CONTROLLER_CONFIG (1010) answers
// it and UPDATE_CONTROLLER_CONFIG (1009) changes it: RocketMQ
// ControllerConfig's keys, as Java properties. Every node answers both
// for itself (an update is not replicated: mqadmin's
// updateControllerConfig sends it to each controller listed), as the Java
// controller does. Two keys change at run time, enableElectUncleanMaster
// and notifyBrokerRoleChanged; an update naming any other key changes
// nothing and is refused with the key named (the others need a restart
// with the flag or the properties file).

// runtimeConfig holds what UPDATE_CONTROLLER_CONFIG changed; its zero
// value is Options' settings.
type runtimeConfig struct {
	unclean, notify atomic.Int32 // 0: Options'; 1 true; 2 false
}

func override(v *atomic.Int32, def bool) bool {
	switch v.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	return def
}

func setOverride(v *atomic.Int32, b bool) {
	if b {
		v.Store(1)
	} else {
		v.Store(2)
	}
}

// electUnclean reports whether elections may choose outside the
// SyncStateSet now.
func (n *Node) electUnclean() bool { return override(&n.rt.unclean, n.opts.ElectUncleanMaster) }

// notifyEnabled reports whether elections push NOTIFY_BROKER_ROLE_CHANGED.
func (n *Node) notifyEnabled() bool { return override(&n.rt.notify, !n.opts.DisableNotify) }

// Config returns this node's configuration under ControllerConfig's keys.
func (n *Node) Config() map[string]string {
	o := &n.opts
	var peers []string
	for _, p := range o.Peers {
		peers = append(peers, p.ID+"-"+p.Addr)
	}
	return map[string]string{
		"controllerDLegerGroup":       o.Group,
		"controllerDLegerSelfId":      o.ID,
		"controllerDLegerPeers":       strings.Join(peers, ";"),
		"controllerStorePath":         o.DataDir,
		"controllerType":              "Raft",
		"listenAddress":               o.Advertise,
		"enableElectUncleanMaster":    strconv.FormatBool(n.electUnclean()),
		"notifyBrokerRoleChanged":     strconv.FormatBool(n.notifyEnabled()),
		"scanInactiveMasterInterval":  strconv.FormatInt(o.ScanInterval.Milliseconds(), 10),
		"brokerHeartbeatTimeoutMills": strconv.FormatInt(o.HeartbeatTimeout.Milliseconds(), 10),
		"connectionCloseGraceMills":   strconv.FormatInt(o.CloseGrace.Milliseconds(), 10),
		"authenticationEnabled":       strconv.FormatBool(o.Authorize != nil),
	}
}

// handleGetConfig answers GET_CONTROLLER_CONFIG: the configuration as Java
// properties (keys sorted).
func (n *Node) handleGetConfig(resp *protocol.Command) {
	cfg := n.Config()
	keys := make([]string, 0, len(cfg))
	for k := range cfg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(cfg[k]))
		b.WriteByte('\n')
	}
	resp.Body = []byte(b.String())
}

// runtimeKeys are the keys UPDATE_CONTROLLER_CONFIG changes.
var runtimeKeys = map[string]func(n *Node, v bool){
	"enableElectUncleanMaster": func(n *Node, v bool) { setOverride(&n.rt.unclean, v) },
	"notifyBrokerRoleChanged":  func(n *Node, v bool) { setOverride(&n.rt.notify, v) },
}

// handleUpdateConfig applies UPDATE_CONTROLLER_CONFIG's properties: all of
// them or, when one cannot change, none.
func (n *Node) handleUpdateConfig(req, resp *protocol.Command) {
	props, err := javaprops.Parse(string(req.Body))
	if err != nil {
		resp.Code = protocol.RespInvalidParameter
		resp.SetRemark(fmt.Sprintf("the body is not Java properties: %v", err))
		return
	}
	if len(props) == 0 {
		resp.Code = protocol.RespInvalidParameter
		resp.SetRemark("no key to update: the body holds no key=value line")
		return
	}
	type change struct {
		set func(*Node, bool)
		v   bool
	}
	var changes []change
	for _, p := range props {
		set, ok := runtimeKeys[p.Key]
		if !ok {
			resp.Code = protocol.RespNoPermission
			if _, known := n.Config()[p.Key]; known {
				resp.SetRemark(fmt.Sprintf("%s cannot change at run time: restart the controller with it (flag or properties file); "+
					"enableElectUncleanMaster and notifyBrokerRoleChanged can", p.Key))
			} else {
				resp.SetRemark(fmt.Sprintf("%s is not a controller setting Apogee has: enableElectUncleanMaster and notifyBrokerRoleChanged change at run time", p.Key))
			}
			return
		}
		v, err := strconv.ParseBool(strings.TrimSpace(p.Value))
		if err != nil {
			resp.Code = protocol.RespInvalidParameter
			resp.SetRemark(fmt.Sprintf("%s=%q: want true or false", p.Key, p.Value))
			return
		}
		changes = append(changes, change{set, v})
	}
	for _, c := range changes {
		c.set(n, c.v)
	}
	n.log.Info("controller: configuration updated at run time (this node only; not kept across a restart)",
		"enableElectUncleanMaster", n.electUnclean(), "notifyBrokerRoleChanged", n.notifyEnabled())
}
