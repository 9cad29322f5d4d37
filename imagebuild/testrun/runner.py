"""`imagebuild test` on the host: run the smoke suite inside built images through the engine.

For each image: inspect its labels (unknown image: one clear error), run ``imagebuild-smoke`` in a
container and read its JSON report back with ``get_archive``, compare the image's labels with
/opt/imagebuild/image.json inside it (part of ``versions``), and run ``ddp.two-node``: two
containers on a private user-defined network, one rank each, DDP over TCP with torchrun's c10d
rendezvous, as two cluster nodes would. Containers and networks are removed even on Ctrl-C; a
container that outlives its timeout is killed and its check fails "timed out after Ns".

This module never prints; it returns a Report and reports each finished check to ``progress``.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import reference
from ..engines import Container, ImageInfo
from ..errors import EngineError, EngineRefused, NoSuchImage, SmokeError, UsageError
from ..smoke import CHECK_NAMES, GPU_CHECK_NAMES, HOST_CHECK_NAMES
from ..smoke.expect import COMPONENTS
from ..smoke.report import FAIL, PASS, SKIP, CheckResult, Report, combine

LABEL_PREFIX = "io.imagebuild."
REPORT_IN_CONTAINER = "/tmp/imagebuild-smoke/report.json"
IMAGE_JSON = "/opt/imagebuild/image.json"
RDZV_PORT = 29500


def validate_ref(ref: str) -> str:
    if not reference.is_reference_or_id(ref):   # nothing else reaches the engine
        raise UsageError(f"not an image reference: {ref!r} (expected name[:tag] or sha256:<id>)",
                         argument="IMAGE")
    return ref


@dataclass(frozen=True)
class ImageUnderTest:
    """The image a test run is about: the reference it was named by (every container starts from
    it) and the engine's ImageInfo of it."""
    ref: str
    info: ImageInfo


def imagebuild_id(labels: dict[str, str]) -> str:
    """The matrix's image id an image's labels name ("" when they name none)."""
    return labels.get(LABEL_PREFIX + "image-id", "")


def expected_from_labels(labels: dict[str, str]) -> dict:
    """What image.json should say, as the labels say it: id, flavor and the stack."""
    stack = {c: labels[f"{LABEL_PREFIX}stack.{c}"] for c in COMPONENTS
             if f"{LABEL_PREFIX}stack.{c}" in labels}
    return {"id": imagebuild_id(labels), "flavor": labels.get(LABEL_PREFIX + "flavor", ""), "stack": stack}


#: the driver floor in NVIDIA_REQUIRE_CUDA, the constraint the NVIDIA container runtime enforces
_REQUIRE_DRIVER = re.compile(r"(?:^|\s)driver>=([0-9][0-9.]*)(?=\s|$)")


def _require_cuda_problem(env: dict[str, str], min_driver: str) -> str | None:
    """Why the image's NVIDIA_REQUIRE_CUDA does not hold the driver floor image.json states (None
    when it does): it is what makes the NVIDIA runtime refuse a node whose driver is too old."""
    require = env.get("NVIDIA_REQUIRE_CUDA")
    if require is None:
        return f"NVIDIA_REQUIRE_CUDA is not set, but image.json min_driver={min_driver!r}"
    floors = _REQUIRE_DRIVER.findall(require)
    if floors != [min_driver]:
        return f"NVIDIA_REQUIRE_CUDA={require!r} but image.json min_driver={min_driver!r}"
    return None


def compare_labels(labels: dict[str, str], image_json: dict | None,
                   env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """The labels must say exactly what /opt/imagebuild/image.json inside the image says; with the
    image's ``env``, a CUDA image's NVIDIA_REQUIRE_CUDA must state image.json's min_driver."""
    if image_json is None:
        return [(FAIL, f"labels: the image has no readable {IMAGE_JSON}")]
    want = expected_from_labels(labels)
    diffs = []
    for key in ("id", "flavor"):
        if str(image_json.get(key, "")) != want[key]:
            diffs.append(f"{LABEL_PREFIX}{'image-id' if key == 'id' else key}={want[key]!r} but "
                         f"image.json {key}={image_json.get(key)!r}")
    if "min_driver" in image_json and str(image_json["min_driver"]) != labels.get(LABEL_PREFIX + "min-driver"):
        diffs.append(f"{LABEL_PREFIX}min-driver={labels.get(LABEL_PREFIX + 'min-driver')!r} but "
                     f"image.json min_driver={image_json['min_driver']!r}")
    min_driver = str(image_json.get("min_driver", "none"))
    checks_require = env is not None and min_driver != "none"
    if checks_require:
        problem = _require_cuda_problem(env, min_driver)
        if problem:
            diffs.append(problem)
    stack = image_json.get("stack", {}) if isinstance(image_json.get("stack"), dict) else {}
    for comp in COMPONENTS:
        label = want["stack"].get(comp)
        inside = stack.get(comp)
        if label is None:
            diffs.append(f"label {LABEL_PREFIX}stack.{comp} missing")
        elif label != inside:
            diffs.append(f"{LABEL_PREFIX}stack.{comp}={label!r} but image.json says {inside!r}")
    if diffs:
        return [(FAIL, "labels differ from image.json: " + "; ".join(diffs))]
    compared = ("id, flavor" + (", min-driver" if "min_driver" in image_json else "")
                + (", NVIDIA_REQUIRE_CUDA" if checks_require else ""))
    return [(PASS, f"labels equal {IMAGE_JSON} ({len(COMPONENTS)} components, {compared})")]


class Containers:
    """The few container operations the smoke run needs, with guaranteed clean-up, on an engine's
    ContainerSession (imagebuild.engines).

    Everything created carries the label ``io.imagebuild.smoke=<token>``; ``close()`` (called by
    ``with``, also on Ctrl-C) removes every container and network, killing those still running.
    """

    def __init__(self, engine, prefix: str = "imagebuild-smoke"):
        self._session = engine.containers(prefix, "io.imagebuild.smoke")
        self.token = self._session.token
        self._networks = 0

    def __enter__(self) -> "Containers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def network(self) -> str:
        name = f"{self.token}-net{self._networks}"
        try:
            self._session.network(name)
        except EngineRefused as exc:
            raise EngineError(f"cannot create network {name}: {exc.detail}") from None
        self._networks += 1
        return name

    def start(self, image: str, command: list[str], *, name: str, env: dict | None = None,
              network: str | None = None, hostname: str | None = None, shm_size: str = "512m",
              files: bytes | None = None, shareable: bool = False, join: Container | None = None,
              gpus: bool = False) -> Container:
        """Create and start a container: on `network` only (its one interface besides loopback),
        `files` (a tar) unpacked at / before it starts, its IPC namespace `shareable`, or joining
        the IPC and PID namespaces of the container `join` (two processes in two containers that
        see each other as on one host); with `gpus`, every GPU of the engine's host."""
        try:
            container = self._session.create(image, command, name=name, env=env or {}, network=network,
                                             hostname=hostname, shm_size=shm_size, shareable=shareable,
                                             join=join, gpus=gpus)
            if files is not None and not self._session.put_files(container, files):
                raise SmokeError(f"cannot copy files into a container of {image}")
            self._session.start(container)
        except NoSuchImage:
            raise SmokeError(f"image {image} not found") from None
        except EngineRefused as exc:
            text = " ".join(str(exc.detail).split())
            raise SmokeError(f"cannot start a container of {image}: {text}") from None
        return container

    def wait(self, container: Container, deadline: float) -> int | None:
        """The exit code, or None after killing a container still running at the deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                code = self._session.wait(container, max(1, min(left, 30)))
            except EngineRefused as exc:
                raise EngineError(f"waiting for container {container.name}: {exc.detail}") from None
            if code is not None:
                return code
        self._kill(container)
        return None

    def logs(self, container: Container, lines: int = 20) -> str:
        try:
            return self._session.logs(container, lines)
        except Exception:  # noqa: BLE001 - logs are a courtesy in an error message
            return ""

    def follow(self, container: Container):
        """The container's output, in chunks as it comes, until it exits."""
        return self._session.follow(container)

    def listening(self, container: Container, port: int, deadline: float) -> bool:
        """Whether a process in `container` listens on TCP `port` before the deadline (read from
        /proc/net/tcp*, no tool needed); False at once when the container has stopped."""
        want = f":{port:04X}"
        while time.monotonic() < deadline:
            if self._session.status(container) != "running":
                return False
            code, out = self._session.exec(container, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
            for line in (out or b"").decode("ascii", "replace").splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":   # LISTEN
                    return True
            time.sleep(0.2)
        return False

    def read_files(self, container: Container, path: str) -> dict[str, bytes]:
        """Regular files at path (a file or a folder) in a container, running or stopped."""
        try:
            data = self._session.read_archive(container, path)
        except EngineRefused as exc:
            raise EngineError(f"cannot read {path} from {container.name}: {exc.detail}") from None
        if data is None:
            return {}
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        files[member.name] = fh.read()
        return files

    def read_json(self, container: Container, path: str) -> dict | None:
        for content in self.read_files(container, path).values():
            try:
                data = json.loads(content)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
        return None

    def _kill(self, container: Container) -> None:
        try:
            self._session.kill(container)
        except Exception:  # noqa: BLE001 - already gone is fine
            pass

    def close(self) -> None:
        self._session.close()


def inspect_image(engine, ref: str) -> ImageUnderTest:
    """The engine's ImageInfo of ``ref``, which must be an imagebuild image."""
    validate_ref(ref)
    try:
        info = engine.lookup(ref)
    except EngineRefused as exc:
        raise EngineError(f"cannot inspect {ref}: {exc.detail}") from None
    if info is None:
        raise SmokeError(f"unknown image {ref} (not in the engine; build it first)")
    if not imagebuild_id(info.labels):
        raise SmokeError(f"{ref} is not an imagebuild image (no {LABEL_PREFIX}image-id label)")
    return ImageUnderTest(ref, info)


@dataclass
class TestOptions:
    """How `imagebuild test` runs the suite. Tier gpu gives the suite's container every GPU of the
    engine's host and adds the GPU-only checks (nccl-tests); its ranks default to the suite's own
    choice, one per GPU (None), where tier cpu runs 2."""
    ranks: int | None = 2
    timeout: float = 180.0
    only: list[str] = field(default_factory=list)
    tier: str = "cpu"

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only


def _follow(cs: Containers, container, log: Callable[[str], None]):
    """Hand each line the container prints to `log` as it comes (a daemon thread)."""
    import threading

    def pump() -> None:
        try:
            pending = b""
            for chunk in cs.follow(container):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    log(line.decode("utf-8", "replace").rstrip())
            if pending.strip():
                log(pending.decode("utf-8", "replace").rstrip())
        except Exception:  # noqa: BLE001 - live output is a courtesy; the report is the truth
            pass

    thread = threading.Thread(target=pump, name=f"logs-{container.name}", daemon=True)
    thread.start()
    return thread


def _suite_in_container(cs: Containers, image: ImageUnderTest, opts: TestOptions,
                        progress: Callable[[CheckResult], None] | None,
                        log: Callable[[str], None] | None = None) -> tuple[list[CheckResult], dict | None]:
    gpu = opts.tier == "gpu"
    # the GPU-only checks run on tier gpu, or when --only names them (on tier cpu they then skip
    # with their reason, as the suite itself does)
    names = ([n for n in CHECK_NAMES if opts.wants(n)]
             + [n for n in GPU_CHECK_NAMES if n in opts.only or (gpu and not opts.only)])
    if not names:
        return [], None
    argv = ["imagebuild-smoke", "--tier", opts.tier, "--report", REPORT_IN_CONTAINER,
            *(["--ranks", str(opts.ranks)] if opts.ranks is not None else []),
            "--timeout", str(int(opts.timeout)), "--image", image.ref, "--only", *names]
    try:
        container = cs.start(image.ref, argv, name="suite", gpus=gpu)
    except SmokeError as exc:
        if not gpu:
            raise
        raise SmokeError(f"tier gpu needs the engine to give containers GPUs (the NVIDIA Container "
                         f"Toolkit on its host, as for `docker run --gpus all`): {exc}") from None
    follower = _follow(cs, container, log) if log else None
    wall = opts.timeout * max(len(names), 1) + 60
    code = cs.wait(container, time.monotonic() + wall)
    if follower:
        follower.join(timeout=5)
    image_json = cs.read_json(container, IMAGE_JSON)
    report = cs.read_json(container, REPORT_IN_CONTAINER)
    if code is None or report is None:
        why = (f"timed out after {wall:.0f}s" if code is None
               else f"imagebuild-smoke exited {code} without a report: {' | '.join(cs.logs(container).splitlines()[-4:])}")
        results = [CheckResult(n, FAIL, why) for n in names]
    else:
        results = Report.from_dict(report).checks
    if progress and not log:  # with live output the suite has already shown these lines
        for r in results:
            if r.name != "versions":
                progress(r)
    return results, image_json


def rank_results(cs: Containers, containers, out: str) -> dict[int, dict]:
    """rank -> the JSON result a rank wrote under ``out`` in any of ``containers`` (files that do
    not parse, or name no rank, are left out: the caller reports the ranks that are missing)."""
    results: dict[int, dict] = {}
    for c in containers:
        for content in cs.read_files(c, out).values():
            try:
                data = json.loads(content)
                results[int(data["rank"])] = data
            except (ValueError, KeyError, TypeError):
                continue
    return results


def rank_errors(results: dict[int, dict], errs: list[str]) -> list[str]:
    """What two ranks' results say is wrong: a missing rank (unless ``errs`` already explains
    it), then the first three errors each rank reported."""
    out = []
    if sorted(results) != [0, 1] and not errs:
        out.append(f"expected results of ranks [0, 1], got {sorted(results)}")
    for rank, data in sorted(results.items()):
        out += [f"rank {rank}: {e}" for e in data.get("errors", [])[:3]]
    return out


def two_node(cs: Containers, image: ImageUnderTest, opts: TestOptions) -> CheckResult:
    """Two containers, one rank each, DDP over TCP with torchrun's c10d rendezvous at node0."""
    started = time.monotonic()
    net = cs.network()
    out = "/tmp/imagebuild-two-node"
    rdzv_id = secrets.token_hex(6)
    nodes = []
    for node in ("node0", "node1"):
        argv = ["imagebuild-smoke", "ddp-node", "--nnodes", "2", "--rdzv-endpoint", f"node0:{RDZV_PORT}",
                "--rdzv-id", rdzv_id, "--out", out, "--steps", "5", "--timeout", str(int(opts.timeout))]
        env = {"OMP_NUM_THREADS": "1"}
        nodes.append(cs.start(image.ref, argv, name=node, env=env, network=net, hostname=node))
    deadline = time.monotonic() + opts.timeout
    codes = [cs.wait(c, deadline) for c in nodes]
    results = rank_results(cs, nodes, out)
    metrics: dict[str, float] = {"nodes": 2, "seconds": round(time.monotonic() - started, 3)}
    if any(code is None for code in codes):
        return CheckResult("ddp.two-node", FAIL, f"timed out after {opts.timeout:.0f}s", metrics)
    errs = []
    for c, code in zip(nodes, codes):
        if code != 0:
            tail = " | ".join(cs.logs(c, 6).splitlines()[-3:])
            errs.append(f"{c.name.rsplit('-', 1)[-1]} exited {code}: {tail}")
    errs += rank_errors(results, errs)
    hosts = sorted({d.get("host", "") for d in results.values()})
    if len(results) == 2 and len(hosts) != 2 and not errs:
        errs.append(f"both ranks ran on {hosts}: not two nodes")
    first = results.get(0, {})
    for key in ("max_rank_diff", "max_rel_diff", "tolerance", "steps"):
        if key in first:
            metrics[key] = first[key]
    if errs:
        return CheckResult("ddp.two-node", FAIL, "; ".join(errs), metrics)
    return CheckResult("ddp.two-node", PASS,
                       f"2 containers ({', '.join(hosts)}) on a private network, torchrun c10d rendezvous at "
                       f"node0:{RDZV_PORT}, gloo over TCP: {first.get('steps')} DDP steps, parameters identical "
                       f"on both ranks, within {first.get('tolerance'):g} relative of a single-process run "
                       f"(worst {first.get('max_rel_diff', 0):.3g})", metrics)


# --------------------------------------------------------------------------------------------
# mpi.two-container

TWO_CONTAINER = "mpi.two-container"
TCP_TLS = "self,tcp"
SM_TLS = "self,sm"
SSH_PORT = 22
UCX_PERF_PORT = 13337
UCX_PERF_ARGS = ["-t", "tag_bw", "-s", "1048576", "-n", "100"]
SSH_CONFIG = b"""Host *
    User root
    IdentityFile /root/.ssh/id_ed25519
    IdentitiesOnly yes
    StrictHostKeyChecking yes
    UserKnownHostsFile /root/.ssh/known_hosts
    BatchMode yes
    LogLevel ERROR
"""
SSHD_CONFIG = b"""HostKey /root/.ssh/ssh_host_ed25519_key
AuthorizedKeysFile /root/.ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
"""
SSHD_COMMAND = ["/bin/sh", "-c", "if [ ! -x /usr/sbin/sshd ]; then echo 'no /usr/sbin/sshd in the image "
                "(OpenSSH server: the openssh fragment)' >&2; exit 127; fi; "
                "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e -f /root/.ssh/sshd_config"]
SM_TRANSPORTS = re.compile(r"\b(posix|sysv|cma|xpmem|knem)/memory\b")


def ssh_files(hosts: list[str]) -> bytes:
    """/root/.ssh for one run, as a tar to unpack at /: a new Ed25519 key pair for root (the
    private key, and the public one as authorized_keys), a new host key for sshd that
    known_hosts names for `hosts` (so the client checks it: StrictHostKeyChecking yes), and the
    client's and sshd's configuration. Made for each run and put only into its containers, which
    are removed afterwards: no key is ever part of an image, printed or on a command line."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    user, host = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()

    def private(key) -> bytes:
        return key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.OpenSSH, ser.NoEncryption())

    def public(key) -> bytes:
        return key.public_key().public_bytes(ser.Encoding.OpenSSH, ser.PublicFormat.OpenSSH)

    files = {"id_ed25519": private(user), "authorized_keys": public(user) + b"\n",
             "ssh_host_ed25519_key": private(host),
             "known_hosts": ",".join(hosts).encode() + b" " + public(host) + b"\n",
             "config": SSH_CONFIG, "sshd_config": SSHD_CONFIG}
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("root/.ssh")
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o700, now
        tar.addfile(folder)
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"root/.ssh/{name}")
            info.size, info.mode, info.mtime = len(data), 0o600, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


_UCX_PREFIX = re.compile(r"^\[[0-9.]+\]\s+\[[^\]]*\]\s+")


def _why(cs: Containers, container) -> str:
    """The reason a container's program gave: its first two error lines (UCX's and Open MPI's,
    without UCX's time stamp), else its last lines."""
    lines = [_UCX_PREFIX.sub("", ln).strip() for ln in cs.logs(container, 400).splitlines()
             if ln.strip() and not ln.startswith("imagebuild-check:")]
    errors = list(dict.fromkeys(ln for ln in lines if re.search(r"\bERROR\b|\bError:", ln)))
    return " | ".join(errors[:2] or lines[-4:]) or "no output"


def _mpi_across(cs: Containers, image: ImageUnderTest, tls: str | None, deadline: float,
                metrics: dict) -> tuple[str, str]:
    """One rank in each of two containers on a private network: mpirun in node0 starts node1's
    rank over ssh (sshd in node1), the all-reduce worker verifies every element."""
    hosts = ["node0", "node1"]
    net = cs.network()
    keys = ssh_files(hosts)
    out = "/tmp/imagebuild-two-container"
    via = f"pml ucx, UCX_TLS={tls}" if tls else "Open MPI's default pml"
    sshd = cs.start(image.ref, SSHD_COMMAND, name="mpi-node1", network=net, hostname="node1", files=keys)
    if not cs.listening(sshd, SSH_PORT, deadline):
        return FAIL, f"sshd did not start in node1: {_why(cs, sshd)}"
    started = time.monotonic()
    argv = ["imagebuild-smoke", "mpi-hosts", "--hosts", ",".join(hosts), "--out", out]
    launcher = cs.start(image.ref, argv + (["--tls", tls] if tls else []), name="mpi-node0", network=net,
                        hostname="node0", files=keys, env={"OMP_NUM_THREADS": "1"})
    code = cs.wait(launcher, deadline)
    metrics["seconds_mpirun"] = round(time.monotonic() - started, 3)
    if code is None:
        return FAIL, f"MPI across 2 containers ({via}): timed out"
    results = rank_results(cs, (launcher, sshd), out)
    errs = []
    if code != 0:
        errs.append(f"mpirun in node0 exited {code}: {_why(cs, launcher)}")
    errs += rank_errors(results, errs)
    ran_on = [results[r].get("host") for r in sorted(results)]
    if not errs and ran_on != hosts:
        errs.append(f"ranks 0 and 1 ran on {ran_on}, not one in each of {hosts}")
    if errs:
        return FAIL, f"MPI across 2 containers ({via}): " + "; ".join(errs)
    from ..smoke.checks import bandwidth_metrics
    metrics["elements_checked"] = results[0].get("checked", 0)
    metrics.update({f"tcp.{k}": v for k, v in bandwidth_metrics(results[0].get("timings", {}), 2).items()})
    return PASS, (f"MPI_Allreduce(MPI_SUM) with one rank in each of 2 containers (node0, node1) on a private "
                  f"network, {via}, mpirun in node0 starting node1's rank over ssh (keys made for this run): "
                  f"{int(metrics['elements_checked'])} doubles per rank verified element by element")


def _shared_memory_across(cs: Containers, image: ImageUnderTest, share: bool, deadline: float,
                          metrics: dict) -> tuple[str, str]:
    """UCX's shared-memory transports between two containers sharing IPC and PID namespaces (as
    the containers of one pod or one node's job may): ucx_perftest tag_bw, UCX_TLS=self,sm."""
    net = cs.network()
    env = {"UCX_TLS": SM_TLS}
    how = "sharing IPC and PID namespaces" if share else "with their own IPC and PID namespaces"
    server = cs.start(image.ref, ["/bin/sh", "-c", "command -v ucx_perftest >/dev/null || { echo 'no ucx_perftest "
                                 "in the image' >&2; exit 127; }; ucx_perftest -p " + str(UCX_PERF_PORT)
                                 + "; exec sleep 600"],
                      name="shm-node1", network=net, hostname="node1", env=env, shareable=share)
    if not cs.listening(server, UCX_PERF_PORT, deadline):
        return FAIL, f"ucx_perftest did not start in node1: {_why(cs, server)}"
    client = cs.start(image.ref, ["ucx_perftest", "node1", "-p", str(UCX_PERF_PORT), *UCX_PERF_ARGS],
                      name="shm-node0", network=net, hostname="node0", env={**env, "UCX_PROTO_INFO": "y"},
                      join=server if share else None)
    code = cs.wait(client, deadline)
    if code is None:
        return FAIL, f"UCX shared memory between 2 containers {how}: ucx_perftest timed out"
    logs = cs.logs(client, 400)
    final = [ln.split() for ln in logs.splitlines() if ln.startswith("Final:")]
    if code != 0 or not final:
        return FAIL, (f"UCX shared memory between 2 containers {how} ({SM_TLS}): ucx_perftest exited "
                      f"{code}: {_why(cs, client)}")
    try:
        metrics["shm.bandwidth_MBps.1M"] = float(final[-1][6])
    except (IndexError, ValueError):
        return FAIL, f"ucx_perftest's result line is not understood: {' '.join(final[-1])}"
    seen = sorted(set(SM_TRANSPORTS.findall(logs)))
    used = f" over {'/'.join(seen)}" if seen else ""
    return PASS, (f"UCX shared memory between 2 containers {how}: ucx_perftest tag_bw of 1 MiB messages"
                  f"{used} ({SM_TLS}) at {metrics['shm.bandwidth_MBps.1M']:g} MB/s; MPI ranks in two "
                  "containers keep to the network: Open MPI's pml ucx gives ranks on another host "
                  "network-only UCX addresses")


def two_container(cs: Containers, image: ImageUnderTest, opts: TestOptions, *, mpi_tls: str | None = TCP_TLS,
                  share_namespaces: bool = True) -> CheckResult:
    """mpi.two-container: MPI over UCX with one rank in each of two containers (over TCP: the
    containers are two hosts to Open MPI), and UCX's shared memory between two containers that
    share IPC and PID namespaces. Without UCX (stack.ucx none) the MPI part runs over Open MPI's
    default pml and the shared-memory part is skipped."""
    started = time.monotonic()
    metrics: dict[str, float] = {"containers": 2}
    ucx = image.info.labels.get(f"{LABEL_PREFIX}stack.ucx") != "none"
    parts = []
    for run in ("mpi", "shm"):
        deadline = time.monotonic() + opts.timeout
        try:
            if run == "mpi":
                parts.append(_mpi_across(cs, image, mpi_tls if ucx else None, deadline, metrics))
            elif ucx:
                parts.append(_shared_memory_across(cs, image, share_namespaces, deadline, metrics))
            else:
                parts.append((SKIP, "UCX shared memory between containers: UCX absent by design (ucx none)"))
        except (SmokeError, EngineError) as exc:
            parts.append((FAIL, str(exc)))
    metrics["seconds"] = round(time.monotonic() - started, 3)
    return combine(TWO_CONTAINER, parts, metrics)


def test_image(engine, ref: str, opts: TestOptions, progress: Callable[[CheckResult], None] | None = None,
               log: Callable[[str], None] | None = None) -> Report:
    """Run the suite in `ref` and the host-side checks; the Report (image = ref, plus ids).

    `progress` receives each finished check; with `log`, the suite's own output inside the
    container is streamed to it line by line instead, and `progress` then receives only what the
    host decides (versions with the label comparison, ddp.two-node).
    """
    image = inspect_image(engine, ref)
    info = image.info
    checks: list[CheckResult] = []
    with Containers(engine) as cs:
        results, image_json = _suite_in_container(cs, image, opts, progress, log)
        labels = compare_labels(info.labels, image_json, dict(info.env))
        for r in results:
            if r.name == "versions":
                status = FAIL if labels[0][0] == FAIL or r.status == FAIL else r.status
                if r.status == SKIP and labels[0][0] == PASS:
                    status = SKIP  # the image's own comparison did not run: no pass from labels alone
                r = CheckResult(r.name, status, f"{r.detail}; {labels[0][1]}", r.metrics, r.required)
                if progress:
                    progress(r)
            checks.append(r)
        if opts.wants("ddp.two-node") and info.labels.get(f"{LABEL_PREFIX}stack.pytorch") == "none":
            result = CheckResult("ddp.two-node", SKIP, "torch absent by design (pytorch none)")
            checks.append(result)
            if progress:
                progress(result)
        elif opts.wants("ddp.two-node"):
            try:
                result = two_node(cs, image, opts)
            except (SmokeError, EngineError) as exc:
                result = CheckResult("ddp.two-node", FAIL, str(exc))
            checks.append(result)
            if progress:
                progress(result)
        if opts.wants(TWO_CONTAINER) and info.labels.get(f"{LABEL_PREFIX}stack.openmpi") == "none":
            result = CheckResult(TWO_CONTAINER, SKIP, "Open MPI absent by design (openmpi none)")
            checks.append(result)
            if progress:
                progress(result)
        elif opts.wants(TWO_CONTAINER):
            result = two_container(cs, image, opts)
            checks.append(result)
            if progress:
                progress(result)
    return Report(image=ref, checks=checks, tier=opts.tier,
                  extra={"image_id": info.id, "repo_digests": sorted(info.repo_digests),
                         "imagebuild_id": imagebuild_id(info.labels), "ranks": opts.ranks})


def check_only(names: list[str]) -> list[str]:
    known = CHECK_NAMES + GPU_CHECK_NAMES + HOST_CHECK_NAMES
    bad = [n for n in names if n not in known]
    if bad:
        raise UsageError(f"unknown check {bad[0]!r} (one of: {', '.join(known)})",
                         argument="--only")
    return names
