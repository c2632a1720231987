// The status page's charts (uPlot) and its refresh: every 2 s the page fetches itself, swaps in
// the fresh sections marked data-live and feeds the embedded JSON to the charts. The server
// renders every figure too, so this script only adds; the page reads without it.
"use strict";
(() => {
  const BLUE = "#2563eb", GREEN = "#16a34a", AMBER = "#d97706", RED = "#dc2626",
    PURPLE = "#7c3aed";
  const HEIGHT = 150;
  // Each chart: the series it draws, as [label, key into the route's series, colour].
  const quantiles = (key) => (s) =>
    [["p50", s[key].p50, BLUE], ["p95", s[key].p95, AMBER], ["p99", s[key].p99, RED]];
  const CHARTS = {
    rate: (s) => [["whole answers", s.whole_per_s, BLUE], ["streams", s.stream_per_s, GREEN],
      ["errors", s.errors_per_s, RED]],
    inflight: (s) => [["peak in flight", s.inflight_peak, PURPLE]],
    whole: quantiles("whole_ms"),
    stream: quantiles("stream_ms"),
    ttft: quantiles("ttft_ms"),
  };
  const charts = new Map();  // figure element -> uPlot

  // A run of a few buckets with values, between buckets without, draws no line (one bucket) or
  // a stub a few pixels long (two or three, out of 60 across the chart): show them as dots.
  const SHORT_RUN = 3;
  function shortRuns(u, si, show) {
    if (show) return null;
    const d = u.data[si], out = [];
    for (let i = 0; i < d.length; ) {
      if (d[i] == null) { i++; continue; }
      let end = i;
      while (end < d.length && d[end] != null) end++;
      if (end - i <= SHORT_RUN) for (let k = i; k < end; k++) out.push(k);
      i = end;
    }
    return out.length ? out : null;
  }

  function create(fig, series, columns) {
    const opts = {
      width: fig.clientWidth || 320,
      height: HEIGHT,
      scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.1)]}},
      axes: [{}, {size: 56}],
      series: [{}, ...columns.map(([label, , stroke]) =>
        ({label, stroke, width: 1.5, points: {show: false, size: 6, filter: shortRuns}}))],
    };
    return new uPlot(opts, [series.t, ...columns.map((c) => c[1])], fig);
  }

  function draw(data) {
    let drawn = 0;
    for (const route of data.routes) {
      const card = [...document.querySelectorAll("#charts .route-charts")]
        .find((c) => c.dataset.route === route.path);
      if (!card || !route.series) continue;
      for (const fig of card.querySelectorAll("figure[data-chart]")) {
        const columns = CHARTS[fig.dataset.chart](route.series);
        const u = charts.get(fig);
        if (u) u.setData([route.series.t, ...columns.map((c) => c[1])]);
        else charts.set(fig, create(fig, route.series, columns));
        drawn++;
      }
    }
    document.documentElement.dataset.charts = String(drawn);
  }

  // What the charts section holds: its routes, and which of them have charts.
  function layoutOf(root) {
    return [...root.querySelectorAll("#charts .route-charts")]
      .map((c) => c.dataset.route + " " + c.querySelectorAll("figure").length).join("\n");
  }

  async function refresh() {
    try {
      const res = await fetch(location.href, {cache: "no-store"});
      if (!res.ok) throw new Error("HTTP " + res.status);
      const fresh = new DOMParser().parseFromString(await res.text(), "text/html");
      for (const el of document.querySelectorAll("[data-live]")) {
        const next = fresh.getElementById(el.id);
        if (next) el.replaceWith(document.adoptNode(next));
      }
      if (layoutOf(fresh) !== layoutOf(document)) {  // a reload, or a route's first traffic
        charts.forEach((u) => u.destroy());
        charts.clear();
        document.getElementById("charts").replaceWith(
          document.adoptNode(fresh.getElementById("charts")));
      }
      draw(JSON.parse(fresh.getElementById("status-data").textContent));
    } catch (e) {
      const updated = document.getElementById("updated");
      if (updated) updated.textContent += " (refresh failed: " + e.message + ")";
    }
  }

  window.addEventListener("resize", () => {
    charts.forEach((u, fig) => u.setSize({width: fig.clientWidth, height: HEIGHT}));
  });
  draw(JSON.parse(document.getElementById("status-data").textContent));
  setInterval(refresh, 2000);
})();
