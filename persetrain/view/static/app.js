// persetrain view: the summary of each run and its examples, a page at a time.
// Served, rows come from /api/rows (paged and filtered by the server); exported, the page carries every row in
// <script id="persetrain-data"> and filterRows below applies the server's filters (persetrain.view.rows.matches).
"use strict";

const embedded = document.getElementById("persetrain-data");
const DATA = embedded ? JSON.parse(embedded.textContent) : null;
const PAGE = 20;
const state = { offset: 0, total: 0 };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "boolean") return value ? "✓" : "✗";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(3);
  return String(value);
}

// ------------------------------------------------------------------------------------------ structured values
function isScalar(v) { return v === null || ["string", "number", "boolean"].includes(typeof v); }

function renderValue(value, depth = 0) {
  if (isScalar(value)) {
    return typeof value === "string" ? el("span", { class: "text" }, value) : el("span", {}, fmt(value));
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return el("span", {}, "—");
    if (value.every(isScalar)) return el("span", {}, value.map(fmt).join(", "));
    if (value.every((v) => v && typeof v === "object" && !Array.isArray(v))) return objectsTable(value, depth);
    return el("ol", {}, value.map((v) => el("li", {}, renderValue(v, depth + 1))));
  }
  return objectTable(value, depth);
}

function objectsTable(items, depth) {
  const columns = [...new Set(items.flatMap((item) => Object.keys(item)))];
  return el("div", { class: "table-scroll" }, el("table", {},
    el("tr", {}, columns.map((c) => el("th", {}, c))),
    items.map((item) => el("tr", {}, columns.map((c) => el("td", {}, renderValue(item[c], depth + 1)))))));
}

function objectTable(obj, depth) {
  const rows = [];
  const keys = Object.keys(obj);
  // Parallel lists (PARL's rules with their verdicts) read as one table of rules.
  const rules = Array.isArray(obj.rules) ? obj.rules : null;
  const parallel = rules ? keys.filter((k) => Array.isArray(obj[k]) && obj[k].length === rules.length && obj[k].every(isScalar)) : [];
  if (rules && parallel.length > 1) {
    rows.push(el("tr", {}, el("th", {}, "rules"), el("td", {}, objectsTable(
      rules.map((_, i) => Object.fromEntries(parallel.map((k) => [k, obj[k][i]]))), depth + 1))));
  }
  for (const key of keys) {
    if (rules && parallel.length > 1 && parallel.includes(key)) continue;
    rows.push(el("tr", {}, el("th", {}, key), el("td", {}, renderValue(obj[key], depth + 1))));
  }
  return el("table", {}, rows);
}

// ----------------------------------------------------------------------------------------------- summary
function renderSummary(summary) {
  const root = document.getElementById("summary");
  root.replaceChildren();
  document.getElementById("run-names").textContent = summary.runs.map((r) => r.name).join(" · ");
  for (const run of summary.runs) {
    const table = el("table", { class: "metrics" },
      el("tr", {}, el("th", {}, "system"), run.metrics.columns.map((c) => el("th", {}, c))),
      run.metrics.rows.map((row) => el("tr", {}, el("td", {}, row.system),
        row.values.map((v) => el("td", { class: "num" }, fmt(v))))));
    root.append(el("div", { class: "run-summary" },
      el("h2", {}, `${run.name}: ${run.title}`),
      el("div", { class: "meta" }, `${run.kind} · ${run.n_examples} examples · systems: ${run.systems.join(", ")}`
        + (run.probes.length ? ` · probes: ${run.probes.join(", ")}` : "") + ` · ${run.path}`),
      el("div", { class: "table-scroll" }, table),
      run.plots.length ? el("details", {}, el("summary", {}, `plots (${run.plots.length})`),
        el("div", { class: "plots" }, run.plots.map((p) => el("img", { src: p.url, alt: p.name, title: p.name })))) : null));
  }
  const fill = (id, values) => {
    const select = document.getElementById(id);
    for (const v of values) select.append(el("option", { value: v }, v));
  };
  fill("f-topic", summary.facets.topics);
  fill("f-person", summary.facets.persons);
  fill("f-system", summary.facets.systems);
}

// ---------------------------------------------------------------------------------------------- examples
function filters() {
  return {
    wrong: document.getElementById("f-wrong").checked,
    disagree: document.getElementById("f-disagree").checked,
    flipped: document.getElementById("f-flipped").checked,
    topic: document.getElementById("f-topic").value,
    person: document.getElementById("f-person").value,
    system: document.getElementById("f-system").value,
    q: document.getElementById("f-q").value.trim(),
  };
}

function judgedBy(row) {
  return row.runs.flatMap((r) => Object.keys(r.systems).map((s) => `${r.run}/${s}`));
}

function filterRows(rows, f) {
  const words = f.q.toLowerCase().split(/\s+/).filter(Boolean);
  return rows.filter((row) => {
    if (f.system && !judgedBy(row).includes(f.system)) return false;
    if (f.wrong && !(f.system ? row.flags.wrong.includes(f.system) : row.flags.wrong.length)) return false;
    if (f.flipped && !(f.system ? row.flags.flipped.includes(f.system) : row.flags.flipped.length)) return false;
    if (f.disagree && !row.flags.disagree) return false;
    if (f.topic && row.example.topic !== f.topic) return false;
    if (f.person && row.example.whose !== f.person) return false;
    if (words.length) {
      row._text = row._text || JSON.stringify(row).toLowerCase();
      if (!words.every((w) => row._text.includes(w))) return false;
    }
    return true;
  });
}

async function fetchPage(f, offset) {
  if (DATA) {
    const found = filterRows(DATA.rows, f);
    return { total: found.length, offset, rows: found.slice(offset, offset + PAGE) };
  }
  const params = new URLSearchParams({ offset, limit: PAGE });
  for (const [key, value] of Object.entries(f)) if (value) params.set(key, value === true ? "true" : value);
  const response = await fetch(`/api/rows?${params}`);
  if (!response.ok) throw new Error(`/api/rows: ${response.status}`);
  return response.json();
}

function picks(row, candidate) {
  const found = [];
  for (const run of row.runs) {
    for (const [system, records] of Object.entries(run.systems)) {
      for (const r of records) {
        const picked = r.choice !== null && r.choice !== undefined ? r.choice === candidate.key : false;
        if (!picked) continue;
        const who = row.runs.length > 1 ? `${run.run}/${system}` : system;
        found.push(el("span", { class: `pick ${r.correct === true ? "ok" : r.correct === false ? "bad" : ""}`,
          title: r.explanation || "" }, `${who}: ${named(r.choice_label, r.choice, "")}`));
      }
    }
  }
  return found;
}

// A candidate as a record names it: its label as the judge saw it, else its place in the list (1-based, as shown).
function named(label, index, fallback) {
  if (label !== null && label !== undefined) return label;
  return index !== null && index !== undefined ? `option ${index + 1}` : fallback;
}

function probesCell(record) {
  const probes = record.probes || {};
  const names = Object.keys(probes);
  if (!names.length) return "—";
  return names.map((name) => {
    const p = probes[name];
    const what = named(p.choice_label, p.choice, fmt(p.score));
    return el("div", { class: p.changed ? "bad" : "" },
      `${name}: ${what}${p.correct === null || p.correct === undefined ? "" : p.correct ? " ✓" : " ✗"}${p.changed ? " (changed)" : ""}`);
  });
}

function verdictTable(systems) {
  const rows = [el("tr", {}, ["system", "target", "verdict", "gold", "correct", "score", "probes"].map((h) => el("th", {}, h)))];
  const more = [];
  for (const [system, records] of Object.entries(systems)) {
    records.forEach((r, i) => {
      rows.push(el("tr", { class: "verdict", "data-system": system },
        el("td", {}, system), el("td", {}, r.target ?? "—"),
        el("td", {}, r.parsed === false ? "unparsed" : named(r.choice_label, r.choice, "—")),
        el("td", {}, typeof r.gold === "number" && r.correct !== null && r.correct !== undefined
          ? named(r.gold_label, r.gold, "—") : fmt(r.gold)),
        el("td", { class: r.correct === true ? "ok" : r.correct === false ? "bad" : "" }, fmt(r.correct)),
        el("td", { class: "num" }, fmt(r.score)),
        el("td", {}, probesCell(r))));
      more.push(el("details", {},
        el("summary", {}, `${system}${records.length > 1 ? ` #${i + 1}` : ""}: rationale and details`),
        el("pre", {}, r.explanation || "(no rationale)"),
        r.details ? renderValue(r.details) : null,
        el("div", { class: "field" }, el("b", {}, "evaluator "), `${r.evaluator ?? "—"} · spec ${JSON.stringify(r.spec || {})}`),
        r.raw ? el("details", {}, el("summary", {}, "raw output"), el("pre", {}, r.raw)) : null));
    });
  }
  return [el("div", { class: "table-scroll" }, el("table", {}, rows)), more];
}

function renderRow(row) {
  const ex = row.example;
  const flags = [];
  if (row.flags.wrong.length) flags.push(el("span", { class: "tag bad" }, `wrong: ${row.flags.wrong.join(", ")}`));
  if (row.flags.disagree) flags.push(el("span", { class: "tag warn" }, "systems disagree"));
  if (row.flags.flipped.length) flags.push(el("span", { class: "tag warn" }, `flipped: ${row.flags.flipped.join(", ")}`));
  const fields = Object.entries(ex.fields).map(([k, v]) => el("div", { class: "field" }, el("b", {}, `${k}: `), renderValue(v)));
  const candidates = ex.candidates.length ? el("ol", { class: "candidates" }, ex.candidates.map((c) =>
    el("li", { class: c.key === ex.gold ? "gold" : "", title: c.key === ex.gold ? "gold" : "" },
      el("span", { class: "text" }, c.text), c.key === ex.gold ? el("span", { class: "tag" }, "gold") : null,
      el("span", { class: "picks" }, picks(row, c))))) : null;
  const gold = ex.gold !== null && ex.gold !== undefined && !ex.candidates.some((c) => c.key === ex.gold)
    ? el("div", { class: "field" }, el("b", {}, "gold: "), fmt(ex.gold)) : null;
  const runs = row.runs.map((run) => el("div", { class: "run-verdicts" },
    row.runs.length > 1 ? el("h4", {}, run.run) : null,
    Object.keys(run.systems).length ? verdictTable(run.systems) : el("div", { class: "empty" }, "not judged in this run")));
  const verdicts = el("div", { class: "verdicts", style: `grid-template-columns: repeat(${row.runs.length}, minmax(0, 1fr))` }, runs);
  return el("article", { class: "example", id: `example-${ex.id}`, "data-id": ex.id },
    el("h3", {}, el("span", { class: "example-id" }, ex.id), ex.topic ? el("span", { class: "tag" }, ex.topic) : null,
      ex.whose ? el("span", { class: "tag" }, ex.whose) : null, flags),
    ex.person_field ? el("div", { class: "person" }, el("h4", {}, `person (${ex.person_field})`),
      renderValue(ex.person && (ex.person.length || typeof ex.person !== "string") ? ex.person : "(none)")) : null,
    fields, candidates, gold, verdicts);
}

async function show() {
  const page = await fetchPage(filters(), state.offset);
  state.total = page.total;
  const root = document.getElementById("rows");
  root.replaceChildren(...(page.rows.length ? page.rows.map(renderRow) : [el("div", { class: "empty" }, "no example matches")]));
  const last = Math.min(state.offset + page.rows.length, page.total);
  document.getElementById("count").textContent = page.total
    ? `examples ${state.offset + 1}–${last} of ${page.total}` : "0 examples";
  document.getElementById("prev").disabled = state.offset === 0;
  document.getElementById("next").disabled = last >= page.total;
  document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
}

function refilter() { state.offset = 0; show(); }

async function start() {
  const summary = DATA ? DATA.summary : await (await fetch("/api/summary")).json();
  renderSummary(summary);
  // view.html#EXAMPLE_ID (report.md's links to wrong examples) opens on that example: a search for its id.
  if (location.hash.length > 1) document.getElementById("f-q").value = decodeURIComponent(location.hash.slice(1));
  for (const id of ["f-wrong", "f-disagree", "f-flipped", "f-topic", "f-person", "f-system"]) {
    document.getElementById(id).addEventListener("change", refilter);
  }
  let typing;
  document.getElementById("f-q").addEventListener("input", () => { clearTimeout(typing); typing = setTimeout(refilter, 250); });
  document.getElementById("prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); show(); });
  document.getElementById("next").addEventListener("click", () => { state.offset += PAGE; show(); });
  await show();
}

start();
