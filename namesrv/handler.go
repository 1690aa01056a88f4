package namesrv

import (
	"hash/crc32"
	"maps"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// NamespaceOrderTopicConfig is the KV namespace whose values ("brokerName:n;...") the
// routes of the topics named by their keys carry as orderTopicConf, as in Java.
const NamespaceOrderTopicConfig = "ORDER_TOPIC_CONFIG"

// IsNamesrvCode reports whether ServeRemoting answers the request code: a broker that
// embeds the registry routes these codes to it.
//
//	100 PUT_KV_CONFIG, 101 GET_KV_CONFIG, 102 DELETE_KV_CONFIG, 103 REGISTER_BROKER,
//	104 UNREGISTER_BROKER, 105 GET_ROUTEINFO_BY_TOPIC, 106 GET_BROKER_CLUSTER_INFO,
//	206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 216 DELETE_TOPIC_IN_NAMESRV,
//	217 REGISTER_TOPIC_IN_NAMESRV, 219 GET_KVLIST_BY_NAMESPACE, 224 GET_TOPICS_BY_CLUSTER,
//	205 WIPE_WRITE_PERM_OF_BROKER, 327 ADD_WRITE_PERM_OF_BROKER
func IsNamesrvCode(code int32) bool {
	switch code {
	case protocol.ReqPutKVConfig, protocol.ReqGetKVConfig, protocol.ReqDeleteKVConfig,
		protocol.ReqRegisterBroker, protocol.ReqUnregisterBroker, protocol.ReqGetRouteInfoByTopic,
		protocol.ReqGetBrokerClusterInfo, protocol.ReqGetAllTopicListFromNameSrv,
		protocol.ReqDeleteTopicInNameSrv, protocol.ReqRegisterTopicInNameSrv, protocol.ReqGetKVListByNamespace,
		protocol.ReqGetTopicsByCluster, protocol.ReqWipeWritePermOfBroker, protocol.ReqAddWritePermOfBroker:
		return true
	}
	return false
}

// ServeRemoting answers the name-server requests (see IsNamesrvCode) inline; any other
// code gets REQUEST_CODE_NOT_SUPPORTED. A header that cannot be decoded gets
// SYSTEM_ERROR with the decoding error as remark. It never blocks, with one exception:
// every request is served under the registry's lock and nothing else, except a PUT or
// DELETE_KV_CONFIG on a registry with a KV file, which also waits for the file's write
// (see Options.KVConfigPath). c is the connection a
// REGISTER_BROKER binds the broker's liveness to (see ConnClosed).
func (r *Registry) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	switch req.Code {
	case protocol.ReqGetRouteInfoByTopic:
		r.serveRoute(req, resp.Cmd)
	case protocol.ReqRegisterBroker:
		r.serveRegister(c, req, resp)
	case protocol.ReqUnregisterBroker:
		var h protocol.UnregisterBrokerRequest
		if err := h.Decode(&req.Ext); err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		r.UnregisterBroker(h.ClusterName, h.BrokerName, h.BrokerAddr, h.BrokerID)
	case protocol.ReqGetBrokerClusterInfo:
		ci := r.ClusterInfo()
		resp.Cmd.Body = ci.AppendJSON(nil, protocol.RouteJSONStandard(req.Version, false))
	case protocol.ReqGetAllTopicListFromNameSrv:
		tl := protocol.TopicList{TopicList: r.Topics()}
		body, err := tl.Encode()
		if err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		resp.Cmd.Body = body
	case protocol.ReqGetTopicsByCluster:
		var h protocol.GetTopicsByClusterRequest
		if err := h.Decode(&req.Ext); err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		tl := protocol.TopicList{TopicList: r.clusterTopics(h.Cluster)}
		body, err := tl.Encode()
		if err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		resp.Cmd.Body = body
	case protocol.ReqDeleteTopicInNameSrv:
		var h protocol.DeleteTopicRequest
		if err := h.Decode(&req.Ext); err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		r.deleteTopic(h.Topic, h.ClusterName) // 5.x: only that cluster's brokers when set
	case protocol.ReqRegisterTopicInNameSrv:
		// Java 5's registerTopicToNamesrv: header topic, body a TopicRouteData whose
		// queueDatas are applied (RegisterTopic); brokerDatas are ignored.
		var h protocol.RegisterTopicRequest
		if err := h.Decode(&req.Ext); err != nil {
			return fail(resp.Cmd, protocol.RespSystemError, err.Error())
		}
		if len(req.Body) > 0 {
			var rd protocol.TopicRouteData
			if err := rd.Decode(req.Body); err != nil {
				return fail(resp.Cmd, protocol.RespSystemError, err.Error())
			}
			r.RegisterTopic(h.Topic, rd.QueueDatas)
		}
	case protocol.ReqPutKVConfig, protocol.ReqGetKVConfig, protocol.ReqDeleteKVConfig, protocol.ReqGetKVListByNamespace:
		r.serveKV(req, resp.Cmd)
	case protocol.ReqWipeWritePermOfBroker, protocol.ReqAddWritePermOfBroker:
		return r.serveWritePerm(req, resp)
	default:
		return fail(resp.Cmd, protocol.RespRequestCodeNotSupported,
			" request type "+strconv.FormatInt(int64(req.Code), 10)+" not supported")
	}
	return remoting.Reply
}

// fail turns cmd (a SUCCESS response being built) into an error response.
func fail(cmd *protocol.Command, code int32, remark string) remoting.Action {
	cmd.Code = code
	cmd.Ext.Reset()
	cmd.Body = nil
	cmd.SetRemark(remark)
	return remoting.Reply
}

// routeNotFound is the Java name server's remark for TOPIC_NOT_EXIST.
const routeNotFound = "No topic route info in name server for the topic: "

// serveRoute answers GET_ROUTEINFO_BY_TOPIC from the route cache: no allocation once
// the topic's route is cached.
func (r *Registry) serveRoute(req, cmd *protocol.Command) {
	var h protocol.GetRouteInfoRequest // Topic aliases req: no allocation
	if err := h.Decode(&req.Ext); err != nil {
		fail(cmd, protocol.RespSystemError, err.Error())
		return
	}
	body, found := r.routeJSON(h.Topic, protocol.RouteJSONStandard(req.Version, h.AcceptStandardJSONOnly))
	if !found {
		fail(cmd, protocol.RespTopicNotExist, routeNotFound+string(h.Topic))
		return
	}
	cmd.Body = body // copied when the response is queued; the cached slice is immutable
}

// serveRegister answers REGISTER_BROKER: crc check, body decode, registration bound to c.
func (r *Registry) serveRegister(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) {
	var h protocol.RegisterBrokerRequest
	if err := h.Decode(&req.Ext); err != nil {
		fail(resp.Cmd, protocol.RespSystemError, err.Error())
		return
	}
	if h.Compressed {
		r.log.Warn("namesrv: compressed registration refused", "broker", h.BrokerName, "addr", h.BrokerAddr)
		fail(resp.Cmd, protocol.RespSystemError,
			"namesrv: compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false on the broker")
		return
	}
	if h.BodyCRC32 != 0 {
		if sum := int32(crc32.ChecksumIEEE(req.Body) & 0x7FFFFFFF); sum != h.BodyCRC32 {
			r.log.Warn("namesrv: registration crc32 mismatch", "broker", h.BrokerName, "addr", h.BrokerAddr,
				"want", h.BodyCRC32, "got", sum)
			fail(resp.Cmd, protocol.RespSystemError, "crc32 not match")
			return
		}
	}
	reg := BrokerRegistration{ClusterName: h.ClusterName, BrokerName: h.BrokerName, BrokerAddr: h.BrokerAddr,
		HAServerAddr: h.HAServerAddr, BrokerID: h.BrokerID}
	withTopics := len(req.Body) > 0
	if withTopics {
		var body protocol.RegisterBrokerBody
		if err := body.Decode(req.Body); err != nil {
			r.log.Warn("namesrv: registration body refused", "broker", h.BrokerName, "addr", h.BrokerAddr, "err", err)
			fail(resp.Cmd, protocol.RespSystemError, err.Error())
			return
		}
		w := &body.TopicConfigSerializeWrapper
		reg.DataVersion = w.DataVersion
		reg.Topics = make([]protocol.TopicConfig, 0, len(w.TopicConfigTable))
		for key, tc := range w.TopicConfigTable {
			if tc == nil {
				continue
			}
			t := *tc
			if t.TopicName == "" {
				t.TopicName = key
			}
			reg.Topics = append(reg.Topics, t)
		}
	}
	timeout := time.Duration(h.HeartbeatTimeoutMillis) * time.Millisecond
	r.mu.Lock()
	master, ha, err := r.registerLocked(&reg, c, timeout, withTopics)
	order := maps2Table(r.kv[NamespaceOrderTopicConfig])
	r.mu.Unlock()
	if err != nil {
		r.log.Warn("namesrv: registration refused", "broker", h.BrokerName, "id", h.BrokerID, "addr", h.BrokerAddr, "err", err)
		fail(resp.Cmd, protocol.RespSystemError, err.Error())
		return
	}

	out := protocol.RegisterBrokerResponse{HAServerAddr: ha, MasterAddr: master}
	out.Encode(&resp.Cmd.Ext)
	if order != nil {
		if b, err := order.Encode(); err == nil {
			resp.Cmd.Body = b
		}
	}
}

// maps2Table copies a KV namespace into a KVTable, or returns nil for an empty one.
func maps2Table(m map[string]string) *protocol.KVTable {
	if len(m) == 0 {
		return nil
	}
	return &protocol.KVTable{Table: maps.Clone(m)}
}

// serveKV answers the KV-config requests. A PUT or DELETE with a KV file
// (Options.KVConfigPath) is answered once the file is written, so that connection's
// read goroutine waits for a write and its fsyncs; a change that cannot be written is
// refused with SYSTEM_ERROR and not applied.
func (r *Registry) serveKV(req, cmd *protocol.Command) {
	var h protocol.KVConfigRequest
	if err := h.Decode(&req.Ext); err != nil {
		fail(cmd, protocol.RespSystemError, err.Error())
		return
	}
	ns, key := h.Namespace, h.Key
	if req.Code == protocol.ReqGetKVListByNamespace {
		r.mu.RLock()
		t := maps2Table(r.kv[ns])
		r.mu.RUnlock()
		if t == nil {
			fail(cmd, protocol.RespQueryNotFound, "No config item, Namespace: "+ns)
			return
		}
		body, err := t.Encode()
		if err != nil {
			fail(cmd, protocol.RespSystemError, err.Error())
			return
		}
		cmd.Body = body
		return
	}
	if key == "" {
		fail(cmd, protocol.RespSystemError, "namesrv: missing field key")
		return
	}
	switch req.Code {
	case protocol.ReqPutKVConfig:
		if !h.HasValue {
			fail(cmd, protocol.RespSystemError, "namesrv: missing field value")
			return
		}
		if _, err := r.changeKV(ns, key, h.Value, false); err != nil {
			fail(cmd, protocol.RespSystemError, err.Error())
		}
	case protocol.ReqGetKVConfig:
		r.mu.RLock()
		value, ok := r.kv[ns][key]
		r.mu.RUnlock()
		if !ok {
			fail(cmd, protocol.RespQueryNotFound, "No config item, Namespace: "+ns+" Key: "+key)
			return
		}
		(&protocol.GetKVConfigResponse{Value: value}).Encode(&cmd.Ext)
	case protocol.ReqDeleteKVConfig:
		if _, err := r.changeKV(ns, key, "", true); err != nil {
			fail(cmd, protocol.RespSystemError, err.Error())
		}
	}
}
