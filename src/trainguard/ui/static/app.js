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
    body.replaceChildren(table(["job", "phase", "roles (ready/desired, min–max)", "restarts", "hang restarts", "age"], data.jobs.map((job) => [
      el("a", { href: `#job=${encodeURIComponent(job.name)}`, class: "job-link" }, job.name),
      el("span", { class: `phase ${job.phase}` }, job.phase),
      job.roles.map((r) => `${r.name} ${r.ready}/${r.desired} (${r.min}–${r.max})`).join(", "),
      el("span", { class: "num" }, job.restarts),
      el("span", { class: "num" }, job.hang_restarts),
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
    // Detection only (a GPU job with hang handling off): "the job may be suspended", one line a pod (pages.suspended_lines).
    parts.head.append(...(job.suspended ?? []).map((line) => el("p", { class: "suspended" }, line)));
    const t = job.time;
    const causes = Object.entries(t.lost_by_cause).map(([cause, s]) => `${cause} ${s} s`).join(", ");
    parts.time.replaceChildren(el("p", { class: "quiet", id: "goodput" },
      `goodput ${t.goodput === null ? "–" : (100 * t.goodput).toFixed(1) + " %"} · ${t.lost_s} s lost to faults`,
      causes ? ` (${causes})` : "", ` over ${t.elapsed_s} s`));
    renderRoles(parts.roles, job);
    parts.conditions.replaceChildren(table(["type", "status", "reason", "message"], job.conditions.map((c) => [
      c.type, c.status, c.reason || "", c.message || ""])));
    // Restarts are relaunches; a hang restart (the hung command run again in its pod) is counted on its own,
    // as trainguard get and describe show it.
    // A live job's hot spares (trainguard.io/live-spares): each pod's spares warm and waiting, where it keeps any.
    const spares = job.pods.some((p) => p.spares !== undefined && p.spares !== null);
    parts.pods.replaceChildren(table(["pod", "role", "index", "node", "phase", "restarts", "hang restarts",
      ...(spares ? ["spares ready"] : []), "last exit", "chaos"],
      job.pods.map((p) => [p.name, p.role, p.index, p.node || "", el("span", { class: `phase ${p.phase}` }, p.phase),
        el("span", { class: "num" }, p.restarts), el("span", { class: "num" }, p.hangRestarts ?? 0),
        ...(spares ? [el("span", { class: "num spares" }, p.spares ?? "")] : []),
        [p.exitCode ?? "", p.reason ? ` ${p.reason}` : ""].join(""), chaosButtons(p)])));
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

// ---- create a job ----------------------------------------------------------------------------------------
// The form sends what was typed; the server writes the job in the dialect chosen, shows its YAML and checks it
// as trainguard validate does (trainguard.ui.create). Nothing here spells a field of any dialect.

async function showCreate() {
  if (stream) { stream.close(); stream = null; }
  document.getElementById("where").textContent = "create a job";
  const about = await (await fetch("/api/create")).json();
  const start = about.form;
  const field = (name, attrs = {}) => el("input", { name, value: start[name] ?? "", ...attrs });
  const check = (name) => el("input", { type: "checkbox", name, checked: Boolean(start[name]) });
  const inputs = {
    dialect: el("select", { name: "dialect" }, about.dialects.map((d) => el("option", { value: d.key }, d.label))),
    name: field("name", { placeholder: "a Kubernetes name", required: true }),
    namespace: field("namespace"),
    framework: el("select", { name: "framework" }, about.frameworks.map((f) => el("option", { value: f }, f))),
    image: field("image", { placeholder: "the image (Kubernetes)", class: "wide" }),
    command: field("command", { placeholder: "python train.py --epochs 10", class: "wide" }),
    working_dir: field("working_dir", { placeholder: "where it runs (optional)" }),
    auto_restart: check("auto_restart"),
    retries: field("retries", { type: "number" }),
    hang_restart: check("hang_restart"),
    hang_timeout: field("hang_timeout", { type: "number" }),
    fault_check: check("fault_check"),
    live: check("live"),
  };
  inputs.dialect.value = start.dialect;
  inputs.framework.value = start.framework;
  const roles = el("tbody");
  const addRole = (role) => roles.append(el("tr", { class: "role" },
    ["name", "replicas", "min", "max"].map((key) => el("td", {}, el("input", {
      name: `role-${key}`, value: role[key] ?? "", type: key === "name" ? "text" : "number" }))),
    el("td", {}, el("button", { type: "button", class: "remove-role", on: { click: (event) => {
      if (roles.children.length > 1) { event.target.closest("tr").remove(); refresh(); }
    } } }, "remove"))));
  start.roles.forEach(addRole);
  const readRoles = () => [...roles.children].map((row) => {
    const [name, replicas, min, max] = [...row.querySelectorAll("input")].map((input) => input.value);
    return { name, replicas, min, max };
  });
  const read = () => ({
    ...Object.fromEntries(Object.entries(inputs).map(([key, input]) => [key, input.type === "checkbox" ? input.checked : input.value])),
    roles: readRoles(),
  });
  const yaml = el("pre", { class: "yaml", id: "create-yaml" });
  const problems = el("ul", { class: "problems", id: "create-problems" });
  const notes = el("ul", { class: "quiet", id: "create-notes" });
  const verdict = el("span", { id: "create-verdict" });
  const submit = el("button", { type: "submit", id: "create-submit", disabled: !session.actions }, "Create");
  const label = (text, ...children) => el("label", {}, text, ...children);
  let dialect = about.dialects.find((d) => d.key === start.dialect);
  let asked = 0;
  async function refresh() {
    const mine = ++asked;
    const reply = await fetch(`/api/create/draft?${new URLSearchParams({ form: JSON.stringify(read()) })}`);
    const data = await reply.json();
    if (mine !== asked) return;  // an answer to an older form
    if (!reply.ok) return problems.replaceChildren(el("li", {}, data.error));
    yaml.textContent = data.yaml;
    verdict.textContent = data.valid ? `${data.kind}: valid` : `${data.kind}: not valid`;
    verdict.className = data.valid ? "verdict pass" : "verdict fail";
    problems.replaceChildren(...data.problems.map((p) => el("li", {}, p)), ...data.warnings.map((w) => el("li", { class: "warning" }, `warning: ${w}`)));
    notes.replaceChildren(...data.notes.map((n) => el("li", {}, n)));
  }
  function dialectChanged() {
    const next = about.dialects.find((d) => d.key === inputs.dialect.value);
    // The roles a job of the old dialect starts with become those of the new one; roles the user named stay.
    const names = readRoles().map((r) => r.name);
    if (names.join("\n") === dialect.roles.join("\n")) {
      [...roles.children].forEach((row, i) => { if (next.roles[i]) row.querySelector("input").value = next.roles[i]; });
    }
    if (next.framework) inputs.framework.value = next.framework;
    inputs.framework.disabled = Boolean(next.framework);
    dialect = next;
  }
  const form = el("form", { id: "create", novalidate: true, on: {
    input: () => { notice(""); refresh(); },
    change: (event) => { if (event.target === inputs.dialect) dialectChanged(); refresh(); },
    submit: async (event) => {
      event.preventDefault();
      try {
        const done = await post("/api/create", { form: read() });
        afterRoute = [done.message, true];
        location.hash = `#job=${encodeURIComponent(done.name)}`;
      } catch (error) { notice(error.message); }
    },
  } },
    el("fieldset", {}, el("legend", {}, "Job"),
      label("dialect ", inputs.dialect), label("name ", inputs.name), label("namespace ", inputs.namespace),
      label("framework ", inputs.framework)),
    el("fieldset", {}, el("legend", {}, "Roles"),
      el("table", {}, el("thead", {}, el("tr", {}, ["role", "replicas", "min", "max", ""].map((h) => el("th", {}, h)))), roles),
      el("button", { type: "button", id: "add-role", on: { click: () => { addRole({ name: "", replicas: 1 }); refresh(); } } }, "add a role")),
    el("fieldset", {}, el("legend", {}, "Container"),
      label("image ", inputs.image), label("command ", inputs.command), label("working directory ", inputs.working_dir)),
    el("fieldset", {}, el("legend", {}, "Fault tolerance"),
      label("", inputs.auto_restart, " auto restart, at most "), inputs.retries, " times (1–128)",
      el("br"),
      label("", inputs.hang_restart, " restart upon suspension, after "), inputs.hang_timeout, " s without progress",
      el("br"),
      label("", inputs.fault_check, " fault tolerance check"), label("", inputs.live, " live mode (trainguard.Live)")),
    el("div", { class: "row" }, submit, session.actions ? "" : el("span", { class: "quiet" }, "read-only: creating needs the address trainguard ui --url prints")));
  main.replaceChildren(
    el("h1", {}, "Create a job"),
    el("div", { class: "grid" },
      el("section", { id: "create-form" }, form),
      el("section", { id: "create-template" }, el("h2", {}, "YAML template ", verdict), problems, notes, yaml)));
  dialectChanged();
  refresh();
}

// ---- start -----------------------------------------------------------------------------------------------

// What the next page shows in the notice (a job just created says so on its own page).
let afterRoute = null;

function route() {
  notice(...(afterRoute || [""]));
  afterRoute = null;
  const match = location.hash.match(/^#job=(.+)$/);
  if (match) showJob(decodeURIComponent(match[1]));
  else if (location.hash === "#create") showCreate();
  else showJobs();
}

async function start() {
  session = await (await fetch("/api/session")).json();
  document.getElementById("access").textContent = `${session.backend} · ${session.actions ? "actions allowed" : "read-only"}`;
  window.addEventListener("hashchange", route);
  route();
}

start();
