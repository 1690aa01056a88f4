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
			d.o.Logger.Info("dashboard: offsets reset", "group", v.Get("group"), "topic", v.Get("topic"), "time", v.Get("time"))
			return strings.TrimSuffix(sb.String(), ";"), nil
		},
		back: func(v url.Values) string { return "/group?g=" + url.QueryEscape(v.Get("group")) },
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
			d.o.Logger.Info("dashboard: message resent", "group", v.Get("group"), "client", v.Get("client"), "msgId", v.Get("msgid"), "result", res.ConsumeResult)
			s := fmt.Sprintf("The consumer answered %s in %d ms.", res.ConsumeResult, res.SpentTimeMills)
			if res.Remark != "" {
				s += " " + res.Remark
			}
			return s, nil
		},
		back: func(v url.Values) string { return "/group?g=" + url.QueryEscape(v.Get("group")) },
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

// errReadOnly is the answer to every action of a read-only dashboard.
var errReadOnly = errors.New("actions are disabled: this broker checks its clients' credentials (ACLs) and the dashboard has no login; use apogee-admin with credentials")

type confirmData struct {
	Action, Title, What, Token, Back string
	Fields                           []kv
}

func (d *Dashboard) confirm(r *http.Request) (any, error) {
	q := r.URL.Query()
	name := q.Get("action")
	a, ok := actions[name]
	if !ok {
		return nil, fmt.Errorf("unknown action %q", name)
	}
	out := confirmData{Action: name, Title: a.Title, Back: a.back(q)}
	if d.o.ReadOnly {
		return out, errReadOnly
	}
	for _, f := range a.Fields {
		out.Fields = append(out.Fields, kv{f, q.Get(f)})
	}
	what, err := a.describe(d, q)
	if err != nil {
		return out, err
	}
	out.What, out.Token = what, d.newToken(name)
	return out, nil
}

type resultData struct {
	Title, Done, Back string
	OK                bool
}

// do runs a confirmed action: a POST with a valid token from this host.
func (d *Dashboard) do(w http.ResponseWriter, r *http.Request) {
	o := d.b.Core().Options()
	v := view{Broker: o.BrokerName, Cluster: o.ClusterName, Page: "result", Now: time.Now()}
	if err := r.ParseForm(); err != nil {
		v.Err = err.Error()
		d.render(w, http.StatusBadRequest, "result", v)
		return
	}
	name := r.PostForm.Get("action")
	a, ok := actions[name]
	switch {
	case d.o.ReadOnly:
		v.Err = errReadOnly.Error()
	case !ok:
		v.Err = fmt.Sprintf("unknown action %q", name)
	case !sameOrigin(r):
		v.Err = "refused: the request came from another site (Origin " + r.Header.Get("Origin") + ")"
	case !d.validToken(name, r.PostForm.Get("token")):
		v.Err = "refused: the confirmation's token is missing, wrong or expired; confirm the action again"
	}
	if v.Err != "" {
		d.render(w, http.StatusForbidden, "result", v)
		return
	}
	res := resultData{Title: a.Title, Back: a.back(r.PostForm)}
	done, err := a.run(d, r.PostForm)
	if err != nil {
		v.Err = a.Title + ": " + errText(err)
		v.Data = res
		d.render(w, http.StatusUnprocessableEntity, "result", v)
		return
	}
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
