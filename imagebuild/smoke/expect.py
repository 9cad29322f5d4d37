"""What an image should contain, and the rules for comparing what is installed with it.

The expectation is /opt/imagebuild/image.json (or ``--expect FILE``)::

    {"id": "smoke-cpu", "flavor": "cpu",
     "stack": {"os": "debian-bookworm", "python": "3.11", "cuda": "none", "cudnn": "none",
               "nccl": "none", "ucx": "1.13.1", "openmpi": "4.1.4", "pytorch": "2.13.0"},
     "features": {"verbs": false}}

``features`` is optional; ``features.verbs`` true makes ``mpi.config`` require UCX's verbs support.

Comparison rules (documented here, unit-tested in tests/smoke/test_smoke_unit.py):

* ``"none"`` (or a missing component) means *absent*: the component must not be found.
* Versions compare on their numeric release parts, up to the precision of the *shorter* one:
  expected ``3.11`` accepts ``3.11.2``; expected ``12.4.1`` accepts torch's ``12.4`` (torch reports
  CUDA and cuDNN with less precision than a stack pins); ``2.13.0`` rejects ``2.13.1``.
* PyTorch's local part (``2.13.0+cpu``, ``2.4.1+cu124``): when the expectation carries one it must
  match exactly. When it does not, the local part is ignored only if it agrees with the expected
  CUDA: ``+cpu`` needs cuda ``none``; ``+cuXYZ`` needs a CUDA whose major and minor digits are XYZ.
  So a CPU wheel in a CUDA image, or a cu121 wheel in a CUDA 12.4 image, fails.
* The OS is ``<ID>-<VERSION_CODENAME>``, ``<ID>-<VERSION_ID>`` or ``<ID><VERSION_ID>`` from
  /etc/os-release (``debian-bookworm``, ``debian-12``, ``debian12``, ``ubuntu22.04``),
  case-insensitive.
"""

from __future__ import annotations

import json
import os
import re

DEFAULT_EXPECT = "/opt/imagebuild/image.json"
COMPONENTS = ("os", "python", "cuda", "cudnn", "nccl", "ucx", "openmpi", "pytorch")
_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_LOCAL_CU = re.compile(r"^cu(\d+)\Z")


class ExpectationError(Exception):
    """The expectation file is missing or malformed."""


def read_json(path: str, what: str, error: type[Exception]):
    """The JSON document in `path`; `error` with one line when it cannot be read or parsed."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror})") from None
    except ValueError as exc:
        raise error(f"{path}: not valid JSON ({exc})") from None


def load(path: str) -> dict:
    data = read_json(path, "the expectation", ExpectationError)
    if not isinstance(data, dict) or not isinstance(data.get("stack", {}), dict):
        raise ExpectationError(f"{path}: expected an object with a 'stack' object")
    for key, value in data.get("stack", {}).items():
        if not isinstance(value, str):
            raise ExpectationError(f"{path}: stack.{key} must be a string, not {value!r}")
    return data


def default_path() -> str | None:
    return DEFAULT_EXPECT if os.path.exists(DEFAULT_EXPECT) else None


def is_absent(expected: str | None) -> bool:
    return expected is None or expected.strip().lower() in ("", "none")


def release(version: str) -> tuple[int, ...] | None:
    m = _RELEASE.match(version or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def split_local(version: str) -> tuple[str, str]:
    public, _, local = version.partition("+")
    return public, local


def version_matches(installed: str | None, expected: str | None) -> tuple[bool, str]:
    """(ok, why) for one component, with the rules in the module docstring."""
    if is_absent(expected):
        if installed is None:
            return True, "absent as expected"
        return False, f"found {installed} but the image should not have it"
    if installed is None:
        return False, f"not found (expected {expected})"
    have, want = release(installed), release(expected)
    if have is None or want is None:
        ok = installed.strip() == expected.strip()
        return ok, f"{installed} {'==' if ok else '!='} {expected}"
    n = min(len(have), len(want))
    ok = have[:n] == want[:n]
    return ok, f"{installed} {'matches' if ok else 'does not match'} {expected}"


def torch_version_matches(installed: str | None, expected: str | None,
                          expected_cuda: str | None) -> tuple[bool, str]:
    if installed is None or is_absent(expected):
        return version_matches(installed, expected)
    pub_have, local_have = split_local(installed)
    pub_want, local_want = split_local(expected)
    if local_want:
        ok = installed == expected
        return ok, f"{installed} {'==' if ok else '!='} {expected} (local part compared exactly)"
    ok, why = version_matches(pub_have, pub_want)
    if not ok or not local_have:
        return ok, why.replace(pub_have, installed, 1)
    if local_have == "cpu":
        if is_absent(expected_cuda):
            return True, f"{installed} matches {expected} (+cpu build, cuda none expected)"
        return False, f"{installed} is a CPU build but CUDA {expected_cuda} is expected"
    m = _LOCAL_CU.match(local_have)
    if m:
        want_cuda = release(expected_cuda or "")
        if is_absent(expected_cuda) or want_cuda is None or len(want_cuda) < 2:
            return False, f"{installed} is a CUDA build but the expectation says cuda {expected_cuda or 'none'}"
        digits = f"{want_cuda[0]}{want_cuda[1]}"
        if m.group(1) == digits:
            return True, f"{installed} matches {expected} (+cu{digits} agrees with CUDA {expected_cuda})"
        return False, f"{installed} was built for cu{m.group(1)}, the image expects CUDA {expected_cuda}"
    return False, f"{installed} has an unknown local part +{local_have} (expected {expected})"


def os_release(root: str = "/") -> dict[str, str]:
    info: dict[str, str] = {}
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            with open(os.path.join(root, rel), encoding="utf-8") as fh:
                for line in fh:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        info[key] = value.strip().strip('"').strip("'")
            break
        except OSError:
            continue
    return info


def os_names(info: dict[str, str]) -> list[str]:
    ident = info.get("ID", "").lower()
    names = []
    for key in ("VERSION_CODENAME", "VERSION_ID"):
        if ident and info.get(key):
            names.append(f"{ident}-{info[key].lower()}")
    if ident and info.get("VERSION_ID"):
        names.append(f"{ident}{info['VERSION_ID'].lower()}")  # the matrix's spelling: debian12, ubuntu22.04
    return names


def os_matches(info: dict[str, str], expected: str | None) -> tuple[bool, str]:
    names = os_names(info)
    if is_absent(expected):
        return True, f"os {names[0] if names else 'unknown'} (no expectation)"
    want = expected.strip().lower()
    ok = want in names
    shown = " / ".join(names) or "unknown (no /etc/os-release)"
    return ok, f"{shown} {'matches' if ok else 'does not match'} {expected}"
