"""The checks. Each takes a Context and returns a CheckResult; none prints.

A part of a check is skipped only *by design* (the expectation says the component is absent, or
there is no expectation and the component is not there); a component the expectation names but
the image lacks is a failure, never a skip.
"""

from __future__ import annotations

import os
import re

from . import bandwidth, expect, gdr, libs, proc
from .context import Context
from .elastic import check_ddp_elastic
from .registry import REGISTRY, check
from .report import FAIL, PASS, SKIP, CheckResult, combine
from .mpilaunch import (_mpirun_env, _rank_errors, bandwidth_metrics,  # noqa: F401 - re-exported
                        judge_ucx_modules, mpirun_argv, parse_transports, parse_ucx_modules,
                        UCX_FEATURE_MODULES, ucx_tls_for_one_host)
from .nccltests import (NCCL_TESTS_ARGS, NCCL_TESTS_DIRS, NCCL_TESTS_ENV,  # noqa: F401 - re-exported
                        NCCL_TESTS_SIZES, find_all_reduce_perf, judge_nccl_tests, parse_nccl_tests)
from .ncclchecks import (_bandwidth_run, _nccl_tests_expected, _visible_gpus,  # noqa: F401 - re-exported
                         check_nccl_bandwidth, check_nccl_bench, check_nccl_tests)
from .torchplan import torch_plan
from .workers import read_results

DRIVER_LIBS = libs.DRIVER_LIBS     # the driver's libraries: NVIDIA's runtime mounts them from the host


def _absent_part(ctx: Context, component: str, what: str) -> tuple[str, str]:
    """The part for a thing that is not there: skip by design, or fail when expected."""
    if ctx.expects_present(component):
        return FAIL, f"{what} not found, but the image should have {component} {ctx.expected(component)}"
    if ctx.expects_absent(component):
        return SKIP, f"{what}: absent by design ({component} none)"
    return SKIP, f"{what} not present (no expectation)"


# ---------------------------------------------------------------------------------------------
# versions
# ---------------------------------------------------------------------------------------------

def ucx_version() -> tuple[str | None, str]:
    exe = proc.which("ucx_info")
    if not exe:
        return None, "ucx_info not installed"
    out = proc.run([exe, "-v"], timeout=30)
    m = re.search(r"[Vv]ersion[ =:]+(\d+\.\d+(?:\.\d+)?)", out.output)
    return (m.group(1), "ucx_info -v") if m else (None, f"ucx_info -v: {out.tail(2)}")


def openmpi_version() -> tuple[str | None, str]:
    exe = proc.which("ompi_info")
    if exe:
        out = proc.run([exe, "--parsable"], timeout=60)
        m = re.search(r"^ompi:version:full:(\S+)", out.output, re.M)
        if m:
            return m.group(1), "ompi_info --parsable"
    exe = proc.which("mpirun")
    if exe:
        out = proc.run([exe, "--version"], timeout=30)
        m = re.search(r"Open MPI\)?\s+(\d+\.\d+(?:\.\d+)?)", out.output)
        if m:
            return m.group(1), "mpirun --version"
        return None, f"mpirun is not Open MPI: {out.tail(1)}"
    return None, "neither ompi_info nor mpirun installed"


def _lib_origin(path: str | None, wheel: str, folders: tuple[str, ...] = ()) -> str:
    """"system", or "wheel nvidia-<wheel>" for a copy from an nvidia-* wheel's
    site-packages/nvidia/<wheel>/lib (or one of `folders`: the wheel's folder when it is named
    otherwise, e.g. nvidia/cu13/lib for nvidia-cuda-runtime 13)."""
    parts = (path or "").split(os.sep)
    if len(parts) > 3 and parts[-2] == "lib" and parts[-3] in (wheel, *folders) and parts[-4] == "nvidia":
        return f"wheel nvidia-{wheel}'s"
    return "system"


@check('versions', quick=True, what="the stack's versions, read from the libraries themselves, are the image's")
def check_versions(ctx: Context) -> CheckResult:
    import platform

    parts: list[tuple[str, str]] = []
    metrics: dict[str, float] = {}
    probe = ctx.probe()
    t = probe["torch"]
    system = probe["system"]["versions"]

    def compare(component: str, label: str, installed: str | None) -> None:
        if ctx.expectation is None:
            parts.append((SKIP if installed is None else PASS,
                          f"{label} {installed or 'not found'} (no expectation to compare)"))
            return
        want = ctx.expected(component)
        if component == "pytorch":
            ok, why = expect.torch_version_matches(installed, want, ctx.expected("cuda"))
        else:
            ok, why = expect.version_matches(installed, want)
        parts.append((PASS if ok else FAIL, f"{label}: {why}"))

    info = expect.os_release()
    if ctx.expectation is None:
        parts.append((PASS, f"os {(expect.os_names(info) or ['unknown'])[0]} (no expectation to compare)"))
    else:
        ok, why = expect.os_matches(info, ctx.expected("os"))
        parts.append((PASS if ok else FAIL, f"os: {why}"))
    compare("python", "python", platform.python_version())

    torch_version = t.get("version") if t.get("present") else None
    if not t.get("present") and ctx.expects_present("pytorch"):
        parts.append((FAIL, f"pytorch: cannot import torch ({t.get('error', 'unknown error')})"))
    else:
        compare("pytorch", "pytorch", torch_version)
    # CUDA and the libraries torch loads vs. the system's own copies: reported separately
    if t.get("present"):
        compare("cuda", "torch.version.cuda", t.get("cuda"))
        # torch's own answers (torch.cuda.nccl.version(), torch.backends.cudnn.version()); when
        # torch raised, say what it raised: "not found" would hide a broken installation
        for comp, label in (("nccl", "torch's NCCL"), ("cudnn", "torch's cuDNN")):
            error = t.get(f"{comp}_error")
            if t.get(comp) is None and error:
                parts.append((FAIL, f"{label}: torch raised {error}"[:400]))
            else:
                compare(comp, label, t.get(comp))
    if t.get("wheels"):
        parts.append((PASS, "nvidia wheels: " + ", ".join(f"{k} {v}" for k, v in sorted(t["wheels"].items()))))
    paths = probe["paths"]
    cudart_origin = _lib_origin(paths.get("cudart"), "cuda-runtime", libs.CUDART_WHEEL_DIRS)
    for comp, key, label in (("cuda", "cudart", f"{cudart_origin} CUDA runtime (libcudart)"),
                             ("nccl", "nccl", f"{_lib_origin(paths.get('nccl'), 'nccl')} NCCL (libnccl.so.2)"),
                             ("cudnn", "cudnn", f"{_lib_origin(paths.get('cudnn'), 'cudnn')} cuDNN (libcudnn)")):
        have = system.get(key)
        if have is None and paths.get(key) is None and t.get("present") and not ctx.expects_absent(comp):
            # torch wheels may carry their own copy; the system one is optional then
            parts.append((SKIP, f"{label} not installed"))
            continue
        error = probe["system"].get("errors", {}).get(key)
        if have is None and error:
            parts.append((FAIL, f"{label}: found but unreadable: {error}"[:400]))
            continue
        compare(comp, label, have)
    ucx, ucx_src = ucx_version()
    if ucx is None and system.get("ucp"):
        ucx, ucx_src = system["ucp"], "ucp_get_version_string()"
    compare("ucx", f"ucx ({ucx_src})", ucx)
    ompi, ompi_src = openmpi_version()
    compare("openmpi", f"openmpi ({ompi_src})", ompi)
    for comp, value in (("python", platform.python_version()), ("pytorch", torch_version), ("ucx", ucx), ("openmpi", ompi)):
        rel = expect.release(value or "")
        if rel:
            metrics[f"{comp}.major"] = rel[0]
            if len(rel) > 1:
                metrics[f"{comp}.minor"] = rel[1]
    result = combine("versions", parts, metrics)
    if ctx.expectation is None and result.status != FAIL:
        return CheckResult("versions", SKIP, "no expectation (no /opt/imagebuild/image.json, no --expect): "
                           "found " + result.detail, metrics)
    return result


# ---------------------------------------------------------------------------------------------
# libraries
# ---------------------------------------------------------------------------------------------

def _ldd_part(label: str, path: str, ctx: Context, search: list[str] | None = None) -> tuple[str, str]:
    missing, err = libs.ldd_missing(path, timeout=min(ctx.left(), 30), search=search)
    if missing is None:
        return FAIL, f"{label}: {err}"
    fatal = [m for m in missing if m not in DRIVER_LIBS]
    driver = [m for m in missing if m in DRIVER_LIBS]
    if fatal:
        return FAIL, f"{label} ({path}): {', '.join(fatal)} not found"
    if driver:
        return PASS, f"{label}: ok (driver library {', '.join(driver)} comes from the host at run time)"
    return PASS, f"{label}: ok"


@check('libraries', quick=True, what='every shared library the stack needs resolves, one copy per soname')
def check_libraries(ctx: Context) -> CheckResult:
    if not proc.which("ldd"):
        return CheckResult("libraries", FAIL, "ldd not installed: cannot check shared libraries")
    paths = ctx.system_libs()
    parts: list[tuple[str, str]] = []
    checked = 0
    for comp, key, soname in (("nccl", "nccl", "libnccl.so.2"), ("ucx", "ucp", "libucp.so.0"),
                              ("openmpi", "mpi", "libmpi.so.40")):
        path = paths.get(key)
        if path is None:
            parts.append(_absent_part(ctx, comp, soname))
            continue
        parts.append(_ldd_part(soname, path, ctx))
        checked += 1
    torch_libs = libs.torch_libs()
    if not torch_libs:
        parts.append(_absent_part(ctx, "pytorch", "torch/lib/*.so"))
    else:
        bad = []
        for path in torch_libs:
            status, text = _ldd_part(os.path.basename(path), path, ctx)
            checked += 1
            if status == FAIL:
                bad.append((status, text))
        parts += bad or [(PASS, f"torch/lib: {len(torch_libs)} libraries ok")]
    # NVIDIA's wheels (torch's CUDA, cuDNN, NCCL, ...): every library resolves its dependencies
    # within the wheels' own folders, except the driver's. Some carry no RUNPATH to their
    # siblings (libcusolverMg, libcufile_rdma), so those folders are on the search path here, as
    # they are once torch has loaded its CUDA libraries by path.
    wheel_dirs = libs.wheel_lib_dirs()
    wheel_libs = [p for d in wheel_dirs for p in libs.shared_objects(d)]
    if wheel_libs:
        bad = []
        for path in wheel_libs:
            status, text = _ldd_part(os.path.basename(path), path, ctx, search=wheel_dirs)
            checked += 1
            if status == FAIL:
                bad.append((status, text))
        parts += bad or [(PASS, f"nvidia wheels: {len(wheel_libs)} libraries in "
                          f"{', '.join(os.path.basename(os.path.dirname(d)) for d in wheel_dirs)} resolve "
                          "within the wheels' folders")]
    # what the image compiled: every ELF of the install prefixes (UCX's and Open MPI's plugins, the
    # nccl-tests binaries) resolves its libraries, the driver's own (libcuda, libnvidia-ml) aside
    for tree in ctx.built_trees(libs.BUILT_TREES):
        elves = libs.elf_files(tree) if os.path.isdir(tree) else []
        if not elves:
            continue
        bad = []
        driver_only = 0
        for path in elves:
            status, text = _ldd_part(os.path.relpath(path, tree), path, ctx)
            checked += 1
            if status == FAIL:
                bad.append((status, text))
            elif "driver library" in text:
                driver_only += 1
        parts += bad or [(PASS, f"{tree}: {len(elves)} ELF files resolve"
                          + (f" ({driver_only} need only the driver's libraries from the host)"
                             if driver_only else ""))]
    # each CUDA, cuDNN, NCCL, UCX and MPI library once: a second copy is gigabytes shipped twice,
    # and which of the two a process binds to depends on what it loaded first
    twice = libs.soname_copies()
    if twice:
        shown = [f"{len(files)} copies of {name}: {', '.join(files)}" for name, files in list(twice.items())[:3]]
        rest = list(twice)[3:]
        if rest:
            shown.append(f"and {len(rest)} more shipped twice or more: {', '.join(rest)}")
        parts.append((FAIL, "; ".join(shown)))
    else:
        parts.append((PASS, "one copy of each CUDA, cuDNN, NCCL, UCX and MPI library"))
    return combine("libraries", parts, {"libraries_checked": checked, "duplicate_sonames": len(twice)})


# ---------------------------------------------------------------------------------------------
# mpi.config
# ---------------------------------------------------------------------------------------------

@check('mpi.config', quick=True, what='Open MPI is built with UCX (and CUDA where the image has it)')
def check_mpi_config(ctx: Context) -> CheckResult:
    parts: list[tuple[str, str]] = []
    metrics: dict[str, float] = {}
    exe = proc.which("ompi_info")
    if not exe:
        parts.append(_absent_part(ctx, "openmpi", "ompi_info"))
    else:
        out = proc.run([exe, "--parsable"], timeout=min(ctx.left(), 60))
        has_ucx = bool(re.search(r"^mca:pml:ucx:", out.output, re.M))
        metrics["pml_ucx"] = int(has_ucx)
        if has_ucx:
            parts.append((PASS, "Open MPI has the UCX PML (mca pml ucx)"))
        elif ctx.expects_absent("ucx"):
            parts.append((SKIP, "no UCX PML: absent by design (ucx none)"))
        else:
            parts.append((FAIL, "Open MPI lacks the UCX PML (no mca:pml:ucx in ompi_info)"))
        full = proc.run([exe, "--parsable", "--all"], timeout=min(ctx.left(), 60))
        cuda = "mpi_built_with_cuda_support:value:true" in full.output
        metrics["mpi_cuda_support"] = int(cuda)
        # required where image.json promises a CUDA-aware Open MPI (features.mpi_cuda; an older
        # image.json without it: in every CUDA image); the OS's Open MPI beside torch's wheel CUDA
        # is not CUDA-aware, and its image says so
        promised = ctx.promises("mpi_cuda")
        if promised is None:
            promised = ctx.expects_present("cuda")
        if promised:
            parts.append((PASS if cuda else FAIL,
                          "Open MPI built with CUDA support" if cuda
                          else "Open MPI built without CUDA support (mpi_built_with_cuda_support false)"))
        elif ctx.expects_present("cuda"):
            parts.append((PASS, f"CUDA support in Open MPI: {'yes' if cuda else 'no'} (not required: "
                          "the image does not promise a CUDA-aware Open MPI, features.mpi_cuda false)"))
        else:
            parts.append((PASS, f"CUDA support in Open MPI: {'yes' if cuda else 'no'} (not required)"))
    ucx_info = proc.which("ucx_info")
    if not ucx_info:
        if ctx.expects_present("ucx") or not ctx.has_expectation:
            parts.append((SKIP, "ucx_info not installed: UCX transports not listed"))
        else:
            parts.append(_absent_part(ctx, "ucx", "ucx_info"))
    else:
        out = proc.run([ucx_info, "-d"], timeout=min(ctx.left(), 60))
        tls = parse_transports(out.output)
        metrics["ucx_transports"] = len(tls)
        for tl in tls:
            metrics[f"ucx_transport.{tl}"] = 1
        if tls:
            parts.append((PASS, f"UCX transports: {', '.join(tls)}"))
        else:
            parts.append((FAIL, f"ucx_info -d lists no transport: {out.tail(2)}"))
        built = proc.run([ucx_info, "-b"], timeout=min(ctx.left(), 60))
        modules = parse_ucx_modules(built.output)
        for mod in sorted(modules):
            metrics[f"ucx_module.{mod}"] = 1
        parts += judge_ucx_modules(modules, {f: ctx.feature(f) for f in UCX_FEATURE_MODULES},
                                   bool(re.search(r"#define HAVE_IB\s+1", built.output)))
        if ctx.feature("verbs"):
            devices = gdr.probe().rdma_devices
            if devices:
                rc = [tl for tl in tls if tl.startswith("rc")]
                parts.append((PASS if rc else FAIL,
                              f"RC transports on {', '.join(devices)}: {', '.join(rc)}" if rc
                              else f"RDMA devices {', '.join(devices)} present but UCX lists no rc transport"))
            else:
                parts.append((SKIP, "no RDMA device on this host: rc/verbs transports cannot be listed"))
    return combine("mpi.config", parts, metrics)


# ---------------------------------------------------------------------------------------------
# mpi.allreduce
# ---------------------------------------------------------------------------------------------

@check('mpi.allreduce', what='MPI_Allreduce over UCX across ranks, every element checked')
def check_mpi_allreduce(ctx: Context) -> CheckResult:
    mpirun = proc.which("mpirun")
    if not mpirun:
        status, text = _absent_part(ctx, "openmpi", "mpirun")
        return CheckResult("mpi.allreduce", status, text)
    lib = ctx.system_libs().get("mpi")
    if not lib:
        return CheckResult("mpi.allreduce", FAIL, "mpirun found but libmpi.so.40 not found")
    use_ucx = not ctx.expects_absent("ucx")
    # over UCX: shared memory between the ranks (when /dev/shm is usable), then TCP, each run on
    # its own, so a transport that does not work fails the check by name
    transports = [ucx_tls_for_one_host()] if use_ucx else [None]
    if use_ucx and not os.environ.get("UCX_TLS") and transports[0] != "self,tcp":
        transports.append("self,tcp")
    env = _mpirun_env(ctx)
    errs: list[str] = []
    metrics: dict[str, float] = {"ranks": ctx.ranks}
    for tls in transports:
        out_dir = ctx.scratch("mpi-allreduce" + (f"-{tls.replace(',', '-')}" if tls else ""))
        argv = mpirun_argv(mpirun, ctx.ranks, tls, ctx.python, lib, out_dir)
        outcome = proc.run(argv, timeout=ctx.left(), env=env)
        results = read_results(out_dir, ctx.ranks)
        errs += [f"UCX_TLS={tls}: {e}" if tls and len(transports) > 1 else e
                 for e in _rank_errors(results, [outcome], ctx.ranks, ctx.timeout)]
        if tls == transports[0]:
            metrics["seconds_mpirun"] = round(outcome.seconds, 3)
            if results:
                metrics["elements_checked"] = results[min(results)].get("checked", 0)
                metrics.update(bandwidth_metrics(results[min(results)].get("timings", {}), ctx.ranks))
        elif results:
            bw = bandwidth_metrics(results[min(results)].get("timings", {}), ctx.ranks)
            metrics.update({f"tcp.{key}": v for key, v in bw.items()})
    via = ("pml ucx, UCX_TLS=" + " and ".join(transports)) if use_ucx else "default pml"
    if errs:
        return CheckResult("mpi.allreduce", FAIL, "; ".join(errs) + f" ({ctx.ranks} ranks, {via})", metrics)
    return CheckResult("mpi.allreduce", PASS,
                       f"{ctx.ranks} ranks under mpirun ({via}), MPI_Allreduce(MPI_SUM) on "
                       f"{int(metrics.get('elements_checked', 0))} doubles per rank verified element by element",
                       metrics)


# ---------------------------------------------------------------------------------------------
# torch.allreduce, ddp.equivalence
# ---------------------------------------------------------------------------------------------

def _launch_torch(ctx: Context, module: str, out_dir: str, args: list[str], extra_env: dict | None = None):
    """One process per rank with torchrun's environment, all in one process group."""
    port = str(proc.free_port())
    argvs, envs = [], []
    for rank in range(ctx.ranks):
        argvs.append([ctx.python, "-m", f"imagebuild.smoke.workers.{module}", "--out", out_dir] + args)
        envs.append(ctx.env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ctx.ranks),
                            LOCAL_WORLD_SIZE=str(ctx.ranks), GROUP_RANK="0", MASTER_ADDR="127.0.0.1",
                            MASTER_PORT=port, **(extra_env or {})))
    outcomes = proc.run_group(argvs, envs, timeout=ctx.left())
    return outcomes, read_results(out_dir, ctx.ranks)


@check('torch.allreduce', what='torch.distributed all-reduce (gloo on CPU, NCCL on GPU)')
def check_torch_allreduce(ctx: Context) -> CheckResult:
    backend, early = torch_plan(ctx, "torch.allreduce")
    if early:
        return early
    if backend == "nccl":
        sizes = bandwidth.sizes(8, 256 << 20, 2)
        iters = "20"
    else:
        sizes = bandwidth.sizes(8, 2 << 20, 8)
        iters = "10"
    out_dir = ctx.scratch("torch-allreduce")
    outcomes, results = _launch_torch(
        ctx, "torch_allreduce", out_dir,
        ["--backend", backend, "--sizes", ",".join(map(str, sizes)), "--iters", iters,
         "--timeout", str(int(ctx.timeout))])
    errs = _rank_errors(results, outcomes, ctx.ranks, ctx.timeout)
    metrics: dict[str, float] = {"ranks": ctx.ranks}
    first = results.get(0, {})
    if first:
        metrics["elements_checked"] = first.get("checked", 0)
        metrics.update(bandwidth_metrics(first.get("timings", {}), ctx.ranks))
    dtypes = [d for d in first.get("dtypes", []) if not any(u.startswith(d) for u in first.get("unsupported", []))]
    if errs:
        return CheckResult("torch.allreduce", FAIL, "; ".join(errs) + f" ({backend}, {ctx.ranks} ranks)", metrics)
    largest = bandwidth.human(sizes[-1])
    detail = (f"{backend}, {ctx.ranks} ranks: {', '.join(dtypes)} verified element by element; "
              f"busbw {metrics.get(f'busbw_GBps.{largest}', 0):.3g} GB/s at {largest}")
    if first.get("unsupported"):
        detail += "; not supported by the backend: " + "; ".join(first["unsupported"])
    return CheckResult("torch.allreduce", PASS, detail, metrics)


@check('ddp.equivalence', what="DDP over N ranks gives the single-process model's weights")
def check_ddp_equivalence(ctx: Context) -> CheckResult:
    backend, early = torch_plan(ctx, "ddp.equivalence")
    if early:
        return early
    out_dir = ctx.scratch("ddp")
    outcomes, results = _launch_torch(
        ctx, "ddp", out_dir, ["--backend", backend, "--steps", "5", "--timeout", str(int(ctx.timeout))])
    errs = _rank_errors(results, outcomes, ctx.ranks, ctx.timeout)
    first = results.get(0, {})
    metrics: dict[str, float] = {"ranks": ctx.ranks}
    for key in ("steps", "tolerance", "max_rank_diff", "max_rel_diff"):
        if key in first:
            metrics[key] = first[key]
    if "ddp_step_s" in first:
        metrics["ddp_step_ms"] = round(first["ddp_step_s"] * 1e3, 4)
        metrics["single_step_ms"] = round(first["single_step_s"] * 1e3, 4)
        metrics["ddp_over_single"] = round(first["ddp_step_s"] / max(first["single_step_s"], 1e-12), 4)
    if errs:
        return CheckResult("ddp.equivalence", FAIL, "; ".join(errs) + f" ({backend}, {ctx.ranks} ranks)", metrics)
    detail = (f"{backend}, {ctx.ranks} ranks, {first.get('steps')} SGD steps on {first.get('device')}: "
              f"parameters identical on all ranks after every step (max abs diff "
              f"{first.get('max_rank_diff')}), within {first.get('tolerance'):g} relative of a single-process "
              f"run on the whole batch (worst {first.get('max_rel_diff', 0):.3g})")
    if "ddp_step_ms" in metrics:
        detail += (f"; step {metrics['ddp_step_ms']:.3g} ms under DDP vs {metrics['single_step_ms']:.3g} ms "
                   f"single-GPU ({metrics['ddp_over_single']:.3g}x)")
    return CheckResult("ddp.equivalence", PASS, detail, metrics)


# ---------------------------------------------------------------------------------------------
# gpudirect
# ---------------------------------------------------------------------------------------------

check('ddp.elastic', what="torchrun --max-restarts survives a killed worker (elastic.py)")(check_ddp_elastic)


@check('gpudirect', what='which GPUDirect RDMA path the node offers (informational)')
def check_gpudirect(ctx: Context) -> CheckResult:
    found = gdr.probe()
    metrics: dict[str, float] = {f"path.{p}": 1 for p in found.available}
    metrics["rdma_devices"] = len(found.rdma_devices)
    metrics["open_kernel_module"] = int(found.open_kernel_module)
    env = " ".join(f"{k}={v}" for k, v in sorted(found.nccl_env.items()))
    detail = f"path {found.path}; NCCL settings: {env or '(defaults)'}; " + "; ".join(found.notes)
    if ctx.tier != "gpu":
        return CheckResult("gpudirect", PASS, detail, metrics, required=False)
    gpus = ctx.cuda_ranks()
    t = ctx.torch()
    if gpus == 0 or not t.get("nccl_backend"):
        return CheckResult("gpudirect", PASS, detail + "; NCCL transport not measured: no CUDA device or "
                           "no NCCL backend", metrics, required=False)
    ranks = max(1, min(ctx.ranks, gpus))
    sub = Context(tier=ctx.tier, ranks=ranks, timeout=ctx.timeout, expectation=ctx.expectation,
                  workdir=ctx.workdir, python=ctx.python, deadline=ctx.deadline, _probe=ctx._probe)
    out_dir = ctx.scratch("gdr-nccl")
    outcomes, results = _launch_torch(
        sub, "torch_allreduce", out_dir, ["--backend", "nccl", "--sizes", "1048576", "--iters", "3"],
        extra_env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,P2P,SHM,GRAPH"})
    log = "\n".join(o.output for o in outcomes)
    counts = gdr.parse_nccl_log(log)
    metrics.update({f"nccl.{k}": v for k, v in counts.items()})
    errs = _rank_errors(results, outcomes, ranks, ctx.timeout)
    if errs:
        return CheckResult("gpudirect", FAIL, detail + "; NCCL job failed: " + "; ".join(errs), metrics,
                           required=False)
    return CheckResult("gpudirect", PASS, detail + f"; NCCL ({ranks} ranks) used: {gdr.transport_summary(counts)}",
                       metrics, required=False)


# ---------------------------------------------------------------------------------------------
# nccl-tests (tier gpu only)
# ---------------------------------------------------------------------------------------------

# nccl.bench, nccl.bandwidth and nccl-tests (ncclchecks.py), registered here in the suite's order
check('nccl.bench', quick=True, what="imagebuild's NCCL benchmark: built, linked to the image's NCCL and "
      "CUDA run time")(check_nccl_bench)
check('nccl.bandwidth', tier="gpu", what="imagebuild's NCCL benchmark: all-reduce on every GPU, every "
      "element checked, bus bandwidth")(check_nccl_bandwidth)
check('nccl-tests', tier="gpu", what='nccl-tests all_reduce_perf: no wrong elements, bus bandwidth')(check_nccl_tests)


#: name -> function, from the one registry (registry.py)
CHECKS = {c.name: c.fn for c in REGISTRY.values() if c.fn is not None}
