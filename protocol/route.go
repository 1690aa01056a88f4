package protocol

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
)

// TopicRouteData is the body of a successful GET_ROUTEINFO_BY_TOPIC (105) response: the
// queues of a topic per broker name, and the addresses of those brokers.
type TopicRouteData struct {
	OrderTopicConf    string              // "brokerName:n;..." forces the publish queue list; usually empty
	QueueDatas        []QueueData         // one per broker name hosting the topic
	BrokerDatas       []BrokerData        // the brokers named in QueueDatas
	FilterServerTable map[string][]string // legacy; written as {} when empty
}

// QueueData is one broker name's queues for a topic.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
	Perm           int32  `json:"perm"`
	TopicSysFlag   int32  `json:"topicSysFlag"`
}

// BrokerData is one broker name (a master and its slaves) and its addresses by broker id
// (0 = master).
type BrokerData struct {
	Cluster            string
	BrokerName         string
	BrokerAddrs        map[int64]string
	ZoneName           string // 5.x; written only when set
	EnableActingMaster bool   // 5.x; written only when true
}

// RouteJSONStandard reports whether a name server should answer a route request with
// standard JSON (quoted brokerAddrs keys), as the Java name server decides: for clients
// of version V4_9_4 and later, or that ask for it (GetRouteInfoRequest.AcceptStandardJSONOnly).
// Older clients, rocketmq-client-go (version 317) among them, get fastjson's unquoted
// integer keys ({0:"addr"}), which every version of that client's hand parser reads
// correctly; its older versions map quoted keys ("1") all to broker id 0.
func RouteJSONStandard(version int32, acceptStandardJSONOnly bool) bool {
	return version >= VersionV4_9_4 || acceptStandardJSONOnly
}

// AppendJSON appends the route as compact JSON (no whitespace anywhere: rocketmq-client-go
// splits the brokerAddrs object text on ',' and ':' by hand). brokerAddrs is always
// present ({} when empty) and its ids are written in ascending order; with standard
// false they are written unquoted, as fastjson does for old clients (see
// RouteJSONStandard). queueDatas and brokerDatas are always arrays.
func (r *TopicRouteData) AppendJSON(dst []byte, standard bool) []byte {
	dst = append(dst, '{')
	if r.OrderTopicConf != "" {
		dst = append(dst, `"orderTopicConf":`...)
		dst = appendJSONString(dst, r.OrderTopicConf)
		dst = append(dst, ',')
	}
	dst = append(dst, `"queueDatas":[`...)
	for i := range r.QueueDatas {
		if i > 0 {
			dst = append(dst, ',')
		}
		q := &r.QueueDatas[i]
		dst = append(dst, `{"brokerName":`...)
		dst = appendJSONString(dst, q.BrokerName)
		dst = append(dst, `,"readQueueNums":`...)
		dst = strconv.AppendInt(dst, int64(q.ReadQueueNums), 10)
		dst = append(dst, `,"writeQueueNums":`...)
		dst = strconv.AppendInt(dst, int64(q.WriteQueueNums), 10)
		dst = append(dst, `,"perm":`...)
		dst = strconv.AppendInt(dst, int64(q.Perm), 10)
		dst = append(dst, `,"topicSysFlag":`...)
		dst = strconv.AppendInt(dst, int64(q.TopicSysFlag), 10)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"brokerDatas":[`...)
	for i := range r.BrokerDatas {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.BrokerDatas[i].appendJSON(dst, standard)
	}
	dst = append(dst, `],"filterServerTable":`...)
	dst = appendStringListMap(dst, r.FilterServerTable)
	return append(dst, '}')
}

// appendJSON writes {"cluster":..,"brokerName":..,"brokerAddrs":{..}[,"zoneName":..][,"enableActingMaster":true]}.
func (b *BrokerData) appendJSON(dst []byte, standard bool) []byte {
	dst = append(dst, `{"cluster":`...)
	dst = appendJSONString(dst, b.Cluster)
	dst = append(dst, `,"brokerName":`...)
	dst = appendJSONString(dst, b.BrokerName)
	dst = append(dst, `,"brokerAddrs":{`...)
	ids := make([]int64, 0, len(b.BrokerAddrs))
	for id := range b.BrokerAddrs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		if standard {
			dst = append(dst, '"')
		}
		dst = strconv.AppendInt(dst, id, 10)
		if standard {
			dst = append(dst, '"')
		}
		dst = append(dst, ':')
		dst = appendJSONString(dst, b.BrokerAddrs[id])
	}
	dst = append(dst, '}')
	if b.ZoneName != "" {
		dst = append(dst, `,"zoneName":`...)
		dst = appendJSONString(dst, b.ZoneName)
	}
	if b.EnableActingMaster {
		dst = append(dst, `,"enableActingMaster":true`...)
	}
	return append(dst, '}')
}

func appendStringListMap(dst []byte, m map[string][]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, k)
		dst = append(dst, ":["...)
		for j, v := range m[k] {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, v)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// brokerDataJSON is BrokerData as encoding/json sees it.
type brokerDataJSON struct {
	Cluster            string            `json:"cluster"`
	BrokerName         string            `json:"brokerName"`
	BrokerAddrs        map[string]string `json:"brokerAddrs"`
	ZoneName           string            `json:"zoneName"`
	EnableActingMaster bool              `json:"enableActingMaster"`
}

func (j *brokerDataJSON) toBrokerData() (BrokerData, error) {
	b := BrokerData{Cluster: j.Cluster, BrokerName: j.BrokerName, ZoneName: j.ZoneName,
		EnableActingMaster: j.EnableActingMaster, BrokerAddrs: make(map[int64]string, len(j.BrokerAddrs))}
	for k, v := range j.BrokerAddrs {
		id, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return b, errors.New("brokerAddrs key " + strconv.Quote(k) + " is not an integer")
		}
		b.BrokerAddrs[id] = v
	}
	return b, nil
}

// Decode parses a route body in either form AppendJSON writes (quoted or unquoted
// brokerAddrs keys), and also Java's (any key order, extra keys, "topicSynFlag").
func (r *TopicRouteData) Decode(body []byte) error {
	var aux struct {
		OrderTopicConf string `json:"orderTopicConf"`
		QueueDatas     []struct {
			QueueData
			TopicSynFlag *int32 `json:"topicSynFlag"`
		} `json:"queueDatas"`
		BrokerDatas       []brokerDataJSON    `json:"brokerDatas"`
		FilterServerTable map[string][]string `json:"filterServerTable"`
	}
	if err := json.Unmarshal(quoteBareKeys(body), &aux); err != nil {
		return bodyErr("TopicRouteData", err)
	}
	*r = TopicRouteData{OrderTopicConf: aux.OrderTopicConf, FilterServerTable: aux.FilterServerTable}
	for _, q := range aux.QueueDatas {
		qd := q.QueueData
		if q.TopicSynFlag != nil && qd.TopicSysFlag == 0 {
			qd.TopicSysFlag = *q.TopicSynFlag
		}
		r.QueueDatas = append(r.QueueDatas, qd)
	}
	for i := range aux.BrokerDatas {
		b, err := aux.BrokerDatas[i].toBrokerData()
		if err != nil {
			return bodyErr("TopicRouteData", err)
		}
		r.BrokerDatas = append(r.BrokerDatas, b)
	}
	return nil
}

// ClusterInfo is the body of GET_BROKER_CLUSTER_INFO (106).
type ClusterInfo struct {
	BrokerAddrTable  map[string]BrokerData // broker name → broker data
	ClusterAddrTable map[string][]string   // cluster name → broker names
}

// AppendJSON appends the cluster info as compact JSON with sorted keys; brokerAddrs keys
// are quoted when standard is true, unquoted (fastjson style) otherwise. rocketmq-client-go's
// admin strips quotes from those keys, so both forms work with it.
func (ci *ClusterInfo) AppendJSON(dst []byte, standard bool) []byte {
	names := make([]string, 0, len(ci.BrokerAddrTable))
	for k := range ci.BrokerAddrTable {
		names = append(names, k)
	}
	slices.Sort(names)
	dst = append(dst, `{"brokerAddrTable":{`...)
	for i, name := range names {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, name)
		dst = append(dst, ':')
		b := ci.BrokerAddrTable[name]
		dst = b.appendJSON(dst, standard)
	}
	dst = append(dst, `},"clusterAddrTable":`...)
	dst = appendStringListMap(dst, ci.ClusterAddrTable)
	return append(dst, '}')
}

// Decode parses a cluster info body (quoted or unquoted brokerAddrs keys).
func (ci *ClusterInfo) Decode(body []byte) error {
	var aux struct {
		BrokerAddrTable  map[string]brokerDataJSON `json:"brokerAddrTable"`
		ClusterAddrTable map[string][]string       `json:"clusterAddrTable"`
	}
	if err := json.Unmarshal(quoteBareKeys(body), &aux); err != nil {
		return bodyErr("ClusterInfo", err)
	}
	*ci = ClusterInfo{BrokerAddrTable: make(map[string]BrokerData, len(aux.BrokerAddrTable)), ClusterAddrTable: aux.ClusterAddrTable}
	for name, bj := range aux.BrokerAddrTable {
		b, err := bj.toBrokerData()
		if err != nil {
			return bodyErr("ClusterInfo", err)
		}
		ci.BrokerAddrTable[name] = b
	}
	return nil
}
