#!/usr/bin/env python3
"""The web console in a real browser (Debian's chromium and chromedriver,
driven by selenium), against a served RAID 5 that fio writes to. Run by the
e2e test `service::the_console_in_a_real_browser` (crates/uraid/tests/e2e/service.rs),
which makes the array and passes:

  URAID           the uraid binary
  URAID_RUN_DIR   its run directory (control socket)
  CONSOLE         the console's base URL, e.g. http://127.0.0.1:41234
  TOKEN           the console's access token
  ARRAY           the array's name
  SPARE           a device to add as a spare
  REPLACEMENT     a free device the replace wizard puts in place of role 2
  GROW            a free device the grow wizard adds
  CREATE          three free devices (comma-separated) for the create wizard
  SHOTS           where to keep the screenshots (test artefacts)

Exits 0 when every step passed; prints what failed otherwise.
"""
import datetime, json, os, re, subprocess, sys, time, urllib.error, urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

URAID, CONSOLE, TOKEN, ARRAY, SPARE, SHOTS, REPL, GROW = (os.environ[k] for k in ("URAID", "CONSOLE", "TOKEN", "ARRAY", "SPARE", "SHOTS", "REPLACEMENT", "GROW"))
CREATE = os.environ["CREATE"].split(",")
# The browser runs in India's zone: every time the page shows must be in it.
IST = datetime.timezone(datetime.timedelta(hours=5, minutes=30))
os.makedirs(SHOTS, exist_ok=True)


def step(msg):
    print(f"console test: {msg}", flush=True)


def status():
    return json.loads(subprocess.run([URAID, "status", "--json", ARRAY], capture_output=True, text=True, check=True).stdout)


def http(path, method="GET", body=None, headers=None):
    req = urllib.request.Request(CONSOLE + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# --- without the browser: the server checks every request ----------------
# The first health poll (and its HealthWarning) before the checks begin.
deadline = time.time() + 60
while len(json.loads(http("/api/status", headers={"Authorization": f"Bearer {TOKEN}"})[1] or "{}").get("health") or []) < 4:
    assert time.time() < deadline, "no health reading of the four members after 60 s"
    time.sleep(0.5)
events0 = status()["events"]
code, _ = http("/")
assert code == 401, f"the page without a token: {code}"
code, _ = http("/api/status")
assert code == 401, f"the status without a token: {code}"
code, _ = http("/?token=wrong")
assert code == 401, f"a wrong token: {code}"
fail1 = json.dumps({"version": 1, "command": {"fail": {"member": "1", "force": False}}}).encode()
# A forged action: the browser would send the cookie, but not the page's header.
code, body = http("/api/command", "POST", fail1, {"Cookie": f"uraid_token={TOKEN}", "Content-Type": "application/json"})
assert code == 403 and "X-Uraid-Token" in body, f"a forged action: {code} {body}"
code, body = http("/api/command", "POST", fail1, {"Cookie": f"uraid_token={TOKEN}", "X-Uraid-Token": "nope"})
assert code == 403, f"a wrong header: {code} {body}"
code, body = http("/api/command", "POST", fail1, {"X-Uraid-Token": TOKEN})
assert code == 401, f"the header without the cookie: {code} {body}"
st = status()
assert st["events"] == events0 and st["members"][1]["state"] == "active", f"a refused request changed the array: {st}"
step("requests without the token or with a forged action are refused and change nothing")

# --- the history: kept by the server before any page is open ---------------
BEARER = {"Authorization": f"Bearer {TOKEN}"}
code, _ = http("/api/history")
assert code == 401, f"the history without a token: {code}"
code, body = http("/api/history?seconds=abc", headers=BEARER)
assert code == 400 and "whole number" in body, f"a bad range: {code} {body}"
deadline = time.time() + 60
while True:
    code, body = http("/api/history?seconds=99999", headers=BEARER)
    assert code == 200, f"the history: {code} {body}"
    h = json.loads(body)
    busy = [t for t, r, w in zip(h["t"], h["read_iops"], h["write_iops"]) if r + w > 0]
    # 12, for the page's 10 below: those count only the points more than
    # 1 s older than the page, and the newest two may not be.
    if len(busy) >= 12:
        break
    assert time.time() < deadline, f"no 12 s of I/O in the server's history after 60 s: {h}"
    time.sleep(1)
assert h["seconds"] == 3600 and h["kept_seconds"] == 3600, {k: h[k] for k in ("seconds", "kept_seconds")}
step(f"the server's history (before any page): {len(h['t'])} points, {len(busy)} with I/O, "
     f"{h['bytes_per_point']} bytes a point, {h['kept_seconds'] * h['bytes_per_point']} bytes for the hour")


def fresh(f):
    """`f()`, again when a refresh redrew an element it used. The page
    re-renders its tables on every refresh (each second), so an element
    found just before one is stale when used; selenium raises before a
    click reaches the page, so finding it again and retrying is safe.
    Gives up after 10 s."""
    deadline = time.time() + 10
    while True:
        try:
            return f()
        except StaleElementReferenceException:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def press(d, by, sel):
    """Finds the element and clicks it (see `fresh`)."""
    fresh(lambda: d.find_element(by, sel).click())


def click(find):
    """Clicks the element `find()` returns in the middle of the window, with
    the last message (the toast, which sits at the bottom) out of the way
    (see `fresh`)."""
    def go():
        el = find()
        el.parent.execute_script("document.getElementById('toast').hidden = true; arguments[0].scrollIntoView({block: 'center'});", el)
        el.click()
    fresh(go)


def backing(dev):
    """The file behind loop device `dev`."""
    with open(f"/sys/block/{os.path.basename(os.path.realpath(dev))}/loop/backing_file") as f:
        return f.read().strip()

# --- the browser -----------------------------------------------------------
o = webdriver.ChromeOptions()
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1500"]:
    o.add_argument(a)
o.binary_location = "/usr/bin/chromium"
os.environ["TZ"] = "Asia/Kolkata"
o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
wait = WebDriverWait(d, 60, poll_frequency=0.2)
try:
    d.get(f"{CONSOLE}/?token={TOKEN}")
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    load_ms = d.execute_script("const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;")
    step(f"the overview shows the array clean (page load {load_ms:.0f} ms)")
    # Printed above; bounded loosely: the machine may be busy (2 cores shared).
    assert load_ms < 30000, f"page load {load_ms} ms"
    # The charts show what happened before the page was opened (the server's history).
    opened = d.execute_script("return performance.timeOrigin / 1000")
    before = lambda d: d.execute_script(
        "const o = arguments[0]; return series.t.filter((t, i) => t < o - 1 && series.riops[i] + series.wiops[i] > 0).length", opened)
    wait.until(lambda d: before(d) >= 10, "the charts have no I/O from before the page was opened")
    step(f"the charts hold {before(d)} seconds of I/O from before the page was opened (first point "
         f"{opened - d.execute_script('return series.t[0]'):.0f} s before it)")
    # Times in the browser's zone, named.
    tz = d.find_element(By.ID, "tz").text
    assert re.search(r"Asia/(Kolkata|Calcutta)", tz) and "+05:30" in tz, tz
    wait.until(lambda d: re.search(r"\d\d:\d\d:\d\d", d.find_element(By.ID, "updated").text))
    hh, mm, ss = map(int, re.search(r"(\d\d):(\d\d):(\d\d)", d.find_element(By.ID, "updated").text).groups())
    now = datetime.datetime.now(IST)
    off = abs((now.hour * 3600 + now.minute * 60 + now.second) - (hh * 3600 + mm * 60 + ss)) % 86400
    assert min(off, 86400 - off) < 120, f"last updated {hh:02}:{mm:02}:{ss:02}, now in India {now:%H:%M:%S}"
    evs = [li.text for li in d.find_elements(By.CSS_SELECTOR, "#events li")]
    assert evs and all("+05:30" in e for e in evs), evs
    # The charts' time axis: each tick that shows hours and minutes shows India's.
    splits, labels = d.execute_script("const a = charts.iops.axes[0]; return [a._splits, a._values];")
    ticks = 0
    for t, v in zip(splits or [], labels or []):
        m = re.search(r"(\d{1,2}):(\d\d)", str(v))
        if m:
            exp = datetime.datetime.fromtimestamp(t, IST)
            assert int(m[1]) in (exp.hour, exp.hour % 12 or 12) and int(m[2]) == exp.minute, f"tick {v!r} at {t}: India has {exp:%H:%M}"
            ticks += 1
    assert ticks, f"no time-of-day tick on the chart: {labels}"
    step(f"times in the browser's zone: {tz!r}, {d.find_element(By.ID, 'updated').text!r}, event {evs[0]!r}, chart ticks {labels}")
    # Reloads: each page's event stream is closed when it is left, so the
    # browser's six connections to the console are never all held by old
    # pages (which left the 7th load waiting about a minute).
    d.set_page_load_timeout(20)
    for i in range(8):
        d.get("about:blank")
        try:
            d.get(f"{CONSOLE}/")
        except TimeoutException:
            raise AssertionError(f"reload {i + 1} of the console did not load in 20 s")
        WebDriverWait(d, 20, poll_frequency=0.2).until(lambda d: d.find_element(By.ID, "array-state").text == "clean", f"reload {i + 1}")
    d.set_page_load_timeout(300)
    step("eight reloads each show the array")
    # What the members are: model, size, logical sector size, what they sit on.
    press(d, By.CSS_SELECTOR, "#member-details summary")
    rows = d.find_elements(By.CSS_SELECTOR, "#details tbody tr")
    assert len(rows) == 4 and all("/dev/loop" in r.text and re.search(r"\b(512|4096) B\b", r.text) for r in rows), [r.text for r in rows]
    step("the members' details show: " + rows[0].text)
    d.save_screenshot(os.path.join(SHOTS, "1-healthy.png"))

    # The members' health (the recorded smartctl output of real drives, as
    # the e2e test feeds it): temperature, % used, and member 1's warning.
    def health_of(dev):
        try:
            return d.find_element(By.CSS_SELECTOR, f'#members tbody tr[data-device="{dev}"] td.health').text
        except (StaleElementReferenceException, NoSuchElementException):
            return ""
    mdevs = [m["device"] for m in status()["members"]]
    expect = {0: ["OK", "35 °C", "0% used"], 1: ["WARNING 0x10", "40 °C", "0% used"], 2: ["OK", "19 °C", "75% used"], 3: ["OK", "30 °C", "51% used"]}
    try:
        for r, needles in expect.items():
            wait.until(lambda d: all(n in health_of(mdevs[r]) for n in needles), f"role {r}'s health shows {needles}")
    except TimeoutException:
        raise AssertionError(f"the member rows' health: {[health_of(x) for x in mdevs]}, expected {expect}")
    shown_health = {r: health_of(mdevs[r]) for r in expect}
    step(f"the member rows' health: {shown_health}")

    # The charts move: the drawn series differ between two screenshots.
    chart = d.find_element(By.ID, "chart-iops")
    wait.until(lambda d: d.execute_script("return document.querySelectorAll('#chart-iops canvas').length") > 0)
    time.sleep(2)
    a = chart.screenshot_as_png
    time.sleep(3)
    b = chart.screenshot_as_png
    assert a != b, "the IOPS chart did not change in 3 s while fio writes"
    step("the live charts move")

    # Per-member rows carry the engine's counters (issue 32 item 3): fio's
    # writes show on every member, as uraid status counts them.
    def counters_of(dev):
        try:
            t = d.find_element(By.CSS_SELECTOR, f'#members tbody tr[data-device="{dev}"] td.counters').text
        except (StaleElementReferenceException, NoSuchElementException):
            return None
        m = re.search(r"(\d+) reads, (\d+) writes, (\d+) errors.*p99", t)
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None
    first = status()["members"][0]
    wait.until(lambda d: (counters_of(first["device"]) or (0, 0, 0))[1] > 0, "member 0's counters show its writes")
    shown, io = counters_of(first["device"]), status()["members"][0]["io"]
    assert shown[2] == 0 and 0 < shown[1] <= io["writes"], (shown, io)
    step(f"member 0's counters: {shown[0]} reads, {shown[1]} writes, {shown[2]} errors (uraid status: {io['writes']} writes)")

    # Fail member 1, with its confirmation.
    press(d, By.ID, "fail-1")
    dialog = d.find_element(By.ID, "confirm")
    assert dialog.is_displayed() and "marked faulty" in d.find_element(By.ID, "confirm-text").text
    d.save_screenshot(os.path.join(SHOTS, "2-confirm-fail.png"))
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "degraded")
    st = status()
    assert st["members"][1]["state"] == "faulty", f"uraid status after the page's fail: {st['members']}"
    step("fail member 1 turns the array degraded in the page and in uraid status")
    d.save_screenshot(os.path.join(SHOTS, "3-degraded.png"))

    def member_row(dev):
        try:
            return d.find_element(By.CSS_SELECTOR, f'#members tbody tr[data-device="{dev}"]').text
        except (StaleElementReferenceException, NoSuchElementException):
            return ""
    failed = st["members"][1]["device"]
    wait.until(lambda d: "faulty" in member_row(failed) and backing(failed) in member_row(failed))
    step(f"the failed member's row: {member_row(failed)!r}")

    # A refusal from the engine is shown as the CLI shows it.
    press(d, By.ID, "fail-2")
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: d.find_element(By.ID, "toast").is_displayed())
    assert "lose the data" in d.find_element(By.ID, "toast").text, d.find_element(By.ID, "toast").text
    assert status()["members"][2]["state"] == "active"
    step("a fail past the tolerance is refused, with the engine's message")

    # The drives panel: the members by role (role 1 faulty), the spare-to-be free. Add it as
    # a spare from its row: it takes over role 1; the rebuild's bar reaches 100%.
    press(d, By.CSS_SELECTOR, "#drives-panel summary")
    row = lambda dev: d.find_element(By.CSS_SELECTOR, f'#drives tbody tr[data-device="{dev}"]')

    def row_text(dev):
        # The panel redraws its rows on a refresh: a row found just before may be gone.
        try:
            return row(dev).text
        except (StaleElementReferenceException, NoSuchElementException):
            return ""
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f'#drives tbody tr[data-device="{SPARE}"]')) == 1)
    assert "free" in fresh(lambda: row(SPARE).text), fresh(lambda: row(SPARE).text)
    members = [m["device"] for m in st["members"]]
    assert "role 0 of this array (active)" in fresh(lambda: row(members[0]).text), fresh(lambda: row(members[0]).text)
    assert "role 1 of this array (faulty)" in fresh(lambda: row(members[1]).text), fresh(lambda: row(members[1]).text)
    assert not fresh(lambda: row(members[0]).find_elements(By.TAG_NAME, "button")), "a member row offers an action"
    step(f"the drives panel: {fresh(lambda: row(SPARE).text)!r}; {fresh(lambda: row(members[1]).text)!r}")
    # The drives panel's Health column says what the member rows say.
    for r, txt in shown_health.items():
        cell = fresh(lambda: row(members[r]).find_elements(By.TAG_NAME, "td")[5].text)
        assert cell == txt, f"role {r}: drives panel {cell!r}, member row {txt!r}"
    d.save_screenshot(os.path.join(SHOTS, "3b-drives.png"))
    step("the drives panel shows the same health as the member rows")

    # The create wizard: a new array from free drives, checked as `uraid create` checks it.
    newname = f"made{os.getpid()}"
    click(lambda: d.find_element(By.ID, "create-open"))
    wait.until(lambda d: d.find_element(By.ID, "create-wizard").is_displayed())
    wait.until(lambda d: all(len(d.find_elements(By.CSS_SELECTOR, f'#create-drives input[value="{c}"]')) == 1 for c in CREATE))
    assert not d.find_elements(By.CSS_SELECTOR, f'#create-drives input[value="{members[0]}"]'), "a member is offered for a new array"
    d.find_element(By.ID, "create-name").send_keys(newname)
    Select(d.find_element(By.ID, "create-level")).select_by_value("5")
    chunk = d.find_element(By.ID, "create-chunk")
    chunk.clear()
    chunk.send_keys("64K")

    def create_error(needle):
        press(d, By.ID, "create-next")
        wait.until(lambda d: needle in d.find_element(By.ID, "create-error").text, f"the wizard says {needle!r}")
        assert d.find_element(By.ID, "create-wizard").is_displayed()
        return d.find_element(By.ID, "create-error").text
    press(d, By.CSS_SELECTOR, f'#create-drives input[value="{CREATE[0]}"]')
    few = create_error("RAID 5 needs at least 3 members, 1 given")
    d.save_screenshot(os.path.join(SHOTS, "11a-create-too-few.png"))
    for c in CREATE[1:]:
        press(d, By.CSS_SELECTOR, f'#create-drives input[value="{c}"]')
    chunk.clear()
    chunk.send_keys("96K")
    odd = create_error("power of two")
    chunk.clear()
    chunk.send_keys("64K")
    held = os.open(CREATE[2], os.O_RDONLY | os.O_EXCL)
    try:
        busy = create_error("is in use")
    finally:
        os.close(held)
    step(f"the create wizard refuses with the core's words: {few!r}; {odd!r}; {busy!r}")
    def examine(dev):
        return json.loads(subprocess.run([URAID, "examine", "--json", dev], capture_output=True, text=True, check=True).stdout)[0]
    assert all("superblock" not in examine(c) for c in CREATE), f"a refused create wrote: {[examine(c) for c in CREATE]}"
    # RAID 1 over two of them: the cost and each target's identity first.
    Select(d.find_element(By.ID, "create-level")).select_by_value("1")
    press(d, By.CSS_SELECTOR, f'#create-drives input[value="{CREATE[2]}"]')
    d.save_screenshot(os.path.join(SHOTS, "11b-create-wizard.png"))
    press(d, By.ID, "create-next")
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert "WRITES OVER" in ctext and all(c in ctext and backing(c) in ctext for c in CREATE[:2]) and CREATE[2] not in ctext, ctext
    assert re.search(r"No initial sync .*zeroes [\d.]+ GB on each of the 2 members", ctext), ctext
    step(f"create asks first: {ctext!r}")
    d.save_screenshot(os.path.join(SHOTS, "11c-create-confirm.png"))
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: "Created array" in d.find_element(By.ID, "create-done").text)
    done_text = d.find_element(By.ID, "create-done").text
    assert f"uraid serve {newname} {CREATE[0]} {CREATE[1]}" in done_text and f"uraid@{newname}.service" in done_text, done_text
    d.save_screenshot(os.path.join(SHOTS, "11d-created.png"))
    for c in CREATE[:2]:
        sb = examine(c).get("superblock") or {}
        assert sb.get("name") == newname and [v["level"] for v in sb.get("volumes", [])] == [1], examine(c)
    wait.until(lambda d: "another array" in row_text(CREATE[0]) or newname in row_text(CREATE[0]), "the drives panel names the new array's member")
    step(f"the create wizard made {newname}: {done_text!r}; uraid examine reads it; the panel: {row_text(CREATE[0])!r}")
    click(lambda: row(SPARE).find_element(By.TAG_NAME, "button"))
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert SPARE in ctext and "WRITES OVER" in ctext and re.search(r"rebuilds [\d.]+ GB at \d+ MB/s: about \d+ s", ctext), ctext
    step(f"add spare asks first: {ctext!r}")
    d.save_screenshot(os.path.join(SHOTS, "3c-add-spare-confirm.png"))
    press(d, By.ID, "confirm-ok")
    try:
        wait.until(lambda d: d.find_element(By.ID, "progress-box").is_displayed())
    except TimeoutException:
        d.save_screenshot(os.path.join(SHOTS, "debug-fail.png"))
        print("DEBUG status", json.dumps(status())[:3000], "toast", d.find_element(By.ID, "toast").text, flush=True)
        raise
    seen = []
    def done(d):
        # data-done first: the page sets the bar to 100 before it marks it done, so a
        # value read after the mark is the final one (read the other way round, an update
        # between the two reads leaves the last value seen short of 100).
        finished = d.find_element(By.ID, "progress-box").get_attribute("data-done") == "1"
        seen.append(float(d.find_element(By.ID, "progress").get_attribute("value")))
        return finished
    WebDriverWait(d, 180, poll_frequency=0.2).until(done)
    assert seen[-1] == 100.0 and "finished" in d.find_element(By.ID, "progress-text").text, seen
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    wait.until(lambda d: any(li.get_attribute("data-event") == "RebuildFinished" for li in d.find_elements(By.CSS_SELECTOR, "#events li")))
    step(f"add spare rebuilds in the background; the bar went {min(seen):.0f}% .. {max(seen):.0f}%, RebuildFinished shown")
    press(d, By.ID, "drives-refresh")
    wait.until(lambda d: "role 1 of this array (active)" in row_text(SPARE))
    step(f"the drives panel after the rebuild: {row_text(SPARE)!r}")
    d.save_screenshot(os.path.join(SHOTS, "4-rebuilt.png"))
    # The failed member stays, with who it is, until removed.
    assert "faulty" in member_row(failed) and backing(failed) in member_row(failed), member_row(failed)
    click(lambda: d.find_element(By.CSS_SELECTOR, f'#members tbody tr[data-device="{failed}"] button'))
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: member_row(failed) == "")
    assert all(m["device"] != failed for m in status()["members"]), status()["members"]
    step("the failed member stayed shown with its identity until removed from the page")

    # The replace wizard: role 2 for REPLACEMENT, its cost and identity shown first.
    old2 = status()["members"][2]["device"]
    click(lambda: d.find_element(By.ID, "replace-open"))
    wait.until(lambda d: d.find_element(By.ID, "replace-wizard").is_displayed())
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f'#replace-new option[value="{REPL}"]')) == 1)
    assert not d.find_elements(By.CSS_SELECTOR, f'#replace-new option[value="{SPARE}"]'), "a member is offered as a free drive"
    Select(d.find_element(By.ID, "replace-old")).select_by_value("2")
    Select(d.find_element(By.ID, "replace-new")).select_by_value(REPL)
    cost = d.find_element(By.ID, "replace-cost").text
    assert REPL in cost and re.search(r"rebuilds [\d.]+ GB at \d+ MB/s: about \d+ s", cost), cost
    d.save_screenshot(os.path.join(SHOTS, "8-replace-wizard.png"))
    press(d, By.ID, "replace-next")
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert "WRITES OVER" in ctext and REPL in ctext and backing(REPL) in ctext, ctext
    d.save_screenshot(os.path.join(SHOTS, "8b-replace-confirm.png"))
    press(d, By.ID, "confirm-ok")
    WebDriverWait(d, 180, poll_frequency=0.5).until(
        lambda d: any(m["role"] == 2 and m["device"] == REPL and m["state"] == "active" for m in status()["members"]))
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    wait.until(lambda d: "faulty" in member_row(old2) and backing(old2) in member_row(old2))
    step(f"the replace wizard: {cost!r}; role 2 is {REPL} now; the old one stays: {member_row(old2)!r}")
    d.save_screenshot(os.path.join(SHOTS, "8c-replaced.png"))

    # The grow wizard: add GROW, its cost and identity shown first; the reshape runs.
    st0 = status()
    click(lambda: d.find_element(By.ID, "grow-open"))
    wait.until(lambda d: d.find_element(By.ID, "grow-wizard").is_displayed())
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f'#grow-drives input[value="{GROW}"]')) == 1)
    assert d.find_element(By.ID, "grow-next").get_attribute("disabled") is not None, "grow offered with nothing picked"
    click(lambda: d.find_element(By.CSS_SELECTOR, f'#grow-drives input[value="{GROW}"]'))
    cost = d.find_element(By.ID, "grow-cost").text
    assert GROW in cost and re.search(r"reshapes [\d.]+ GB \(volume [^)]+\) at \d+ MB/s: about \d+ s", cost), cost
    d.save_screenshot(os.path.join(SHOTS, "10-grow-wizard.png"))
    press(d, By.ID, "grow-next")
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert "WRITES OVER" in ctext and GROW in ctext and backing(GROW) in ctext, ctext
    d.save_screenshot(os.path.join(SHOTS, "10b-grow-confirm.png"))
    press(d, By.ID, "confirm-ok")
    WebDriverWait(d, 180, poll_frequency=0.5).until(
        lambda d: (lambda st: st["member_count"] == st0["member_count"] + 1 and not st.get("progress")
                   and st["volumes"][0]["capacity"] > st0["volumes"][0]["capacity"])(status()))
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    step(f"the grow wizard: {cost!r}; {st0['member_count']} -> {status()['member_count']} members")

    # The same wizard changes the chunk alone: a restripe, nothing written over.
    chunk0 = status()["volumes"][0]["chunk"]
    new_chunk = chunk0 * 2
    click(lambda: d.find_element(By.ID, "grow-open"))
    wait.until(lambda d: d.find_element(By.ID, "grow-wizard").is_displayed())
    Select(d.find_element(By.ID, "grow-chunk")).select_by_value(str(new_chunk))
    cost = d.find_element(By.ID, "grow-cost").text
    assert "restripes to a" in cost and "adds" not in cost and re.search(r"about \d+ s", cost), cost
    press(d, By.ID, "grow-next")
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert "WRITES OVER" not in ctext and "restripes to a" in ctext, ctext
    d.save_screenshot(os.path.join(SHOTS, "10c-chunk-confirm.png"))
    press(d, By.ID, "confirm-ok")
    WebDriverWait(d, 240, poll_frequency=0.5).until(
        lambda d: (lambda st: st["volumes"][0]["chunk"] == new_chunk and not st.get("progress"))(status()))
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    wait.until(lambda d: f"chunk {new_chunk // 1024}K" in d.find_element(By.ID, "volumes").text)
    step(f"the grow wizard changes the chunk: {cost!r}; chunk {chunk0} -> {status()['volumes'][0]['chunk']} bytes")

    # And migrates the level: RAID 5 -> 6 with one new member for the second parity
    # (the create wizard's third drive, free again).
    members0, cap0 = status()["member_count"], status()["volumes"][0]["capacity"]
    click(lambda: d.find_element(By.ID, "grow-open"))
    wait.until(lambda d: d.find_element(By.ID, "grow-wizard").is_displayed())
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, f'#grow-drives input[value="{CREATE[2]}"]')) == 1)
    click(lambda: d.find_element(By.CSS_SELECTOR, f'#grow-drives input[value="{CREATE[2]}"]'))
    Select(d.find_element(By.ID, "grow-level")).select_by_value("6")
    cost = d.find_element(By.ID, "grow-cost").text
    assert "converts RAID 5 to RAID 6" in cost and CREATE[2] in cost, cost
    press(d, By.ID, "grow-next")
    wait.until(lambda d: d.find_element(By.ID, "confirm").is_displayed())
    ctext = d.find_element(By.ID, "confirm-text").text
    assert "WRITES OVER" in ctext and CREATE[2] in ctext and backing(CREATE[2]) in ctext, ctext
    d.save_screenshot(os.path.join(SHOTS, "10d-level-confirm.png"))
    press(d, By.ID, "confirm-ok")
    WebDriverWait(d, 240, poll_frequency=0.5).until(
        lambda d: (lambda st: st["volumes"][0]["level"] == 6 and st["member_count"] == members0 + 1 and not st.get("progress"))(status()))
    wait.until(lambda d: d.find_element(By.ID, "array-state").text == "clean")
    wait.until(lambda d: "RAID 6" in d.find_element(By.ID, "volumes").text)
    assert status()["volumes"][0]["capacity"] == cap0, (cap0, status()["volumes"][0])
    d.save_screenshot(os.path.join(SHOTS, "10e-raid6.png"))
    step(f"the grow wizard migrates the level: {cost!r}; RAID 5 x{members0} -> RAID 6 x{status()['member_count']}, same capacity")

    # A scrub started from the page: 0 mismatches.
    press(d, By.ID, "start-check")
    press(d, By.ID, "confirm-ok")
    WebDriverWait(d, 180, poll_frequency=0.3).until(lambda d: "mismatches" in d.find_element(By.ID, "check-result").text)
    res = d.find_element(By.ID, "check-result").text
    assert "0 mismatches" in res and "0 stripes checked" not in res, res
    step(f"a check from the page: {res}")

    # The write-back toggle shows its warning, after a confirmation that says so.
    Select(d.find_element(By.ID, f"cache-{ARRAY}")).select_by_value("writeback")
    assert "LOST on power loss" in d.find_element(By.ID, "confirm-text").text
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: any("lost on power loss" in w.text for w in d.find_elements(By.CSS_SELECTOR, ".warning")))
    assert status()["volumes"][0]["cache"]["mode"] == "writeback"
    step("the write-back cache toggle shows its warning")
    d.save_screenshot(os.path.join(SHOTS, "5-writeback.png"))

    # A benchmark on a target that holds no live data, started from the
    # page; a member is refused; the report is kept and listed.
    d.find_element(By.ID, "bench-target").send_keys(SPARE)
    press(d, By.ID, "bench-start")
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: d.find_element(By.ID, "toast").is_displayed() and "member of array" in d.find_element(By.ID, "toast").text)
    d.find_element(By.ID, "bench-target").clear()
    d.find_element(By.ID, "bench-target").send_keys("mem:512M,bw=200M,iops=20000")
    press(d, By.ID, "bench-start")
    press(d, By.ID, "confirm-ok")
    wait.until(lambda d: "running" in d.find_element(By.ID, "bench-state").text)
    WebDriverWait(d, 240, poll_frequency=1).until(lambda d: "done" in d.find_element(By.ID, "bench-state").text or "failed" in d.find_element(By.ID, "bench-state").text)
    assert "done" in d.find_element(By.ID, "bench-state").text, d.find_element(By.ID, "bench-state").text
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#reports a")) > 0)
    href = d.find_element(By.CSS_SELECTOR, "#reports a").get_attribute("href")
    main = d.current_window_handle
    d.switch_to.new_window("tab")
    d.get(href)
    wait.until(lambda d: "RND4K" in d.page_source or "SEQ1M" in d.page_source)
    d.save_screenshot(os.path.join(SHOTS, "7-report.png"))
    d.close()
    d.switch_to.window(main)
    step("a benchmark of a mem: drive from the page (a member refused); its report is kept and opens")

    # The range choice: 1 min shows the last minute of the history, 1 h all of it.
    wait.until(lambda d: d.execute_script("return series.t[series.t.length - 1] - series.t[0]") > 90)
    Select(d.find_element(By.ID, "range")).select_by_value("60")
    span60 = d.execute_script("const x = charts.iops.data[0]; return x[x.length - 1] - x[0]")
    d.save_screenshot(os.path.join(SHOTS, "9-range-1min.png"))
    Select(d.find_element(By.ID, "range")).select_by_value("3600")
    span, n, kept = d.execute_script("const x = charts.iops.data[0]; return [x[x.length - 1] - x[0], x.length, series.t.length]")
    assert span60 <= 60 and span > 90 and n == kept, (span60, span, n, kept)
    d.save_screenshot(os.path.join(SHOTS, "9-range-1h.png"))
    step(f"the range choice: 1 min spans {span60:.0f} s, 1 h spans {span:.0f} s ({n} points)")

    # Keyboard: the controls are reachable with Tab.
    d.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0);")
    reached = set()
    for _ in range(40):
        ActionChains(d).send_keys(Keys.TAB).perform()
        reached.add(d.execute_script("return document.activeElement && document.activeElement.id"))
    assert {"add-device", "add-spare", "start-check", "stop-array"} <= reached, reached
    step("the controls are reachable with the keyboard")

    # A phone-sized screen, in the dark colour scheme.
    d.set_window_size(390, 1600)
    d.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    time.sleep(1)
    bg = d.execute_script("return getComputedStyle(document.body).backgroundColor")
    assert bg in ("rgb(13, 17, 23)",), f"the dark scheme's background: {bg}"
    d.save_screenshot(os.path.join(SHOTS, "6-phone-dark.png"))
    step("a phone-sized screen in the dark scheme")

    errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"the browser console has errors: {errors}"
    step("the browser console has no errors")
finally:
    d.quit()
print("console test: passed")
