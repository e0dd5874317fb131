// django-blamequeue console: live refresh. Every data-live seconds, fetch this page again and
// swap its [data-live] region, unless the tab is hidden, the "live" box is unticked, or the
// operator is typing in (or has opened a form of) that region. No build step, no library.
(function () {
  "use strict";
  var region = document.querySelector("[data-live]");
  if (!region || !window.fetch || !window.DOMParser) return;
  var seconds = Math.max(2, parseInt(region.getAttribute("data-live"), 10) || 10);
  var toggle = document.getElementById("bq-live-toggle");
  function busy() {
    var active = document.activeElement;
    return (active && region.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName))
      || region.querySelector("details[open]") !== null;
  }
  function tick() {
    if (document.hidden || (toggle && !toggle.checked) || busy()) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html || busy()) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[data-live]");
        if (fresh) {
          region.replaceWith(fresh);
          region = fresh;
          region.setAttribute("data-refreshed", new Date().toISOString());
        }
      })
      .catch(function () { /* the next tick tries again */ });
  }
  window.setInterval(tick, seconds * 1000);
})();
