// perceptlab experimenter dashboard: refreshes the study list or one study's figures every few seconds
// from the admin JSON API, and draws the small charts (vote histograms, scales with CIs) as inline SVG.
// No libraries. Every string from the server goes into textContent, never innerHTML (item and worker IDs
// are data, not markup).

const root = document.getElementById("dashboard");
const REFRESH_MS = Number(root?.dataset.refreshMs) || 5000;
const CSRF = document.querySelector('meta[name="csrf-token"]')?.content || "";
const SVG_NS = "http://www.w3.org/2000/svg";

// ---------------------------------------------------------------- helpers

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(x, digits = 3) {
  return x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(digits);
}

function percent(x, digits = 0) {
  return x === null || x === undefined ? "–" : `${(100 * x).toFixed(digits)}%`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

function setText(id, value) {
  const node = document.getElementById(id);
  if (node && node.textContent !== String(value)) node.textContent = value;
}

function status(text, isError = false) {
  const node = document.getElementById("refresh-status");
  if (!node) return;
  node.textContent = text;
  node.classList.toggle("error", isError);
}

class LoggedOut extends Error {}

async function getJSON(url, options = {}) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, ...options });
  if (response.status === 401) throw new LoggedOut("logged out");
  if (!response.ok) {
    let message = `HTTP ${response.status}`;
    try { message = (await response.json()).message || message; } catch { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

// Refresh on a timer without overlapping requests; skip while the tab is hidden.
function every(ms, task) {
  let timer = null;
  const run = async () => {
    clearTimeout(timer);
    if (!document.hidden) {
      try {
        await task();
      } catch (error) {
        if (error instanceof LoggedOut) {
          status("Your session has ended. Reload the page to log in again.", true);
          return; // stop refreshing
        }
        status(`Could not refresh: ${error.message}. Retrying…`, true);
      }
    }
    timer = setTimeout(run, ms);
  };
  document.addEventListener("visibilitychange", () => { if (!document.hidden) run(); });
  run();
  return run;
}

function updated() {
  status(`Updated ${new Date().toLocaleTimeString()} · refreshes every ${Math.round(REFRESH_MS / 1000)} s`);
}

// ---------------------------------------------------------------- study list

function studyListPage() {
  every(REFRESH_MS, async () => {
    const data = await getJSON(root.dataset.studiesUrl);
    for (const study of data.studies) {
      const row = root.querySelector(`tr[data-slug="${CSS.escape(study.slug)}"]`);
      if (!row) continue;
      const field = (name) => row.querySelector(`[data-field="${name}"]`);
      field("status").textContent = study.status;
      field("status").className = `badge status-${study.status}`;
      for (const name of ["n_groups", "n_units", "n_workers", "active_assignments"]) field(name).textContent = study[name];
      field("votes").textContent = `${study.n_responses} / ${study.target_responses} ${study.unit}`;
      field("fill").textContent = `(${percent(study.fill)})`;
      field("progress").value = study.fill;
    }
    updated();
  });
}

// ---------------------------------------------------------------- study page: headline and fill

function renderStatus(study) {
  const badge = document.getElementById("study-status");
  badge.textContent = study.status;
  badge.className = `badge status-${study.status}`;
  document.getElementById("pause-form").hidden = study.status === "paused";
  document.getElementById("resume-form").hidden = study.status !== "paused";
}

function renderHeadline(study) {
  setText("n-votes", study.n_responses);
  setText("target-votes", study.target_responses);
  setText("fill-percent", (100 * study.fill).toFixed(1));
  document.getElementById("votes-progress").value = study.fill;
  setText("n-workers", study.n_workers);
  setText("n-active", study.active_assignments);
  setText("n-sets", study.n_groups);
  setText("n-pairs", study.n_units);
  setText("last-vote", study.last_vote_at ? ago(study.last_vote_at) : "none yet");
  renderDesign(study.design);
  renderStatus(study);
}

// Which design chooses the pairs (server/paradigms/paired/active.py): a random regular design, or active
// sampling in its warm-up, active phase or with its budget spent, and the precision its next batch should add.
function renderDesign(design) {
  const node = document.getElementById("design-sampling");
  if (!node || !design) return;
  node.dataset.sampling = design.sampling;
  node.dataset.phase = design.phase || "";
  if (design.sampling !== "active") {
    setText("design-sampling", design.label);
    setText("design-gain", "");
    return;
  }
  const sets = design.phases["warm-up"] + design.phases.active + design.phases.done;
  const phase = design.phase === "warm-up" ? `warm-up (${design.phases["warm-up"]} of ${plural(sets, "set")})`
    : design.phase === "active" ? "active phase" : "budget spent";
  setText("design-sampling", `${design.label}, ${phase}`);
  setText("design-gain", design.expected_gain === null || design.expected_gain === undefined
    ? (design.phase === "warm-up" ? `warm-up: ${plural(design.warmup_votes_per_pair, "vote")} per design pair first` : "")
    : `next ${plural(design.batch_votes, "vote")}: +${fmt(design.expected_gain, 0)}% precision ` +
      `(random pairs: +${fmt(design.random_gain, 0)}%)`);
}

function histogram(bins, target) {
  const width = 160, height = 28, gap = 1, axis = 11;
  const most = Math.max(1, ...bins.map((b) => b.pairs));
  const w = width / bins.length;
  const chart = svg("svg", { class: "hist", viewBox: `0 0 ${width} ${height + axis}`, role: "img",
                             "aria-label": "pairs by number of votes" });
  bins.forEach((bin, k) => {
    const h = bin.pairs ? Math.max(2, (height - 2) * bin.pairs / most) : 0;
    const bar = svg("rect", { class: bin.low >= target && target > 0 ? "bar at-target" : "bar",
                              x: (k * w + gap / 2).toFixed(1), y: (height - 1 - h).toFixed(1),
                              width: Math.max(1, w - gap).toFixed(1), height: h.toFixed(1) });
    const range = bin.low === bin.high ? `${bin.low}` : `${bin.low}–${bin.high}`;
    bar.append(svg("title", {}, `${range} votes: ${bin.pairs} pair${bin.pairs === 1 ? "" : "s"}`));
    chart.append(bar);
  });
  chart.append(svg("line", { class: "base", x1: 0, x2: width, y1: height - 0.5, y2: height - 0.5 }));
  const last = bins[bins.length - 1];
  chart.append(svg("text", { class: "hist-label", x: 0, y: height + axis - 1 }, "0 votes"));
  chart.append(svg("text", { class: "hist-label", x: width, y: height + axis - 1, "text-anchor": "end" },
                   last.low === target ? `${target} (target)` : `${last.low}–${last.high}`));
  return chart;
}

function renderFill(sets) {
  const body = document.querySelector("#fill-table tbody");
  const rows = sets.map((s) => el("tr", { "data-set": s.set_id },
    el("td", { text: s.set_id }),
    el("td", { className: "num", text: s.n_pairs }),
    el("td", { className: "fill-cell" }, el("span", { text: `${s.n_votes} / ${s.target_votes} ` }),
       el("span", { className: "muted small", text: `(${percent(s.fill)})` }),
       el("progress", { max: 1, value: s.fill })),
    el("td", { className: "num", text: s.per_pair.min ?? "–" }),
    el("td", { className: "num", text: s.per_pair.median ?? "–" }),
    el("td", { className: "num", text: s.per_pair.max ?? "–" }),
    el("td", { title: `target ${s.per_pair.target} votes per pair` }, histogram(s.histogram, s.per_pair.target))));
  body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: 7, className: "muted", text: "No sets." }))]));
}

// ---------------------------------------------------------------- study page: running scales

function niceTicks(low, high) {
  const span = high - low || 1;
  const step = [0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10].find((s) => span / s <= 6) || span / 5;
  const ticks = [];
  for (let t = Math.ceil(low / step) * step; t <= high + 1e-9; t += step) ticks.push(Number(t.toFixed(6)));
  return ticks;
}

function scaleChart(items) {
  const row = 18, top = 8, bottom = 26, labelWidth = 170, width = 560, right = 16;
  const height = top + bottom + row * items.length;
  let low = Math.min(0, ...items.map((i) => i.ci_low ?? i.scale));
  let high = Math.max(1, ...items.map((i) => i.ci_high ?? i.scale));
  const x = (v) => labelWidth + (width - labelWidth - right) * (v - low) / (high - low);
  const chart = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img",
                             "aria-label": "scale values with confidence intervals" });
  for (const t of niceTicks(low, high)) {
    chart.append(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: top, y2: height - bottom }));
    chart.append(svg("text", { class: "tick-label", x: x(t), y: height - bottom + 14, "text-anchor": "middle" }, String(t)));
  }
  chart.append(svg("line", { class: "axis", x1: labelWidth, x2: width - right, y1: height - bottom, y2: height - bottom }));
  items.forEach((item, k) => {
    const y = top + row * k + row / 2;
    const name = item.item_id.length > 26 ? `${item.item_id.slice(0, 25)}…` : item.item_id;
    const label = svg("text", { class: "item-label", x: labelWidth - 8, y: y + 4, "text-anchor": "end" }, name);
    label.append(svg("title", {}, item.item_id));
    chart.append(label);
    if (item.ci_low !== null && item.ci_high !== null) {
      chart.append(svg("line", { class: "ci", x1: x(item.ci_low), x2: x(item.ci_high), y1: y, y2: y }));
    }
    const point = svg("circle", { class: "point", cx: x(item.scale), cy: y, r: 4 });
    point.append(svg("title", {}, `${item.item_id}: ${fmt(item.scale)} [${fmt(item.ci_low)}, ${fmt(item.ci_high)}], rank ${item.rank}`));
    chart.append(point);
  });
  return chart;
}

// How the running intervals were made (the snapshot's "intervals", as in summary.json). Snapshots stored
// before it was recorded had percentile intervals.
const INTERVAL_METHODS = {
  t: "t intervals (estimate ± Student t × bootstrap SD)",
  basic: "basic bootstrap intervals",
  percentile: "percentile bootstrap intervals",
};

function intervalsOf(scales) {
  if (!(scales.bootstrap > 0)) return null;
  return scales.intervals || { method: "percentile", confidence: 0.95, n_boot: scales.bootstrap, unit: "worker" };
}

function intervalSentence(intervals) {
  if (!intervals) return "no intervals (no bootstrap)";
  return `${Math.round(intervals.confidence * 100)}% ${INTERVAL_METHODS[intervals.method] || `${intervals.method} intervals`}` +
    ` from ${intervals.n_boot} ${intervals.unit} resamples`;
}

function scaleTable(items, intervals) {
  const ci = intervals ? `${Math.round(intervals.confidence * 100)}% CI (${intervals.method})` : "CI (no bootstrap)";
  return el("table", { className: "data" },
    el("thead", {}, el("tr", {}, el("th", { text: "Item" }), el("th", { className: "num", text: "Scale" }),
      el("th", { className: "num", text: ci }), el("th", { className: "num", text: "Rank" }),
      el("th", { className: "num", text: "Votes" }))),
    el("tbody", {}, ...items.map((i) => el("tr", {},
      el("td", { text: i.item_id }), el("td", { className: "num", text: fmt(i.scale) }),
      el("td", { className: "num", text: i.scale === null ? "–" : `${fmt(i.ci_low)} – ${fmt(i.ci_high)}` }),
      el("td", { className: "num", text: i.rank ?? "–" }), el("td", { className: "num", text: i.n_votes })))));
}

const openTables = new Map(); // set_id -> whether the experimenter opened/closed its table
let shownScales = null;       // computed_at of the estimate on screen: re-render only when it changes

function renderScaleSet(set, intervals) {
  const scaled = set.items.filter((i) => i.scale !== null).sort((a, b) => a.rank - b.rank);
  const waiting = set.items.filter((i) => i.scale === null);
  const article = el("article", { className: "scale-set", "data-set": set.set_id },
    el("h3", {}, set.set_id, el("span", { className: "muted small", text: `  ${plural(set.n_votes, "vote")}` })));
  if (set.message) article.append(el("p", { className: "set-message", text: set.message }));
  if (scaled.length) {
    const details = el("details", { open: openTables.has(set.set_id) ? openTables.get(set.set_id) : scaled.length <= 30 },
      el("summary", { text: `Table (${scaled.length} items)` }), scaleTable(scaled, intervals));
    details.addEventListener("toggle", () => openTables.set(set.set_id, details.open));
    article.append(el("div", { className: "scale-grid" }, scaleChart(scaled), details));
  }
  if (waiting.length) {
    article.append(el("p", { className: "muted small",
      text: `Not compared yet (${waiting.length}): ${waiting.map((i) => i.item_id).join(", ")}` }));
  }
  return article;
}

function renderScales(scales) {
  const state = scales.computing ? " Recomputing…" : scales.stale ? " Newer votes have arrived; an update will follow." : "";
  if (!scales.available) {
    setText("scales-status", (scales.error ? `No estimate yet: ${scales.error}.` : "No estimate yet.") + state);
    document.getElementById("scale-sets").replaceChildren();
    return;
  }
  const biased = scales.screening?.targeted_bias_workers;
  const screening = scales.screening
    ? ` Screening kept ${scales.screening.kept_workers} of ${scales.screening.workers} workers ` +
      `(${percent(scales.screening.kept_vote_fraction)} of the votes)` +
      (biased ? `; ${biased} favoured or disfavoured one item and ${biased === 1 ? "is" : "are"} left out.` : ".")
    : "";
  const intervals = intervalsOf(scales);
  setText("scales-status", `Computed ${ago(scales.computed_at)} from ${scales.n_scaling_votes} votes ` +
    `(${intervalSentence(intervals)}; anchored scale: worst = 0, best = 1).${screening}${state}`);
  const notes = [...(scales.error ? [scales.error] : []), ...(scales.notes || [])];
  document.getElementById("scales-notes").replaceChildren(...notes.map((n) => el("li", { text: n })));
  if (shownScales === scales.computed_at) return;
  shownScales = scales.computed_at;
  document.getElementById("scale-sets").replaceChildren(...scales.sets.map((s) => renderScaleSet(s, intervals)));
}

// ---------------------------------------------------------------- study page: workers

function renderWorkers(workers, showRaw) {
  document.querySelectorAll("#workers-table .raw-col").forEach((th) => { th.hidden = !showRaw; });
  const body = document.querySelector("#workers-table tbody");
  if (!workers.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 9, className: "muted", text: "No workers yet." })));
    return;
  }
  body.replaceChildren(...workers.map((w) => {
    const gold = w.gold_total ? `${w.gold_correct}/${w.gold_total} (${percent(w.gold_accuracy)})` : "–";
    const quiz = w.quiz_total ? `${w.quiz} (${w.quiz_correct}/${w.quiz_total})` : w.quiz;
    const screening = screeningCell(w);
    return el("tr", { "data-worker": w.worker_id },
      el("td", {}, el("code", { text: w.worker_id })),
      showRaw ? el("td", { className: "raw-col" }, el("code", { text: w.raw_id ?? "" })) : null,
      // One status (server/views/admin.py worker_state): "active" beside "completed" read as a contradiction.
      el("td", { text: w.state ?? w.status, className: w.status === "active" ? "" : "warn" }),
      el("td", { className: "num", text: w.pages }),
      el("td", { className: "num", text: w.n_votes }),
      el("td", { className: "num", text: gold }),
      el("td", { text: quiz, className: w.quiz === "failed" ? "excluded" : "" }),
      el("td", { className: "num", text: fmt(w.tpr, 2) }),
      el("td", {}, screening));
  }));
}

/** Kept or excluded, and the analysis's reasons that a reader must see: a targeted bias, machine-like answers. */
function screeningCell(w) {
  if (w.kept === null || w.kept === undefined) return el("span", { className: "muted", text: "–" });
  const flags = (w.flags || "").split(";").filter(Boolean);
  const why = [
    ...flags.filter((f) => f.startsWith("favours:") || f.startsWith("disfavours:")).map((f) => f.replace(":", " ")),
    ...(flags.includes("machine_agreement") ? ["answers like a machine"] : []),
  ];
  return el("span", { className: w.kept ? "kept" : "excluded", title: flags.length ? flags.join(", ") : null,
    text: (w.kept ? "kept" : "excluded") + (why.length ? ` (${why.join("; ")})` : "") });
}

// ---------------------------------------------------------------- study page

function studyPage() {
  const rawToggle = document.getElementById("raw-ids");
  const downloads = ["download-votes", "download-workers"].map((id) => document.getElementById(id));
  const baseHref = new Map(downloads.map((a) => [a, a.getAttribute("href")]));

  const refresh = every(REFRESH_MS, async () => {
    const raw = rawToggle.checked;
    const data = await getJSON(`${root.dataset.summaryUrl}${raw ? "?raw_ids=1" : ""}`);
    renderHeadline(data.study);
    renderFill(data.sets);
    renderScales(data.scales);
    renderWorkers(data.workers, raw);
    updated();
  });

  rawToggle.addEventListener("change", () => {
    // Downloads follow the toggle, so what is exported matches what is shown.
    for (const a of downloads) a.href = rawToggle.checked ? `${baseHref.get(a)}?raw_worker_ids=1` : baseHref.get(a);
    refresh();
  });

  const button = document.getElementById("recompute");
  button.addEventListener("click", async () => {
    button.disabled = true;
    button.textContent = "Computing…";
    try {
      await getJSON(root.dataset.refreshUrl, { method: "POST", headers: { "X-CSRF-Token": CSRF, Accept: "application/json" } });
      shownScales = null;
      await refresh();
    } catch (error) {
      status(error instanceof LoggedOut ? "Your session has ended. Reload the page to log in again."
        : `Could not recompute: ${error.message}`, true);
    } finally {
      button.disabled = false;
      button.textContent = "Recompute now";
    }
  });
}

// ---------------------------------------------------------------- motion study page

function num(x, digits) {
  return x === null || x === undefined ? "" : Number(x).toFixed(digits);
}

function renderMotionHeadline(study, progress, workers) {
  renderStatus(study);
  setText("sessions-done", progress.sessions_done);
  setText("sessions-target", progress.sessions_target);
  document.getElementById("sessions-progress").value = progress.fill;
  setText("clip-sessions-done", progress.clip_sessions_done);
  setText("clip-sessions-target", progress.clip_sessions_target);
  setText("sessions-open", progress.sessions_open);
  setText("n-workers", progress.n_workers);
  setText("n-screened", workers.filter((w) => w.screening_passed).length);
  setText("n-clips", progress.n_clips);
  setText("n-probes", progress.n_probes);
}

function renderClips(clips, target) {
  const body = document.querySelector("#clips-table tbody");
  body.replaceChildren(...clips.map((c) => el("tr", { "data-clip": c.clip_id },
    el("td", { text: c.clip_id }), el("td", { text: c.dataset }), el("td", { className: "num", text: c.n_probes }),
    el("td", { className: "num", text: c.done }), el("td", { className: "num", text: c.open }),
    el("td", { className: "num", text: target }))));
}

function screeningText(w) {
  if (w.screening_r !== null && w.screening_r !== undefined) {
    return `${w.screening_r.toFixed(3)} ${w.screening_passed ? "passed" : "failed"}`;
  }
  return w.screening_passed === false ? "failed" : "";
}

function renderMotionWorkers(workers) {
  const body = document.querySelector("#workers-table tbody");
  if (!workers.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 10, className: "muted", text: "No workers yet." })));
    return;
  }
  body.replaceChildren(...workers.map((w) => el("tr", { "data-worker": w.worker_id },
    el("td", {}, el("code", { text: w.worker_id })),
    el("td", { text: w.status }),
    el("td", {}, w.badge ? el("span", { className: `badge stage-badge stage-${w.badge.stage}`, text: w.badge.label }) : null),
    el("td", { className: "num", text: num(w.px_per_mm, 2) }),
    el("td", { className: "num", text: num(w.viewing_distance_cm, 1) }),
    el("td", { className: "num", text: num(w.measured_distance_cm, 1) }),
    el("td", { className: "num", text: num(w.refresh_hz, 1) + (w.refused ? " (refused)" : "") }),
    el("td", { text: screeningText(w) }),
    el("td", { className: "num", text: w.trials_done }),
    el("td", { className: "num", text: w.drop_rate === null || w.drop_rate === undefined ? "" : percent(w.drop_rate, 1) }))));
}

function motionStudyPage() {
  const target = root.dataset.observersPerClip;
  every(REFRESH_MS, async () => {
    const data = await getJSON(root.dataset.summaryUrl);
    renderMotionHeadline(data.study, data.progress, data.workers);
    renderClips(data.clips, target);
    renderMotionWorkers(data.workers);
    updated();
  });
}

if (root?.dataset.page === "index") studyListPage();
if (root?.dataset.page === "study") studyPage();
if (root?.dataset.page === "motion-study") motionStudyPage();
