"""Every mapping matrix.yaml may hold, declared once: its required and optional keys and what each
key's value is. The loader checks each mapping against its declaration (``_Ctx.shape``: one
positioned line for an unknown or missing key), and ``imagebuild knowledge schema`` writes the JSON
Schema of matrix.yaml from the same declarations, so an editor with a YAML language server
completes and checks keys as a person types, and a standard validator refuses an unknown key.

A value is one of:

- a name of SHAPES (a nested mapping), or ``LIST_OF + name`` (a list of such mappings);
- a leaf kind of LEAVES: what the loader's own checks then hold it to (its grammar, its range,
  its cross-references) is finer than JSON Schema says, and stays in the loader.

A few mappings have keys that are data, not vocabulary (source ids, the OS ids of an RDMA
repository, the components of a constraint): their declaration names the value every key takes
(``any_key``) and, where the set is fixed, the keys themselves (``keys_from``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .. import labels as L
from .schema import COMPONENTS, TOP

LIST_OF = "list of "

# leaf kind -> its JSON Schema. `text` is what the loader's c.text reads: a string, or a number
# YAML wrote without quotes (a version such as 9.0, a branch such as 535 where text is expected)
LEAVES: dict[str, dict] = {
    "text": {"type": ["string", "number"]},
    "int": {"type": "integer"},
    "bool": {"type": "boolean"},
    "texts": {"type": "array", "items": {"type": ["string", "number"]}},
    "ints": {"type": "array", "items": {"type": "integer"}},
    "text-or-bool": {"type": ["string", "number", "boolean"]},
    "text-or-texts": {"anyOf": [{"type": ["string", "number"]},
                                {"type": "array", "items": {"type": ["string", "number"]}}]},
    "scalar": {"type": ["string", "number", "boolean", "null"]},
    "mapping": {"type": "object"},
}


@dataclass(frozen=True)
class Shape:
    """One mapping: ``values`` holds every key it may have (key -> value), ``required`` those it
    must have. ``any_key``: every key is allowed and takes that value (keys that are data);
    ``keys_from``: the keys allowed are exactly those (with any_key's value)."""
    title: str
    required: tuple[str, ...] = ()
    values: Mapping[str, str] = field(default_factory=dict)
    any_key: str | None = None
    keys_from: tuple[str, ...] | None = None

    @property
    def optional(self) -> tuple[str, ...]:
        if self.keys_from is not None:
            return self.keys_from
        return tuple(k for k in self.values if k not in self.required)


NOTE = {"note": "text"}
SOURCED = {"source": "text", **NOTE}


def g(kind: str, grammar: str) -> str:
    """A leaf of `kind` whose value reaches a recipe, an image id, a tag or a label: gate 2
    (grammar.check_fields, before any section reads the document) holds it to `grammar` (a kind of
    patterns.py, or text, ref, spec, version|none, bytes; `url(a,b)` is an https URL whose only
    {placeholders} are a and b), in the form its kind has (FORMS), so that the JSON Schema and
    gate 2 say the same of it."""
    return f"{kind}:{grammar}"


#: a leaf kind's form at gate 2: one string, a list of strings, either, an integer
FORMS = {"text": "str", "texts": "list", "int": "int", "text-or-texts": "any"}


def _s(about: str, required: tuple[str, ...], **values: str) -> Shape:
    missing = [k for k in required if k not in values]
    assert not missing, f"{about}: required keys without a value: {missing}"
    return Shape(about, required, values)


SHAPES: dict[str, Shape] = {
    "matrix": _s(
        "matrix.yaml: imagebuild's knowledge base",
        ("schema", "as_of", "sources", "cuda", "drivers", "architectures", "gpus", "pytorch", "os"),
        schema="int", as_of=g("text", "date"), sources="sources", preference="texts",
        platforms=LIST_OF + "platforms[]", cuda="cuda", drivers="drivers",
        architectures=LIST_OF + "architectures[]", gpus=LIST_OF + "gpus[]", cudnn="cudnn",
        nccl="nccl", pytorch="pytorch", ucx="ucx", openmpi="openmpi", os=LIST_OF + "os[]",
        rdma=LIST_OF + "rdma[]", gpudirect=LIST_OF + "gpudirect[]",
        constraints=LIST_OF + "constraints[]", images=LIST_OF + "images[]", tools="tools",
        project="project"),
    "project": _s("the project's own source and licenses", (), source=g("text", "url()"),
                  licenses=g("text", "spdx")),
    "sources": Shape("every source a fact names, by id", any_key="sources.ID"),
    "sources.ID": _s("a published document (url) or a file of this repository (file)", ("title",),
                     title="text", url="text", file="text"),
    "platforms[]": _s("a CPU architecture a stack can be for", ("id", "cuda_repo", "oci", "source"),
                      id=g("text", "word"), cuda_repo=g("text", "word"), oci=g("text", "oci"),
                      aliases=g("texts", "word"), **SOURCED),
    # cuda
    "cuda": _s("CUDA: compatibility modes, majors, releases, forward compatibility, availability",
               ("modes", "majors", "releases"), modes=LIST_OF + "cuda.modes[]",
               majors=LIST_OF + "cuda.majors[]", releases=LIST_OF + "cuda.releases[]",
               compat=LIST_OF + "cuda.compat[]", availability=LIST_OF + "cuda.availability[]"),
    "cuda.modes[]": _s("a compatibility mode and the driver floor it needs", ("id", "driver_floor", "source"),
                       id="text", driver_floor="text", gpu="cuda.modes[].gpu",
                       branch="cuda.modes[].branch", package="text", caveat="text", source="text"),
    "cuda.modes[].gpu": _s("what the mode asks of the GPU", (), datacenter="bool"),
    "cuda.modes[].branch": _s("what the mode asks of the driver branch", (), supported="bool",
                              listed="bool"),
    "cuda.majors[]": _s("a CUDA major's minor-version compatibility floor",
                        ("major", "minor_compat_driver", "source"), major="int",
                        minor_compat_driver="text", source="text"),
    "cuda.releases[]": _s("a CUDA release and the driver it shipped with", ("version", "source"),
                          version=g("text", "version"), driver=g("text", "driver"), verified="bool",
                          wheels_only="bool", **SOURCED),
    "cuda.compat[]": _s("the driver branches a CUDA release's cuda-compat package runs on",
                        ("cuda", "branches", "source"), cuda="text", branches="ints", **SOURCED),
    "cuda.availability[]": _s("where a CUDA release is published: OS repositories, images",
                              ("cuda", "source"), cuda="text", repos="texts", images="texts",
                              platforms="texts", seen="text", verified="bool", **SOURCED),
    # drivers, architectures, GPUs
    "drivers": _s("NVIDIA's driver branches", ("branches",), branches=LIST_OF + "drivers.branches[]"),
    "drivers.branches[]": _s("a driver branch: its type, release, end of life, newest CUDA",
                             ("branch", "source"), branch="int", type="text", released="text",
                             eol="text-or-bool", newest_cuda="text", lifecycle_source="text", **SOURCED),
    "architectures[]": _s("a GPU architecture (compute capability)", ("cc", "name", "source"),
                          cc="text", name="text", first_cuda="text", last_cuda="text",
                          first_branch="int", last_branch="int", first_driver="text",
                          driver_source="text", nccl="text", nccl_source="text", **SOURCED),
    "gpus[]": _s("a GPU product", ("name", "cc", "datacenter", "source"), name="text", cc="text",
                 datacenter="bool", first_branch="int", last_branch="int", platforms="texts",
                 first_driver="text", driver_source="text", **SOURCED),
    # cuDNN and NCCL
    "cudnn": _s("cuDNN: its support matrix, releases and per-CUDA-major builds", ("lines",),
                lines=LIST_OF + "cudnn.lines[]", builds=LIST_OF + "builds[]",
                releases=LIST_OF + "releases[]", redist=LIST_OF + "redist[]"),
    "cudnn.lines[]": _s("a row of cuDNN's support matrix", ("versions", "cuda", "source"),
                        versions="text", cuda="text", driver="text", cc="text", verified="bool",
                        **SOURCED),
    "nccl": _s("NCCL: per-CUDA-major builds, features, releases", ("builds",),
               builds=LIST_OF + "builds[]", features=LIST_OF + "nccl.features[]",
               releases=LIST_OF + "releases[]", redist=LIST_OF + "redist[]"),
    "nccl.features[]": _s("a feature and the NCCL release that brought it", ("since", "feature", "source"),
                          since="text", feature="text", cc="text", gpu="text-or-texts", **SOURCED),
    "builds[]": _s("the versions published for a CUDA major", ("cuda_major", "versions", "source"),
                   cuda_major="int", versions="text", **SOURCED),
    "releases[]": _s("versions published as wheels", ("versions", "source"), versions="texts",
                     cuda_major="int", **SOURCED),
    "redist[]": _s("a release NVIDIA publishes as a redistributable but as no wheel",
                   ("version", "source"), version="text", cuda_majors="ints", platforms="texts",
                   released="text", **SOURCED),
    # PyTorch
    "pytorch": _s("PyTorch releases", ("releases",), releases=LIST_OF + "pytorch.releases[]"),
    "pytorch.releases[]": _s("a PyTorch release: its Pythons and CUDA variants",
                             ("version", "python", "variants", "source"), version=g("text", "version"),
                             python="text", variants=LIST_OF + "pytorch.releases[].variants[]",
                             wheels=LIST_OF + "pytorch.releases[].wheels[]", **SOURCED),
    "pytorch.releases[].wheels[]": _s(
        "one wheel of the release on the package index, as `knowledge sync` read it: its file, "
        "sha256, the CUDA its torch/version.py names (none: the CPU build) and the commit it was "
        "built from", ("platform", "file", "sha256", "cuda", "commit", "source"), platform="text",
        file="text", sha256="text", cuda="text", commit="text", size="int", arch="texts",
        **SOURCED),
    "pytorch.releases[].variants[]": _s(
        "a build of the release: its CUDA (or CPU), cuDNN, NCCL, architectures and platforms",
        ("source",), cuda=g("text", "version"), cpu="bool", cudnn=g("text", "version"),
        nccl=g("text", "version"), cuda_runtime=g("text", "version"),
        arch="texts", default="bool", verified="bool", nccl_verified="bool", nccl_source="text",
        platforms="texts", platforms_source="text", **SOURCED),
    # UCX, Open MPI
    "ucx": _s("UCX releases", ("releases",), releases=LIST_OF + "releases[] (ucx, openmpi)"),
    "openmpi": _s("Open MPI releases", ("releases",), releases=LIST_OF + "releases[] (ucx, openmpi)"),
    "releases[] (ucx, openmpi)": _s(
        "a UCX or Open MPI release: how it is installed, what it needs, its tarballs",
        ("version", "source"), version=g("text", "version"), date="text", install="text",
        os="text-or-texts", cuda="text-or-bool", line=g("text", "version"), pml="text",
        needs="mapping", url=g("text", "url(version)"), sha256=g("text", "sha256"),
        size=g("int", "bytes"), git_archive="git_archive", transports="texts",
        transports_source="text", **SOURCED),
    "git_archive": _s("the git tag archive with its submodules", ("file", "sha256", "commit", "source"),
                      file=g("text", "word"), sha256=g("text", "sha256"), commit=g("text", "commit"),
                      size=g("int", "bytes"), **SOURCED),
    # operating systems, RDMA, GPUDirect, constraints
    "os[]": _s("an operating system images build on", ("id", "name", "family", "python", "source"),
               id=g("text", "id"), name=g("text", "text"), family=g("text", "word"),
               python=g("texts", "version"), kernel="text", glibc=g("text", "version"),
               cuda="text", nvidia_repo=g("text", "word"), base=g("text", "ref"), platforms="texts",
               **SOURCED),
    "rdma[]": _s("an RDMA user space other than the distribution's rdma-core",
                 ("id", "name", "version", "repo", "os", "key", "packages", "source"),
                 id=g("text", "id"), name=g("text", "text"), version=g("text", "version"),
                 repo=g("text", "url(version,os)"), os="rdma[].os", key="rdma[].key",
                 packages="rdma[].packages", verified="bool", released=g("text", "month"),
                 **SOURCED),
    "rdma[].os": Shape("the repository's folder for each OS id", any_key=g("text", "word")),
    "rdma[].key": _s("the repository's signing key", ("url",), url=g("text", "url()"),
                     fingerprint=g("text", "fingerprint"), long_id=g("text", "keyid"), **SOURCED),
    "rdma[].packages": _s("packages per package manager", (), apt="rdma[].packages.PM",
                          dnf="rdma[].packages.PM"),
    "rdma[].packages.PM": _s("run-time and development packages", ("runtime", "devel"),
                             runtime=g("texts", "package"), devel=g("texts", "package")),
    "gpudirect[]": _s("a GPUDirect RDMA method and what it needs of the host", ("id", "requires", "source"),
                      id="text", requires="gpudirect[].requires", preferred="int", nccl="text",
                      **SOURCED),
    "gpudirect[].requires": _s("host facts the method needs", (), driver="text", ofed="bool",
                               open_kernel_modules="bool", cuda="text", kernel="text",
                               **{"gpu.cc": "text"}),
    "constraints[]": _s("a rule: when these hold, those must", ("id", "when", "require", "source"),
                        id="text", when="constraints[].components", require="constraints[].components",
                        verified="bool", tag="text", **SOURCED),
    "constraints[].components": Shape("a condition per component", any_key="scalar",
                                      keys_from=COMPONENTS),
}

assert set(SHAPES["matrix"].values) == TOP, set(SHAPES["matrix"].values) ^ TOP


# --- image families and tools: their keys are declared in recipe_inputs.py (gate 3 checks them there);
# their values here

def _images_and_tools() -> dict[str, Shape]:
    from ..components import TARBALL_TOOLS
    from .recipe_inputs import BUILD_KEYS, BUILD_SWITCHES, FAMILY_KEYS, TOOLS
    family = {"family": g("text", "id"), "description": g("text", "text"),
              "flavors": g("text-or-texts", "id"), "pytorch": g("text", "spec"),
              "variants": g("text", "id"), "os": g("text-or-texts", "id"),
              "cuda": g("text-or-texts", "version|none"), "nccl": g("text-or-texts", "version"),
              "ucx": g("text", "version"), "openmpi": g("text", "version"),
              "python": g("text", "version"), "wheels": g("text", "id"),
              "rdma": g("text", "id"), "cuda_from": g("text", "id"), "sources": g("text", "id"),
              "build": "images[].build", "platforms": g("texts", "word")}
    assert set(family) == set(FAMILY_KEYS), set(family) ^ set(FAMILY_KEYS)
    out = {
        "images[]": Shape("an image family: its flavors, stacks, OSes and platforms",
                          ("family", "flavors", "os"), {k: family[k] for k in FAMILY_KEYS}),
        "images[].build": Shape(f"the family's build choices (label {L.BUILD})", (),
                                {k: "bool" if k in BUILD_SWITCHES else g("texts", "version")
                                 for k in BUILD_KEYS}),
        "tools": Shape("the tools and keys the recipes download, pinned", (),
                       {name: f"tools.{name}" for name in TOOLS}),
    }
    for name, (required, optional, grammars) in TOOLS.items():
        out[f"tools.{name}"] = Shape(f"tool {name}", tuple(required), {
            k: g("int", "bytes") if k == "size" and name in TARBALL_TOOLS else "int" if k == "size"
            else g("text", _grammar_text(grammars[k])) if k in grammars else "text"
            for k in (*required, *optional)})
    return out


def _grammar_text(grammar) -> str:
    """recipe_inputs' grammar of a tool key as g() writes it: a kind, or ("url", placeholders)."""
    return grammar if isinstance(grammar, str) else f"url({','.join(grammar[1])})"


SHAPES.update(_images_and_tools())


# --- gate 2's fields, from the declarations --------------------------------------------------------

def _leaf(value: str) -> tuple[str, object, str] | None:
    """(kind, grammar, form) of a leaf declared with g(); None for one without a grammar."""
    kind, _, grammar = value.partition(":")
    if not grammar:
        return None
    if grammar.startswith("url(") and grammar.endswith(")"):
        return kind, ("url", tuple(p for p in grammar[4:-1].split(",") if p)), FORMS[kind]
    return kind, grammar, FORMS[kind]


def fields() -> tuple[tuple[tuple[str, ...], object, str], ...]:
    """Every recipe-facing value of matrix.yaml, from the declarations above: (path, grammar,
    form), a path's `*` being every item of a list and `?` every value of a mapping whose keys
    are data. grammar.check_fields checks the document against them (gate 2)."""
    out = []

    def walk(name: str, path: tuple[str, ...]) -> None:
        shape = SHAPES[name]
        items = [("?", shape.any_key)] if shape.any_key is not None and shape.keys_from is None \
            else list(shape.values.items())
        for key, value in items:
            here = path + (key,)
            if value.startswith(LIST_OF):
                walk(value[len(LIST_OF):], here + ("*",))
            elif value in SHAPES:
                walk(value, here)
            elif (leaf := _leaf(value)) is not None:
                out.append((here, leaf[1], leaf[2]))
    walk("matrix", ())
    return tuple(out)


#: gate 2's fields (grammar.check_fields), derived once
FIELDS = fields()


# --- the JSON Schema ------------------------------------------------------------------------------

SCHEMA_ID = "https://json-schema.org/draft/2020-12/schema"


def def_name(name: str) -> str:
    """A declaration's name as a $defs key a JSON pointer in a URI can hold (`gpus[]` is
    `gpus-item`, `releases[] (ucx, openmpi)` is `releases-item_ucx_openmpi`)."""
    import re
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name.replace("[]", "-item")).strip("_")


def _ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{def_name(name)}"}


def _value(kind: str) -> dict:
    if kind.startswith(LIST_OF):
        return {"type": "array", "items": _value(kind[len(LIST_OF):])}
    if kind in SHAPES:
        return _ref(kind)
    return dict(LEAVES[kind.partition(":")[0]])     # a leaf, with or without its grammar (g())


def _object(shape: Shape) -> dict:
    out: dict = {"type": "object", "description": shape.title}
    if shape.any_key is not None and shape.keys_from is None:
        out["additionalProperties"] = _value(shape.any_key)
        return out
    if shape.keys_from is not None:
        out["properties"] = {k: _value(shape.any_key or "scalar") for k in shape.keys_from}
    else:
        out["properties"] = {k: _value(v) for k, v in shape.values.items()}
    if shape.required:
        out["required"] = list(shape.required)
    out["additionalProperties"] = False
    return out


def json_schema() -> dict:
    """matrix.yaml's JSON Schema (draft 2020-12), from SHAPES: every mapping with its keys, none
    other allowed; each value's type. The loader's finer checks (grammars, ranges, references,
    contradictions) are not in it: `imagebuild knowledge validate` runs them."""
    root = _object(SHAPES["matrix"])
    defs = {def_name(name): _object(shape) for name, shape in sorted(SHAPES.items()) if name != "matrix"}
    assert len(defs) == len(SHAPES) - 1, "two declarations with one $defs name"
    return {"$schema": SCHEMA_ID, "title": "imagebuild matrix.yaml", **root, "$defs": defs}
