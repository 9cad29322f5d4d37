"""Gate 3 of the knowledge's grammar (gates 1 and 2, the bytes and every recipe-facing string, are
in grammar.py): the `tools:`, `images:` and the recipe-facing parts of `rdma:` checked in full:
every key, its type, its grammar, and the cross-references: an image family naming an unknown OS or
RDMA id, a tool naming an unknown source, an OS an image family builds on without the base image,
glibc or NVIDIA repository its recipes and wheel locks read, a CUDA family without the tools its
recipes download, a UCX or Open MPI release built from source without its url and sha256. What a
command would otherwise find only when it renders is found by `imagebuild knowledge validate`.
The keys of image families and tools are declared here (FAMILY_KEYS, TOOLS, BUILD_KEYS), and
knowledge/shapes.py gives their values' kinds for the JSON Schema."""

from __future__ import annotations

import re
from typing import Iterable
from urllib.parse import urlsplit

from ..components import SWITCHES, TARBALL_TOOLS, for_build
from ..errors import KnowledgeError
from ..packagers import PACKAGERS
from .grammar import _item_pos, _kind, _show, _url, check, check_mapping
from .schema import BUILD_SWITCHES, FLAVORS

VARIANT_MODES = ("all", "default", "default-and-newest")
FAMILY_KEYS = ("family", "description", "flavors", "pytorch", "variants", "os", "cuda", "nccl",
               "ucx", "openmpi", "python", "wheels", "rdma", "cuda_from", "sources", "build",
               "platforms")
# Which tarball of UCX and Open MPI a family's recipes compile: the release asset, or the git tag
# archive with its submodules (`git_archive:` in the ucx/openmpi release; autogen first).
SOURCE_FORMS = ("release", "git")
# BUILD_SWITCHES (schema.py): the build choices a family makes, with their defaults
BUILD_KEYS = tuple(BUILD_SWITCHES) + ("cuda_arch",)
# Where a family's CUDA comes from: NVIDIA's package repository for the OS (the default: the
# recipes install pinned CUDA packages), or the wheels torch's closure brings (nvidia-cuda-runtime,
# cuDNN, NCCL, cuBLAS, ... as torch pins them; no NVIDIA repository, no CUDA package).
CUDA_FROM = ("repository", "wheels")
# tool -> (required keys, optional keys, {key: grammar})
_TARBALL = (("version", "url", "sha256", "source"), ("note", "size"),
            {"version": "version", "url": _url("version"), "sha256": "sha256"})
_KEY = (("fingerprint", "url", "source"), ("note",),
        {"fingerprint": "fingerprint", "url": _url("repo")})
# the tarballs are the compiled components pinned by `tools:` (components.py's rows)
TOOLS = {
    **{name: _TARBALL for name in TARBALL_TOOLS},
    "cuda-repo-key": _KEY,
    "cuda-repo-key-dnf": _KEY,
    "pytorch-index": (("url", "source"), ("note",), {"url": _url("tag")}),
}


class _Checker:
    def __init__(self, ctx):
        self.ctx = ctx
        self.path = ctx.path

    def fail(self, msg: str, node=None, key=None):
        self.ctx.fail(msg, node, key)

    def fail_item(self, msg: str, lst, i: int):
        line, col = _item_pos(lst, i)
        raise KnowledgeError(msg, file=self.path, line=line, column=col)

    def mapping(self, node, where: str, required: Iterable[str], optional: Iterable[str],
                parent=None, key=None):
        return check_mapping(self.fail, node, where, required, optional, parent, key)

    def string(self, node, key: str, where: str, grammar="text", optional=True):
        """node[key] as a string of `grammar` (None when absent and optional)."""
        if key not in node:
            if optional:
                return None
            self.fail(f"{where}: missing key {key!r}", node)
        value = node[key]
        if not isinstance(value, str):
            hint = (" (quote it: YAML reads 2.10 as the number 2.1)"
                    if isinstance(value, (int, float)) and not isinstance(value, bool) else "")
            self.fail(f"{where}.{key} must be a string, not {_kind(value)}{hint}", node, key)
        kind, ph = grammar if isinstance(grammar, tuple) else (grammar, ())
        why = check(kind, value, ph)
        if why:
            self.fail(f"{where}.{key} {_show(value)} {why}", node, key)
        return value

    def strings(self, node, key: str, where: str, grammar, allow_list=True):
        """node[key] as a list of `grammar` strings (a single string is a list of one)."""
        value = node[key]
        if isinstance(value, str) or not allow_list:
            return [self.string(node, key, where, grammar, optional=False)]
        if not isinstance(value, list):
            self.fail(f"{where}.{key} must be a string or a list of strings, not {_kind(value)}",
                      node, key)
        if not value:
            self.fail(f"{where}.{key} must not be empty", node, key)
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                self.fail_item(f"{where}.{key}[{i}] must be a string, not {_kind(item)}", value, i)
            why = check(grammar, item)
            if why:
                self.fail_item(f"{where}.{key}[{i}] {_show(item)} {why}", value, i)
            if item in out:
                self.fail_item(f"{where}.{key}: {item!r} is listed twice", value, i)
            out.append(item)
        return out

    def source(self, node, where: str, sources: set[str], key="source", optional=False):
        if key not in node and optional:
            return
        sid = self.string(node, key, where, "text", optional=False)
        if sid not in sources and check("url", sid) is not None:
            self.fail(f"{where}: unknown source {sid!r} (declare it under sources: or give an https "
                      "URL)", node, key)


def _ids(section, key="id") -> list[str]:
    if isinstance(section, list):
        return [str(e[key]) for e in section if isinstance(e, dict) and key in e]
    if isinstance(section, dict):
        return [str(k) for k in section]
    return []


def validate(doc, ctx) -> None:
    """Gate 3, for knowledge.build: `ctx` is its _Ctx (fail(msg, node, key) raises KnowledgeError
    at the node's position; `path` is the file)."""
    c = _Checker(ctx)
    sources = {str(s) for s in doc.get("sources", {})} if isinstance(doc.get("sources"), dict) \
        else set()
    if "tools" in doc:
        _tools(c, doc, sources)
    if "rdma" in doc:
        _rdma(c, doc, sources)
    _tarballs(c, doc)
    _cache_names(c, doc)
    if "images" in doc:
        _images(c, doc, set(_ids(doc.get("os"))), set(_ids(doc.get("rdma"))))
        _family_sources(c, doc)


def release_file(name: str, version: str, url: str) -> str:
    """The source cache's file name of a release tarball: `<name>-<version>` and the extension of
    its URL (render/sources.py files it so; the loader checks no two tarballs share one)."""
    path = urlsplit(url.replace("{version}", version)).path
    ext = ".tar.bz2" if path.endswith(".tar.bz2") else ".tar.gz" if path.endswith((".tar.gz", ".tgz")) else ".tar"
    return f"{name}-{version}{ext}"


def _release_file(name: str, entry) -> str | None:
    if not isinstance(entry, dict) or not entry.get("url") or "version" not in entry:
        return None
    return release_file(name, str(entry["version"]), str(entry["url"]))


def _cache_names(c: _Checker, doc):
    """Every tarball has its own file name in the source cache, which the recipes and the cache
    check by name against one sha256: two that share a name (a git archive named like another
    release, two archives under one name) would have one dropped and one checked against the
    other's sha256. Refused where the second is declared."""
    seen: dict[str, str] = {}

    def claim(name: str | None, what: str, node, key):
        if not name:
            return
        if name in seen and seen[name] != what:
            c.fail(f"{what}: the source cache file {name!r} is also {seen[name]}'s (each tarball "
                   "needs its own file name)", node, key)
        seen.setdefault(name, what)

    tools = doc.get("tools") if isinstance(doc.get("tools"), dict) else {}
    for name in TARBALL_TOOLS:
        entry = tools.get(name)
        claim(_release_file(name, entry), f"tools.{name}", tools, name)
    for comp in ("ucx", "openmpi"):
        section = doc.get(comp)
        releases = section.get("releases") if isinstance(section, dict) else None
        for i, r in enumerate(releases if isinstance(releases, list) else []):
            if not isinstance(r, dict):
                continue
            what = f"{comp}.releases[{i}] ({r.get('version')})"
            if r.get("install", "source") == "source":
                claim(_release_file(comp, r), what, r, "url")
            ga = r.get("git_archive")
            if isinstance(ga, dict) and isinstance(ga.get("file"), str):
                claim(ga["file"], f"{what} git_archive", ga, "file")


def _family_sources(c: _Checker, doc):
    """What a family asks its recipe to compile exists in the matrix: `sources: git` needs the
    git archive of the UCX and Open MPI releases it pins, and `build.cuda_arch` names compute
    capabilities the `architectures:` section knows."""
    archs = {str(a.get("cc")) for a in doc.get("architectures") or [] if isinstance(a, dict)}
    releases = {comp: {str(r.get("version")): r for r in (doc.get(comp) or {}).get("releases") or []
                       if isinstance(r, dict)} for comp in ("ucx", "openmpi")}
    for i, fam in enumerate(doc.get("images") or []):
        where = f"images[{i}] ({fam.get('family')})"
        if fam.get("sources") == "git":
            for comp in ("ucx", "openmpi"):
                entry = releases[comp].get(str(fam.get(comp, "")))
                if entry is not None and entry.get("install", "source") == "source" \
                        and not entry.get("git_archive"):
                    c.fail(f"{where}: sources: git compiles {comp} {entry.get('version')} from its git "
                           f"tag archive, which matrix.yaml's {comp} release does not record "
                           "(git_archive:)", fam, "sources")
        build = fam.get("build") if isinstance(fam.get("build"), dict) else {}
        for j, arch in enumerate(build.get("cuda_arch") or []):
            if str(arch) not in archs:
                _fail_in(c, build, "cuda_arch", j, f"{where}.build.cuda_arch: {arch} is not an "
                         f"architecture the matrix knows (architectures: {', '.join(sorted(archs, key=float))})")


def _tarballs(c: _Checker, doc):
    """A UCX or Open MPI release built from source is downloaded by the recipes: it needs its url
    and sha256 (nothing is downloaded unverified), whether or not an image takes it today."""
    for comp in ("ucx", "openmpi"):
        section = doc.get(comp)
        releases = section.get("releases") if isinstance(section, dict) else None
        for i, r in enumerate(releases if isinstance(releases, list) else []):
            if isinstance(r, dict) and r.get("install", "source") == "source":
                for key in ("url", "sha256"):
                    if key not in r:
                        c.fail(f"{comp}.releases[{i}] ({r.get('version')}): built from source, so "
                               f"it needs url and sha256 (nothing is downloaded unverified); "
                               f"{key} is missing", r)


def _tools(c: _Checker, doc, sources):
    tools = doc["tools"]
    c.mapping(tools, "tools", (), TOOLS, doc, "tools")
    for name, entry in tools.items():
        required, optional, grammars = TOOLS[name]
        where = f"tools.{name}"
        c.mapping(entry, where, required, optional, tools, name)
        for key in required:
            if key == "source":
                c.source(entry, where, sources)
            else:
                c.string(entry, key, where, grammars[key], optional=False)
        _note(c, entry, where)


def _note(c: _Checker, node, where: str):
    if "note" in node and not isinstance(node["note"], str):
        c.fail(f"{where}.note must be a string, not {_kind(node['note'])}", node, "note")


def _rdma(c: _Checker, doc, sources):
    """What knowledge.build leaves to the recipes: the grammar of each field (gate 2 checked the
    strings; here their types), the key's source, and non-empty package lists."""
    section = doc["rdma"]
    if not isinstance(section, list):
        return  # knowledge.build reports it
    for i, r in enumerate(section):
        if not isinstance(r, dict):
            continue
        where = f"rdma[{i}]"
        c.string(r, "id", where, "id", optional=False)
        c.string(r, "name", where, "text", optional=False)
        c.string(r, "version", where, "version", optional=False)
        c.string(r, "released", where, "month")
        c.string(r, "repo", where, _url("version", "os"), optional=False)
        _note(c, r, where)
        os_map = r.get("os")
        if isinstance(os_map, dict):
            for os_id in os_map:
                c.string(os_map, os_id, f"{where}.os", "word", optional=False)
        key = r.get("key")
        if isinstance(key, dict):
            c.string(key, "url", f"{where}.key", _url(), optional=False)
            c.string(key, "fingerprint", f"{where}.key", "fingerprint")
            c.string(key, "long_id", f"{where}.key", "keyid")
            c.source(key, f"{where}.key", sources, optional=True)
            _note(c, key, f"{where}.key")
        pk = r.get("packages")
        if isinstance(pk, dict):
            for pm, lists in pk.items():
                if isinstance(lists, dict):
                    for flavor in lists:
                        c.strings(lists, flavor, f"{where}.packages.{pm}", "package")


def _images(c: _Checker, doc, os_ids: set[str], rdma_ids: set[str]):
    fams = doc["images"]
    if not isinstance(fams, list):
        c.fail(f"images: expected a list of families, not {_kind(fams)}", doc, "images")
    for i, fam in enumerate(fams):
        where = f"images[{i}]"
        if not isinstance(fam, dict):
            c.fail_item(f"{where}: each family is a mapping, not {_kind(fam)}", fams, i)
        c.mapping(fam, where, ("family", "flavors", "os"), FAMILY_KEYS)
        name = c.string(fam, "family", where, "id", optional=False)
        where = f"images[{i}] ({name})"
        c.string(fam, "description", where, "text")
        flavors = c.strings(fam, "flavors", where, "id")
        for j, fl in enumerate(flavors):
            if fl not in FLAVORS:
                _fail_in(c, fam, "flavors", j, f"{where}.flavors: {fl!r} is not one of "
                         f"{', '.join(FLAVORS)}")
        if "devel" in flavors and "runtime" not in flavors:
            c.fail(f"{where}.flavors: a devel image is built FROM the runtime image of its stack: "
                   "list runtime in flavors too", fam, "flavors")
        _family_places(c, doc, fam, where, os_ids)
        pytorch = c.string(fam, "pytorch", where, "spec")
        if "variants" in fam:
            mode = c.string(fam, "variants", where, "id")
            if mode not in VARIANT_MODES:
                c.fail(f"{where}.variants must be one of {', '.join(VARIANT_MODES)}", fam,
                       "variants")
        if "cuda" in fam:
            c.strings(fam, "cuda", where, "version|none")
        if "nccl" in fam:
            if pytorch is not None and pytorch != "none":
                c.fail(f"{where}.nccl: only a family without PyTorch (pytorch: none) names NCCL "
                       "versions (PyTorch's build decides its NCCL)", fam, "nccl")
            c.strings(fam, "nccl", where, "version")
        for comp in ("ucx", "openmpi", "python"):
            c.string(fam, comp, where, "version")
        wheels = c.string(fam, "wheels", where, "id")
        if wheels is not None and wheels != "host":
            c.fail(f"{where}.wheels must be 'host' (or left out)", fam, "wheels")
        if "cpu" in flavors and wheels != "host":
            c.fail(f"{where}: a cpu flavor installs PyTorch from host wheels: add wheels: host",
                   fam, "flavors")
        rdma = c.string(fam, "rdma", where, "id")
        if rdma is not None and rdma != "rdma-core" and rdma not in rdma_ids:
            c.fail(f"{where}.rdma: unknown rdma {rdma!r} (rdma-core, or an id of the rdma: "
                   f"section: {', '.join(sorted(rdma_ids)) or 'none'})", fam, "rdma")
        cuda_from = c.string(fam, "cuda_from", where, "id")
        if cuda_from is not None and cuda_from not in CUDA_FROM:
            c.fail(f"{where}.cuda_from must be one of {', '.join(CUDA_FROM)}", fam, "cuda_from")
        form = c.string(fam, "sources", where, "id")
        if form is not None and form not in SOURCE_FORMS:
            c.fail(f"{where}.sources must be one of {', '.join(SOURCE_FORMS)}", fam, "sources")
        if "build" in fam:
            _family_build(c, fam, where)
        if cuda_from == "wheels":
            # CUDA is NVIDIA's wheels: torch's closure, or the cuda-toolkit wheels UCX, Open MPI
            # and nccl-tests are compiled against (see images.expand)
            if rdma not in (None, "rdma-core"):
                c.fail(f"{where}.cuda_from: wheels images take RDMA user space from the OS's "
                       "rdma-core", fam, "rdma")
            compiled = _wheels_comms(c, doc, fam, where, pytorch)
            # a devel image adds the cuda-toolkit wheels (nvcc, headers) to its runtime image:
            # only a family that compiles against them (UCX and Open MPI, or imagebuild's NCCL
            # benchmark) has them in its wheel lock
            if any(f != "runtime" and not (f == "devel" and compiled) for f in flavors):
                c.fail(f"{where}.cuda_from: wheels makes runtime images only, and devel ones where "
                       "something is compiled against the CUDA toolkit's wheels (a cpu "
                       "flavor, or a devel one beside torch's closure, needs CUDA from the "
                       "repository, or none)", fam, "flavors")
        _what_images_need(c, doc, fam, where, flavors, pytorch, cuda_from or "repository")


def _family_places(c: _Checker, doc, fam, where: str, os_ids: set[str]):
    """A family's `os` and `platforms` name OSes and platforms of the matrix."""
    for j, os_id in enumerate(c.strings(fam, "os", where, "id")):
        if os_id not in os_ids:
            _fail_in(c, fam, "os", j, f"{where}.os: unknown os {os_id!r} (known: "
                     f"{', '.join(sorted(os_ids)) or 'none'})")
    if "platforms" in fam:
        known = set(_ids(doc.get("platforms")))
        for j, plat in enumerate(c.strings(fam, "platforms", where, "word")):
            if plat not in known:
                _fail_in(c, fam, "platforms", j, f"{where}.platforms: unknown platform "
                         f"{plat!r} (known: {', '.join(sorted(known)) or 'none'})")


def _family_build(c: _Checker, fam, where: str):
    """A family's `build:` choices: known keys, switches true or false, compute capabilities."""
    b = c.mapping(fam["build"], f"{where}.build", (), BUILD_KEYS, fam, "build")
    for key in BUILD_SWITCHES:
        if key in b and not isinstance(b[key], bool):
            c.fail(f"{where}.build.{key} must be true or false, not {_kind(b[key])}", b, key)
    if "cuda_arch" in b:
        for j, arch in enumerate(c.strings(b, "cuda_arch", f"{where}.build", "version")):
            if not re.fullmatch(r"[1-9][0-9]?\.[0-9]", arch):
                _fail_in(c, b, "cuda_arch", j, f"{where}.build.cuda_arch: {arch!r} is not "
                         "a compute capability (8.0, 9.0, 10.0, ...)")


def _wheels_comms(c: _Checker, doc, fam, where: str, pytorch) -> bool:
    """cuda_from: wheels, as images.expand renders it: UCX and Open MPI pinned to releases of
    their sections, both compiled from source against the cuda-toolkit wheels, or both the OS's
    packages: beside torch's closure, or without PyTorch in a communication image built from the
    registries alone (NCCL named; imagebuild's NCCL benchmark is compiled against the
    cuda-toolkit wheels' headers). True when the family's lock has the cuda-toolkit wheels
    (everything but torch's closure)."""
    installs = set()
    for comp in ("ucx", "openmpi"):
        section = doc.get(comp) if isinstance(doc.get(comp), dict) else {}
        releases = section.get("releases") if isinstance(section.get("releases"), list) else []
        pinned = fam.get(comp)
        entry = next((r for r in releases if isinstance(r, dict) and pinned is not None
                      and str(r.get("version")) == str(pinned)), None)
        if entry is None:
            c.fail(f"{where}.cuda_from: wheels needs {comp} pinned to a release of matrix.yaml's "
                   f"{comp} section" + (f" ({pinned!r} is none)" if pinned is not None else ""),
                   fam, comp if comp in fam else None)
        installs.add(str(entry.get("install") or "source"))
    if len(installs) != 1:
        c.fail(f"{where}.cuda_from: wheels builds UCX and Open MPI both from source or takes both "
               "from the OS", fam, "cuda_from")
    no_torch = str(pytorch if pytorch is not None else "none") == "none"
    if installs == {"os"} and no_torch and not fam.get("nccl"):
        c.fail(f"{where}.cuda_from: wheels without PyTorch, with the OS's UCX and Open MPI, is a "
               "communication image built from the registries: name its NCCL (nccl:)", fam, "cuda_from")
    return installs == {"source"} or no_torch


def _what_images_need(c: _Checker, doc, fam, where: str, flavors: list[str], pytorch,
                      cuda_from: str = "repository"):
    """What the recipes of a family will read, checked now rather than when they are rendered:
    each OS's base image and glibc (the wheel lock's platform), and for CUDA images (every flavor
    but cpu) whose CUDA comes from NVIDIA's repository, the OS's NVIDIA repository and packager,
    and the tools the recipes download (CUDA from torch's wheels needs none of them)."""
    cuda_images = any(f != "cpu" for f in flavors)
    cudas = fam.get("cuda")
    if cuda_images and (cudas == "none" or (isinstance(cudas, list) and "none" in cudas)):
        c.fail(f"{where}: runtime and devel images are CUDA images: cuda none is for the cpu "
               "flavor", fam, "cuda")
    oses = {str(o.get("id")): o for o in doc.get("os", []) if isinstance(o, dict)} \
        if isinstance(doc.get("os"), list) else {}
    tools = doc.get("tools") if isinstance(doc.get("tools"), dict) else {}
    names = fam["os"] if isinstance(fam["os"], list) else [fam["os"]]
    for os_id in names:
        entry = oses.get(os_id)
        if entry is None:
            continue
        needs = ["base", "glibc"] + (["nvidia_repo"] if cuda_images and cuda_from == "repository"
                                     else [])
        for key in needs:
            if key not in entry:
                c.fail(f"os {os_id}: {where} builds images on it, so it needs {key}", entry)
        if not re.fullmatch(r"2\.[0-9]+", str(entry["glibc"])):
            c.fail(f"os {os_id}: glibc {str(entry['glibc'])!r} must be 2.N (the wheel locks' "
                   "manylinux platform)", entry, "glibc")
        if cuda_images and cuda_from == "repository":
            family = str(entry.get("family"))
            if family not in PACKAGERS:
                c.fail(f"os {os_id}: {where} builds CUDA images on it, whose recipes are written "
                       f"for the families {', '.join(sorted(PACKAGERS))}, not {family!r}",
                       entry, "family")
            build = fam.get("build") if isinstance(fam.get("build"), dict) else {}
            compiled = [t.name for t in for_build({s: build.get(s) is True for s in SWITCHES})
                        if t.pinned_by == "tools"]
            for tool in (*compiled, PACKAGERS[family]["key"]):
                if tool not in tools:
                    c.fail(f"{where}: its CUDA images on {os_id} download and check "
                           f"tools.{tool}, which is missing", fam)
    if pytorch not in (None, "none") and cuda_images and fam.get("variants", "all") != "default" \
            and "pytorch-index" not in tools:
        c.fail(f"{where}: PyTorch variants other than PyPI's default come from "
               "tools.pytorch-index, which is missing", fam)


def _fail_in(c: _Checker, node, key: str, i: int, msg: str):
    value = node[key]
    if isinstance(value, list):
        c.fail_item(msg, value, i)
    c.fail(msg, node, key)
