package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"
	"github.com/apogeemq/apogee/store"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/ha"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Replication, the front end's part (docs/replication.md; the core's part
// is in broker/core/replica.go, the stream in package ha).
//
//   - A master serves the HA stream on the listeners given to ServeHA (an
//     ha.Master on the core's store) and registers its address
//     (Options.HAAdvertiseAddr) as haServerAddr. A
//     SYNC_MASTER's sends, send-backs and ended transactions wait for the
//     slave's acknowledgement like a sync flush (pendingAck), and are
//     answered FLUSH_SLAVE_TIMEOUT (12) or SLAVE_NOT_AVAILABLE (11) with the
//     send result's fields when it does not come.
//   - A slave runs an ha.Slave on its replica store, pointed at
//     Options.HAMasterAddr or at the haServerAddr the name servers answer
//     its registrations with (registered), and follows the master's tables
//     (follow: GET_ALL_TOPIC_CONFIG, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
//     GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET every SlaveSyncInterval,
//     from the master's remoting address the same answers give; then the
//     lite consumer offsets changed since its last round, in pages, with
//     the Apogee-only APOGEE_GET_LITE_CONSUMER_OFFSETS: syncLiteOffsets,
//     core's "Lite consumer offsets on replicas"); offsets
//     clients committed on it while the master was away are sent to the
//     master (UPDATE_CONSUMER_OFFSET) once it is back. Its master counts as
//     online while the HA connection is up (core.Options.MasterOnline).
type replication struct {
	wake chan struct{} // cap 1: a slave's master address became known

	mu         sync.Mutex
	master     *ha.Master    // a master's; nil on a slave
	slave      *ha.Slave     // a slave's; nil on a master
	unfollow   chan struct{} // closed to end the current slave term's follow loop
	followDone chan struct{} // closed when that loop returned
	haLns      map[net.Listener]struct{}
	haAddr     string // the HA address registered (a master's)
	masterAddr string // a slave's: its master's remoting address, as last answered
}

// slaveSyncTimeout bounds one round of a slave's following.
const slaveSyncTimeout = 10 * time.Second

// startReplication starts the HA side of the core's role (New calls it
// once the core is open; SetRole when the role changes).
func (b *Broker) startReplication() error {
	if b.core.IsSlave() {
		return b.startSlave(b.brokerID())
	}
	return b.startMaster()
}

// startMaster makes the HA stream's master side, which ServeHA's
// listeners hand their connections to.
func (b *Broker) startMaster() error {
	m, err := ha.NewMaster(b.core.Store(), ha.MasterOptions{Logger: b.copts.Logger, Handshake: b.opts.HAMasterHandshake,
		Secure: b.opts.HASecure, Cluster: b.copts.ClusterName, BrokerName: b.copts.BrokerName, Verify: b.opts.HAVerify})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	r := &b.repl
	r.mu.Lock()
	r.master = m
	if r.haAddr == "" {
		r.haAddr = b.opts.HAAdvertiseAddr
	}
	r.mu.Unlock()
	return nil
}

// stopMaster closes the master side: its slaves are disconnected (and stop
// counting as replicas); the HA listeners stay open.
func (b *Broker) stopMaster() {
	r := &b.repl
	r.mu.Lock()
	m := r.master
	r.master = nil
	r.mu.Unlock()
	if m != nil {
		m.Close()
	}
}

// startSlave starts an ha.Slave on the replica store and the loop that
// follows the master's tables; id is the broker id the slave goes by (a
// demoted master's new one: SetRole records it only once the role is
// changed, and the HA identity handshake and the log must not name the
// master's id 0).
func (b *Broker) startSlave(id int64) error {
	log := b.copts.Logger
	r := &b.repl
	r.mu.Lock()
	masterHA := b.opts.HAMasterAddr
	if b.opts.ControllerMode {
		masterHA = "" // FollowMaster names it
	}
	r.mu.Unlock()
	s, err := ha.NewSlave(b.core.Store(), ha.SlaveOptions{MasterAddr: masterHA, Logger: log, Handshake: b.opts.HASlaveHandshake,
		TLS: b.opts.HATLS, Cluster: b.copts.ClusterName, BrokerName: b.copts.BrokerName, BrokerID: id, Sign: b.opts.HASign})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	unfollow, done := make(chan struct{}), make(chan struct{})
	r.mu.Lock()
	r.slave, r.unfollow, r.followDone = s, unfollow, done
	if b.opts.ControllerMode {
		r.masterAddr = ""
	}
	r.mu.Unlock()
	s.Start()
	b.wg.Add(1)
	go b.follow(unfollow, done)
	master := masterHA
	switch {
	case master != "":
	case b.opts.ControllerMode:
		master = "(named by the controller's role change)"
	default:
		master = "(named by the name servers' answer to the registration)"
	}
	log.Info("broker: running as a slave", "brokerId", id, "haMasterAddr", master)
	return nil
}

// stopSlave stops the HA slave and its following loop: once it returns
// nothing appends to the replica store any more.
func (b *Broker) stopSlave() {
	r := &b.repl
	r.mu.Lock()
	s, unfollow, done := r.slave, r.unfollow, r.followDone
	r.slave, r.unfollow, r.followDone = nil, nil, nil
	r.mu.Unlock()
	if s == nil {
		return
	}
	close(unfollow)
	s.Close()
	<-done
}

// haMaster is the master side now (nil on a slave).
func (b *Broker) haMaster() *ha.Master {
	b.repl.mu.Lock()
	defer b.repl.mu.Unlock()
	return b.repl.master
}

// haSlave is the slave side now (nil on a master).
func (b *Broker) haSlave() *ha.Slave {
	b.repl.mu.Lock()
	defer b.repl.mu.Unlock()
	return b.repl.slave
}

// ServeHA accepts the HA stream's connections on ln until Shutdown, which
// closes ln (it returns ha.ErrMasterClosed then). Each connection goes to
// the master side of the moment; while the broker is a slave (in
// controller mode it may become master at any time, on the same listener)
// connections are closed at once. Without Options.HAAdvertiseAddr, the
// first listener's port with AdvertiseAddr's host is registered as the HA
// address. A SYNC_MASTER none of whose slaves can connect answers every
// send SLAVE_NOT_AVAILABLE.
func (b *Broker) ServeHA(ln net.Listener) error {
	r := &b.repl
	r.mu.Lock()
	if b.closing.Load() {
		r.mu.Unlock()
		ln.Close()
		return ha.ErrMasterClosed
	}
	if r.haLns == nil {
		r.haLns = map[net.Listener]struct{}{}
	}
	r.haLns[ln] = struct{}{}
	set := r.haAddr == ""
	if set {
		r.haAddr = haAdvertiseAddr(b.copts.AdvertiseAddr, ln.Addr())
	}
	haAddr := r.haAddr
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.haLns, ln)
		r.mu.Unlock()
		ln.Close()
	}()
	if set {
		b.registerEmbedded()
		if b.registrar != nil {
			b.registrar.Trigger()
		}
	}
	b.copts.Logger.Info("broker: HA listener", "role", b.core.Role(), "haListen", ln.Addr().String(), "haServerAddr", haAddr)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if b.closing.Load() || errors.Is(err, net.ErrClosed) {
				return ha.ErrMasterClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				acceptLogs.Warn(b.copts.Logger, ln.Addr().String(), "broker: HA accept failed (out of file descriptors?); retrying", "err", err, "in", backoff)
				select {
				case <-time.After(backoff):
				case <-b.stop:
					return ha.ErrMasterClosed
				}
				continue
			}
			return fmt.Errorf("broker: HA accept: %w", err)
		}
		backoff = 0
		if m := b.haMaster(); m != nil {
			m.ServeConn(c)
		} else {
			c.Close() // a slave serves no stream
		}
	}
}

// closeHAListeners closes the listeners ServeHA serves (Shutdown).
func (b *Broker) closeHAListeners() {
	r := &b.repl
	r.mu.Lock()
	defer r.mu.Unlock()
	for ln := range r.haLns {
		ln.Close()
	}
}

// haAdvertiseAddr is the advertised host with the HA listener's port.
func haAdvertiseAddr(advertise string, ln net.Addr) string {
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		host = advertise
	}
	port := ""
	if ta, ok := ln.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
	} else if _, p, err := net.SplitHostPort(ln.String()); err == nil {
		port = p
	}
	return net.JoinHostPort(host, port)
}

// drainTimeout bounds how long a stopping master waits for its slaves.
const drainTimeout = 5 * time.Second

// drainSlaves, on a stopping master whose server no longer takes
// requests, waits until every connected slave acknowledged the whole log
// (at most drainTimeout, or until ctx ends): a master stopped on purpose
// leaves its slaves everything it acknowledged, also as an ASYNC_MASTER.
func (b *Broker) drainSlaves(ctx context.Context) {
	m := b.haMaster()
	if m == nil {
		return
	}
	deadline := time.Now().Add(drainTimeout)
	st := b.core.Store()
	for {
		slaves := m.Slaves()
		end := st.WrittenOffset()
		behind := 0
		for _, s := range slaves {
			if s.Acked < end {
				behind++
			}
		}
		if behind == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.copts.Logger.Warn("broker: stopping before every slave has the whole log", "slavesBehind", behind, "logEnd", end)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopReplication closes the HA stream (before the store closes: Shutdown
// calls it before the core's).
func (b *Broker) stopReplication() {
	b.closeHAListeners()
	b.stopMaster()
	b.stopSlave()
}

// haServerAddr is the HA address a master registers ("" until known).
func (b *Broker) haServerAddr() string {
	b.repl.mu.Lock()
	defer b.repl.mu.Unlock()
	return b.repl.haAddr
}

// masterOnline is a slave's core.Options.MasterOnline: its HA connection
// to the master is up.
func (b *Broker) masterOnline() bool {
	s := b.haSlave()
	return s != nil && s.Status().Connected
}

// registered is the registrar's OnResult on a slave: a name server's answer
// names the master's remoting and HA addresses (empty while the group has
// no live master: the last known ones are kept).
func (b *Broker) registered(_ string, resp protocol.RegisterBrokerResponse, err error) {
	s := b.haSlave()
	if err != nil || s == nil || b.opts.ControllerMode {
		return
	}
	if resp.HAServerAddr != "" && b.opts.HAMasterAddr == "" {
		s.SetMasterAddr(resp.HAServerAddr)
	}
	if resp.MasterAddr != "" {
		r := &b.repl
		r.mu.Lock()
		changed := r.masterAddr != resp.MasterAddr
		r.masterAddr = resp.MasterAddr
		r.mu.Unlock()
		if changed {
			select {
			case r.wake <- struct{}{}:
			default:
			}
		}
	}
}

// follow is a slave's loop: it applies the master's tables every
// SlaveSyncInterval, and at once when the master's address becomes known.
func (b *Broker) follow(unfollow, done chan struct{}) {
	defer b.wg.Done()
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-unfollow:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(b.opts.SlaveSyncInterval)
	defer t.Stop()
	failing, denied := false, false
	var lite liteCursor
	for {
		select {
		case <-b.stop:
			return
		case <-unfollow:
			return
		case <-t.C:
		case <-b.repl.wake:
		}
		b.repl.mu.Lock()
		addr := b.repl.masterAddr
		b.repl.mu.Unlock()
		if addr == "" {
			continue
		}
		err := b.syncFromMaster(ctx, addr, &lite)
		var re *MasterRefusedError
		refused := errors.As(err, &re) && re.Code == protocol.RespNoPermission
		switch {
		case refused && !denied:
			b.copts.Logger.Error("broker: the master refuses this slave's requests (NO_PERMISSION): it runs with ACL and "+
				b.innerHint()+"; retrying every "+b.opts.SlaveSyncInterval.String(), "master", addr, "request", protocol.RequestCodeName(re.Request), "remark", re.Remark)
			failing, denied = true, true
		case err != nil && !refused && denied:
			denied = false
			b.copts.Logger.Warn("broker: following the master's topics, groups and offsets failed; retrying every "+
				b.opts.SlaveSyncInterval.String(), "master", addr, "err", err)
		case err != nil && !failing:
			b.copts.Logger.Warn("broker: following the master's topics, groups and offsets failed; retrying every "+
				b.opts.SlaveSyncInterval.String(), "master", addr, "err", err)
			failing = true
		case err == nil && failing:
			b.copts.Logger.Info("broker: following the master's topics, groups and offsets again", "master", addr)
			failing, denied = false, false
		}
	}
}

// acceptLogs throttles the HA listener's accept failures (one per retry,
// up to one a second, while file descriptors run out).
var acceptLogs = logthrottle.New(time.Minute)

// syncFromMaster fetches the master's topic, subscription-group,
// consumer-offset and delay-offset tables and applies them (RocketMQ's
// SlaveSynchronize.syncAll), then sends the master the offsets committed
// here that it has not reached; then the lite consumer offsets changed
// since lite's cursor (syncLiteOffsets).
func (b *Broker) syncFromMaster(ctx context.Context, addr string, lite *liteCursor) error {
	ctx, cancel := context.WithTimeout(ctx, slaveSyncTimeout)
	defer cancel()
	get := func(code int32) ([]byte, error) {
		var req protocol.Command
		req.InitRequest(code, 0)
		resp, err := b.pool.Invoke(ctx, addr, &req)
		if err != nil {
			return nil, err
		}
		if resp.Code != protocol.RespSuccess {
			return nil, &MasterRefusedError{Master: addr, Request: code, Code: resp.Code, Remark: string(resp.Remark)}
		}
		return resp.Body, nil
	}
	var errs []error
	if body, err := get(protocol.ReqGetAllTopicConfig); err != nil {
		errs = append(errs, err)
	} else {
		var w protocol.TopicConfigSerializeWrapper
		if err := w.Decode(body); err != nil {
			errs = append(errs, err)
		} else if n := b.core.Replication().SyncTopics(core.TopicTable{Topics: w.TopicConfigTable, Version: w.DataVersion}); n > 0 {
			b.copts.Logger.Info("broker: topics follow the master's", "changed", n)
		}
	}
	if body, err := get(protocol.ReqGetAllSubscriptionGroup); err != nil {
		errs = append(errs, err)
	} else {
		var w protocol.SubscriptionGroupWrapper
		if err := w.Decode(body); err != nil {
			errs = append(errs, err)
		} else if n := b.core.Replication().SyncSubscriptionGroups(core.GroupTable{Groups: w.SubscriptionGroupTable, Version: w.DataVersion}); n > 0 {
			b.copts.Logger.Info("broker: subscription groups follow the master's", "changed", n)
		}
	}
	if body, err := get(protocol.ReqGetAllConsumerOffset); err != nil {
		errs = append(errs, err)
	} else {
		var w protocol.ConsumerOffsetSerializeWrapper
		if err := w.Decode(body); err != nil {
			errs = append(errs, err)
		} else {
			for _, oc := range b.core.Replication().SyncConsumerOffsets(core.OffsetTable{Offsets: w.OffsetTable, Version: w.DataVersion}) {
				if err := b.forwardOffset(ctx, addr, oc); err != nil {
					errs = append(errs, err)
					break
				}
				b.core.Replication().OffsetForwarded(oc)
			}
		}
	}
	if body, err := get(protocol.ReqGetAllDelayOffset); err != nil {
		errs = append(errs, err)
	} else {
		var w protocol.DelayOffsetSerializeWrapper
		if err := w.Decode(body); err != nil {
			errs = append(errs, err)
		} else {
			b.core.Replication().SyncDelayOffsets(w.OffsetTable)
		}
	}
	if err := b.syncLiteOffsets(ctx, addr, lite); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// liteCursor is how far a slave followed its master's lite consumer
// offsets: the master index's run (epoch) and the last change number
// applied. The follow loop owns it.
type liteCursor struct {
	epoch int64
	since uint64
}

// syncLiteOffsets fetches, a page at a time, the master's lite consumer
// offsets changed since c and applies them (core's "Lite consumer offsets
// on replicas"), advancing c after each page applied.
func (b *Broker) syncLiteOffsets(ctx context.Context, addr string, c *liteCursor) error {
	for {
		rb, err := json.Marshal(protocol.LiteConsumerOffsetsRequest{Epoch: c.epoch, Since: c.since, Limit: core.LiteOffsetPageMax})
		if err != nil {
			return err
		}
		var req protocol.Command
		req.InitRequest(protocol.ReqApogeeGetLiteConsumerOffsets, 0)
		req.Body = rb
		resp, err := b.pool.Invoke(ctx, addr, &req)
		if err != nil {
			return fmt.Errorf("fetch the lite consumer offsets from %s: %w", addr, err)
		}
		if resp.Code != protocol.RespSuccess {
			return &MasterRefusedError{Master: addr, Request: req.Code, Code: resp.Code, Remark: string(resp.Remark)}
		}
		var page protocol.LiteConsumerOffsetsBody
		if err := page.Decode(resp.Body); err != nil {
			return fmt.Errorf("the lite consumer offsets from %s: %w", addr, err)
		}
		if page.Epoch != c.epoch {
			c.epoch, c.since = page.Epoch, 0
		}
		offs := make([]store.LiteOffsetRecord, len(page.Offsets))
		for i, o := range page.Offsets {
			offs[i] = store.LiteOffsetRecord{Group: o.Group, Parent: o.Parent, Lite: o.Lite, Offset: o.Offset, Seq: o.Seq}
		}
		if _, err := b.core.Replication().SyncLiteConsumerOffsets(offs); err != nil {
			return err
		}
		if n := len(offs); n > 0 {
			c.since = offs[n-1].Seq
		}
		if !page.More || len(offs) == 0 {
			return nil
		}
	}
}

// handleLiteConsumerOffsets serves APOGEE_GET_LITE_CONSUMER_OFFSETS: a
// page of the lite consumer offsets changed since the slave's cursor.
func (b *Broker) handleLiteConsumerOffsets(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var r protocol.LiteConsumerOffsetsRequest
	if err := json.Unmarshal(req.Body, &r); err != nil {
		return fail(resp, fmt.Errorf("APOGEE_GET_LITE_CONSUMER_OFFSETS: %w", err))
	}
	p := b.core.Replication().LiteConsumerOffsets(r.Epoch, r.Since, r.Limit)
	body := protocol.LiteConsumerOffsetsBody{Epoch: p.Epoch, More: p.More, Offsets: make([]protocol.LiteConsumerOffset, len(p.Offsets))}
	for i, o := range p.Offsets {
		body.Offsets[i] = protocol.LiteConsumerOffset{Group: o.Group, Parent: o.Parent, Lite: o.Lite, Offset: o.Offset, Seq: o.Seq}
	}
	enc, err := body.Encode()
	return replyBody(resp, enc, err)
}

// forwardOffset commits, on the master, an offset a client committed here.
func (b *Broker) forwardOffset(ctx context.Context, addr string, oc core.OffsetCommit) error {
	var req protocol.Command
	req.InitRequest(protocol.ReqUpdateConsumerOffset, 0)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte(oc.Group), Topic: []byte(oc.Topic),
		QueueID: oc.QueueID, CommitOffset: oc.Offset}).Encode(&req.Ext)
	resp, err := b.pool.Invoke(ctx, addr, &req)
	if err != nil {
		return fmt.Errorf("forward the offset of %s@%s queue %d to %s: %w", oc.Topic, oc.Group, oc.QueueID, addr, err)
	}
	if resp.Code != protocol.RespSuccess {
		return fmt.Errorf("forward the offset of %s@%s queue %d: %w", oc.Topic, oc.Group, oc.QueueID,
			&MasterRefusedError{Master: addr, Request: req.Code, Code: resp.Code, Remark: string(resp.Remark)})
	}
	return nil
}

// MasterRefusedError is the master's answer other than SUCCESS to one of
// a slave's requests (a table it follows, an offset it forwards).
type MasterRefusedError struct {
	Master  string
	Request int32 // the request code
	Code    int32 // the response code
	Remark  string
}

func (e *MasterRefusedError) Error() string {
	return fmt.Sprintf("%s answered %s with code %d (%s)", e.Master, protocol.RequestCodeName(e.Request), e.Code, e.Remark)
}

// innerHint tells an operator what to do about a peer refusing the
// broker's own requests for want of permission.
func (b *Broker) innerHint() string {
	if b.opts.InnerSigner == nil {
		return "this broker signs nothing: set innerClientAuthenticationCredentials in broker.conf " +
			`({"accessKey":"...","secretKey":"..."}) to a user of the master's ACL with admin rights (a Super user)`
	}
	return "refuses this broker's innerClientAuthenticationCredentials: give that user admin rights (a Super user) " +
		"in the master's ACL, or fix the keys in broker.conf"
}

// handleAllConsumerOffsets serves GET_ALL_CONSUMER_OFFSET (43): every
// committed offset, as config/consumerOffset.json holds them (what a
// slave follows).
func (b *Broker) handleAllConsumerOffsets(resp *remoting.Response) remoting.Action {
	t := b.core.Replication().AllConsumerOffsets()
	w := protocol.ConsumerOffsetSerializeWrapper{OffsetTable: t.Offsets, DataVersion: t.Version}
	body, err := w.Encode()
	return replyBody(resp, body, err)
}

// registerReplication registers GET_ALL_CONSUMER_OFFSET and
// APOGEE_GET_LITE_CONSUMER_OFFSETS.
func (b *Broker) registerReplication(t *handlerTable) {
	t.add(respOnly(b.handleAllConsumerOffsets), protocol.ReqGetAllConsumerOffset)
	t.add(func(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		return b.handleLiteConsumerOffsets(req, resp)
	}, protocol.ReqApogeeGetLiteConsumerOffsets)
}

// replicationInfo adds the replication's runtime numbers to m: the role
// and id; a master's connected slaves and how far behind the log's end the
// furthest one acknowledged (haSlaveBehindBytes); a slave's connection,
// master and position.
func (b *Broker) replicationInfo(m map[string]string) {
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	m["brokerRole"] = b.core.Role().String()
	m["brokerId"] = i(b.brokerID())
	r := &b.repl
	if master := b.haMaster(); master != nil {
		slaves := master.Slaves()
		end := b.core.Store().WrittenOffset()
		var behind int64
		for _, s := range slaves {
			behind = max(behind, end-max(s.Acked, 0))
		}
		m["haServerAddr"] = b.haServerAddr()
		m["haConnectedSlaves"] = strconv.Itoa(len(slaves))
		m["haSlaveBehindBytes"] = i(behind)
		m["haReplicatedOffset"] = i(b.core.Store().ReplicatedOffset())
	}
	if slave := b.haSlave(); slave != nil {
		st := slave.Status()
		r.mu.Lock()
		m["masterAddr"] = r.masterAddr
		r.mu.Unlock()
		m["haMasterAddr"] = st.MasterAddr
		m["haMasterConnected"] = strconv.FormatBool(st.Connected)
		m["haReportedOffset"] = i(st.Reported)
		m["haReceivedBytes"] = i(st.Received)
		m["haResets"] = i(st.Resets)
		m["haSessions"] = i(st.Sessions)
	}
}
