package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// An action is a change an operator confirms before it happens: /confirm
// shows what it will do, with its fields and a token, and /do does it.
type action struct {
	// Title is what the confirmation page asks.
	Title string
	// Fields are the form fields the action reads, in display order.
	Fields []string
	// describe says what the action will do with these values (an error
	// when they cannot work); run does it and says what it did.
	describe func(d *Dashboard, v url.Values) (string, error)
	run      func(d *Dashboard, v url.Values) (string, error)
	// back is the page to return to.
	back func(v url.Values) string
	// code is the remoting request code that makes the same change, and
	// header its header fields from the form: under ACL a user may take
	// the action when its policies allow that request (Users).
	code   int32
	header func(v url.Values) []string
}

// request is the remoting request that makes a's change with the values v
// (for the ACL check; it is never sent).
func (a *action) request(v url.Values) *protocol.Command {
	req := new(protocol.Command)
	req.InitRequest(a.code, 0)
	h := a.header(v)
	for i := 0; i+1 < len(h); i += 2 {
		req.Ext.SetString(h[i], h[i+1])
	}
	return req
}

var actions = map[string]action{
	"create-topic": {
		Title:  "Create or update a topic",
		Fields: []string{"topic", "queues", "perm", "order"},
		describe: func(d *Dashboard, v url.Values) (string, error) {
			r, err := topicRequest(v)
			if err != nil {
				return "", err
			}
			verb := "Create"
			if _, ok := d.b.Core().TopicConfig(r.Topic); ok {
				verb = "Update"
			}
			return fmt.Sprintf("%s topic %s with %d read and %d write queues, permission %d, order %v.",
				verb, r.Topic, r.ReadQueueNums, r.WriteQueueNums, r.Perm, r.Order), nil
		},
		run: func(d *Dashboard, v url.Values) (string, error) {
			r, err := topicRequest(v)
			if err != nil {
				return "", err
			}
			if err := d.b.Core().Admin().CreateTopic(&r); err != nil {
				return "", err
			}
			return fmt.Sprintf("Topic %s has %d queues.", r.Topic, r.WriteQueueNums), nil
		},
		back: func(v url.Values) string { return "/topic?t=" + url.QueryEscape(v.Get("topic")) },
		code: protocol.ReqUpdateAndCreateTopic,
		header: func(v url.Values) []string {
			return []string{"topic", strings.TrimSpace(v.Get("topic"))}
		},
	},
	"reset-offset": {
		Title:  "Reset a consumer group's offsets",
		Fields: []string{"group", "topic", "time"},
		describe: func(d *Dashboard, v url.Values) (string, error) {
			ts, what, err := resetTime(v.Get("time"))
			if err != nil {
				return "", err
			}
			_ = ts
			if _, ok := d.b.Core().TopicConfig(v.Get("topic")); !ok {
				return "", fmt.Errorf("topic %q does not exist", v.Get("topic"))
			}
			return fmt.Sprintf("Move group %s's offsets of topic %s to %s. Its live members are told to drop what they hold and resume there.",
				v.Get("group"), v.Get("topic"), what), nil
		},
		run: func(d *Dashboard, v url.Values) (string, error) {
			ts, _, err := resetTime(v.Get("time"))
			if err != nil {
				return "", err
			}
			offs, notified, err := d.b.ResetConsumerOffset(v.Get("topic"), v.Get("group"), ts, true, -1, -1)
			if err != nil {
				return "", err
			}
			var sb strings.Builder
			fmt.Fprintf(&sb, "Reset %d queues of %s for %s (%d members told):", len(offs), v.Get("topic"), v.Get("group"), notified)
			for _, o := range offs {
				fmt.Fprintf(&sb, " queue %d → %d;", o.QueueID, o.Offset)
			}
			return strings.TrimSuffix(sb.String(), ";"), nil
		},
		back: func(v url.Values) string { return "/group?g=" + url.QueryEscape(v.Get("group")) },
		code: protocol.ReqInvokeBrokerToResetOffset,
		header: func(v url.Values) []string {
			return []string{"group", v.Get("group"), "topic", v.Get("topic")}
		},
	},
	"resend": {
		Title:  "Resend a message to a consumer",
		Fields: []string{"group", "client", "msgid"},
		describe: func(d *Dashboard, v url.Values) (string, error) {
			if v.Get("group") == "" || v.Get("client") == "" || v.Get("msgid") == "" {
				return "", errors.New("a resend needs the group, the client id and the message's offset id")
			}
			if _, err := d.b.Core().Admin().ConsumerConn(v.Get("group"), v.Get("client")); err != nil {
				return "", errors.New(core.Remark(err))
			}
			vw, err := d.b.Core().ViewMessageByOffsetID(v.Get("msgid"))
			if err != nil {
				return "", errors.New(core.Remark(err))
			}
			vw.Release()
			return fmt.Sprintf("Push message %s to consumer %s of group %s, which consumes it at once with its listener (CONSUME_MESSAGE_DIRECTLY). Offsets do not change.",
				v.Get("msgid"), v.Get("client"), v.Get("group")), nil
		},
		run: func(d *Dashboard, v url.Values) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), d.o.ActionTimeout)
			defer cancel()
			res, err := d.b.ConsumeMessageDirectly(ctx, v.Get("group"), v.Get("client"), v.Get("msgid"))
			if err != nil {
				return "", err
			}
			s := fmt.Sprintf("The consumer answered %s in %d ms.", res.ConsumeResult, res.SpentTimeMills)
			if res.Remark != "" {
				s += " " + res.Remark
			}
			return s, nil
		},
		back: func(v url.Values) string { return "/group?g=" + url.QueryEscape(v.Get("group")) },
		code: protocol.ReqConsumeMessageDirectly,
		header: func(v url.Values) []string {
			return []string{"consumerGroup", v.Get("group"), "clientId", v.Get("client"), "msgId", v.Get("msgid")}
		},
	},
}

// topicRequest reads the create-topic form: a topic name, a queue count
// (1-1024, default 8), a permission (6 default) and order.
func topicRequest(v url.Values) (core.TopicRequest, error) {
	r := core.TopicRequest{Topic: strings.TrimSpace(v.Get("topic")), Perm: protocol.PermRead | protocol.PermWrite}
	if r.Topic == "" {
		return r, errors.New("no topic name given")
	}
	n := 8
	if s := strings.TrimSpace(v.Get("queues")); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 || n > 1024 {
			return r, fmt.Errorf("queues %q: want 1 to 1024", s)
		}
	}
	r.ReadQueueNums, r.WriteQueueNums = int32(n), int32(n)
	if s := strings.TrimSpace(v.Get("perm")); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || (p != 2 && p != 4 && p != 6) {
			return r, fmt.Errorf("perm %q: want 6 (read-write), 4 (read-only) or 2 (write-only)", s)
		}
		r.Perm = int32(p)
	}
	r.Order = v.Get("order") == "true" || v.Get("order") == "on"
	return r, nil
}

// resetTime reads a reset's target: "now" or "latest" (each queue's end),
// "earliest" (its start), ms since the epoch, or a time
// "2006-01-02T15:04:05" (local) or RFC 3339.
func resetTime(s string) (int64, string, error) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "now", "latest":
		return -1, "the end of each queue (skip the backlog)", nil
	case "earliest":
		return 0, "the first message of each queue (consume everything again)", nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return ms, "the first message stored at or after " + formatMs(ms), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t.UnixMilli(), "the first message stored at or after " + formatMs(t.UnixMilli()), nil
		}
	}
	return 0, "", fmt.Errorf("time %q: want now, earliest, ms since the epoch or 2006-01-02T15:04:05", s)
}

type confirmData struct {
	Action, Title, What, Token, Back string
	Fields                           []kv
}

// permit checks that r's login may take action a with the values v: with
// Users, a login whose policies allow a's request; without, anyone.
func (d *Dashboard) permit(r *http.Request, a *action, v url.Values) (user string, err error) {
	if d.o.Users == nil {
		return "", nil
	}
	_, user = d.login(r)
	if user == "" {
		return "", errLoginNeeded
	}
	if err := d.o.Users.AuthorizeRequest(user, remoteIP(r), a.request(v)); err != nil {
		return user, refused("refused: user %s may not do this (it needs what %s needs): %v", user, protocol.RequestCodeName(a.code), err)
	}
	return user, nil
}

func (d *Dashboard) confirm(r *http.Request) (any, error) {
	q := r.URL.Query()
	name := q.Get("action")
	a, ok := actions[name]
	if !ok {
		return nil, fmt.Errorf("unknown action %q", name)
	}
	out := confirmData{Action: name, Title: a.Title, Back: a.back(q)}
	if _, err := d.permit(r, &a, q); err != nil {
		return out, err
	}
	for _, f := range a.Fields {
		out.Fields = append(out.Fields, kv{f, q.Get(f)})
	}
	what, err := a.describe(d, q)
	if err != nil {
		return out, err
	}
	sid, _ := d.login(r)
	out.What, out.Token = what, d.newToken(name, sid, a.Fields, q)
	return out, nil
}

type resultData struct {
	Title, Done, Back string
	OK                bool
}

// do runs a confirmed action: a POST from this site whose token was
// minted for this action, these values and this login, by a user allowed
// to take it.
func (d *Dashboard) do(w http.ResponseWriter, r *http.Request) {
	v := d.newView(r, "result")
	if err := r.ParseForm(); err != nil {
		v.Err = err.Error()
		d.render(w, http.StatusBadRequest, "result", v)
		return
	}
	name := r.PostForm.Get("action")
	a, ok := actions[name]
	if !ok {
		v.Err = fmt.Sprintf("unknown action %q", name)
		d.render(w, http.StatusBadRequest, "result", v)
		return
	}
	// The action sees its own fields only, each given once.
	vals := url.Values{}
	var dup string
	for _, f := range a.Fields {
		if len(r.PostForm[f]) > 1 {
			dup = f
		}
		vals.Set(f, r.PostForm.Get(f))
	}
	sid, _ := d.login(r)
	user, err := d.permit(r, &a, vals)
	if err == nil {
		if ok, why := sameOrigin(r); !ok {
			err = errors.New(why)
		}
	}
	if err == nil && dup != "" {
		err = fmt.Errorf("refused: the field %s is given more than once", dup)
	}
	if err == nil {
		err = d.checkToken(name, sid, a.Fields, vals, r.PostForm.Get("token"))
	}
	if err != nil {
		v.Err = err.Error()
		if user != "" {
			// A logged-in user's refusals (anyone else's are not logged:
			// they would let anyone fill the log).
			d.o.Logger.Info("dashboard: action refused", "action", name, "user", user, "remote", r.RemoteAddr, "err", err)
		}
		d.render(w, http.StatusForbidden, "result", v)
		return
	}
	res := resultData{Title: a.Title, Back: a.back(vals)}
	attrs := []any{"action", name, "user", user, "remote", r.RemoteAddr}
	for _, f := range a.Fields {
		attrs = append(attrs, f, vals.Get(f))
	}
	done, err := a.run(d, vals)
	if err != nil {
		v.Err = a.Title + ": " + errText(err)
		v.Data = res
		d.o.Logger.Info("dashboard: action failed", append(attrs, "err", v.Err)...)
		d.render(w, http.StatusUnprocessableEntity, "result", v)
		return
	}
	d.o.Logger.Info("dashboard: action taken", append(attrs, "result", done)...)
	res.Done, res.OK = done, true
	v.Data = res
	d.render(w, http.StatusOK, "result", v)
}

func errText(err error) string {
	var ce *core.Error
	if errors.As(err, &ce) {
		return fmt.Sprintf("%s (code %d)", ce.Remark, ce.Code)
	}
	return err.Error()
}
