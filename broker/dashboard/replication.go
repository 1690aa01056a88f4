package dashboard

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ControllerView is what a controller-mode broker's controller client
// knows of its group (Options.Controller): the broker group page shows it.
type ControllerView struct {
	// Controllers are the controller addresses; Leader the one the client
	// last found leading ("" when none answered yet).
	Controllers []string
	Leader      string
	// SelfID is this broker's id in the group.
	SelfID int64
	// The group's state as the client last heard it (NOTIFY, heartbeats,
	// GET_REPLICA_INFO).
	MasterID                       int64
	MasterAddr                     string
	MasterEpoch, SyncStateSetEpoch int32
	SyncStateSet                   []int64
	// Members are the group's replicas as the controller holds them
	// (GET_SYNC_STATE_DATA); StateErr says why they could not be read.
	Members  []ControllerMember
	StateErr string
	// Epochs are this broker's epoch file entries (epoch, start offset).
	Epochs []EpochEntry
}

// ControllerMember is one replica the controller knows.
type ControllerMember struct {
	ID     int64
	Addr   string
	Alive  bool
	InSync bool
}

// EpochEntry is one entry of a replica's epoch file.
type EpochEntry struct {
	Epoch       int32
	StartOffset int64
}

type replMember struct {
	ID                 string
	Addr               string
	Role               string
	Self, Alive        bool
	InSync             string
	Acked, LagBytes    string
	ConnectedFor       string
	AliveKnown, Master bool
}

type replData struct {
	Mode          string // "controller" or "classic"
	Name, Role    string
	SelfID        string
	WrittenOffset int64
	ConfirmOffset int64
	Members       []replMember
	// Replicas are the HA connections this broker serves as master.
	Replicas []replMember
	Ctl      *ControllerView
	CtlErr   string
	Note     string
}

// replication builds the broker group page: the members with their roles,
// and, on the master, each slave's lag (the HA acknowledgements the store
// keeps: the log's end less what the slave acknowledged); in controller
// mode the controller's view (leader, epochs, SyncStateSet, who is alive
// and in sync) and this broker's epoch file.
func (d *Dashboard) replication(r *http.Request) (any, error) {
	c := d.b.Core()
	st := c.Store()
	o := c.Options()
	out := replData{Mode: "classic", Name: o.BrokerName, Role: c.Role().String(),
		WrittenOffset: st.WrittenOffset(), ConfirmOffset: st.DurableOffset()}
	end := out.WrittenOffset
	replicas := st.Replicas()
	sort.Slice(replicas, func(i, j int) bool { return replicas[i].Name < replicas[j].Name })
	acked := map[int64]int64{}
	for _, rp := range replicas {
		m := replMember{ID: rp.Name, Acked: strconv.FormatInt(rp.Acked, 10), LagBytes: strconv.FormatInt(max(end-rp.Acked, 0), 10),
			InSync: yesNo(rp.InSync), ConnectedFor: time.Since(rp.Since).Truncate(time.Second).String(), Role: "SLAVE"}
		if id, ok := strings.CutPrefix(rp.Name, "id:"); ok {
			if n, err := strconv.ParseInt(id, 10, 64); err == nil {
				acked[n] = rp.Acked
				m.ID = id
			}
		}
		out.Replicas = append(out.Replicas, m)
	}
	if d.o.Controller != nil {
		out.Mode = "controller"
		ctx, cancel := context.WithTimeout(r.Context(), d.o.MemberTimeout)
		defer cancel()
		v, err := d.o.Controller(ctx)
		if err != nil {
			out.CtlErr = err.Error()
		}
		out.Ctl = &v
		out.SelfID = strconv.FormatInt(v.SelfID, 10)
		inSet := map[int64]bool{}
		for _, id := range v.SyncStateSet {
			inSet[id] = true
		}
		for _, m := range v.Members {
			row := replMember{ID: strconv.FormatInt(m.ID, 10), Addr: m.Addr, Alive: m.Alive, AliveKnown: true,
				Self: m.ID == v.SelfID, Master: m.ID == v.MasterID, InSync: yesNo(inSet[m.ID])}
			row.Role = "SLAVE"
			if row.Master {
				row.Role = "MASTER"
			}
			if a, ok := acked[m.ID]; ok {
				row.Acked, row.LagBytes = strconv.FormatInt(a, 10), strconv.FormatInt(max(end-a, 0), 10)
			}
			out.Members = append(out.Members, row)
		}
		if len(out.Members) == 0 && v.MasterID != 0 {
			out.Members = append(out.Members, replMember{ID: strconv.FormatInt(v.MasterID, 10), Addr: v.MasterAddr, Role: "MASTER",
				Master: true, Self: v.MasterID == v.SelfID, InSync: yesNo(inSet[v.MasterID])})
		}
	} else {
		// Classic: the group as the embedded name server holds it (id 0 is
		// the master), else this broker alone.
		if bd, ok := d.b.ClusterInfo().BrokerAddrTable[o.BrokerName]; ok {
			ids := make([]int64, 0, len(bd.BrokerAddrs))
			for id := range bd.BrokerAddrs {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			for _, id := range ids {
				row := replMember{ID: strconv.FormatInt(id, 10), Addr: bd.BrokerAddrs[id], Role: "SLAVE", Master: id == 0,
					Self: bd.BrokerAddrs[id] == o.AdvertiseAddr}
				if row.Master {
					row.Role = "MASTER"
				}
				out.Members = append(out.Members, row)
			}
		}
		if len(out.Members) == 0 {
			out.Members = []replMember{{ID: "0", Addr: o.AdvertiseAddr, Role: out.Role, Self: true, Master: !c.IsSlave()}}
			out.Note = "No name server table names this broker's group here (no embedded name server): only this broker is shown."
		}
	}
	if c.IsSlave() && len(out.Replicas) == 0 {
		out.Note = strings.TrimSpace(out.Note + " This broker is a slave: its master's page shows each slave's lag.")
	}
	return out, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
