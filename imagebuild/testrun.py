"""`imagebuild test` on the host: run the smoke suite inside built images through the docker SDK.

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

from .errors import EngineError, SmokeError, UsageError
from .smoke import CHECK_NAMES, HOST_CHECK_NAMES
from .smoke.expect import COMPONENTS
from .smoke.report import FAIL, PASS, SKIP, CheckResult, Report

# a local image reference (name[:tag]) or an engine image id; nothing else reaches the engine
IMAGE_REF = re.compile(r"^(?:sha256:[0-9a-f]{64}|[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]{1,5})?"
                       r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?)\Z")
LABEL_PREFIX = "io.imagebuild."
REPORT_IN_CONTAINER = "/tmp/imagebuild-smoke/report.json"
IMAGE_JSON = "/opt/imagebuild/image.json"
RDZV_PORT = 29500


def validate_ref(ref: str) -> str:
    if not isinstance(ref, str) or len(ref) > 255 or not IMAGE_REF.match(ref):
        raise UsageError(f"not an image reference: {ref!r} (expected name[:tag] or sha256:<id>)",
                         argument="IMAGE")
    return ref


@dataclass
class ImageInfo:
    ref: str
    image_id: str
    repo_digests: list[str]
    labels: dict[str, str]

    @property
    def imagebuild_id(self) -> str:
        return self.labels.get(LABEL_PREFIX + "image-id", "")

    def expected_from_labels(self) -> dict:
        stack = {c: self.labels[f"{LABEL_PREFIX}stack.{c}"] for c in COMPONENTS
                 if f"{LABEL_PREFIX}stack.{c}" in self.labels}
        return {"id": self.imagebuild_id, "flavor": self.labels.get(LABEL_PREFIX + "flavor", ""), "stack": stack}


def compare_labels(info: ImageInfo, image_json: dict | None) -> list[tuple[str, str]]:
    """The labels must say exactly what /opt/imagebuild/image.json inside the image says."""
    if image_json is None:
        return [(FAIL, f"labels: the image has no readable {IMAGE_JSON}")]
    want = info.expected_from_labels()
    diffs = []
    for key in ("id", "flavor"):
        if str(image_json.get(key, "")) != want[key]:
            diffs.append(f"{LABEL_PREFIX}{'image-id' if key == 'id' else key}={want[key]!r} but "
                         f"image.json {key}={image_json.get(key)!r}")
    if "min_driver" in image_json and str(image_json["min_driver"]) != info.labels.get(LABEL_PREFIX + "min-driver"):
        diffs.append(f"{LABEL_PREFIX}min-driver={info.labels.get(LABEL_PREFIX + 'min-driver')!r} but "
                     f"image.json min_driver={image_json['min_driver']!r}")
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
    compared = "id, flavor" + (", min-driver" if "min_driver" in image_json else "")
    return [(PASS, f"labels equal {IMAGE_JSON} ({len(COMPONENTS)} components, {compared})")]


class Containers:
    """The few container operations the smoke run needs, with guaranteed clean-up.

    Everything created goes into a list; ``close()`` (called by ``with``, also on Ctrl-C) removes
    every container and network, killing those still running. Kept small so it can move into
    imagebuild.engines as part of the Engine interface.
    """

    def __init__(self, client, prefix: str = "imagebuild-smoke"):
        self.client = client
        self.token = f"{prefix}-{secrets.token_hex(4)}"
        self._containers: list = []
        self._networks: list = []

    def __enter__(self) -> "Containers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def network(self) -> str:
        from docker.errors import APIError

        name = f"{self.token}-net{len(self._networks)}"
        try:
            net = self.client.networks.create(name, driver="bridge", internal=True,
                                              labels={"io.imagebuild.smoke": self.token})
        except APIError as exc:
            raise EngineError(f"cannot create network {name}: {exc.explanation or exc}") from None
        self._networks.append(net)
        return name

    def start(self, image: str, command: list[str], *, name: str, env: dict | None = None,
              network: str | None = None, hostname: str | None = None, shm_size: str = "512m"):
        from docker.errors import APIError, ImageNotFound

        kwargs = {"command": command, "detach": True, "name": f"{self.token}-{name}", "environment": env or {},
                  "labels": {"io.imagebuild.smoke": self.token}, "shm_size": shm_size}
        if hostname:
            kwargs["hostname"] = hostname
        container = None
        try:
            container = self.client.containers.create(image, **kwargs)
            self._containers.append(container)
            if network:
                self.client.networks.get(network).connect(container, aliases=[hostname] if hostname else None)
            container.start()
        except ImageNotFound:
            raise SmokeError(f"image {image} not found") from None
        except APIError as exc:
            text = " ".join(str(exc.explanation or exc).split())
            raise SmokeError(f"cannot start a container of {image}: {text}") from None
        return container

    def wait(self, container, deadline: float) -> int | None:
        """The exit code, or None after killing a container still running at the deadline."""
        import requests
        from docker.errors import APIError

        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                return int(container.wait(timeout=max(1, min(left, 30)))["StatusCode"])
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                continue
            except APIError as exc:
                raise EngineError(f"waiting for container {container.name}: {exc.explanation or exc}") from None
        self._kill(container)
        return None

    def logs(self, container, lines: int = 20) -> str:
        try:
            return container.logs(tail=lines).decode("utf-8", "replace")
        except Exception:  # noqa: BLE001 - logs are a courtesy in an error message
            return ""

    def read_files(self, container, path: str) -> dict[str, bytes]:
        """Regular files at path (a file or a folder) in a container, running or stopped."""
        from docker.errors import APIError, NotFound

        try:
            stream, _ = container.get_archive(path)
            data = b"".join(stream)
        except NotFound:
            return {}
        except APIError as exc:
            raise EngineError(f"cannot read {path} from {container.name}: {exc.explanation or exc}") from None
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        files[member.name] = fh.read()
        return files

    def read_json(self, container, path: str) -> dict | None:
        for content in self.read_files(container, path).values():
            try:
                data = json.loads(content)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
        return None

    def _kill(self, container) -> None:
        try:
            container.kill()
        except Exception:  # noqa: BLE001 - already gone is fine
            pass

    def close(self) -> None:
        label = {"label": f"io.imagebuild.smoke={self.token}"}
        try:  # also those whose create call was interrupted before it returned
            self._containers += [c for c in self.client.containers.list(all=True, filters=label)
                                 if c.id not in {k.id for k in self._containers}]
            self._networks += [n for n in self.client.networks.list(filters=label)
                               if n.id not in {k.id for k in self._networks}]
        except Exception:  # noqa: BLE001 - best effort: the engine may be the thing that failed
            pass
        for container in reversed(self._containers):
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - best effort, and never mask the original error
                pass
        self._containers.clear()
        for net in reversed(self._networks):
            try:
                net.remove()
            except Exception:  # noqa: BLE001
                pass
        self._networks.clear()


def inspect_image(client, ref: str) -> ImageInfo:
    from docker.errors import APIError, ImageNotFound

    validate_ref(ref)
    try:
        image = client.images.get(ref)
    except ImageNotFound:
        raise SmokeError(f"unknown image {ref} (not in the engine; build it first)") from None
    except APIError as exc:
        raise EngineError(f"cannot inspect {ref}: {exc.explanation or exc}") from None
    labels = dict(image.labels or {})
    info = ImageInfo(ref=ref, image_id=image.id, repo_digests=sorted(image.attrs.get("RepoDigests") or []),
                     labels=labels)
    if not info.imagebuild_id:
        raise SmokeError(f"{ref} is not an imagebuild image (no {LABEL_PREFIX}image-id label)")
    return info


@dataclass
class TestOptions:
    ranks: int = 2
    timeout: float = 180.0
    only: list[str] = field(default_factory=list)

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only


def _follow(cs: Containers, container, log: Callable[[str], None]):
    """Hand each line the container prints to `log` as it comes (a daemon thread)."""
    import threading

    def pump() -> None:
        try:
            pending = b""
            for chunk in container.logs(stream=True, follow=True):
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


def _suite_in_container(cs: Containers, info: ImageInfo, opts: TestOptions,
                        progress: Callable[[CheckResult], None] | None,
                        log: Callable[[str], None] | None = None) -> tuple[list[CheckResult], dict | None]:
    names = [n for n in CHECK_NAMES if opts.wants(n)]
    if not names:
        return [], None
    argv = ["imagebuild-smoke", "--report", REPORT_IN_CONTAINER, "--ranks", str(opts.ranks),
            "--timeout", str(int(opts.timeout)), "--image", info.ref, "--only", *names]
    container = cs.start(info.ref, argv, name="suite")
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


def two_node(cs: Containers, info: ImageInfo, opts: TestOptions) -> CheckResult:
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
        nodes.append(cs.start(info.ref, argv, name=node, env=env, network=net, hostname=node))
    deadline = time.monotonic() + opts.timeout
    codes = [cs.wait(c, deadline) for c in nodes]
    results: dict[int, dict] = {}
    for c in nodes:
        for content in cs.read_files(c, out).values():
            try:
                data = json.loads(content)
                results[int(data["rank"])] = data
            except (ValueError, KeyError, TypeError):
                continue
    metrics: dict[str, float] = {"nodes": 2, "seconds": round(time.monotonic() - started, 3)}
    if any(code is None for code in codes):
        return CheckResult("ddp.two-node", FAIL, f"timed out after {opts.timeout:.0f}s", metrics)
    errs = []
    for c, code in zip(nodes, codes):
        if code != 0:
            tail = " | ".join(cs.logs(c, 6).splitlines()[-3:])
            errs.append(f"{c.name.rsplit('-', 1)[-1]} exited {code}: {tail}")
    if sorted(results) != [0, 1] and not errs:
        errs.append(f"expected results of ranks [0, 1], got {sorted(results)}")
    for rank, data in sorted(results.items()):
        errs += [f"rank {rank}: {e}" for e in data.get("errors", [])[:3]]
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


def test_image(client, ref: str, opts: TestOptions, progress: Callable[[CheckResult], None] | None = None,
               log: Callable[[str], None] | None = None) -> Report:
    """Run the suite in `ref` and the host-side checks; the Report (image = ref, plus ids).

    `progress` receives each finished check; with `log`, the suite's own output inside the
    container is streamed to it line by line instead, and `progress` then receives only what the
    host decides (versions with the label comparison, ddp.two-node).
    """
    info = inspect_image(client, ref)
    checks: list[CheckResult] = []
    with Containers(client) as cs:
        results, image_json = _suite_in_container(cs, info, opts, progress, log)
        labels = compare_labels(info, image_json)
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
                result = two_node(cs, info, opts)
            except (SmokeError, EngineError) as exc:
                result = CheckResult("ddp.two-node", FAIL, str(exc))
            checks.append(result)
            if progress:
                progress(result)
    return Report(image=ref, checks=checks, tier="cpu",
                  extra={"image_id": info.image_id, "repo_digests": info.repo_digests,
                         "imagebuild_id": info.imagebuild_id, "ranks": opts.ranks})


def check_only(names: list[str]) -> list[str]:
    allowed = set(CHECK_NAMES) | set(HOST_CHECK_NAMES)
    bad = [n for n in names if n not in allowed]
    if bad:
        raise UsageError(f"unknown check {bad[0]!r} (one of: {', '.join(CHECK_NAMES + HOST_CHECK_NAMES)})",
                         argument="--only")
    return names
