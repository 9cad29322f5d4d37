"""The validated knowledge kept across processes.

Reading matrix.yaml costs most of a short command: the YAML parse with positions, the grammar's
bounds, every section's checks and the compilation into rules, about three times what Python takes
to start. The result depends only on the bytes of the file and on imagebuild itself, so `load`
keeps it in imagebuild's cache folder (usercache.folder()), one entry per matrix, keyed by the
sha256 of the bytes read and by usercache.runtime_key() (imagebuild's version and source, Python's,
PyYAML's and packaging's), and reads it back while both are the same.

What is kept is the Knowledge itself, pickled (every Matcher is data, knowledge/matchers.py, so
it pickles). Nothing in an entry is trusted:

- it is read only when it is a regular file of this user's, writable by no one else, of at most
  MAX_BYTES (usercache.read_own);
- its first line names the format; then the sha256 of the key and the payload, which must match
  what this process computes: a damaged, truncated, stale or edited entry is not unpickled;
- unpickling may build the knowledge's own types and nothing else (_Restricted.find_class: no
  function, no module, no other class), so even an entry crafted to pass the hash cannot run code;
- what comes back must be a Knowledge whose sha256 is the matrix's.

Anything else, and any error, is a miss: the matrix is read and validated as if there were no
cache, and the entry rewritten. Entries are written whole (a temporary file renamed over the old
one), so concurrent processes read an old entry or a new one, never a part; at most KEEP are kept.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path

from .. import usercache
from ..digests import sha256_bytes, sha256_raw

#: the first line of an entry; bumped whenever what is kept changes shape
MAGIC = b"imagebuild.knowledge/1\n"
PREFIX = "knowledge-"
#: the project's matrix pickles to about 0.3 MB
MAX_BYTES = 32 << 20
KEEP = 8
_DIGEST = 32


def _allowed() -> dict[tuple[str, str], type]:
    """(module, name) -> class: every type a Knowledge is made of."""
    import dataclasses

    from . import families, matchers, model, yamlfile
    out = {}
    for mod in (model, matchers, families):
        for name, obj in vars(mod).items():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == mod.__name__:
                out[(mod.__name__, name)] = obj
    for cls in (yamlfile._Map, yamlfile._List):
        out[(cls.__module__, cls.__name__)] = cls
    return out


class _Restricted(pickle.Unpickler):
    ALLOWED: dict[tuple[str, str], type] = {}

    def find_class(self, module, name):
        cls = self.ALLOWED.get((module, name))
        if cls is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not a type of the knowledge")
        return cls


def _entry(matrix_sha256: str) -> tuple[Path, bytes] | None:
    here = usercache.folder()
    if here is None:
        return None
    key = json.dumps({"schema": MAGIC.decode().strip(), "matrix": matrix_sha256,
                      **usercache.runtime_key()}, sort_keys=True).encode()
    return here / f"{PREFIX}{sha256_bytes(key)[:32]}.pickle", key


def lookup(matrix_sha256: str):
    """The Knowledge kept for the matrix whose bytes have this sha256, or None (a miss)."""
    from .model import Knowledge
    try:
        entry = _entry(matrix_sha256)
        if entry is None:
            return None
        path, key = entry
        data = usercache.read_own(path, MAX_BYTES)
        if data is None or not data.startswith(MAGIC):
            return None
        digest = data[len(MAGIC):len(MAGIC) + _DIGEST]
        payload = data[len(MAGIC) + _DIGEST:]
        if sha256_raw(key + b"\0" + payload) != digest:
            return None
        if not _Restricted.ALLOWED:
            _Restricted.ALLOWED = _allowed()
        k = _Restricted(io.BytesIO(payload)).load()
    except Exception:       # noqa: BLE001 - whatever an entry holds, a miss, never a failure
        return None
    if type(k) is not Knowledge or k.sha256 != matrix_sha256:
        return None
    return k


def store(k) -> None:
    """Keep `k` (just validated, before any query filled its caches) for its matrix's sha256.
    Best effort: an unwritable folder or a full disk costs only the next run's time."""
    from ..atomic import OutputRefused, atomic_file
    try:
        entry = _entry(k.sha256) if k.sha256 else None
        if entry is None:
            return
        path, key = entry
        k.admit_all()           # what every process computes first, kept with the knowledge
        payload = pickle.dumps(k, protocol=pickle.HIGHEST_PROTOCOL)
        if len(payload) + len(MAGIC) + _DIGEST > MAX_BYTES:
            return
        with atomic_file(path, "wb", perm=0o600, parents=True, own=True) as f:
            f.write(MAGIC + sha256_raw(key + b"\0" + payload) + payload)
        usercache.prune(path.parent, f"{PREFIX}*.pickle", KEEP)
    except (OSError, pickle.PicklingError, TypeError, AttributeError, RecursionError, OutputRefused):
        pass
