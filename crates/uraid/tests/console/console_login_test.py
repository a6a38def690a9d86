#!/usr/bin/env python3
"""The web console over HTTPS with its login page, in a real browser
(Debian's chromium and chromedriver, driven by selenium) and through
Python's TLS client. Run by the e2e test
`service::the_console_over_https_with_a_login` (crates/uraid/tests/e2e/service.rs),
which serves an array with `--console 0.0.0.0:0 --tls-cert --tls-key` and
passes:

  CONSOLE   the console's base URL, e.g. https://127.0.0.1:41234
  CA        the certificate to trust (the test's self-signed one)
  TOKEN     the console's access token
  ARRAY     the array's name
  SHOTS     where to keep the screenshots (test artefacts)

Exits 0 when every step passed; prints what failed otherwise.
"""
import http.client, json, os, ssl, time, urllib.parse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

CONSOLE, CA, TOKEN, ARRAY, SHOTS = (os.environ[k] for k in ("CONSOLE", "CA", "TOKEN", "ARRAY", "SHOTS"))
os.makedirs(SHOTS, exist_ok=True)
u = urllib.parse.urlsplit(CONSOLE)
HOST, PORT = u.hostname, u.port


def step(msg):
    print(f"console login test: {msg}", flush=True)


def https(path, method="GET", body=None, headers=None):
    """One request over a verified TLS connection; no redirect followed."""
    ctx = ssl.create_default_context(cafile=CA)
    c = http.client.HTTPSConnection(HOST, PORT, context=ctx, timeout=10)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    out = (r.status, r.getheader("Set-Cookie"), r.getheader("Location"), r.read().decode())
    c.close()
    return out


# --- the protocol, checked with a client that verifies the certificate ------
assert u.scheme == "https", CONSOLE
code, _, _, body = https("/")
assert code == 401 and 'action="/login"' in body and 'type="password"' in body, f"the page without a token: {code} {body[:200]}"
code, _, _, _ = https("/api/status")
assert code == 401, f"the status without a token: {code}"
# Clear text is not spoken: an HTTP request to the console's port gets no page.
try:
    c = http.client.HTTPConnection(HOST, PORT, timeout=10)
    c.request("GET", "/")
    r = c.getresponse()
    plain = f"answered {r.status}"
except (http.client.HTTPException, ConnectionError, OSError) as e:
    plain = None
assert plain is None, f"plain HTTP to the HTTPS console {plain}"
step("over TLS (the certificate verifies); the page without the token is the login page; plain HTTP gets nothing")

form = {"Content-Type": "application/x-www-form-urlencoded"}
t0 = time.monotonic()
code, cookie, _, body = https("/login", "POST", "token=wrong", form)
took = time.monotonic() - t0
assert code == 401 and cookie is None and "not the access token of this console" in body, f"a wrong login: {code} {cookie} {body[:200]}"
assert took >= 0.9, f"a wrong login was answered in {took:.2f} s, without the delay"
code, cookie, where, _ = https("/login", "POST", urllib.parse.urlencode({"token": TOKEN}), form)
assert code == 303 and where == "/" and cookie, f"the right login: {code} {cookie} {where}"
attrs = [a.strip() for a in cookie.split(";")]
assert attrs[0] == f"uraid_token={TOKEN}" and {"HttpOnly", "Secure", "SameSite=Strict"} <= set(attrs), cookie
code, _, _, body = https("/api/status", headers={"Cookie": attrs[0]})
assert code == 200 and json.loads(body)["name"] == ARRAY, f"the status with the cookie: {code} {body[:200]}"
step(f"a wrong token is refused after {took:.1f} s with no cookie; the right one sets a Secure, HttpOnly cookie that opens the API")

# A flood of wrong tokens does not queue behind the delay: past a few, the
# others are refused at once with 429 (rounds of six at once).
import threading
seen, deadline = set(), time.monotonic() + 30
while 429 not in seen and time.monotonic() < deadline:
    res = []
    ts = [threading.Thread(target=lambda: res.append(https("/login", "POST", "token=wrong", form))) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for code, cookie, _, body in res:
        assert code in (401, 429) and cookie is None, f"a wrong login in a flood: {code} {cookie} {body[:200]}"
        assert code == 401 or "Wait a second and try again" in body, body[:300]
        seen.add(code)
assert 429 in seen, "six wrong logins at once all waited their turn (no 429 in 30 s)"
# The limit holds every token, right or wrong, until it refills (a 429 says
# nothing of the token): the right one gets in a moment after the flood.
for _ in range(20):
    code, cookie, _, _ = https("/login", "POST", urllib.parse.urlencode({"token": TOKEN}), form)
    if code != 429:
        break
    time.sleep(0.5)
assert code == 303 and cookie, f"the right login after the flood: {code}"
step("wrong tokens sent at once get 429 at once past a few; the right token still logs in after the flood")

# --- the browser ---------------------------------------------------------------
o = webdriver.ChromeOptions()
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,1000"]:
    o.add_argument(a)
o.binary_location = "/usr/bin/chromium"
# The test's certificate is self-signed and chromium's trust store is not
# the system's; Python above has verified it.
o.accept_insecure_certs = True
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)
# A form post loads a new page: an element found on the old one goes stale
# while the wait polls; that is "not yet".
wait = WebDriverWait(d, 60, poll_frequency=0.2, ignored_exceptions=[NoSuchElementException, StaleElementReferenceException])
try:
    d.get(CONSOLE + "/")
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    assert d.execute_script("return document.activeElement.id") == "token", "the token field has no focus"
    d.find_element(By.ID, "token").send_keys("not-the-token")
    d.find_element(By.ID, "login").click()
    wait.until(lambda d: "not the access token of this console" in d.find_element(By.ID, "login-error").text)
    d.save_screenshot(os.path.join(SHOTS, "login-1-wrong.png"))
    assert not d.get_cookies(), d.get_cookies()
    step("the login page refuses a wrong token and says so")
    d.find_element(By.ID, "token").send_keys(TOKEN)
    d.find_element(By.ID, "login").click()
    wait.until(lambda d: d.find_elements(By.ID, "array-state") and d.find_element(By.ID, "array-state").text in ("clean", "active"))
    cookies = d.get_cookies()
    assert len(cookies) == 1 and cookies[0]["secure"] and cookies[0]["httpOnly"], cookies
    d.save_screenshot(os.path.join(SHOTS, "login-2-in.png"))
    step("the right token opens the console over HTTPS")
    d.find_element(By.ID, "logout").click()
    wait.until(lambda d: d.find_elements(By.ID, "token"))
    assert not d.get_cookies(), d.get_cookies()
    d.get(CONSOLE + "/")
    assert d.find_elements(By.ID, "token") and not d.find_elements(By.ID, "array-state")
    step("log out: the cookie is gone and the login page is back")
finally:
    d.quit()
print("console login test: passed")
