// The dashboard: reads and submits through the public JSON API with the user's key.
// Everything from the API is written with textContent, never parsed as HTML.
"use strict";

const KEY_STORAGE = "orchestrator.apiKey";
const REFRESH_MS = 1000;
// The brief of examples/brief.json: leads for an ideal customer profile, then web traffic
// for those leads' domains. The orchestrator plans it (POST /runs with needs and brief) and
// runs the plan's steps as a chain. Written as JSON so a test can check that the two stay
// the same; the workspace field of the page replaces workspaceId.
const DEMO_BRIEF = {
  "workspaceId": "ws_demo",
  "needs": ["leads", "web-traffic"],
  "brief": { "product": "B2B payroll software for mid-size companies", "targetCount": 25 },
  "icp": {
    "industries": ["Manufacturing", "Logistics", "Retail"],
    "titles": ["HR Director", "Head of People", "CFO"],
    "regions": ["Europe"],
    "companySize": "200-1000"
  },
  "budgetUsd": 1
};

let selectedRun = null;

function apiKey() {
  return window.localStorage.getItem(KEY_STORAGE) || "";
}

function say(text) {
  document.getElementById("status").textContent = text;
}

async function api(method, path, body) {
  const headers = { Authorization: "Bearer " + apiKey(), Accept: "application/json" };
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = payload.detail || payload.title || response.statusText;
    if (response.status === 401) {
      throw new Error("The API key was refused (401: " + detail + "). Paste a valid key.");
    }
    throw new Error(response.status + ": " + detail + (payload.field ? " (" + payload.field + ")" : ""));
  }
  return payload;
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function usd(amount) {
  return amount === null || amount === undefined ? "" : "$" + Number(amount).toFixed(4);
}

// Where a chained run's input comes from, and how many values it got once built:
// "domains ← #0.domain (23)"; empty for a run with a static input.
function fedBy(inputFrom, inputBuilt) {
  const built = inputBuilt || {};
  return Object.entries(inputFrom || {})
    .map(([name, source]) =>
      name + " ← #" + source.run + "." + source.field + (name in built ? " (" + built[name] + ")" : ""))
    .join(", ");
}

function inputSummary(step) {
  const fixed = Object.keys(step.input || {});
  const chained = fedBy(step.inputFrom, null);
  return [fixed.length ? "brief: " + fixed.join(", ") : "", chained].filter(Boolean).join("; ");
}

function showPlan(run) {
  const section = document.getElementById("plan-section");
  const plan = run.plan;
  section.hidden = !plan;
  if (!plan) return;
  document.getElementById("plan-summary").textContent =
    "planned for " + plan.needs.join(", ") + " · " + plan.steps.length + " step(s) · " +
    plan.expectedRows + " row(s) expected · estimated " + usd(plan.estimatedCostUsd) +
    (plan.budgetUsd !== null && plan.budgetUsd !== undefined ? " of a " + usd(plan.budgetUsd) + " budget" : "") +
    " · spent " + usd(run.usageTotalUsd) + (run.usageSettled ? "" : " so far");
  fill(document.querySelector("#plan tbody"), plan.steps, (tr, step) => {
    const child = run.children[step.index];
    tr.dataset.step = String(step.index);
    cell(tr, step.index);
    cell(tr, step.need);
    cell(tr, step.actor);
    cell(tr, inputSummary(step));
    cell(tr, step.why);
    cell(tr, usd(step.estimatedCostUsd), "cost");
    const state = child ? child.state : "";
    cell(tr, state, "state state-" + state);
  });
  fill(document.getElementById("plan-notes"), plan.notes, (li, note) => {
    li.textContent = note;
  }, "li");
}

function fill(tbody, rows, render, tag) {
  tbody.replaceChildren();
  for (const item of rows) {
    const tr = document.createElement(tag || "tr");
    render(tr, item);
    tbody.appendChild(tr);
  }
}

async function refreshRuns() {
  const list = await api("GET", "/runs?limit=20");
  fill(document.querySelector("#runs tbody"), list.runs, (tr, run) => {
    tr.className = "clickable";
    tr.addEventListener("click", () => selectRun(run.id));
    cell(tr, run.id);
    cell(tr, run.workspaceId);
    cell(tr, run.state, "state state-" + run.state);
    cell(tr, run.childrenTotal);
    cell(tr, new Date(run.createdAt).toLocaleTimeString());
  });
}

async function refreshRun() {
  if (!selectedRun) return;
  const id = encodeURIComponent(selectedRun);
  const run = await api("GET", "/runs/" + id);
  document.getElementById("run-section").hidden = false;
  document.getElementById("run-title").textContent = run.id;
  const summary = document.getElementById("run-summary");
  summary.textContent =
    run.state + (run.terminal ? " (finished)" : "") + " · " + run.itemsTotal + " item(s) · " +
    run.counts.succeeded + "/" + run.counts.total + " actor run(s) succeeded" +
    (run.counts.skipped ? ", " + run.counts.skipped + " skipped" : "");
  summary.className = "state state-" + run.state;
  document.getElementById("abort").disabled = run.terminal;
  showPlan(run);
  fill(document.querySelector("#children tbody"), run.children, (tr, child) => {
    tr.dataset.child = String(child.index);
    cell(tr, child.index);
    cell(tr, child.actor);
    cell(tr, fedBy(child.inputFrom, child.inputBuilt), "input-from");
    // A queued run shows its place in the admission queue (1 = next), when known.
    const queued = child.queuePosition ? " #" + child.queuePosition : "";
    cell(tr, child.state + queued, "state state-" + child.state);
    cell(tr, child.platformStatus);
    cell(tr, child.itemsIngested);
    cell(tr, child.statusMessage);
  });
  const items = await api("GET", "/runs/" + id + "/items?limit=20");
  document.getElementById("items").textContent = items.items
    .map((item) => item.actor + "  " + JSON.stringify(item.data))
    .join("\n");
  const events = await api("GET", "/runs/" + id + "/events?limit=1000");
  fill(document.querySelector("#events tbody"), events.events.slice(-30).reverse(), (tr, e) => {
    cell(tr, new Date(e.createdAt).toLocaleTimeString());
    cell(tr, e.kind);
    cell(tr, e.message);
  });
}

function selectRun(id) {
  selectedRun = id;
  refreshRun().catch((error) => say(error.message));
}

async function submitDemo() {
  const workspaceId = document.getElementById("demo-workspace").value.trim();
  const accepted = await api("POST", "/runs", { ...DEMO_BRIEF, workspaceId });
  say("accepted " + accepted.runId + ": planned, running its steps");
  selectRun(accepted.runId);
  await refreshRuns();
}

async function abortSelected() {
  if (!selectedRun) return;
  const id = encodeURIComponent(selectedRun);
  const answer = await api("POST", "/runs/" + id + "/abort");
  say(answer.detail);
}

async function tick() {
  if (!apiKey()) {
    say("Paste an API key to begin.");
    return;
  }
  try {
    await refreshRuns();
    await refreshRun();
    say("");
  } catch (error) {
    say(error.message);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("api-key");
    window.localStorage.setItem(KEY_STORAGE, input.value.trim());
    input.value = "";
    tick();
  });
  document.getElementById("submit-demo").addEventListener("click", () => {
    submitDemo().catch((error) => say(error.message));
  });
  document.getElementById("abort").addEventListener("click", () => {
    abortSelected().catch((error) => say(error.message));
  });
  tick();
  window.setInterval(tick, REFRESH_MS);
});
