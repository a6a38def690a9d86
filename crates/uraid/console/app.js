// uraid console: renders the array from /api/stream (server-sent events,
// once a second) and sends the control protocol's commands to
// /api/command. Every command is checked again by the server; this page
// only asks for a confirmation first and shows the server's answer.
"use strict";

const TOKEN = document.querySelector('meta[name="uraid-token"]').content;
const WINDOW = 300; // seconds of chart history
const $ = (id) => document.getElementById(id);
const fmtSize = (b) => {
  const u = ["B", "K", "M", "G", "T", "P"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(b >= 10 || i === 0 ? 0 : 1)}${u[i]}`;
};
const text = (el, s) => { el.textContent = s; return el; };
const make = (tag, props = {}, ...kids) => {
  const e = document.createElement(tag);
  Object.assign(e, props);
  for (const k of kids) e.append(k);
  return e;
};

let last = null; // the last status
let lastProgress = null; // the background operation last seen running

// --- commands -------------------------------------------------------------

function confirmThen(title, what, run) {
  const d = $("confirm");
  text($("confirm-title"), title);
  text($("confirm-text"), what);
  d.returnValue = "";
  d.onclose = () => { if (d.returnValue === "ok") run(); };
  d.showModal();
  $("confirm-cancel").focus();
}

function toast(msg) {
  const t = $("toast");
  text(t, msg);
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 8000);
}

async function send(command) {
  const r = await fetch("/api/command", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Uraid-Token": TOKEN },
    body: JSON.stringify({ version: 1, command }),
  });
  const reply = await r.json();
  if (!reply.ok) {
    toast(reply.error ? reply.error.message : `the server said ${r.status}`);
    throw new Error(reply.error ? reply.error.message : r.status);
  }
  return reply.result;
}

function failMember(slot, device) {
  confirmThen(`Fail member ${slot}?`,
    `${device} (role ${slot}) will be marked faulty: it is no longer read or written and the array runs degraded until a spare is rebuilt in its place.`,
    () => send({ fail: { member: String(slot), force: false } }).catch(() => {}));
}

function removeMember(slot, device) {
  confirmThen(`Remove ${device}?`, `Slot ${slot} (${device}) leaves the array; its device is released.`,
    () => send({ remove: { member: String(slot) } }).catch(() => {}));
}

$("add-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const dev = $("add-device").value.trim();
  if (!dev) return;
  confirmThen("Add a spare?",
    `${dev} joins the array as a spare: anything on it is overwritten (the server takes only a free block device: it refuses one that is mounted, in use, or holds a filesystem, a partition table, LVM, swap or another array, and any regular file outside the directory set by console-files-dir). If a role is down, it takes it over and is rebuilt in the background.`,
    () => send({ add: { device: dev, force: false } }).then(() => { $("add-device").value = ""; }).catch(() => {}));
});

// The drives panel (GET /api/drives): every drive, who it is, what uses
// it; a free one can be added as a spare.
async function loadDrives() {
  const r = await fetch("/api/drives");
  if (!r.ok) { toast(`the drives could not be listed: ${r.status}`); return; }
  const list = await r.json();
  const body = $("drives").tBodies[0];
  body.replaceChildren();
  for (const d of list) {
    const id = d.identity || {};
    const act = make("td");
    if (d.free) {
      const b = make("button", { type: "button", textContent: "Add as spare" });
      b.dataset.device = d.device;
      b.addEventListener("click", () => confirmThen("Add a spare?",
        `${d.device}${id.model ? ` (${id.model}${id.serial ? `, serial ${id.serial}` : ""})` : ""} joins the array as a spare: anything on it is overwritten. If a role is down, it takes it over and is rebuilt in the background.`,
        () => send({ add: { device: d.device, force: false } }).then(loadDrives).catch(() => {})));
      act.append(b);
    }
    const tr = make("tr");
    tr.dataset.device = d.device;
    tr.append(make("td", { textContent: d.device, title: id.by_id || "" }), make("td", { textContent: d.kind }),
      make("td", { textContent: id.model || "" }), make("td", { textContent: id.serial || "" }),
      make("td", { textContent: fmtSize(d.size) }), make("td", { textContent: healthText(d.health) }),
      make("td", { textContent: d.usage }), act);
    body.append(tr);
  }
}
$("drives-refresh").addEventListener("click", () => loadDrives().catch(() => {}));
$("drives-panel").addEventListener("toggle", () => { if ($("drives-panel").open) loadDrives().catch(() => {}); });

function startScrub(repair) {
  const what = repair ? "repair" : "check";
  confirmThen(`Start a ${what}?`,
    repair ? "Every stripe is read; copies or parity that disagree are rewritten. Clients keep working; the scrub is rate-limited."
           : "Every stripe is read and compared; nothing is written. Clients keep working; the scrub is rate-limited.",
    () => {
      text($("check-result"), `${what} running…`);
      send({ check: { volume: null, repair, rate: null } }).then((res) => {
        text($("check-result"), res.map((r) => `${r.volume}: ${r.report.mismatches} mismatches, ${r.report.stripes_checked} stripes checked`).join("; "));
      }).catch((e) => text($("check-result"), `${what} failed: ${e.message}`));
    });
}
$("stop-scrub").addEventListener("click", () => confirmThen("Stop the scrub?",
  "The check or repair stops after its current batch; what it found so far is reported. Start it again to cover the whole array.",
  () => send("check-stop").then((r) => text($("check-result"), `${r.stopped} stopped at ${r.percent.toFixed(1)}%: ${r.found_so_far.mismatches} mismatches so far`)).catch(() => {})));
$("start-check").addEventListener("click", () => startScrub(false));
$("start-repair").addEventListener("click", () => startScrub(true));
$("stop-array").addEventListener("click", () => confirmThen("Stop the array?",
  "Requests in flight finish, the members are flushed and marked clean, and the export closes: clients lose the device until it is served again.",
  () => send("stop").catch(() => {})));

function setCache(volume, mode, select, previous) {
  const warn = mode === "writeback"
    ? " Write-back: writes are acknowledged from memory; those not yet flushed are LOST on power loss or a crash."
    : "";
  const d = $("confirm");
  confirmThen(`Cache ${mode} for ${volume}?`,
    `The export pauses for a moment while the current cache writes back what it holds, then resumes with the new cache.${warn}`,
    () => send({ config: { volume, mode, cache_size: null, dirty_limit: null } }).catch(() => { select.value = previous; }));
  d.addEventListener("close", () => { if (d.returnValue !== "ok") select.value = previous; }, { once: true });
}

// --- rendering ------------------------------------------------------------

function render(st) {
  last = st;
  const state = st.volumes.some((v) => v.state === "failed") ? "failed"
    : st.volumes.some((v) => v.state === "rebuilding") ? "rebuilding"
    : st.volumes.some((v) => v.state !== "clean") ? "degraded" : "clean";
  const badge = $("array-state");
  badge.dataset.state = state;
  text(badge, state);
  const n = st.member_count;
  const up = st.members.filter((m) => m.role !== null && m.state === "active").length;
  const sum = $("summary");
  sum.replaceChildren();
  for (const [k, v] of [["UUID", st.uuid], ["Members", `${up} of ${n} active`], ["Events", st.events],
    ["Capacity", fmtSize(st.volumes.reduce((a, v) => a + v.capacity, 0))], ["Served by", `pid ${st.served_by.pid}`]]) {
    sum.append(make("dt", { textContent: k }), make("dd", { textContent: String(v) }));
  }
  // Background operation; the last one stays shown at 100% once done.
  const p = st.progress;
  if (!p && lastProgress) {
    $("progress").value = 100;
    text($("progress-title"), `${lastProgress.action} of ${lastProgress.target}`);
    text($("progress-text"), `100% — finished`);
    $("progress-box").dataset.done = "1";
    lastProgress = null;
  }
  $("stop-scrub").hidden = !(p && (p.action === "check" || p.action === "repair"));
  if (p) {
    lastProgress = p;
    $("progress-box").hidden = false;
    delete $("progress-box").dataset.done;
    const pct = p.total ? (100 * p.done) / p.total : 100;
    text($("progress-title"), `${p.action} of ${p.target}`);
    $("progress").value = pct;
    const eta = p.eta_seconds != null ? `, ETA ${Math.round(p.eta_seconds)} s` : "";
    const lim = p.rate_limit ? ` (limit ${(p.rate_limit / 1e6).toFixed(0)} MB/s)` : "";
    text($("progress-text"), `${pct.toFixed(1)}% — ${fmtSize(p.done)} of ${fmtSize(p.total)} at ${p.mb_per_s.toFixed(1)} MB/s${lim}${eta}`);
  }
  // Volumes and members are drawn again only when they change, so that
  // the focus (keyboard users) and an open select stay where they are.
  const volKey = JSON.stringify(st.volumes.map((v) => [v.name, v.level, v.capacity, v.chunk, v.state, v.cache, v.cache_warning]));
  for (const v of st.volumes) {
    const el = document.getElementById(`cache-stats-${v.name}`);
    if (el && v.cache_stats) text(el, `dirty ${fmtSize(v.cache_stats.dirty_bytes)}, hit ratio ${(100 * v.cache_stats.hit_ratio).toFixed(1)}%`);
  }
  if (volKey !== drawn.volumes) { drawn.volumes = volKey; renderVolumes(st); }
  const memKey = JSON.stringify([st.members, st.stale_members]);
  if (memKey !== drawn.members) { drawn.members = memKey; renderMembers(st); }
  const detKey = JSON.stringify([st.member_details, st.health]);
  if (detKey !== drawn.details) { drawn.details = detKey; renderDetails(st.member_details, st.health); }
}

// One drive's health (service::health) in a few words.
function healthText(h) {
  if (!h) return "";
  const parts = [];
  if (h.smart_passed === false || h.critical_warning) parts.push(`WARNING${h.critical_warning ? ` 0x${h.critical_warning.toString(16)}` : ""}`);
  else if (h.smart_passed === true) parts.push("OK");
  if (h.temperature) parts.push(`${h.temperature} °C`);
  if (h.percentage_used != null) parts.push(`${h.percentage_used}% used`);
  if (h.available_spare != null) parts.push(`spare ${h.available_spare}%`);
  const bad = h.media_errors != null ? h.media_errors : h.bad_sectors;
  if (bad) parts.push(`${bad} media errors`);
  return parts.join(", ");
}

function renderDetails(d, health) {
  const body = $("details").tBodies[0];
  body.replaceChildren();
  const warn = $("bus-warnings");
  warn.replaceChildren();
  if (!d) return;
  for (const m of d.members || []) {
    const tr = make("tr");
    // Who the drive is (uraid_core::io::identity): absent for files and
    // stacked devices.
    const id = m.identity || {};
    const link = id.link && id.link.speed ? `PCIe ${id.link.speed}${id.link.width ? ` x${id.link.width}` : ""}` : (id.transport || "");
    tr.append(make("td", { textContent: m.name, title: id.by_id || "" }), make("td", { textContent: id.model || m.model }),
      make("td", { textContent: id.serial || "" }), make("td", { textContent: id.firmware || "" }),
      make("td", { textContent: fmtSize(m.size) }),
      make("td", { textContent: id.physical_block_size && id.physical_block_size !== m.logical_block_size ? `${m.logical_block_size}/${id.physical_block_size} B` : `${m.logical_block_size} B` }),
      make("td", { textContent: link }),
      make("td", { textContent: healthText((health || []).find((h) => h.device === m.name)) }),
      make("td", { textContent: (m.sits_on || []).join(" → ") }));
    body.append(tr);
  }
  for (const w of d.warnings || []) warn.append(make("li", { textContent: w }));
}

const drawn = { volumes: null, members: null, details: null };

function renderVolumes(st) {
  const vols = $("volumes");
  vols.replaceChildren();
  for (const v of st.volumes) {
    const box = make("div", { className: "volume" });
    box.append(make("h3", { textContent: `${v.name}: RAID ${v.level}, ${fmtSize(v.capacity)}, chunk ${fmtSize(v.chunk)}, ${v.state}` }));
    const row = make("div", { className: "row" });
    const id = `cache-${v.name}`;
    const sel = make("select", { id });
    sel.dataset.volume = v.name;
    for (const m of ["off", "writethrough", "writeback"]) sel.append(make("option", { value: m, textContent: m }));
    if (v.cache.mode === "journal") sel.append(make("option", { value: "journal", textContent: "journal" }));
    sel.value = v.cache.mode;
    sel.disabled = v.cache.mode === "journal";
    sel.addEventListener("change", () => setCache(v.name, sel.value, sel, v.cache.mode));
    row.append(make("label", { htmlFor: id, textContent: "Cache" }), sel);
    row.append(make("span", { className: "muted", id: `cache-stats-${v.name}`,
      textContent: v.cache_stats ? `dirty ${fmtSize(v.cache_stats.dirty_bytes)}, hit ratio ${(100 * v.cache_stats.hit_ratio).toFixed(1)}%` : "" }));
    box.append(row);
    if (v.cache_warning) box.append(make("p", { className: "warning", textContent: `Warning: ${v.cache_warning}` }));
    vols.append(box);
  }
}

// `, 26.2%`: the share of the redundant volumes' member area below a
// recovery offset (absolute member bytes), rounded as `uraid status` does.
function rebuiltShare(st, o) {
  const vols = st.volumes.filter((v) => v.level !== 0 && v.member_size > 0);
  const total = vols.reduce((a, v) => a + v.member_size, 0);
  if (!total) return "";
  const done = vols.reduce((a, v) => a + Math.min(Math.max(o - v.member_start, 0), v.member_size), 0);
  return `, ${(Math.floor((done * 1000) / total) / 10).toFixed(1)}%`;
}

function renderMembers(st) {
  const body = $("members").tBodies[0];
  body.replaceChildren();
  for (const m of st.members) {
    const slot = m.role !== null ? `role ${m.role}`
      : m.former_role != null ? `faulty ${m.slot} (was role ${m.former_role})` : `spare ${m.slot}`;
    const tr = make("tr");
    tr.append(make("td", { textContent: slot }), make("td", { textContent: m.device || "—" }),
      make("td", { textContent: m.state + (m.recovery_offset != null ? ` (rebuilt up to ${fmtSize(m.recovery_offset)}${rebuiltShare(st, m.recovery_offset)})` : ""), className: `state-${m.state}` }));
    const act = make("td");
    if (m.role !== null && (m.state === "active" || m.state === "rebuilding")) {
      const b = make("button", { textContent: `Fail member ${m.role}`, id: `fail-${m.role}` });
      b.addEventListener("click", () => failMember(m.role, m.device));
      act.append(b);
    } else if (m.device && (m.state === "faulty" || m.state === "spare")) {
      const b = make("button", { textContent: `Remove`, id: `remove-${m.slot}` });
      b.addEventListener("click", () => removeMember(m.slot, m.device));
      act.append(b);
    }
    tr.append(act);
    body.append(tr);
  }
  for (const d of st.stale_members || []) {
    body.append(make("tr", {}, make("td", { textContent: "stale" }), make("td", { textContent: d }), make("td", { textContent: "not a member" }), make("td")));
  }
}

// --- charts ---------------------------------------------------------------

const series = { t: [], riops: [], wiops: [], rmb: [], wmb: [], rmean: [], rp99: [], wmean: [], wp99: [] };
let charts = null;

function chart(el, labels) {
  const opts = {
    width: Math.max(260, el.clientWidth), height: 180,
    series: [{}, ...labels.map(([label, stroke, dash]) => ({ label, stroke, dash, width: 1.5 }))],
    axes: [{}, { size: 60 }],
    legend: { live: false },
  };
  return new uPlot(opts, [[], ...labels.map(() => [])], el);
}

function initCharts() {
  charts = {
    iops: chart($("chart-iops"), [["read", "#0969da"], ["write", "#cf222e"]]),
    mbs: chart($("chart-mbs"), [["read", "#0969da"], ["write", "#cf222e"]]),
    lat: chart($("chart-lat"), [["read mean", "#0969da"], ["read p99", "#0969da", [4, 4]], ["write mean", "#cf222e"], ["write p99", "#cf222e", [4, 4]]]),
  };
  window.addEventListener("resize", () => {
    for (const [k, c] of Object.entries(charts)) c.setSize({ width: Math.max(260, $(`chart-${k}`).clientWidth), height: 180 });
  });
}

function pushFigures(st) {
  const [vol, f] = Object.entries(st.io || {})[0] || [];
  if (!f) return;
  text($("io-volume"), `(volume ${vol}, ${f.connections} connection(s), ${f.in_flight} in flight)`);
  const s = series;
  s.t.push(st.unix_ms / 1000);
  s.riops.push(f.read_iops); s.wiops.push(f.write_iops);
  s.rmb.push(f.read_mb_s); s.wmb.push(f.write_mb_s);
  s.rmean.push(f.read_mean_us); s.rp99.push(f.read_p99_us);
  s.wmean.push(f.write_mean_us); s.wp99.push(f.write_p99_us);
  if (s.t.length > WINDOW) for (const k of Object.keys(s)) s[k].shift();
  charts.iops.setData([s.t, s.riops, s.wiops]);
  charts.mbs.setData([s.t, s.rmb, s.wmb]);
  charts.lat.setData([s.t, s.rmean, s.rp99, s.wmean, s.wp99]);
}

// --- events ---------------------------------------------------------------

// A time as local ISO 8601 with the offset from UTC: 2026-11-27T00:15:03+01:00.
function isoLocal(ms) {
  const d = new Date(ms), p = (n) => String(n).padStart(2, "0"), off = -d.getTimezoneOffset();
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}` +
    `${off < 0 ? "-" : "+"}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)}`;
}

function addEvent(e) {
  const when = isoLocal(e.unix_ms);
  const li = make("li", { textContent: `${when} ${e.event}${e.member ? " " + e.member : ""}: ${e.detail}` });
  li.dataset.event = e.event;
  $("events").prepend(li);
  while ($("events").children.length > 200) $("events").lastChild.remove();
}

// --- benchmarks -------------------------------------------------------------

async function getJson(path) {
  const r = await fetch(path);
  return r.json();
}

async function loadReports() {
  const list = await getJson("/api/reports");
  const ul = $("reports");
  ul.replaceChildren();
  for (const r of list) {
    const a = make("a", { href: r.report, target: "_blank", rel: "noopener", textContent: `${r.name} (${isoLocal(r.unix_s * 1000)})` });
    ul.append(make("li", {}, a));
  }
}

async function pollBench() {
  const b = await getJson("/api/bench");
  if (!b) return;
  const lines = (b.log || []).join(" | ");
  if (b.running) {
    text($("bench-state"), `benchmark of ${b.target} running for ${Math.round(b.seconds)} s ${lines ? "— " + lines : ""}`);
    setTimeout(pollBench, 1000);
  } else {
    text($("bench-state"), `benchmark of ${b.target} ${b.ok ? "done" : "failed"} after ${Math.round(b.seconds)} s${b.ok ? "" : ": " + lines}`);
    loadReports();
  }
}

$("bench-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const target = $("bench-target").value.trim();
  const sets = $("bench-sets").value;
  if (!target) return;
  const array = $("array-name").textContent, confirm = $("bench-confirm").checked;
  const what = target !== array
    ? `The ${sets} tests write over ${target}: give an emulated mem: drive or a free block device with nothing on it (the server refuses a member, a mounted device, a filesystem, an array, and any regular file outside the directory set by console-files-dir).`
    : confirm
      ? `The tests write over the first 256 MiB of ${array}, which its clients see: the server runs them only if that area was never written, else it refuses.`
      : `The tests read ${array} through its export and write nothing.`;
  confirmThen(`Benchmark ${target}?`, `${what} The array keeps serving meanwhile; the benchmark shares the CPU with it.`,
    async () => {
      const r = await fetch("/api/bench", { method: "POST", headers: { "Content-Type": "application/json", "X-Uraid-Token": TOKEN },
        body: JSON.stringify({ target, sets, runs: 1, time: 2, confirm: target === array && confirm }) });
      const reply = await r.json();
      if (!reply.ok) { toast(reply.error.message); return; }
      pollBench();
    });
});

// --- the stream -----------------------------------------------------------

function connect() {
  const es = new EventSource("/api/stream");
  es.addEventListener("open", () => text($("conn"), "live"));
  es.addEventListener("status", (m) => {
    const st = JSON.parse(m.data);
    if (!st) return;
    render(st);
    pushFigures(st);
    // When the overview first showed the array (bench/console.py reads it).
    if (!performance.getEntriesByName("uraid-first-status").length) performance.mark("uraid-first-status");
  });
  es.addEventListener("event", (m) => addEvent(JSON.parse(m.data)));
  es.addEventListener("error", () => {
    text($("conn"), "disconnected: the array may have stopped; retrying…");
  });
  // A page left (or kept in the back/forward cache) closes its stream: an
  // open one holds one of the browser's six connections to the console, and
  // a few reloads would leave the next page waiting for a free one.
  window.addEventListener("pagehide", () => es.close(), { once: true });
}
window.addEventListener("pageshow", (e) => { if (e.persisted) connect(); });

initCharts();
connect();
loadReports();
pollBench();
