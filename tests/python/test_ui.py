"""The web view (`/ui/` on the admin port) in a real browser: headless Chromium driven by
Selenium (Debian's `chromium` and `chromium-driver`, installed by tests/python/run.sh when
missing), against the real binary (`$KARTOGRAF_BIN`) serving a temporary copy of
examples/cluster plus one hostile workload.

- the pages load (overview, workloads, definitions), without a script error;
- a click in the workloads table opens `llama-train`, and its pods and GPUs are on the page;
- a manifest edit changes the open page without a reload;
- names, labels and annotations holding markup, quotes, direction marks and 1 MB values render
  as text (nothing is injected, nothing runs);
- the JSON API and the live feed over plain HTTP: headers (CSP), read-only, tokens, resume
  with Last-Event-ID and "started over".

Screenshots go to $KARTOGRAF_UI_SCREENSHOTS (default target/ui-screenshots/), printed at the
end. Run with `bash tests/python/run.sh tests/python/test_ui.py` (after `cargo build`).
"""

import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from ports import free_port

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster"
SHOTS = Path(os.environ.get("KARTOGRAF_UI_SCREENSHOTS", REPO / "target" / "ui-screenshots"))
CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")

READY_TIMEOUT = 60.0
PAGE_TIMEOUT = 15.0
# A manifest edit must show on an open page within this (the goal is 1 s from the change in
# the cluster; the file watcher's own delay comes on top here).
LIVE_TIMEOUT = 5.0

LLAMA_TRAIN_UID = "3f1c2a9e-0001-4000-8000-000000000001"
LLAMA_WORKER_POD = "llama-train-workers-1-0-x7k2p"
HOSTILE_UID = "0bad0bad-0000-4000-8000-000000000001"
HOSTILE_NAME = "<img src=x onerror=window.__pwned=4>\"'&<script>window.__pwned=3</script>\u202eevil"
HOSTILE_NAMESPACE = "hostile<b>ns</b>"
BIG = 1_000_000

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def binary() -> Path:
    path = Path(os.environ.get("KARTOGRAF_BIN", "target/debug/kartograf"))
    return path if path.is_absolute() else REPO / path



def hostile_pod() -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": HOSTILE_NAME,
            "namespace": HOSTILE_NAMESPACE,
            "uid": HOSTILE_UID,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {
                "x": "<script>window.__pwned=1</script>",
                "q": "\"' onmouseover=\"window.__pwned=2",
                "rtl": "\u202egpj.exe\u200f",
                "big": "A" * BIG,
            },
            "annotations": {"note": "<b>bold</b>" * 1000, "huge": "B" * BIG},
        },
        "spec": {
            "nodeName": "node-<i>1</i>",
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class Server:
    """`kartograf serve --manifests` over a copy of the demo cluster and a hostile pod."""

    def __init__(self, workdir: Path, tokens: Path | None = None, upstream: "Server | None" = None):
        self.admin = f"127.0.0.1:{free_port()}"
        self.grpc = f"127.0.0.1:{free_port()}"
        if upstream is None:
            self.dir = workdir / "cluster"
            shutil.copytree(CLUSTER, self.dir)
            (self.dir / "hostile.yaml").write_text(json.dumps(hostile_pod()))
            source = ["--manifests", str(self.dir)]
        else:
            # An aggregator in front of `upstream`, which serves its cluster as `default`.
            self.dir = upstream.dir
            source = ["--upstream", f"demo@default=http://{upstream.grpc}"]
        exe = binary()
        if not exe.is_file():
            pytest.fail(f"no kartograf binary at {exe}: build it (cargo build) or set KARTOGRAF_BIN")
        self.log_path = workdir / ("aggregator.log" if upstream else "kartograf.log")
        args = [str(exe), "serve", *source, "--listen", self.grpc, "--admin-listen", self.admin]
        if tokens:
            args += ["--auth-tokens", str(tokens)]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self.base = f"http://{self.admin}"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"kartograf exited: {self.log_path.read_text()[-2000:]}")
            try:
                if self.get("/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail("kartograf did not become ready")

    def get(self, path: str, headers: dict | None = None, method: str = "GET"):
        request = urllib.request.Request(self.base + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as r:
                return r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read()

    def api(self, path: str, headers: dict | None = None):
        status, _, body = self.get("/ui/api/" + path, headers)
        assert status == 200, (status, body[:500])
        return json.loads(body)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def replace_file(path: Path, text: str) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("ui"))
    yield s
    s.stop()


# ---------------------------------------------------------------------------------------
# HTTP: headers, read-only, tokens, the live feed.


def test_assets_carry_a_strict_policy_and_the_view_is_read_only(server):
    status, headers, body = server.get("/ui/")
    assert status == 200
    assert headers["Content-Security-Policy"] == CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Type"].startswith("text/html")
    assert b"<script src=" in body and b"<script>" not in body
    for asset in ("app.js", "dom.js", "graph.js", "pages.js", "live.js", "style.css", "favicon.svg"):
        status, headers, _ = server.get("/ui/" + asset)
        assert status == 200, asset
        assert headers["Content-Security-Policy"] == CSP
    assert server.get("/ui/nope.js")[0] == 404
    assert server.get("/ui/api/nope")[0] == 404
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, _ = server.get("/ui/api/overview", method=method)
        assert status == 405, method
        assert headers["Allow"] == "GET, HEAD"
    # /ui redirects to the page.
    conn = http.client.HTTPConnection(server.admin, timeout=10)
    conn.request("GET", "/ui")
    r = conn.getresponse()
    assert (r.status, r.getheader("Location")) == (301, "/ui/")
    conn.close()


def test_api_answers_from_the_index(server):
    o = server.api("overview")
    assert o["synced"] is True
    assert o["workloads"] >= 30
    assert sum(o["by_status"].values()) == o["workloads"]
    assert any(r["key"] == "ml" for r in o["by_namespace"])
    assert o["definitions"]["active"] > 10
    page = server.api("workloads?namespace=ml&kind=JobSet&sort=name")
    names = [r["name"] for r in page["rows"]]
    assert names == sorted(names) and "llama-train" in names
    assert all(r["namespace"] == "ml" and r["kind"] == "JobSet" for r in page["rows"])
    one = server.api("workloads?limit=1&offset=2")
    assert len(one["rows"]) == 1 and one["offset"] == 2 and one["total"] == o["workloads"]
    by_gpus = server.api("workloads?sort=gpus&desc=1&limit=500")["rows"]
    held = [r["gpus_held"] for r in by_gpus]
    assert held == sorted(held, reverse=True)
    status, _, body = server.get("/ui/api/workloads?selector=app%20in%20(")
    assert status == 400 and b"error" in body
    detail = server.api(f"workload?uid={LLAMA_TRAIN_UID}")
    w = detail["workload"]
    assert w["ref"]["name"] == "llama-train"
    pods = []

    def collect(components):
        for c in components:
            for i in c.get("instances", []):
                pods.extend(i.get("podList", []))
                collect(i.get("children", []))

    collect(w["components"])
    assert LLAMA_WORKER_POD in [p["name"] for p in pods]
    assert detail["definition"]["text"]
    assert server.get("/ui/api/workload?uid=00000000-0000-4000-8000-00000000dead")[0] == 404
    defs = server.api("definitions")
    assert defs["definitions"]["definitions"] and defs["sources"]["sources"]


def test_hostile_values_are_bounded_in_lists(server):
    page = server.api("workloads?q=img")
    (row,) = page["rows"]
    assert row["name"] == HOSTILE_NAME
    labels = dict(row["labels"])
    assert labels["x"] == "<script>window.__pwned=1</script>"
    assert len(labels["big"].encode()) < 1024, "a list carries no 1 MB label"


def open_events(server, last_event_id=None, token=None):
    conn = http.client.HTTPConnection(server.admin, timeout=10)
    headers = {}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    if token:
        headers["Authorization"] = "Bearer " + token
    conn.request("GET", "/ui/api/events", headers=headers)
    r = conn.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Type") == "text/event-stream"
    return conn, r


def next_event(response):
    """The next event (name, id, data), skipping comments."""
    name, ident, data = None, None, []
    while True:
        line = response.fp.readline().decode()
        if line == "":
            raise EOFError("the feed ended")
        line = line.rstrip("\n")
        if line == "":
            if data:
                return name, ident, json.loads("\n".join(data))
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(": ")
        if field == "event":
            name = value
        elif field == "id":
            ident = value
        elif field == "data":
            data.append(value)


def test_live_feed_sends_changes_and_resumes(server):
    conn, r = open_events(server)
    name, ident, hello = next_event(r)
    assert name == "hello" and hello["resumed"] is False and int(ident) == hello["revision"]
    start = hello["revision"]
    path = server.dir / "job.yaml"
    text = path.read_text()
    replace_file(path, text.replace("job-name: finetune\n", "job-name: finetune\n    ui-test: one\n", 1))
    deadline = time.monotonic() + LIVE_TIMEOUT
    seen = None
    while time.monotonic() < deadline and seen is None:
        name, ident, data = next_event(r)
        if name == "changes":
            seen = [c for c in data["changes"] if c["name"] == "finetune"]
    assert seen, "the edit reached the feed"
    assert seen[0]["type"] == "modified"
    conn.close()
    # Resumed from the first revision: the change again, then hello (resumed).
    conn, r = open_events(server, last_event_id=start)
    name, ident, data = next_event(r)
    assert name == "changes"
    assert "finetune" in [c["name"] for c in data["changes"]]
    name, _, hello = next_event(r)
    assert name == "hello" and hello["resumed"] is True
    conn.close()
    # A point from another run: started over.
    conn, r = open_events(server, last_event_id=1)
    name, _, data = next_event(r)
    assert name == "reset" and data["since"] == 1
    name, _, hello = next_event(r)
    assert name == "hello" and hello["resumed"] is False
    conn.close()
    replace_file(path, text)


def test_the_aggregator_serves_the_view_of_its_clusters(server, tmp_path):
    agg = Server(tmp_path, upstream=server)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while agg.api("workloads?limit=1")["all"] < server.api("workloads?limit=1")["all"]:
            assert time.monotonic() < deadline, "the aggregator did not get every workload"
            time.sleep(0.1)
        o = agg.api("overview")
        assert [r["key"] for r in o["by_cluster"]] == ["default"]
        page = agg.api("workloads?cluster=default&namespace=ml&kind=JobSet")
        assert "llama-train" in [r["name"] for r in page["rows"]]
        assert {r["cluster"] for r in page["rows"]} == {"default"}
        detail = agg.api(f"workload?uid={LLAMA_TRAIN_UID}&cluster=default")
        assert detail["workload"]["cluster"] == "default"
        assert agg.get(f"/ui/api/workload?uid={LLAMA_TRAIN_UID}&cluster=elsewhere")[0] == 404
        # The live feed of the aggregator follows the upstream's changes.
        conn, r = open_events(agg)
        name, _, hello = next_event(r)
        assert name == "hello"
        path = server.dir / "job.yaml"
        text = path.read_text()
        replace_file(path, text.replace("job-name: finetune\n", "job-name: finetune\n    ui-agg: one\n", 1))
        try:
            deadline = time.monotonic() + LIVE_TIMEOUT
            seen = False
            while not seen and time.monotonic() < deadline:
                name, _, data = next_event(r)
                seen = name == "changes" and any(c["name"] == "finetune" and c["cluster"] == "default" for c in data["changes"])
            assert seen
        finally:
            conn.close()
            replace_file(path, text)
    finally:
        agg.stop()


def test_tokens_guard_the_data_not_the_assets(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "reader-token-0123456789 reader resolver\n"
        "defs-token-0123456789 defs definitions\n"
        "scrape-token-0123456789 prom metrics\n"
        "all-token-0123456789 admin *\n"
    )
    s = Server(tmp_path, tokens)
    try:
        assert s.get("/ui/")[0] == 200
        status, headers, _ = s.get("/ui/api/overview")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
        bearer = lambda t: {"Authorization": "Bearer " + t}
        assert s.get("/ui/api/overview", bearer("wrong-token-0123456789"))[0] == 401
        assert s.get("/ui/api/overview", bearer("scrape-token-0123456789"))[0] == 403
        assert s.get("/ui/api/overview", bearer("reader-token-0123456789"))[0] == 200
        assert s.get("/ui/api/events", bearer("scrape-token-0123456789"))[0] == 403
        assert s.get("/ui/api/definitions", bearer("reader-token-0123456789"))[0] == 403
        assert s.get("/ui/api/definitions", bearer("defs-token-0123456789"))[0] == 200
        assert s.get("/ui/api/definitions", bearer("all-token-0123456789"))[0] == 200
        if browser_available():
            d = new_driver()
            try:
                d.get(s.base + "/ui/#/")
                box = wait_for(d, lambda: d.find_elements("id", "token"))
                box[0].send_keys("reader-token-0123456789")
                d.find_element("css selector", "form.token button").click()
                wait_for(d, lambda: "Overview" in d.find_element("tag name", "h1").text)
                wait_for(d, lambda: d.find_element("id", "live").text == "live")
                shot(d, "token-accepted")
            finally:
                d.quit()
    finally:
        s.stop()


# ---------------------------------------------------------------------------------------
# The browser.


def browser_available() -> bool:
    return Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()


def new_driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-dev-shm-usage", "--window-size=1440,1000",
        "--user-data-dir=" + tempfile.mkdtemp(prefix="kartograf-chromium-"),
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


@pytest.fixture(scope="module")
def driver():
    if not browser_available():
        pytest.skip(f"no {CHROMIUM} / {CHROMEDRIVER} (tests/python/run.sh installs chromium and chromium-driver)")
    d = new_driver()
    yield d
    d.quit()
    print(f"\nUI screenshots: {SHOTS}")


def wait_for(d, condition, timeout=PAGE_TIMEOUT):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as e:  # the page is still changing
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out; last error {last!r}; page text: {d.find_element('tag name', 'body').text[:1500]}")


def shot(d, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    # The whole page, not just the window.
    height = d.execute_script("return Math.max(document.body.scrollHeight, 1000)")
    d.set_window_size(1440, min(height + 20, 4000))
    path = SHOTS / f"{name}.png"
    d.save_screenshot(str(path))
    d.set_window_size(1440, 1000)
    return path


def script_errors(d):
    return [e for e in d.get_log("browser") if e["level"] == "SEVERE"]


def test_pages_load(server, driver):
    d = driver
    d.get(server.base + "/ui/#/")
    wait_for(d, lambda: "By namespace" in d.find_element("tag name", "main").text)
    wait_for(d, lambda: d.find_element("id", "live").text == "live")
    text = d.find_element("tag name", "main").text
    assert "By namespace" in text and "By kind" in text and "Sources" in text
    shot(d, "overview")
    d.get(server.base + "/ui/#/workloads")
    wait_for(d, lambda: d.find_element("id", "workloads").get_attribute("data-ready") == "1")
    count = d.find_element("id", "count").text
    assert " of " in count
    shot(d, "workloads")
    d.get(server.base + "/ui/#/definitions")
    wait_for(d, lambda: "Active definitions" in d.find_element("tag name", "main").text)
    assert "batch-job-v1" in d.find_element("tag name", "main").text
    shot(d, "definitions")
    assert script_errors(d) == []


def test_click_opens_llama_train_with_its_pods_and_gpus(server, driver):
    d = driver
    d.get(server.base + "/ui/#/workloads?namespace=ml&kind=JobSet")
    wait_for(d, lambda: d.find_element("id", "workloads").get_attribute("data-ready") == "1")
    link = wait_for(d, lambda: [a for a in d.find_elements("css selector", "#rows a") if a.text == "llama-train"])
    link[0].click()
    wait_for(d, lambda: d.find_elements("id", "graph"))
    main = d.find_element("tag name", "main").text
    assert "llama-train" in main
    pods = d.find_element("id", "pods").text
    assert LLAMA_WORKER_POD in pods
    # Three pods of 4 GPUs each: 12 held of 12 desired, 4 per pod in the table and the picture.
    assert "12 / 12" in main
    rows = [r.text for r in d.find_elements("css selector", "#pods tbody tr")]
    assert len(rows) == 3 and all(r.rstrip().endswith("4") for r in rows), rows
    badges = [t.text for t in d.find_elements("css selector", "#graph text.gpu-n")]
    assert badges == ["4", "4", "4"], badges
    nodes = d.find_element("id", "nodes").text
    assert "gpu-node" in nodes
    assert d.find_elements("css selector", "#graph .gang"), "the gang is drawn"
    shot(d, "workload-llama-train")
    assert script_errors(d) == []


def test_manifest_edit_changes_the_page_without_reload(server, driver):
    d = driver
    d.get(server.base + f"/ui/#/workload?uid={LLAMA_TRAIN_UID}")
    wait_for(d, lambda: d.find_elements("id", "graph"))
    wait_for(d, lambda: d.find_element("id", "live").text == "live")
    d.execute_script("window.__sameDocument = 'yes'")
    path = server.dir / "jobset.yaml"
    text = path.read_text()
    assert "phase: Running" in text
    edited = text.replace(
        "    team: foundation-models\n  name: llama-train\n",
        "    team: foundation-models\n    ui-edit: seen\n  name: llama-train\n",
        1,
    )
    assert edited != text
    before = d.find_element("css selector", ".workload").get_attribute("data-revision")
    t0 = time.monotonic()
    replace_file(path, edited)
    try:
        wait_for(d, lambda: "ui-edit=seen" in d.find_element("tag name", "main").text, LIVE_TIMEOUT)
        elapsed = time.monotonic() - t0
        print(f"\nmanifest edit -> page changed in {elapsed * 1000:.0f} ms")
        assert d.execute_script("return window.__sameDocument") == "yes", "the page was reloaded"
        after = d.find_element("css selector", ".workload").get_attribute("data-revision")
        assert after != before
        shot(d, "workload-after-edit")
        # The workloads table follows too.
        d.get(server.base + "/ui/#/workloads?q=llama-train")
        wait_for(d, lambda: d.find_element("id", "workloads").get_attribute("data-ready") == "1")
        d.execute_script("window.__sameDocument = 'table'")
        row = f"#rows tr[data-uid='{LLAMA_TRAIN_UID}']"
        assert "12 / 12" in d.find_element("css selector", row).text
        # One pod fails: it holds no GPU any more.
        replace_file(path, text.replace("phase: Running", "phase: Failed", 1))
        wait_for(d, lambda: "8 / 12" in d.find_element("css selector", row).text, LIVE_TIMEOUT)
        assert d.execute_script("return window.__sameDocument") == "table"
    finally:
        replace_file(path, text)


def test_the_live_feed_resumes_after_a_lost_connection(server, driver):
    d = driver
    d.get(server.base + "/ui/#/workloads")
    wait_for(d, lambda: d.find_element("id", "live").text == "live")
    d.execute_script("K.live.drop()")
    wait_for(d, lambda: d.find_element("tag name", "body").get_attribute("data-resumed"))
    assert "resumed" in d.find_element("id", "notice").text
    # A resume point the server never had: the page says it started over.
    d.execute_script("K.live.lastId = '1'; K.live.drop()")
    wait_for(d, lambda: d.find_element("tag name", "body").get_attribute("data-started-over"))
    assert "started over" in d.find_element("id", "notice").text
    shot(d, "started-over")


def test_hostile_names_render_as_text(server, driver):
    d = driver
    d.get(server.base + "/ui/#/workloads?q=img")
    wait_for(d, lambda: d.find_element("id", "workloads").get_attribute("data-ready") == "1")
    rows = d.find_element("id", "rows").text
    assert "<img src=x onerror=window.__pwned=4>" in rows
    assert "<script>window.__pwned=3</script>" in rows
    d.find_element("css selector", "#rows a").click()
    wait_for(d, lambda: d.find_elements("id", "graph"))
    main = d.find_element("tag name", "main").text
    assert HOSTILE_NAMESPACE in main
    assert "x=<script>window.__pwned=1</script>" in main
    assert "q=\"' onmouseover=\"window.__pwned=2" in main
    assert "(1,000,000 characters)" in main, "the 1 MB label is cut, and says so"
    assert "node-<i>1</i>" in d.find_element("id", "nodes").text
    # Nothing was injected or ran.
    assert d.execute_script("return window.__pwned === undefined")
    assert d.execute_script("return document.querySelectorAll('main img, main script, main b, main i').length") == 0
    # The right-to-left override stays inside its element: the header still reads in order.
    assert d.find_element("css selector", ".crumbs").text.startswith("Workloads /")
    shot(d, "hostile")
    assert script_errors(d) == []
