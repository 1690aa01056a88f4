// Apogee dashboard: charts (uPlot) from /api/history and auto-refresh of
// the page's live parts. Served from the broker binary (go:embed); no
// inline script, no other origin (the pages' Content-Security-Policy).
(function () {
  "use strict";
  var palette = ["#2f6fdb", "#d9480f", "#2b8a3e", "#9c36b5", "#e8590c", "#0b7285", "#c2255c", "#5c940d",
    "#364fc7", "#a61e4d", "#087f5b", "#862e9c", "#f08c00", "#1864ab", "#495057"];
  var charts = [];

  function res() {
    var el = document.getElementById("res");
    return el ? el.value : "s";
  }

  function fmt(unit, v) {
    if (v == null) return "–";
    if (unit === "%") return (v * 100).toFixed(1) + " %";
    if (unit === "ms") return v.toFixed(v < 1 ? 3 : 1) + " ms";
    return (Math.abs(v) >= 100 ? v.toFixed(0) : v.toFixed(2)) + (unit ? " " + unit : "");
  }

  // tick is an axis label: compact, the unit in the chart's title.
  function tick(unit, v) {
    if (v == null) return "";
    if (unit === "%") return Math.round(v * 100) + "%";
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    if (a >= 1e3) return (v / 1e3).toFixed(1) + "k";
    return String(+v.toFixed(3));
  }

  function load(c) {
    var q = "/api/history?res=" + res() + "&kind=" + encodeURIComponent(c.kind);
    c.names.forEach(function (n) { q += "&name=" + encodeURIComponent(n); });
    return fetch(q, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error("history: " + r.status);
      return r.json();
    }).then(function (h) { draw(c, h); }).catch(function (e) {
      c.el.dataset.error = String(e);
    });
  }

  function draw(c, h) {
    var series = h.series.filter(function (s) { return !c.only || c.only.indexOf(s.name) >= 0; });
    var xs = h.times.map(function (t) { return t / 1000; });
    var data = [xs], points = 0, last = {}, most = {};
    series.forEach(function (s) {
      data.push(s.values);
      s.values.forEach(function (v) {
        if (v == null) return;
        points++;
        if (!(s.name in most) || v > most[s.name]) most[s.name] = v;
      });
      for (var i = s.values.length - 1; i >= 0; i--) {
        if (s.values[i] != null) { last[s.name] = s.values[i]; break; }
      }
    });
    var key = series.map(function (s) { return s.name; }).join("\u0001") + "|" + h.res;
    var width = Math.max(300, c.el.clientWidth || 520);
    if (!c.plot || c.key !== key) {
      if (c.plot) c.plot.destroy();
      c.el.querySelectorAll(".empty").forEach(function (e) { e.remove(); });
      var opts = {
        title: c.title, width: width, height: 200,
        scales: { x: { time: true } },
        series: [{}].concat(series.map(function (s, i) {
          return { label: s.name, stroke: palette[i % palette.length], width: 1.5, spanGaps: false,
            value: function (u, v) { return fmt(c.unit, v); } };
        })),
        // Whole seconds at the least on the time axis (samples are a
        // second apart).
        axes: [{ incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200] }, { size: 56, values: function (u, vs) { return vs.map(function (v) { return tick(c.unit, v); }); } }]
      };
      if (c.unit === "%") opts.scales.y = { range: [0, 1] };
      c.plot = new uPlot(opts, data, c.el);
      c.key = key;
    } else {
      c.plot.setData(data);
    }
    if (series.length === 0 && !c.el.querySelector(".empty")) {
      var p = document.createElement("p");
      p.className = "muted empty";
      p.textContent = "No samples yet.";
      c.el.appendChild(p);
    }
    c.el.dataset.points = String(points);
    c.el.dataset.samples = String(xs.length);
    c.el.dataset.res = h.res;
    c.el.dataset.series = series.map(function (s) { return s.name; }).join(",");
    c.el.dataset.last = JSON.stringify(last);
    c.el.dataset.max = JSON.stringify(most);
  }

  function initCharts() {
    document.querySelectorAll("div.chart[data-kind]").forEach(function (el) {
      var names = (el.dataset.names || "").split(",").filter(Boolean);
      var only = el.dataset.only ? el.dataset.only.split(",") : null;
      charts.push({ el: el, kind: el.dataset.kind, names: names, only: only,
        title: el.dataset.title || "", unit: el.dataset.unit || "" });
    });
    charts.forEach(load);
    var sel = document.getElementById("res");
    if (sel) sel.addEventListener("change", function () { charts.forEach(load); });
  }

  // Auto-refresh: the page's elements marked data-live (with an id) are
  // replaced by the same elements of a fresh copy of the page; the charts
  // load their series again.
  var timer = null, refreshes = 0;

  function refresh() {
    charts.forEach(load);
    if (!document.querySelector("[data-live][id]")) return;
    fetch(location.href, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (!r.ok) throw new Error("refresh: " + r.status);
      return r.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      document.querySelectorAll("[data-live][id]").forEach(function (el) {
        var fresh = doc.getElementById(el.id);
        if (fresh) el.innerHTML = fresh.innerHTML;
      });
      refreshes++;
      document.body.dataset.refreshes = String(refreshes);
    }).catch(function (e) { document.body.dataset.refreshError = String(e); });
  }

  function schedule() {
    var sel = document.getElementById("refresh");
    if (timer) { clearInterval(timer); timer = null; }
    if (!sel) return;
    var s = parseInt(sel.value, 10);
    if (s > 0) timer = setInterval(refresh, s * 1000);
  }

  function initRefresh() {
    var sel = document.getElementById("refresh");
    if (!sel) return;
    var want = new URLSearchParams(location.search).get("refresh");
    try { if (!want) want = localStorage.getItem("apogee.refresh"); } catch (e) { /* storage off */ }
    if (want != null) {
      if (!Array.prototype.some.call(sel.options, function (o) { return o.value === want; })) {
        var o = document.createElement("option");
        o.value = want;
        o.textContent = want + " s";
        sel.appendChild(o);
      }
      sel.value = want;
    }
    sel.addEventListener("change", function () {
      try { localStorage.setItem("apogee.refresh", sel.value); } catch (e) { /* storage off */ }
      schedule();
    });
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    initCharts();
    initRefresh();
  });
})();
