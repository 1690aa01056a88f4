package broker

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// replyRequester answers the broker's PUSH_REPLY_MESSAGE_TO_CLIENT with code and
// records the correlation ids pushed.
type replyRequester struct {
	code   int32
	mu     sync.Mutex
	pushed map[string]protocol.ReplyMessageRequest
	bodies map[string]string
}

func (r *replyRequester) ServeRemoting(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if req.Code != protocol.ReqPushReplyMessageToClient {
		return remoting.NoReply
	}
	var h protocol.ReplyMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		resp.Cmd.Code = protocol.RespSystemError
		return remoting.Reply
	}
	corr := message.ParsePropertiesString(h.Properties)[message.PropCorrelationID]
	r.mu.Lock()
	r.pushed[corr] = h
	r.bodies[corr] = string(req.Body)
	resp.Cmd.Code = r.code
	r.mu.Unlock()
	return remoting.Reply
}

func replyRequest(code int32, to, corr string, body string) *protocol.Command {
	p := props(message.PropMsgType, "reply", message.PropCorrelationID, corr, message.PropReplyToClient, to)
	var cmd *protocol.Command
	if code == protocol.ReqSendReplyMessageV2 {
		cmd = sendV2Request(code, "DefaultCluster_REPLY_TOPIC", 0, []byte(body), p)
	} else {
		cmd = sendRequest("DefaultCluster_REPLY_TOPIC", 0, []byte(body), p)
		cmd.Code = code
	}
	return cmd
}

// Replies from many goroutines (both codes) reach the requester's connection, each
// with its body and correlation id, and every replier is answered SUCCESS with the
// stored reply's fields; in both flush modes. A requester that refuses a push, and one
// that closed its connection, make the replier's answer SYSTEM_ERROR.
func TestReplyPushedToRequester(t *testing.T) {
	for _, mode := range []commitlog.FlushMode{commitlog.FlushAsync, commitlog.FlushSync} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			h := newHarness(t, func(o *Options) { o.Core.Store.FlushMode = mode })
			rq := &replyRequester{code: protocol.RespSuccess, pushed: map[string]protocol.ReplyMessageRequest{}, bodies: map[string]string{}}
			requester := h.dial(rq)
			const id = "127.0.0.1@requester"
			if resp := invoke(t, requester, heartbeatRequest(t, id, "", nil)); resp.Code != protocol.RespSuccess {
				t.Fatalf("heartbeat: %d %s", resp.Code, resp.Remark)
			}
			replier := h.dial(nil)
			const n = 40
			var wg sync.WaitGroup
			var failed atomic.Int32
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					code := protocol.ReqSendReplyMessage
					if i%2 == 1 {
						code = protocol.ReqSendReplyMessageV2
					}
					corr := fmt.Sprintf("c-%d", i)
					resp := invoke(t, replier, replyRequest(code, id, corr, "body-"+corr))
					if resp.Code != protocol.RespSuccess || ext(resp, "msgId") == "" {
						failed.Add(1)
						t.Errorf("reply %s: %d %q msgId %q", corr, resp.Code, resp.Remark, ext(resp, "msgId"))
					}
				}()
			}
			wg.Wait()
			if failed.Load() > 0 {
				return
			}
			rq.mu.Lock()
			for i := range n {
				corr := fmt.Sprintf("c-%d", i)
				hdr, ok := rq.pushed[corr]
				if !ok || rq.bodies[corr] != "body-"+corr || hdr.Topic != "DefaultCluster_REPLY_TOPIC" ||
					!strings.HasPrefix(hdr.BornHost, "/127.0.0.1:") || hdr.StoreHost != "/"+h.addr ||
					!strings.Contains(hdr.Properties, message.PropPushReplyTime) {
					t.Errorf("push %s: %+v body %q", corr, hdr, rq.bodies[corr])
				}
			}
			rq.mu.Unlock()

			rq.mu.Lock()
			rq.code = protocol.RespSystemError
			rq.mu.Unlock()
			if resp := invoke(t, replier, replyRequest(protocol.ReqSendReplyMessage, id, "refused", "x")); resp.Code != protocol.RespSystemError ||
				string(resp.Remark) != "push reply message to "+id+"fail." {
				t.Fatalf("a refused push: %d %q", resp.Code, resp.Remark)
			}
			requester.Close()
			wait.For(t, "the requester forgotten", func() error {
				resp := invoke(t, replier, replyRequest(protocol.ReqSendReplyMessage, id, "gone", "x"))
				if resp.Code != protocol.RespSystemError || string(resp.Remark) != "push reply message fail, channel of <"+id+"> not found." {
					return fmt.Errorf("%d %q", resp.Code, resp.Remark)
				}
				return nil
			})
		})
	}
}
