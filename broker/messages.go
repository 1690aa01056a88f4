package broker

import (
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// viewsRelease releases a list of commit-log views once written.
type viewsRelease []store.View

func (v viewsRelease) Release() { core.ReleaseViews(v) }

// handleQueryMessage serves QUERY_MESSAGE (12): the records of a topic whose
// UNIQ_KEY or KEYS hold the key, newest first, written without a copy. The
// index's last update is reported whatever the outcome.
func (b *Broker) handleQueryMessage(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.QueryMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	r, err := b.core.QueryMessage(h.Topic, h.Key, h.BeginTimestamp, h.EndTimestamp, h.MaxNum)
	(&protocol.QueryMessageResponse{IndexLastUpdateTimestamp: r.IndexLastUpdateTimestamp,
		IndexLastUpdatePhyoffset: r.IndexLastUpdatePhy}).Encode(&resp.Cmd.Ext)
	if err != nil {
		return fail(resp, err)
	}
	bodies := make([][]byte, len(r.Views))
	for i := range r.Views {
		bodies[i] = r.Views[i].Bytes()
	}
	resp.Body, resp.Release = bodies, viewsRelease(r.Views)
	return remoting.Reply
}

// handleViewMessage serves VIEW_MESSAGE_BY_ID (33): the record at a
// commit-log offset (decoded from an offset message id by the client).
func (b *Broker) handleViewMessage(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ViewMessageByIDRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, err)
	}
	v, err := b.core.ViewMessage(h.Offset)
	if err != nil {
		return fail(resp, err)
	}
	resp.Body, resp.Release = [][]byte{v.Bytes()}, viewsRelease{v}
	return remoting.Reply
}

// registerMessages registers the message query codes.
func (b *Broker) registerMessages(t *handlerTable) {
	t.add(noConn(b.handleQueryMessage), protocol.ReqQueryMessage)
	t.add(noConn(b.handleViewMessage), protocol.ReqViewMessageByID)
}
