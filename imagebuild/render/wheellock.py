"""Wheel locks: the complete, hash-pinned Python closure each image installs.

An image's pip steps never resolve anything at build time: they install `--require-hashes --no-deps`
from a lock file committed under locks/wheels/ beside matrix.yaml. One lock serves every image that
installs the same wheels (a *wheel set*: top-level pins, Python version, manylinux platform, index).

Locks are written by `imagebuild wheels lock`, which asks uv (a resolver built for exactly this:
cross-platform resolution for a target Python and glibc, reading only wheel metadata, with
`--generate-hashes`) and keeps only files uploaded on or before the matrix's `as_of` date, so the same
matrix gives the same lock on any day. An image whose wheel set has no lock is not generated; the
`images --all` listing says so and names the command that writes it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..errors import KnowledgeError, LockError, Unavailable  # LockError: errors.py's, named here too
from ..redact import redact
from ..versions import NONE, major_minor, parse_version
from ..digests import sha256_bytes
from ..patterns import SHA256_HEX

LOCK_DIR = Path("locks") / "wheels"
HEADER = "# Wheel lock written by `imagebuild wheels lock` from matrix.yaml: do not edit."

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!_-]*)\s*\\?\Z")
_HASH = re.compile(rf"^--hash=sha256:({SHA256_HEX})\s*\\?\Z")
# a wheel set's top-level requirement, as wheel_set writes it: name[extras]==version
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9,._-]*\])?==([0-9][0-9.]*)\Z")
_SEPARATORS = re.compile(r"[-_.]+")


def canonical_name(name: str) -> str:
    """A project name as PEP 503 normalises it (runs of -, _ and . are one -, lower case): what
    packaging.utils.canonicalize_name returns, without importing packaging's platform tags (most of
    a first `resolve`'s imports); tests/render/test_wheellock.py holds the two to the same names."""
    return _SEPARATORS.sub("-", name).lower()


class LockUnavailable(Unavailable, LockError):
    """uv could not reach an index (connection refused, DNS, timeouts, 5xx): exit code 3."""


# uv's words for an index that did not answer (as opposed to one that answered "no such version")
_UV_UNREACHABLE = re.compile(r"connection refused|tcp connect error|dns error|failed to lookup|"
                             r"timed out|connection reset|server error|50[0234] |429 too many",
                             re.IGNORECASE)


@dataclass(frozen=True)
class WheelSet:
    """What one pip closure depends on; `key` names its lock file."""
    key: str
    requirements: tuple[str, ...]      # top-level pins, e.g. ("nvidia-nccl-cu12==2.27.5", "torch==2.9.1")
    python: str
    glibc: str
    index: str | None                  # the variant's own index (PyTorch's), besides the configured one
    host: bool                         # wheels come from the host's pip (its find-links too)
    exclude_newer: str                 # matrix as_of: files uploaded later are not considered
    nccl_package: str | None = None    # installed on its own, early, for nccl-tests
    # CUDA toolkit from the wheels (the devel stage compiles against them): the packages the
    # run-time stage installs of the lock (the CUDA run time and NCCL; nvcc and headers stay behind)
    runtime_packages: tuple[str, ...] = ()
    machine: str = "x86_64"            # the image's CPU (matrix platform id: x86_64, aarch64)

    @property
    def platform(self) -> str:
        """uv's --python-platform for the image's CPU and C library."""
        return f"{self.machine}-manylinux_{self.glibc.replace('.', '_')}"

    @property
    def pip_platform(self) -> str:
        """pip's --platform tag for the same (manylinux_2_36_aarch64)."""
        return f"manylinux_{self.glibc.replace('.', '_')}_{self.machine}"

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.key}.txt"

    def header(self) -> str:
        where = "the configured package index"
        if self.index:
            where += f", then {self.index}"
        if self.host:
            where += ", and the host pip's find-links"
        return "\n".join([
            HEADER,
            f"# requires: {' '.join(self.requirements)}",
            f"# for: Python {self.python}, {self.platform}",
            f"# from: {where}; files uploaded on or before {self.exclude_newer}",
        ]) + "\n"


# What the devel stage of an image that compiles against the CUDA toolkit's wheels installs: nvcc
# (with crt, nvvm and the run time), the CUDA C++ core libraries' headers, and NVML's header, as
# extras of NVIDIA's `cuda-toolkit` meta-package pinned to the stack's CUDA release.
TOOLKIT_EXTRAS = ("cccl", "cudart", "nvcc", "nvml")
TOOLKIT_RUNTIME = ("nvidia-cuda-runtime",)


def wheel_set(k, stack: dict, os_entry: dict, wheels: str | None,
              toolkit: bool = False) -> WheelSet | None:
    """The wheel set an image of this stack installs (None when it installs no wheel). `toolkit`:
    the image compiles against CUDA from NVIDIA's wheels (cuda-toolkit==<the stack's CUDA>)."""
    s = stack
    glibc = str(os_entry.glibc or "")
    if not re.match(r"^2\.[0-9]+\Z", glibc):
        raise KnowledgeError(f"os {os_entry.id}: glibc {glibc!r} is needed to lock wheels "
                             "(expected 2.N)", file=k.path)
    py = s["python"]
    reqs: list[str] = []
    index = None
    nccl_pkg = None
    if s["nccl"] != NONE and s["cuda"] != NONE:
        nccl_pkg = f"nvidia-nccl-cu{parse_version(s['cuda']).major}"
        reqs.append(f"{nccl_pkg}=={s['nccl']}")
    if s["pytorch"] != NONE:
        reqs.append(f"torch=={s['pytorch']}")
        if s["cuda"] != NONE:
            var = k.variants[(s["pytorch"], major_minor(s["cuda"]))]
            tag = var.tag
            if not var.default:
                url = k.tools["pytorch-index"].url if "pytorch-index" in k.tools else ""
                if not url:
                    raise KnowledgeError("tools.pytorch-index.url is needed for non-default "
                                         "PyTorch variants", file=k.path)
                index = url.format(tag=tag)
        else:
            tag = "cpu"
        key = f"torch-{s['pytorch']}-{tag}"
    elif nccl_pkg:
        key = f"{nccl_pkg}-{s['nccl']}"
    else:
        return None
    runtime: tuple[str, ...] = ()
    if toolkit and s["cuda"] != NONE:
        reqs.append(f"cuda-toolkit[{','.join(TOOLKIT_EXTRAS)}]=={s['cuda']}")
        key = f"cuda-toolkit-{s['cuda']}-{key}"
        runtime = tuple(sorted(TOOLKIT_RUNTIME + ((nccl_pkg,) if nccl_pkg else ())))
    machine = str(s.get("platform") or "x86_64")
    if not re.fullmatch(r"[a-z0-9_]{1,32}", machine):
        raise KnowledgeError(f"platform {machine!r} cannot name a wheel platform", file=k.path)
    # x86_64 locks keep the names they had before other platforms were built
    arch = "" if machine == "x86_64" else f"_{machine}"
    return WheelSet(key=f"{key}-py{py}-manylinux_{glibc.replace('.', '_')}{arch}",
                    requirements=tuple(sorted(reqs)), python=py, glibc=glibc, index=index,
                    host=wheels == "host", exclude_newer=k.as_of, nccl_package=nccl_pkg,
                    runtime_packages=runtime, machine=machine)


# -------------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class Entry:
    name: str                  # canonical (PEP 503)
    version: str
    hashes: tuple[str, ...]
    line: int
    text: str                  # the entry's lines as written


@dataclass(frozen=True)
class Lock:
    path: str
    text: str
    entries: dict[str, Entry]

    @property
    def sha256(self) -> str:
        return sha256_bytes(self.text)

    def subset(self, names: list[str]) -> str:
        """A requirements text holding only these packages (their pins and hashes)."""
        out = [HEADER.replace("do not edit.", f"a subset of {Path(self.path).name}.")]
        for n in names:
            out.append(self.entries[canonical_name(n)].text)
        return "\n".join(out) + "\n"


def parse_lock(text: str, path: str) -> Lock:
    """A lock's entries (see _parse_lock); the same text is parsed once per process, since a
    generation reads each lock for every image and format that uses it."""
    return _parse_lock(text, path)


@functools.lru_cache(maxsize=512)
def _parse_lock(text: str, path: str) -> Lock:
    """Every entry is `name==version` followed by at least one `--hash=sha256:...`; anything else
    (an unpinned name, an option line such as --index-url, a URL) is refused with its line."""
    from packaging.version import InvalidVersion, Version
    entries: dict[str, Entry] = {}
    cur: dict | None = None

    def close():
        if cur is None:
            return
        if not cur["hashes"]:
            raise LockError(f"{cur['name']}=={cur['version']} has no --hash: the lock must pin "
                            "every file by sha256", file=path, line=cur["line"])
        entries[cur["name"]] = Entry(cur["name"], cur["version"], tuple(cur["hashes"]),
                                     cur["line"], "\n".join(cur["lines"]))

    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        h = _HASH.match(line) if cur is not None else None     # most lines: one of an entry's hashes
        if h:
            cur["hashes"].append(h.group(1))
            cur["lines"].append(raw.rstrip())
            continue
        m = _PIN.match(line)
        if m:
            close()
            name = canonical_name(m.group(1))
            if name in entries:
                raise LockError(f"{name} is pinned twice", file=path, line=no)
            try:
                Version(m.group(2))
            except InvalidVersion:
                raise LockError(f"malformed version {m.group(2)!r}", file=path, line=no) from None
            cur = {"name": name, "version": m.group(2), "hashes": [], "line": no,
                   "lines": [raw.rstrip()]}
            continue
        raise LockError(f"unexpected line {line[:60]!r} (expected name==version or "
                        "--hash=sha256:<64 hex>)", file=path, line=no)
    close()
    if not entries:
        raise LockError("the lock pins nothing", file=path)
    for e in entries.values():
        if not e.text.rstrip().endswith(e.hashes[-1]):
            raise LockError(f"{e.name}: the entry's last line ends with a continuation",
                            file=path, line=e.line)
    return Lock(path, text, entries)


def check_lock(lock: Lock, ws: WheelSet) -> None:
    """The lock must pin every top-level requirement of its wheel set at the matrix's version
    (a pinned `torch==2.9.1` is met by 2.9.1 and by 2.9.1+cu128, PyTorch's local label: PEP 440's
    `==` without a local label ignores the pin's)."""
    from packaging.version import Version
    for req in ws.requirements:
        m = _REQUIREMENT.match(req)
        if m is None:
            raise LockError(f"{ws.key}: requirement {req!r} is not name==version")
        name, want = m.groups()
        e = lock.entries.get(canonical_name(name))
        if e is None:
            raise LockError(f"stale lock: {name} is not pinned (matrix wants {req}); "
                            f"run `imagebuild wheels lock --refresh`", file=lock.path)
        if Version(Version(e.version).public) != Version(want):
            raise LockError(f"stale lock: {name} {e.version}, matrix wants {req}; "
                            f"run `imagebuild wheels lock --refresh`", file=lock.path, line=e.line)


def lock_root(k) -> Path:
    return Path(k.path).resolve().parent


def read_lock(k, ws: WheelSet) -> Lock | None:
    """The committed lock of a wheel set, checked; None when there is none."""
    path = lock_root(k) / ws.path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LockError(f"cannot read {path}: {exc.strerror}") from None
    lock = parse_lock(text, str(path))
    check_lock(lock, ws)
    return lock


# -------------------------------------------------------------------------------------------------
# Writing (uv)


def uv_binary() -> str:
    """The uv on PATH (the user's choice), else the one the uv package installed."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # noqa: PLC0415 - only needed to write locks
        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        pass
    raise LockError("uv is not installed (pip install uv): it resolves the wheel closures")


def pip_sources() -> dict[str, list[str]]:
    """pip's configured index-url and find-links, each as a list."""
    from ..knowledge.wheelindex import pip_settings     # the index machinery: only to write locks
    got = pip_settings(keys=("index-url", "find-links"))
    return {k: v.split() for k, v in got.items()}


# uv's settings that choose where packages come from: every inherited one is dropped, so the
# child sees exactly the locations below
_UV_LOCATION_ENV = ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX",
                    "UV_FIND_LINKS", "UV_NO_INDEX")


def uv_command(ws: WheelSet, *, uv: str) -> list[str]:
    """uv's argv: no index URL and no find-links location in it (they may carry credentials, and
    argv is visible to every user of the machine); those go through :func:`uv_environment`."""
    return [uv, "pip", "compile", "-", "--quiet", "--no-config", "--no-header", "--no-annotate",
            "--generate-hashes", "--python-version", ws.python, "--python-platform", ws.platform,
            "--exclude-newer", ws.exclude_newer]


def uv_environment(ws: WheelSet, *, index_url: str, find_links: list[str],
                   base: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``base`` (default os.environ) without uv's location settings,
    plus the index (UV_DEFAULT_INDEX), the variant's own index (UV_INDEX, searched first, as
    --extra-index-url was) and, for host sets, the find-links locations (UV_FIND_LINKS)."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if k not in _UV_LOCATION_ENV}
    env["UV_DEFAULT_INDEX"] = index_url
    # pip's extra-index-url folders are not passed: uv takes a package from the first index that
    # has it, and a local folder without upload dates would hide the index's files from
    # --exclude-newer. Host wheels come from find-links, their dependencies from the index.
    if ws.index:
        env["UV_INDEX"] = ws.index
    links = [fl for fl in find_links if ws.host]
    if any("," in fl for fl in links):
        raise LockError(f"{ws.key}: a find-links location holds ',', which uv's UV_FIND_LINKS "
                        "cannot carry")
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)
    return env


def compile_lock(ws: WheelSet, *, index_url: str, find_links: list[str] | None = None,
                 uv: str | None = None,
                 timeout: float = 600) -> str:
    """The lock text of one wheel set (header + uv's hash-pinned closure)."""
    cmd = uv_command(ws, uv=uv or uv_binary())
    env = uv_environment(ws, index_url=index_url, find_links=find_links or [])
    try:
        proc = subprocess.run(cmd, input="\n".join(ws.requirements) + "\n", capture_output=True,
                              text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise LockError(f"{ws.key}: uv did not finish within {timeout:.0f} s") from None
    except OSError as exc:
        raise LockError(f"cannot run uv: {exc.strerror}") from None
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith(("error", "×", "╰"))), None) or \
            (lines[-1] if lines else f"uv exited {proc.returncode}")
        detail = " ".join(ln.lstrip("╰─▶ ") for ln in lines[1:3]) if len(lines) > 1 else ""
        # hidden before it is cut: a cut URL would no longer show where its credentials end
        kind = LockUnavailable if _UV_UNREACHABLE.search(proc.stderr) else LockError
        raise kind(redact(f"{ws.key}: cannot lock {' '.join(ws.requirements)}: "
                               f"{why}{(' ' + detail) if detail else ''}")[:400])
    body = proc.stdout.strip("\n") + "\n"
    text = ws.header() + "\n" + body
    lock = parse_lock(text, str(ws.path))
    check_lock(lock, ws)
    return text
