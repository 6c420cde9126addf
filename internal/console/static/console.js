// Portcullis console: refresh the page's live part when the server says
// something changed (server-sent events), and every 5 s. No build step, no
// inline code (the Content-Security-Policy allows only this file). A live
// part in which the operator is typing or has chosen something is left
// alone until the form is sent or cleared.
(function () {
  'use strict';
  var regions = Array.prototype.slice.call(document.querySelectorAll('[data-live]'));
  var state = document.getElementById('live-state');
  function show(text, cls) {
    if (!state) { return; }
    state.hidden = false;
    state.textContent = text;
    state.className = 'live-state ' + (cls || '');
  }
  if (!regions.length) { return; }
  show('live', 'on');

  function busy(region) {
    var a = document.activeElement;
    if (a && a !== document.body && region.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) {
      return true;
    }
    var inputs = region.querySelectorAll('input');
    for (var i = 0; i < inputs.length; i++) {
      var el = inputs[i];
      if (el.type === 'hidden') { continue; }
      if ((el.type === 'radio' || el.type === 'checkbox') ? el.checked : el.value !== '') { return true; }
    }
    return false;
  }

  var timer = null;
  var inFlight = false;
  function refresh() {
    timer = null;
    if (inFlight) { soon(); return; }
    regions.forEach(function (region) {
      if (busy(region)) { show('paused while you edit', 'paused'); return; }
      inFlight = true;
      fetch(region.getAttribute('data-live'), { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
        .then(function (res) {
          if (!res.ok && res.status !== 502 && res.status !== 504) { throw new Error(String(res.status)); }
          return res.text();
        })
        .then(function (html) {
          if (!busy(region)) {
            region.innerHTML = html;
            region.setAttribute('data-refreshed', String(Date.now()));
            show('live', 'on');
          }
        })
        .catch(function () { show('stale: the console did not answer', 'stale'); })
        .then(function () { inFlight = false; });
    });
  }
  function soon() {
    if (!timer) { timer = setTimeout(refresh, 250); }
  }
  setInterval(soon, 5000);
  document.addEventListener('input', function () { setTimeout(soon, 0); });
  if (window.EventSource) {
    var es = new EventSource('/events');
    es.addEventListener('outcome', soon);
    es.addEventListener('incident', soon);
    es.onerror = function () { show('reconnecting', 'stale'); };
    es.onopen = function () { show('live', 'on'); };
  }
})();
