"""The web view's workloads page in headless Chromium at 10,000 workloads (issue #32): time to
interactive and the time each interaction takes to show its answer.

Writes a manifest directory of N workloads (batch/v1 Jobs of 1–8 pods across 50
namespaces, GPUs on most, a few failed or suspended), starts `kartograf serve` over it, opens
`/ui/#/workloads` in Chromium (Debian's chromium + chromedriver, through Selenium, as the
browser tests do) and measures, from the page's own clock (`performance`):

- time to interactive: navigation start to the first rendered page of the table (the
  `kartograf:workloads-rendered` mark), after a warm-up load;
- typing in the name filter → the table shows the answer (the 120 ms typing pause included);
- a click on a column header (sort by GPUs held) → re-sorted table;
- a click on "Next" → the next page.

Run (after `cargo build --release`), with the test virtualenv of tests/python/run.sh:

    /tmp/kartograf-pyvenv/bin/python benches/ui_browser.py --workloads 10000 \
        --bin target/release/kartograf

Prints one line per measure: median and max over --repeat runs.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from ports import free_port  # noqa: E402 (after the path is set)


def write_cluster(root: Path, workloads: int) -> int:
    pods_total = 0
    for i in range(workloads):
        ns = f"team-{i % 50:02d}"
        name = f"train-{i:05d}"
        uid = f"00000000-0000-4000-8000-{i:012d}"
        pods = 1 + (i % 8)
        gpus = [0, 1, 2, 4, 8][i % 5]
        failed = i % 97 == 0
        docs = [{
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": "2025-01-01T00:00:00Z",
                         "labels": {"team": ns, "tier": ["a", "b", "c"][i % 3]}},
            "spec": {"parallelism": pods, "completions": pods, "suspend": i % 211 == 0,
                     "template": {"spec": {"containers": [{"name": "main", "image": "x",
                                                           "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}},
            "status": {"active": 0 if failed else pods, "ready": 0 if failed else pods,
                       "failed": pods if failed else 0},
        }]
        for j in range(pods):
            docs.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{name}-{j}", "namespace": ns, "uid": f"10000000-{j:04d}-4000-8000-{i:012d}",
                             "labels": {"job-name": name},
                             "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid, "controller": True}]},
                "spec": {"nodeName": f"node-{(i * 8 + j) % 500}",
                         "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
                "status": {"phase": "Failed" if failed else "Running",
                           "conditions": [{"type": "Ready", "status": "False" if failed else "True"}]},
            })
        pods_total += pods
        (root / f"{name}.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))
    return pods_total



def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "kartograf"))
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("--serve-arg", action="append", default=[], help="one more argument for `kartograf serve`")
    args = ap.parse_args()

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    work = Path(tempfile.mkdtemp(prefix="kartograf-ui-bench-"))
    cluster = work / "cluster"
    cluster.mkdir()
    t = time.monotonic()
    pods = write_cluster(cluster, args.workloads)
    print(f"wrote {args.workloads} workloads, {pods} pods in {time.monotonic() - t:.1f} s", file=sys.stderr)
    admin = f"127.0.0.1:{free_port()}"
    log = open(work / "kartograf.log", "wb")
    proc = subprocess.Popen([args.bin, "serve", "--manifests", str(cluster), "--listen", f"127.0.0.1:{free_port()}",
                             "--admin-listen", admin, *args.serve_arg], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    driver = None
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://{admin}/readyz", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("kartograf did not become ready")
            time.sleep(0.2)
        total = json.load(urllib.request.urlopen(f"http://{admin}/ui/api/workloads?limit=1"))["all"]
        print(f"serving {total} workloads", file=sys.stderr)
        options = webdriver.ChromeOptions()
        options.binary_location = args.chromium
        for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1440,1000", "--user-data-dir=" + str(work / "chromium")):
            options.add_argument(a)
        driver = webdriver.Chrome(options=options, service=Service(args.chromedriver))
        d = driver
        url = f"http://{admin}/ui/#/workloads"

        def rendered_count():
            return d.execute_script("return performance.getEntriesByName('kartograf:workloads-rendered').length")

        def wait_count(n, timeout=30):
            end = time.monotonic() + timeout
            while rendered_count() < n:
                if time.monotonic() > end:
                    raise SystemExit("the table did not render")
                time.sleep(0.005)

        def last_mark():
            return d.execute_script("const m = performance.getEntriesByName('kartograf:workloads-rendered'); return m[m.length - 1].startTime")

        results = {"time to interactive (navigation → first page rendered)": [],
                   "type in the name filter → answer shown (incl. 120 ms typing pause)": [],
                   "sort by GPUs held → re-sorted page shown": [],
                   "next page → shown": []}
        d.get(url)  # warm-up: caches of the browser and the server
        wait_count(1)
        for _ in range(args.repeat):
            d.get("about:blank")
            d.get(url)
            wait_count(1)
            results["time to interactive (navigation → first page rendered)"].append(last_mark())
            n = rendered_count()
            t0 = d.execute_script("""
                const el = document.getElementById('f-q');
                const t = performance.now();
                el.value = 'train-01';
                el.dispatchEvent(new Event('input'));
                return t;""")
            wait_count(n + 1)
            results["type in the name filter → answer shown (incl. 120 ms typing pause)"].append(last_mark() - t0)
            n = rendered_count()
            t0 = d.execute_script("""
                const t = performance.now();
                document.querySelector("th[data-sort='gpus']").click();
                return t;""")
            wait_count(n + 1)
            results["sort by GPUs held → re-sorted page shown"].append(last_mark() - t0)
            # Back to all workloads for paging.
            d.get("about:blank")
            d.get(url)
            wait_count(1)
            n = rendered_count()
            t0 = d.execute_script("""
                const t = performance.now();
                document.getElementById('next').click();
                return t;""")
            wait_count(n + 1)
            results["next page → shown"].append(last_mark() - t0)
        print(f"web view, {total} workloads / {pods} pods, Chromium {d.capabilities.get('browserVersion')}, {args.repeat} runs:")
        for what, values in results.items():
            print(f"  {what}: median {statistics.median(values):.0f} ms, max {max(values):.0f} ms")
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        if errors:
            print("browser errors:", errors)
            return 1
        return 0
    finally:
        if driver:
            driver.quit()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
