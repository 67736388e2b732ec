// The stream page's lag-over-time charts: per replica, messages pending and time lag, as
// inline SVG. History from the page's JSON view (the recorder's samples, about an hour);
// live points from the "replica.lag" events static/js/live.js re-dispatches on document.
(function () {
  "use strict";
  var BOX = { W: 480, H: 150, LEFT: 60, RIGHT: 8 }, TOP = 10, BOTTOM = 22;
  var W = BOX.W, H = BOX.H, LEFT = BOX.LEFT, RIGHT = BOX.RIGHT;
  var MIN_SPAN_MS = 60000;
  var SERIES = [
    { key: "messages", title: "Messages pending", index: 1, scale: 1, unit: "" },
    { key: "timelag", title: "Time lag", index: 3, scale: 0.001, unit: " s" }
  ];
  var root, keepMs = 3600000, charts = {};

  function node(tag, attrs, text) { return window.streamgateSvg.node(tag, attrs, text); }

  function clock(ms) { return new Date(ms).toTimeString().slice(0, 8); }

  function short(v) {
    if (v >= 1e6) { return (v / 1e6).toFixed(1) + "M"; }
    if (v >= 1e4) { return (v / 1e3).toFixed(0) + "k"; }
    if (v >= 10 || v === 0) { return String(Math.round(v)); }
    return String(+v.toPrecision(2));
  }

  function drawSeries(svg, points, s) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var last = points.length ? points[points.length - 1][0] : Date.now();
    var first = points.length ? points[0][0] : last;
    var t0 = Math.min(first, last - MIN_SPAN_MS), t1 = last;
    var values = points.map(function (p) { return p[s.index] * s.scale; });
    var top = window.streamgateSvg.nice(Math.max.apply(null, values.concat([0])));
    var x = function (t) { return LEFT + (W - LEFT - RIGHT) * (t - t0) / (t1 - t0); };
    var y = function (v) { return TOP + (H - TOP - BOTTOM) * (1 - v / top); };
    window.streamgateSvg.axes(svg, BOX, y, top, function (v) { return short(v) + s.unit; }, [clock(t0), clock(t1)]);
    var coords = points.map(function (p, i) { return x(p[0]) + "," + y(values[i]); }).join(" ");
    svg.appendChild(node("polyline", { points: coords, "class": "line " + s.key }));
    points.forEach(function (p, i) {
      if (p[4]) { svg.appendChild(node("circle", { cx: x(p[0]), cy: y(values[i]), r: 3, "class": "stalled" })); }
    });
    var lastValue = values.length ? values[values.length - 1] : 0;
    svg.dataset.points = String(points.length);
    svg.dataset.last = String(lastValue);
    svg.dataset.max = String(Math.max.apply(null, values.concat([0])));
    svg.parentNode.querySelector(".latest").textContent = values.length ? short(lastValue) + s.unit : "no sample yet";
  }

  function draw(link) {
    var c = charts[link];
    SERIES.forEach(function (s) { drawSeries(c.svgs[s.key], c.points, s); });
  }

  function build(data) {
    keepMs = (data.keep_seconds || 3600) * 1000;
    charts = {};
    root.textContent = "";
    if (!data.links.length) {
      root.appendChild(Object.assign(document.createElement("p"), { className: "muted", textContent: "No replicas: nothing to chart." }));
      return;
    }
    data.links.forEach(function (l) {
      var box = document.createElement("div");
      box.className = "lag-chart";
      box.dataset.link = l.link;
      box.dataset.replica = l.replica;
      var h = document.createElement("h4");
      h.textContent = "→ " + l.replica;
      box.appendChild(h);
      var svgs = {};
      SERIES.forEach(function (s) {
        var fig = document.createElement("figure");
        fig.className = "series";
        var cap = document.createElement("figcaption");
        cap.innerHTML = "<span></span>: <strong class=\"latest\"></strong>";
        cap.firstChild.textContent = s.title;
        fig.appendChild(cap);
        var svg = node("svg", { viewBox: "0 0 " + W + " " + H, "class": "chart " + s.key, role: "img", "aria-label": s.title + " for " + l.replica });
        fig.appendChild(svg);
        box.appendChild(fig);
        svgs[s.key] = svg;
      });
      root.appendChild(box);
      charts[l.link] = { points: l.points.slice(), svgs: svgs };
      draw(l.link);
    });
  }

  function load() {
    fetch(root.dataset.lagUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(build)
      .catch(function () { root.textContent = "The lag history could not be loaded."; });
  }

  function onEvent(e) {
    var m = e.detail;
    if (m.event === "replica.added" || m.event === "replica.removed") { load(); return; }
    if (m.event !== "replica.lag") { return; }
    var p = m.payload, c = charts[p.link];
    if (!c) { return; }
    var t = p.t || Date.now();
    var last = c.points[c.points.length - 1];
    if (last && t <= last[0]) { return; }  // already have it (history and event overlap)
    c.points.push([t, p.messagesPending, p.bytesPending, p.timeLagMs, p.stalled ? 1 : 0]);
    while (c.points.length && c.points[0][0] < t - keepMs) { c.points.shift(); }
    draw(p.link);
  }

  var listening = false;

  function start(el) {
    root = el;
    load();
    if (listening) { return; }
    listening = true;
    document.addEventListener("streamgate:event", onEvent);
    document.addEventListener("streamgate:reconnected", function () { if (root) { load(); } });
  }

  // The topology page charts the link a person clicks: it points the element's
  // data-lag-url at that link and calls show(element).
  window.streamgateLagChart = { show: start };

  document.addEventListener("DOMContentLoaded", function () {
    var el = document.getElementById("lag-charts");
    if (el && el.dataset.lagUrl) { start(el); }
  });
})();
