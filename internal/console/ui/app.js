// cairn console: polls api/data every 2 s and renders it; no framework, no external files.
// Every value from the server is put in the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 2000;
let csrf = "";
let timer = null;
let last = null;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "title") e.title = v;
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function human(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let f = n, i = 0;
  while (f >= 1024 && i < units.length - 1) { f /= 1024; i++; }
  return i === 0 ? n + " B" : f.toFixed(1) + " " + units[i];
}

function duration(s) {
  if (s < 0) return "unknown";
  s = Math.round(s);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

function layout(c) {
  if (c.k > 0) return "EC " + c.k + "+" + c.m;
  return c.n + " cop" + (c.n === 1 ? "y" : "ies");
}

async function api(path, opts) {
  opts = opts || {};
  const headers = {};
  if (opts.body) headers["Content-Type"] = "application/x-www-form-urlencoded";
  if (opts.method === "POST" && csrf) headers["X-CSRF-Token"] = csrf;
  const resp = await fetch("api/" + path, { method: opts.method || "GET", headers, body: opts.body, credentials: "same-origin", cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (resp.status === 401 && path !== "login") { showLogin(""); throw new Error("logged out"); }
  if (!resp.ok) throw new Error((body && body.error) || resp.status + " " + resp.statusText);
  return body;
}

function showLogin(msg) {
  clearTimeout(timer);
  timer = null;
  csrf = "";
  $("#app").hidden = true;
  $("#logout").hidden = true;
  $("#login").hidden = false;
  $("#login-error").textContent = msg || "";
  $("#password").focus();
}

function showApp(token) {
  csrf = token;
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#logout").hidden = false;
  poll();
}

async function poll() {
  clearTimeout(timer);
  try {
    const d = await api("data");
    last = d.status;
    render(d.status);
    $("#fetch-error").hidden = true;
    $("#updated").textContent = "updated " + new Date(d.now).toLocaleTimeString();
  } catch (e) {
    if (!csrf) return; // logged out
    $("#fetch-error").textContent = "cannot reach this node: " + e.message;
    $("#fetch-error").hidden = false;
  }
  if (csrf) timer = setTimeout(poll, POLL_MS);
}

// nodeState is a node's state as the page shows it: the map's, or "down" for a node the
// map still says is up but that did not answer this node just now.
function nodeState(n) {
  if (n.state === "up" && n.error) return "down";
  return n.state;
}

function render(st) {
  $("#cluster-line").textContent = "map epoch " + st.epoch + " · " + st.nodes.length + " nodes · " + st.buckets + " bucket" + (st.buckets === 1 ? "" : "s");
  $("#epoch").textContent = st.epoch;
  $("#digest").textContent = (st.digest || "").slice(0, 16);
  $("#partitions").textContent = st.partitions;
  $("#leader").textContent = st.leader || "none (the map cannot change)";
  $("#managers").textContent = (st.managers || []).map((m) => m.ID + (m.Voter ? " (voter)" : "")).join(", ");
  const std = st.standard || {}, eff = st.effective || {};
  let s = "N=" + eff.n + " W=" + eff.w + " R=" + eff.r + " D=" + eff.d;
  if (std.n !== eff.n) s += " in force (configured N=" + std.n + ")";
  $("#standard").textContent = s;

  const warn = $("#warnings");
  warn.replaceChildren(...(st.warnings || []).map((w) => el("li", {}, w)), ...(st.notes || []).map((w) => el("li", { class: "note" }, w)));

  // The map by zone.
  const zones = new Map();
  for (const n of st.nodes) {
    const z = n.zone || "(no zone)";
    if (!zones.has(z)) zones.set(z, []);
    zones.get(z).push(n);
  }
  $("#zones").replaceChildren(...[...zones.keys()].sort().map((z) =>
    el("div", { class: "zone" }, el("h3", {}, "zone " + z), ...zones.get(z).map((n) =>
      el("span", { class: "chip state-" + nodeState(n), title: n.id + ": " + nodeState(n) }, n.id + (n.id === st.leader ? " ★" : ""))))));

  $("#nodes tbody").replaceChildren(...st.nodes.map(nodeRow));

  const r = st.recovery || {};
  if (r.objects_to_move > 0) {
    const pct = r.bytes_to_move > 0 ? Math.floor(100 * r.bytes_done / r.bytes_to_move) : 0;
    $("#recovery").textContent = "copying " + r.objects_done + " / " + r.objects_to_move + " objects, " + human(r.bytes_done) + " / " + human(r.bytes_to_move) +
      " (" + pct + "%), " + human(Math.round(r.rate_bytes_per_sec)) + "/s, ETA " + duration(r.eta_seconds);
  } else {
    $("#recovery").textContent = "idle: every node holds what its partitions need";
  }
  if (document.activeElement !== $("#rate")) {
    const lim = st.nodes.map((n) => n.stats && n.stats.recovery ? n.stats.recovery.rate_limit_bytes_per_sec : null).find((v) => v !== null && v !== undefined);
    if (lim !== undefined) $("#rate").value = Math.round(lim / 1048576);
  }

  $("#buckets tbody").replaceChildren(...(st.bucket_usage || []).map((b) => el("tr", { "data-bucket": b.name },
    el("td", {}, b.name),
    el("td", { class: "num objects", title: b.records + " records on the storage nodes" }, b.objects),
    el("td", { class: "num bytes", "data-bytes": b.bytes, title: b.bytes + " bytes" }, human(b.bytes)),
    el("td", {}, b.policy ? el("pre", {}, b.policy) : "-"))));
  $("#usage-note").textContent = "Each object counted once: the copies the storage nodes hold, divided by STANDARD's N (" + eff.n + ")." +
    (st.usage_partial ? " Partial: a storage node did not report its copies." : "");

  $("#classes tbody").replaceChildren(...(st.classes || []).map((c) => el("tr", { "data-class": c.name },
    el("td", {}, c.name), el("td", {}, layout(c)), el("td", { class: "num" }, c.w), el("td", { class: "num" }, c.r), el("td", { class: "num" }, c.d),
    el("td", {}, c.device_class || "any"), el("td", {}, (c.s3_names || []).join(", ") || "-"))));
}

function nodeRow(n) {
  const state = nodeState(n);
  const stats = n.stats || {};
  const used = stats.used_bytes;
  const pct = n.capacity > 0 && used !== undefined ? Math.min(100, 100 * used / n.capacity) : 0;
  const rec = stats.recovery;
  let recText = "-";
  if (rec && rec.running) recText = rec.objects_done + "/" + rec.objects_to_move + " objects, " + human(rec.bytes_done) + "/" + human(rec.bytes_to_move);
  else if (rec && rec.handoff_objects > 0) recText = rec.handoff_objects + " to hand off";
  else if (rec) recText = "idle";
  const sc = stats.scrub;
  let scText = "-";
  if (sc) scText = sc.state + (sc.state === "running" || sc.objects > 0 ? ": " + sc.objects + " objects, " + human(sc.bytes) : "") + (sc.corrupt > 0 ? ", " + sc.corrupt + " corrupt" : "");
  // The bar's width goes through CSSOM, which a style-src of 'self' permits (a style
  // attribute in markup it would not).
  const fill = el("span");
  fill.style.width = pct.toFixed(1) + "%";
  const actions = el("td", { class: "actions" });
  const storage = (n.roles || []).includes("storage");
  if (storage && n.state === "up") actions.append(actionButton(n.id, "drain", "Drain"), " ");
  if (n.state !== "out") actions.append(actionButton(n.id, "out", "Mark out"), " ");
  if (n.state === "out" || n.state === "down") actions.append(actionButton(n.id, "up", "Mark in"));
  return el("tr", { "data-node": n.id },
    el("td", { title: "node " + n.addr + ", S3 " + n.s3_addr + ", admin " + (n.admin_addr || "-") }, n.id),
    el("td", { class: "state state-" + state, title: n.error ? "not answering: " + n.error : "map: " + n.state }, state),
    el("td", {}, n.zone || "-"),
    el("td", {}, n.device_class || "-"),
    el("td", {}, (n.roles || []).join(", ")),
    el("td", { class: "num" }, human(n.capacity)),
    el("td", { class: "num used" }, used === undefined ? "-" : human(used)),
    el("td", {}, el("span", { class: "bar", title: pct.toFixed(1) + "% of capacity" }, fill)),
    el("td", { class: "num" }, n.partitions),
    el("td", { class: "num" }, stats.hints_pending === undefined ? "-" : stats.hints_pending),
    el("td", {}, recText),
    el("td", {}, scText),
    actions);
}

// actionButton asks for a second click within 5 s before it acts.
function actionButton(id, action, label) {
  const b = el("button", { type: "button", "data-action": action }, label);
  b.addEventListener("click", async () => {
    if (!b.classList.contains("confirm")) {
      b.classList.add("confirm");
      b.textContent = "Confirm: " + label.toLowerCase() + " " + id;
      clearTimeout(timer); // keep the button on the page while the operator decides
      timer = setTimeout(poll, 5000);
      return;
    }
    await act("node", new URLSearchParams({ id, action }), label + " " + id);
  });
  return b;
}

async function act(path, params, what) {
  const out = $("#action-result");
  try {
    await api(path, { method: "POST", body: params.toString() });
    out.textContent = what + ": done";
    out.classList.remove("error");
  } catch (e) {
    out.textContent = what + ": " + e.message;
    out.classList.add("error");
  }
  out.hidden = false;
  poll();
}

document.addEventListener("DOMContentLoaded", async () => {
  $("#login-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const d = await api("login", { method: "POST", body: new URLSearchParams({ access_key: $("#access-key").value, password: $("#password").value }).toString() });
      $("#password").value = "";
      showApp(d.csrf);
    } catch (e) {
      showLogin(e.message);
    }
  });
  $("#logout").addEventListener("click", async () => {
    try { await api("logout", { method: "POST" }); } catch (e) { /* logged out either way */ }
    showLogin("");
  });
  $("#rate-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const mib = Number($("#rate").value);
    $("#rate").blur();
    act("recovery", new URLSearchParams({ rate: String(Math.round(mib * 1048576)) }), "recovery rate " + (mib > 0 ? mib + " MiB/s" : "unlimited"));
  });
  try {
    const d = await api("session");
    showApp(d.csrf);
  } catch (e) {
    showLogin("");
  }
});
