"""`imagebuild test` on the host: run the smoke suite inside built images through the engine.

For each image: inspect its labels (unknown image: one clear error), run ``imagebuild-smoke`` in a
container and read its JSON report back with ``get_archive``, compare the image's labels with
/opt/imagebuild/image.json inside it (part of ``versions``), and run ``ddp.two-node``: two
containers on a private user-defined network, one rank each, DDP over TCP with torchrun's c10d
rendezvous, as two cluster nodes would. Containers and networks are removed even on Ctrl-C; a
container that outlives its timeout is killed and its check fails "timed out after Ns".

This module never prints; it returns a Report and reports each finished check to ``progress``.
The checks across containers (``ddp.two-node``, ``mpi.two-container``) are in across.py, the
container session and the run's options in containers.py.
"""

from __future__ import annotations

import re
import time
from typing import Callable

from .. import reference
from ..errors import EngineError, EngineRefused, SmokeError, UsageError
from ..smoke import CHECK_NAMES, GPU_CHECK_NAMES, HOST_CHECK_NAMES
from ..smoke.expect import COMPONENTS
from ..smoke.report import FAIL, PASS, SKIP, CheckResult, Report
from .containers import Containers, ImageUnderTest, TestOptions  # noqa: F401 - re-exported
from .across import LABEL_PREFIX, RDZV_PORT, TWO_CONTAINER, two_container, two_node  # noqa: F401 - re-exported

REPORT_IN_CONTAINER = "/tmp/imagebuild-smoke/report.json"
IMAGE_JSON = "/opt/imagebuild/image.json"


def validate_ref(ref: str) -> str:
    if not reference.is_reference_or_id(ref):   # nothing else reaches the engine
        raise UsageError(f"not an image reference: {ref!r} (expected name[:tag] or sha256:<id>)",
                         argument="IMAGE")
    return ref


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


def _require_problem(env: dict[str, str], image_json: dict, min_driver: str) -> str | None:
    """Why the image's NVIDIA_REQUIRE_* variables are not the ones image.json records, or would not
    parse as NVIDIA's runtime reads them (None when they are and do): they make the runtime refuse
    a node. An image.json without `nvidia_require` (an older image) is held to its driver floor."""
    from ..smoke.nvrequire import InvalidRequirement, PREFIX, check_syntax
    want = image_json.get("nvidia_require")
    if not isinstance(want, dict):
        return _require_cuda_problem(env, min_driver)
    have = {k: v for k, v in env.items() if k.startswith(PREFIX)}
    if have != want:
        names = sorted(set(have) | set(want))
        diff = [n for n in names if have.get(n) != want.get(n)]
        return f"{', '.join(diff)} in the image's ENV differ from image.json nvidia_require"
    for name, req in sorted(have.items()):
        try:
            check_syntax(req)
        except InvalidRequirement as exc:
            return f"{name} would be an invalid expression to NVIDIA's runtime: {exc}"
    return None


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
        problem = _require_problem(env, image_json, min_driver)
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
                + ((", NVIDIA_REQUIRE_*" if isinstance(image_json.get("nvidia_require"), dict)
                    else ", NVIDIA_REQUIRE_CUDA") if checks_require else ""))
    return [(PASS, f"labels equal {IMAGE_JSON} ({len(COMPONENTS)} components, {compared})")]


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
    with Containers(engine, env=opts.env) as cs:
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
