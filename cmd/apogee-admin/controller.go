package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/javaprops"
	"github.com/apogeemq/apogee/protocol"
)

// The controller commands: mqadmin's getControllerMetaData,
// getSyncStateSet, electMaster, cleanBrokerMetadata, getControllerConfig
// and updateControllerConfig against apogee-controller (-a/--controllerAddress,
// "host:port;host:port"), and getBrokerEpoch through the brokers (found on
// the name server by -b BROKER_NAME or -c CLUSTER). A request only the
// leader answers goes where the controller named in -a says the leader
// is (its GET_METADATA_INFO answer), as mqadmin does, and once more to the
// leader a CONTROLLER_NOT_LEADER answer names. Under --acl the requests
// are signed with --access-key/--secret-key; --tls and its flags reach a
// controller with --tls-mode.

func init() {
	ctl := func(fs *pflag.FlagSet) {
		fs.StringP("controllerAddress", "a", "", "controller address list, host:port;host:port")
	}
	register(&command{name: "getControllerMetaData", summary: "the controller group: its leader and members", nsOptional: true,
		flags: ctl, run: getControllerMetaData})
	register(&command{name: "getSyncStateSet", summary: "a broker group's master, epochs and SyncStateSet (from the controller)", nsOptional: true,
		flags: func(fs *pflag.FlagSet) {
			ctl(fs)
			fs.StringP("clusterName", "c", "", "every broker group of this cluster (needs the name server)")
			fs.StringP("brokerName", "b", "", "this broker group")
			fs.StringP("interval", "i", "", "print again every this many seconds until interrupted")
		}, run: getSyncStateSet})
	register(&command{name: "getBrokerEpoch", summary: "the epoch entries of a broker group's members (asked of each broker)",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("clusterName", "c", "", "every broker of this cluster")
			fs.StringP("brokerName", "b", "", "the members of this broker group")
			fs.StringP("interval", "i", "", "print again every this many seconds until interrupted")
		}, run: getBrokerEpoch})
	register(&command{name: "electMaster", summary: "make a broker the master of its group (the controller elects it)", nsOptional: true,
		flags: func(fs *pflag.FlagSet) {
			ctl(fs)
			fs.StringP("brokerId", "b", "", "the controller's id of the broker to become master")
			fs.String("brokerName", "", "the broker group (mqadmin's -bn)")
			fs.StringP("clusterName", "c", "", "the cluster")
		}, run: electMaster})
	register(&command{name: "cleanBrokerMetadata", summary: "make the controller forget a broker group or some of its members", nsOptional: true,
		flags: func(fs *pflag.FlagSet) {
			ctl(fs)
			fs.StringP("brokerControllerIdsToClean", "b", "", "the members' ids, 1;2;3 (default: the whole group)")
			fs.String("brokerName", "", "the broker group (mqadmin's -bn)")
			fs.StringP("clusterName", "c", "", "the cluster (required unless -l)")
			fs.BoolP("cleanLivingBroker", "l", false, "clean members that are alive too")
		}, run: cleanBrokerMetadata})
	register(&command{name: "getControllerConfig", summary: "each controller's configuration", nsOptional: true,
		flags: ctl, run: getControllerConfig})
	register(&command{name: "updateControllerConfig", summary: "change a controller setting at run time, on each controller listed", nsOptional: true,
		flags: func(fs *pflag.FlagSet) {
			ctl(fs)
			fs.StringP("key", "k", "", "key (enableElectUncleanMaster or notifyBrokerRoleChanged)")
			fs.StringP("value", "v", "", "value")
		}, run: updateControllerConfig})
}

// mqadminArgs rewrites mqadmin's two-letter -bn (commons-cli allows it,
// pflag does not) as --brokerName.
func mqadminArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		switch {
		case a == "-bn":
			a = "--brokerName"
		case strings.HasPrefix(a, "-bn="):
			a = "--brokerName=" + a[len("-bn="):]
		}
		out = append(out, a)
	}
	return out
}

// controllerError is a controller's refusal: its code and remark.
type controllerError struct {
	addr   string
	code   int32
	remark string
}

func (e *controllerError) Error() string {
	return fmt.Sprintf("controller %s answered %s: %s", e.addr, wire.RespName(e.code), e.remark)
}

// controllerAddrs is -a's list.
func (x *cmdCtx) controllerAddrs() ([]string, error) {
	addrs := strings.FieldsFunc(x.str("controllerAddress"), func(r rune) bool { return r == ';' || r == ',' || r == ' ' })
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: --controllerAddress (-a) is required: the controllers' host:port;host:port", errUsage)
	}
	return addrs, nil
}

// ctlCall sends one request to addr; an answer other than SUCCESS is a
// *controllerError.
func (x *cmdCtx) ctlCall(addr string, code int32, fields map[string]string, body []byte) (*protocol.Command, error) {
	resp, err := x.admin.ControllerRequest(x.ctx, addr, code, fields, body)
	if err != nil {
		return nil, err
	}
	if resp.Code != protocol.RespSuccess {
		return resp, &controllerError{addr: addr, code: resp.Code, remark: string(resp.Remark)}
	}
	return resp, nil
}

// metadata asks the controllers of -a in turn for GET_METADATA_INFO; the
// first answer wins.
func (x *cmdCtx) metadata() (wire.Metadata, string, error) {
	addrs, err := x.controllerAddrs()
	if err != nil {
		return wire.Metadata{}, "", err
	}
	var errs []error
	for _, a := range addrs {
		resp, err := x.ctlCall(a, wire.ReqGetMetadataInfo, nil, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var m wire.Metadata
		if err := m.Decode(&resp.Ext); err != nil {
			errs = append(errs, fmt.Errorf("controller %s: %w", a, err))
			continue
		}
		return m, a, nil
	}
	return wire.Metadata{}, "", errors.Join(errs...)
}

// leaderCall sends a request only the leader answers: to the leader the
// metadata names (the controller asked itself when it leads), and once
// more to the leader a CONTROLLER_NOT_LEADER answer names.
func (x *cmdCtx) leaderCall(code int32, fields map[string]string, body []byte) (*protocol.Command, string, error) {
	m, asked, err := x.metadata()
	if err != nil {
		return nil, "", err
	}
	addr := m.LeaderAddress
	if m.IsLeader || addr == "" {
		addr = asked
	}
	resp, err := x.ctlCall(addr, code, fields, body)
	var ce *controllerError
	if errors.As(err, &ce) && ce.code == wire.RespNotLeader {
		if _, hint := wire.LeaderHint(resp); hint != "" && hint != addr {
			addr = hint
			resp, err = x.ctlCall(addr, code, fields, body)
		}
	}
	return resp, addr, err
}

func getControllerMetaData(x *cmdCtx) error {
	m, asked, err := x.metadata()
	if err != nil {
		return err
	}
	peers := strings.FieldsFunc(m.Peers, func(r rune) bool { return r == ';' || r == ',' })
	x.say("#ControllerGroup\t%s", m.Group)
	x.say("#ControllerLeaderId\t%s", m.LeaderID)
	x.say("#ControllerLeaderAddress\t%s", m.LeaderAddress)
	for _, p := range peers {
		x.say("#Peer:\t%s", p)
	}
	if peers == nil {
		peers = []string{}
	}
	x.doc = map[string]any{"controllerGroup": m.Group, "controllerLeaderId": m.LeaderID, "controllerLeaderAddress": m.LeaderAddress,
		"askedController": asked, "askedIsLeader": m.IsLeader, "peers": peers}
	return nil
}

// repeat runs round once or, with -i SECONDS, every SECONDS until
// interrupted (each round within --timeout; with --json, each round's
// document on a line of its own).
func (x *cmdCtx) repeat(round func() error) error {
	s := x.str("interval")
	if s == "" {
		return round()
	}
	sec, err := strconv.Atoi(s)
	if err != nil || sec <= 0 {
		return fmt.Errorf("%w: --interval %q: want a whole number of seconds above 0", errUsage, s)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	timeout, _ := x.fs.GetDuration("timeout")
	t := time.NewTicker(time.Duration(sec) * time.Second)
	defer t.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		x.ctx = rctx
		err := round()
		cancel()
		if err != nil {
			return err
		}
		if x.json {
			// One JSON document a line, a line a round.
			b, err := json.Marshal(x.doc)
			if err != nil {
				return err
			}
			fmt.Fprintln(x.stdout, string(b))
		}
		x.doc, x.docPrinted = nil, true
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// brokerNames is -b, or the broker names of cluster -c on the name server.
func (x *cmdCtx) brokerNames() ([]string, error) {
	if b := x.str("brokerName"); b != "" {
		return []string{b}, nil
	}
	c := x.str("clusterName")
	if c == "" {
		return nil, fmt.Errorf("%w: give -b BROKER_NAME or -c CLUSTER", errUsage)
	}
	if x.nsList == "" {
		return nil, fmt.Errorf("%w: -c %s needs the name server (-n or $NAMESRV_ADDR) to list the cluster's broker groups; or give -b BROKER_NAME", errUsage, c)
	}
	ci, err := x.admin.ClusterInfo(x.ctx)
	if err != nil {
		return nil, err
	}
	names, ok := ci.ClusterAddrTable[c]
	if !ok {
		return nil, fmt.Errorf("cluster %q is not registered with the name server", c)
	}
	names = append([]string(nil), names...)
	sort.Strings(names)
	return names, nil
}

func getSyncStateSet(x *cmdCtx) error {
	if _, err := x.controllerAddrs(); err != nil {
		return err
	}
	return x.repeat(func() error {
		names, err := x.brokerNames()
		if err != nil {
			return err
		}
		body, _ := json.Marshal(names)
		resp, _, err := x.leaderCall(wire.ReqGetSyncStateData, nil, body)
		if err != nil {
			return err
		}
		var info wire.BrokerReplicasInfo
		if err := json.Unmarshal(resp.Body, &info); err != nil {
			return fmt.Errorf("the controller's BrokerReplicasInfo: %w", err)
		}
		type group struct {
			BrokerName string `json:"brokerName"`
			wire.ReplicasInfo
		}
		var out []group
		for _, n := range names {
			ri, ok := info.ReplicasInfoTable[n]
			if !ok {
				x.say("\n#brokerName\t%s\n#(the controller has no such broker group)", n)
				continue
			}
			out = append(out, group{n, ri})
			x.say("\n#brokerName\t%s\n#MasterAddr\t%s\n#MasterEpoch\t%d\n#SyncStateSetEpoch\t%d\n#SyncStateSetNums\t%d",
				n, ri.MasterAddress, ri.MasterEpoch, ri.SyncStateSetEpoch, len(ri.InSyncReplicas))
			var rows [][]string
			add := func(kind string, rs []wire.ReplicaIdentity) {
				for _, r := range rs {
					state := "offline"
					if r.Alive {
						state = "online"
					}
					role := "slave"
					if r.BrokerID == ri.MasterBrokerID {
						role = "master"
					}
					rows = append(rows, []string{kind, itoa(r.BrokerID), r.BrokerAddress, role, state})
				}
			}
			add("InSyncReplica", ri.InSyncReplicas)
			add("NotInSyncReplica", ri.NotInSyncReplicas)
			x.say("")
			x.table([]string{"Replica", "BrokerId", "BrokerAddress", "Role", "Status"}, rows)
		}
		if out == nil {
			out = []group{}
		}
		x.doc = map[string]any{"brokers": out}
		return nil
	})
}

func getBrokerEpoch(x *cmdCtx) error {
	return x.repeat(func() error {
		names, err := x.brokerNames()
		if err != nil {
			return err
		}
		ci, err := x.admin.ClusterInfo(x.ctx)
		if err != nil {
			return err
		}
		type member struct {
			BrokerAddr string `json:"brokerAddr"`
			wire.EpochEntryCache
		}
		out := []member{}
		for _, n := range names {
			bd, ok := ci.BrokerAddrTable[n]
			if !ok {
				return fmt.Errorf("broker group %q is not registered with the name server", n)
			}
			ids := make([]int64, 0, len(bd.BrokerAddrs))
			for id := range bd.BrokerAddrs {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			for _, id := range ids {
				addr := bd.BrokerAddrs[id]
				resp, err := x.admin.ControllerRequest(x.ctx, addr, wire.ReqGetBrokerEpochCache, nil, nil)
				if err != nil {
					return err
				}
				if resp.Code != protocol.RespSuccess {
					return fmt.Errorf("broker %s answered %s: %s", addr, wire.RespName(resp.Code), resp.Remark)
				}
				var c wire.EpochEntryCache
				if err := json.Unmarshal(resp.Body, &c); err != nil {
					return fmt.Errorf("broker %s's EpochEntryCache: %w", addr, err)
				}
				if k := len(c.EpochList); k > 0 && c.EpochList[k-1].EndOffset == math.MaxInt64 {
					c.EpochList[k-1].EndOffset = c.MaxOffset // as mqadmin prints it
				}
				if c.EpochList == nil {
					c.EpochList = []wire.EpochEntry{}
				}
				out = append(out, member{addr, c})
				x.say("\n#clusterName\t%s\n#brokerName\t%s\n#brokerAddr\t%s\n#brokerId\t%d", c.ClusterName, c.BrokerName, addr, c.BrokerID)
				rows := make([][]string, len(c.EpochList))
				for i, e := range c.EpochList {
					rows[i] = []string{strconv.Itoa(int(e.Epoch)), itoa(e.StartOffset), itoa(e.EndOffset)}
				}
				x.table([]string{"Epoch", "StartOffset", "EndOffset"}, rows)
			}
		}
		x.doc = map[string]any{"brokers": out}
		return nil
	})
}

func electMaster(x *cmdCtx) error {
	if _, err := x.controllerAddrs(); err != nil {
		return err
	}
	if err := x.need("brokerId", "brokerName", "clusterName"); err != nil {
		return err
	}
	id, err := x.int64("brokerId", 0)
	if err != nil {
		return err
	}
	if id < wire.FirstBrokerID {
		return fmt.Errorf("%w: --brokerId %d: the controller's broker ids start at %d (getSyncStateSet lists them)", errUsage, id, wire.FirstBrokerID)
	}
	var req protocol.Command
	(&wire.ElectMasterRequest{ClusterName: x.str("clusterName"), BrokerName: x.str("brokerName"), BrokerID: id, Designate: true}).Encode(&req)
	fields := map[string]string{}
	req.Ext.ForEach(func(k, v []byte) bool { fields[string(k)] = string(v); return true })
	resp, addr, err := x.leaderCall(wire.ReqElectMaster, fields, nil)
	if err != nil {
		return err
	}
	var mi wire.MasterInfo
	if err := mi.Decode(&resp.Ext); err != nil {
		return fmt.Errorf("controller %s's answer: %w", addr, err)
	}
	var body wire.ElectMasterBody
	if len(resp.Body) > 0 {
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			return fmt.Errorf("controller %s's ElectMasterResponseBody: %w", addr, err)
		}
	}
	x.say("#ClusterName\t%s", x.str("clusterName"))
	x.say("#BrokerName\t%s", x.str("brokerName"))
	x.say("#BrokerMasterAddr\t%s", mi.MasterAddress)
	x.say("#MasterEpoch\t%d", mi.MasterEpoch)
	x.say("#SyncStateSetEpoch\t%d", mi.SyncStateSetEpoch)
	members := map[int64]string{}
	if body.BrokerMemberGroup != nil {
		members = body.BrokerMemberGroup.BrokerAddrs
	}
	ids := make([]int64, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		x.say("\t#Broker\t%d\t%s", id, members[id])
	}
	set := body.SyncStateSet
	if set == nil {
		set = []int64{}
	}
	x.doc = map[string]any{"clusterName": x.str("clusterName"), "brokerName": x.str("brokerName"), "masterBrokerId": mi.MasterID,
		"masterAddress": mi.MasterAddress, "masterEpoch": mi.MasterEpoch, "syncStateSetEpoch": mi.SyncStateSetEpoch,
		"syncStateSet": set, "brokerAddrs": members}
	return nil
}

func cleanBrokerMetadata(x *cmdCtx) error {
	if _, err := x.controllerAddrs(); err != nil {
		return err
	}
	if err := x.need("brokerName"); err != nil {
		return err
	}
	living, _ := x.fs.GetBool("cleanLivingBroker")
	if !living && x.str("clusterName") == "" {
		return fmt.Errorf("%w: --clusterName (-c) is required unless --cleanLivingBroker (-l), as mqadmin", errUsage)
	}
	r := wire.CleanBrokerDataRequest{ClusterName: x.str("clusterName"), BrokerName: x.str("brokerName"), CleanLiving: living}
	if s := x.str("brokerControllerIdsToClean"); s != "" {
		for _, f := range strings.Split(s, ";") {
			id, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || id < wire.FirstBrokerID {
				return fmt.Errorf("%w: --brokerControllerIdsToClean %q: want broker ids separated by ';', e.g. 1;2;3", errUsage, s)
			}
			r.IDs = append(r.IDs, id)
		}
	}
	var req protocol.Command
	r.Encode(&req)
	fields := map[string]string{}
	req.Ext.ForEach(func(k, v []byte) bool { fields[string(k)] = string(v); return true })
	if _, _, err := x.leaderCall(wire.ReqCleanBrokerData, fields, nil); err != nil {
		return err
	}
	x.say("clear broker %s metadata from controller success! ", r.BrokerName)
	ids := r.IDs
	if ids == nil {
		ids = []int64{}
	}
	x.doc = map[string]any{"brokerName": r.BrokerName, "clusterName": r.ClusterName, "brokerControllerIds": ids, "cleanLivingBroker": living}
	return nil
}

func getControllerConfig(x *cmdCtx) error {
	addrs, err := x.controllerAddrs()
	if err != nil {
		return err
	}
	out := map[string]map[string]string{}
	for _, a := range addrs {
		resp, err := x.ctlCall(a, wire.ReqGetControllerConfig, nil, nil)
		if err != nil {
			return err
		}
		props, err := javaprops.Parse(string(resp.Body))
		if err != nil {
			return fmt.Errorf("controller %s's configuration: %w", a, err)
		}
		m := map[string]string{}
		keys := make([]string, 0, len(props))
		for _, p := range props {
			m[p.Key] = p.Value
			keys = append(keys, p.Key)
		}
		sort.Strings(keys)
		out[a] = m
		x.say("============%s============", a)
		for _, k := range keys {
			x.say("%-50s=  %s", k, m[k])
		}
	}
	x.doc = out
	return nil
}

func updateControllerConfig(x *cmdCtx) error {
	addrs, err := x.controllerAddrs()
	if err != nil {
		return err
	}
	if err := x.need("key", "value"); err != nil {
		return err
	}
	k, v := x.str("key"), x.str("value")
	if strings.ContainsAny(k, "=:\n") || strings.Contains(v, "\n") {
		return fmt.Errorf("%w: --key %q / --value %q: one key and one value on a line", errUsage, k, v)
	}
	body := []byte(k + "=" + v + "\n")
	for _, a := range addrs {
		if _, err := x.ctlCall(a, wire.ReqUpdateControllerConfig, nil, body); err != nil {
			return err
		}
	}
	x.say("update controller config success!%s\n%s : %s", "["+strings.Join(addrs, ", ")+"]", k, v)
	x.doc = map[string]any{"controllers": addrs, "key": k, "value": v}
	return nil
}
