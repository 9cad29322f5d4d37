"""What an SBOM is made from, read from the image itself (deliver/sbom.py writes the document):
one short-lived container (no network) runs a POSIX shell script that prints the package
database, /etc/os-release, every installed distribution's name, version and installer, the
ensurepip seed wheels and the wheel requirement files; `cross_check` compares the wheels with the
image's lock, and `verify_records` hashes every file the wheels' RECORDs list, in a second
container."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import labels as L
from ..errors import ImagebuildError
from ..patterns import SHA256_HEX

REQUIREMENTS_DIR = "/opt/imagebuild/requirements"
MARK = "@@imagebuild-sbom@@"

# One container, one script: every section starts with a marker line. dpkg-query and rpm expand
# the \t and \n of their formats themselves.
SCRIPT = r"""
M='@@imagebuild-sbom@@'
echo "$M os-release"
cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null
if command -v dpkg-query >/dev/null 2>&1; then
  echo "$M dpkg"
  dpkg-query -W -f='${Package}\t${Version}\t${Architecture}\t${source:Package}\t${source:Version}\t${db:Status-Abbrev}\n' 2>/dev/null || echo "$M error dpkg-query -W failed"
elif command -v rpm >/dev/null 2>&1; then
  echo "$M rpm"
  rpm -qa --qf '%{NAME}\t%{EPOCHNUM}\t%{VERSION}-%{RELEASE}\t%{ARCH}\t%{SOURCERPM}\n' 2>/dev/null || echo "$M error rpm -qa failed"
fi
echo "$M dist-info"
find / -xdev \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type d -name '*.dist-info' -print 2>/dev/null | sort | while IFS= read -r d; do
  n=$(sed -n '/^$/q; s/^Name: *//p' "$d/METADATA" 2>/dev/null | head -n 1 | tr -d '\r\t')
  v=$(sed -n '/^$/q; s/^Version: *//p' "$d/METADATA" 2>/dev/null | head -n 1 | tr -d '\r\t')
  i=$(head -n 1 "$d/INSTALLER" 2>/dev/null | tr -d '\r\t')
  printf '%s\t%s\t%s\t%s\n' "$d" "$n" "$v" "$i"
done
echo "$M seed-wheels"
find /usr -xdev -name '*.whl' \( -path '*/python-wheels/*' -o -path '*/python3-wheels/*' -o -path '*/ensurepip/_bundled/*' \) -print 2>/dev/null | sort
for f in /opt/imagebuild/requirements/*.txt; do
  [ -f "$f" ] || continue
  echo "$M requirements $f"
  cat "$f"
done
echo "$M end"
"""


class SbomError(ImagebuildError):
    """The image cannot be read, or what it holds cannot be described."""


@dataclass(frozen=True)
class OsPackage:
    name: str
    version: str
    arch: str
    source: str          # the source package (dpkg) or source RPM
    epoch: str = ""      # rpm only
    status: str = ""     # dpkg's db:Status-Abbrev (ii, rc, ...)


@dataclass(frozen=True)
class Dist:
    path: str            # the .dist-info folder
    name: str            # canonical (PEP 503)
    version: str
    installer: str       # INSTALLER's first line (pip, uv; empty or the OS's name otherwise)


@dataclass
class Contents:
    """What the script read from the image."""
    os_release: dict[str, str] = field(default_factory=dict)
    manager: str = ""                       # dpkg | rpm
    packages: list[OsPackage] = field(default_factory=list)
    dists: list[Dist] = field(default_factory=list)
    seed_wheels: list[str] = field(default_factory=list)      # file names
    requirements: dict[str, str] = field(default_factory=dict)  # path in the image -> text
    errors: list[str] = field(default_factory=list)


def parse_output(text: str) -> Contents:
    """The script's output, section by section (anything outside a section is ignored)."""
    from packaging.utils import canonicalize_name
    c = Contents()
    section, arg = None, ""
    ended = False
    for line in text.splitlines():
        if line.startswith(MARK):
            head = line[len(MARK):].strip()
            section, _, arg = head.partition(" ")
            if section == "error":
                c.errors.append(arg)
            if section == "end":
                ended = True
            if section == "requirements":
                c.requirements[arg] = ""
            continue
        if section == "os-release":
            k, sep, v = line.partition("=")
            if sep and k.strip():
                c.os_release[k.strip()] = v.strip().strip('"').strip("'")
        elif section == "dpkg":
            parts = line.split("\t")
            if len(parts) >= 6 and parts[0]:
                c.manager = "dpkg"
                c.packages.append(OsPackage(parts[0], parts[1], parts[2], parts[3] or parts[0],
                                            status=parts[5].strip()))
        elif section == "rpm":
            parts = line.split("\t")
            if len(parts) >= 5 and parts[0]:
                c.manager = "rpm"
                c.packages.append(OsPackage(parts[0], parts[2], parts[3], parts[4],
                                            epoch=parts[1] if parts[1] not in ("", "0") else ""))
        elif section == "dist-info":
            parts = line.split("\t")
            if len(parts) == 4 and parts[1] and parts[2]:
                c.dists.append(Dist(parts[0], canonicalize_name(parts[1]), parts[2], parts[3].strip()))
        elif section == "seed-wheels":
            if line.strip():
                c.seed_wheels.append(line.strip().rsplit("/", 1)[-1])
        elif section == "requirements":
            c.requirements[arg] += line + "\n"
    if not ended:
        c.errors.append("the inventory script did not finish")
    return c


def read_image(engine, ref: str, timeout: float = 300) -> Contents:
    """Run the inventory script in a container of `ref` (no network) and parse what it prints."""
    result = engine.run(ref, ["/bin/sh", "-c", SCRIPT], network="none", timeout=timeout)
    if result.timed_out:
        raise SbomError(f"reading the contents of {ref} took longer than {timeout:.0f} s")
    if result.exit_code not in (0, None):
        raise SbomError(f"reading the contents of {ref}: /bin/sh exited {result.exit_code} "
                        f"({' '.join(result.output.split())[-200:]})")
    c = parse_output(result.output)
    if c.errors:
        raise SbomError(f"reading the contents of {ref}: {'; '.join(c.errors)}")
    if not c.packages:
        raise SbomError(f"{ref} has no dpkg or rpm database that lists a package: "
                        "imagebuild describes Debian, Ubuntu and Rocky Linux images")
    return c


# ----------------------------------------------------------------------------------------------
# Cross-check with the lock


def _seed(dist: Dist, seeds: list[str]) -> bool:
    """A wheel `python -m venv` installed from an OS-shipped ensurepip wheel of that very version."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    for w in seeds:
        try:
            name, version, _, _ = parse_wheel_filename(w)
        except Exception:  # noqa: BLE001 - not a wheel name: not a seed
            continue
        if canonicalize_name(name) == dist.name and str(version) == dist.version:
            return True
    return False


def os_managed(dist: Dist) -> bool:
    """A .dist-info the OS package manager owns (Debian's dist-packages, or not pip/uv's)."""
    return dist.path.startswith("/usr/lib/python3/dist-packages/") or \
        dist.installer.lower() not in ("pip", "uv")


def vendored_in(dist: Dist) -> str | None:
    """The top-level folder of the installed package that carries this .dist-info inside it
    (setuptools/_vendor/...), or None for a distribution installed in site-packages itself."""
    parts = dist.path.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return None if i == len(parts) - 2 else parts[i + 1]
    return None


def cross_check(contents: Contents, lock, label: str | None) -> tuple[dict[str, str], list[str]]:
    """(origin of each installed wheel by .dist-info path, problems). `lock` is a wheellock.Lock
    (None: the image installs no wheels from a lock); `label` the image's io.imagebuild.wheels-lock."""
    from packaging.version import InvalidVersion, Version
    from ..render.wheellock import LockError, parse_lock
    origins: dict[str, str] = {}
    problems: list[str] = []
    installed: dict[str, Dist] = {}
    for d in contents.dists:
        if d.path.startswith("/usr/lib/python3/dist-packages/"):
            continue          # Debian's python3-* packages: listed as OS packages
        owner = vendored_in(d)
        if owner is not None:
            origins[d.path] = f"vendored:{owner}"  # inside a wheel, covered by that wheel's hash
            continue
        if os_managed(d):
            continue
        if _seed(d, contents.seed_wheels) and (lock is None or d.name not in lock.entries):
            origins[d.path] = "venv-seed"
            continue
        installed[d.name] = d
        entry = lock.entries.get(d.name) if lock is not None else None
        if entry is None:
            origins[d.path] = "not-in-lock"
            problems.append(f"{d.name} {d.version} is installed ({d.path}) but the lock "
                            f"{'does not pin it' if lock is not None else 'is missing'}")
            continue
        try:
            same = Version(entry.version) == Version(d.version)
        except InvalidVersion:
            same = entry.version == d.version
        if not same:
            origins[d.path] = "version-mismatch"
            problems.append(f"{d.name} {d.version} is installed, the lock pins {entry.version}")
        else:
            origins[d.path] = "lock"
    if lock is None:
        return origins, problems
    for name, entry in sorted(lock.entries.items()):
        if name not in installed:
            problems.append(f"{name}=={entry.version} is locked but not installed in the image")
    want = f"sha256:{lock.sha256}"
    if label is not None and label != want:
        problems.append(f"label {L.WHEELS_LOCK} is {label}, the lock {Path(lock.path).name} "
                        f"is {want}: the image was built from another lock")
    for path, text in sorted(contents.requirements.items()):
        try:
            inner = parse_lock(text, path)
        except LockError as exc:
            problems.append(f"{path} in the image cannot be read as a lock ({exc})")
            continue
        for name, e in sorted(inner.entries.items()):
            mine = lock.entries.get(name)
            if mine is None:
                problems.append(f"{path} in the image pins {name}=={e.version}, which the lock lacks")
            elif mine.version != e.version or sorted(mine.hashes) != sorted(e.hashes):
                problems.append(f"{path} in the image pins {name}=={e.version} with other sha256 "
                                f"hashes than the lock {Path(lock.path).name}")
    return origins, problems


# ----------------------------------------------------------------------------------------------
# Installed files against the wheels' RECORD (--verify-files)

# For each .dist-info given as an argument: its RECORD, then sha256sum of every file RECORD names,
# run from the folder RECORD's paths are relative to.
RECORD_SCRIPT = r"""
M='@@imagebuild-sbom@@'
for d in "$@"; do
  echo "$M record $d"
  cat "$d/RECORD"
  echo "$M sums $d"
  (cd "$(dirname "$d")" && sed -n 's/^\([^",][^,]*\),sha256=.*/\1/p' "$d/RECORD" | tr '\n' '\0' | xargs -0 -r sha256sum 2>/dev/null)
done
echo "$M end"
"""


def verify_records(engine, image_id: str, dists: list[Dist], timeout: float = 1800) -> dict[str, tuple[int, list[str]]]:
    """.dist-info path -> (files checked, files whose sha256 is not the one RECORD gives, or that
    are missing). RECORD's hashes are urlsafe base64 sha256 digests, written by pip/uv at install."""
    import base64
    import csv
    import io
    if not dists:
        return {}
    result = engine.run(image_id, ["/bin/sh", "-c", RECORD_SCRIPT, "sh", *[d.path for d in dists]],
                        network="none", timeout=timeout)
    if result.timed_out or result.exit_code not in (0, None):
        raise SbomError(f"checking installed files against RECORD in {image_id[:19]} "
                        f"{'took too long' if result.timed_out else f'failed (exit {result.exit_code})'}")
    records: dict[str, str] = {}
    sums: dict[str, dict[str, str]] = {}
    section, arg, ended = None, "", False
    for line in result.output.splitlines():
        if line.startswith(MARK):
            section, _, arg = line[len(MARK):].strip().partition(" ")
            ended = ended or section == "end"
            if section == "record":
                records[arg] = ""
            elif section == "sums":
                sums[arg] = {}
            continue
        if section == "record":
            records[arg] += line + "\n"
        elif section == "sums":
            m = re.match(rf"^({SHA256_HEX})  (.+)\Z", line)
            if m:
                sums[arg][m.group(2)] = m.group(1)
    if not ended:
        raise SbomError(f"checking installed files against RECORD in {image_id[:19]}: no complete answer")
    out: dict[str, tuple[int, list[str]]] = {}
    for d in dists:
        checked, bad = 0, []
        for row in csv.reader(io.StringIO(records.get(d.path, ""))):
            if len(row) < 2 or not row[1].startswith("sha256="):
                continue
            want = row[1][len("sha256="):]
            want_hex = base64.urlsafe_b64decode(want + "=" * (-len(want) % 4)).hex()
            checked += 1
            if sums.get(d.path, {}).get(row[0]) != want_hex:
                bad.append(row[0])
        out[d.path] = (checked, bad)
    return out
