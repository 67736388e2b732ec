// Live updates: one websocket per page to /ws/replication/.
// - Most events only say "something in one of your tenants changed": the page re-fetches its
//   live fragments (elements with data-live-url) through the ordinary, tenant-restricted views
//   and swaps them in with htmx.
// - "replica.lag" (every few seconds per link) and "job.progress" carry figures: they update
//   the cells and bars on the page in place, so a busy engine costs no request per event;
//   fragments marked data-live-lag (gateway throughput, health) re-fetch at most every 10 s.
// Every event is also re-dispatched on document as "streamgate:event" (the lag chart listens).
// It also holds the formatting and chart helpers the other scripts share.
// After a dropped socket it reconnects with backoff and re-fetches, so missed events heal.
(function () {
  "use strict";
  var delay = 500;
  var MAX_DELAY = 10000;
  var LAG_REFRESH_MS = 10000;
  var pending = null;
  var lagPending = null;
  // Healths the figures decide (css class -> label); waiting, broken, paused, synchronous and
  // fell-back come from the link itself: a lag event leaves those pills alone.
  var SETTLED = { insync: "In sync", pending: "Pending", stalled: "Stalled", unknown: "Not sampled yet" };
  var UNITS = ["bytes", "KB", "MB", "GB", "TB"];

  // The same readings as portal/web/templatetags/human.py: sizes, durations, counts.
  function size(n) {
    var unit = 0;
    while (Math.abs(n) >= 1024 && unit < UNITS.length - 1) { n /= 1024; unit += 1; }
    return unit === 0 ? n + (n === 1 ? " byte" : " bytes") : n.toFixed(1) + " " + UNITS[unit];
  }

  function duration(ms) {
    if (ms < 1000) { return Math.floor(ms) + " ms"; }
    var s = ms / 1000;
    if (s < 60) { return s < 10 ? s.toFixed(1) + " s" : Math.floor(s) + " s"; }
    if (s < 3600) { return Math.floor(s / 60) + " min"; }
    if (s < 86400) { return (s / 3600).toFixed(1).replace(".0", "") + " h"; }
    return Math.floor(s / 86400) + " d";
  }

  function msgs(n) { return n.toLocaleString("en-US") + (n === 1 ? " msg" : " msgs"); }
  window.streamgateFormat = { size: size, duration: duration, msgs: msgs };

  // What the inline-SVG charts share (lagchart.js: lag per replica; throughput.js: messages
  // and bytes per second): element creation, a round top for the y axis, and the axes. Here
  // because every signed-in page loads this file first.
  var NS = "http://www.w3.org/2000/svg";

  function svgNode(tag, attrs, text) {
    var el = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { el.setAttribute(k, attrs[k]); });
    if (text !== undefined) { el.textContent = text; }
    return el;
  }

  // The smallest 1, 2, 5 or 10 times a power of ten at or above max: the axis' top.
  function nice(max) {
    if (max <= 0) { return 1; }
    var step = Math.pow(10, Math.floor(Math.log10(max)));
    return [1, 2, 5, 10].find(function (m) { return m * step >= max; }) * step;
  }

  // Grid lines at 0, half and top with their labels at the left (box: {W, H, LEFT, RIGHT}),
  // then the time axis' two end labels.
  function axes(svg, box, y, top, label, ends) {
    [0, top / 2, top].forEach(function (v) {
      svg.appendChild(svgNode("line", { x1: box.LEFT, x2: box.W - box.RIGHT, y1: y(v), y2: y(v), "class": "grid" }));
      svg.appendChild(svgNode("text", { x: box.LEFT - 6, y: y(v) + 4, "text-anchor": "end" }, label(v)));
    });
    svg.appendChild(svgNode("text", { x: box.LEFT, y: box.H - 6 }, ends[0]));
    svg.appendChild(svgNode("text", { x: box.W - box.RIGHT, y: box.H - 6, "text-anchor": "end" }, ends[1]));
  }

  window.streamgateSvg = { node: svgNode, nice: nice, axes: axes };

  function setStatus(state) {
    var dot = document.getElementById("live-status");
    if (dot) { dot.dataset.state = state; }
    document.body.dataset.live = state;
  }

  function swap(el) {
    if (el.id) { htmx.ajax("GET", el.dataset.liveUrl, { target: "#" + el.id, swap: "outerHTML" }); }
  }

  function refresh() {
    // Coalesce bursts (approve = upstream added + topics propagated) into one fetch.
    if (pending) { return; }
    pending = setTimeout(function () {
      pending = null;
      document.querySelectorAll("[data-live-url]").forEach(swap);
    }, 50);
  }

  function refreshLagFragments() {
    if (lagPending || !document.querySelector("[data-live-url][data-live-lag]")) { return; }
    lagPending = setTimeout(function () {
      lagPending = null;
      document.querySelectorAll("[data-live-url][data-live-lag]").forEach(swap);
    }, LAG_REFRESH_MS);
  }

  function setField(row, name, text) {
    var cell = row.querySelector('[data-field="' + name + '"]');
    if (cell) { cell.textContent = text; }
  }

  function applyLag(p) {
    document.querySelectorAll('[data-lag-link="' + p.link + '"]').forEach(function (row) {
      setField(row, "messages_pending", String(p.messagesPending));
      setField(row, "bytes_pending", size(p.bytesPending));
      setField(row, "time_lag_ms", duration(p.timeLagMs));
      var pill = row.querySelector(".health");
      var css = pill && pill.className.replace("pill health ", "");
      if (pill && SETTLED[css] !== undefined) {
        css = p.stalled ? "stalled" : (p.messagesPending ? "pending" : "insync");
        pill.textContent = SETTLED[css];
        pill.className = "pill health " + css;
      }
      var text = "";
      if (css === "stalled") { text = duration(p.timeLagMs); }
      else if (p.messagesPending && css !== "insync" && css !== "waiting" && css !== "broken") {
        text = msgs(p.messagesPending) + " / " + duration(p.timeLagMs);
      }
      setField(row, "lag_text", text);
    });
    refreshLagFragments();
  }

  function applyJob(p) {
    var changed = false;
    document.querySelectorAll('[data-job="' + p.job + '"]').forEach(function (el) {
      var bar = el.querySelector("progress");
      if (bar && p.percent !== undefined) { bar.value = p.percent; }
      setField(el, "percent", p.percent + "%");
      var state = el.querySelector('[data-field="state"]');
      if (state && p.state && state.textContent !== p.state) { changed = true; }
    });
    if (changed) { refresh(); }  // started/finished times, result, the wizard's next step
  }

  function onEvent(message) {
    document.dispatchEvent(new CustomEvent("streamgate:event", { detail: message }));
    if (message.event === "replica.lag") { applyLag(message.payload); }
    else if (message.event === "job.progress") { applyJob(message.payload); }
    else { refresh(); }
  }

  function connect(isReconnect) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/replication/");
    window.streamgateLive = { socket: socket };  // for the browser tests and the console
    socket.onopen = function () {
      delay = 500;
      setStatus("open");
      if (isReconnect) {
        refresh();
        document.dispatchEvent(new CustomEvent("streamgate:reconnected"));
      }
    };
    socket.onmessage = function (e) {
      var message;
      try { message = JSON.parse(e.data); } catch (err) { refresh(); return; }
      onEvent(message);
    };
    socket.onclose = function () {
      setStatus("closed");
      setTimeout(function () { connect(true); }, delay);
      delay = Math.min(delay * 2, MAX_DELAY);
    };
  }

  // The tenant switcher submits on change (a listener here: the Content-Security-Policy runs
  // no inline handler).
  document.addEventListener("change", function (e) {
    if (e.target.matches && e.target.matches("[data-submit-on-change]")) { e.target.form.submit(); }
  });

  document.addEventListener("DOMContentLoaded", function () { connect(false); });
})();
