"""A gRPC client test of `kartograf serve`, written in Python against the published API
(proto/kartograf/v1/kartograf.proto), the standard health service and server reflection.

The server binary is started as a subprocess: `$KARTOGRAF_BIN` (default
`target/debug/kartograf` below the repository root) on a free loopback port, over a temporary
copy of examples/cluster. Python stubs are generated at test time with grpc_tools.protoc into
a temporary directory; nothing generated is kept in the repository.

Run it with `bash tests/python/run.sh` (after `cargo build`).
"""

import importlib
import json
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from ports import free_port
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster"
PROTO_DIR = REPO / "proto"
PROTO_FILE = "kartograf/v1/kartograf.proto"

READY_TIMEOUT = 60.0  # seconds until health says SERVING
RPC_TIMEOUT = 10.0  # seconds for every unary call
WATCH_TIMEOUT = 10.0  # seconds for a file edit to show up on a Watch
STOP_TIMEOUT = 10.0  # seconds the server gets to exit after SIGTERM

GiB = 1024**3

# JobSet ml/llama-train (examples/cluster/jobset.yaml): leader x1 + workers x2, one pod per
# Job, each pod 4 GPUs, 8 CPUs, 64Gi; all three pods running and ready.
LLAMA_TRAIN_UID = "3f1c2a9e-0001-4000-8000-000000000001"
LLAMA_WORKER_POD = "llama-train-workers-1-0-x7k2p"


def binary() -> Path:
    path = Path(os.environ.get("KARTOGRAF_BIN", "target/debug/kartograf"))
    if not path.is_absolute():
        path = REPO / path
    return path


# --------------------------------------------------------------------------------------------
# Stubs


class Api:
    """The generated modules: `pb` (messages) and `rpc` (stubs)."""

    def __init__(self, pb, rpc):
        self.pb = pb
        self.rpc = rpc


@pytest.fixture(scope="session")
def api(tmp_path_factory) -> Api:
    out = tmp_path_factory.mktemp("stubs")
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        PROTO_FILE,
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, f"protoc failed:\n{done.stdout}\n{done.stderr}"
    sys.path.insert(0, str(out))
    importlib.invalidate_caches()
    pb = importlib.import_module("kartograf.v1.kartograf_pb2")
    rpc = importlib.import_module("kartograf.v1.kartograf_pb2_grpc")
    return Api(pb, rpc)


# --------------------------------------------------------------------------------------------
# The server



class Server:
    """One `kartograf serve` subprocess over its own copy of the demo cluster; or, with an
    `upstream`, an aggregator (`serve --upstream`) in front of that server, which the tests
    then talk to as to any kartograf (the manifests are the upstream's)."""

    def __init__(self, api: Api, workdir: Path, upstream: "Server | None" = None):
        self.api = api
        self.upstream = upstream
        if upstream is None:
            self.manifests = workdir / "cluster"
            shutil.copytree(CLUSTER, self.manifests)
            source = ["--manifests", str(self.manifests)]
            self.log_path = workdir / "server.log"
        else:
            self.manifests = upstream.manifests
            # The upstream serves the demo cluster as `default` (no --cluster-name): the
            # aggregator lets it speak for that cluster only.
            source = ["--upstream", f"demo@default=http://{upstream.address}"]
            self.log_path = workdir / "aggregator.log"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.admin_address = f"127.0.0.1:{free_port()}"
        exe = binary()
        if not exe.is_file():
            pytest.fail(f"no kartograf binary at {exe}: build it (cargo build) or set KARTOGRAF_BIN")
        # Only our flags: no KARTOGRAF_* settings from the caller's environment.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KARTOGRAF_")}
        env.setdefault("RUST_BACKTRACE", "1")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [
                str(exe),
                "serve",
                *source,
                "--listen",
                self.address,
                "--admin-listen",
                self.admin_address,
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        # Short reconnect backoff: the first health checks race the server's bind.
        self.channel = grpc.insecure_channel(
            self.address,
            options=[
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 500),
            ],
        )
        self.resolver = api.rpc.WorkloadResolverStub(self.channel)
        self.definitions = api.rpc.DefinitionsStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def log(self) -> str:
        self._log.flush()
        text = self.log_path.read_text(errors="replace")
        if self.upstream is not None:
            text += "\n--- upstream:\n" + self.upstream.log()
        return text

    def wait_serving(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"kartograf exited with {self.proc.returncode}:\n{self.log()}")
            try:
                reply = self.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as e:
                last = f"{e.code()}: {e.details()}"
            time.sleep(0.1)
        pytest.fail(f"kartograf not SERVING after {READY_TIMEOUT}s (last: {last}):\n{self.log()}")

    def stop(self) -> int:
        """SIGTERM, then at most STOP_TIMEOUT seconds; kills it past that. Returns the exit code."""
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
        self._log.close()
        code = self.proc.returncode
        if self.upstream is not None:
            self.upstream.stop()
        return code


def start_server(api: Api, workdir: Path, through_aggregator: bool = False) -> Server:
    """A server over a copy of the demo cluster; with `through_aggregator`, an aggregator in
    front of it (the CLI and API must behave the same through one)."""
    server = Server(api, workdir)
    try:
        server.wait_serving()
        if through_aggregator:
            server = Server(api, workdir, upstream=server)
            server.wait_serving()
    except BaseException:
        server.stop()
        raise
    return server


# Every API test runs against a server and against an aggregator in front of one.
SHAPES = ["server", "aggregator"]


@pytest.fixture(scope="session", params=SHAPES)
def server(request, api, tmp_path_factory):
    """A server shared by the read-only tests: nothing may edit its manifests."""
    s = start_server(
        api, tmp_path_factory.mktemp(f"shared-{request.param}"), request.param == "aggregator"
    )
    yield s
    code = s.stop()
    assert code == 0, f"kartograf exited with {code} on SIGTERM:\n{s.log()}"


@pytest.fixture(params=SHAPES)
def own_server(request, api, tmp_path):
    """A server of the test's own, over manifests the test may edit."""
    s = start_server(api, tmp_path, request.param == "aggregator")
    yield s
    s.stop()


# --------------------------------------------------------------------------------------------
# Helpers


def rpc_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=RPC_TIMEOUT)
    return info.value


def ref_key(w):
    return (w.ref.kind, w.ref.namespace, w.ref.name)


def list_all(server: Server, api: Api, **filters):
    reply = server.resolver.List(api.pb.ListRequest(**filters), timeout=RPC_TIMEOUT)
    assert reply.next_page_token == "", "an unpaged List of the demo cluster fits one page"
    return list(reply.workloads)


def component(components, name):
    found = [c for c in components if c.name == name]
    assert len(found) == 1, f"component {name!r} in {[c.name for c in components]}"
    return found[0]


def instance(comp, instance_id):
    found = [i for i in comp.instances if i.id == instance_id]
    assert len(found) == 1, f"instance {instance_id!r} in {[i.id for i in comp.instances]}"
    return found[0]


class EventPump:
    """Reads a Watch stream on a thread into a queue, so the test can wait with a deadline."""

    def __init__(self, call):
        self.call = call
        self.events = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            for event in self.call:
                self.events.put(event)
        except grpc.RpcError as e:
            self.events.put(e)
        self.events.put(None)  # end of stream

    def next(self, timeout: float):
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no Watch event within {timeout}s")
        return item

    def next_event(self, deadline: float):
        item = self.next(max(0.0, deadline - time.monotonic()))
        if item is None:
            pytest.fail("the Watch stream ended")
        if isinstance(item, grpc.RpcError):
            pytest.fail(f"the Watch stream failed: {item.code()}: {item.details()}")
        return item

    def snapshot(self, api: Api):
        """The ADDED events up to SYNCED; returns (workloads, synced revision)."""
        added = []
        deadline = time.monotonic() + RPC_TIMEOUT
        while True:
            event = self.next_event(deadline)
            if event.type == api.pb.EVENT_TYPE_SYNCED:
                assert not event.HasField("workload")
                return added, event.revision
            assert event.type == api.pb.EVENT_TYPE_ADDED, api.pb.EventType.Name(event.type)
            added.append(event.workload)

    def close(self):
        self.call.cancel()
        self.thread.join(timeout=5)


def replace_file(path: Path, text: str) -> None:
    """Writes `text` to `path` atomically (the server never reads half a file). The temporary
    file is hidden (dot-prefixed), which the manifest reader skips."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# Small inline objects, built here rather than read from the demo cluster.
INLINE_JOB_UID = "0badc0de-0000-4000-8000-000000000001"
INLINE_CONTAINERS = [
    {
        "name": "train",
        "image": "example.com/train:1",
        "resources": {
            "requests": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "limits": {"nvidia.com/gpu": "1"},
        },
    }
]


def inline_job():
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "py-inline",
            "namespace": "pytest",
            "uid": INLINE_JOB_UID,
            "labels": {"batch.kubernetes.io/job-name": "py-inline"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 4,
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/job-name": "py-inline"}},
                "spec": {"restartPolicy": "Never", "containers": INLINE_CONTAINERS},
            },
        },
        "status": {"active": 1, "ready": 1},
    }


def inline_pod():
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "py-inline-abcde",
            "namespace": "pytest",
            "uid": "0badc0de-0000-4000-8000-000000000002",
            "labels": {"batch.kubernetes.io/job-name": "py-inline"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "py-inline",
                    "uid": INLINE_JOB_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "node-a", "restartPolicy": "Never", "containers": INLINE_CONTAINERS},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


# A definition for a made-up kind (so it cannot clash with the embedded catalog).
WIDGET_DEFINITION = """\
apiVersion: run.ai/v1alpha1
kind: Karta
metadata:
  name: example-com-widget-v1
spec:
  structureDefinition:
    rootComponent:
      name: widget
      kind: {group: example.com, version: v1, kind: Widget}
      specDefinition:
        podTemplateSpecPath: .spec.template
      scaleDefinition:
        replicasPath: .spec.replicas // 1
      statusDefinition:
        statusMappings:
          running:
            - byExpression:
                expression: '(.status.readyReplicas // 0) > 0'
                expectedResult: "true"
"""
BROKEN_EXPRESSION = ".spec.replicas | ((("
BROKEN_DEFINITION = WIDGET_DEFINITION.replace(".spec.replicas // 1", BROKEN_EXPRESSION)


def widget_sample(api: Api):
    containers = [
        {
            "name": "c",
            "image": "example.com/widget:1",
            "resources": {
                "requests": {"cpu": "1", "nvidia.com/gpu": "2"},
                "limits": {"nvidia.com/gpu": "2"},
            },
        }
    ]
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "demo", "uid": "widget-uid-1"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": containers}}},
        "status": {"readyReplicas": 1},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "w1-0",
            "namespace": "demo",
            "uid": "widget-pod-uid-1",
            "ownerReferences": [
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "name": "w1",
                    "uid": "widget-uid-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": "n1", "containers": containers},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    return api.pb.InlineWorkload(object_json=json.dumps(widget), pods_json=[json.dumps(pod)])


# --------------------------------------------------------------------------------------------
# Health and reflection


def test_health_check_serving(server):
    for service in ["", "kartograf.v1.WorkloadResolver", "kartograf.v1.Definitions"]:
        reply = server.health.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING, service
    err = rpc_error(server.health.Check, health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_reflection_v1alpha_lists_and_describes_services(server):
    # grpcio-reflection's client speaks grpc.reflection.v1alpha.
    db = ProtoReflectionDescriptorDatabase(server.channel)
    services = db.get_services()
    assert "kartograf.v1.WorkloadResolver" in services
    assert "kartograf.v1.Definitions" in services
    assert "grpc.health.v1.Health" in services

    pool = DescriptorPool(db)
    resolver = pool.FindServiceByName("kartograf.v1.WorkloadResolver")
    assert [m.name for m in resolver.methods] == ["Resolve", "List", "Watch", "Totals", "Gangs", "Patch"]
    watch = resolver.methods_by_name["Watch"]
    assert watch.output_type.full_name == "kartograf.v1.WatchEvent"
    definitions = pool.FindServiceByName("kartograf.v1.Definitions")
    assert [m.name for m in definitions.methods] == [
        "ListDefinitions",
        "ValidateDefinition",
        "ListSources",
    ]
    request = pool.FindMessageTypeByName("kartograf.v1.ResolveRequest")
    assert [f.name for f in request.oneofs_by_name["target"].fields] == [
        "workload",
        "pod",
        "inline",
    ]


def test_reflection_v1_lists_services(server):
    # grpc.reflection.v1 has the same messages as v1alpha: call it by its method path.
    call = server.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    replies = list(
        call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=RPC_TIMEOUT)
    )
    assert len(replies) == 1
    names = [s.name for s in replies[0].list_services_response.service]
    assert "kartograf.v1.WorkloadResolver" in names
    assert "kartograf.v1.Definitions" in names


# --------------------------------------------------------------------------------------------
# Resolve


def test_resolve_workload_by_ref(server, api):
    pb = api.pb
    reply = server.resolver.Resolve(
        pb.ResolveRequest(workload=pb.ObjectRef(kind="JobSet", namespace="ml", name="llama-train")),
        timeout=RPC_TIMEOUT,
    )
    assert not reply.HasField("pod")
    w = reply.workload
    assert w.ref.api_version == "jobset.x-k8s.io/v1alpha2"
    assert w.ref.uid == LLAMA_TRAIN_UID
    assert w.definition.name == "jobset-x-k8s-io-jobset-v1alpha2"
    assert w.definition.origin == "embedded"
    assert w.revision > 0
    assert w.status.phase == pb.PHASE_RUNNING

    assert (w.pods.desired, w.pods.current, w.pods.ready) == (3, 3, 3)
    for held in (w.totals.desired, w.totals.current):
        assert held.gpus == 12
        assert held.cpu_millis == 24_000
        assert held.memory_bytes == 192 * GiB
        assert held.raw["nvidia.com/gpu"] == "12"

    # Component tree: jobset -> replicatedjob {leader: 1 pod, workers: 2 pods}.
    root = component(w.components, "jobset")
    assert len(root.instances) == 1
    replicated = component(root.instances[0].children, "replicatedjob")
    assert replicated.kind.group == "batch" and replicated.kind.kind == "Job"
    leader = instance(replicated, "leader")
    workers = instance(replicated, "workers")
    assert leader.scale.replicas == 1 and workers.scale.replicas == 2
    assert leader.pods.desired == 1 and workers.pods.desired == 2
    assert workers.per_pod.gpus == 4 and workers.per_pod.cpu_millis == 8_000
    assert workers.totals.desired.gpus == 8 and leader.totals.desired.gpus == 4
    assert [p.name for p in leader.pod_list] == ["llama-train-leader-0-0-q9wzt"]
    assert sorted(p.name for p in workers.pod_list) == [
        "llama-train-workers-0-0-m4rhn",
        LLAMA_WORKER_POD,
    ]
    assert {p.node for p in list(leader.pod_list) + list(workers.pod_list)} == {
        "gpu-node-1",
        "gpu-node-2",
        "gpu-node-3",
    }
    assert all(p.ready and p.phase == "Running" for p in workers.pod_list)
    assert len(w.unattributed_pods) == 0

    # Gang: the whole JobSet, 3 pods.
    assert [g.name for g in w.gang.groups] == ["jobset"]
    assert w.gang.groups[0].min_member == 3
    assert len(w.gang.groups[0].pods) == 3

    # The same workload by uid alone, and with the api_version given.
    by_uid = server.resolver.Resolve(
        pb.ResolveRequest(workload=pb.ObjectRef(uid=LLAMA_TRAIN_UID)), timeout=RPC_TIMEOUT
    )
    assert by_uid.workload == w
    by_gvk = server.resolver.Resolve(
        pb.ResolveRequest(
            workload=pb.ObjectRef(
                api_version="jobset.x-k8s.io/v1alpha2",
                kind="JobSet",
                namespace="ml",
                name="llama-train",
            )
        ),
        timeout=RPC_TIMEOUT,
    )
    assert by_gvk.workload == w


def test_resolve_summary_view(server, api):
    pb = api.pb
    ref = pb.ObjectRef(kind="JobSet", namespace="ml", name="llama-train")
    full = server.resolver.Resolve(pb.ResolveRequest(workload=ref), timeout=RPC_TIMEOUT).workload
    summary = server.resolver.Resolve(
        pb.ResolveRequest(workload=ref, view=pb.VIEW_SUMMARY), timeout=RPC_TIMEOUT
    ).workload
    assert len(summary.components) == 0
    assert all(len(g.pods) == 0 for g in summary.gang.groups)
    assert summary.ref == full.ref
    assert summary.pods == full.pods
    assert summary.totals == full.totals
    assert summary.status == full.status


def test_resolve_by_pod_reports_placement(server, api):
    pb = api.pb
    reply = server.resolver.Resolve(
        pb.ResolveRequest(pod=pb.ObjectRef(namespace="ml", name=LLAMA_WORKER_POD)),
        timeout=RPC_TIMEOUT,
    )
    assert ref_key(reply.workload) == ("JobSet", "ml", "llama-train")
    assert reply.workload.ref.uid == LLAMA_TRAIN_UID
    assert reply.HasField("pod")
    assert reply.pod.component == "replicatedjob"
    assert reply.pod.instance == "workers"
    assert reply.pod.gang_group == "jobset"
    # The placement agrees with the graph it came with.
    root = component(reply.workload.components, "jobset")
    workers = instance(component(root.instances[0].children, "replicatedjob"), "workers")
    assert LLAMA_WORKER_POD in [p.name for p in workers.pod_list]


def test_resolve_inline_job_and_pod(server, api):
    pb = api.pb
    request = pb.ResolveRequest(
        inline=pb.InlineWorkload(
            object_json=json.dumps(inline_job()), pods_json=[json.dumps(inline_pod())]
        )
    )
    reply = server.resolver.Resolve(request, timeout=RPC_TIMEOUT)
    w = reply.workload
    assert ref_key(w) == ("Job", "pytest", "py-inline")
    assert w.ref.uid == INLINE_JOB_UID
    assert w.definition.name == "batch-job-v1"
    assert w.status.phase == pb.PHASE_RUNNING
    # Desired pods: min(parallelism 2, completions 4); one pod exists, and it is ready.
    assert (w.pods.desired, w.pods.current, w.pods.ready) == (2, 1, 1)
    assert w.totals.desired.gpus == 2
    assert w.totals.desired.cpu_millis == 1_000
    assert w.totals.desired.memory_bytes == 2 * GiB
    assert w.totals.current.gpus == 1
    assert w.totals.current.cpu_millis == 500
    job = component(w.components, "job")
    (only,) = job.instances
    assert [(p.name, p.node, p.ready) for p in only.pod_list] == [("py-inline-abcde", "node-a", True)]
    assert only.per_pod.gpus == 1

    # Inline objects are not cached: the workload is not known by reference afterwards.
    err = rpc_error(
        server.resolver.Resolve,
        pb.ResolveRequest(workload=pb.ObjectRef(kind="Job", namespace="pytest", name="py-inline")),
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND

    # The summary view of an inline workload drops the pod lists, keeps the numbers.
    request.view = pb.VIEW_SUMMARY
    summary = server.resolver.Resolve(request, timeout=RPC_TIMEOUT).workload
    assert len(summary.components) == 0
    assert summary.pods == w.pods and summary.totals == w.totals


@pytest.mark.parametrize(
    "case, code",
    [
        ("unknown workload", grpc.StatusCode.NOT_FOUND),
        ("unknown pod", grpc.StatusCode.NOT_FOUND),
        ("kind without a definition", grpc.StatusCode.FAILED_PRECONDITION),
        ("inline kind without a definition", grpc.StatusCode.FAILED_PRECONDITION),
        ("inline object not JSON", grpc.StatusCode.INVALID_ARGUMENT),
        ("inline pod not JSON", grpc.StatusCode.INVALID_ARGUMENT),
        ("inline object without kind", grpc.StatusCode.INVALID_ARGUMENT),
        ("no target", grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_resolve_error_codes(server, api, case, code):
    pb = api.pb
    requests = {
        "unknown workload": pb.ResolveRequest(
            workload=pb.ObjectRef(kind="JobSet", namespace="ml", name="no-such-jobset")
        ),
        "unknown pod": pb.ResolveRequest(pod=pb.ObjectRef(namespace="ml", name="no-such-pod")),
        "kind without a definition": pb.ResolveRequest(
            workload=pb.ObjectRef(kind="Frobnicator", namespace="ml", name="llama-train")
        ),
        "inline kind without a definition": pb.ResolveRequest(
            inline=pb.InlineWorkload(
                object_json=json.dumps(
                    {
                        "apiVersion": "example.com/v1",
                        "kind": "Frobnicator",
                        "metadata": {"name": "f", "namespace": "pytest"},
                    }
                )
            )
        ),
        "inline object not JSON": pb.ResolveRequest(
            inline=pb.InlineWorkload(object_json='{"apiVersion": "batch/v1", "kind": "Job",')
        ),
        "inline pod not JSON": pb.ResolveRequest(
            inline=pb.InlineWorkload(
                object_json=json.dumps(inline_job()), pods_json=["{not json"]
            )
        ),
        "inline object without kind": pb.ResolveRequest(
            inline=pb.InlineWorkload(object_json="[1, 2, 3]")
        ),
        "no target": pb.ResolveRequest(),
    }
    err = rpc_error(server.resolver.Resolve, requests[case])
    assert err.code() == code, f"{case}: {err.code()} {err.details()}"
    assert err.details(), "errors carry a message"


# --------------------------------------------------------------------------------------------
# List


def test_list_paging(server, api):
    pb = api.pb
    everything = list_all(server, api)
    keys = [ref_key(w) for w in everything]
    assert len(keys) == 44, "the demo cluster has 44 root workloads"
    assert len(set(keys)) == len(keys)
    # Sorted by namespace, kind, name.
    assert keys == sorted(keys, key=lambda k: (k[1], k[0], k[2]))
    # Only roots: no JobSet child Job, ReplicaSet or pod of another workload is listed.
    assert ("ReplicaSet", "serving", "web-7d9f8b6c5d") not in keys
    assert ("Pod", "ml", LLAMA_WORKER_POD) not in keys

    pages = []
    token = ""
    while True:
        reply = server.resolver.List(
            pb.ListRequest(page_size=5, page_token=token, view=pb.VIEW_SUMMARY),
            timeout=RPC_TIMEOUT,
        )
        pages.append([ref_key(w) for w in reply.workloads])
        token = reply.next_page_token
        if not token:
            break
        assert len(reply.workloads) == 5, "every page but the last is full"
        assert len(pages) <= 44, "paging does not end"
    assert [len(p) for p in pages] == [5] * 8 + [4]
    assert [k for page in pages for k in page] == keys
    assert all(len(w.components) == 0 for w in reply.workloads), "the view applies to List"

    err = rpc_error(server.resolver.List, pb.ListRequest(page_token="not-a-token"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_list_filters(server, api):
    pb = api.pb
    everything = list_all(server, api)

    ml = list_all(server, api, namespace="ml")
    assert sorted(ref_key(w) for w in ml) == sorted(
        ref_key(w) for w in everything if w.ref.namespace == "ml"
    )
    assert {w.ref.name for w in ml} == {
        "nightly-eval",
        "finetune",
        "other-job",
        "llama-sft",
        "llama-train",
        "llama-train-b",
        "debug-shell",
        "notebook",
        "vector-db",
    }

    jobsets = list_all(server, api, kinds=["JobSet"])
    assert {(w.ref.namespace, w.ref.name) for w in jobsets} == {
        ("ml", "llama-sft"),
        ("ml", "llama-train"),
        ("ml", "llama-train-b"),
    }
    # Kinds match case-insensitively, and `group/Kind` tells batch/v1 Jobs from Volcano's.
    assert [ref_key(w) for w in list_all(server, api, kinds=["jobset"])] == [
        ref_key(w) for w in jobsets
    ]
    batch_jobs = list_all(server, api, kinds=["batch/Job"])
    assert {(w.ref.namespace, w.ref.name) for w in batch_jobs} == {
        ("ml", "finetune"),
        ("ml", "other-job"),
    }
    all_jobs = list_all(server, api, kinds=["Job"])
    assert ("Job", "volcano-jobs", "resnet-ps") in [ref_key(w) for w in all_jobs]
    several = list_all(server, api, kinds=["Deployment", "StatefulSet"])
    assert {ref_key(w) for w in several} == {
        ("Deployment", "serving", "chat-api"),
        ("Deployment", "serving", "web"),
        ("StatefulSet", "ml", "vector-db"),
    }
    assert list_all(server, api, namespace="ml", kinds=["Deployment"]) == []

    labelled = list_all(server, api, label_selector="team=foundation-models")
    assert {ref_key(w) for w in labelled} == {
        ("JobSet", "ml", "llama-train"),
        ("JobSet", "ml", "llama-train-b"),
    }
    assert [ref_key(w) for w in list_all(server, api, label_selector="app=web")] == [
        ("Deployment", "serving", "web")
    ]
    not_web = list_all(server, api, namespace="serving", label_selector="app!=web")
    assert ("Deployment", "serving", "web") not in [ref_key(w) for w in not_web]
    assert len(not_web) == len(list_all(server, api, namespace="serving")) - 1
    assert list_all(server, api, namespace="no-such-namespace") == []

    # Set-based selectors work as in Kubernetes; what Kubernetes rejects is INVALID_ARGUMENT.
    assert [ref_key(w) for w in list_all(server, api, label_selector="app in (web,none)")] == [
        ("Deployment", "serving", "web")
    ]
    others = list_all(server, api, namespace="serving", label_selector="app notin (web)")
    assert [ref_key(w) for w in others] == [ref_key(w) for w in not_web]
    for selector in ["a b", "!", "=", "a=b=c", "-a=b", "a in (b"]:
        err = rpc_error(server.resolver.List, pb.ListRequest(label_selector=selector))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, selector
        assert "label_selector" in err.details(), err.details()


# --------------------------------------------------------------------------------------------
# Totals


def test_totals_by_namespace(server, api):
    pb = api.pb
    everything = list_all(server, api)
    reply = server.resolver.Totals(
        pb.TotalsRequest(group_by=pb.GROUP_BY_NAMESPACE), timeout=RPC_TIMEOUT
    )
    rows = {r.key: r for r in reply.rows}
    assert list(rows) == sorted({w.ref.namespace for w in everything})
    assert sum(r.workloads for r in reply.rows) == len(everything)
    assert reply.revision > 0

    ml = rows["ml"]
    assert ml.workloads == 9
    assert ml.pods.desired == 14
    # 12 + 12 (JobSets) + 4 + 1 (Jobs) + 0.5 (a fractional-GPU pod) + 3/7 (a MIG slice).
    assert math.isclose(ml.totals.desired.gpus, 29.928571, abs_tol=1e-5)

    # Each row is the sum of its namespace's workloads.
    for key, row in rows.items():
        members = [w for w in everything if w.ref.namespace == key]
        assert row.workloads == len(members), key
        assert row.pods.desired == sum(w.pods.desired for w in members), key
        assert row.pods.ready == sum(w.pods.ready for w in members), key
        assert math.isclose(
            row.totals.desired.gpus, sum(w.totals.desired.gpus for w in members), abs_tol=1e-6
        ), key
        assert math.isclose(
            row.totals.current.gpus, sum(w.totals.current.gpus for w in members), abs_tol=1e-6
        ), key
        assert row.totals.desired.cpu_millis == sum(
            w.totals.desired.cpu_millis for w in members
        ), key
        assert row.totals.desired.memory_bytes == sum(
            w.totals.desired.memory_bytes for w in members
        ), key

    # GROUP_BY_UNSPECIFIED groups by namespace.
    default = server.resolver.Totals(pb.TotalsRequest(), timeout=RPC_TIMEOUT)
    assert [r.key for r in default.rows] == list(rows)


def test_totals_by_kind(server, api):
    pb = api.pb
    reply = server.resolver.Totals(
        pb.TotalsRequest(group_by=pb.GROUP_BY_KIND, namespace="ml"), timeout=RPC_TIMEOUT
    )
    rows = {r.key: r for r in reply.rows}
    assert set(rows) == {
        "Pod",
        "apps/StatefulSet",
        "batch/CronJob",
        "batch/Job",
        "jobset.x-k8s.io/JobSet",
    }
    jobsets = rows["jobset.x-k8s.io/JobSet"]
    assert jobsets.workloads == 3
    assert jobsets.pods.desired == 6
    assert jobsets.totals.desired.gpus == 24
    assert jobsets.totals.current.gpus == 20
    assert jobsets.totals.desired.cpu_millis == 48_000
    jobs = rows["batch/Job"]
    assert jobs.workloads == 2
    assert jobs.pods.desired == 3
    assert jobs.totals.desired.gpus == 5
    # ml/finetune failed: its 4 GPUs are desired but no longer held.
    assert jobs.totals.current.gpus == 1
    assert rows["Pod"].workloads == 2

    # Cluster-wide, by kind: the workload counts add up to everything listed.
    everything = list_all(server, api)
    by_kind = server.resolver.Totals(
        pb.TotalsRequest(group_by=pb.GROUP_BY_KIND), timeout=RPC_TIMEOUT
    )
    assert sum(r.workloads for r in by_kind.rows) == len(everything)
    kinds = {r.key: r.workloads for r in by_kind.rows}
    assert kinds["batch.volcano.sh/Job"] == 1
    assert kinds["batch/Job"] == 2


# --------------------------------------------------------------------------------------------
# Watch


def test_watch_snapshot_then_edits_and_deletes(own_server, api):
    pb = api.pb
    server = own_server
    listed = list_all(server, api)

    pump = EventPump(server.resolver.Watch(pb.WatchRequest()))
    try:
        added, synced = pump.snapshot(api)
        assert sorted(ref_key(w) for w in added) == sorted(ref_key(w) for w in listed)
        assert synced >= max(w.revision for w in added)

        # Edit a manifest: Deployment serving/web goes from 3 to 5 replicas.
        path = server.manifests / "deployment.yaml"
        text = path.read_text()
        old = "  progressDeadlineSeconds: 600\n  replicas: 3\n"
        assert text.count(old) == 1
        replace_file(path, text.replace(old, old.replace("replicas: 3", "replicas: 5")))

        deadline = time.monotonic() + WATCH_TIMEOUT
        event = pump.next_event(deadline)
        assert event.type == pb.EVENT_TYPE_MODIFIED, pb.EventType.Name(event.type)
        assert ref_key(event.workload) == ("Deployment", "serving", "web")
        assert event.workload.pods.desired == 5
        assert event.revision > synced
        assert event.workload.revision == event.revision
        modified = event.revision
        # The cache says the same.
        now = server.resolver.Resolve(
            pb.ResolveRequest(workload=pb.ObjectRef(kind="Deployment", namespace="serving", name="web")),
            timeout=RPC_TIMEOUT,
        ).workload
        assert now.pods.desired == 5

        # Delete a file: job.yaml holds Job ml/finetune (and its pods).
        (server.manifests / "job.yaml").unlink()
        deadline = time.monotonic() + WATCH_TIMEOUT
        event = pump.next_event(deadline)
        assert event.type == pb.EVENT_TYPE_DELETED, pb.EventType.Name(event.type)
        assert ref_key(event.workload) == ("Job", "ml", "finetune")
        assert event.revision > modified
        err = rpc_error(
            server.resolver.Resolve,
            pb.ResolveRequest(workload=pb.ObjectRef(kind="Job", namespace="ml", name="finetune")),
        )
        assert err.code() == grpc.StatusCode.NOT_FOUND
        assert len(list_all(server, api)) == len(listed) - 1
    finally:
        pump.close()

    # Resuming from the SYNCED revision replays exactly the two changes, without a snapshot.
    pump = EventPump(server.resolver.Watch(pb.WatchRequest(since_revision=synced)))
    try:
        deadline = time.monotonic() + WATCH_TIMEOUT
        first = pump.next_event(deadline)
        second = pump.next_event(deadline)
        assert [(e.type, ref_key(e.workload)) for e in (first, second)] == [
            (pb.EVENT_TYPE_MODIFIED, ("Deployment", "serving", "web")),
            (pb.EVENT_TYPE_DELETED, ("Job", "ml", "finetune")),
        ]
    finally:
        pump.close()


def test_label_selector_follows_label_edits(own_server, api):
    pb = api.pb
    server = own_server
    assert [ref_key(w) for w in list_all(server, api, label_selector="app=web")] == [
        ("Deployment", "serving", "web")
    ]
    pump = EventPump(server.resolver.Watch(pb.WatchRequest()))
    try:
        pump.snapshot(api)
        # Relabel Deployment serving/web: app=web -> app=web2 (its graph stays the same).
        path = server.manifests / "deployment.yaml"
        text = path.read_text()
        old = "  labels:\n    app: web\n  name: web\n"
        assert text.count(old) == 1
        replace_file(path, text.replace(old, old.replace("app: web\n", "app: web2\n")))
        # Then delete another file; once its DELETED arrives the server has re-read the
        # directory after the relabelling too.
        (server.manifests / "job.yaml").unlink()
        deadline = time.monotonic() + WATCH_TIMEOUT
        while True:
            event = pump.next_event(deadline)
            if event.type == pb.EVENT_TYPE_DELETED:
                assert ref_key(event.workload) == ("Job", "ml", "finetune")
                break
    finally:
        pump.close()
    relabelled = list_all(server, api, label_selector="app=web2")
    assert [ref_key(w) for w in relabelled] == [("Deployment", "serving", "web")]
    assert list_all(server, api, label_selector="app=web") == []


def test_watch_filtered_snapshot(server, api):
    pb = api.pb
    pump = EventPump(
        server.resolver.Watch(pb.WatchRequest(namespace="ml", kinds=["JobSet"], view=pb.VIEW_SUMMARY))
    )
    try:
        added, _ = pump.snapshot(api)
    finally:
        pump.close()
    assert sorted(w.ref.name for w in added) == ["llama-sft", "llama-train", "llama-train-b"]
    assert all(len(w.components) == 0 for w in added)

    # A bad selector fails the stream with INVALID_ARGUMENT.
    call = server.resolver.Watch(pb.WatchRequest(label_selector="a=b=c"), timeout=RPC_TIMEOUT)
    with pytest.raises(grpc.RpcError) as info:
        next(iter(call))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_shutdown_ends_watch_with_unavailable(own_server, api):
    pb = api.pb
    pump = EventPump(own_server.resolver.Watch(pb.WatchRequest(namespace="ml")))
    added, _ = pump.snapshot(api)
    assert len(added) == 9
    started = time.monotonic()
    own_server.proc.send_signal(signal.SIGTERM)
    end = pump.next(STOP_TIMEOUT)
    assert isinstance(end, grpc.RpcError), end
    assert end.code() == grpc.StatusCode.UNAVAILABLE
    assert own_server.proc.wait(timeout=STOP_TIMEOUT) == 0, own_server.log()
    assert time.monotonic() - started < STOP_TIMEOUT
    pump.close()


# --------------------------------------------------------------------------------------------
# Definitions


def test_list_definitions(server, api):
    pb = api.pb
    reply = server.definitions.ListDefinitions(pb.ListDefinitionsRequest(), timeout=RPC_TIMEOUT)
    by_name = {d.name: d for d in reply.definitions}
    assert len(by_name) == len(reply.definitions), "names are unique"
    assert "jobset-x-k8s-io-jobset-v1alpha2" in by_name
    jobset = by_name["jobset-x-k8s-io-jobset-v1alpha2"]
    assert (jobset.root_kind.group, jobset.root_kind.version, jobset.root_kind.kind) == (
        "jobset.x-k8s.io",
        "v1alpha2",
        "JobSet",
    )
    assert jobset.origin == "embedded"
    assert jobset.active
    assert jobset.last_error == ""
    assert list(jobset.components) == ["jobset", "replicatedjob"]
    assert jobset.generation == reply.generation
    # One definition per catalog file; all active, with no load error.
    catalog = sorted(p.stem for p in (REPO / "catalog").glob("*.yaml"))
    assert sorted(by_name) == catalog
    assert all(d.active and not d.last_error for d in reply.definitions)

    # Resolved workloads name the definition and generation they came from.
    w = server.resolver.Resolve(
        pb.ResolveRequest(workload=pb.ObjectRef(kind="JobSet", namespace="ml", name="llama-train")),
        timeout=RPC_TIMEOUT,
    ).workload
    assert w.definition.generation == reply.generation


def test_validate_broken_definition(server, api):
    pb = api.pb
    reply = server.definitions.ValidateDefinition(
        pb.ValidateDefinitionRequest(definition=BROKEN_DEFINITION, sample=widget_sample(api)),
        timeout=RPC_TIMEOUT,
    )
    assert reply.valid is False
    assert len(reply.errors) == 1
    (error,) = reply.errors
    assert error.path == "spec.structureDefinition.rootComponent.scaleDefinition.replicasPath"
    assert error.expression == BROKEN_EXPRESSION
    assert error.message
    assert not reply.HasField("preview"), "no preview of an invalid definition"

    # Text that is no definition at all is invalid too (not an RPC error).
    for text in ["not: [valid", "", "apiVersion: run.ai/v1alpha1\nkind: Karta\nmetadata: {name: x}\nspec: {}\n"]:
        reply = server.definitions.ValidateDefinition(
            pb.ValidateDefinitionRequest(definition=text), timeout=RPC_TIMEOUT
        )
        assert reply.valid is False, text
        assert reply.errors and all(e.message for e in reply.errors), text


def test_validate_definition_with_preview(server, api):
    pb = api.pb
    reply = server.definitions.ValidateDefinition(
        pb.ValidateDefinitionRequest(definition=WIDGET_DEFINITION), timeout=RPC_TIMEOUT
    )
    assert reply.valid is True
    assert list(reply.errors) == []
    assert not reply.HasField("preview"), "no sample, no preview"

    reply = server.definitions.ValidateDefinition(
        pb.ValidateDefinitionRequest(definition=WIDGET_DEFINITION, sample=widget_sample(api)),
        timeout=RPC_TIMEOUT,
    )
    assert reply.valid is True
    assert reply.HasField("preview")
    w = reply.preview
    assert ref_key(w) == ("Widget", "demo", "w1")
    assert w.definition.name == "example-com-widget-v1"
    assert w.status.phase == pb.PHASE_RUNNING
    assert (w.pods.desired, w.pods.current, w.pods.ready) == (2, 1, 1)
    assert w.totals.desired.gpus == 4 and w.totals.current.gpus == 2
    assert w.totals.desired.cpu_millis == 2_000
    widget = component(w.components, "widget")
    (only,) = widget.instances
    assert only.scale.replicas == 2
    assert [p.name for p in only.pod_list] == ["w1-0"]

    # Validating does not install the definition.
    listed = server.definitions.ListDefinitions(pb.ListDefinitionsRequest(), timeout=RPC_TIMEOUT)
    assert "example-com-widget-v1" not in [d.name for d in listed.definitions]

    # A sample that is not JSON is the caller's error.
    err = rpc_error(
        server.definitions.ValidateDefinition,
        pb.ValidateDefinitionRequest(
            definition=WIDGET_DEFINITION, sample=pb.InlineWorkload(object_json="{oops")
        ),
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
