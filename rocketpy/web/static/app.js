// rocketpy dashboard: plain JavaScript, no library. Every page reads the JSON API under /api/
// (doc/dashboard.md) and builds its DOM with h(), which only ever sets text (never HTML).
"use strict";

const main = document.getElementById("main");
const POLL_MS = 5000;
const HISTORY = 60;   // chart points kept (5 minutes at 5 s)
const tps = [];       // {t, put, get}: the overview's TPS samples, kept while the page is open
let writes = false;
let timer = null;
let nav = 0;          // counts page changes: an answer for an earlier page is dropped

class Stale extends Error {}

// ---- helpers ----

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, body) {
  const page = nav;
  const init = body === undefined ? {} :
    {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  // origin + path: the account of a page opened as key:secret@host must not go into the fetch URL
  const response = await fetch(new URL("api/" + path, location.origin + location.pathname), init);
  const data = await response.json();
  if (page !== nav) throw new Stale();  // the user went elsewhere meanwhile
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

const enc = encodeURIComponent;
const num = (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString());
const rate = (n) => (n || 0).toFixed(2);
const time = (ms) => (ms > 0 ? new Date(ms).toLocaleString() : "-");
const link = (href, text) => h("a", {href}, text);

function duration(s) {
  if (s === null || s === undefined) return "-";
  const d = Math.floor(s / 86400), hr = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
  return d ? `${d}d ${hr}h` : hr ? `${hr}h ${m}m` : `${m}m ${s % 60}s`;
}

// A table: columns are [header, cell(row), "num"?]; id names it for tests and links.
function table(id, columns, rows, empty) {
  if (!rows.length) return h("p", {id, class: "muted"}, empty || "None.");
  return h("table", {id},
    h("thead", {}, h("tr", {}, columns.map(([title, , cls]) => h("th", {class: cls}, title)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, columns.map(([, cell, cls]) => h("td", {class: cls}, cell(r)))))));
}

function show(...nodes) {
  main.replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined));
}

function failed(error) {
  return h("p", {class: "error"}, error.message);
}

// Local date-time input value <-> ms since the epoch.
function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 16);
}
const inputMs = (text) => (text ? new Date(text).getTime() : null);

function params() {
  const q = location.hash.split("?")[1] || "";
  return new URLSearchParams(q);
}

// ---- overview ----

function drawChart(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, ht = canvas.clientHeight;
  canvas.width = w * ratio; canvas.height = ht * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  const pad = 34, max = Math.max(1, ...tps.map((p) => Math.max(p.put, p.get)));
  const style = getComputedStyle(document.documentElement);
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = "#6b7385"; g.strokeStyle = "#dde1e8";
  for (let i = 0; i <= 4; i++) {
    const y = 8 + (ht - 24) * i / 4;
    g.beginPath(); g.moveTo(pad, y); g.lineTo(w - 6, y); g.stroke();
    g.fillText((max * (4 - i) / 4).toFixed(max < 8 ? 1 : 0), 2, y + 4);
  }
  const x = (i) => pad + (w - pad - 6) * i / Math.max(1, HISTORY - 1);
  const y = (v) => 8 + (ht - 24) * (1 - v / max);
  for (const [key, color] of [["put", "--put"], ["get", "--get"]]) {
    g.strokeStyle = style.getPropertyValue(color).trim(); g.lineWidth = 2;
    g.beginPath();
    tps.forEach((p, i) => (i ? g.lineTo : g.moveTo).call(g, x(HISTORY - tps.length + i), y(p[key])));
    g.stroke();
  }
  g.fillStyle = "#6b7385";
  g.fillText(`last ${Math.round(HISTORY * POLL_MS / 60000)} min, every ${POLL_MS / 1000} s`, pad, ht - 4);
}

async function overview() {
  const data = await api("overview");
  tps.push({t: data.now_ms, put: data.put_tps, get: data.get_tps});
  if (tps.length > HISTORY) tps.shift();
  const masters = data.brokers.filter((b) => b.broker_id === 0);
  const canvas = h("canvas", {id: "tps-chart", width: 800, height: 200});
  show(
    h("h2", {}, "Overview"),
    h("div", {class: "cards"},
      h("div", {class: "card"}, "TPS in", h("b", {id: "tps-in"}, rate(data.put_tps))),
      h("div", {class: "card"}, "TPS out", h("b", {id: "tps-out"}, rate(data.get_tps))),
      h("div", {class: "card"}, "Brokers", h("b", {}, `${masters.length} / ${data.brokers.length}`)),
      h("div", {class: "card", title: "msgPutTotalTodayNow of the masters"}, "Messages put", h("b", {}, num(masters.reduce((s, b) => s + b.put_today, 0))))),
    h("div", {class: "legend"}, h("span", {class: "put"}, "in (messages stored/s)"),
      h("span", {class: "get"}, "out (messages pulled/s)")),
    canvas,
    h("h3", {}, "Brokers"),
    table("brokers-table", [
      ["Cluster", (b) => b.cluster], ["Broker", (b) => b.broker_name], ["ID", (b) => b.broker_id, "num"],
      ["Address", (b) => b.addr], ["Role", (b) => b.role], ["Version", (b) => b.version],
      ["Uptime", (b) => duration(b.uptime_s)], ["Disk", (b) => `${(b.disk_ratio * 100).toFixed(1)} %`, "num"],
      ["TPS in", (b) => rate(b.put_tps), "num"], ["TPS out", (b) => rate(b.get_tps), "num"],
      ["Commit log", (b) => num(b.commit_log_max_offset), "num"],
      ["Status", (b) => (b.error ? h("span", {class: "error"}, b.error) : h("span", {class: "ok"}, "up"))],
    ], data.brokers));
  drawChart(canvas);
}

// ---- topics ----

function createTopicForm() {
  if (!writes) return null;
  const form = h("form", {id: "create-topic"},
    h("label", {}, "New topic", h("input", {name: "topic", required: true})),
    h("label", {}, "Read queues", h("input", {name: "read", type: "number", value: 8, min: 1})),
    h("label", {}, "Write queues", h("input", {name: "write", type: "number", value: 8, min: 1})),
    h("button", {}, "Create"), h("span", {class: "result"}));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = form.elements;
    try {
      const r = await api("topics", {topic: f.topic.value, read_queue_nums: +f.read.value,
                                     write_queue_nums: +f.write.value});
      form.querySelector(".result").textContent = `created on ${r.brokers.join(", ")}`;
    } catch (err) { form.querySelector(".result").textContent = err.message; }
  });
  return form;
}

async function topics() {
  const data = await api("topics");
  const all = params().get("system") === "1";
  const rows = data.filter((t) => all || !t.system);
  show(h("h2", {}, "Topics"), createTopicForm(),
    h("p", {}, link(all ? "#/topics" : "#/topics?system=1", all ? "hide system topics" : "show system topics")),
    table("topics-table", [
      ["Topic", (t) => link(`#/topic/${enc(t.topic)}`, t.topic)], ["Messages", (t) => num(t.messages), "num"],
      ["TPS", (t) => rate(t.put_tps), "num"],
      ["Queues", (t) => t.queues, "num"], ["Cluster", (t) => t.clusters.join(", ")],
      ["Consumer groups", (t) => t.groups.map((g, i) => [i ? ", " : "", link(`#/group/${enc(g)}`, g)])],
    ], rows, "No topics."));
}

async function topic(name) {
  const t = await api(`topics/${enc(name)}`);
  const perms = (p) => `${p & 4 ? "R" : "-"}${p & 2 ? "W" : "-"}`;
  show(h("h2", {}, `Topic ${t.topic}`),
    h("p", {}, `${num(t.messages)} messages held, ${rate(t.put_tps)} stored per second (last minute). `,
      link(`#/messages?topic=${enc(t.topic)}`, "Browse messages")),
    h("h3", {}, "Consumer groups"),
    table("topic-groups", [["Group", (g) => link(`#/group/${enc(g.group)}`, g.group)],
      ["Lag", (g) => h("span", {class: g.lag ? "lag" : ""}, num(g.lag)), "num"],
      ["TPS", (g) => rate(g.consume_tps), "num"]], t.groups, "No group consumes it."),
    h("h3", {}, "Queues"),
    table("topic-queues", [["Broker", (q) => q.broker_name], ["Queue", (q) => q.queue_id, "num"],
      ["Min offset", (q) => num(q.min_offset), "num"], ["Max offset", (q) => num(q.max_offset), "num"],
      ["Last updated", (q) => time(q.last_update_timestamp)]], t.queues),
    h("h3", {}, "Route"),
    table("topic-route", [["Broker", (q) => q.broker_name], ["Read queues", (q) => q.read_queue_nums, "num"],
      ["Write queues", (q) => q.write_queue_nums, "num"], ["Perm", (q) => perms(q.perm)],
      ["Addresses", (q) => Object.entries((t.route.broker_datas.find((b) => b.broker_name === q.broker_name)
        || {broker_addrs: {}}).broker_addrs).map(([id, a]) => `${id}: ${a}`).join(", ")]],
    t.route.queue_datas),
    t.route.order_topic_conf ? h("p", {}, `Order conf: ${t.route.order_topic_conf}`) : null);
}

// ---- consumer groups ----

async function groups() {
  const data = await api("groups");
  show(h("h2", {}, "Consumer groups"),
    table("groups-table", [["Group", (g) => link(`#/group/${enc(g.group)}`, g.group)],
      ["Clients", (g) => g.clients, "num"], ["Version", (g) => g.version ?? "-"],
      ["Type", (g) => g.consume_type || "-"], ["Model", (g) => g.message_model || "-"],
      ["TPS", (g) => rate(g.consume_tps), "num"],
      ["Lag", (g) => h("span", {class: g.total_lag ? "lag" : ""}, num(g.total_lag)), "num"]],
    data, "No consumer group."));
}

function resetForm(group, topics) {
  if (!writes || !topics.length) return null;
  const form = h("form", {id: "reset-offsets"},
    h("label", {}, "Topic", h("select", {name: "topic"}, topics.map((t) => h("option", {}, t)))),
    h("label", {}, "To messages stored from", h("input", {name: "at", type: "datetime-local",
      value: localInput(Date.now() - 3600000)})),
    h("button", {}, "Reset offsets"), h("span", {class: "result"}));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await api(`groups/${enc(group)}/reset`,
        {topic: form.elements.topic.value, timestamp: inputMs(form.elements.at.value)});
      form.querySelector(".result").textContent = `${r.length} queues moved`;
    } catch (err) { form.querySelector(".result").textContent = err.message; }
  });
  return form;
}

async function group(name) {
  const withClients = params().get("clients") === "1";
  const g = await api(`groups/${enc(name)}${withClients ? "?clients=1" : ""}`);
  const conn = g.connection;
  const topicsOf = [...new Set(g.queues.map((q) => q.topic))].filter((t) => !t.startsWith("%RETRY%"));
  show(h("h2", {}, `Consumer group ${g.group}`),
    h("div", {class: "cards"},
      h("div", {class: "card"}, "Lag", h("b", {id: "group-lag", class: g.total_lag ? "lag" : ""}, num(g.total_lag))),
      h("div", {class: "card"}, "TPS", h("b", {}, rate(g.consume_tps))),
      h("div", {class: "card"}, "Online clients", h("b", {}, conn ? conn.connections.length : 0))),
    h("p", {}, link(`#/dlq?group=${enc(g.group)}`, "Dead letters"), " · ",
      withClients ? link(`#/group/${enc(g.group)}`, "hide queue holders")
        : link(`#/group/${enc(g.group)}?clients=1`, "which client holds each queue")),
    h("h3", {}, "Members"),
    table("group-members", [["Client ID", (c) => c.client_id], ["Address", (c) => c.client_addr],
      ["Language", (c) => c.language], ["Version", (c) => c.version, "num"]],
      conn ? conn.connections : [], "No client online."),
    conn ? h("p", {class: "muted"}, `${conn.consume_type} · ${conn.message_model} · ${conn.consume_from_where}`) : null,
    h("h3", {}, "Subscriptions"),
    table("group-subscriptions", [["Topic", ([t]) => t], ["Expression", ([, e]) => e]],
      conn ? Object.entries(conn.subscriptions) : [], "Unknown while no client is online."),
    h("h3", {}, "Progress per queue"),
    resetForm(g.group, topicsOf),
    table("group-queues", [["Topic", (q) => q.topic], ["Broker", (q) => q.broker_name],
      ["Queue", (q) => q.queue_id, "num"], ["Broker offset", (q) => num(q.broker_offset), "num"],
      ["Consumer offset", (q) => num(q.consumer_offset), "num"],
      ["Lag", (q) => h("span", {class: q.lag ? "lag" : ""}, num(q.lag)), "num"],
      ["Last consumed", (q) => time(q.last_timestamp)],
      ...(withClients ? [["Client", (q) => q.client_id || "-"]] : [])], g.queues));
}

async function producers() {
  const data = await api("producers");
  show(h("h2", {}, "Producers"),
    h("p", {class: "muted"}, "Producers appear once they sent a heartbeat."),
    table("producers-table", [["Group", (p) => p.group], ["Broker", (p) => p.broker_name],
      ["Client ID", (p) => p.client_id], ["Address", (p) => p.client_addr], ["Language", (p) => p.language],
      ["Version", (p) => p.version, "num"]], data, "No producer connected."));
}

// ---- messages ----

function messageRows(id, data, extra) {
  return [h("p", {class: "muted", id: `${id}-count`}, `${data.messages.length} found` +
    (data.truncated ? ": the first stored in the range; narrow the range for the others." : ".")),
  table(id, [
    ["Message ID", (m) => link(`#/message/${enc(m.topic)}/${enc(m.msg_id)}`, m.msg_id)],
    ["Tags", (m) => m.tags || ""], ["Keys", (m) => m.keys || ""], ["Queue", (m) => m.queue_id, "num"],
    ["Offset", (m) => m.queue_offset, "num"], ["Stored", (m) => time(m.store_timestamp)],
    ["Size", (m) => num(m.body_size), "num"], ...(extra || [])], data.messages, "No message.")];
}

function rangeInputs(p) {
  const now = Date.now();
  return [h("label", {}, "Stored from", h("input", {name: "begin", type: "datetime-local",
    value: localInput(+(p.get("begin") || now - 3600000))})),
  h("label", {}, "to", h("input", {name: "end", type: "datetime-local",
    value: localInput(+(p.get("end") || now + 60000))}))];
}

async function messages() {
  const p = params();
  const form = h("form", {id: "message-search"},
    h("label", {}, "Topic", h("input", {name: "topic", required: true, value: p.get("topic") || ""})),
    h("label", {}, "Message ID", h("input", {name: "id", value: p.get("id") || "", size: 34})),
    h("label", {}, "or key", h("input", {name: "key", value: p.get("key") || ""})),
    ...rangeInputs(p), h("button", {}, "Search"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = form.elements, q = new URLSearchParams({topic: f.topic.value});
    if (f.id.value) q.set("id", f.id.value);
    else if (f.key.value) q.set("key", f.key.value);
    else { q.set("begin", inputMs(f.begin.value)); q.set("end", inputMs(f.end.value)); }
    location.hash = `#/messages?${q}`;
  });
  show(h("h2", {}, "Messages"), form, h("p", {class: "muted"},
    "By message ID (the producer's or the broker's offset ID), by key, or by store time."));
  if (!p.get("topic")) return;
  const q = new URLSearchParams(p);
  const data = await api(`messages?${q}`);
  main.append(...messageRows("messages-table", data));
}

async function message(topicName, id) {
  const m = await api(`messages/${enc(topicName)}/${enc(id)}`);
  const props = Object.entries(m.properties).sort();
  show(h("h2", {}, `Message ${m.msg_id}`),
    table("message-headers", [["Header", ([k]) => k], ["Value", ([, v]) => v]], [
      ["Topic", m.topic], ["Message ID", m.msg_id], ["Offset message ID", m.offset_msg_id],
      ["Tags", m.tags || ""], ["Keys", m.keys || ""], ["Queue", m.queue_id], ["Queue offset", m.queue_offset],
      ["Commit-log offset", m.commit_log_offset], ["Born", `${time(m.born_timestamp)} from ${m.born_host}`],
      ["Stored", `${time(m.store_timestamp)} on ${m.store_host}`], ["Reconsume times", m.reconsume_times],
      ["Flag / system flag", `${m.flag} / ${m.sys_flag}`]]),
    h("h3", {}, "Properties"),
    table("message-properties", [["Name", ([k]) => k], ["Value", ([, v]) => v]], props),
    h("h3", {}, `Body (${num(m.body.size)} bytes${m.body.truncated ? ", first part" : ""}, ${m.body.encoding})`),
    h("pre", {id: "message-body"}, m.body.preview),
    h("h3", {}, "Consumption by group"),
    table("message-consumption", [["Group", (c) => link(`#/group/${enc(c.group)}`, c.group)],
      ["State", (c) => c.state], ["Group offset in the queue", (c) => num(c.consumer_offset), "num"],
      ["Online", (c) => (c.online ? "yes" : "no")]], m.consumption, "No group consumes this topic."));
}

async function dlq() {
  const p = params();
  const form = h("form", {id: "dlq-search"},
    h("label", {}, "Consumer group", h("input", {name: "group", required: true, value: p.get("group") || ""})),
    ...rangeInputs(p), h("button", {}, "Show"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = form.elements;
    location.hash = `#/dlq?${new URLSearchParams({group: f.group.value, begin: inputMs(f.begin.value),
                                                  end: inputMs(f.end.value)})}`;
  });
  show(h("h2", {}, "Dead letters"), form);
  const group = p.get("group");
  if (!group) return;
  const q = new URLSearchParams({begin: p.get("begin") || Date.now() - 3600000, end: p.get("end") || Date.now() + 60000});
  const data = await api(`dlq/${enc(group)}?${q}`);
  const resend = writes ? [["", (m) => h("button", {onclick: async (e) => {
    try {
      const r = await api(`dlq/${enc(group)}/resend`, {msg_id: m.msg_id});
      e.target.replaceWith(`resent: ${r.status}`);
    } catch (err) { e.target.replaceWith(err.message); }
  }}, "Resend")]] : [];
  main.append(...messageRows("dlq-table", data, resend));
}

async function replication() {
  const data = await api("replication");
  show(h("h2", {}, "Replication"), ...data.map((b) => [
    h("h3", {}, `${b.broker_name} (${b.cluster})${b.master ? "" : " — no master online"}`),
    table(`replication-${b.broker_name}`, [["ID", (m) => m.broker_id, "num"], ["Address", (m) => m.addr],
      ["Role", (m) => m.role], ["Commit log max offset", (m) => num(m.commit_log_max_offset), "num"],
      ["Behind the master (bytes)", (m) => (m.behind_bytes === null ? "-" : h("span",
        {class: m.behind_bytes ? "lag" : ""}, num(m.behind_bytes))), "num"],
      ["Status", (m) => m.error || "up"]], b.members)]).flat());
}

// ---- routing ----

const routes = [
  [/^#?\/?$/, overview, true], [/^#\/topics$/, topics], [/^#\/topic\/(.+)$/, topic], [/^#\/groups$/, groups],
  [/^#\/group\/(.+)$/, group], [/^#\/producers$/, producers], [/^#\/messages$/, messages],
  [/^#\/message\/([^/]+)\/(.+)$/, message], [/^#\/dlq$/, dlq], [/^#\/replication$/, replication],
];

async function route() {
  clearTimeout(timer);
  const page = ++nav;
  const path = location.hash.split("?")[0];
  for (const a of document.querySelectorAll("nav a")) {
    const target = a.getAttribute("href");
    a.classList.toggle("active", target === "#/" ? path === "#/" || path === "" : path.startsWith(target.replace(/s$/, "")));
  }
  const found = routes.find(([re]) => re.test(path));
  if (!found) { show(h("p", {class: "error"}, `No page ${path}`)); return; }
  const [re, render, live] = found;
  const args = path.match(re).slice(1).map(decodeURIComponent);
  try {
    await render(...args);
  } catch (err) {
    if (err instanceof Stale) return;
    main.append(failed(err));
  }
  if (live && page === nav) timer = setTimeout(route, POLL_MS);
}

async function start() {
  try {
    writes = (await api("")).writes;
  } catch (err) { /* the pages below say what failed */ }
  document.getElementById("mode").textContent = writes ? "admin actions on" : "read-only";
  window.addEventListener("hashchange", route);
  route();
}

start();
