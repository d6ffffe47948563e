// The dashboard: reads and submits through the public JSON API with the user's key.
// Everything from the API is written with textContent, never parsed as HTML.
"use strict";

const KEY_STORAGE = "orchestrator.apiKey";
const REFRESH_MS = 1000;
// The request of examples/demo.json, in the specification's shape (brief and icp are
// objects). Written as JSON so a test can check that the two stay the same.
const DEMO_RUNS = [
  {
    "actor": "ultron-leadgen",
    "input": {
      "brief": { "product": "B2B payroll software for mid-size companies", "targetCount": 25 },
      "icp": {
        "industries": ["Manufacturing", "Logistics", "Retail"],
        "titles": ["HR Director", "Head of People", "CFO"],
        "regions": ["Europe"],
        "companySize": "200-1000"
      }
    },
    "options": { "memoryMb": 1024, "timeoutSec": 1800 }
  },
  { "actor": "ultron-similarweb-bulk", "input": { "domains": ["example.com", "example.org", "example.net"] } }
];

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
    throw new Error(response.status + ": " + detail);
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

function fill(tbody, rows, render) {
  tbody.replaceChildren();
  for (const item of rows) {
    const tr = document.createElement("tr");
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
    run.counts.succeeded + "/" + run.counts.total + " actor run(s) succeeded";
  summary.className = "state state-" + run.state;
  document.getElementById("abort").disabled = run.terminal;
  fill(document.querySelector("#children tbody"), run.children, (tr, child) => {
    cell(tr, child.index);
    cell(tr, child.actor);
    cell(tr, child.state, "state state-" + child.state);
    cell(tr, child.platformStatus);
    cell(tr, child.itemsIngested);
    cell(tr, child.statusMessage);
  });
  const items = await api("GET", "/runs/" + id + "/items?limit=20");
  document.getElementById("items").textContent = items.items
    .map((item) => JSON.stringify(item.data))
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
  const accepted = await api("POST", "/runs", { workspaceId, runs: DEMO_RUNS });
  say("accepted " + accepted.runId);
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
