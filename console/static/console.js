// ebbtable console: draws the GC and TTL plots with uPlot, tails the
// change stream and runs the SQL box on Ctrl+Enter. Everything else is
// server-rendered HTML.
(function () {
  "use strict";

  var palette = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563"];

  function fmtBytes(v) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? v.toFixed(0) : v.toFixed(1)) + " " + u[i];
  }
  function fmtSeconds(v) {
    var a = Math.abs(v);
    if (a >= 86400) return (v / 86400).toFixed(1) + "d";
    if (a >= 3600) return (v / 3600).toFixed(1) + "h";
    if (a >= 60) return (v / 60).toFixed(1) + "m";
    if (a >= 1 || a === 0) return v.toFixed(a >= 10 || a === 0 ? 0 : 1) + "s";
    return (v * 1000).toFixed(0) + "ms";
  }
  // fmtSecondsStep writes an axis tick to the resolution of the tick step,
  // so ticks 10 days apart read "10d" and ticks 30 s apart near 10 days
  // read "10d 30s".
  function fmtSecondsStep(v, step) {
    if (!step || step >= 86400 || step < 1 || Math.abs(v) < 60) return fmtSeconds(v);
    var neg = v < 0, parts = [], units = [[86400, "d"], [3600, "h"], [60, "m"], [1, "s"]];
    v = Math.round(Math.abs(v));
    for (var i = 0; i < units.length; i++) {
      var n = Math.floor(v / units[i][0]);
      v -= n * units[i][0];
      if (n > 0) parts.push(n + units[i][1]);
      if (units[i][0] <= step) break;
    }
    return (neg ? "-" : "") + (parts.join(" ") || "0s");
  }
  function fmtCount(v) {
    var a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(0) + "k";
    return String(Math.round(v * 100) / 100);
  }
  function formatter(unit) {
    if (unit === "bytes") return fmtBytes;
    if (unit === "seconds") return fmtSeconds;
    return fmtCount;
  }

  // utc writes a Unix time in seconds as UTC: the time of day, with the
  // date when the span covers days.
  function utc(v, span) {
    var iso = new Date(v * 1000).toISOString();
    if (span === 0) return iso.slice(0, 19).replace("T", " ");
    return span > 2 * 86400 ? iso.slice(5, 16).replace("T", " ") : iso.slice(11, 19);
  }

  function uplotData(p) {
    var data = [p.x];
    p.lines.forEach(function (l) { data.push(l.values); });
    return data;
  }

  function makePlot(container, p) {
    var box = document.createElement("div");
    box.className = "plot";
    box.id = "plot-" + p.id;
    var h = document.createElement("h3");
    h.textContent = p.title;
    var help = document.createElement("p");
    help.className = "help";
    help.textContent = p.help;
    box.appendChild(h);
    box.appendChild(help);
    container.appendChild(box);
    var fmt = formatter(p.unit);
    // Times are UTC, as everywhere in the console.
    var series = [{ value: function (u, v) { return v == null ? "—" : utc(v, 0) + "Z"; } }];
    p.lines.forEach(function (l, i) {
      series.push({ label: l.label, stroke: palette[i % palette.length], width: 2, spanGaps: false,
        value: function (u, v) { return v == null ? "—" : fmt(v); } });
    });
    if (p.lines.length === 0) {
      var none = document.createElement("p");
      none.className = "nodata";
      none.textContent = "No data yet: the series appears once the collector or the job reports for this table.";
      box.appendChild(none);
    }
    var width = Math.max(300, box.clientWidth - 16);
    var opts = {
      width: width, height: 200, series: series,
      scales: { x: { time: true } },
      axes: [{ space: 60, values: function (u, vals) {
        var span = vals.length > 1 ? vals[vals.length - 1] - vals[0] : 0;
        return vals.map(function (v) { return utc(v, span); });
      } }, { size: p.unit === "seconds" ? 90 : 70, values: function (u, vals) {
        var step = vals.length > 1 ? Math.abs(vals[1] - vals[0]) : 0;
        return vals.map(function (v) { return p.unit === "seconds" ? fmtSecondsStep(v, step) : fmt(v); });
      } }],
      legend: { live: true }
    };
    var plot = new uPlot(opts, uplotData(p), box);
    box.dataset.points = String(p.x.length);
    box.dataset.lines = String(p.lines.length);
    return plot;
  }

  function initPlots() {
    var el = document.getElementById("plot-data");
    var container = document.getElementById("plots");
    if (!el || !container) return;
    var plots = JSON.parse(el.textContent);
    var drawn = {};
    plots.forEach(function (p) { drawn[p.id] = { plot: makePlot(container, p), lines: p.lines.length }; });
    container.dataset.ready = "1";
    var url = location.pathname.replace(/\/gc$/, "/plots.json");
    setInterval(function () {
      fetch(url, { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (ps) {
        ps.forEach(function (p) {
          var d = drawn[p.id];
          if (!d) return;
          if (d.lines !== p.lines.length) { location.reload(); return; }
          d.plot.setData(uplotData(p));
          document.getElementById("plot-" + p.id).dataset.points = String(p.x.length);
        });
      }).catch(function () { /* the next refresh tries again */ });
    }, 5000);
  }

  function initTail() {
    var table = document.getElementById("tail");
    if (!table) return;
    var body = table.querySelector("tbody");
    var status = document.getElementById("tail-status");
    var hide = document.getElementById("hide-system");
    var base = location.pathname.replace(/\/changes$/, "/changes.json");
    var cursor = "";
    var seen = 0;
    function cell(tr, text, cls) {
      var td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    function modText(m) {
      var s = m.kind;
      if (m.family) s += " " + m.family + ":" + (m.qualifier || "");
      if (m.timestamp_micros != null) s += " @" + micros(m.timestamp_micros);
      if (m.value) s += " = " + (m.value.length > 60 ? m.value.slice(0, 60) + "…" : m.value);
      return s;
    }
    function micros(us) {
      var d = new Date(us / 1000);
      return isNaN(d.getTime()) ? String(us) : d.toISOString().replace("T", " ");
    }
    function add(rec) {
      var tr = document.createElement("tr");
      if (rec.is_system_transaction) tr.className = "system";
      cell(tr, rec.commit_timestamp.replace("T", " "), "when");
      cell(tr, rec.row_key, "mono");
      cell(tr, rec.type);
      cell(tr, [rec.reason, rec.transaction_tag].filter(Boolean).join(" · "));
      cell(tr, (rec.mods || []).map(modText).join("; "), "mono");
      body.insertBefore(tr, body.firstChild);
      while (body.children.length > 500) body.removeChild(body.lastChild);
      seen++;
    }
    function poll() {
      fetch(base + cursor, { cache: "no-store" }).then(function (r) { return r.json(); }).then(function (rep) {
        if (rep.error) { status.textContent = rep.error; setTimeout(poll, 5000); return; }
        rep.records.forEach(add);
        cursor = rep.after ? "?after=" + encodeURIComponent(rep.after) : "?from=" + rep.from;
        if (rep.span) cursor += "&span=" + rep.span;
        status.textContent = "live · " + seen + " records · read through " + rep.closed;
        table.dataset.polled = "1";
        setTimeout(poll, rep.more ? 0 : 1000);
      }).catch(function () { status.textContent = "disconnected; retrying…"; setTimeout(poll, 3000); });
    }
    hide.addEventListener("change", function () { table.classList.toggle("nosystem", hide.checked); });
    poll();
  }

  // initSQL: Ctrl+Enter (or Cmd+Enter) in the query box runs the query.
  function initSQL() {
    var box = document.getElementById("sql-query");
    if (!box) return;
    box.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        box.form.requestSubmit();
      }
    });
    // "+ parameter" adds an empty row (a copy of the last one).
    var add = document.getElementById("sql-addparam");
    if (add) {
      add.addEventListener("click", function () {
        var rows = document.querySelectorAll("#sql-params .sqlparam");
        var last = rows[rows.length - 1];
        var row = last.cloneNode(true);
        row.querySelectorAll("input").forEach(function (i) { i.value = ""; });
        row.querySelector("select").value = "STRING";
        last.parentNode.insertBefore(row, add);
        row.querySelector("input").focus();
      });
    }
    box.dataset.ready = "1";
  }

  initPlots();
  initTail();
  initSQL();
})();
