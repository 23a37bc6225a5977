"""The report in a real browser: headless Chromium (Debian's `chromium` and `chromium-driver`)
driven over WebDriver by a few httpx calls, with no network.

Checks: every chart is drawn (an SVG of a reasonable size, with vector marks, whose screenshot
is not blank), the pages ask the network for nothing (no resource entry, no CSP violation, and the
net-log of the whole browser run holds no request started by a page, while a control page
without the report's CSP shows up in it), and model output containing `<script>` and HTML shows
as text and never runs.

The browser runs in a network namespace of its own with only loopback (`unshare --net`, as
root), driven by this file run as a script inside it (`--probe`), so even Chromium's own
background probes reach nothing. Without namespaces it runs in place, with every host name
mapped to nowhere. Skips when Chromium or its driver is missing, unless WL_REQUIRE_CHROMIUM=1.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from workloadlang.report import sample, write_report

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
         "--window-size=1280,2000"]
EVIL = "<script>document.title='pwned'</script><b id=\"evil\">bold</b>"


def require_chromium() -> str:
    driver = shutil.which("chromedriver")
    if CHROMIUM.exists() and driver:
        return driver
    why = ("headless Chromium is not installed (apt-get install chromium chromium-driver); "
           "set WL_REQUIRE_CHROMIUM=1 to make this a failure")
    if os.environ.get("WL_REQUIRE_CHROMIUM") == "1":
        pytest.fail(why)
    pytest.skip(why)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """A minimal W3C WebDriver client: one Chromium session behind a local chromedriver."""

    def __init__(self, driver: str, folder: Path):
        self.netlog = folder / "netlog.json"
        port = free_port()
        self.proc = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        self.wait_ready()
        args = [*FLAGS, f"--user-data-dir={folder / 'profile'}", f"--log-net-log={self.netlog}",
                "--net-log-capture-mode=Everything"]
        caps = {"browserName": "chrome", "goog:loggingPrefs": {"browser": "ALL"},
                "goog:chromeOptions": {"binary": str(CHROMIUM), "args": args}}
        r = self.http.post("/session", json={"capabilities": {"alwaysMatch": caps}})
        r.raise_for_status()
        self.sid = r.json()["value"]["sessionId"]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.http.get("/status").json()["value"]["ready"]:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("chromedriver did not start")

    def cmd(self, method: str, path: str, body: dict | None = None):
        r = self.http.request(method, f"/session/{self.sid}{path}", json=body)
        r.raise_for_status()
        return r.json()["value"]

    def open(self, path: Path) -> None:
        self.cmd("POST", "/url", {"url": path.resolve().as_uri()})

    def js(self, script: str):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": []})

    def console(self) -> list[dict]:
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def element_png(self, css: str) -> bytes:
        el = self.cmd("POST", "/element", {"using": "css selector", "value": css})
        eid = next(iter(el.values()))
        return base64.b64decode(self.cmd("GET", f"/element/{eid}/screenshot"))

    def close(self) -> None:
        """End the session and the driver (once; later calls do nothing)."""
        if self.proc.poll() is not None:
            return
        try:
            self.cmd("DELETE", "")
        finally:
            self.http.close()
            self.proc.terminate()
            self.proc.wait(timeout=30)


CHART_INFO = """
return [...document.querySelectorAll('figure.chart')].map(f => {
  const svg = f.querySelector('svg');
  const r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  return {key: f.dataset.chart, width: r.width, height: r.height,
          marks: svg ? svg.querySelectorAll('path, text').length : 0,
          points: svg ? [...svg.querySelectorAll('path.mk')].reduce(
            (n, p) => n + (p.getAttribute('d').match(/M/g) || []).length, 0) : 0,
          images: svg ? svg.querySelectorAll('image').length : 0};
});
"""


STATE = """
return {title: document.title, scripts: document.scripts.length,
        evil: document.getElementById('evil') !== null,
        text: document.body.innerText.includes("<script>document.title='pwned'</script>"),
        resources: performance.getEntriesByType('resource').map(e => e.name)};
"""
CONTROL_URL = "http://report-test.invalid/pixel.png"


def read_netlog(path: Path) -> dict:
    """Chromium's net-log JSON; a log cut short at exit lacks its closing `]}`."""
    text = path.read_text(encoding="utf-8").rstrip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.rstrip(",") + "]}")


def page_requests(log: dict) -> set[str]:
    """URLs that a file:// document asked for: the pages under test and the control page are
    files, whose origin is opaque (`null`); the browser's own chatter comes with no origin or
    from its own pages (a new tab page asking google.com for its bar)."""
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    return {e["params"]["url"] for e in log["events"]
            if names.get(e["type"]) == "URL_REQUEST_START_JOB" and "url" in (e.get("params") or {})
            and e["params"].get("initiator") in ("null", "file://")}


def connected(log: dict) -> list[str]:
    """Addresses a socket connected to without an error."""
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    out, pending = [], {}
    for e in log["events"]:
        name, src = names.get(e["type"], ""), (e.get("source") or {}).get("id")
        if name in ("TCP_CONNECT", "UDP_CONNECT") and e.get("phase") == 1:
            pending[src] = (e.get("params") or {}).get("address")
        elif name in ("TCP_CONNECT", "UDP_CONNECT") and e.get("phase") == 2:
            addr = pending.pop(src, None)
            if not (e.get("params") or {}).get("net_error"):
                out.append(str(addr))
    return out


def loopback_up() -> None:
    """Bring up `lo` in a fresh network namespace (no-op where it is up already)."""
    if shutil.which("ip"):
        subprocess.run(["ip", "link", "set", "lo", "up"], check=False, capture_output=True)


def collect(driver: str, folder: Path, pages: dict[str, str]) -> dict:
    """The probe: open every page, measure its charts, screenshot them, read its state; then a
    control page; then the net-log. Output: a JSON-able dict."""
    loopback_up()
    b = Browser(driver, folder)
    out: dict = {"pages": {}}
    try:
        for key, path in pages.items():
            b.open(Path(path))
            charts = b.js(CHART_INFO)
            for c in charts:
                png = folder / f"{key}-{c['key']}.png"
                png.write_bytes(b.element_png(f'figure[data-chart="{c["key"]}"] svg'))
                c["png"] = str(png)
            out["pages"][key] = {"charts": charts, "state": b.js(STATE)}
        control = folder / "control.html"
        control.write_text(f'<!DOCTYPE html><img src="{CONTROL_URL}">', encoding="utf-8")
        b.open(control)
        time.sleep(0.5)
        out["console"] = b.console()
    finally:
        b.close()
    log = read_netlog(b.netlog)
    out["page_requests"] = sorted(page_requests(log))
    out["connected"] = connected(log)
    return out


def namespaces_work() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> dict:
    """What the browser saw of one report per benchmark kind, an overlay, a dense one and one
    whose model output is hostile."""
    driver = require_chromium()
    folder = tmp_path_factory.mktemp("pages")
    made = {"retention": [sample.retention()], "agent": [sample.agent()],
            "perf": [sample.perf(slower=1.5), sample.perf()], "abort": [sample.abort()],
            "needles": [sample.needles(reply=EVIL)],
            "dense": [sample.agent(sessions=50, steps=40, subs=2)]}
    pages = {k: str(write_report(v, folder / f"{k}.html")) for k, v in made.items()}
    cmd = [sys.executable, __file__, "--probe", driver, str(folder), json.dumps(pages)]
    isolated = namespaces_work()
    proc = subprocess.run(["unshare", "--net", *cmd] if isolated else cmd, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads(proc.stdout), "isolated": isolated}


EXPECTED = {"retention": ["retention", "latency"], "agent": ["sessions", "speed", "latency"],
            "perf": ["speed", "latency"], "abort": ["abort", "latency"],
            "needles": ["needles", "latency"], "dense": ["sessions", "speed", "latency"]}


@pytest.mark.parametrize("page", sorted(EXPECTED))
def test_every_chart_is_drawn(seen, page):
    from PIL import Image

    charts = seen["pages"][page]["charts"]
    assert [c["key"] for c in charts] == EXPECTED[page]
    for c in charts:
        assert c["width"] >= 600 and c["height"] >= 150, c
        assert c["marks"] >= 15 and c["points"] >= 4, c  # axes, labels, marks
        assert c["images"] == 0, c  # every mark is vector, no embedded PNG
        grey = Image.open(c["png"]).convert("L")
        inked = sum(grey.histogram()[:200])  # pixels darker than the page's light greys
        assert inked > 0.01 * grey.width * grey.height, (c["key"], inked)
    if page == "dense":  # 50 sessions of 44 requests: a mark for each
        assert charts[0]["points"] >= 50 * 44, charts[0]


def test_model_output_shows_as_text_and_never_runs(seen):
    state = seen["pages"]["needles"]["state"]
    assert state == {"title": "needle_test — workloadlang report", "scripts": 0, "evil": False,
                     "text": True, "resources": []}


def test_pages_load_nothing_and_break_no_policy(seen):
    for key, page in seen["pages"].items():
        assert page["state"]["resources"] == [], key
        assert page["state"]["scripts"] == 0, key
    bad = [e for e in seen["console"] if "Content Security Policy" in e.get("message", "")
           or "Refused to" in e.get("message", "")]
    assert bad == []


def test_netlog_shows_no_request_from_the_pages(seen):
    # The control page (no CSP) must show up, or the check would be blind.
    assert seen["page_requests"] == [CONTROL_URL]
    if seen["isolated"]:
        assert seen["connected"] == []


if __name__ == "__main__":  # the probe, run by the `seen` fixture (inside its own netns)
    if len(sys.argv) == 5 and sys.argv[1] == "--probe":
        print(json.dumps(collect(sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4]))))
