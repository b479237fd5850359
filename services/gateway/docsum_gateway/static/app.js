// docsum's web page: sign in with an API key, submit files, follow a task live (SSE), read its summaries.
// Every text that comes from a user or a document (file names, titles, summaries, errors) is set with
// textContent through el(): nothing here ever parses a string as HTML.
"use strict";

const KEY = "docsum.key";
const FINAL = new Set(["COMPLETED", "COMPLETED_WITH_ERRORS", "FAILED", "CANCELLED", "EXPIRED"]);
const DOC_FINAL = new Set(["COMPLETED", "FAILED", "CANCELLED"]);
const LABELS = {
  PENDING: "Waiting", PROCESSING: "Working", PAUSED: "Paused", AWAITING_APPROVAL: "Needs approval",
  COMPLETED: "Done", COMPLETED_WITH_ERRORS: "Done, with errors", FAILED: "Failed", CANCELLED: "Cancelled",
  EXPIRED: "Expired", PARSING: "Reading", CHUNKING: "Cutting", SUMMARIZING: "Summarizing", MERGING: "Merging",
};
const KIND_TEXT = {
  "task-started": "Task started", "document-started": "Started", "document-parsed": "Read",
  "chunks-created": "Cut into parts", "chunk-summarized": "Part summarized", "chunk-failed": "Part failed",
  "document-done": "Summary ready", "document-failed": "Failed", "task-done": "Task finished",
  paused: "Paused", resumed: "Resumed", retried: "Retrying failed parts", cancelled: "Cancelled",
  expired: "Expired", "awaiting-approval": "Waiting for approval",
};

// --- small helpers ------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const $ = (id) => document.getElementById(id);
const key = () => localStorage.getItem(KEY);
const label = (status) => LABELS[status] || status;
const money = (usd) => (usd > 0 && usd < 0.01 ? "< $0.01" : "$" + (usd || 0).toFixed(2));
const pct = (n) => Math.round(n || 0) + "%";

function duration(s) {
  if (s === null || s === undefined) return "estimating…";
  if (s < 1) return "moments";
  if (s < 60) return Math.round(s) + " s";
  if (s < 3600) return Math.round(s / 60) + " min";
  return (s / 3600).toFixed(1) + " h";
}

// What a task waits for while its lines are at the provider's batch (the view's `batch`), or null.
function batchNote(batch) {
  if (!batch || batch.state !== "waiting") return null;
  const parts = [`Waiting for the provider's batch: ${batch.done} of ${batch.lines} lines done`];
  if (batch.sent_back) parts.push(`${batch.sent_back} sent back to realtime calls`);
  if (batch.submitted_at) parts.push("submitted at " + new Date(batch.submitted_at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }));
  parts.push(batch.deadline ? "deadline " + new Date(batch.deadline).toLocaleString([], { dateStyle: "medium", timeStyle: "short" }) : "no deadline");
  return parts.join(", ") + ".";
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body, extraHeaders) {
  const response = await fetch(path, {
    method, body, headers: { Authorization: "Bearer " + key(), Accept: "application/json", ...(extraHeaders || {}) },
  });
  if (response.status === 401) { signOut("Your API key was not accepted. Check it and sign in again."); throw new ApiError(401, "signed out"); }
  let data = null;
  try { data = await response.json(); } catch (_) { /* no body */ }
  if (!response.ok) {
    let detail = data && data.detail !== undefined ? data.detail : response.statusText;
    if (Array.isArray(detail)) detail = detail.map((e) => (e.loc || []).slice(1).join(".") + ": " + e.msg).join("; ");
    throw new ApiError(response.status, String(detail));
  }
  return data;
}

function documentPercent(doc) {
  if (DOC_FINAL.has(doc.status)) return 100;
  const total = doc.chunks.total;
  if (!total) return doc.text_chars !== null && doc.text_chars !== undefined ? 5 : 0;
  return 10 + 85 * (doc.chunks.done + doc.chunks.failed) / total;
}

function taskPercent(task) {
  if (FINAL.has(task.status)) return 100;
  if (!task.documents.length) return 0;
  return Math.min(99, task.documents.reduce((s, d) => s + documentPercent(d), 0) / task.documents.length);
}

// --- routing ------------------------------------------------------------------------------------

let leave = () => {};  // closes what the current view opened (its stream)

function go(path, replace) {
  if (replace) history.replaceState(null, "", path); else history.pushState(null, "", path);
  route();
}

function route() {
  leave(); leave = () => {};
  const main = $("main");
  main.replaceChildren();
  $("account").hidden = !key();
  if (!key()) return showSignIn(main);
  const match = location.pathname.match(/^\/tasks\/([0-9a-f-]{8,64})$/i);
  if (match) return showTask(main, match[1]);
  if (location.pathname === "/webhooks") return showWebhooks(main);
  return showHome(main);
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-link]");
  if (link && !event.metaKey && !event.ctrlKey && link.origin === location.origin) {
    event.preventDefault();
    go(link.pathname);
  }
});
window.addEventListener("popstate", route);

function signOut(message) {
  localStorage.removeItem(KEY);
  sessionStorage.setItem("docsum.notice", message || "");
  go("/", true);
}

// --- sign in ------------------------------------------------------------------------------------

function showSignIn(main) {
  const notice = sessionStorage.getItem("docsum.notice");
  sessionStorage.removeItem("docsum.notice");
  const input = el("input", { id: "api-key", type: "password", autocomplete: "current-password", placeholder: "Your API key", required: true });
  const problem = el("p", { class: notice ? "notice" : "notice hidden", id: "signin-error", text: notice || "" });
  const form = el("form", { class: "card stack", id: "signin", onsubmit: async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    localStorage.setItem(KEY, value);
    const response = await fetch("/v1/tasks?limit=1", { headers: { Authorization: "Bearer " + value } });
    if (!response.ok) {
      localStorage.removeItem(KEY);
      problem.textContent = response.status === 401 ? "That key was not accepted. Check it and try again." : "The service answered " + response.status + ". Try again in a moment.";
      problem.classList.remove("hidden");
      return;
    }
    go("/", true);
  } },
    el("h1", { text: "Sign in" }),
    el("p", { class: "muted", text: "docsum summarizes your documents — each one, and the whole batch. Sign in with the API key you were given." }),
    el("div", {}, el("label", { for: "api-key", text: "API key" }), input),
    problem,
    el("button", { class: "primary", type: "submit", id: "signin-button", text: "Sign in" }),
    el("p", { class: "muted small", text: "The key stays in this browser (local storage) until you sign out." }),
  );
  main.append(el("div", { class: "signin" }, form));
  input.focus();
}

// --- home: submit, your tasks -------------------------------------------------------------------

function segmented(name, choices, chosen) {
  return el("div", { class: "seg", role: "radiogroup" }, choices.map(([value, text]) =>
    el("label", {}, el("input", { type: "radio", name, value, checked: value === chosen }), el("span", { text }))));
}

// A fresh Idempotency-Key (a UUID; crypto.randomUUID only exists on https and localhost pages).
function newIdempotencyKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40; b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

function showHome(main) {
  const chosen = [];
  // The submission's Idempotency-Key: kept while the form stays as it is, so that submitting again after an
  // answer that never came (a dropped connection) gets that task instead of making a second one; a new
  // one once the gateway answered or the files or options change.
  let submissionKey = null;
  const list = el("ul", { class: "files", id: "chosen-files" });
  const submit = el("button", { class: "primary", type: "submit", id: "submit", disabled: true, text: "Summarize" });
  const problem = el("p", { class: "notice hidden", id: "submit-error" });
  const picker = el("input", { type: "file", id: "file-input", multiple: true, class: "hidden", accept: ".pdf,.docx,.pptx,.html,.htm,.epub,.txt,.md,.markdown,text/plain,text/markdown,text/html,application/pdf,application/vnd.openxmlformats-officedocument.wordprocessingml.document,application/vnd.openxmlformats-officedocument.presentationml.presentation,application/epub+zip" });
  const folder = el("input", { type: "file", id: "folder-input", multiple: true, class: "hidden", webkitdirectory: true });

  function refresh() {
    submissionKey = null;
    list.replaceChildren(...chosen.map((file, i) => el("li", {},
      el("span", { title: file.name, text: file.name }),
      el("span", { class: "row" }, el("span", { class: "muted small", text: size(file.size) }),
        el("button", { class: "link", type: "button", "aria-label": "Remove " + file.name, text: "Remove", onclick: () => { chosen.splice(i, 1); refresh(); } })))));
    submit.disabled = !chosen.length;
    submit.textContent = chosen.length ? `Summarize ${chosen.length} file${chosen.length > 1 ? "s" : ""}` : "Summarize";
  }
  function add(files) {
    for (const file of files) {
      if (/\.(pdf|docx|pptx|html?|epub|txt|md|markdown|text)$/i.test(file.name) || file.type.startsWith("text/")) chosen.push(file);
    }
    refresh();
  }
  picker.addEventListener("change", () => { add(picker.files); picker.value = ""; });
  folder.addEventListener("change", () => { add(folder.files); folder.value = ""; });

  const drop = el("div", { class: "drop", id: "drop", tabindex: 0, role: "button", onclick: () => picker.click(),
    onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); picker.click(); } },
    ondragover: (e) => { e.preventDefault(); drop.classList.add("over"); },
    ondragleave: () => drop.classList.remove("over"),
    ondrop: (e) => { e.preventDefault(); drop.classList.remove("over"); add(e.dataTransfer.files); } },
    el("strong", { text: "Drop files here, or click to choose" }),
    el("span", { class: "muted small", text: "PDF, Word (.docx), PowerPoint (.pptx), web pages (.html), e-books (.epub), text and Markdown — one summary per file, and one for them all" }));

  const form = el("form", { class: "card stack", id: "new-task", onsubmit: async (event) => {
    event.preventDefault();
    if (!chosen.length) return;
    const data = new FormData();
    for (const file of chosen) data.append("files", file, file.name);
    const fields = new FormData(form);
    for (const name of ["title", "language", "length", "style", "previous_task"]) {
      const value = (fields.get(name) || "").toString().trim();
      if (value) data.append(name, value);
    }
    data.append("strict", fields.get("strict") ? "true" : "false");
    submit.disabled = true; submit.textContent = "Uploading…"; problem.classList.add("hidden");
    const idempotencyKey = submissionKey || newIdempotencyKey();
    try {
      const created = await api("POST", "/v1/tasks", data, { "Idempotency-Key": `"${idempotencyKey}"` });
      go("/tasks/" + created.task_id);
    } catch (error) {
      if (error.status === 401) return;
      problem.textContent = "Could not submit: " + error.message; problem.classList.remove("hidden");
      refresh();
      // No answer (the connection dropped), or the first try is still being stored (409): the same key
      // again, so that a second try gets the task the first made.
      if (error.status === undefined || error.status === 409) submissionKey = idempotencyKey;
    }
  } },
    el("h1", { text: "Summarize documents" }),
    drop, picker, folder,
    el("div", { class: "row small" }, el("span", { class: "muted", text: "or" }),
      el("button", { class: "link", type: "button", id: "choose-folder", text: "choose a whole folder", onclick: () => folder.click() })),
    list,
    el("div", { class: "options" },
      el("div", {}, el("label", { for: "title", text: "Title (optional)" }), el("input", { type: "text", id: "title", name: "title", maxlength: 500, placeholder: "e.g. Q3 board papers" })),
      el("div", {}, el("label", { for: "language", text: "Summary language" }),
        el("select", { id: "language", name: "language" },
          [["", "Each document's own"], ["en", "English"], ["zh", "中文 (Chinese)"], ["es", "Español"], ["fr", "Français"], ["de", "Deutsch"], ["ja", "日本語"], ["pt", "Português"]]
            .map(([value, text]) => el("option", { value, text })))),
      el("div", {}, el("label", { for: "previous-task", text: "New version of" }),
        el("select", { id: "previous-task", name: "previous_task" }, el("option", { value: "", text: "None: new documents" }))),
      el("div", {}, el("label", { text: "Length" }), segmented("length", [["brief", "Brief"], ["standard", "Standard"], ["detailed", "Detailed"]], "standard")),
      el("div", {}, el("label", { text: "Style" }), segmented("style", [["prose", "Prose"], ["bullets", "Bullet points"]], "prose")),
    ),
    el("label", { class: "check" }, el("input", { type: "checkbox", name: "strict", id: "strict" }),
      el("span", {}, "Strict: ", el("span", { class: "muted", text: "fail a document if any part of it cannot be summarized (otherwise you get the rest, and what is missing is said)" }))),
    problem,
    el("div", { class: "row" }, submit),
  );
  form.addEventListener("change", () => { submissionKey = null; });  // other options: another request

  const tasks = el("ul", { class: "tasks", id: "task-list" }, el("li", { class: "muted", text: "Loading…" }));
  main.append(el("div", { class: "grid" }, form, el("section", { class: "card" }, el("h2", { text: "Your tasks" }), tasks)));
  refresh();
  api("GET", "/v1/tasks?limit=50").then((items) => {
    // Your tasks, to name the one these files are new versions of (matched by file name).
    $("previous-task").append(...items.map((t) => el("option", { value: t.task_id,
      text: (t.name || t.title || "Untitled task") + " — " + new Date(t.created_at).toLocaleString() })));
    tasks.replaceChildren(...(items.length ? items.map((t) => el("li", {},
      el("a", { href: "/tasks/" + t.task_id, "data-link": true },
        el("span", { class: "name" }, el("span", { text: t.name || t.title || "Untitled task" }), el("br"),
          el("span", { class: "muted small", text: new Date(t.created_at).toLocaleString() })),
        el("span", { class: "badge " + t.status, text: label(t.status) }))))
      : [el("li", { class: "muted", text: "No tasks yet. Your first summary starts on the left." })]));
  }).catch(() => {});
}

// --- webhooks -----------------------------------------------------------------------------------

// What an endpoint may be told of (the gateway's WebhookEvent), each with what it means; the task's ends
// are checked at first.
const WEBHOOK_EVENTS = [
  ["task.finished", "a task finished", true], ["task.failed", "a task failed", true],
  ["task.cancelled", "a task was cancelled", true], ["task.expired", "a task expired (idle too long)", true],
  ["task.awaiting_approval", "a task needs approval", false], ["document.failed", "a document failed", false],
];

// What a delivery came to: delivered, being tried again, or given up (after a day of tries, or deleted).
function deliveryState(d) {
  if (d.delivered_at) return ["COMPLETED", "delivered"];
  if (d.next_attempt_at) return ["PROCESSING", "trying again " + new Date(d.next_attempt_at).toLocaleTimeString()];
  return ["FAILED", "given up"];
}

function deliveryRow(hook, d, reload) {
  const [badge, state] = deliveryState(d);
  const last = d.last_error || (d.last_status ? "answered " + d.last_status : "not tried yet");
  const resend = el("button", { class: "link", type: "button", text: "Send again", onclick: async () => {
    resend.disabled = true;
    try { await api("POST", `/v1/webhooks/${hook.id}/deliveries/${encodeURIComponent(d.id)}/resend`); } catch (_) { /* shown on reload */ }
    reload();
  } });
  return el("li", { class: "delivery", "data-delivery": d.id },
    el("span", { class: "name" },
      el("span", { text: d.event_type + " " }),
      d.task_id ? el("a", { href: "/tasks/" + d.task_id, "data-link": true, text: d.task_id.slice(0, 8) }) : null,
      el("br"),
      el("span", { class: "muted small", text: `${new Date(d.created_at).toLocaleString()} · ${d.attempts} attempt${d.attempts === 1 ? "" : "s"} · ${last}` })),
    el("span", { class: "row" }, el("span", { class: "badge " + badge, text: state }), resend));
}

function webhookCard(hook) {
  const deliveries = el("ul", { class: "tasks" }, el("li", { class: "muted", text: "Loading…" }));
  function reload() {
    api("GET", `/v1/webhooks/${hook.id}/deliveries?limit=20`).then((items) => {
      deliveries.replaceChildren(...(items.length ? items.map((d) => deliveryRow(hook, d, reload))
        : [el("li", { class: "muted", text: "Nothing sent yet." })]));
    }).catch((e) => deliveries.replaceChildren(el("li", { class: "notice", text: e.message })));
  }
  reload();
  // Two presses: the first asks, the second removes (nothing more is sent to it; a new one has a new secret).
  const remove = el("button", { class: "link danger remove", type: "button", text: "Remove", onclick: async () => {
    if (remove.dataset.sure !== "yes") { remove.dataset.sure = "yes"; remove.textContent = "Remove for good?"; return; }
    remove.disabled = true;
    try { await api("DELETE", `/v1/webhooks/${hook.id}`); card.remove(); } catch (e) { deliveries.replaceChildren(el("li", { class: "notice", text: e.message })); }
  } });
  const card = el("section", { class: "card webhook", "data-webhook": hook.id },
    el("div", { class: "row spread" }, el("h2", { text: hook.url }), remove),
    el("p", { class: "muted small", text: hook.events.join(", ") + (hook.all_tasks ? " · every task" : " · the tasks that name it") }),
    deliveries);
  return card;
}

// Register an endpoint: its secret is in the gateway's answer only, so it is shown here once, as text.
function webhookForm(added) {
  const problem = el("p", { class: "notice hidden", id: "webhook-error" });
  const secret = el("div", { class: "notice info hidden", id: "webhook-secret" });
  const button = el("button", { class: "primary", type: "submit", id: "webhook-add", text: "Add endpoint" });
  const form = el("form", { class: "card stack", id: "new-webhook", onsubmit: async (event) => {
    event.preventDefault();
    const fields = new FormData(form);
    const body = JSON.stringify({
      url: (fields.get("url") || "").toString().trim(),
      events: fields.getAll("events").map(String),
      all_tasks: !fields.get("only_named"),
    });
    button.disabled = true; problem.classList.add("hidden"); secret.classList.add("hidden");
    try {
      const made = await api("POST", "/v1/webhooks", body, { "Content-Type": "application/json" });
      secret.replaceChildren(
        el("span", { text: "Its signing secret, shown this once — store it now: " }),
        el("code", { id: "webhook-secret-value", text: made.secret }));
      secret.classList.remove("hidden");
      form.reset();
      added(made);
    } catch (error) {
      if (error.status === 401) return;
      problem.textContent = "Could not add it: " + error.message; problem.classList.remove("hidden");
    } finally {
      button.disabled = false;
    }
  } },
    el("h2", { text: "Add an endpoint" }),
    el("div", {}, el("label", { for: "webhook-url", text: "URL" }),
      el("input", { type: "text", id: "webhook-url", name: "url", required: true, placeholder: "https://hooks.example.com/docsum" })),
    el("fieldset", { class: "events" }, el("legend", { text: "Tell it when" }),
      WEBHOOK_EVENTS.map(([value, text, checked]) => el("label", { class: "check" },
        el("input", { type: "checkbox", name: "events", value, checked }), el("span", { text: `${text} (${value})` })))),
    el("label", { class: "check" }, el("input", { type: "checkbox", name: "only_named", id: "webhook-only-named" }),
      el("span", { text: "Only for the tasks that name it (otherwise for all your tasks)" })),
    problem, secret, button);
  return form;
}

function showWebhooks(main) {
  const list = el("div", { id: "webhook-list" }, el("p", { class: "muted", text: "Loading…" }));
  const none = () => el("p", { class: "muted", id: "no-webhooks", text: "No webhooks yet: add one below (or with POST /v1/webhooks, see the README, Integrating)." });
  const form = webhookForm((made) => {
    const empty = $("no-webhooks");
    if (empty) empty.remove();
    list.prepend(webhookCard(made));
  });
  main.append(el("h1", { text: "Webhooks" }),
    el("p", { class: "muted small", text: "Your endpoints and their latest deliveries; each delivery is signed with its endpoint's secret (Standard Webhooks)." }),
    list, form);
  api("GET", "/v1/webhooks").then((hooks) => {
    list.replaceChildren(...(hooks.length ? hooks.map(webhookCard) : [none()]));
  }).catch((e) => list.replaceChildren(el("p", { class: "notice", text: e.message })));
}

function size(bytes) {
  if (bytes < 1024) return bytes + " B";
  if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(0) + " KB";
  return (bytes / 1024 / 1024).toFixed(1) + " MB";
}

// --- a summary's sentences and their sources ---------------------------------------------------

const UNIT_NAMES = {
  page: ["p.", "p."], paragraph: ["¶", "¶"], slide: ["slide", "slides"], section: ["section", "sections"],
  chapter: ["chapter", "chapters"], line: ["line", "lines"],
};

// Where a source is: "report.pdf, p. 3", "report.pdf, p. 3–4", "notes.docx, ¶ 12", "a.txt, lines 4–6".
function place(source, withName = true) {
  const names = UNIT_NAMES[source.unit];
  const name = withName ? source.filename : "";
  if (!names || source.page === null || source.page === undefined) return name || "source";
  const where = source.last_page > source.page ? `${names[1]} ${source.page}–${source.last_page}` : `${names[0]} ${source.page}`;
  return withName ? `${name}, ${where}` : where;
}

// Each sentence found in the summary with where its text ends: at its `at` when the text is there, else
// where it is found next; one not found is left out (its words still show, as plain text).
function anchored(summary, sentences) {
  const out = [];
  let cursor = 0;
  for (const sentence of sentences || []) {
    const text = sentence.text || "";
    let [start, end] = sentence.at || [-1, -1];
    if (!(cursor <= start && start < end && summary.slice(start, end) === text)) {
      start = text ? summary.indexOf(text, cursor) : -1;
      if (start < 0) continue;
      end = start + text.length;
    }
    out.push({ start, end, sentence });
    cursor = end;
  }
  return out;
}

// A summary as text, or, when its sentences are known, each sentence a control that opens its sources,
// followed by where they are.
function showSummary(node, summary, sentences, taskId) {
  const shown = JSON.stringify([summary || "", sentences || null]);  // the marks (sentence.change) with them
  if (node.dataset.shown === shown) return;  // re-drawn only when it changed: focus stays where it is
  node.dataset.shown = shown;
  node.replaceChildren();
  summary = summary || "";
  if (!sentences || !sentences.length) { node.textContent = summary; return; }
  let cursor = 0;
  for (const { start, end, sentence } of anchored(summary, sentences)) {
    node.append(summary.slice(cursor, start));
    const places = [...new Set(sentence.sources.map((s) => place(s, false)))];
    const note = places.join(", ") + (sentence.support === "cited" ? "" : (places.length ? " · " : "") + sentence.support);
    // In a new version: a changed or new sentence is marked, with what it was in the previous version.
    const change = sentence.change && sentence.change !== "unchanged" ? sentence.change : null;
    const marks = { "data-change": sentence.change || null, title: sentence.was ? "Was: " + sentence.was : null };
    const changed = change ? el("sup", { class: "change " + change, text: change }) : null;
    if (!sentence.sources.length) {
      node.append(...[changed, el("span", { class: "sentence " + sentence.support + (change ? " " + change : ""), "data-support": sentence.support, ...marks, text: sentence.text }),
        note ? el("sup", { class: "cite", text: note }) : null].filter(Boolean));  // append() would write "null"
    } else {
      const open = () => showSources(taskId, sentence);
      node.append(...[changed, el("span", { class: "sentence linked " + sentence.support + (change ? " " + change : ""), role: "button", tabindex: 0, "data-support": sentence.support, ...marks,
        "aria-label": "Show the source of: " + sentence.text, onclick: open,
        onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } }, sentence.text),
        el("sup", { class: "cite", text: note })].filter(Boolean));
    }
    cursor = end;
  }
  node.append(summary.slice(cursor));
}

// What a new version changed in a document's summary, before the summary: what was reused, then the changed
// sentences (each with what it was), the new ones and the previous version's that are gone.
function showChanges(node, doc) {
  const sentences = doc.sentences || [];
  const marked = doc.removed_sentences && sentences.some((s) => s.change);
  const reused = doc.reuse && (doc.previous_document_id || doc.reuse.chunk_summaries_reused || doc.reuse.merges_reused);
  node.classList.toggle("hidden", !marked && !reused);
  const shown = JSON.stringify([marked ? sentences.map((s) => [s.change, s.text, s.was]) : null, doc.removed_sentences, reused ? doc.reuse.said : null]);
  if (node.dataset.shown === shown) return;
  node.dataset.shown = shown;
  node.replaceChildren();
  if (reused) node.append(el("p", { class: "muted small reuse", text: "Reused: " + doc.reuse.said }));
  if (!marked) return;
  const changed = sentences.filter((s) => s.change === "changed");
  const added = sentences.filter((s) => s.change === "new");
  const removed = doc.removed_sentences;
  const count = (n, what) => `${n} ${what}`;
  node.append(el("h3", { text: "What changed since the previous version" }),
    el("p", { class: "muted small", text: [count(changed.length, "changed"), count(added.length, "new"), count(removed.length, "removed"),
      count(sentences.length - changed.length - added.length, "unchanged")].join(", ") }),
    el("ul", { class: "change-list" },
      changed.map((s) => el("li", { class: "changed", "data-change": "changed" }, el("span", { class: "change changed", text: "changed" }), " ", s.text,
        el("span", { class: "was muted small", text: "was: " + (s.was || "") }))),
      added.map((s) => el("li", { class: "new", "data-change": "new" }, el("span", { class: "change new", text: "new" }), " ", s.text)),
      removed.map((text) => el("li", { class: "removed", "data-change": "removed" }, el("span", { class: "change removed", text: "removed" }), " ",
        el("del", { text }))),
    ));
}

// The passages a sentence rests on, quoted from its documents' text, in a dialog (Escape or Close shuts it).
async function showSources(taskId, sentence) {
  let dialog = $("source-dialog");
  if (!dialog) {
    dialog = el("dialog", { id: "source-dialog", "aria-labelledby": "source-title" },
      el("div", { class: "top" }, el("h2", { id: "source-title", text: "Source" }),
        el("button", { type: "button", id: "source-close", text: "Close", onclick: () => dialog.close() })),
      el("p", { class: "muted small", id: "source-sentence" }),
      el("div", { id: "source-passages" }));
    dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); });  // the backdrop
    document.body.append(dialog);
  }
  const passages = $("source-passages");
  $("source-title").textContent = sentence.support === "synthesis" ? "Sources (a synthesis of them)" : sentence.support === "aligned" ? "Source (matched afterwards)" : "Source";
  $("source-sentence").textContent = "“" + sentence.text + "”";
  passages.replaceChildren(el("p", { class: "muted", text: "Loading…" }));
  if (!dialog.open) dialog.showModal();
  $("source-close").focus();
  const shown = await Promise.all(sentence.sources.slice(0, 5).map(async (source) => {
    try {
      const quoted = await api("GET", `/v1/tasks/${taskId}/documents/${source.document_id}/text?start=${source.start}&end=${source.end}`);
      return el("figure", { class: "passage" },
        el("figcaption", { class: "where", text: place(quoted) }),
        el("blockquote", { class: "quote", text: quoted.text }));
    } catch (error) {
      return el("p", { class: "notice", text: place(source) + ": " + error.message });
    }
  }));
  if (sentence.sources.length > 5) shown.push(el("p", { class: "muted small", text: `and ${sentence.sources.length - 5} more` }));
  passages.replaceChildren(...shown);
}

// --- one task, live -----------------------------------------------------------------------------

function showTask(main, taskId) {
  let task = null;
  let lastSeq = 0;
  let snapshotSeq = 0;  // the log's last entry when the snapshot was taken
  let source = null;
  let closed = false;
  let refetching = null;
  let retryTimer = null;
  const bars = new Map();  // document_id -> {bar, fill, state, chunks, summary, error, card}

  const title = el("h1", { id: "task-title", text: "Task" });
  const badge = el("span", { class: "badge", id: "task-status" });
  const fill = el("div", { id: "task-fill" });
  const bar = el("div", { class: "progress", id: "task-progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100 }, fill);
  const figures = el("div", { class: "figures", id: "task-figures" });
  const hold = el("p", { class: "notice info hidden", id: "hold" });
  const batchWait = el("p", { class: "notice info hidden", id: "batch-wait" });
  const problem = el("p", { class: "notice hidden", id: "task-error" });
  const buttons = {};
  const actions = el("div", { class: "actions" }, ["pause", "resume", "cancel", "retry"].map((action) => {
    buttons[action] = el("button", { type: "button", id: action, class: action === "cancel" ? "danger" : "", text: action[0].toUpperCase() + action.slice(1),
      onclick: () => control(action) });
    return buttons[action];
  }));
  const downloads = el("div", { class: "actions" },
    el("button", { type: "button", id: "download-json", text: "Download JSON", onclick: () => download("json") }),
    el("button", { type: "button", id: "download-md", text: "Download Markdown", onclick: () => download("md") }));
  const docs = el("div", { id: "documents" });
  const summary = el("section", { class: "card hidden", id: "task-summary-card" }, el("h2", { text: "Summary of the whole batch" }), el("p", { class: "summary", id: "task-summary" }));
  const failures = el("section", { class: "card hidden", id: "failures-card" }, el("h2", { text: "What failed, and why" }), el("ul", { class: "log", id: "failures" }));
  const log = el("ul", { class: "log", id: "activity" });

  main.append(el("div", { class: "stack" },
    el("a", { href: "/", "data-link": true, class: "small", text: "← All tasks" }),
    el("section", { class: "card stack" },
      el("div", { class: "taskhead" }, el("div", {}, title, badge), actions),
      bar, figures, hold, batchWait, problem, downloads),
    summary,
    el("section", { class: "card" }, el("h2", { text: "Documents" }), docs),
    failures,
    el("section", { class: "card" }, el("h2", { text: "Activity" }), log)));

  leave = () => { closed = true; if (source) source.close(); clearTimeout(retryTimer); };

  function renderTask() {
    title.textContent = task.name || task.title || "Untitled task";
    document.title = (task.name || task.title || "Task") + " — docsum";
    badge.className = "badge " + task.status; badge.textContent = label(task.status);
    setBar(bar, fill, taskPercent(task), task.status);
    const working = !FINAL.has(task.status) && task.estimate.remaining_chunks > 0;
    figures.replaceChildren(...[
      el("span", {}, el("b", { id: "task-percent", text: pct(taskPercent(task)) }), " done"),
      working ? el("span", {}, "Time left ", el("b", { id: "task-eta", text: duration(task.estimate.eta_s) })) : null,
      el("span", {}, "Cost so far ", el("b", { id: "task-cost", text: money(task.usage.cost_usd) })),
      task.estimate.remaining_chunks ? el("span", {}, "Still to pay ", el("b", { text: "≈ " + money(task.estimate.cost_usd) })) : null,
      el("span", {}, el("b", { text: String(task.usage.llm_calls) }), " model calls"),
      task.usage.cached_calls ? el("span", {}, el("b", { text: String(task.usage.cached_calls) }), " answered from earlier results") : null,
    ].filter(Boolean));
    hold.textContent = task.status === "AWAITING_APPROVAL" ? "This task waits for your approval: " + (task.hold_reason || "it would go over your spending limit") + ". Resume approves it; Cancel drops it." : "";
    hold.classList.toggle("hidden", task.status !== "AWAITING_APPROVAL");
    const waiting = batchNote(task.batch);
    batchWait.textContent = waiting || ""; batchWait.classList.toggle("hidden", !waiting);
    problem.textContent = task.error || ""; problem.classList.toggle("hidden", !task.error);
    const s = task.status;
    buttons.pause.disabled = !(s === "PENDING" || s === "PROCESSING");
    buttons.resume.disabled = !(s === "PAUSED" || s === "AWAITING_APPROVAL");
    buttons.cancel.disabled = FINAL.has(s);
    buttons.retry.disabled = !(s === "COMPLETED_WITH_ERRORS" || s === "FAILED");
    showSummary($("task-summary"), task.summary, task.sentences, taskId);
    summary.classList.toggle("hidden", !task.summary);
    for (const doc of task.documents) renderDocument(doc);
  }

  function renderDocument(doc) {
    let view = bars.get(doc.document_id);
    if (!view) {
      const fillDoc = el("div");
      view = {
        fill: fillDoc,
        bar: el("div", { class: "progress", role: "progressbar" }, fillDoc),
        state: el("span", { class: "badge" }),
        chunks: el("span", { class: "muted small" }),
        summary: el("p", { class: "summary" }),
        changes: el("div", { class: "changes hidden" }),
        error: el("p", { class: "error hidden" }),
        name: el("span", { class: "fname" }),
      };
      view.card = el("article", { class: "doc", "data-document": doc.document_id },
        el("div", { class: "top" }, view.name, view.state), view.bar,
        el("div", { class: "figures" }, view.chunks), view.error, view.changes, view.summary);
      bars.set(doc.document_id, view);
      docs.append(view.card);
    }
    view.name.textContent = doc.filename;
    if (doc.filename !== undefined) view.filename = doc.filename;
    view.state.className = "badge " + doc.status; view.state.textContent = label(doc.status);
    setBar(view.bar, view.fill, doc.percent !== undefined ? doc.percent : documentPercent(doc), doc.status);
    const c = doc.chunks;
    view.chunks.textContent = c.total ? `${c.done} of ${c.total} part${c.total > 1 ? "s" : ""} summarized` + (c.failed ? `, ${c.failed} failed` : "") : (doc.status === "FAILED" ? "" : "Reading…");
    if (doc.summary !== undefined) showSummary(view.summary, doc.summary, doc.sentences, taskId);
    if (doc.sentences !== undefined) showChanges(view.changes, doc);
    if (doc.error !== undefined) { view.error.textContent = doc.error || ""; view.error.classList.toggle("hidden", !doc.error); }
  }

  function setBar(barNode, fillNode, percent, status) {
    fillNode.style.width = Math.max(0, Math.min(100, percent)) + "%";
    barNode.setAttribute("aria-valuenow", String(Math.round(percent)));
    barNode.classList.toggle("done", status === "COMPLETED");
    barNode.classList.toggle("bad", status === "FAILED" || status === "CANCELLED" || status === "EXPIRED" || status === "COMPLETED_WITH_ERRORS");
    barNode.classList.toggle("held", status === "PAUSED" || status === "AWAITING_APPROVAL");
  }

  function applyEntry(entry) {
    lastSeq = Math.max(lastSeq, entry.seq);
    const name = entry.document_id && bars.get(entry.document_id) ? bars.get(entry.document_id).filename : entry.filename;
    const what = (entry.reading || KIND_TEXT[entry.kind] || entry.kind) + (name ? " — " + name : "") + (entry.chunk_index !== undefined ? " (part " + (entry.chunk_index + 1) + ")" : "");
    log.prepend(el("li", { "data-seq": entry.seq, text: `#${entry.seq} ${what} · ${pct(entry.percent)}` }));
    while (log.children.length > 200) log.lastElementChild.remove();
    if (!task || entry.seq <= snapshotSeq) return;  // already in the snapshot: history for the activity list only
    task.status = entry.status;
    task.usage = entry.usage; task.estimate = entry.estimate;
    for (const d of entry.documents || []) {  // only the documents this step changed: the rest stay as they are
      const doc = task.documents.find((x) => x.document_id === d.document_id);
      if (doc) { doc.status = d.status; doc.chunks = d.chunks; }
    }
    renderTask();
    setBar(bar, fill, entry.percent, entry.status);
    $("task-percent").textContent = pct(entry.percent);
    for (const d of entry.documents || []) { const v = bars.get(d.document_id); if (v) setBar(v.bar, v.fill, d.percent, d.status); }
    if (/done|failed|cancelled|expired|task-done|paused|resumed|retried/.test(entry.kind)) refetch();
  }

  function refetch() {  // summaries and errors are not in the stream: read the task again, once per burst
    if (refetching) return;
    refetching = setTimeout(async () => {
      refetching = null;
      try { task = await api("GET", "/v1/tasks/" + taskId); renderTask(); loadFailures(); } catch (_) { /* next event retries */ }
    }, 250);
  }

  async function loadFailures() {
    const listed = await api("GET", `/v1/tasks/${taskId}/failures`);
    $("failures").replaceChildren(...listed.map((f) => el("li", {},
      el("b", { text: f.filename }), f.chunk_index === null ? " — the whole document: " : ` — part ${f.chunk_index + 1}: `,
      el("span", { class: "error", text: f.error || "unknown error" }))));
    failures.classList.toggle("hidden", !listed.length);
  }

  async function connect() {
    if (closed) return;
    let ticket;
    try { ticket = (await api("POST", `/v1/tasks/${taskId}/ticket`)).ticket; }
    catch (error) { if (error.status === 404) return notFound(); retryTimer = setTimeout(connect, 2000); return; }
    const url = `/v1/tasks/${taskId}/events?ticket=${encodeURIComponent(ticket)}&after=${lastSeq}`;
    source = new EventSource(url);
    source.addEventListener("snapshot", (event) => {
      task = JSON.parse(event.data);
      snapshotSeq = task.progress_seq || 0;
      renderTask();
      loadFailures().catch(() => {});
    });
    source.addEventListener("progress", (event) => applyEntry(JSON.parse(event.data)));
    source.addEventListener("revoked", (event) => {  // the key behind the stream was revoked: do not reconnect
      closed = true;
      source.close();
      problem.textContent = JSON.parse(event.data).detail + ". Sign in again with a valid key.";
      problem.classList.remove("hidden");
    });
    source.onerror = () => {  // the end of the stream, or a drop: a ticket is good once, so ask anew
      source.close();
      if (closed || (task && FINAL.has(task.status))) { refetch(); return; }
      retryTimer = setTimeout(connect, 1000);
    };
  }

  function notFound() {
    main.replaceChildren(el("div", { class: "card center" }, el("h1", { text: "No such task" }),
      el("p", { class: "muted", text: "It does not exist, or it belongs to another account." }),
      el("a", { href: "/", "data-link": true, text: "Back to your tasks" })));
  }

  async function control(action) {
    if (action === "cancel" && !confirm("Cancel this task for good? Work done so far is kept.")) return;
    buttons[action].disabled = true;
    try { await api("POST", `/v1/tasks/${taskId}/${action}`); problem.classList.add("hidden"); }
    catch (error) { problem.textContent = error.message; problem.classList.remove("hidden"); }
    refetch();
    if (action === "retry" || action === "resume") { if (source) source.close(); clearTimeout(retryTimer); connect(); }
  }

  function download(format) {
    if (!task) return;
    const result = asJson(task);
    const name = "docsum-" + (task.title || task.task_id).replace(/[^\w.-]+/g, "-").slice(0, 60);
    const blob = format === "json"
      ? new Blob([JSON.stringify(result, null, 2)], { type: "application/json" })
      : new Blob([asMarkdown(task)], { type: "text/markdown" });
    const link = el("a", { href: URL.createObjectURL(blob), download: name + (format === "json" ? ".json" : ".md") });
    document.body.append(link); link.click(); link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }

  connect();
}

// The result as `docsum summarize --json` prints it: what task-finished carries, and each summary's sentences.
function asJson(task) {
  const pick = (o, keys) => Object.fromEntries(keys.map((k) => [k, o[k] === undefined ? null : o[k]]));
  const result = pick(task, ["task_id", "status", "updated_at", "summary", "error", "truncated", "llm", "usage", "recovery", "sentences"]);
  result.documents = task.documents.map((d) => pick(d, ["document_id", "filename", "status", "summary", "error", "truncated", "chunks", "sentences"]));
  return result;
}

// What a model or a person wrote, as Markdown text that shows it as it is: a backslash before each character
// that could start an image (a fetch to anyone's server when the file is viewed), a link, HTML, an entity, a
// heading or a code span (CommonMark shows any escaped ASCII punctuation as itself), and before a line of
// dashes (under a line of text it would make that line a heading). Emphasis and list markers stay: they
// are the summary's own formatting and lead nowhere.
function mdText(text) {
  return String(text).replace(/[\\`[\]<>!#&|~=]/g, "\\$&").replace(/^( {0,3})(-+[ \t]*)$/gm, "$1\\$2");
}

// The same for a one-line place (a title, a file name, an error): its line breaks become spaces, so it
// cannot start a block of its own.
const mdLine = (text) => mdText(String(text).replace(/[\r\n]+/g, " "));

// The summaries as Markdown: each sentence with sources followed by a footnote (`text[^1]`), the notes
// (`[^1]: report.pdf, p. 3`) after its summary, numbered through the whole file. Every text in it that a
// model or a person wrote goes through mdText or mdLine.
function asMarkdown(task) {
  const lines = [`# ${task.title ? mdLine(task.title) : "docsum summary"}`, "", `Status: ${label(task.status)}`, ""];
  let numbered = 0;
  const cited = (summary, sentences) => {
    const notes = [];
    let text = "", cursor = 0;
    for (const { end, sentence } of anchored(summary, sentences)) {
      const places = [...new Set(sentence.sources.map((s) => place(s)))];
      let marker = "";
      if (places.length) {
        numbered += 1;
        marker = `[^${numbered}]`;
        notes.push(`[^${numbered}]: ${mdLine(places.join("; "))}${sentence.support === "cited" ? "" : ` (${sentence.support})`}`);
      } else if (sentence.support === "synthesis" || sentence.support === "unsupported") marker = ` (${sentence.support})`;
      text += mdText(summary.slice(cursor, end)) + marker;
      cursor = end;
    }
    text += mdText(summary.slice(cursor));
    return notes.length ? [text, "", ...notes] : [text];
  };
  if (task.summary) lines.push("## Summary", "", ...cited(task.summary, task.sentences), "");
  for (const d of task.documents) {
    lines.push(`## ${mdLine(d.filename)}`, "", ...(d.summary ? cited(d.summary, d.sentences) : [d.error ? `_Failed: ${mdLine(d.error)}_` : "_No summary_"]), "");
  }
  return lines.join("\n");
}

document.addEventListener("DOMContentLoaded", () => {
  $("sign-out").addEventListener("click", () => signOut(""));
  route();
});
