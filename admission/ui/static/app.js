// Turnstile's dashboard: plain JavaScript, no build step. Everything shown is put in the DOM as
// text (textContent), never as HTML: a queue named "<script>" is shown, not run.
"use strict";

const state = { view: "queues", pendingQueue: null, pendingOffset: 0, workload: "", overview: null };
const PAGE = 50;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function get(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" } });
  const body = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(body.error || `${response.status}`);
  return body;
}

function showError(err) {
  const box = document.getElementById("error");
  box.hidden = !err;
  box.textContent = err ? String(err.message || err) : "";
}

function fmt(milli, resource) {
  const v = milli / 1000;
  if (resource === "memory" && v >= 2 ** 30) return `${(v / 2 ** 30).toFixed(0)}Gi`;
  return Number.isInteger(v) ? String(v) : v.toFixed(2);
}

function bar(parts, total) {
  const b = el("div", { class: "bar" });
  for (const [cls, value] of parts) {
    if (value > 0 && total > 0) b.append(el("span", { class: cls, style: `width:${Math.min(100, (100 * value) / total)}%` }));
  }
  return b;
}

// ----- queues ---------------------------------------------------------------------------------

function queueCard(q) {
  const card = el("div", { class: "cq", "data-queue": q.name });
  card.append(el("div", { class: "title" },
    el("b", {}, q.name),
    el("span", { class: "counts" }, `${q.admitted} admitted, ${q.pending} pending`),
    q.pending ? el("a", { class: "wl", href: `#pending?queue=${encodeURIComponent(q.name)}` }, "see pending") : null,
    q.stopPolicy && q.stopPolicy !== "None" ? el("span", { class: "counts" }, `stopPolicy ${q.stopPolicy}`) : null,
    q.fairShare ? el("span", { class: "counts fair" },
      `fair share ${q.fairShare.share === null ? "infinite" : q.fairShare.share} (weight ${q.fairShare.weight})`) : null));
  for (const r of q.resources) {
    const within = Math.min(r.used, r.nominal);
    const scale = Math.max(r.nominal + r.borrowed, r.nominal, 1);
    card.append(el("div", { class: "row" },
      el("span", {}, `${r.flavor} / ${r.resource}`),
      bar([["used", within], ["lent", r.lent], ["borrowed", r.borrowed]], scale),
      el("span", { class: "counts" },
        `${fmt(r.used, r.resource)} of ${fmt(r.nominal, r.resource)}` +
        (r.borrowed ? `, borrowed ${fmt(r.borrowed, r.resource)}` : "") +
        (r.lent ? `, lent ${fmt(r.lent, r.resource)}` : ""))));
  }
  return card;
}

function renderQueues(o) {
  const gpus = document.getElementById("gpus");
  gpus.replaceChildren(...(o.gpus.length ? o.gpus.map((g) => el("div", { class: "card", "data-flavor": g.flavor },
    el("h3", {}, g.flavor),
    bar([["used", g.inUse - g.reserved], ["borrowed", g.reserved]], Math.max(g.nominal, g.inUse, 1)),
    el("div", { class: "counts" },
      `${g.inUse.toFixed(1)} in use of ${g.nominal.toFixed(1)} (quota), ${g.free.toFixed(1)} free, ` +
      `${g.reserved.toFixed(1)} reserved for admission checks` +
      (g.idle === null ? "; idle: unknown (no DCGM data here)" : `; ${g.idle.toFixed(1)} held by idle workloads`))))
    : [el("p", { class: "legend" }, "no GPU quota configured")]));
  const filter = document.getElementById("queue-filter").value.trim().toLowerCase();
  const queues = o.clusterQueues.filter((q) => !filter || q.name.toLowerCase().includes(filter));
  const children = new Map();
  for (const c of o.cohorts) {
    if (!children.has(c.parent || "")) children.set(c.parent || "", []);
    children.get(c.parent || "").push(c.name);
  }
  const byCohort = new Map();
  for (const q of queues) {
    const key = q.cohort || "";
    if (!byCohort.has(key)) byCohort.set(key, []);
    byCohort.get(key).push(q);
  }
  const cohort = (name, depth) => {
    const box = el("div", { class: "cohort", "data-cohort": name }, el("div", { class: "name" }, `cohort ${name}`));
    for (const q of byCohort.get(name) || []) box.append(queueCard(q));
    if (depth < 16) for (const child of children.get(name) || []) box.append(cohort(child, depth + 1));
    return box;
  };
  const tree = [];
  for (const root of children.get("") || []) tree.push(cohort(root, 0));
  for (const q of byCohort.get("") || []) tree.push(queueCard(q));
  document.getElementById("tree").replaceChildren(...tree);
}

// ----- pending --------------------------------------------------------------------------------

function fillQueueSelect(o) {
  const select = document.getElementById("pending-queue");
  const names = o.clusterQueues.slice().sort((a, b) => b.pending - a.pending || a.name.localeCompare(b.name));
  const current = state.pendingQueue || (names[0] && names[0].name) || "";
  select.replaceChildren(...names.map((q) => {
    const option = el("option", { value: q.name }, `${q.name} (${q.pending})`);
    option.selected = q.name === current;
    return option;
  }));
  state.pendingQueue = current;
}

async function renderPending() {
  if (!state.overview) state.overview = await get("/ui/api/overview");
  fillQueueSelect(state.overview);
  if (!state.pendingQueue) return;
  const q = encodeURIComponent(state.pendingQueue);
  const page = await get(`/ui/api/pending?queue=${q}&offset=${state.pendingOffset}&limit=${PAGE}`);
  document.getElementById("pending-total").textContent = `${page.total} waiting`;
  const rows = page.items.map((w) => el("tr", { "data-workload": w.workload },
    el("td", {}, w.position),
    el("td", {}, el("a", { class: "wl", href: `#workload?name=${encodeURIComponent(w.workload)}` }, w.workload)),
    el("td", {}, w.localQueue || ""), el("td", {}, w.priority),
    el("td", {}, w.reason || ""), el("td", { class: "message" }, w.message || "")));
  document.querySelector("#pending-table tbody").replaceChildren(...rows);
  const last = Math.min(page.total, state.pendingOffset + page.items.length);
  document.getElementById("pending-page").textContent = page.total ? `${state.pendingOffset + 1}-${last} of ${page.total}` : "none";
  document.getElementById("pending-prev").disabled = state.pendingOffset === 0;
  document.getElementById("pending-next").disabled = last >= page.total;
}

// ----- workload, usage, audit -----------------------------------------------------------------

async function renderWorkload() {
  const input = document.getElementById("workload-name");
  if (state.workload && input.value !== state.workload) input.value = state.workload;
  if (!state.workload) {
    document.getElementById("describe").textContent = "Name a workload (namespace/name), or pick one from Pending.";
    document.getElementById("timeline").replaceChildren();
    document.querySelector("#events-table tbody").replaceChildren();
    return;
  }
  const w = await get(`/ui/api/workload?name=${encodeURIComponent(state.workload)}`);
  document.getElementById("timeline").replaceChildren(...w.history.map((h) => el("li", { class: h.type },
    el("b", {}, h.type), ` ${h.at.replace("T", " ").slice(0, 19)} UTC `, h.where || "", h.why ? ` (${h.why})` : "")));
  document.getElementById("describe").textContent = w.describe;
  const events = w.events === null ? [el("tr", {}, el("td", { colspan: "4" }, "not available here"))]
    : w.events.map((e) => el("tr", { "data-reason": e.reason || "" },
      el("td", {}, String(e.at || "").replace("T", " ").replace("Z", "")), el("td", {}, e.type || ""),
      el("td", {}, e.reason || ""), el("td", { class: "message" }, e.count > 1 ? `${e.message} (x${e.count})` : e.message || "")));
  document.querySelector("#events-table tbody").replaceChildren(...events);
}

async function renderUsage() {
  const by = document.getElementById("usage-by").value.trim() || "label:team";
  const days = document.getElementById("usage-days").value;
  const u = await get(`/ui/api/usage?by=${encodeURIComponent(by)}&days=${days}`);
  const most = Math.max(1, ...u.groups.map((g) => g.gpuHours));
  const price = parseFloat(document.getElementById("usage-price").value);
  const cost = (h) => (price > 0 ? `, ${(h * price).toFixed(2)}` : "");
  document.getElementById("usage-chart").replaceChildren(...(u.groups.length ? u.groups.map((g) => el("div", { class: "item", "data-group": g.group },
    el("span", {}, g.group), bar([["used", g.gpuHours]], most), el("span", {}, `${g.gpuHours} GPU-h${cost(g.gpuHours)}`)))
    : [el("p", { class: "legend" }, "no GPU-hours in this period")]));
}

async function renderAudit() {
  const rows = (await get("/ui/api/audit")).map((a) => el("tr", {},
    el("td", {}, a.at.replace("T", " ").slice(0, 19)), el("td", {}, a.actor), el("td", {}, a.action),
    el("td", {}, `${a.kind}/${a.name}`)));
  document.querySelector("#audit-table tbody").replaceChildren(...rows);
}

// ----- routing and live updates -----------------------------------------------------------------

async function refresh() {
  try {
    if (state.view === "queues") {
      state.overview = await get("/ui/api/overview");
      renderQueues(state.overview);
    } else if (state.view === "pending") {
      state.overview = await get("/ui/api/overview");
      await renderPending();
    } else if (state.view === "workload") await renderWorkload();
    else if (state.view === "usage") await renderUsage();
    else if (state.view === "audit") await renderAudit();
    showError(null);
  } catch (err) {
    showError(err);
  }
}

function route() {
  const [view, query] = (location.hash.slice(1) || "queues").split("?");
  const params = new URLSearchParams(query || "");
  state.view = ["queues", "pending", "workload", "usage", "audit"].includes(view) ? view : "queues";
  if (params.get("queue")) { state.pendingQueue = params.get("queue"); state.pendingOffset = 0; }
  if (params.get("name")) state.workload = params.get("name");
  for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== `view-${state.view}`;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.view === state.view);
  refresh();
}

let pendingRefresh = null;
function changed() {
  if (pendingRefresh) return; // (several changes in a burst: one refresh)
  pendingRefresh = setTimeout(() => { pendingRefresh = null; refresh(); }, 200);
}

function live() {
  const badge = document.getElementById("live");
  const source = new EventSource("/ui/events");
  source.addEventListener("changed", () => { badge.className = "live on"; badge.textContent = "live"; changed(); });
  source.onopen = () => { badge.className = "live on"; badge.textContent = "live"; };
  source.onerror = () => { badge.className = "live off"; badge.textContent = "reconnecting"; };
}

document.getElementById("queue-filter").addEventListener("input", () => state.overview && renderQueues(state.overview));
document.getElementById("pending-queue").addEventListener("change", (e) => {
  location.hash = `pending?queue=${encodeURIComponent(e.target.value)}`;
});
document.getElementById("pending-prev").addEventListener("click", () => { state.pendingOffset = Math.max(0, state.pendingOffset - PAGE); refresh(); });
document.getElementById("pending-next").addEventListener("click", () => { state.pendingOffset += PAGE; refresh(); });
document.getElementById("workload-go").addEventListener("click", () => {
  location.hash = `workload?name=${encodeURIComponent(document.getElementById("workload-name").value.trim())}`;
});
document.getElementById("usage-days").addEventListener("change", refresh);
document.getElementById("usage-by").addEventListener("change", refresh);
document.getElementById("usage-price").addEventListener("input", refresh);
window.addEventListener("hashchange", route);
route();
live();
