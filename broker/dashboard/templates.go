package dashboard

import (
	"fmt"
	"html/template"
	"net/url"
)

// The pages' templates. Every table cell a test or a script may want to
// read carries a data-k attribute naming its value, and every row a
// data-key naming its subject (topic, group, queue).

const layout = `
{{define "top"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<title>{{.Page}} · {{.Broker}} · Apogee</title>
<link rel="stylesheet" href="/static/uPlot.min.css">
<script src="/static/uPlot.iife.min.js" defer></script><script src="/static/dash.js" defer></script>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:.6em 1.2em;display:flex;gap:1.4em;align-items:baseline}
header b{font-size:1.1em} header a{color:#cfd6e4;text-decoration:none} header a.on{color:#fff;border-bottom:2px solid #6ea8fe}
main{padding:1em 1.2em;max-width:1200px}
h1{font-size:1.3em;margin:.2em 0 .6em} h2{font-size:1.08em;margin:1.2em 0 .4em}
table{border-collapse:collapse;background:#fff;margin-bottom:.8em;min-width:30em}
th,td{border:1px solid #dde1e8;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600} td.n{text-align:right;font-variant-numeric:tabular-nums}
.err{background:#fde8e8;border:1px solid #f0a8a8;padding:.6em;margin-bottom:1em}
.ok{background:#e6f6ea;border:1px solid #9fd8ab;padding:.6em;margin-bottom:1em}
form.inline{display:flex;gap:.5em;flex-wrap:wrap;align-items:end;background:#fff;border:1px solid #dde1e8;padding:.6em;margin-bottom:1em}
label{display:flex;flex-direction:column;font-size:.85em;color:#4a5365}
input,select{font:inherit;padding:.2em .4em} button{font:inherit;padding:.25em .9em;cursor:pointer}
pre{background:#fff;border:1px solid #dde1e8;padding:.6em;white-space:pre-wrap;word-break:break-all;max-height:16em;overflow:auto}
.muted{color:#6b7385} .lag{color:#b3261e;font-weight:600}
header .login{margin-left:auto;color:#cfd6e4} header form{display:inline;margin:0} header button{padding:0 .6em}
header .refresh{color:#cfd6e4;font-size:.85em;display:inline-flex;flex-direction:row;gap:.4em;align-items:baseline} header .refresh select{font-size:.9em;padding:0}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(500px,1fr));gap:.8em;margin-bottom:1em}
.chart{background:#fff;border:1px solid #dde1e8;padding:.4em;min-height:230px;overflow:hidden}
.resbar{margin:.4em 0;font-size:.9em;color:#4a5365}
.pill{display:inline-block;padding:0 .5em;border-radius:.8em;background:#eef1f5;font-size:.85em}
.pill.master{background:#d3f9d8} .pill.slave{background:#e7f5ff} .pill.dead{background:#fde8e8}
</style></head><body>
<header><b>Apogee</b><span class="muted">{{.Cluster}} / {{.Broker}}</span>
<a href="/" {{if eq .Page "overview"}}class="on"{{end}}>Cluster</a>
<a href="/topics" {{if or (eq .Page "topics") (eq .Page "topic")}}class="on"{{end}}>Topics</a>
<a href="/groups" {{if or (eq .Page "groups") (eq .Page "group")}}class="on"{{end}}>Groups</a>
<a href="/messages" {{if or (eq .Page "messages") (eq .Page "trace")}}class="on"{{end}}>Messages</a>
<a href="/replication" {{if eq .Page "replication"}}class="on"{{end}}>Broker group</a>
<a href="/metrics">Metrics</a>
<label class="refresh">auto-refresh <select id="refresh"><option value="0">off</option><option value="2">2 s</option><option value="5" selected>5 s</option><option value="15">15 s</option><option value="60">60 s</option></select></label>
{{if .Logins}}<span class="login">{{if .User}}<span id="user">{{.User}}</span>
<form method="post" action="/logout" id="logout"><input type="hidden" name="token" value="{{.LogoutToken}}"><button type="submit" id="logout-button">Log out</button></form>
{{else}}read-only · <a href="/login" id="login-link">Log in</a>{{end}}</span>{{end}}</header><main>
{{if .Err}}<div class="err" id="error">{{.Err}}</div>{{end}}
{{end}}
{{define "bottom"}}<p class="muted" id="rendered" data-live>Rendered {{.Now.Format "2006-01-02 15:04:05"}}.</p></main></body></html>{{end}}
{{define "resbar"}}<div class="resbar">Charts: <select id="res"><option value="s">the last {{.SecWindow}}, per second</option><option value="m">the last {{.MinWindow}}, per minute</option></select></div>{{end}}
`

const pages = `
{{define "overview"}}{{template "top" .}}{{with .Data}}
<h1>Cluster</h1>
{{template "resbar" $}}
<div class="charts">
<div class="chart" id="chart-rates" data-kind="broker" data-names="put,get" data-title="Messages per second: put, get" data-unit="msg/s"></div>
<div class="chart" id="chart-latency" data-kind="broker" data-names="send_p50,send_p99" data-title="Send latency, ms: p50, p99" data-unit="ms"></div>
<div class="chart" id="chart-topics" data-kind="put" data-title="Put rate by topic, msg/s" data-unit="msg/s"></div>
<div class="chart" id="chart-disk" data-kind="broker" data-names="disk" data-title="Disk used (data directory)" data-unit="%"></div>
</div>
<table id="brokers" data-live><tr><th>cluster</th><th>broker</th><th>addresses (id: address)</th></tr>
{{range .Brokers}}<tr data-key="{{.Name}}"><td>{{.Cluster}}</td><td>{{.Name}}{{if .Self}} <span class="muted">(this broker)</span>{{end}}</td><td>{{range .Addrs}}{{.}}<br>{{end}}</td></tr>{{end}}
</table>
<h2>This broker</h2>
<table id="info" data-live>{{range .Info}}<tr data-key="{{.K}}"><th>{{.K}}</th><td data-k="{{.K}}">{{.V}}</td></tr>{{end}}</table>
<h2>Engine</h2>
<table id="engine" data-live>{{range .Engine}}<tr data-key="{{.K}}"><th>{{.K}}</th><td class="n" data-k="{{.K}}">{{.V}}</td></tr>{{end}}</table>
{{end}}{{template "bottom" .}}{{end}}

{{define "topics"}}{{template "top" .}}{{with .Data}}
<h1>Topics</h1>
<p>{{if .ShowSystem}}<a href="/topics">Hide system topics</a>{{else}}<a href="/topics?system=1">Show system topics</a>{{end}}</p>
{{template "resbar" $}}
<div class="charts"><div class="chart" id="chart-topics" data-kind="put" data-title="Put rate by topic, msg/s" data-unit="msg/s"></div></div>
<table id="topics" data-live><tr><th>topic</th><th>read/write queues</th><th>perm</th><th>messages</th><th>put TPS 10 s</th><th>put TPS 1 min</th><th>groups</th><th>backlog</th></tr>
{{range .Topics}}<tr data-key="{{.Name}}"><td><a href="/topic?t={{.Name}}">{{.Name}}</a>{{if .Order}} <span class="muted">ordered</span>{{end}}</td>
<td class="n" data-k="queues">{{.Read}}/{{.Write}}</td><td class="n">{{.Perm}}</td><td class="n" data-k="messages">{{.Messages}}</td>
<td class="n" data-k="tps10s">{{.PutTps10s}}</td><td class="n" data-k="tps">{{.PutTps1m}}</td><td class="n">{{.Groups}}</td><td class="n {{if .Backlog}}lag{{end}}" data-k="backlog">{{.Backlog}}</td></tr>
{{else}}<tr><td colspan="8" class="muted">No topics.</td></tr>{{end}}
</table>
<h2>Create or update a topic</h2>
<form class="inline" method="get" action="/confirm" id="create-topic">
<input type="hidden" name="action" value="create-topic">
<label>topic<input name="topic" required pattern="[%|a-zA-Z0-9_-]+" maxlength="127"></label>
<label>queues<input name="queues" type="number" min="1" max="1024" value="8"></label>
<label>perm<select name="perm"><option value="6">6 read-write</option><option value="4">4 read-only</option><option value="2">2 write-only</option></select></label>
<label>ordered<select name="order"><option value="false">no</option><option value="true">yes</option></select></label>
<button type="submit">Continue…</button></form>
{{end}}{{template "bottom" .}}{{end}}

{{define "topic"}}{{template "top" .}}{{with .Data}}
<h1>Topic {{.Name}}</h1>
<table id="topic-config" data-live><tr><th>read queues</th><td class="n">{{.Config.ReadQueueNums}}</td><th>write queues</th><td class="n">{{.Config.WriteQueueNums}}</td>
<th>perm</th><td class="n">{{.Config.Perm}}</td><th>put TPS (1 min)</th><td class="n" data-k="tps">{{.PutTps}}</td><th>messages</th><td class="n" data-k="messages">{{.Messages}}</td></tr></table>
{{template "resbar" $}}
<div class="charts"><div class="chart" id="chart-topic" data-kind="put" data-names="{{.Name}}" data-title="Put rate of {{.Name}}, msg/s" data-unit="msg/s"></div></div>
<h2>Queues</h2>
<table id="queues" data-live><tr><th>queue</th><th>min offset</th><th>max offset</th><th>last stored</th></tr>
{{range .Queues}}<tr data-key="{{.Queue}}"><td class="n">{{.Queue}}</td><td class="n" data-k="min">{{.Min}}</td><td class="n" data-k="max">{{.Max}}</td><td>{{.LastUpdate}}</td></tr>{{end}}
</table>
<h2>Consumer groups</h2>
<table id="topic-groups" data-live><tr><th>group</th><th>backlog</th></tr>
{{range .Groups}}<tr data-key="{{.Group}}"><td><a href="/group?g={{.Group}}">{{.Group}}</a></td><td class="n {{if .Lag}}lag{{end}}" data-k="lag">{{.Lag}}</td></tr>
{{else}}<tr><td colspan="2" class="muted">No group consumes this topic.</td></tr>{{end}}
</table>
<p><a href="/messages?topic={{.Name}}">Search messages of {{.Name}}</a></p>
{{end}}{{template "bottom" .}}{{end}}

{{define "groups"}}{{template "top" .}}{{with .Data}}
<h1>Consumer groups</h1>
{{template "resbar" $}}
<div class="charts">
<div class="chart" id="chart-lag" data-kind="lag" data-title="Lag by group, messages" data-unit="msg"></div>
<div class="chart" id="chart-get" data-kind="get" data-title="Consume rate by group, msg/s" data-unit="msg/s"></div>
</div>
<table id="groups" data-live><tr><th>group</th><th>members</th><th>type</th><th>model</th><th>topics</th><th>consume TPS (1 min)</th><th>lag</th></tr>
{{range .Groups}}<tr data-key="{{.Name}}"><td><a href="/group?g={{.Name}}">{{.Name}}</a></td><td class="n" data-k="members">{{.Members}}</td>
<td>{{.ConsumeType}}</td><td>{{.Model}}</td><td class="n">{{.Topics}}</td><td class="n" data-k="tps">{{.ConsumeTps}}</td><td class="n {{if .Lag}}lag{{end}}" data-k="lag">{{.Lag}}</td></tr>
{{else}}<tr><td colspan="7" class="muted">No groups.</td></tr>{{end}}
</table>
{{end}}{{template "bottom" .}}{{end}}

{{define "group"}}{{template "top" .}}{{with .Data}}
<h1>Group {{.Name}}</h1>
<p id="group-summary" data-live>{{if .ConsumeType}}{{.ConsumeType}}, {{.Model}}{{else}}<span class="muted">No live members.</span>{{end}}
{{if not .Consistent}}<span class="lag">Members subscribe differently: {{.Inconsistency}}</span>{{end}}
Total lag: <b data-k="lag-total" id="lag-total">{{.Lag}}</b></p>
{{template "resbar" $}}
<div class="charts">
<div class="chart" id="chart-group-lag" data-kind="lag" data-names="{{.Name}}" data-title="Lag of {{.Name}}, messages" data-unit="msg"></div>
<div class="chart" id="chart-group-get" data-kind="get" data-names="{{.Name}}" data-title="Consume rate of {{.Name}}, msg/s" data-unit="msg/s"></div>
</div>
<h2>Members</h2>
<table id="members" data-live><tr><th>client id</th><th>address</th><th>language</th><th>version</th><th>subscriptions</th></tr>
{{range .Members}}<tr data-key="{{.ClientID}}"><td>{{.ClientID}}</td><td>{{.Addr}}</td><td>{{.Language}}</td><td>{{.Version}}</td><td>{{.Subscriptions}}</td></tr>
{{else}}<tr><td colspan="5" class="muted">None.</td></tr>{{end}}
</table>
<p class="muted">Queues are allocated to members by the clients themselves (their rebalance); each member was asked which it holds.</p>
<div id="group-topics" data-live>
{{range .Unanswered}}<p class="lag">No answer from {{.}}</p>{{end}}
{{range .Topics}}{{$topic := .Topic}}
<h2>Topic <a href="/topic?t={{.Topic}}">{{.Topic}}</a> · lag {{.Lag}} · {{.Tps}} msg/s</h2>
<table class="lagtable" data-key="{{.Topic}}"><tr><th>queue</th><th>broker offset</th><th>consumer offset</th><th>lag</th><th>last consumed stored at</th><th>held by</th></tr>
{{range .Queues}}<tr data-key="{{$topic}}/{{.Queue}}"><td class="n">{{.Queue}}</td><td class="n" data-k="broker">{{.BrokerOffset}}</td><td class="n" data-k="consumer">{{.Consumer}}</td><td class="n {{if .Lag}}lag{{end}}" data-k="lag">{{.Lag}}</td><td>{{.LastUpdate}}</td><td data-k="holder">{{.Holder}}</td></tr>{{end}}
</table>{{end}}
</div>
<h2>Reset offsets</h2>
<form class="inline" method="get" action="/confirm" id="reset-offset">
<input type="hidden" name="action" value="reset-offset"><input type="hidden" name="group" value="{{.Name}}">
<label>topic<select name="topic">{{range .Topics}}<option>{{.Topic}}</option>{{end}}</select></label>
<label>to (now, earliest, ms or 2006-01-02T15:04:05)<input name="time" value="now"></label>
<button type="submit">Continue…</button></form>
<h2>Resend a message to a consumer</h2>
<form class="inline" method="get" action="/confirm" id="resend">
<input type="hidden" name="action" value="resend"><input type="hidden" name="group" value="{{.Name}}">
<label>consumer<select name="client">{{range .ClientIDs}}<option>{{.}}</option>{{end}}</select></label>
<label>offset message id<input name="msgid" size="34" value="{{.MsgID}}"></label>
<button type="submit">Continue…</button></form>
{{end}}{{template "bottom" .}}{{end}}

{{define "message"}}
<table class="message" data-key="{{.MsgID}}">
<tr><th>topic</th><td data-k="topic">{{.Topic}}</td><th>queue / offset</th><td class="n">{{.Queue}} / {{.QueueOffset}}</td></tr>
<tr><th>offset message id</th><td data-k="msgid">{{.MsgID}}</td><th>unique key</th><td data-k="uniq">{{.UniqKey}}</td></tr>
<tr><th>tags</th><td data-k="tags">{{.Tags}}</td><th>keys</th><td data-k="keys">{{.Keys}}</td></tr>
<tr><th>born</th><td>{{.Born}} <span class="muted">{{.BornHost}}</span></td><th>stored</th><td>{{.Stored}} <span class="muted">{{.StoreHost}}</span></td></tr>
<tr><th>reconsume times</th><td class="n" data-k="reconsume">{{.Reconsume}}</td><th>body</th><td class="n">{{.BodySize}} bytes</td></tr>
</table>
<details><summary>Properties ({{len .Props}})</summary><table class="props">{{range .Props}}<tr data-key="{{.K}}"><th>{{.K}}</th><td>{{.V}}</td></tr>{{end}}</table></details>
<details><summary>Body</summary><pre>{{.Body}}</pre></details>
{{end}}

{{define "messages"}}{{template "top" .}}{{with .Data}}
<h1>Messages</h1>
<form class="inline" method="get" action="/messages" id="search">
<label>topic<input name="topic" value="{{.Topic}}"></label>
<label>key<input name="key" value="{{.Key}}"></label>
<label>or id (offset message id, or unique key with its topic)<input name="id" size="34" value="{{.ID}}"></label>
<button type="submit">Search</button></form>
{{if .Searched}}<p id="found">{{len .Messages}} found.</p>{{end}}
{{range .Messages}}<section class="found">
<h2>{{.Topic}} · {{.MsgID}}</h2>
{{template "message" .}}
<h3>Retry trace</h3>
{{if .Trace}}<table class="trace"><tr><th>stored</th><th>topic</th><th>reconsume times</th><th>offset message id</th></tr>
<tr data-key="{{.MsgID}}"><td>{{.Stored}}</td><td>{{.Topic}}</td><td class="n">{{.Reconsume}}</td><td>{{.MsgID}}</td></tr>
{{range .Trace}}<tr data-key="{{.MsgID}}"><td>{{.Stored}}</td><td data-k="topic">{{.Topic}}</td><td class="n" data-k="reconsume">{{.Reconsume}}</td><td><a href="/messages?id={{.MsgID}}">{{.MsgID}}</a></td></tr>{{end}}
</table>{{else}}<p class="muted">{{.TraceNote}}</p>{{end}}
{{if .UniqKey}}<p><a class="trace-link" href="/trace?id={{.UniqKey}}">Message trace</a></p>{{end}}
{{if .ConsumerGroups}}<p>Resend to a consumer of: {{$id := .MsgID}}{{range .ConsumerGroups}}<a href="/group?g={{.}}&amp;msgid={{$id}}">{{.}}</a> {{end}}</p>{{end}}
</section>{{end}}
{{end}}{{template "bottom" .}}{{end}}

{{define "replication"}}{{template "top" .}}{{with .Data}}
<h1>Broker group {{.Name}}</h1>
<div id="replication" data-live>
<table id="repl-self"><tr><th>mode</th><td data-k="mode">{{.Mode}}</td><th>this broker's role</th><td data-k="role">{{.Role}}</td>
{{if .SelfID}}<th>broker id</th><td data-k="self-id">{{.SelfID}}</td>{{end}}
<th>log end</th><td class="n" data-k="written">{{.WrittenOffset}}</td><th>confirmed</th><td class="n">{{.ConfirmOffset}}</td></tr></table>
{{with .Ctl}}<h2>Controller</h2>
<table id="controller"><tr><th>leader</th><td data-k="leader">{{.Leader}}</td><th>controllers</th><td>{{range .Controllers}}{{.}} {{end}}</td></tr>
<tr><th>master</th><td data-k="master">{{if .MasterID}}{{.MasterID}} ({{.MasterAddr}}){{else}}none{{end}}</td><th>master epoch</th><td class="n" data-k="master-epoch">{{.MasterEpoch}}</td></tr>
<tr><th>SyncStateSet</th><td data-k="sync-state-set">{{range $i, $id := .SyncStateSet}}{{if $i}}, {{end}}{{$id}}{{end}}</td><th>SyncStateSet epoch</th><td class="n" data-k="sset-epoch">{{.SyncStateSetEpoch}}</td></tr></table>
{{if .StateErr}}<p class="lag">The controller's replica table could not be read: {{.StateErr}}</p>{{end}}
{{end}}{{if .CtlErr}}<p class="lag">{{.CtlErr}}</p>{{end}}
<h2>Members</h2>
<table id="repl-members"><tr><th>broker id</th><th>address</th><th>role</th>{{if eq .Mode "controller"}}<th>alive</th><th>in SyncStateSet</th>{{end}}<th>acknowledged offset</th><th>lag (bytes)</th></tr>
{{range .Members}}<tr data-key="{{.ID}}"><td data-k="id">{{.ID}}{{if .Self}} <span class="muted">(this broker)</span>{{end}}</td><td data-k="addr">{{.Addr}}</td>
<td data-k="role"><span class="pill {{if .Master}}master{{else}}slave{{end}}">{{.Role}}</span></td>
{{if .AliveKnown}}<td data-k="alive">{{if .Alive}}yes{{else}}<span class="pill dead">no</span>{{end}}</td><td data-k="in-sync">{{.InSync}}</td>{{end}}
<td class="n" data-k="acked">{{.Acked}}</td><td class="n {{if and .LagBytes (ne .LagBytes "0")}}lag{{end}}" data-k="lag">{{.LagBytes}}</td></tr>{{end}}
</table>
{{if .Replicas}}<h2>Slaves connected to this master</h2>
<table id="repl-slaves"><tr><th>slave</th><th>acknowledged offset</th><th>lag (bytes)</th><th>in sync</th><th>connected for</th></tr>
{{range .Replicas}}<tr data-key="{{.ID}}"><td>{{.ID}}</td><td class="n" data-k="acked">{{.Acked}}</td><td class="n {{if ne .LagBytes "0"}}lag{{end}}" data-k="lag">{{.LagBytes}}</td><td data-k="in-sync">{{.InSync}}</td><td>{{.ConnectedFor}}</td></tr>{{end}}
</table>{{else if not .Note}}<p class="muted">No slave is connected to this broker.</p>{{end}}
{{with .Ctl}}{{if .Epochs}}<h2>Epochs (this broker's epoch file)</h2>
<table id="epochs"><tr><th>epoch</th><th>start offset</th></tr>{{range .Epochs}}<tr data-key="{{.Epoch}}"><td class="n">{{.Epoch}}</td><td class="n">{{.StartOffset}}</td></tr>{{end}}</table>{{end}}{{end}}
{{if .Note}}<p class="muted" id="repl-note">{{.Note}}</p>{{end}}
</div>
{{end}}{{template "bottom" .}}{{end}}

{{define "trace"}}{{template "top" .}}{{with .Data}}
<h1>Message trace</h1>
{{if .NoTopic}}<p class="muted" id="no-trace-topic">The trace topic {{.TraceTopic}} does not exist on this broker: no client has sent traces here (a 4.x client with tracing on creates it; RocketMQ's traceTopicEnable).</p>{{else}}
<form class="inline" method="get" action="/trace" id="trace-search">
<label>message id (unique key, or offset message id)<input name="id" size="36" value="{{.ID}}"></label>
<button type="submit">Show trace</button></form>
{{if .Searched}}{{if .Events}}
<p id="trace-summary">{{.ID}}{{if .TopicOfMsg}} · topic <a href="/topic?t={{.TopicOfMsg}}">{{.TopicOfMsg}}</a>{{end}}{{if .SentByGroup}} · sent by {{.SentByGroup}}{{end}}
· {{if .Consumers}}consumed by {{range $i, $g := .Consumers}}{{if $i}}, {{end}}<a href="/group?g={{$g}}">{{$g}}</a>{{end}}{{else}}<span class="lag">no consumption traced yet</span>{{end}}</p>
<table id="trace-events"><tr><th>time</th><th>event</th><th>group</th><th>client</th><th>broker</th><th>cost (ms)</th><th>success</th><th>retries</th><th>details</th></tr>
{{range .Events}}<tr data-key="{{.Type}}"><td>{{.Time}}</td><td data-k="event">{{.Event}}</td><td data-k="group">{{.Group}}</td><td>{{.ClientHost}}</td><td>{{.StoreHost}}</td>
<td class="n" data-k="cost">{{.CostMs}}</td><td data-k="success">{{.Success}}</td><td class="n">{{.RetryTimes}}</td>
<td>{{if .Tags}}tags {{.Tags}} {{end}}{{if .Keys}}keys {{.Keys}} {{end}}{{if .MsgType}}{{.MsgType}} {{end}}{{if .BodyLength}}{{.BodyLength}} bytes {{end}}{{if .OffsetMsgID}}<a href="/messages?id={{.OffsetMsgID}}">{{.OffsetMsgID}}</a>{{end}}{{if .TransactionEnd}} {{.TransactionEnd}} {{.TransactionID}}{{end}}</td></tr>{{end}}
</table>
<p class="muted">From {{.TraceMsgs}} message(s) of {{.TraceTopic}}.</p>
{{else}}<p id="trace-none">No trace records of {{.ID}} in {{.TraceTopic}}.</p>{{end}}{{end}}
{{end}}
{{end}}{{template "bottom" .}}{{end}}

{{define "confirm"}}{{template "top" .}}{{with .Data}}
<h1>{{.Title}}?</h1>
{{if .Token}}<div class="ok" id="what">{{.What}}</div>
<form method="post" action="/do" id="confirm">
<input type="hidden" name="action" value="{{.Action}}"><input type="hidden" name="token" value="{{.Token}}">
<table>{{range .Fields}}<tr><th>{{.K}}</th><td>{{.V}}<input type="hidden" name="{{.K}}" value="{{.V}}"></td></tr>{{end}}</table>
<button type="submit" id="confirm-button">Confirm</button> <a href="{{.Back}}">Cancel</a></form>
{{else}}<p><a href="{{.Back}}">Back</a></p>{{end}}
{{end}}{{template "bottom" .}}{{end}}

{{define "login"}}{{template "top" .}}{{with .Data}}
<h1>Log in</h1>
{{if .Enabled}}{{if .User}}<p>Logged in as {{.User}}.</p>{{end}}
<form method="post" action="/login" id="login" class="inline">
<input type="hidden" name="token" value="{{.Token}}">
<label>user (access key)<input name="user" autocomplete="username" required></label>
<label>password (secret key)<input name="password" type="password" autocomplete="current-password" required></label>
<button type="submit" id="login-button">Log in</button></form>
<p class="muted">A user of the broker's ACL: the dashboard allows the actions its policies allow, as the remoting requests that make the same changes.</p>{{end}}
{{end}}{{template "bottom" .}}{{end}}

{{define "result"}}{{template "top" .}}{{with .Data}}
<h1>{{.Title}}</h1>
{{if .OK}}<div class="ok" id="done">{{.Done}}</div>{{end}}
<p><a href="{{.Back}}" id="back">Back</a></p>
{{end}}{{template "bottom" .}}{{end}}
`

func parseTemplates() (*template.Template, error) {
	t := template.New("dashboard").Funcs(template.FuncMap{"q": url.QueryEscape})
	for _, s := range []string{layout, pages} {
		if _, err := t.Parse(s); err != nil {
			return nil, fmt.Errorf("dashboard: templates: %w", err)
		}
	}
	return t, nil
}
