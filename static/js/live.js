// Live updates: one websocket per page to /ws/replication/. An event only says "something in
// one of your tenants changed"; the page then re-fetches its live fragments (elements with
// data-live-url) through the ordinary, tenant-restricted views and swaps them in with htmx.
// After a dropped socket it reconnects with backoff and re-fetches, so missed events heal.
(function () {
  "use strict";
  var delay = 500;
  var MAX_DELAY = 10000;
  var pending = null;

  function setStatus(state) {
    var dot = document.getElementById("live-status");
    if (dot) { dot.dataset.state = state; }
    document.body.dataset.live = state;
  }

  function refresh() {
    // Coalesce bursts (approve = upstream added + topics propagated) into one fetch.
    if (pending) { return; }
    pending = setTimeout(function () {
      pending = null;
      document.querySelectorAll("[data-live-url]").forEach(function (el) {
        if (!el.id) { return; }
        htmx.ajax("GET", el.dataset.liveUrl, { target: "#" + el.id, swap: "outerHTML" });
      });
    }, 50);
  }

  function connect(isReconnect) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + location.host + "/ws/replication/");
    window.streamgateLive = { socket: socket };  // for the browser tests and the console
    socket.onopen = function () {
      delay = 500;
      setStatus("open");
      if (isReconnect) { refresh(); }
    };
    socket.onmessage = function () { refresh(); };
    socket.onclose = function () {
      setStatus("closed");
      setTimeout(function () { connect(true); }, delay);
      delay = Math.min(delay * 2, MAX_DELAY);
    };
  }

  document.addEventListener("DOMContentLoaded", function () { connect(false); });
})();
