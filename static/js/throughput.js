// Throughput over the last hour (operations/throughput.py): for each element with
// data-throughput-url, per chart of the JSON (a stream, or each cluster), messages per second
// and bytes per second, "in" (produced) beside "replicated", as inline SVG. Re-fetched every
// 30 s, the recorder's sampling period.
(function () {
  "use strict";
  var BOX = { W: 480, H: 140, LEFT: 58, RIGHT: 8 }, TOP = 10, BOTTOM = 22;
  var W = BOX.W, H = BOX.H, LEFT = BOX.LEFT, RIGHT = BOX.RIGHT;
  var PANELS = [
    { key: "messages", title: "Messages per second", cols: [1, 3], unit: "/s" },
    { key: "bytes", title: "Bytes per second", cols: [2, 4], unit: "B/s" }
  ];
  var NAMES = ["in", "replicated"];

  function node(tag, attrs, text) { return window.streamgateSvg.node(tag, attrs, text); }

  function short(v) {
    if (v >= 1048576) { return (v / 1048576).toFixed(1) + "M"; }
    if (v >= 1024) { return (v / 1024).toFixed(1) + "k"; }
    return String(+v.toPrecision(3));
  }

  function panel(points, p, title) {
    var fig = document.createElement("figure");
    var svg = node("svg", { viewBox: "0 0 " + W + " " + H, "class": "chart throughput " + p.key,
                            role: "img", "aria-label": p.title + " of " + title + ", in and replicated" });
    var now = Date.now(), t0 = now - 3600000;
    var values = [];
    points.forEach(function (row) { values.push(row[p.cols[0]], row[p.cols[1]]); });
    var top = window.streamgateSvg.nice(Math.max.apply(null, values.concat([0])));
    var x = function (t) { return LEFT + (W - LEFT - RIGHT) * Math.max(0, t - t0) / (now - t0); };
    var y = function (v) { return TOP + (H - TOP - BOTTOM) * (1 - v / top); };
    window.streamgateSvg.axes(svg, BOX, y, top, function (v) { return short(v) + p.unit; }, ["1 h ago", "now"]);
    p.cols.forEach(function (col, i) {
      var coords = points.map(function (row) { return x(row[0]) + "," + y(row[col]); }).join(" ");
      svg.appendChild(node("polyline", { points: coords, "class": "line " + NAMES[i] }));
    });
    var last = points.length ? points[points.length - 1] : null;
    svg.dataset.points = String(points.length);
    svg.dataset.lastIn = last ? String(last[p.cols[0]]) : "";
    svg.dataset.lastReplicated = last ? String(last[p.cols[1]]) : "";
    var cap = document.createElement("figcaption");
    cap.textContent = p.title + ": " + (last ? short(last[p.cols[0]]) + p.unit + " in, " +
      short(last[p.cols[1]]) + p.unit + " replicated" : "no sample yet (one every 30 s)");
    fig.appendChild(cap);
    fig.appendChild(svg);
    return fig;
  }

  function build(root, data) {
    root.textContent = "";
    if (!data.charts.length) {
      root.appendChild(Object.assign(document.createElement("p"), { className: "muted", textContent: "Nothing to chart yet." }));
    }
    data.charts.forEach(function (c) {
      var box = document.createElement("div");
      box.className = "lag-chart throughput-chart";
      box.dataset.title = c.title;
      var h = document.createElement("h4");
      h.textContent = c.title;
      box.appendChild(h);
      PANELS.forEach(function (p) { box.appendChild(panel(c.points, p, c.title)); });
      root.appendChild(box);
    });
    var legend = document.createElement("p");
    legend.className = "legend-line muted";
    legend.innerHTML = '<span class="key in"></span> in (produced) <span class="key replicated"></span> replicated';
    root.appendChild(legend);
    root.dataset.ready = "1";
  }

  function load(root) {
    fetch(root.dataset.throughputUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) { build(root, data); })
      .catch(function () { root.textContent = "The throughput could not be loaded."; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-throughput-url]").forEach(function (root) {
      load(root);
      setInterval(function () { load(root); }, 30000);
    });
  });
})();
