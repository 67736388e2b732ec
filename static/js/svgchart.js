// What the inline-SVG charts share (lagchart.js: lag per replica; throughput.js: messages and
// bytes per second): element creation, a round top for the y axis, and the axis itself.
// Loaded (deferred) before them; they read window.streamgateSvg when they draw.
(function () {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";

  function node(tag, attrs, text) {
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
      svg.appendChild(node("line", { x1: box.LEFT, x2: box.W - box.RIGHT, y1: y(v), y2: y(v), "class": "grid" }));
      svg.appendChild(node("text", { x: box.LEFT - 6, y: y(v) + 4, "text-anchor": "end" }, label(v)));
    });
    svg.appendChild(node("text", { x: box.LEFT, y: box.H - 6 }, ends[0]));
    svg.appendChild(node("text", { x: box.W - box.RIGHT, y: box.H - 6, "text-anchor": "end" }, ends[1]));
  }

  window.streamgateSvg = { node: node, nice: nice, axes: axes };
})();
