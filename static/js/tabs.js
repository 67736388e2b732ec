// The ARIA tabs pattern over the stream page's tab links (manual activation): one tab in the
// Tab order (the current one), Left/Right/Home/End move the focus along the tabs, Enter or
// Space opens the focused one. Each tab is a link to its own URL, so without this script the
// tabs are ordinary links and every tab still opens.
(function () {
  "use strict";
  function setUp(list) {
    var tabs = Array.prototype.slice.call(list.querySelectorAll('[role="tab"]'));
    tabs.forEach(function (tab) {
      tab.tabIndex = tab.getAttribute("aria-selected") === "true" ? 0 : -1;
    });
    list.addEventListener("keydown", function (event) {
      var at = tabs.indexOf(document.activeElement);
      if (at < 0) return;
      var to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (event.key === " ") { event.preventDefault(); tabs[at].click(); return; }
      if (to === undefined) return;
      event.preventDefault();
      var next = tabs[(to + tabs.length) % tabs.length];
      tabs.forEach(function (tab) { tab.tabIndex = tab === next ? 0 : -1; });
      next.focus();
    });
  }
  document.querySelectorAll("[data-tabs]").forEach(setUp);
})();
