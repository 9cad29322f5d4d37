"""The checks that need more than one container (`imagebuild test` runs them from the host): two
cluster nodes as two containers on a private network. `ddp.two-node`: DDP over TCP with
torchrun's c10d rendezvous, one rank each. `mpi.two-container`: Open MPI between two containers,
over UCX (or TCP), launched through ssh as on a cluster, and ucx_perftest across them; shared
memory between containers only when they share an IPC namespace."""

from __future__ import annotations

import io
import json
import re
import secrets
import tarfile
import time

from .. import labels as L
from ..errors import EngineError, SmokeError
from ..smoke.report import FAIL, PASS, SKIP, CheckResult, combine

from .containers import Containers, ImageUnderTest, TestOptions

LABEL_PREFIX = L.PREFIX
RDZV_PORT = 29500


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
