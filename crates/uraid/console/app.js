// uraid console: renders the array from /api/stream (server-sent events,
// once a second) and sends the control protocol's commands to
// /api/command. Every command is checked again by the server; this page
// only asks for a confirmation first and shows the server's answer.
"use strict";

const TOKEN = document.querySelector('meta[name="uraid-token"]').content;
const KEEP = 3600; // seconds of chart history kept (the server keeps as many: GET /api/history)
let range = 300; // seconds the charts show (the range choice)
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

// --- time -----------------------------------------------------------------
// Every time shown is the browser's local time, with its zone named.

const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
const pad2 = (n) => String(n).padStart(2, "0");
// The offset from UTC at `ms`: +05:30.
function utcOffset(ms) {
  const off = -new Date(ms).getTimezoneOffset();
  return `${off < 0 ? "-" : "+"}${pad2(Math.floor(Math.abs(off) / 60))}:${pad2(Math.abs(off) % 60)}`;
}
// The zone's short name at `ms` when it has one (IST, CET), else "".
function zoneAbbr(ms) {
  const p = new Intl.DateTimeFormat("en", { timeZoneName: "short" }).formatToParts(new Date(ms)).find((x) => x.type === "timeZoneName");
  return p && !/^(GMT|UTC)/.test(p.value) ? p.value : "";
}
// "Asia/Kolkata, UTC+05:30 (IST)"
function zoneText(ms) {
  const abbr = zoneAbbr(ms);
  return `${ZONE}, UTC${utcOffset(ms)}${abbr ? ` (${abbr})` : ""}`;
}
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

// What rebuilding one member costs: the redundant volumes' member area
// at the configured rebuild rate (maintenance.rebuild_rate, bytes/s).
function rebuildCost(st) {
  const bytes = st.volumes.filter((v) => v.level !== 0).reduce((a, v) => a + v.member_size, 0);
  const rate = st.maintenance && st.maintenance.rebuild_rate;
  const gb = `${(bytes / 1e9).toFixed(bytes >= 1e9 ? 1 : 3)} GB`;
  if (!rate) return `rebuilds ${gb} with no rate limit (as fast as the members go)`;
  const secs = bytes / rate;
  const t = secs < 90 ? `${Math.max(1, Math.round(secs))} s` : secs < 5400 ? `${Math.round(secs / 60)} min` : `${(secs / 3600).toFixed(1)} h`;
  return `rebuilds ${gb} at ${(rate / 1e6).toFixed(0)} MB/s: about ${t}`;
}
// Whether a role is down (a spare added now is rebuilt into it).
const roleDown = (st) => st.members.filter((m) => m.role !== null && m.state === "active").length < st.member_count;

// Who a drive is, in one line, from the drives panel's entry or a member's identity.
function who(d) {
  if (!d) return "";
  const id = d.identity || {};
  const parts = [];
  if (id.model || d.model) parts.push(id.model || d.model);
  if (id.serial) parts.push(`serial ${id.serial}`);
  if (id.by_id) parts.push(id.by_id);
  else if ((d.sits_on || []).length) parts.push(d.sits_on.join(" → "));
  else if (d.backing) parts.push(`loop device over file ${d.backing}`);
  if (d.size) parts.push(fmtSize(d.size));
  return parts.join(", ");
}

// The drives panel's entry of `dev` (its identity), read afresh.
async function driveOf(dev) {
  try {
    const r = await fetch("/api/drives");
    return r.ok ? (await r.json()).find((d) => d.device === dev) : undefined;
  } catch (_) { return undefined; }
}

async function addSpare(dev, after) {
  const d = await driveOf(dev);
  const cost = last && roleDown(last)
    ? `A role is down: it takes it over and ${rebuildCost(last)}, in the background.`
    : "No role is down: it waits as a spare; only its superblock is written until a member fails.";
  confirmThen(`Add ${dev} as a spare?`,
    `WRITES OVER ${dev}${d ? ` (${who(d)}; ${d.usage})` : ""}: anything on it is overwritten (the server takes only a free block device: it refuses one that is mounted, in use, or holds a filesystem, a partition table, LVM, swap or another array, and any regular file outside the directory set by console-files-dir). ${cost}`,
    () => send({ add: { device: dev, force: false } }).then(after).catch(() => {}));
}

$("add-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const dev = $("add-device").value.trim();
  if (!dev) return;
  addSpare(dev, () => { $("add-device").value = ""; });
});

// The replace wizard: pick a member, pick a free drive, see the cost and
// the new drive's identity, confirm. The server checks it all again.
async function replaceWizard() {
  if (!last) return;
  const r = await fetch("/api/drives");
  const free = r.ok ? (await r.json()).filter((d) => d.free) : [];
  const old = $("replace-old"), neu = $("replace-new");
  old.replaceChildren();
  for (const m of last.members.filter((m) => m.role !== null)) {
    old.append(make("option", { value: String(m.role), textContent: `role ${m.role}: ${m.device || "missing"} (${m.state})` }));
  }
  neu.replaceChildren();
  for (const d of free) neu.append(make("option", { value: d.device, textContent: `${d.device}: ${who(d)}` }));
  const show = () => {
    const d = free.find((x) => x.device === neu.value);
    text($("replace-cost"), d
      ? `Role ${old.value} is failed, then ${d.device} (${who(d)}) is rebuilt in its place: ${rebuildCost(last)}.`
      : "No drive is free: attach one, or free one, then open this again.");
    $("replace-next").disabled = !d;
  };
  old.onchange = show; neu.onchange = show;
  show();
  const w = $("replace-wizard");
  w.returnValue = "";
  w.onclose = () => {
    if (w.returnValue !== "next") return;
    const d = free.find((x) => x.device === neu.value), role = old.value;
    confirmThen(`Replace role ${role} with ${d.device}?`,
      `WRITES OVER ${d.device} (${who(d)}): anything on it is overwritten. Role ${role} is failed and ${d.device} ${rebuildCost(last)}; the array runs degraded until then.`,
      () => send({ replace: { old: role, new: d.device, force: false } }).catch(() => {}));
  };
  w.showModal();
}
$("replace-open").addEventListener("click", () => replaceWizard().catch(() => {}));

// How long `bytes` take at `rate` bytes/s, for people.
function duration(bytes, rate) {
  const secs = bytes / rate;
  return secs < 90 ? `${Math.max(1, Math.round(secs))} s` : secs < 5400 ? `${Math.round(secs / 60)} min` : `${(secs / 3600).toFixed(1)} h`;
}
const gbText = (bytes) => `${(bytes / 1e9).toFixed(bytes >= 1e9 ? 1 : 3)} GB`;

// Fills `box` with a checkbox (id PREFIX-DEVICE) for each free drive of
// the drives panel, named with who it is; returns those drives.
async function freeDriveBoxes(box, prefix) {
  const r = await fetch("/api/drives");
  const free = r.ok ? (await r.json()).filter((d) => d.free) : [];
  box.replaceChildren();
  for (const d of free) {
    const c = make("input", { type: "checkbox", value: d.device, id: `${prefix}-${d.device}` });
    box.append(make("div", {}, c, make("label", { htmlFor: c.id, textContent: ` ${d.device}: ${who(d)}` })));
  }
  if (!free.length) box.append(make("p", { textContent: "No drive is free." }));
  return free;
}

// The grow wizard (`uraid grow`): add free drives, and with them (or
// alone) change the RAID level or the chunk; its cost is the volume's data
// restriped at the reshape rate. The server checks it as `uraid grow` does.
async function growWizard() {
  if (!last) return;
  const v = last.volumes[last.volumes.length - 1];
  const box = $("grow-drives");
  const free = await freeDriveBoxes(box, "grow");
  const lvl = $("grow-level");
  lvl.replaceChildren();
  for (const l of [0, 1, 4, 5, 6, 10]) lvl.append(make("option", { value: String(l), textContent: l === v.level ? `RAID ${l} (as now)` : `RAID ${l}` }));
  lvl.value = String(v.level);
  const ch = $("grow-chunk");
  ch.replaceChildren();
  for (let c = 4096; c <= 1 << 20; c *= 2) ch.append(make("option", { value: String(c), textContent: c === v.chunk ? `${fmtSize(c)} (as now)` : fmtSize(c) }));
  ch.value = String(v.chunk);
  const picked = () => [...box.querySelectorAll("input:checked")].map((c) => c.value);
  const show = () => {
    const add = picked(), level = Number(lvl.value), chunk = Number(ch.value);
    const what = [];
    if (add.length) what.push(`adds ${add.join(", ")}`);
    if (level !== v.level) what.push(`converts RAID ${v.level} to RAID ${level}`);
    if (chunk !== v.chunk) what.push(`restripes to a ${fmtSize(chunk)} chunk`);
    const rate = (last.maintenance && last.maintenance.reshape_rate) || 0;
    text($("grow-cost"), what.length
      ? `It ${what.join(", ")}: reshapes ${gbText(v.capacity)} (volume ${v.name}) at ${(rate / 1e6).toFixed(0)} MB/s: about ${duration(v.capacity, rate)}, in the background; clients keep working.`
      : "Pick drives to add, or another level or chunk.");
    $("grow-next").disabled = !what.length;
  };
  box.onchange = show; lvl.onchange = show; ch.onchange = show;
  show();
  const w = $("grow-wizard");
  w.returnValue = "";
  w.onclose = () => {
    if (w.returnValue !== "next") return;
    const add = picked(), level = Number(lvl.value), chunk = Number(ch.value);
    const written = add.map((a) => `${a} (${who(free.find((d) => d.device === a))})`).join(", ");
    confirmThen(`Reshape ${v.name}?`,
      `${written ? `WRITES OVER ${written}: anything on them is overwritten. ` : ""}${$("grow-cost").textContent}`,
      () => send({ grow: { add, size: null, force: false, rate: null, chunk: chunk !== v.chunk ? chunk : null, level: level !== v.level ? level : null } }).catch(() => {}));
  };
  w.showModal();
}
$("grow-open").addEventListener("click", () => growWizard().catch(() => {}));

// The create wizard (`uraid create`, POST /api/create): a new array from
// free drives. "Next" asks the server to check the request as `uraid
// create` does (nothing is written) and shows its error, or the cost and
// each target drive's identity in the confirmation; confirmed, the server
// creates it and the page says how to serve it.
async function postCreate(body) {
  const r = await fetch("/api/create", {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Uraid-Token": TOKEN },
    body: JSON.stringify(body),
  });
  const reply = await r.json();
  if (!reply.ok) throw new Error(reply.error ? reply.error.message : `the server said ${r.status}`);
  return reply.result;
}

// What creating costs: create zeroes each member's data area, so that
// parity and copies agree from the start; no level needs a resync after.
function createCost(level, plan, n) {
  const per = plan.volumes.reduce((a, v) => a + v.member_size, 0);
  const why = level === 0 ? "RAID 0 keeps no parity or copies" : `the data areas are zeroed, so RAID ${level}'s ${level === 1 || level === 10 ? "copies" : "parity"} agree from the start`;
  return `No initial sync (${why}): create zeroes ${gbText(per)} on each of the ${n} members (${gbText(plan.zero_bytes)} in all), at once on drives that discard, else at the drives' write speed, before it returns.`;
}

async function createWizard() {
  const box = $("create-drives");
  const free = await freeDriveBoxes(box, "create");
  const lvl = $("create-level");
  if (!lvl.options.length) for (const l of [0, 1, 10, 5, 6]) lvl.append(make("option", { value: String(l), textContent: `RAID ${l}` }));
  text($("create-error"), "");
  const picked = () => [...box.querySelectorAll("input:checked")].map((c) => c.value);
  const request = (confirm) => ({ name: $("create-name").value.trim(), level: Number(lvl.value), chunk: $("create-chunk").value.trim(), members: picked(), confirm });
  $("create-next").onclick = async () => {
    const req = request(false);
    text($("create-error"), "checking…");
    let plan;
    try {
      plan = await postCreate(req);
    } catch (e) {
      text($("create-error"), e.message);
      return;
    }
    text($("create-error"), "");
    $("create-wizard").close("next");
    const targets = req.members.map((m) => `${m} (${who(free.find((d) => d.device === m))})`).join(", ");
    const vols = plan.volumes.map((v) => `volume ${v.name}: RAID ${v.level}, chunk ${fmtSize(v.chunk)}`).join("; ");
    confirmThen(`Create ${req.name}?`,
      `WRITES OVER ${targets}: anything on them is overwritten. ${vols}. ${createCost(req.level, plan, req.members.length)}`,
      () => {
        text($("create-done"), `creating ${req.name}…`);
        $("create-done").hidden = false;
        postCreate(request(true)).then((res) => {
          text($("create-done"), `Created array ${res.name} (${res.uuid}), ${fmtSize(res.capacity)}. It is not served yet: serve it with "${res.serve}", or for every boot: ${res.service}.` +
            (res.warnings.length ? ` Warnings: ${res.warnings.join("; ")}` : ""));
          $("create-done").dataset.created = res.name;
          loadDrives().catch(() => {});
        }).catch((e) => { text($("create-done"), `create failed: ${e.message}`); toast(e.message); });
      });
  };
  $("create-wizard").showModal();
}
$("create-open").addEventListener("click", () => createWizard().catch(() => {}));

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
      b.addEventListener("click", () => addSpare(d.device, loadDrives));
      act.append(b);
    }
    const tr = make("tr");
    tr.dataset.device = d.device;
    tr.append(make("td", { textContent: d.device, title: id.by_id || "" }), make("td", { textContent: d.kind }),
      make("td", { textContent: id.model || (d.backing ? `over file ${d.backing}` : "") }), make("td", { textContent: id.serial || "" }),
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
  text($("updated"), `updated ${isoLocal(st.unix_ms).slice(11, 19)}`);
  const memKey = JSON.stringify([st.members, st.stale_members, st.member_identity, st.health, countersKey(st)]);
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
    tr.dataset.slot = String(m.slot);
    tr.dataset.device = m.device || "";
    const ident = (st.member_identity || {})[m.device];
    const health = (st.health || []).find((h) => h.device === m.device);
    tr.append(make("td", { textContent: slot }), make("td", { textContent: m.device || "—", title: (ident && ident.identity && ident.identity.by_id) || "" }),
      make("td", { textContent: who(ident), className: "identity" }),
      make("td", { textContent: m.state + (m.recovery_offset != null ? ` (rebuilt up to ${fmtSize(m.recovery_offset)}${rebuiltShare(st, m.recovery_offset)})` : ""), className: `state-${m.state}` }),
      make("td", { textContent: health ? healthText(health) : m.device ? "no reading" : "", className: "health" }),
      make("td", { textContent: countersText(st, m), className: "counters" }));
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
    body.append(make("tr", {}, make("td", { textContent: "stale" }), make("td", { textContent: d }), make("td"), make("td", { textContent: "not a member" }), make("td"), make("td"), make("td")));
  }
}

// The per-member counters column: the engine's per-member I/O counters
// (`io` of a member in `uraid status --json`: reads, writes, errors by
// kind, mean and p99 latency in µs since the array came up here) and the
// read errors repaired from redundancy; "—" for a member without them
// (a spare, or superblocks only).
function countersOf(st, m) {
  if (!m.io) return null;
  const e = m.io.errors || {};
  const errors = Object.values(e).reduce((a, b) => a + b, 0);
  return { reads: m.io.reads, writes: m.io.writes, errors, corrected: m.read_errors_corrected || 0,
    mean: Math.max(m.io.read_await_us || 0, m.io.write_await_us || 0), p99: m.io.p99_us || 0 };
}
const countersKey = (st) => st.members.map((m) => countersOf(st, m));
function countersText(st, m) {
  const c = countersOf(st, m);
  if (!c) return "—";
  const us = (v) => (v >= 1000 ? `${(v / 1000).toFixed(1)} ms` : `${Math.round(v)} µs`);
  return `${c.reads} reads, ${c.writes} writes, ${c.errors} errors` + (c.corrected ? `, ${c.corrected} corrected` : "") +
    ` · p99 ${us(c.p99)}`;
}

// --- charts ---------------------------------------------------------------

const series = { t: [], riops: [], wiops: [], rmb: [], wmb: [], rmean: [], rp99: [], wmean: [], wp99: [] };
// The history's columns (GET /api/history) by series.
const COLUMNS = { t: "t", riops: "read_iops", wiops: "write_iops", rmb: "read_mb_s", wmb: "write_mb_s",
  rmean: "read_mean_us", rp99: "read_p99_us", wmean: "write_mean_us", wp99: "write_p99_us" };
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
  text($("chart-tz"), `times in ${zoneText(Date.now())}`);
  $("range").addEventListener("change", () => { range = Number($("range").value); drawCharts(); });
  window.addEventListener("resize", () => {
    for (const [k, c] of Object.entries(charts)) c.setSize({ width: Math.max(260, $(`chart-${k}`).clientWidth), height: 180 });
  });
}

function pushFigures(st) {
  const [vol, f] = Object.entries(st.io || {})[0] || [];
  if (!f) return;
  text($("io-volume"), `(volume ${vol}, ${f.connections} connection(s), ${f.in_flight} in flight)`);
  const s = series;
  const t = st.unix_ms / 1000;
  if (s.t.length && t <= s.t[s.t.length - 1]) return;
  s.t.push(t);
  s.riops.push(f.read_iops); s.wiops.push(f.write_iops);
  s.rmb.push(f.read_mb_s); s.wmb.push(f.write_mb_s);
  s.rmean.push(f.read_mean_us); s.rp99.push(f.read_p99_us);
  s.wmean.push(f.write_mean_us); s.wp99.push(f.write_p99_us);
  while (s.t.length > KEEP) for (const k of Object.keys(s)) s[k].shift();
  drawCharts();
}

// The charts over the chosen range, ending at the newest point.
function drawCharts() {
  const s = series;
  const end = s.t.length ? s.t[s.t.length - 1] : 0;
  let i = s.t.findIndex((t) => t > end - range);
  if (i < 0) i = s.t.length;
  const c = (k) => s[k].slice(i);
  charts.iops.setData([c("t"), c("riops"), c("wiops")]);
  charts.mbs.setData([c("t"), c("rmb"), c("wmb")]);
  charts.lat.setData([c("t"), c("rmean"), c("rp99"), c("wmean"), c("wp99")]);
}

// What happened before the page was opened: the server's history (the
// last hour, a point a second), put before the points the stream brought.
async function loadHistory() {
  const r = await fetch(`/api/history?seconds=${KEEP}`);
  if (!r.ok) return;
  const h = await r.json();
  const s = series;
  const first = s.t.length ? s.t[0] : Infinity;
  let n = h.t.findIndex((t) => t >= first);
  if (n < 0) n = h.t.length;
  for (const [k, col] of Object.entries(COLUMNS)) s[k] = h[col].slice(0, n).concat(s[k]);
  while (s.t.length > KEEP) for (const k of Object.keys(s)) s[k].shift();
  drawCharts();
}

// --- events ---------------------------------------------------------------

// A time as local ISO 8601 with the offset from UTC: 2026-11-27T00:15:03+01:00.
function isoLocal(ms) {
  const d = new Date(ms), p = pad2;
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}${utcOffset(ms)}`;
}

function addEvent(e) {
  const when = isoLocal(e.unix_ms);
  const li = make("li", { textContent: `${when} ${e.event}${e.member ? " " + e.member : ""}: ${e.detail}` });
  li.dataset.event = e.event;
  li.title = zoneText(e.unix_ms);
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
text($("tz"), `times in ${zoneText(Date.now())}`);
connect();
loadHistory().catch(() => {});
loadReports();
pollBench();
