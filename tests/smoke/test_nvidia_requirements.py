"""NVIDIA's container runtime, judged as it judges (issue 43): imagebuild/smoke/nvrequire.py models
libnvidia-container's requirement check, and every image's NVIDIA_REQUIRE_* variables must make it
start the image on exactly the hosts where imagebuild says the image runs.

The host profiles are made from matrix.yaml: every driver branch it knows (at the driver releases it
names in that branch, and the branch's lowest and highest), every compute capability, and the brand
NVIDIA's runtime reports for a GPU of each kind: Tesla (data-center GPUs before Ampere), Unknown
(NVML's NVIDIA brand: data-center GPUs from Ampere on), GeForce (a consumer GPU). Each profile stands
for the matrix's first GPU of that capability and kind with no driver floor of its own, and the test
asks the resolver (`check(..., image=True)`, what resolve, check --image, plan and find use) and
imagebuild-check's judge about it. Pure logic: no engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.render.imageneeds import image_needs
from imagebuild.render.requires import image_requires, representative_gpu
from imagebuild.resolve.solver import Host, check
from imagebuild.smoke import imagecheck
from imagebuild.smoke.nvrequire import (Gpu, InvalidRequirement, Node, admits, check_syntax,
                                        compare_version, parse_condition, satisfied)
from imagebuild.versions import parse_driver

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia_require.json"


# --- the runtime's rules ------------------------------------------------------------------------

def _node(driver: str, cuda: str, *gpus: tuple[str, str]) -> Node:
    return Node(driver=driver, cuda=cuda, gpus=tuple(Gpu(arch=a, brand=b) for a, b in gpus))


@pytest.mark.parametrize("case", json.loads(DATA.read_text())["published"], ids=lambda c: c["id"])
def test_nvidias_published_requirements_are_judged_as_nvidia_documents_them(case):
    """The requirement strings NVIDIA's CUDA images carry, on hosts whose verdicts NVIDIA's
    documents give: a driver that supports the image's CUDA release starts it on any GPU; a listed
    branch with a listed brand through forward compatibility; anything else is refused, in the
    runtime's words."""
    env = {"NVIDIA_REQUIRE_CUDA": case["require"]}
    for host in case["hosts"]:
        ok, message = admits(env, _node(host["driver"], host["cuda"], (host["arch"], host["brand"])))
        assert ok == host["starts"], (host, message)
        if not ok:
            assert message == (f"requirement error: unsatisfied condition: {case['require'].split()[0]}, "
                               "please update your driver to a newer version, or use an earlier cuda container")


def test_versions_compare_part_by_part_trailing_zeros_ignored():
    assert compare_version("13.0", ">=", "13") and compare_version("13", "=", "13.0.0")
    assert compare_version("580.65.06", ">", "580.9") and compare_version("535.104.05", "<", "536")
    assert not compare_version("12.9", ">=", "13.0") and compare_version("10.0", ">", "9.0")
    assert compare_version("13.0.1", "!=", "13.0") and not compare_version("13.0.0", "!=", "13")
    for bad in ("13.x", "-1", "13 .0", "v13", "1" * 30, ".5"):
        with pytest.raises(InvalidRequirement):
            compare_version(bad, ">=", "1")


def test_conditions_parse_as_the_runtime_parses_them():
    assert parse_condition("driver>=535") == ("driver", ">=", "535")
    assert parse_condition("CUDA>=13.0") == ("cuda", ">=", "13.0")
    assert parse_condition("driver!535") == ("driver", "!=", "535")      # its strncmp reads ! as !=
    assert parse_condition("arch<9") == ("arch", "<", "9")
    for bad in ("driver==535", "driver>=", ">=535", "cudnn>=9", "driver=>535", "driver<>1"):
        with pytest.raises(InvalidRequirement):
            parse_condition(bad)


def test_alternatives_or_conditions_and_reading_order():
    node = _node("535.104.05", "12.2", ("9.0", "Unknown"))
    gpu = node.gpus[0]
    assert satisfied("cuda>=13.0 driver>=535", node, gpu)
    assert not satisfied("cuda>=13.0 driver>=535,driver<535", node, gpu)
    # an alternative that holds ends the reading: a broken one after it is never read
    assert satisfied("driver>=535 nonsense", node, gpu)
    with pytest.raises(InvalidRequirement):
        satisfied("nonsense driver>=535", node, gpu)
    # after a false condition, the rest of its alternative is not read either
    assert not satisfied("driver<1,nonsense", node, gpu)
    # empty items are skipped, and a requirement of nothing holds
    assert satisfied("  ,driver>=535,, ", node, gpu) and satisfied("", node, gpu)
    # brands compare without case, with = and != only; arch and brand hold with no GPU visible
    assert satisfied("brand=UNKNOWN", node, gpu) and not satisfied("brand!=unknown", node, gpu)
    with pytest.raises(InvalidRequirement):
        satisfied("brand>=tesla", node, gpu)
    assert satisfied("arch>=99,brand=nothing", node, None)


def test_every_gpu_is_judged_and_disable_turns_the_check_off():
    env = {"NVIDIA_REQUIRE_ARCH": "arch=9.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.0"}
    two = _node("580.95.05", "13.0", ("9.0", "Unknown"), ("8.9", "GeForce"))
    assert admits(env, two) == (False, "requirement error: unsatisfied condition: arch=9.0")
    assert admits({**env, "NVIDIA_DISABLE_REQUIRE": "1"}, two) == (True, "")
    assert admits(env, _node("580.95.05", "13.0"))[0]              # no GPU: arch holds
    ok, message = admits({"NVIDIA_REQUIRE_CUDA": "cuda>=13.0,driver=>580"}, two)
    assert not ok and message.startswith("requirement error: invalid expression")


def test_check_syntax_reads_every_condition_the_runtime_might_read():
    check_syntax("cuda>=13.0,driver>=580.65.06 brand=tesla,driver>=535,driver<536")
    for bad in ("cuda>=13.0 driver>=abc", "cuda>=13.0 brand<tesla", "cuda>=13.0\tdriver>=1", "x"):
        with pytest.raises(InvalidRequirement):
            check_syntax(bad)


# --- every image against every host profile ------------------------------------------------------

def _drivers(k) -> list[tuple[str, str]]:
    """(driver, the CUDA version it reports) for every branch the matrix knows with its newest CUDA:
    the releases the matrix names in the branch, and its lowest and highest."""
    named = {r.driver for r in k.releases.values() if r.driver}
    named |= {floor for floor, _ in k.majors.values()}
    out = []
    for branch, b in sorted(k.branches.items()):
        if b.newest_cuda is None:
            continue
        versions = {f"{branch}.0.0", f"{branch}.999.99"}
        versions |= {v for v in named if parse_driver(v).branch == branch}
        out += [(v, b.newest_cuda) for v in sorted(versions, key=parse_driver)]
    return out


def _profiles(k, platform: str):
    """(compute capability, the brand the runtime reports, the GPU that stands for it)."""
    for cc in sorted(k.architectures, key=lambda c: tuple(int(p) for p in c.split("."))):
        datacenter_brand = "Tesla" if tuple(int(p) for p in cc.split(".")) < (8, 0) else "Unknown"
        for brand, datacenter in ((datacenter_brand, True), ("GeForce", False)):
            gpu = representative_gpu(k, cc, datacenter, platform)
            if gpu is not None:
                yield cc, brand, gpu


def _compat_folder(doc: dict) -> str | None:
    """Where the image keeps its cuda-compat libraries (an image that carries the package)."""
    if "forward_compat" not in doc.get("needs", {}):
        return None
    return f"/usr/local/cuda-{'.'.join(doc['stack']['cuda'].split('.')[:2])}/compat"


def _compat_used(doc: dict, folder: str, proc: str) -> bool:
    saved = imagecheck.compat_present
    imagecheck.compat_present = lambda cuda: folder
    try:
        return imagecheck.compat_dir_to_use(doc, proc) == folder
    finally:
        imagecheck.compat_present = saved


def test_the_runtime_starts_each_image_exactly_where_imagebuild_says_it_runs(k, specs):
    seen, disagree, compared = set(), [], 0
    drivers = _drivers(k)
    for spec in specs:
        key = (tuple(sorted(spec.stack.items())), spec.cuda_from)
        if spec.stack["cuda"] == "none" or key in seen:
            continue
        seen.add(key)
        env = image_requires(spec, k)
        for req in env.values():
            check_syntax(req)
        doc = {**spec.image_json, **image_needs(spec, k), "nvidia_require": env}
        for cc, brand, gpu in _profiles(k, spec.stack["platform"]):
            for driver, cuda in drivers:
                runtime, _ = admits(env, _node(driver, cuda, (cc, brand)))
                ours = check(k, Host(driver=driver, gpu=gpu.name), dict(spec.stack), image=True,
                             cuda_from=spec.cuda_from, warnings=False).ok
                compared += 1
                if runtime != ours:
                    disagree.append(f"{spec.id} on {gpu.name} ({cc}, {brand}) with {driver}: "
                                    f"runtime {'starts' if runtime else 'refuses'}, imagebuild says "
                                    f"{'runs' if ours else 'does not run'}")
                if gpu.datacenter:        # imagebuild-check reads no brand: data-center GPUs only
                    # as the entrypoint runs it: the cuda-compat folder first on LD_LIBRARY_PATH
                    # where forward compatibility is what runs the image (compat_dir_to_use)
                    proc = f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {driver}  Thu Jan  1 2026"
                    compat = _compat_folder(doc)
                    use = compat and _compat_used(doc, compat, proc)
                    code, line = imagecheck.judge(doc, driver, [(gpu.name, cc, driver)],
                                                  compat_dir=compat, ld_path=compat if use else "")
                    if (code == imagecheck.OK) != ours:
                        disagree.append(f"{spec.id} on {gpu.name} with {driver}: imagebuild-check "
                                        f"{code} ({line[:160]}), imagebuild says {'runs' if ours else 'not'}")
    assert compared > 10000
    assert not disagree, f"{len(disagree)} of {compared} disagree, e.g.:\n" + "\n".join(disagree[:12])
