"""GPU accounting through a real Prometheus server (Debian's `prometheus` package).

Prometheus scrapes `kartograf serve` (its admin port's /metrics) over a copy of the demo cluster
and a DCGM-like exporter served by this test, every second, with the rules of
deploy/prometheus/rules.yaml loaded. Through Prometheus' HTTP API the tests check that:

- per-workload, per-namespace, per-kind and fleet GPUs held/desired equal what the `Totals` RPC
  answers;
- the documented join (DCGM device series x kartograf_pod_workload_info) gives each workload's
  and namespace's GPU utilization, the allocated-but-idle GPUs per workload, and a DCGM device
  for every GPU a whole-GPU workload holds;
- the "stuck Initializing with GPUs held" alert is pending for exactly the workloads that are;
- every panel query of deploy/grafana/kartograf.json returns data (the informer panels, whose
  series cannot exist for a manifest-directory server, execute and are empty), and every recipe
  of docs/cost.md runs and prints the output the document shows;
- an edit of the manifests (a pending pod gets bound; tests/python/strays.yaml adds a pod in no
  workload, one no component claims and one whose controller kind has no definition) shows up
  after the next scrape, and none of those GPUs drops out of the join.

`promtool check rules` and `promtool test rules` (tests/prometheus/rules_test.yaml) run here too.

The DCGM-like exporter: for every pod that holds GPUs (bound to a node, not terminated), as
kartograf's graphs list them, it serves one device per `nvidia.com/gpu` (one MIG instance per
`nvidia.com/mig-*`, which reports framebuffer use but no DCGM_FI_DEV_GPU_UTIL, as on real MIG
GPUs) with dcgm-exporter's labels (gpu, UUID, device, modelName, Hostname, and with Kubernetes
mapping namespace, pod, container; MIG adds GPU_I_PROFILE, GPU_I_ID), and pads every node with
unallocated GPUs (pod=""). Fractional GPUs (an annotation, no device resource) get no device.
Utilization and memory are synthetic but fixed per device (a hash of its UUID), with three idle
allocations. The `container` value is always "main" (graphs do not name containers). The pod in
no workload from strays.yaml is added to the exporter's pods by hand: the kubelet knows it,
kartograf's graphs do not.

Run with `bash tests/python/run.sh` (after `cargo build`); it installs the `prometheus` package
with apt-get when `prometheus`/`promtool` are missing, and these tests skip (saying why) only
when neither that nor PROMETHEUS_BIN/PROMTOOL_BIN provides them.
"""

import json
import math
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zlib
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ports import free_port
from test_client import (  # noqa: F401 (`api` is a fixture)
    REPO,
    RPC_TIMEOUT,
    api,
    replace_file,
    start_server,
)

RULES = REPO / "deploy" / "prometheus" / "rules.yaml"
RULES_TEST = REPO / "tests" / "prometheus" / "rules_test.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "kartograf.json"
COST_DOC = REPO / "docs" / "cost.md"
STRAYS = Path(__file__).resolve().parent / "strays.yaml"

INTERVAL = "1s"  # scrape and rule evaluation interval
STARTUP_TIMEOUT = 60.0  # seconds until Prometheus has scraped both targets and evaluated the rules
EDIT_TIMEOUT = 20.0  # seconds for a manifest edit to reach Prometheus' recording rules
RATE_INTERVAL = "20s"  # what the dashboard's $__rate_interval becomes here

PROMETHEUS = shutil.which(os.environ.get("PROMETHEUS_BIN") or "prometheus")
PROMTOOL = shutil.which(os.environ.get("PROMTOOL_BIN") or "promtool")

pytestmark = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL),
    reason="no `prometheus`/`promtool` on PATH: install Debian's `prometheus` package "
    "(tests/python/run.sh does so with apt-get when it can) or set PROMETHEUS_BIN/PROMTOOL_BIN",
)

# The demo's idle allocations: both pods of Deployment serving/chat-api (a model loaded, no
# traffic), Job ml/other-job (waiting, no memory used), and one of three workers of RayJob
# research/finetune-llama (a straggler).
IDLE_WORKLOADS = {("serving", "chat-api"): 30_000, ("ml", "other-job"): 0}
IDLE_PODS = {("research", "finetune-llama-raycluster-x7fkz-gpu-hosts-worker-jd5xs"): 12_000}
GPUS_PER_NODE = 8  # nodes are padded with unallocated GPUs up to this
IDLE_BELOW = 5  # % (the threshold of workload:kartograf_gpus_idle:count)

# strays.yaml: the pod in no workload, as the kubelet reports it.
ORPHAN = ("ml", "llama-eval-workers-0-0-h7t2q", "gpu-node-9", 4)
UNCLAIMED_POD = ("ml", "llama-train-debug-7kq2d")
FLYTE_POD = ("ml", "embed-corpus-n1-0")

# Dashboard panels whose series cannot exist for a `--manifests` server (no Kubernetes
# informers run): their queries must execute and come back empty.
EMPTY_FOR_MANIFESTS = {
    "Informer events",
    "Informer restarts and errors",
    # No Karmada webhook here (no --webhook-listen, no requests).
    "Interpreter requests by operation and result",
    "Interpreter latency",
    "Unsuccessful interpreter answers by kind",
}
# Panels about pods outside workloads or components: the demo cluster has none.
EMPTY_WITHOUT_STRAYS = {"GPU pods outside workloads or components"}


# --------------------------------------------------------------------------------------------
# kartograf's graphs


def pods_of(workload):
    """(pod, component) for every pod of a graph: placed ones, then those no component claims."""

    def walk(components):
        for c in components:
            for inst in c.instances:
                for p in inst.pod_list:
                    yield p, c.name
                yield from walk(inst.children)

    yield from walk(workload.components)
    for p in workload.unattributed_pods:
        yield p, ""


def workload_key(w):
    return (w.ref.namespace, w.ref.kind, w.ref.name)


def list_full(stack):
    pb = stack.api.pb
    reply = stack.server.resolver.List(pb.ListRequest(view=pb.VIEW_FULL), timeout=RPC_TIMEOUT)
    assert reply.next_page_token == ""
    return list(reply.workloads)


def membership(workloads):
    """(namespace, pod) -> workload key."""
    out = {}
    for w in workloads:
        for p, _ in pods_of(w):
            key = (w.ref.namespace, p.name)
            assert key not in out, f"pod {key} in two workloads"
            out[key] = workload_key(w)
    return out


# --------------------------------------------------------------------------------------------
# The DCGM-like exporter


@dataclass
class Device:
    node: str
    gpu: int
    uuid: str
    model: str
    namespace: str = ""
    pod: str = ""
    util: float | None = 0.0  # None: a MIG instance (no DCGM_FI_DEV_GPU_UTIL)
    fb_mib: float = 0.0
    mig_profile: str = ""


def model_of(node):
    for part, model in [
        ("h100", "NVIDIA H100 80GB HBM3"),
        ("a100", "NVIDIA A100-SXM4-80GB"),
        ("dgx", "NVIDIA A100-SXM4-80GB"),
        ("l40s", "NVIDIA L40S"),
        ("l4-", "NVIDIA L4"),
        ("a10-", "NVIDIA A10"),
        ("t4-", "Tesla T4"),
    ]:
        if part in node:
            return model
    return "NVIDIA H100 80GB HBM3"


def gpu_request(pod):
    """("gpu", n) for whole GPUs, ("mig", profile, n) for MIG instances, None otherwise."""
    raw = dict(pod.resources.raw)
    if "nvidia.com/gpu" in raw:
        return ("gpu", int(raw["nvidia.com/gpu"]))
    for key, value in raw.items():
        if key.startswith("nvidia.com/mig-"):
            return ("mig", key.removeprefix("nvidia.com/mig-"), int(value))
    return None


def holds(pod):
    return pod.node != "" and pod.phase not in ("Succeeded", "Failed")


def dcgm_devices(workloads, extra_pods):
    """Every GPU device of every node the pods run on: the pods' devices, then unallocated ones."""
    wanted = []  # (node, namespace, pod, request, workload name)
    for w in workloads:
        for p, _ in pods_of(w):
            request = gpu_request(p)
            if holds(p) and request:
                wanted.append((p.node, w.ref.namespace, p.name, request, w.ref.name))
    for namespace, pod, node, gpus in extra_pods:
        wanted.append((node, namespace, pod, ("gpu", gpus), ""))
    by_node = defaultdict(list)
    for item in sorted(wanted):
        by_node[item[0]].append(item)
    devices = []
    for node, items in sorted(by_node.items()):
        index = 0

        def device(node=node, **fields):
            nonlocal index
            d = Device(
                node=node,
                gpu=index,
                uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}')}",
                model=model_of(node),
                **fields,
            )
            index += 1
            return d

        for _, namespace, pod, request, workload in items:
            if request[0] == "mig":
                for i in range(request[2]):
                    d = device(namespace=namespace, pod=pod, util=None, mig_profile=request[1])
                    d.fb_mib = 4_000 + zlib.crc32(d.uuid.encode()) % 10_000
                    devices.append(d)
                continue
            for _ in range(request[1]):
                d = device(namespace=namespace, pod=pod)
                seed = zlib.crc32(d.uuid.encode())
                if (namespace, workload) in IDLE_WORKLOADS:
                    d.util, d.fb_mib = 0.0, IDLE_WORKLOADS[(namespace, workload)]
                elif (namespace, pod) in IDLE_PODS:
                    d.util, d.fb_mib = 1.0, IDLE_PODS[(namespace, pod)]
                else:
                    d.util, d.fb_mib = 35.0 + seed % 60, 20_000.0 + seed % 50_000
                devices.append(d)
        while index < GPUS_PER_NODE:
            devices.append(device())
    return devices


def render(devices):
    def labels(d):
        pairs = [
            ("gpu", str(d.gpu)),
            ("UUID", d.uuid),
            ("device", f"nvidia{d.gpu}"),
            ("modelName", d.model),
            ("Hostname", d.node),
        ]
        if d.mig_profile:
            pairs += [("GPU_I_PROFILE", d.mig_profile), ("GPU_I_ID", "1")]
        pairs += [
            ("container", "main" if d.pod else ""),
            ("namespace", d.namespace),
            ("pod", d.pod),
        ]
        return ",".join(f'{k}="{v}"' for k, v in pairs)

    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    lines += [
        f"DCGM_FI_DEV_GPU_UTIL{{{labels(d)}}} {d.util:g}" for d in devices if d.util is not None
    ]
    lines += [
        "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).",
        "# TYPE DCGM_FI_DEV_FB_USED gauge",
    ]
    lines += [f"DCGM_FI_DEV_FB_USED{{{labels(d)}}} {d.fb_mib:g}" for d in devices]
    return "\n".join(lines) + "\n"


class DcgmExporter:
    """Serves /metrics from the current graphs (asked of kartograf at every scrape)."""

    def __init__(self, stack):
        self.stack = stack
        self.extra_pods = []  # pods the kubelet knows and kartograf's graphs do not
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                try:
                    body = render(dcgm_devices(list_full(exporter.stack), exporter.extra_pods))
                except Exception as e:  # noqa: BLE001 (a failed scrape shows as up == 0)
                    self.send_error(500, str(e))
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def devices(self):
        return dcgm_devices(list_full(self.stack), self.extra_pods)

    def stop(self):
        self.http.shutdown()
        self.http.server_close()


# --------------------------------------------------------------------------------------------
# Prometheus


class Prometheus:
    """A Prometheus server scraping kartograf and the exporter, with the rules loaded."""

    def __init__(self, workdir: Path, kartograf: str, dcgm: str):
        config = {
            "global": {
                "scrape_interval": INTERVAL,
                "scrape_timeout": INTERVAL,
                "evaluation_interval": INTERVAL,
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {
                    "job_name": "kartograf",
                    "honor_labels": True,
                    "static_configs": [{"targets": [kartograf]}],
                },
                {
                    "job_name": "dcgm-exporter",
                    "honor_labels": True,
                    "static_configs": [{"targets": [dcgm]}],
                },
            ],
        }
        # JSON is YAML.
        self.config_path = workdir / "prometheus.yml"
        self.config_path.write_text(json.dumps(config, indent=2))
        self.address = f"127.0.0.1:{free_port()}"
        self.log_path = workdir / "prometheus.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address={self.address}",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self):
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def get(self, path, params=None):
        url = f"http://{self.address}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def wait_ready(self):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if self.get("/-/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"prometheus not ready after {STARTUP_TIMEOUT}s:\n{self.log()}")

    def api(self, path, params):
        status, body = self.get(path, params)
        answer = json.loads(body)
        assert status == 200 and answer.get("status") == "success", f"{path} {params}: {body}"
        return answer["data"]

    def query(self, expr):
        """An instant query: [(labels, value)], `__name__` dropped."""
        data = self.api("/api/v1/query", {"query": expr})
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        assert data["resultType"] == "vector", f"{expr}: {data['resultType']}"
        out = []
        for r in data["result"]:
            labels = {k: v for k, v in r["metric"].items() if k != "__name__"}
            out.append((labels, float(r["value"][1])))
        return out

    def by(self, expr, *keys):
        """{tuple of the label values: value}; fails on a duplicate key."""
        out = {}
        for labels, value in self.query(expr):
            key = tuple(labels.get(k, "") for k in keys)
            assert key not in out, f"{expr}: two samples for {key}"
            out[key] = value
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()


def wait_until(what, check, timeout):
    """Polls `check` (returns a list of problems) until it returns none; fails with the last."""
    deadline = time.monotonic() + timeout
    while True:
        problems = check()
        if not problems:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} after {timeout}s: " + "; ".join(map(str, problems[:10])))
        time.sleep(0.2)


# --------------------------------------------------------------------------------------------
# The stack


class Stack:
    def __init__(self, api, server, workdir):
        self.api = api
        self.server = server
        self.exporter = DcgmExporter(self)
        self.prom = Prometheus(workdir, server.admin_address, self.exporter.address)

    def stop(self):
        self.prom.stop()
        self.exporter.stop()
        self.server.stop()


@pytest.fixture(scope="module")
def stack(api, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("prometheus")
    server = start_server(api, workdir)
    s = None
    try:
        s = Stack(api, server, workdir)
        started = time.monotonic()
        s.prom.wait_ready()
        workloads = len(list_full(s))
        wait_until(
            "Prometheus has no complete data",
            lambda: [
                p
                for p in [
                    check_equal(
                        "up", s.prom.by("up", "job"), {("kartograf",): 1, ("dcgm-exporter",): 1}
                    ),
                    check_equal(
                        "workloads recorded",
                        len(s.prom.query("workload:kartograf_gpus_held:max")),
                        workloads,
                    ),
                    check_equal(
                        "utilization recorded",
                        bool(s.prom.query("workload:DCGM_FI_DEV_GPU_UTIL:avg")),
                        True,
                    ),
                    check_equal(
                        "scrapes of kartograf",
                        s.prom.query('count_over_time(up{job="kartograf"}[1m]) >= 4') != [],
                        True,
                    ),
                    check_equal(
                        "alerts evaluated",
                        s.prom.query("ALERTS") != [],
                        True,
                    ),
                ]
                if p
            ],
            STARTUP_TIMEOUT,
        )
        s.ready_after = time.monotonic() - started
        yield s
    except BaseException:
        if s is not None:
            print("prometheus log:\n" + s.prom.log())
        raise
    finally:
        if s is not None:
            s.stop()
        else:
            server.stop()


def check_equal(what, got, want):
    return None if got == want else f"{what}: got {got}, want {want}"


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def compare(what, got: dict, want: dict):
    """Problems between two {key: number} maps (same keys, equal values)."""
    problems = []
    for key in sorted(set(got) | set(want)):
        if key not in got:
            problems.append(f"{what}: {key} missing (want {want[key]})")
        elif key not in want:
            problems.append(f"{what}: unexpected {key} = {got[key]}")
        elif not close(got[key], want[key]):
            problems.append(f"{what}: {key} = {got[key]}, want {want[key]}")
    return problems


# --------------------------------------------------------------------------------------------
# promtool


def test_promtool_checks_the_rules():
    done = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"SUCCESS: \d+ rules found", done.stdout), done.stdout


def test_promtool_unit_tests_pass():
    done = subprocess.run(
        [PROMTOOL, "test", "rules", str(RULES_TEST)], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


# --------------------------------------------------------------------------------------------
# GPUs held and desired = Totals


def totals_problems(stack):
    pb = stack.api.pb
    prom = stack.prom

    def rows(group_by):
        reply = stack.server.resolver.Totals(
            pb.TotalsRequest(group_by=group_by), timeout=RPC_TIMEOUT
        )
        return reply.rows

    problems = []
    by_workload = rows(pb.GROUP_BY_WORKLOAD)
    for state, field in [("held", "current"), ("desired", "desired")]:
        want = {tuple(r.key.split("/", 2)): getattr(r.totals, field).gpus for r in by_workload}
        raw = prom.by(f'kartograf_workload_gpus{{state="{state}"}}', "namespace", "kind", "name")
        problems += compare(f"kartograf_workload_gpus {state}", raw, want)
        recorded = prom.by(f"workload:kartograf_gpus_{state}:max", "namespace", "kind", "name")
        problems += compare(f"workload:kartograf_gpus_{state}:max", recorded, want)

        want = {(r.key,): getattr(r.totals, field).gpus for r in rows(pb.GROUP_BY_NAMESPACE)}
        got = prom.by(f"namespace:kartograf_gpus_{state}:sum", "namespace")
        problems += compare(f"namespace:kartograf_gpus_{state}:sum", got, want)

        want = {(r.key,): getattr(r.totals, field).gpus for r in rows(pb.GROUP_BY_KIND)}
        got = {
            ((f"{labels['group']}/" if labels.get("group") else "") + labels["kind"],): value
            for labels, value in prom.query(f"kind:kartograf_gpus_{state}:sum")
        }
        problems += compare(f"kind:kartograf_gpus_{state}:sum", got, want)

        fleet = sum(getattr(r.totals, field).gpus for r in by_workload)
        problems += compare(
            f"cluster:kartograf_gpus_{state}:sum",
            prom.by(f"cluster:kartograf_gpus_{state}:sum"),
            {(): fleet},
        )
    return problems


def test_workload_gpus_equal_totals(stack):
    assert totals_problems(stack) == []
    # Not vacuous: the demo holds GPUs in many workloads, and desired differs from held.
    held = stack.prom.by("workload:kartograf_gpus_held:max", "namespace", "kind", "name")
    desired = stack.prom.by("workload:kartograf_gpus_desired:max", "namespace", "kind", "name")
    assert sum(1 for v in held.values() if v > 0) >= 20
    assert held[("ml", "JobSet", "llama-train-b")] == 8
    assert desired[("ml", "JobSet", "llama-train-b")] == 12


# --------------------------------------------------------------------------------------------
# The join: utilization, idle GPUs, devices per workload


def expected_join(stack):
    """From the graphs and the exporter's devices: per workload, the utilization of each device
    its pods hold (MIG instances excluded) and its device count."""
    workloads = list_full(stack)
    members = membership(workloads)
    utils = defaultdict(list)
    devices = defaultdict(int)
    for d in stack.exporter.devices():
        owner = members.get((d.namespace, d.pod)) if d.pod else None
        if owner is None:
            continue
        devices[owner] += 1
        if d.util is not None:
            utils[owner].append(d.util)
    return workloads, utils, devices


def test_utilization_per_workload_and_namespace(stack):
    _, utils, _ = expected_join(stack)
    want = {k: sum(v) / len(v) for k, v in utils.items()}
    got = stack.prom.by("workload:DCGM_FI_DEV_GPU_UTIL:avg", "namespace", "kind", "name")
    assert compare("workload utilization", got, want) == []
    assert len(want) >= 20

    per_namespace = defaultdict(list)
    for (namespace, _, _), values in utils.items():
        per_namespace[(namespace,)] += values
    want = {k: sum(v) / len(v) for k, v in per_namespace.items()}
    got = stack.prom.by("namespace:DCGM_FI_DEV_GPU_UTIL:avg", "namespace")
    assert compare("namespace utilization", got, want) == []

    everything = [u for values in utils.values() for u in values]
    got = stack.prom.by("cluster:DCGM_FI_DEV_GPU_UTIL:avg")
    assert compare("fleet utilization", got, {(): sum(everything) / len(everything)}) == []


def test_allocated_but_idle_gpus_per_workload(stack):
    _, utils, _ = expected_join(stack)
    want = {k: sum(1 for u in v if u < IDLE_BELOW) for k, v in utils.items()}
    want = {k: n for k, n in want.items() if n > 0}
    got = stack.prom.by("workload:kartograf_gpus_idle:count", "namespace", "kind", "name")
    assert compare("idle GPUs", got, want) == []
    # chat-api: 3 running pods and a pending one already bound to a node (it holds its GPU).
    assert want == {
        ("serving", "Deployment", "chat-api"): 4,
        ("ml", "Job", "other-job"): 1,
        ("research", "RayJob", "finetune-llama"): 8,
    }


def test_every_held_gpu_is_a_joined_device(stack):
    workloads, _, devices = expected_join(stack)
    got = stack.prom.by(
        "count by (namespace, kind, name) (gpu:DCGM_FI_DEV_FB_USED:workload)",
        "namespace",
        "kind",
        "name",
    )
    assert compare("devices per workload", got, dict(devices)) == []
    # A workload of whole GPUs holds exactly as many GPUs as DCGM devices are joined to it.
    whole = 0
    for w in workloads:
        requests = [gpu_request(p) for p, _ in pods_of(w) if holds(p)]
        if any(r and r[0] == "gpu" for r in requests) and all(
            r is None or r[0] == "gpu" for r in requests
        ):
            whole += 1
            assert got[workload_key(w)] == w.totals.current.gpus, workload_key(w)
    assert whole >= 20
    # No pod's device falls outside the join in the demo.
    assert stack.prom.query("pod:DCGM_FI_DEV_FB_USED:outside_workloads_count") == []
    assert stack.prom.query("kartograf_unowned_pod_gpus") == []


def test_stuck_initializing_alert_is_pending(stack):
    pb = stack.api.pb
    want = {
        workload_key(w)
        for w in list_full(stack)
        if w.status.phase == pb.PHASE_INITIALIZING and w.totals.current.gpus > 0
    }
    assert want == {
        ("team-a", "AppWrapper", "llama-ft-aw"),
        ("dynamo", "DynamoGraphDeployment", "vllm-disagg"),
    }
    got = stack.prom.query('ALERTS{alertname="KartografWorkloadStuckInitializing"}')
    assert {(l["namespace"], l["kind"], l["name"]) for l, _ in got} == want
    assert all(l["alertstate"] == "pending" for l, _ in got), "for: 15m keeps it pending"


# --------------------------------------------------------------------------------------------
# Grafana dashboard and docs/cost.md


def dashboard_panels():
    board = json.loads(DASHBOARD.read_text())

    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))

    return board, list(walk(board["panels"]))


def grafana_to_promql(expr):
    for name, value in [("__rate_interval", RATE_INTERVAL), ("cluster", ".*"), ("namespace", ".*")]:
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    assert "$" not in expr, f"unknown variable in {expr}"
    return expr


def check_dashboard(stack, may_be_empty):
    board, panels = dashboard_panels()
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    titles = {p["title"] for p in panels}
    assert EMPTY_FOR_MANIFESTS | EMPTY_WITHOUT_STRAYS <= titles
    checked = 0
    for p in panels:
        if p["type"] == "row":
            continue
        assert p.get("description"), f"panel {p['title']!r} says what it shows"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            expr = grafana_to_promql(t["expr"])
            result = stack.prom.query(expr)
            checked += 1
            if p["title"] in may_be_empty:
                assert result == [], f"{p['title']!r} ({t['refId']}) has data: {result[:3]}"
            else:
                assert result, f"{p['title']!r} ({t['refId']}) returns no data: {expr}"
                assert any(not math.isnan(v) for _, v in result), f"{p['title']!r}: only NaN"
    # Template variables: label_values(selector, label) through the series API.
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.+), *(\w+)\)", var["query"]["query"])
        assert m, var["query"]
        selector, label = grafana_to_promql(m.group(1)), m.group(2)
        values = stack.prom.api(f"/api/v1/label/{label}/values", {"match[]": selector})
        if label != "cluster":  # no `cluster` label in a single-cluster setup
            assert values, f"variable {var['name']}: no values"
    return checked


def test_dashboard_panels_return_data(stack):
    assert check_dashboard(stack, EMPTY_FOR_MANIFESTS | EMPTY_WITHOUT_STRAYS) >= 20


FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
DOC_LINE = re.compile(r"^(\{.*\})?\s*(-?[0-9.]+|NaN)$")
DEMO = "# examples/cluster"
DEMO_WITH_STRAYS = "# examples/cluster + tests/python/strays.yaml"


def doc_labels(text):
    return dict(re.findall(r'(\w+)="([^"]*)"', text or ""))


def doc_recipes():
    """(query, output lines or None) for every `promql` block of docs/cost.md; an output is the
    `text` block right after it whose first line names a cluster state."""
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(COST_DOC.read_text())]
    recipes = []
    for i, (lang, body) in enumerate(blocks):
        if lang == "text" and body.strip().startswith(DEMO):
            assert (
                i > 0 and blocks[i - 1][0] == "promql"
            ), f"cost.md: output without a query: {body[:80]}"
        if lang != "promql":
            continue
        following = blocks[i + 1] if i + 1 < len(blocks) else ("", "")
        output = None
        if following[0] == "text" and following[1].strip().startswith(DEMO):
            output = [line.strip() for line in following[1].strip().splitlines()]
        recipes.append((body, output))
    return recipes


def check_doc(stack, state):
    checked = 0
    for expr, output in doc_recipes():
        result = stack.prom.query(expr)  # every recipe at least runs
        if output is None:
            continue
        assert output[0] in (DEMO, DEMO_WITH_STRAYS), f"cost.md: unknown state {output[0]!r}"
        if output[0] != state:
            continue
        want = []
        for line in output[1:]:
            parsed = DOC_LINE.match(line)
            assert parsed, f"cost.md: cannot read output line {line!r}"
            want.append((doc_labels(parsed.group(1)), parsed.group(2)))
        got = {tuple(sorted(labels.items())): value for labels, value in result}
        assert len(got) == len(want), f"cost.md: {expr.strip()}\n got {result}\n want {want}"
        for labels, printed in want:
            key = tuple(sorted(labels.items()))
            assert key in got, f"cost.md: {expr.strip()}: no {labels} in {result}"
            decimals = len(printed.split(".")[1]) if "." in printed else 0
            assert (
                abs(got[key] - float(printed)) <= 0.5 * 10**-decimals + 1e-9
            ), f"cost.md: {expr.strip()}: {labels} = {got[key]}, the doc says {printed}"
        checked += 1
    return checked


def test_cost_doc_recipes():
    """The page's shape, without Prometheus: how many recipes show outputs, for which state."""
    recipes = doc_recipes()
    states = [output[0] for _, output in recipes if output]
    assert states.count(DEMO) == 12 and states.count(DEMO_WITH_STRAYS) == 4, states
    assert len(recipes) == 20


def test_cost_doc_outputs_for_the_demo_cluster(stack):
    assert check_doc(stack, DEMO) == 12


# --------------------------------------------------------------------------------------------
# Edits reach Prometheus (runs last: it changes the cluster)


def bind_pending_pod(manifests: Path):
    """The scheduler binds llama-train-b's pending worker (4 GPUs) to gpu-node-11."""
    path = manifests / "jobset-pending.yaml"
    text = path.read_text()
    anchor = "  hostname: llama-train-b-workers-1-0\n"
    assert text.count(anchor) == 1
    replace_file(path, text.replace(anchor, anchor + "  nodeName: gpu-node-11\n"))


def test_edits_and_strays_reach_prometheus(stack):
    prom = stack.prom
    held = 'kartograf_workload_gpus{namespace="ml",kind="JobSet",name="%s",state="held"}'
    assert prom.by(held % "llama-train-b") == {(): 8}
    assert prom.by(held % "llama-train") == {(): 12}

    started = time.monotonic()
    stack.exporter.extra_pods.append(ORPHAN)
    bind_pending_pod(stack.server.manifests)
    shutil.copy(STRAYS, stack.server.manifests / "zz-strays.yaml")
    wait_until(
        "the edit is not in Prometheus",
        lambda: [
            p
            for p in [
                check_equal("llama-train-b held", prom.by(held % "llama-train-b"), {(): 12}),
                check_equal("llama-train held", prom.by(held % "llama-train"), {(): 16}),
                check_equal("unowned", len(prom.query("kartograf_unowned_pod_gpus")), 1),
            ]
            if p
        ],
        EDIT_TIMEOUT,
    )
    stack.edit_seen_after = time.monotonic() - started
    # The recording rules follow at their next evaluation.
    wait_until("rules behind Totals", lambda: totals_problems(stack), EDIT_TIMEOUT)
    stack.rules_after = time.monotonic() - started

    # In no workload: its GPUs and topmost controller are exported, and the DCGM devices of
    # the pod (scraped from the exporter, which knows the pod since the edit) are the only ones
    # outside the join.
    [(labels, gpus)] = prom.query("kartograf_unowned_pod_gpus")
    assert gpus == ORPHAN[3]
    assert (labels["namespace"], labels["pod"]) == ORPHAN[:2]
    assert (labels["owner_kind"], labels["owner_name"]) == ("Job", "llama-eval-workers-0")
    assert prom.by("namespace:kartograf_unowned_pod_gpus:sum", "namespace") == {("ml",): 4}
    outside = "pod:DCGM_FI_DEV_FB_USED:outside_workloads_count"
    alert = 'ALERTS{alertname="KartografGPUsOutsideWorkloads"}'
    wait_until(
        "DCGM devices outside workloads",
        lambda: [
            p
            for p in [
                check_equal(outside, prom.by(outside, "namespace", "pod"), {ORPHAN[:2]: 4}),
                check_equal(
                    alert, prom.by(alert, "namespace", "alertstate"), {("ml", "pending"): 1}
                ),
            ]
            if p
        ],
        EDIT_TIMEOUT,
    )

    # Claimed by no component: joined to its workload with component="", and its devices count
    # for that workload's utilization and device count.
    # (Prometheus drops a label whose value is empty: component="" matches it, it is not stored.)
    [(labels, _)] = prom.query(
        'kartograf_pod_workload_info{pod="%s", component=""}' % UNCLAIMED_POD[1]
    )
    assert (labels["workload_kind"], labels["workload_name"]) == ("JobSet", "llama-train")
    assert "component" not in labels
    # A controller kind without a definition: its own Pod workload.
    [(labels, _)] = prom.query('kartograf_pod_workload_info{pod="%s"}' % FLYTE_POD[1])
    assert (labels["workload_kind"], labels["workload_name"]) == ("Pod", FLYTE_POD[1])

    def join_problems():
        _, utils, devices = expected_join(stack)
        got_devices = prom.by(
            "count by (namespace, kind, name) (gpu:DCGM_FI_DEV_FB_USED:workload)",
            "namespace",
            "kind",
            "name",
        )
        got_utils = prom.by("workload:DCGM_FI_DEV_GPU_UTIL:avg", "namespace", "kind", "name")
        want_utils = {k: sum(v) / len(v) for k, v in utils.items()}
        return compare("devices", got_devices, dict(devices)) + compare(
            "utilization", got_utils, want_utils
        )

    wait_until("join behind the graphs", join_problems, EDIT_TIMEOUT)
    devices = prom.by(
        "count by (namespace, kind, name) (gpu:DCGM_FI_DEV_FB_USED:workload)",
        "namespace",
        "kind",
        "name",
    )
    assert devices[("ml", "JobSet", "llama-train")] == 16
    assert devices[("ml", "JobSet", "llama-train-b")] == 12
    assert devices[("ml", "Pod", FLYTE_POD[1])] == 2

    assert check_dashboard(stack, EMPTY_FOR_MANIFESTS) >= 20
    assert check_doc(stack, DEMO_WITH_STRAYS) == 4
    print(
        f"\nPrometheus had complete data {stack.ready_after:.1f}s after it started; an edit "
        f"reached its scraped series after {stack.edit_seen_after:.1f}s and its recording "
        f"rules after {stack.rules_after:.1f}s"
    )
