// The topology page: clusters as compound nodes (regions), streams as nodes, replica links as
// arrows coloured by health, drawn by cytoscape.js with the fcose layout (both vendored from
// npm under static/vendor/cytoscape). The graph comes embedded in the page
// (#topology-data, portal/web/topology.py) and again from data-url when links change.
// Live: "replica.lag" events (re-dispatched by live.js as "streamgate:event") recolour an
// arrow in place, batched per animation frame so hundreds of events a second cost one
// repaint; other events re-fetch the graph and patch it, laying out again only when streams
// or links appeared or went.
// Large tenants start on the clusters view (one arrow per cluster pair and health, with a
// count); filters narrow the streams view by cluster, health and path.
(function () {
  "use strict";
  var COLORS = { insync: "#2e8b57", sync: "#0e7490", unknown: "#8a8f99", pending: "#d08a00",
                 fellback: "#7c3aed", paused: "#6b7385", waiting: "#c2410c", stalled: "#dc2626",
                 broken: "#7f1d1d" };
  var LINE = { unknown: "dotted", fellback: "dashed", paused: "dashed", waiting: "dotted", broken: "dashed" };
  var SETTLED = { insync: true, pending: true, stalled: true, unknown: true };
  // The canvas's own colours follow the reader's scheme, as the page's do (portal.css): labels
  // light on dark in dark mode, not light nodes under white label boxes.
  var DARK = !!(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);
  var INK = DARK ? { text: "#e6e9ef", box: "#171a21", node: "#6b9bff", hollow: "#171a21",
                     rim: "#a3abbc", region: "#232a38", border: "#4a5468" }
                 : { text: "#1d2330", box: "#ffffff", node: "#2459c4", hollow: "#ffffff",
                     rim: "#596173", region: "#e9eef8", border: "#9aa3b5" };
  var MIN_HEIGHT = 240;  // px: a small graph's canvas shrinks to it, not a sea of white
  var GROUP_AT = 200;   // more streams than this: open on the clusters view
  var TABLE_ROWS = 300; // the table under the graph lists at most this many links
  // Past this many arrows the graph drops the arrows' text: a colour changes only when a
  // link's health does. Its repaint then costs tens of milliseconds of canvas work however
  // few arrows changed, in one piece the page cannot interrupt, so the recolouring is
  // batched: at least PAINT_GAP_MS apart, and PAINT_SHARE times the last repaint's cost
  // apart, so the graph never holds the main thread more than 1/PAINT_SHARE of the time
  // (a slow machine repaints less often instead of freezing). The table and the link panel
  // take every event on the next animation frame, whatever the size.
  var LABELS_MAX = 300;
  var PAINT_GAP_MS = 1000;
  var PAINT_SHARE = 10;
  var S = { labels: {}, ranks: {}, links: {}, streams: {}, clusters: {}, cy: null, version: 0,
            shown: null, lagQueue: {}, lagFrame: 0, refetch: 0, regroup: 0,
            dirty: {}, paintTimer: 0, paintAt: 0 };
  var root, table, fmt;

  function el(id) { return document.getElementById(id); }

  function index(data) {
    S.labels = {}; S.ranks = {}; S.links = {}; S.streams = {}; S.clusters = {};
    data.healths.forEach(function (h) { S.labels[h[0]] = h[1]; S.ranks[h[0]] = h[2]; });
    data.clusters.forEach(function (c) { S.clusters[c[0]] = { id: c[0], name: c[1] }; });
    data.streams.forEach(function (s) {
      S.streams[s[0]] = { id: s[0], path: s[1], cluster: s[2], own: s[3] };
    });
    data.links.forEach(function (l) {
      S.links[l[0]] = { id: l[0], source: l[1], replica: l[2], health: l[3], text: l[4] };
    });
  }

  function filters() {
    return { group: el("f-group").value, cluster: el("f-cluster").value, health: el("f-health").value,
             q: el("f-q").value.trim().toLowerCase(), lonely: el("f-lonely").checked };
  }

  function healthMatches(css, f) {
    if (!f.health) { return true; }
    if (f.health === "problems") { return css !== "insync" && css !== "sync"; }
    return css === f.health;
  }

  function streamMatches(s, f) {
    return (!f.cluster || String(s.cluster) === f.cluster) && (!f.q || s.path.toLowerCase().indexOf(f.q) >= 0);
  }

  function linkVisible(l, f) {
    var a = S.streams[l.source], b = S.streams[l.replica];
    if (!a || !b || !healthMatches(l.health, f)) { return false; }
    return streamMatches(a, f) || streamMatches(b, f);
  }

  function shortName(s) {
    var c = S.clusters[s.cluster];
    var prefix = c ? "/mapr/" + c.name + "/" : "";
    return prefix && s.path.indexOf(prefix) === 0 ? s.path.slice(prefix.length) : s.path;
  }

  function edgeLabel(l) {
    if (S.big || l.health === "insync" || l.health === "sync") { return ""; }
    return S.labels[l.health] + (l.text ? " " + l.text : "");
  }

  function streamElements(f, visible) {
    var nodes = {}, els = [], clusters = {};
    visible.forEach(function (l) { nodes[l.source] = true; nodes[l.replica] = true; });
    if (f.lonely) {
      Object.keys(S.streams).forEach(function (id) {
        if (streamMatches(S.streams[id], f) && !f.health) { nodes[id] = true; }
      });
    }
    Object.keys(nodes).forEach(function (id) {
      var s = S.streams[id];
      clusters[s.cluster] = true;
      els.push({ group: "nodes", data: { id: "s-" + id, stream: s.id, parent: "c-" + s.cluster,
                 label: shortName(s), own: s.own ? 1 : 0 } });
    });
    Object.keys(clusters).forEach(function (c) {
      els.push({ group: "nodes", data: { id: "c-" + c, cluster: +c, label: S.clusters[c] ? S.clusters[c].name : "cluster " + c } });
    });
    visible.forEach(function (l) {
      els.push({ group: "edges", data: { id: "link-" + l.id, link: l.id, source: "s-" + l.source,
                 target: "s-" + l.replica, health: l.health, label: edgeLabel(l) } });
    });
    return els;
  }

  function clusterElements(f, visible) {
    var els = [], counts = {}, edges = {};
    Object.keys(S.streams).forEach(function (id) {
      var s = S.streams[id];
      if (streamMatches(s, f)) { counts[s.cluster] = (counts[s.cluster] || 0) + 1; }
    });
    visible.forEach(function (l) {
      var a = S.streams[l.source].cluster, b = S.streams[l.replica].cluster;
      var key = a + "-" + b + "-" + l.health;
      if (!edges[key]) { edges[key] = { a: a, b: b, health: l.health, n: 0 }; }
      edges[key].n += 1;
      counts[a] = counts[a] || 0; counts[b] = counts[b] || 0;
    });
    Object.keys(counts).forEach(function (c) {
      var name = S.clusters[c] ? S.clusters[c].name : "cluster " + c;
      els.push({ group: "nodes", data: { id: "c-" + c, cluster: +c, big: 1,
                 label: name + "\n" + counts[c] + " stream" + (counts[c] === 1 ? "" : "s") } });
    });
    Object.keys(edges).forEach(function (k) {
      var e = edges[k];
      els.push({ group: "edges", data: { id: "agg-" + k, agg: 1, source: "c-" + e.a, target: "c-" + e.b,
                 fromCluster: e.a, health: e.health, count: e.n, label: e.n + " " + S.labels[e.health] } });
    });
    return els;
  }

  function style() {
    var rules = [
      { selector: "node", style: { label: "data(label)", "font-size": 10, color: INK.text,
        "text-valign": "bottom", "text-margin-y": 3, width: 14, height: 14, "background-color": INK.node,
        "text-background-color": INK.box, "text-background-opacity": 0.8, "text-wrap": "wrap",
        "min-zoomed-font-size": 7 } },
      { selector: "node[own = 0]", style: { "background-color": INK.hollow, "border-width": 2,
        "border-color": INK.rim, "border-style": "dashed" } },
      { selector: "node[cluster]", style: { "background-color": INK.region, "background-opacity": 0.6,
        "border-width": 1, "border-color": INK.border, shape: "round-rectangle", "text-valign": "top",
        "font-weight": "bold", "font-size": 12, padding: 12 } },
      { selector: "node[region]", style: { width: "data(w)", height: "data(h)", "z-index-compare": "manual",
        "z-index": 0, "text-valign": "top", "text-margin-y": 0, events: "yes" } },
      { selector: "node[stream], edge", style: { "z-index-compare": "manual", "z-index": 1 } },
      { selector: "node[stream]", style: { "z-index": 2 } },
      { selector: "node[big]", style: { width: 90, height: 50, "text-valign": "center", "text-margin-y": 0 } },
      // Two streams replicating both ways: their arrows bow apart far enough that the two
      // labels, each on its own arrow's middle, do not cover each other.
      { selector: "edge", style: { width: 2, "curve-style": "bezier", "control-point-step-size": 64,
        "target-arrow-shape": "triangle",
        "arrow-scale": 0.9, label: "data(label)", "font-size": 9, "text-rotation": "autorotate",
        "text-background-color": INK.box, "text-background-opacity": 0.85, color: INK.text,
        "min-zoomed-font-size": 7 } },
      { selector: "edge[agg]", style: { width: "mapData(count, 1, 200, 2, 10)" } },
      { selector: ":selected", style: { "overlay-color": "#f59e0b", "overlay-opacity": 0.25 } }
    ];
    Object.keys(COLORS).forEach(function (css) {
      rules.push({ selector: 'edge[health = "' + css + '"]', style: { "line-color": COLORS[css],
        "target-arrow-color": COLORS[css], "line-style": LINE[css] || "solid" } });
    });
    if (window.__variant) { rules = rules.concat(window.__variant); }
    return rules;
  }

  function layout() {
    var name = window.cytoscapeFcose ? "fcose" : "cose";
    // A few nodes fitted to the box would be drawn huge: no closer than 1.2x.
    S.cy.one("layoutstop", function () {
      if (S.big) { flatten(); }
      if (S.cy.zoom() > 1.2) { fitHeight(); }
    });
    S.cy.layout({ name: name, animate: false, randomize: true, fit: true, padding: 24,
                  nodeDimensionsIncludeLabels: true, packComponents: true, idealEdgeLength: 80,
                  nodeRepulsion: 6000, quality: S.cy.nodes().length > 400 ? "draft" : "default" }).run();
  }

  // A small graph at its largest zoom (1.2x) sits in a band of the canvas: the canvas shrinks
  // to the graph's height (down to MIN_HEIGHT), and the graph is centred in it, once, before
  // anyone clicks, so nothing moves under the pointer afterwards.
  function fitHeight() {
    var box = S.cy.elements().boundingBox(), wanted = Math.ceil(box.h * 1.2 + 48);
    root.style.minHeight = "0";
    root.style.height = Math.max(MIN_HEIGHT, Math.min(wanted, S.height)) + "px";
    S.cy.resize();
    S.cy.zoom(1.2);
    S.cy.center();
  }

  // With compound nodes cytoscape cannot reuse its cached layer of the graph: at 2,000 arrows
  // every repaint cost ~110 ms of main-thread CPU with them, ~4 ms without (a repaint after
  // 30 colour changes: ~55-85 ms). So on a large graph the clusters are laid out as compounds,
  // then turned into plain "region" nodes of the same place and size beneath the streams:
  // the same picture, repainted cheaply.
  function flatten() {
    S.cy.batch(function () {
      S.cy.nodes("[cluster]").forEach(function (c) {
        var bb = c.boundingBox({ includeLabels: false }), kids = c.children();
        kids.move({ parent: null });
        c.data({ region: 1, w: bb.w, h: bb.h });
        c.position({ x: bb.x1 + bb.w / 2, y: bb.y1 + bb.h / 2 });
      });
    });
  }

  function draw() {
    var f = filters();
    var visible = Object.keys(S.links).map(function (id) { return S.links[id]; })
      .filter(function (l) { return linkVisible(l, f); })
      .sort(function (x, y) { return (S.ranks[y.health] - S.ranks[x.health]) || (x.id - y.id); });
    S.big = f.group === "streams" && visible.length > LABELS_MAX;
    clearTimeout(S.paintTimer);  // the new elements carry every change so far
    S.dirty = {}; S.paintTimer = 0;
    var els = f.group === "clusters" ? clusterElements(f, visible) : streamElements(f, visible);
    S.cy.batch(function () { S.cy.elements().remove(); S.cy.add(els); });
    // Back to the stylesheet's height before laying out anew; nothing to draw, a short canvas
    // under the sentence that says so.
    root.style.minHeight = els.length ? "" : "0";
    root.style.height = els.length ? "" : MIN_HEIGHT + "px";
    S.cy.resize();
    el("topology-empty").hidden = els.length > 0;
    layout();
    S.visible = visible;
    renderTable(visible);
    var streams = S.cy.nodes("[stream]").length;
    el("topology-summary").textContent = (f.group === "clusters" ? S.cy.nodes().length + " cluster(s), " :
      streams + " stream(s) shown, ") + visible.length + " of " + Object.keys(S.links).length + " replica link(s).";
    root.dataset.edges = String(S.cy.edges().length);
    root.dataset.nodes = String(S.cy.nodes().length);
    root.dataset.ready = "1";
  }

  function pill(css) {
    var span = document.createElement("span");
    span.className = "pill health " + css;
    span.textContent = S.labels[css] || css;
    return span;
  }

  function streamCell(id) {
    var s = S.streams[id], td = document.createElement("td"), code = document.createElement("code");
    code.textContent = s ? s.path : "?";
    if (s && s.own) {
      var a = document.createElement("a");
      a.href = root.dataset.streamUrlTemplate.replace("/0/", "/" + s.id + "/");
      a.appendChild(code); td.appendChild(a);
    } else { td.appendChild(code); }
    return td;
  }

  function healthCell(l) {
    var td = document.createElement("td");
    td.className = "health-col";
    td.appendChild(pill(l.health));
    var fig = document.createElement("span");
    fig.className = "figures"; fig.textContent = l.text ? " " + l.text : "";
    td.appendChild(fig);
    var b = document.createElement("button");
    b.type = "button"; b.className = "secondary"; b.textContent = "Lag chart";
    b.setAttribute("aria-label", "Lag chart of " + (S.streams[l.source] || {}).path + " to " + (S.streams[l.replica] || {}).path);
    b.addEventListener("click", function () { showLink(l.id); });
    td.appendChild(document.createTextNode(" ")); td.appendChild(b);
    return td;
  }

  function renderTable(visible) {
    var body = table.tBodies[0];
    body.textContent = "";
    visible.slice(0, TABLE_ROWS).forEach(function (l) {
      var tr = document.createElement("tr");
      tr.dataset.link = l.id; tr.dataset.health = l.health;
      tr.appendChild(streamCell(l.source)); tr.appendChild(streamCell(l.replica)); tr.appendChild(healthCell(l));
      body.appendChild(tr);
    });
    var more = el("topology-table-more");
    more.hidden = visible.length <= TABLE_ROWS;
    more.textContent = "and " + (visible.length - TABLE_ROWS) + " more: narrow the filters.";
  }

  function showLink(id) {
    var l = S.links[id];
    if (!l) { return; }
    S.shown = id;
    var a = S.streams[l.source] || {}, b = S.streams[l.replica] || {};
    el("link-detail").hidden = false;
    el("topology-hint").hidden = true;
    el("link-title").textContent = a.path + " → " + b.path;
    updatePanel(l);
    var link = el("link-stream");
    link.hidden = !a.own;
    link.href = root.dataset.streamUrlTemplate.replace("/0/", "/" + a.id + "/");
    var charts = el("lag-charts");
    charts.dataset.lagUrl = root.dataset.lagUrlTemplate.replace("/0/", "/" + id + "/");
    charts.dataset.link = String(id);
    if (window.streamgateLagChart) { window.streamgateLagChart.show(charts); }
  }

  function updatePanel(l) {
    var p = el("link-health");
    p.className = "pill health " + l.health;
    p.textContent = S.labels[l.health];
    el("link-figures").textContent = l.text || "";
  }

  // --- live -----------------------------------------------------------------------------

  function lagText(css, p) {
    if (!fmt) { return ""; }
    if (css === "stalled") { return fmt.duration(p.timeLagMs); }
    if (p.messagesPending && (css === "pending" || css === "paused" || css === "sync" || css === "fellback")) {
      return fmt.msgs(p.messagesPending) + " / " + fmt.duration(p.timeLagMs);
    }
    return "";
  }

  function setHealth(l, css, text) {
    var changed = l.health !== css;
    l.health = css; l.text = text;
    // The graph is touched only when what it shows changed: each change restyles and redraws.
    if (changed || (!S.big && edgeLabel(l) !== (S.cy.getElementById("link-" + l.id).data("label") || ""))) {
      S.dirty[l.id] = true;
    }
    var row = table.querySelector('tr[data-link="' + l.id + '"]');
    if (row) { row.dataset.health = css; row.replaceChild(healthCell(l), row.lastChild); }
    if (S.shown === l.id) { updatePanel(l); }
    return changed;
  }

  // Recolour the arrows of the links that changed since the last paint, in one batch.
  function paint() {
    var dirty = S.dirty, started = performance.now();
    S.dirty = {}; S.paintTimer = 0;
    S.cy.batch(function () {
      Object.keys(dirty).forEach(function (id) {
        var edge = S.cy.getElementById("link-" + id), l = S.links[id];
        if (l && edge.nonempty()) { edge.data({ health: l.health, label: edgeLabel(l) }); }
      });
    });
    S.painted = (S.painted || 0) + 1;
    root.dataset.painted = String(S.painted);
    // cytoscape draws on its next animation frame: the cost is measured once that is done.
    window.requestAnimationFrame(function () {
      setTimeout(function () {
        var now = performance.now();
        S.paintAt = now + Math.max(PAINT_GAP_MS, PAINT_SHARE * (now - started));
      }, 0);
    });
  }

  function schedulePaint() {
    if (S.paintTimer || !Object.keys(S.dirty).length) { return; }
    if (!S.big) { paint(); return; }
    S.paintTimer = setTimeout(paint, Math.max(0, S.paintAt - performance.now()));
  }

  function flushLag() {
    S.lagFrame = 0;
    var queue = S.lagQueue, regroup = false;
    S.lagQueue = {};
    Object.keys(queue).forEach(function (id) {
      var p = queue[id], l = S.links[id];
      if (!l) { return; }
      var css = l.health;
      if (SETTLED[css]) { css = p.stalled ? "stalled" : (p.messagesPending ? "pending" : "insync"); }
      regroup = setHealth(l, css, lagText(css, p)) || regroup;
    });
    schedulePaint();
    S.version += 1;
    root.dataset.version = String(S.version);
    // The clusters view counts links per health: recount, at most every 2 s.
    if (regroup && filters().group === "clusters" && !S.regroup) {
      S.regroup = setTimeout(function () { S.regroup = 0; draw(); }, 2000);
    }
  }

  function onLag(p) {
    S.lagQueue[p.link] = p;
    if (!S.lagFrame) { S.lagFrame = window.requestAnimationFrame(flushLag); }
  }

  function sameShape(data) {
    if (data.links.length !== Object.keys(S.links).length || data.streams.length !== Object.keys(S.streams).length) { return false; }
    return data.links.every(function (l) { var o = S.links[l[0]]; return o && o.source === l[1] && o.replica === l[2]; });
  }

  function apply(data) {
    if (!sameShape(data)) { index(data); draw(); return; }
    var f = filters(), redraw = false;
    data.links.forEach(function (x) {
      var l = S.links[x[0]];
      var was = linkVisible(l, f);
      setHealth(l, x[3], x[4]);
      if (was !== linkVisible(l, f)) { redraw = true; }
    });
    // A pause, a resume or an approval shows at once, not on the next lag repaint.
    if (redraw || f.group === "clusters") { draw(); } else { clearTimeout(S.paintTimer); paint(); }
    S.version += 1;
    root.dataset.version = String(S.version);
  }

  function refetch() {
    if (S.refetch) { return; }
    S.refetch = setTimeout(function () {
      S.refetch = 0;
      fetch(root.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
        .then(apply)
        .catch(function () { el("topology-summary").textContent = "The topology could not be refreshed; it will retry on the next change."; });
    }, 250);
  }

  function onEvent(e) {
    var m = e.detail;
    if (m.event === "replica.lag") { onLag(m.payload); }
    else if (m.event !== "job.progress") { refetch(); }
  }

  function onTap(evt) {
    var d = evt.target.data();
    if (d.agg || (d.cluster && filters().group === "clusters")) {
      el("f-group").value = "streams";
      el("f-cluster").value = String(d.agg ? d.fromCluster : d.cluster);
      if (d.agg) { el("f-health").value = d.health; }
      draw();
    } else if (d.link) { showLink(d.link); }
    else if (d.stream && S.streams[d.stream] && S.streams[d.stream].own) {
      window.location.href = root.dataset.streamUrlTemplate.replace("/0/", "/" + d.stream + "/");
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    root = el("topology");
    table = el("topology-table");
    if (!root || !window.cytoscape) { return; }
    fmt = window.streamgateFormat;
    if (window.cytoscapeFcose) { window.cytoscape.use(window.cytoscapeFcose); }
    var data = JSON.parse(el("topology-data").textContent);
    index(data);
    if (data.streams.length > GROUP_AT) { el("f-group").value = "clusters"; }
    else if (data.streams.length <= 50) { el("f-lonely").checked = true; }
    S.cy = window.cytoscape({ container: root, style: style(), wheelSensitivity: 0.3,
                              minZoom: 0.05, maxZoom: 4, boxSelectionEnabled: false,
                              // cheaper frames while panning and zooming a large graph
                              hideEdgesOnViewport: data.links.length > LABELS_MAX,
                              textureOnViewport: data.links.length > LABELS_MAX,
                              pixelRatio: data.links.length > LABELS_MAX ? 1 : "auto" });
    S.height = root.clientHeight;
    S.cy.on("tap", "node, edge", onTap);
    el("topology-filters").addEventListener("change", draw);
    el("topology-filters").addEventListener("submit", function (e) { e.preventDefault(); draw(); });
    el("f-q").addEventListener("input", function () { clearTimeout(S.typing); S.typing = setTimeout(draw, 250); });
    document.addEventListener("streamgate:event", onEvent);
    document.addEventListener("streamgate:reconnected", refetch);
    window.streamgateTopology = { state: S, draw: draw, showLink: showLink };
    draw();
  });
})();
