// Tidal console: local times and relative ages, auto-submitting selects, select-all boxes, charts.
// Runs on load and again on every htmx swap (htmx.onLoad), so live partials get the same treatment.
(function () {
  "use strict";
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  const full = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });
  const short = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });

  function age(ms) {
    const s = Math.round(Math.abs(ms) / 1000), future = ms < 0;
    const text = s < 60 ? s + " s" : s < 3600 ? Math.round(s / 60) + " min" :
      s < 172800 ? (s / 3600).toFixed(s < 36000 ? 1 : 0) + " h" : Math.round(s / 86400) + " d";
    return future ? "in " + text : text + " ago";
  }

  function times(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      el.title = full.format(at) + " (" + zone + ")";
      const mode = el.dataset.show || "relative";
      el.textContent = mode === "local" ? short.format(at) : mode === "both" ?
        short.format(at) + " · " + age(Date.now() - at) : age(Date.now() - at);
    });
  }

  function autosubmit(root) {
    root.querySelectorAll("select[data-autosubmit]:not([data-bound])").forEach(function (el) {
      el.dataset.bound = "1";
      el.addEventListener("change", function () { el.form.requestSubmit(); });
    });
  }

  function selectAll(root) {
    root.querySelectorAll("input[data-select-all]:not([data-bound])").forEach(function (box) {
      box.dataset.bound = "1";
      box.addEventListener("change", function () {
        box.closest("form").querySelectorAll("input[name=" + box.dataset.selectAll + "]:not(:disabled)")
          .forEach(function (b) { b.checked = box.checked; });
      });
    });
  }

  function sameDay(spec) {  // ticks show the time alone when the axis spans less than a day
    return span(spec) < 86400000;
  }

  function span(spec) {  // ms the x axis covers
    if (spec.x_min !== undefined && spec.x_max !== undefined) return spec.x_max - spec.x_min;
    const xs = spec.series.flatMap(function (s) { return s.points.map(function (p) { return p[0]; }); });
    return xs.length ? Math.max.apply(null, xs) - Math.min.apply(null, xs) : 0;
  }

  // Time ticks at whole clock steps (every 30 minutes, not every 2,000,000 ms), at most 8 of them.
  const STEPS_MIN = [1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080];
  function clockTicks(spec) {
    const minutes = span(spec) / 60000;
    const found = STEPS_MIN.find(function (m) { return minutes / m <= 7; });
    if (!found) return undefined;
    const step = found * 60000;
    return function (scale) {
      const local = -new Date(scale.min).getTimezoneOffset() * 60000;  // whole steps of the local clock
      const out = [];
      for (let v = Math.ceil((scale.min + local) / step) * step - local; v <= scale.max; v += step) out.push({ value: v });
      scale.ticks = out;
    };
  }

  const palette = ["#0b6bcb", "#d4521b", "#1a7f37", "#8250df", "#bf8700", "#c62828"];
  function charts(root) {
    if (!window.Chart) return;
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      const spec = JSON.parse(document.getElementById(canvas.dataset.chart).textContent);
      const old = Chart.getChart(canvas);
      if (old) old.destroy();
      new Chart(canvas, {
        type: "line",
        data: {
          datasets: spec.series.map(function (s, i) {
            return { label: s.label, data: s.points.map(function (p) { return { x: p[0], y: p[1] }; }),
              borderColor: s.color || palette[i % palette.length], backgroundColor: s.color || palette[i % palette.length],
              borderWidth: 1.6, pointRadius: s.points.length > 60 ? 0 : 2, borderDash: s.dash || [], stepped: !!s.stepped,
              spanGaps: false, tension: 0 };
          }),
        },
        options: {
          animation: false, maintainAspectRatio: false, parsing: false, normalized: true,
          interaction: { mode: "index", intersect: false },
          plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } },
            tooltip: { callbacks: { title: function (items) { return items.length ? short.format(new Date(items[0].parsed.x)) : ""; } } } },
          scales: {
            x: { type: "linear", min: spec.x_min, max: spec.x_max, afterBuildTicks: clockTicks(spec), ticks: { maxTicksLimit: 8, maxRotation: 0,
              callback: function (v) { return (sameDay(spec) ? clock : short).format(new Date(v)); } } },
            y: { beginAtZero: true, max: spec.y_max === undefined ? undefined : spec.y_max,
              title: { display: !!spec.y_label, text: spec.y_label || "" },
              ticks: { callback: function (v) { return spec.percent ? Math.round(v * 100) + "%" : v; } } },
          },
        },
      });
    });
  }

  function init(root) { times(root); autosubmit(root); selectAll(root); charts(root); }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-tz]").forEach(function (el) { el.textContent = zone; });
    init(document);
    if (window.htmx) htmx.onLoad(function (el) { if (el !== document.body) init(el); });
  });
  setInterval(function () { times(document); }, 30000);
})();

// The job page's log panel (docs/concepts/job-logs.md#console): the API's /api/jobs/{id}/logs/ for the chosen run
// and worker; while
// following an open run it is read again every few seconds (no reload) and kept scrolled to the end; Pause stops
// that; a finished run's log (its archive) is read once.
(function () {
  "use strict";
  const POLL_MS = 3000;

  function logPanel(panel) {
    const text = panel.querySelector("[data-log-text]"), status = panel.querySelector("[data-log-status]");
    const runs = panel.querySelector("[data-log-run]"), workers = panel.querySelector("[data-log-worker]");
    const follow = panel.querySelector("[data-log-follow]"), pause = panel.querySelector("[data-log-pause]");
    const download = panel.querySelector("[data-log-download]");
    let timer = null, paused = false, busy = false, generation = 0;

    function chosen() { return runs.options[runs.selectedIndex]; }
    function query(extra) {
      const params = new URLSearchParams({ run: runs.value, worker: workers.value || "0" });
      Object.keys(extra || {}).forEach(function (k) { params.set(k, extra[k]); });
      return panel.dataset.logUrl + "?" + params.toString();
    }
    function fillWorkers() {
      const n = parseInt(chosen().dataset.workers || "1", 10), keep = workers.value;
      workers.innerHTML = "";
      for (let rank = 0; rank < n; rank++) workers.add(new Option(String(rank), String(rank)));
      workers.value = keep < n ? keep : "0";
    }
    function following() { return follow.checked && !paused && chosen().dataset.open === "1"; }
    function schedule() {
      clearTimeout(timer);
      if (following()) timer = setTimeout(read, POLL_MS);
    }
    function show(body, source, lines) {
      const atEnd = text.scrollTop + text.clientHeight >= text.scrollHeight - 4;
      if (text.textContent !== body) text.textContent = body;
      if ((following() && atEnd) || !text.dataset.shown) text.scrollTop = text.scrollHeight;
      text.dataset.shown = "1";
      const where = source === "live" ? "live from the cluster" : source === "archive" ? "from the archive" :
        "its pod is starting";
      status.textContent = lines + " line" + (lines === 1 ? "" : "s") + ", " + where +
        (following() ? " · following" : paused ? " · paused" : "");
    }
    function read() {
      if (busy) return schedule();
      busy = true;
      follow.disabled = pause.disabled = chosen().dataset.open !== "1";  // an ended run's log does not grow
      const mine = ++generation;
      download.href = query({ download: "1" });
      fetch(query({ tail: panel.dataset.logTail }), { credentials: "same-origin", headers: { Accept: "text/plain" } })
        .then(function (response) {
          if (response.ok) {
            return response.text().then(function (body) {
              if (mine !== generation) return;
              const source = response.headers.get("X-Tidal-Log-Source");
              if (source === "archive") chosen().dataset.open = "0";  // the run ended while we followed it
              show(body, source, body ? body.split("\n").length - 1 : 0);
            });
          }
          return response.json().then(function (error) {
            if (mine === generation) { text.textContent = ""; status.textContent = error.message; }
          });
        })
        .catch(function () { status.textContent = "could not read the log; retrying"; })
        .finally(function () { busy = false; if (mine === generation) schedule(); });
    }
    runs.addEventListener("change", function () { fillWorkers(); text.dataset.shown = ""; read(); });
    workers.addEventListener("change", function () { text.dataset.shown = ""; read(); });
    follow.addEventListener("change", function () { if (follow.checked) text.scrollTop = text.scrollHeight; read(); });
    pause.addEventListener("click", function () {
      paused = !paused;
      pause.textContent = paused ? "Resume" : "Pause";
      pause.setAttribute("aria-pressed", String(paused));
      read();
    });
    fillWorkers();
    read();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-log-url]").forEach(function (panel) {
      if (panel.querySelector("[data-log-run]")) logPanel(panel);
    });
  });
})();
