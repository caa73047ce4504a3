// trainguard's job pages: the jobs list (#), and a job (#job=<name>), kept up to date by server-sent events.
// Every value from the server goes in as text (textContent), never as markup.

import { drawTimeline } from "./timeline.js";

const main = document.getElementById("main");
// The history entries the job page's table lists.
const HISTORY_KINDS = ["fault", "release", "reformed", "isolate", "straggler"];
let session = { actions: false, token: null, chaos: [], backend: "" };
let stream = null;

function el(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "on") for (const [event, handler] of Object.entries(value)) element.addEventListener(event, handler);
    else if (value === true) element.setAttribute(key, "");
    else if (value !== false && value !== null && value !== undefined) element.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    element.append(child instanceof Node ? child : document.createTextNode(child === null || child === undefined ? "" : String(child)));
  }
  return element;
}

function table(headers, rows) {
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c))))));
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "";
  if (seconds < 120) return `${Math.round(seconds)}s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

function when(epoch) {
  return epoch ? new Date(epoch * 1000).toLocaleTimeString() : "";
}

function notice(message, ok = false) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.className = ok ? "ok" : "";
  box.hidden = !message;
}

async function post(path, body) {
  const answer = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Trainguard-Token": session.token || "" },
    body: JSON.stringify(body),
  });
  const data = await answer.json();
  if (!answer.ok) throw new Error(data.error || `${answer.status}`);
  return data;
}

function listen(path, render) {
  if (stream) stream.close();
  stream = new EventSource(path);
  stream.onmessage = (message) => {
    const data = JSON.parse(message.data);
    if (data.error) notice(data.error);
    else render(data);
  };
}

// ---- the jobs --------------------------------------------------------------------------------------------

function showJobs() {
  document.getElementById("where").textContent = "jobs";
  const body = el("section", { id: "jobs" }, el("p", { class: "quiet" }, "No jobs yet."));
  main.replaceChildren(el("h1", {}, "Jobs"), body);
  listen("/api/stream", (data) => {
    if (!data.jobs.length) return body.replaceChildren(el("p", { class: "quiet" }, "No jobs yet."));
    body.replaceChildren(table(["job", "phase", "roles (ready/desired, min–max)", "restarts", "age"], data.jobs.map((job) => [
      el("a", { href: `#job=${encodeURIComponent(job.name)}`, class: "job-link" }, job.name),
      el("span", { class: `phase ${job.phase}` }, job.phase),
      job.roles.map((r) => `${r.name} ${r.ready}/${r.desired} (${r.min}–${r.max})`).join(", "),
      el("span", { class: "num" }, job.restarts),
      age(job.age_s),
    ])));
  });
}

// ---- a job -----------------------------------------------------------------------------------------------

function showJob(name) {
  document.getElementById("where").textContent = `job ${name}`;
  const parts = {
    head: el("div"), roles: el("div"), conditions: el("div"), pods: el("div"), timeline: el("div"),
    history: el("div"), events: el("div"), time: el("div"), check: el("div"),
  };
  const whatif = whatIfForm(name);
  const logs = logsPanel(name);
  main.replaceChildren(
    el("section", { id: "summary" }, parts.head, parts.time),
    el("section", { id: "roles" }, el("h2", {}, "Roles"), parts.roles),
    el("section", { id: "pods" }, el("h2", {}, "Pods"), parts.pods),
    el("section", { id: "timeline" }, el("h2", {}, "Fault timeline"), parts.timeline),
    el("section", { id: "history" }, el("h2", {}, "Fault-recovery history"), parts.history),
    el("section", { id: "faultcheck" }, el("h2", {}, "Fault tolerance check"), parts.check),
    el("div", { class: "grid" },
      el("section", { id: "whatif" }, el("h2", {}, "What if"), whatif.form, whatif.answer),
      el("section", { id: "conditions" }, el("h2", {}, "Conditions"), parts.conditions)),
    el("section", { id: "logs" }, el("h2", {}, "Log"), logs.form, logs.output),
    el("section", { id: "events" }, el("h2", {}, "Events"), parts.events),
  );
  listen(`/api/stream?job=${encodeURIComponent(name)}`, ({ job }) => {
    parts.head.replaceChildren(el("h1", {}, job.job, job.name !== job.job ? el("span", { class: "quiet" }, ` (${job.namespace})`) : "", " ", el("span", { class: `phase ${job.phase}`, id: "phase" }, job.phase)));
    const t = job.time;
    const causes = Object.entries(t.lost_by_cause).map(([cause, s]) => `${cause} ${s} s`).join(", ");
    parts.time.replaceChildren(el("p", { class: "quiet", id: "goodput" },
      `goodput ${t.goodput === null ? "–" : (100 * t.goodput).toFixed(1) + " %"} · ${t.lost_s} s lost to faults`,
      causes ? ` (${causes})` : "", ` over ${t.elapsed_s} s`));
    renderRoles(parts.roles, job);
    parts.conditions.replaceChildren(table(["type", "status", "reason", "message"], job.conditions.map((c) => [
      c.type, c.status, c.reason || "", c.message || ""])));
    parts.pods.replaceChildren(table(["pod", "role", "index", "node", "phase", "restarts", "last exit", "chaos"],
      job.pods.map((p) => [p.name, p.role, p.index, p.node || "", el("span", { class: `phase ${p.phase}` }, p.phase),
        el("span", { class: "num" }, p.restarts), [p.exitCode ?? "", p.reason ? ` ${p.reason}` : ""].join(""),
        chaosButtons(p)])));
    parts.timeline.replaceChildren(drawTimeline(job.timeline));
    parts.history.replaceChildren(table(
      ["time", "pod", "node", "fault", "rule", "action", "counted", "recovery", "reason"],
      // Faults, the releases of a lost Horovod host's survivors and the live re-formations (kinds of their own:
      // what was done beside the faults); the action as the server words it (pages.history_label).
      job.history.filter((h) => HISTORY_KINDS.includes(h.kind)).reverse().map((h) => {
        const took = h.kind === "reformed" ? h.reformation?.seconds : h.recoverySeconds;
        return [when(h.at), h.pod || "", h.node || "", [h.fault, h.exitCode ?? ""].join(" ").trim(), h.rule || "",
          el("span", { class: `action ${h.kind}` }, h.label || h.action || ""), h.counted ? "yes" : "no",
          took === null || took === undefined ? "" : `${took.toFixed(1)} s`, h.reason || ""];
      })));
    // The fault tolerance check: the nodes isolated, the pods issued again, each node's latest check.
    const fc = job.fault_check;
    parts.check.replaceChildren(...(fc === null ? [el("p", { class: "quiet" }, "no check reported: off, or no pod has checked its node yet")] : [
      el("p", { id: "isolated" }, `isolated: ${fc.isolated.length ? fc.isolated.join(", ") : "none"} · issued again: ${fc.reissues}`),
      ...(fc.slow_link ? [el("p", { id: "slow-link" }, fc.slow_link)] : []),
      table(["node", "pod", "check", "verdict", "at", "items"], fc.nodes.map((n) => [n.node || "", n.pod || "", n.phase,
        el("span", { class: `verdict ${n.verdict}` }, n.verdict), when(n.at),
        n.failed.length ? n.failed.map((f) => `${f.name}=${f.value ?? "?"} (threshold ${f.threshold ?? "?"})`).join(", ") : `${n.items} items passed`])),
    ]));
    parts.events.replaceChildren(table(["time", "type", "reason", "object", "message"],
      job.events.slice().reverse().map((e) => [when(e.time), e.type, e.reason, e.object, e.message])));
    whatif.pods(job.pods.map((p) => p.name));
    logs.pods(job.pods.map((p) => p.name));
  });
}

// The roles' table is built once (its scale forms keep what the user typed); its figures change in place.
function renderRoles(container, job) {
  const names = job.roles.map((r) => r.name).join("\n");
  if (container.dataset.names !== names) {
    container.cells = new Map();
    const rows = job.roles.map((r) => {
      const cells = { ready: el("span", { class: "num" }), range: el("span", { class: "num" }) };
      container.cells.set(r.name, cells);
      return [r.name, cells.ready, cells.range, scaleForm(job.name, r)];
    });
    container.replaceChildren(table(["role", "ready/desired", "min–max", "scale"], rows));
    container.dataset.names = names;
  }
  for (const r of job.roles) {
    const cells = container.cells.get(r.name);
    cells.ready.textContent = `${r.ready}/${r.desired}`;
    cells.range.textContent = `${r.min}–${r.max}`;
  }
}

function scaleForm(job, role) {
  const input = el("input", { type: "number", value: role.desired, name: `replicas-${role.name}`, disabled: !session.actions });
  const button = el("button", { type: "submit", disabled: !session.actions }, "Scale");
  return el("form", { class: "scale", "data-role": role.name, on: { submit: async (event) => {
    event.preventDefault();
    try {
      await post(`/api/jobs/${encodeURIComponent(job)}/scale`, { role: role.name, replicas: Number(input.value) });
      notice(`${job}: ${role.name} scaled to ${input.value}`, true);
    } catch (error) { notice(error.message); }
  } } }, input, button);
}

function chaosButtons(pod) {
  if (!session.actions || !session.chaos.length) return "";
  const pick = (action, target) => async () => {
    try { notice((await post("/api/chaos", { action, target })).message, true); } catch (error) { notice(error.message); }
  };
  const buttons = ["kill", "hang", "force-delete"].filter((a) => session.chaos.includes(a))
    .map((a) => el("button", { type: "button", "data-chaos": a, on: { click: pick(a, pod.name) } }, a));
  if (pod.node && session.chaos.includes("node-down")) {
    buttons.push(el("button", { type: "button", "data-chaos": "node-down", on: { click: pick("node-down", pod.node) } }, `${pod.node} down`));
  }
  return el("span", { class: "row" }, buttons);
}

function keepOptions(select, names) {
  const before = select.value;
  const now = [...select.options].map((o) => o.value);
  if (now.join("\n") === names.join("\n")) return;
  select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  if (names.includes(before)) select.value = before;
}

function whatIfForm(job) {
  const pod = el("select", { name: "pod" });
  const fault = el("select", { name: "fault" },
    el("option", { value: "code" }, "exit code"),
    ["Hang", "NodeNotReady", "PodForceDeleted", "PodEvicted", "OOMKilled", "StartTimeout"].map((f) => el("option", { value: f }, f)));
  const code = el("input", { type: "number", name: "exit-code", value: 137, min: 0, max: 255 });
  const answer = el("dl", { class: "answer", id: "whatif-answer" });
  const form = el("form", { on: { submit: async (event) => {
    event.preventDefault();
    const which = fault.value === "code" ? code.value : fault.value;
    const query = new URLSearchParams({ pod: pod.value, fault: which });
    const reply = await fetch(`/api/jobs/${encodeURIComponent(job)}/whatif?${query}`);
    const data = await reply.json();
    if (!reply.ok) return answer.replaceChildren(el("dt", {}, "error"), el("dd", {}, data.error));
    answer.replaceChildren(...[["action", data.action], ["scope", data.scope || "–"], ["rule", data.rule_text],
      ["counted", data.counted ? "yes" : "no"], ["reason", data.reason]]
      .flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-field": k }, v)]));
  } } }, "pod", pod, "fault", fault, code, el("button", { type: "submit" }, "What would happen?"));
  return { form, answer, pods: (names) => keepOptions(pod, names) };
}

function logsPanel(job) {
  const pod = el("select", { name: "log-pod" });
  const output = el("pre", { class: "log", id: "log" });
  const form = el("form", { on: { submit: async (event) => {
    event.preventDefault();
    const reply = await fetch(`/api/jobs/${encodeURIComponent(job)}/logs?${new URLSearchParams({ pod: pod.value, lines: 200 })}`);
    const data = await reply.json();
    output.textContent = reply.ok ? data.lines.join("\n") : data.error;
  } } }, "pod", pod, el("button", { type: "submit" }, "Last lines"));
  return { form, output, pods: (names) => keepOptions(pod, names) };
}

// ---- start -----------------------------------------------------------------------------------------------

function route() {
  notice("");
  const match = location.hash.match(/^#job=(.+)$/);
  if (match) showJob(decodeURIComponent(match[1]));
  else showJobs();
}

async function start() {
  session = await (await fetch("/api/session")).json();
  document.getElementById("access").textContent = `${session.backend} · ${session.actions ? "actions allowed" : "read-only"}`;
  window.addEventListener("hashchange", route);
  route();
}

start();
