"""`pytorch:`: the releases, the Python each supports, and their variants (one per CUDA build, or the
CPU build): the cuDNN and NCCL each wheel bundles, the CUDA it brings, the GPUs it is built for and
the platforms it is published for."""

from __future__ import annotations

from ...versions import NONE, VersionSyntaxError, major_minor, parse_version
from ..context import _Ctx
from ..matchers import (Matcher, any_of, arch_matcher, category_matcher, equal_to, none_matcher,
                        version_matcher)
from ..model import TorchRelease, Variant, WheelEvidence
from ..schema import DEFAULT_PLATFORM
from ...patterns import is_sha256_hex


def load(c: _Ctx, doc, sources, releases):
    """(variants, pytorch): (version, CUDA major.minor or none) -> Variant, version -> release."""
    pt = c.shape(doc["pytorch"], "pytorch")
    variants: dict[tuple[str, str], Variant] = {}
    pytorch: dict[str, dict] = {}
    for rel in c.seq(pt["releases"], "pytorch.releases", pt, "releases"):
        _release(c, rel, sources, releases, variants, pytorch)
    return variants, pytorch


def _release(c: _Ctx, rel, sources, releases, variants, pytorch):
    """One release: its Python rule, its variants, and the CUDA builds it has."""
    w = "pytorch.releases[]"
    c.shape(rel, "pytorch.releases[]", w)
    ver = c.version(rel, "version", w)
    if ver in pytorch:
        c.fail(f"pytorch.releases: {ver} is listed twice", rel, "version")
    py = c.spec(rel, "python", w)
    src = c.source(rel, sources, w)
    c.add_rule(f"pytorch-{ver}-python", [("pytorch", version_matcher("==" + ver))],
               [("python", version_matcher(py))], f"torch {ver} supports Python {py}",
               src, rel.line)
    cudas_verified, cudas_all = [], []
    w = f"pytorch {ver} variants[]"
    for v in c.seq(rel["variants"], w, rel, "variants"):
        cuda_m, verified = _variant(c, v, w, ver, sources, releases, variants)
        (cudas_verified if verified else cudas_all).append(cuda_m)
    wheels = _wheels(c, rel, ver, sources, variants) if "wheels" in rel else ()
    pytorch[ver] = TorchRelease(ver, py, src, wheels)
    # "built for CUDA 12.8, 12.6 (...), and for the CPU": the CPU build named in words, after
    cuda_v = [m for m in cudas_verified if m.text != NONE]
    cpu = " and for the CPU" if len(cuda_v) < len(cudas_verified) else ""
    builds_v = ", ".join(m.text for m in cuda_v) or "no verified build"
    also = (f" (builds for {', '.join(m.text for m in cudas_all)} are not confirmed)"
            if cudas_all else "")
    also += ("," if also and cpu else "") + cpu
    # with unverified builds, this rule holds only while unverified facts are not allowed: under
    # --allow-unverified the wider rule below takes its place (else it would still refuse them)
    c.add_rule(f"pytorch-{ver}-builds", [("pytorch", version_matcher("==" + ver))],
               [("cuda", any_of(cudas_verified or [Matcher("nothing", "never")]))],
               f"torch {ver} is built for CUDA {builds_v}{also}", src, rel.line,
               tag="verified-only" if cudas_all else None)
    if cudas_all:
        c.add_rule(f"pytorch-{ver}-builds-unverified", [("pytorch", version_matcher("==" + ver))],
                   [("cuda", any_of(cudas_verified + cudas_all))],
                   f"torch {ver} is built for CUDA "
                   + ", ".join(m.text for m in cuda_v + cudas_all)
                   + " (some builds unverified)" + cpu, src, rel.line, verified=False)


def _variant(c: _Ctx, v, w: str, ver: str, sources, releases, variants):
    """One variant of torch `ver`: validated, recorded, and its rules; (its CUDA matcher,
    verified)."""
    c.shape(v, "pytorch.releases[].variants[]", w)
    vsrc = c.source(v, sources, w)
    # the platforms may come from another page than the rest (a release post): that one is cited
    plat_src = c.source(v, sources, w, key="platforms_source", optional=True)
    if plat_src is not None and "platforms" not in v:
        c.fail(f"{w}: platforms_source names the source of platforms, which are not given", v,
               "platforms_source")
    nccl_src = c.source(v, sources, w, key="nccl_source", optional=True)
    if nccl_src is not None and "nccl" not in v:
        c.fail(f"{w}: nccl_source names the source of nccl, which is not given", v, "nccl_source")
    verified = c.flag(v, "verified", w, True)
    nccl_verified = c.flag(v, "nccl_verified", w, True)
    cuda_mm, cudnn, nccl = _variant_libraries(c, v, w, verified, nccl_verified, releases)
    arch = _variant_arch(c, v, w)
    key = (ver, cuda_mm)
    if key in variants:
        c.fail(f"{w}: torch {ver} has two {cuda_mm} variants", v)
    var = Variant(ver, cuda_mm, cudnn or NONE, nccl or NONE,
                  c.version(v, "cuda_runtime", w, True), arch,
                  c.flag(v, "default", w, False), verified, vsrc, v.line,
                  c.platform_list(v, "platforms", w) or (DEFAULT_PLATFORM,), nccl_verified,
                  nccl_src, plat_src)
    variants[key] = var
    cuda_m = none_matcher() if cuda_mm == NONE \
        else version_matcher(cuda_mm)
    when = [("pytorch", version_matcher("==" + ver)), ("cuda", cuda_m)]
    req = []
    if cudnn:
        req.append(("cudnn", equal_to(cudnn)))
    nccl_req = _nccl_requirement(nccl)
    if nccl_req is not None and nccl_verified:
        req.append(nccl_req)
    elif nccl_req is not None:
        # a confirmed build whose NCCL is read only in third-party copies: that floor is an
        # unverified fact of its own, applied under --allow-unverified only
        c.add_rule(f"pytorch-{ver}-{var.tag}-nccl", when, [nccl_req],
                   f"torch {ver}+{var.tag} bundles nccl {nccl_req[1].text} (read only in "
                   "third-party copies)", var.nccl_cited, v.line, False)
    _wheel_rules(c, v, w, var, when, releases, plat_src)
    if arch:
        req.append(("gpu.cc", arch_matcher(list(arch))))
    if req:
        c.add_rule(f"pytorch-{ver}-{var.tag}", when, req,
                   f"torch {ver}+{var.tag} bundles "
                   + ", ".join(f"{k} {m.text}" for k, m in req if k != "gpu.cc")
                   + (f" and is built for {req[-1][1].text}" if arch else ""),
                   vsrc, v.line, verified)
    return cuda_m, verified


def _nccl_requirement(nccl: str | None):
    """What a variant's NCCL asks of the stack: none for the CPU build; else the wheel's NCCL or a
    newer NCCL 2 installed over it (users upgrade NCCL for its fixes; the image installs it
    explicitly and preloads it; the bundled one ranks first, Problem orders it so). None: not
    known."""
    if nccl == NONE:
        return ("nccl", none_matcher(NONE))
    if not nccl:
        return None
    return ("nccl", Matcher(f">= {nccl}", "same_major_at_least", nccl))


def _variant_libraries(c: _Ctx, v, w: str, verified: bool, nccl_verified: bool, releases) -> tuple:
    """(CUDA major.minor, cuDNN, NCCL) of a variant: NONE each for the CPU build; a verified CUDA
    build names its cuDNN, and its NCCL unless `nccl_verified: false` says that NCCL is not
    confirmed (then a value given is one read only in third-party copies); an unverified build may
    leave both out (None)."""
    if c.flag(v, "cpu", w, False):
        if "cuda" in v:
            c.fail(f"{w}: a CPU variant has no cuda", v, "cuda")
        if "nccl_verified" in v:
            c.fail(f"{w}: a CPU variant bundles no NCCL, so nccl_verified does not apply", v,
                   "nccl_verified")
        return NONE, NONE, NONE
    cuda_mm = c.version(v, "cuda", w)
    if cuda_mm.count(".") != 1:
        c.fail(f"{w}: cuda is a major.minor such as 12.4", v, "cuda")
    if not any(major_minor(r) == cuda_mm for r in releases):
        c.fail(f"{w}: CUDA {cuda_mm} has no release under cuda.releases", v, "cuda")
    cudnn = c.version(v, "cudnn", w, optional=not verified)
    nccl = c.version(v, "nccl", w, optional=True)
    if verified and nccl_verified and nccl is None:
        c.fail(f"{w}: a verified variant names its nccl, or says nccl_verified: false where no "
               "first-party source gives it", v)
    return cuda_mm, cudnn, nccl


def _variant_arch(c: _Ctx, v, w: str) -> tuple[str, ...] | None:
    """The variant's GPU architectures (8.0, 9.0+PTX, ...), None when not given."""
    if "arch" not in v:
        return None
    arch_node = c.seq(v["arch"], f"{w}.arch", v, "arch")
    for entry in arch_node:
        try:
            parse_version(str(entry).removesuffix("+PTX"))
        except VersionSyntaxError as exc:
            c.fail(f"{w}.arch: {exc}", v, "arch")
    return tuple(str(e) for e in arch_node)


def _wheel_rules(c: _Ctx, v, w: str, var: Variant, when, releases, plat_src) -> None:
    """What the variant's wheels bring and where they run: the CUDA release a cu13-era build pins
    (`cuda-toolkit==X.Y.Z`), and the platforms its wheels are published for."""
    ver, tag = var.pytorch, var.tag
    runtime = var.cuda_runtime
    if runtime in releases and major_minor(runtime) == var.cuda:
        c.add_rule(f"pytorch-{ver}-{tag}-cuda", when,
                   [("cuda", equal_to(runtime))],
                   f"torch {ver}+{tag} wheels bring CUDA {runtime} (cuda-toolkit=={runtime})",
                   var.source, v.line, var.verified, tag="wheel-cuda")
    plats = var.platforms
    c.add_rule(f"pytorch-{ver}-{tag}-platform", when, [("platform", category_matcher(plats))],
               f"torch {ver}+{tag} "
               + (f"wheels are published for {', '.join(plats)}" if "platforms" in v else
                  f"wheels are known for {DEFAULT_PLATFORM} only (no other platform's build is recorded)"),
               plat_src or var.source, v.line, var.verified)


def _wheels(c: _Ctx, rel, ver: str, sources, variants) -> tuple[WheelEvidence, ...]:
    """The release's wheels on the index as `knowledge sync` read them, each checked against itself
    (a torch `ver` wheel for its platform, a sha256, a commit) and against the variants: the build
    a wheel is (its torch/version.py's CUDA, or none) must be a variant published for that
    platform, and the x86_64 wheel (what a plain `pip install torch` gets) the default variant."""
    import re

    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import Version

    w = f"pytorch {ver} wheels[]"
    out: list[WheelEvidence] = []
    for node in c.seq(rel["wheels"], w, rel, "wheels"):
        c.shape(node, "pytorch.releases[].wheels[]", w)
        plat = c.known_platform(c.text(node, "platform", w), node, "platform", w)
        name = c.text(node, "file", w)
        try:
            project, wver, _build, tags = parse_wheel_filename(name)
        except InvalidWheelFilename as exc:
            c.fail(f"{w}: file is no wheel name: {exc}", node, "file")
        if project != "torch" or wver != Version(ver) or wver.local:
            c.fail(f"{w}: {name} is no wheel of torch {ver} as the index serves it", node, "file")
        if not any(t.platform.endswith("_" + plat) for t in tags):
            c.fail(f"{w}: {name} is no {plat} wheel", node, "file")
        sha = c.text(node, "sha256", w)
        if not is_sha256_hex(sha):
            c.fail(f"{w}: sha256 is 64 lowercase hex digits", node, "sha256")
        commit = c.text(node, "commit", w)
        if not re.fullmatch(r"[0-9a-f]{40}", commit):
            c.fail(f"{w}: commit is a 40-hex-digit git commit", node, "commit")
        cuda = c.text(node, "cuda", w)
        if cuda != NONE:
            cuda = c.version(node, "cuda", w)
            if cuda.count(".") != 1:
                c.fail(f"{w}: cuda is the major.minor torch/version.py names, or none", node, "cuda")
        size = node.get("size")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
            c.fail(f"{w}: size is a positive number of bytes", node, "size")
        if any(e.platform == plat for e in out):
            c.fail(f"{w}: two {plat} wheels; one per platform is recorded", node, "platform")
        arch = _variant_arch(c, node, w)
        if arch is not None and cuda == NONE:
            c.fail(f"{w}: a CPU build carries no GPU architectures", node, "arch")
        ev = WheelEvidence(ver, plat, name, sha, cuda, commit, c.source(node, sources, w), size,
                           node.line, arch)
        _wheel_matches(c, node, w, ev, variants)
        out.append(ev)
    return tuple(out)


def _wheel_arch_rule(c: _Ctx, node, w: str, ev: WheelEvidence, var: Variant) -> None:
    """What a wheel's own architecture list says: on the default platform it must be the variant's
    (which the variant's rule enforces); on another platform the build can carry other ones (the
    aarch64 wheels of 2.11 and later: 8.0, 9.0, 10.0, 11.0, 12.0, no 7.5), so it is a rule of its own
    for that platform."""
    if ev.arch is None:
        return
    if ev.platform == DEFAULT_PLATFORM:
        if var.arch is not None and sorted(var.arch) != sorted(ev.arch):
            c.fail(f"{w}: the index's {ev.platform} wheel of torch {ev.release}+{var.tag} carries "
                   f"{', '.join(ev.arch)}, but the variant says {', '.join(var.arch)}", node, "arch")
        if var.arch is not None:
            return
    when = [("pytorch", version_matcher("==" + ev.release)),
            ("cuda", version_matcher(ev.cuda)), ("platform", category_matcher([ev.platform]))]
    c.add_rule(f"pytorch-{ev.release}-{var.tag}-{ev.platform}-arch", when,
               [("gpu.cc", arch_matcher(list(ev.arch)))],
               f"torch {ev.release}+{var.tag} wheels for {ev.platform} are built for "
               f"{arch_matcher(list(ev.arch)).text} (the index's {ev.platform} wheel)", ev.source,
               ev.line)


def _wheel_matches(c: _Ctx, node, w: str, ev: WheelEvidence, variants) -> None:
    """A wheel record contradicts the variants: refused at its line."""
    build = "the CPU build" if ev.cuda == NONE else f"the CUDA {ev.cuda} build"
    var = variants.get((ev.release, ev.cuda))
    if var is None:
        c.fail(f"{w}: the index's {ev.platform} wheel of torch {ev.release} is {build}, which no "
               "variant of the release names", node, "cuda")
    if ev.platform not in var.platforms:
        c.fail(f"{w}: the index's {ev.platform} wheel of torch {ev.release} is {build}, but that "
               f"variant lists only {', '.join(var.platforms)} under platforms", node, "platform")
    if ev.platform == DEFAULT_PLATFORM:
        default = next((v for (r, _), v in variants.items() if r == ev.release and v.default), None)
        if default is not None and default.cuda != ev.cuda:
            c.fail(f"{w}: the index's {ev.platform} wheel (what `pip install torch=={ev.release}` "
                   f"gets) is {build}, but the default variant is {default.tag}", node, "cuda")
    _wheel_arch_rule(c, node, w, ev, var)
