"""`os:`: the operating systems images are built on, in the order of preference: family, Python
versions, kernel, glibc, the CUDA NVIDIA's repository carries for each, base image and platforms.
(Named oses.py, not os.py, so as not to read as the standard library's module.)"""

from __future__ import annotations

from ...versions import NONE, VersionSyntaxError, parse_version
from ..context import _Ctx
from ..matchers import Matcher, any_of, category_matcher, version_matcher
from ..schema import DEFAULT_PLATFORM


def load(c: _Ctx, doc, sources) -> dict[str, dict]:
    oses: dict[str, dict] = {}
    for o in c.seq(doc["os"], "os", doc, "os"):
        w = "os[]"
        c.mapping(o, w, required=("id", "name", "family", "python", "source"),
                  optional=("kernel", "glibc", "cuda", "nvidia_repo", "base", "platforms", "note"))
        oid = c.text(o, "id", w)
        if oid in oses:
            c.fail(f"os: {oid} is listed twice", o, "id")
        pys = c.seq(o["python"], f"{w}.python", o, "python")
        for p in pys:
            try:
                parse_version(str(p))
            except VersionSyntaxError as exc:
                c.fail(f"{w}.python: {exc}", o, "python")
        src = c.source(o, sources, w)
        cuda_range = c.spec(o, "cuda", w, True)
        oses[oid] = {"id": oid, "name": c.text(o, "name", w), "family": c.text(o, "family", w),
                     "python": [str(p) for p in pys], "kernel": c.version(o, "kernel", w, True),
                     "glibc": c.version(o, "glibc", w, True),
                     "cuda": cuda_range, "nvidia_repo": c.text(o, "nvidia_repo", w, True),
                     "base": c.text(o, "base", w, True),
                     "platforms": c.platform_list(o, "platforms", w) or (DEFAULT_PLATFORM,),
                     "source": src, "line": o.line}
        is_os = category_matcher([oid])
        c.add_rule(f"os-{oid}", [("os", is_os)],
                   [("python", category_matcher(str(p) for p in pys)),
                    ("platform", category_matcher(oses[oid]["platforms"]))],
                   f"{o['name']} offers Python {', '.join(str(p) for p in pys)} on "
                   f"{', '.join(oses[oid]['platforms'])}", src, o.line)
        # CUDA from NVIDIA's repository for this OS: a stack without PyTorch takes CUDA from there.
        # A PyTorch stack takes CUDA from the wheels torch pins, so the repository's range binds it
        # only when the caller asks for repository CUDA (the `repo-cuda` tag: image expansion,
        # whose recipes install CUDA packages from the repository).
        cuda_alts = [Matcher("none", lambda x: x == NONE)]
        if cuda_range:
            cuda_alts.append(version_matcher(cuda_range))
        repo_text = (f"NVIDIA's CUDA repository for {o['name']} carries CUDA "
                     + (cuda_range or "none (no repository is confirmed)"))
        c.add_rule(f"os-{oid}-cuda-repo",
                   [("os", is_os), ("pytorch", Matcher("none", lambda x: x == NONE))],
                   [("cuda", any_of(cuda_alts))],
                   repo_text + "; without PyTorch, CUDA comes from there",
                   src, o.line, tag="toolkit-repo")
        c.add_rule(f"os-{oid}-cuda-repo-torch", [("os", is_os)], [("cuda", any_of(cuda_alts))],
                   repo_text, src, o.line, tag="repo-cuda")
    return oses
