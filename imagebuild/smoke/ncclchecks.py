"""The smoke suite's NCCL checks: imagebuild's own benchmark (nccl.bench in the CPU tier,
nccl.bandwidth in the GPU tier) and nccl-tests' all_reduce_perf, whose tables one parser reads and
one judge judges (nccltests.py). checks.py registers them, in the suite's order. Standard library
only (it runs inside every image)."""

from __future__ import annotations

import os

from . import bandwidth, libs, proc
from .context import Context
from .mpilaunch import _mpirun_env
from .ncclbench import find_bench, nccl_version_code, parse_version as parse_bench_version
from .nccltests import (NCCL_TESTS_ARGS, NCCL_TESTS_SIZES, find_all_reduce_perf, judge_nccl_tests,
                        parse_nccl_tests)
from .report import FAIL, PASS, SKIP, CheckResult, combine
from .workers.probe import nccl_code

DRIVER_LIBS = libs.DRIVER_LIBS     # the driver's libraries: NVIDIA's runtime mounts them from the host


def _visible_gpus(ctx: Context) -> tuple[int, str]:
    """GPUs the ranks may use: torch's count where torch is, else nvidia-smi -L (comms images)."""
    t = ctx.torch()
    if t.get("present"):
        return ctx.cuda_ranks(), f"torch {t.get('version')} sees {ctx.cuda_ranks()}"
    smi = proc.which("nvidia-smi")
    if not smi:
        return 0, "no torch and no nvidia-smi"
    out = proc.run([smi, "-L"], timeout=min(ctx.left(), 30))
    count = len([ln for ln in out.output.splitlines() if ln.startswith("GPU ")]) if out.ok else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip()]))
    return count, f"nvidia-smi -L lists {count}"


def check_nccl_bench(ctx: Context) -> CheckResult:
    """The CPU tier's part of imagebuild's own NCCL benchmark (ncclbench.py): the binary is there
    where image.json promises it (features.nccl_bench), every library it links resolves, and its
    --version names the NCCL the image's stack names, from its headers and from the library it
    loaded (no GPU needed). The GPU tier's nccl.bandwidth runs it."""
    name = "nccl.bench"
    promised = ctx.promises("nccl_bench")
    exe, where = find_bench()
    if exe is None:
        if where.startswith("$") or promised:
            return CheckResult(name, FAIL, where if where.startswith("$") else
                               f"{where}, but the image should have it (features.nccl_bench)")
        return CheckResult(name, SKIP, "imagebuild's NCCL benchmark is not part of this image "
                           "(features.nccl_bench false)" if promised is False else f"not installed: {where}")
    parts: list[tuple[str, str]] = []
    metrics: dict[str, float] = {}
    linked = libs.ldd_deps(exe, timeout=min(ctx.left(), 30))
    missing = sorted(n for n, p in linked.items() if p is None and n not in DRIVER_LIBS)
    if missing:
        parts.append((FAIL, f"{exe} links libraries that do not resolve: {', '.join(missing)}"))
    for soname in ("libnccl.so.2", "libcudart.so"):
        hit = next(((n, p) for n, p in linked.items() if n.startswith(soname) and p), None)
        parts.append((PASS, f"{hit[0]} => {hit[1]}") if hit else
                     (FAIL, f"{exe} does not link {soname}*"))
    out = proc.run([exe, "--version"], timeout=min(ctx.left(), 30))
    ver = parse_bench_version(out.output)
    if not out.ok or ver is None:
        parts.append((FAIL, f"{exe} --version exited {out.returncode}: {out.tail(2)}"))
        return combine(name, parts, metrics)
    metrics.update({"nccl_headers_code": ver["nccl_headers"], "nccl_library_code": ver["nccl_library"],
                    "cudart_library_code": ver["cudart_library"], "mpi": int(ver["mpi"])})
    want = ctx.expected("nccl")
    code = nccl_version_code(want or "")
    for side in ("headers", "library"):
        got = nccl_code(ver[f"nccl_{side}"])
        if code is None:
            parts.append((PASS, f"NCCL {got} ({side}; no expectation)"))
        else:
            parts.append((PASS if ver[f"nccl_{side}"] == code else FAIL,
                          f"NCCL {got} from its {side}" + (f" matches {want}" if ver[f"nccl_{side}"] == code
                                                          else f", but the image's stack says {want}")))
    if ctx.promises("nccl_bench") and not ver["mpi"]:
        parts.append((FAIL, "built without MPI: one rank per GPU under mpirun is not possible"))
    return combine(name, parts, metrics)


def _bandwidth_run(ctx: Context, name: str, exe: str, what: str) -> CheckResult:
    """Run an all-reduce bandwidth program that prints nccl-tests' table (nccl-tests' all_reduce_perf
    or imagebuild-nccl-bw) on the GPUs the ranks may use, one rank per GPU: under mpirun when the
    program links MPI, else one process driving them all (-g); judge its table (every element
    right, every size there, busbw = algbw*2(n-1)/n)."""
    gpus, seen = _visible_gpus(ctx)
    if gpus == 0:
        return CheckResult(name, SKIP, f"tier gpu: no CUDA device visible ({seen})")
    ranks = max(1, min(ctx.ranks, gpus))
    linked = libs.ldd_deps(exe, timeout=min(ctx.left(), 30))
    mpirun = proc.which("mpirun")
    use_mpi = any(n.startswith("libmpi.so") for n in linked) and mpirun is not None
    if use_mpi:
        argv = [mpirun, "--allow-run-as-root", "-np", str(ranks), exe, *NCCL_TESTS_ARGS, "-g", "1"]
        env, how = _mpirun_env(ctx), f"mpirun -np {ranks}, -g 1"
    else:
        argv = [exe, *NCCL_TESTS_ARGS, "-g", str(ranks)]
        env, how = ctx.env(), f"one process, -g {ranks}"
    outcome = proc.run(argv, timeout=ctx.left(), env=env)
    with open(os.path.join(ctx.scratch(name), f"{os.path.basename(exe)}.log"), "w", encoding="utf-8") as fh:
        fh.write(outcome.output)
    found = parse_nccl_tests(outcome.output)
    sizes = bandwidth.sizes(*NCCL_TESTS_SIZES)
    errs = judge_nccl_tests(found, ranks, sizes)
    if outcome.timed_out:
        errs.insert(0, f"timed out after {ctx.timeout:.0f}s")
    elif outcome.returncode != 0:
        errs.insert(0, f"{os.path.basename(exe)} exited {outcome.returncode}: {outcome.tail(4)}")
    rows = found["rows"]
    metrics: dict[str, float] = {"ranks": ranks, "gpus": gpus, "sizes": len(rows), "seconds_run": round(outcome.seconds, 3)}
    if found["out_of_bounds"] is not None:
        metrics["out_of_bounds"] = found["out_of_bounds"][0]
    if found["avg_busbw"] is not None:
        metrics["avg_busbw_GBps"] = found["avg_busbw"]
    if found["nccl_library"]:
        metrics["nccl_library_code"] = found["nccl_library"]
    for r in rows:
        tag = bandwidth.human(r["size"])
        metrics[f"time_us.{tag}"] = r["oop"]["time_us"]
        metrics[f"algbw_GBps.{tag}"] = r["oop"]["algbw"]
        metrics[f"busbw_GBps.{tag}"] = r["oop"]["busbw"]
        metrics[f"inplace_algbw_GBps.{tag}"] = r["ip"]["algbw"]
        metrics[f"inplace_busbw_GBps.{tag}"] = r["ip"]["busbw"]
    if rows:
        peak_bus = max(rows, key=lambda r: r["oop"]["busbw"])
        peak_alg = max(rows, key=lambda r: r["oop"]["algbw"])
        metrics["peak_busbw_GBps"] = peak_bus["oop"]["busbw"]
        metrics["peak_algbw_GBps"] = peak_alg["oop"]["algbw"]
    nccl = f", NCCL {nccl_code(found['nccl_library'])}" if found["nccl_library"] else ""
    libnccl = next((p for n, p in linked.items() if n.startswith("libnccl.so")), None)
    nccl += f" from {libnccl}" if libnccl else ""
    head = f"{what} ({exe}, {how}{nccl})"
    if errs:
        return CheckResult(name, FAIL, f"{head}: " + "; ".join(errs)[:600], metrics)
    oob = found["out_of_bounds"]
    detail = (f"{head}: {len(rows)} sizes {bandwidth.human(sizes[0])}..{bandwidth.human(sizes[-1])} "
              f"{rows[0]['type']} {rows[0]['redop']}, 0 wrong elements, '# Out of bounds values : {oob[0]} {oob[1]}'; "
              f"peak busbw {metrics['peak_busbw_GBps']:g} GB/s at {bandwidth.human(peak_bus['size'])}, "
              f"peak algbw {metrics['peak_algbw_GBps']:g} GB/s at {bandwidth.human(peak_alg['size'])}")
    if ranks == 1:
        detail += ("; one rank: busbw = algbw*2(n-1)/n is 0 by definition and algbw measures a copy "
                   "within one GPU, not communication between GPUs")
    return CheckResult(name, PASS, detail, metrics)


def check_nccl_bandwidth(ctx: Context) -> CheckResult:
    name = "nccl.bandwidth"
    if ctx.tier != "gpu":
        return CheckResult(name, SKIP, "tier cpu: the NCCL benchmark needs GPUs (run with --tier gpu)")
    exe, where = find_bench()
    if exe is None:
        if where.startswith("$") or ctx.promises("nccl_bench"):
            return CheckResult(name, FAIL, where if where.startswith("$") else
                               f"{where}, but the image should have it (features.nccl_bench)")
        return CheckResult(name, SKIP, f"imagebuild's NCCL benchmark not installed: {where}")
    return _bandwidth_run(ctx, name, exe, "imagebuild-nccl-bw all_reduce")


def check_nccl_tests(ctx: Context) -> CheckResult:
    name = "nccl-tests"
    if ctx.tier != "gpu":
        return CheckResult(name, SKIP, "tier cpu: nccl-tests needs GPUs (run with --tier gpu)")
    exe, where = find_all_reduce_perf()
    if exe is None:
        if where.startswith("$"):
            return CheckResult(name, FAIL, where)
        if _nccl_tests_expected(ctx):
            return CheckResult(name, FAIL, f"{where}, but the image should have nccl-tests "
                               f"(CUDA {ctx.expected('cuda')}, NCCL {ctx.expected('nccl')})")
        return CheckResult(name, SKIP, f"nccl-tests not installed: {where}")
    return _bandwidth_run(ctx, name, exe, "all_reduce_perf")


def _nccl_tests_expected(ctx: Context) -> bool:
    """Whether the image should hold nccl-tests: image.json lists its prefix among what the image
    compiled (`built`); an image.json without `built` from a CUDA image with NCCL (written before
    images were built from the registries alone) is read as it was then."""
    built = (ctx.expectation or {}).get("built")
    if isinstance(built, list):
        return any(str(p).rstrip("/").endswith("/nccl-tests") for p in built)
    if ctx.promises("nccl_bench"):
        return False
    return ctx.expects_present("cuda") and ctx.expects_present("nccl")
