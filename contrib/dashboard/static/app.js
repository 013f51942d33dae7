// outboxkit dashboard: draws the overview's charts and refreshes the
// overview. Everything from the server goes into the page as text
// (textContent), never as markup.
"use strict";
(function () {
  var base = document.body.getAttribute("data-base") || "";
  var status = document.getElementById("refresh-status");
  if (!status) return; // only the overview refreshes itself
  var every = Math.max(1, parseFloat(status.getAttribute("data-refresh")) || 10) * 1000;
  var colours = ["#0a58ca", "#b00020", "#146c2e", "#8a4b00", "#6f42c1", "#0b7285", "#5c636a"];
  var plots = {};

  function num(n) { return Number(n).toLocaleString("en-US"); }
  function ago(s) {
    if (s <= 0) return "0 s";
    if (s < 1) return Math.round(s * 1000) + " ms";
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    if (s < 172800) return (s / 3600).toFixed(1) + " h";
    return (s / 86400).toFixed(1) + " days";
  }
  function ms(v) {
    if (v === null || v === undefined) return "–";
    if (v >= 10000) return ago(v / 1000);
    return v + " ms";
  }
  function cell(tag, text, cls) {
    var c = document.createElement(tag);
    c.textContent = text;
    if (cls) c.className = cls;
    return c;
  }
  function set(section, field, text) {
    var el = section.querySelector('[data-f="' + field + '"]');
    if (!el) return;
    var a = el.querySelector("a");
    (a || el).textContent = text;
  }

  function draw(section, t) {
    var width = Math.min(560, Math.max(280, section.clientWidth - 40));
    var x = t.chart.t;
    var dests = Object.keys(t.chart.rate).sort();
    var rateData = [x];
    var rateSeries = [{}];
    dests.forEach(function (d, i) {
      rateData.push(t.chart.rate[d]);
      rateSeries.push({ label: d, stroke: colours[i % colours.length], width: 2, value: function (u, v) { return v == null ? "–" : v.toFixed(2) + "/s"; } });
    });
    if (dests.length === 0) {
      rateData.push(x.map(function () { return 0; }));
      rateSeries.push({ label: "published", stroke: colours[0], width: 2 });
    }
    var latData = [x, t.chart.p50, t.chart.p95];
    var latSeries = [{},
      { label: "p50", stroke: colours[0], width: 2, spanGaps: false, value: function (u, v) { return ms(v); } },
      { label: "p95", stroke: colours[1], width: 2, spanGaps: false, value: function (u, v) { return ms(v); } }];
    var key = String(t.index);
    var old = plots[key];
    if (old && old.dests === dests.join("\n")) {
      old.rate.setData(rateData);
      old.lat.setData(latData);
      return;
    }
    if (old) { old.rate.destroy(); old.lat.destroy(); }
    var rateEl = section.querySelector('[data-chart="rate"]');
    var latEl = section.querySelector('[data-chart="latency"]');
    var common = { width: width, height: 200, cursor: { drag: { x: false, y: false } }, legend: { live: true } };
    var rate = new uPlot(Object.assign({ series: rateSeries, axes: [{}, { label: "events/s", size: 60 }], scales: { y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } } }, common), rateData, rateEl);
    var lat = new uPlot(Object.assign({ series: latSeries, axes: [{}, { label: "ms", size: 60 }], scales: { y: { distr: 3 } } }, common), latData, latEl);
    plots[key] = { rate: rate, lat: lat, dests: dests.join("\n") };
  }

  function render(ov) {
    ov.targets.forEach(function (t) {
      var section = document.querySelector('section.target[data-target="' + t.index + '"]');
      if (!section) return;
      set(section, "pending", num(t.pending));
      set(section, "leased", num(t.leased));
      set(section, "oldest", t.pending ? ago(t.oldest_pending_age_seconds) : "–");
      set(section, "dead", num(t.dead));
      set(section, "published", num(t.published_last_hour));
      if (t.layout) {
        set(section, "layout", "Layout: " + t.layout.summary);
        var warn = section.querySelector('[data-f="default-rows"]');
        if (warn) {
          warn.textContent = t.layout.warning || "";
          warn.hidden = !t.layout.warning;
        }
      }
      var tbody = section.querySelector('[data-f="destinations"]');
      if (tbody && t.destinations) {
        var rows = document.createDocumentFragment();
        t.destinations.forEach(function (d) {
          var tr = document.createElement("tr");
          var th = cell("th", d.destination);
          th.setAttribute("scope", "row");
          tr.appendChild(th);
          tr.appendChild(cell("td", num(d.pending), "n"));
          tr.appendChild(cell("td", num(d.leased), "n"));
          tr.appendChild(cell("td", d.pending ? ago(d.oldest_pending_age_seconds) : "–", "n"));
          tr.appendChild(cell("td", num(d.dead), "n"));
          tr.appendChild(cell("td", num(d.published_last_hour), "n"));
          tr.appendChild(cell("td", ms(d.latency_p50_ms), "n"));
          tr.appendChild(cell("td", ms(d.latency_p95_ms), "n"));
          tr.appendChild(cell("td", ms(d.latency_p99_ms), "n"));
          rows.appendChild(tr);
        });
        if (t.destinations.length) tbody.replaceChildren(rows);
      }
      if (t.chart && t.chart.t && window.uPlot) draw(section, t);
    });
  }

  function refresh() {
    fetch(base + "/api/overview", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (!r.ok) throw new Error("the dashboard answered " + r.status);
        return r.json();
      })
      .then(function (ov) {
        render(ov);
        status.textContent = "Updated " + new Date().toLocaleTimeString() + "; refreshes every " + every / 1000 + " s.";
        status.setAttribute("data-updated", String(Date.now()));
      })
      .catch(function (e) { status.textContent = "Refresh failed (" + e.message + "); trying again in " + every / 1000 + " s."; })
      .finally(function () { setTimeout(refresh, every); });
  }
  refresh();
})();
