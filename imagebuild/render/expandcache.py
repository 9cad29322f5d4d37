"""The declared images' expansion, done as `imagebuild resolve` needs it and remembered across
processes (`Declared`): see the comment below for what is kept, where, and why nothing in it is
trusted."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from .. import usercache
from ..digests import sha256_bytes
from ..knowledge import Knowledge
from . import images
from .fingerprint import _NotCached, _lock_folder, file_sha256, matrix_sha256  # noqa: F401 - matrix_sha256: re-exported
from .images import ImageSpec


# -------------------------------------------------------------------------------------------------
# The expansion, one combination at a time, remembered across processes
#
# `imagebuild resolve` names the best declared image for the host. Expanding every declared
# combination (60 resolver runs, the wheel locks read and checked) was most of a first run's time,
# though the best image is almost always among the newest PyTorch's few: hostfit.best_expanding
# asks for the combinations of one leading key at a time, and Declared resolves only those. What
# a combination gives is the same until the matrix, its wheel lock or imagebuild itself changes,
# so Declared keeps it in one JSON file per matrix, options and imagebuild source in imagebuild's
# cache folder (usercache.py: $XDG_CACHE_HOME/imagebuild/, default ~/.cache/imagebuild/), one
# record per combination computed so far. Nothing in it is trusted: a file that is not a small
# regular file of this user's, not JSON, of another schema or key is not used; a record that names
# another combination, anything the knowledge lacks, a field of the wrong type, or a wheel lock
# whose bytes are not the ones hashed when it was computed is computed again (silently: a cache
# never makes an answer fail). It is JSON: reading it runs no code.

#: what a cache file holds; bumped whenever that changes, so an older file is never read as new
CACHE_SCHEMA = "imagebuild.declared-images/2"
CACHE_PREFIX = "declared-images-"
#: the largest cache file read (the project's matrix gives ~60 KB) and the most kept (one per
#: matrix, options and imagebuild source: the least recently written go first)
CACHE_MAX_BYTES = 8 << 20
CACHE_FILES = 8
#: the hosts whose ruled-out combinations a file keeps (the most recently asked)
CACHE_HOSTS = 32
# ImageSpec fields that hold an entry of a knowledge table: stored as the entry's key, read back
# as the knowledge's own entry (the key names the matrix, so it is the same one)
_TABLE_FIELDS = {"os": "os", "ucx": "ucx", "openmpi": "openmpi", "rdma": "rdma"}


def _cache_key(k: Knowledge, matrix: str, allow_unverified: bool) -> dict:
    """Everything but the wheel locks that the expansion depends on (each record holds the sha256
    of the lock it read, checked on every read)."""
    return {**usercache.runtime_key(), "matrix": matrix, "folder": str(_lock_folder(k)),
            "allow_unverified": bool(allow_unverified), "require_locks": True}


class Declared:
    """The images the matrix declares, expanded combination by combination as asked
    (`expand(indices)`, indices into `plan`, images.combinations(k)), each id once, as
    images.expand() gives them: every combination asked, the same images. `matrix`: the sha256 of
    the bytes `k` was loaded from (Knowledge.sha256); None: nothing is kept across processes.
    `save()` keeps what was computed."""

    def __init__(self, k: Knowledge, matrix: str | None, *, allow_unverified: bool = False):
        self.k = k
        self.allow_unverified = allow_unverified
        self.plan = images.combinations(k)
        self._done: set[int] = set()
        self._origin: list[int] = []           # the combination each image came from
        self._fresh: dict[str, dict] = {}      # records computed in this process, by index
        self._digests: dict[str, str | None] = {}  # lock -> sha256 now (None: absent)
        self.path, self.key, self._stored = None, None, {}
        # host -> the combinations could_fit ruled out there (read, and found in this process)
        self._ruled: dict[str, set[int]] = {}
        self._ruled_fresh: dict[str, set[int]] = {}
        if matrix is not None:
            try:
                here = usercache.folder()
                if here is not None:
                    self.key = _cache_key(k, matrix, allow_unverified)
                    name = sha256_bytes(json.dumps(self.key, sort_keys=True))[:32]
                    self.path = here / f"{CACHE_PREFIX}{name}.json"
            except (_NotCached, OSError, RuntimeError, ValueError):  # RuntimeError: no home folder
                self.path = None
        if self.path is not None:
            self._stored, self._ruled = _cache_read(self.path, self.key)
        # the locks are hashed (before they are read) only for a record to keep
        self._exp = images._Expansion(k, True, allow_unverified,
                                      lock_digests={} if self.path is not None else None)

    def known(self) -> list[tuple[dict, bool | None]]:
        """For each combination, what its images are known to hold before it is resolved (for
        hostfit.best_expanding)."""
        return [(c.fixed(), c.cuda()) for c in self.plan]

    def could_fit(self, i: int, host) -> bool:
        """False only when no image of combination i can run on `host` (solver.could_hold: one
        resolver run instead of expanding it and checking its images); True for a combination
        already expanded or remembered, which costs less to expand than to ask."""
        if i in self._done or str(i) in self._stored:
            return True
        where = _host_key(host)
        if i in self._ruled.get(where, ()):
            return False
        from ..resolve.solver import could_hold
        c = self.plan[i]
        if could_hold(self.k, host, c.screen(self.k), c.family.cuda_from, self.allow_unverified):
            return True
        self._ruled_fresh.setdefault(where, set()).add(i)
        return False

    def expand(self, indices) -> list[ImageSpec]:
        """The images of these combinations that no earlier call gave, in the plan's order."""
        before = len(self._exp.specs)
        for i in sorted(set(indices) - self._done):
            self._done.add(i)
            c = self.plan[i]
            specs = self._recalled(i)
            if specs is None:
                specs, lock = self._exp.images_of(c.family, c.combo, c.wishes, c.vtag, c.os_id,
                                                  c.platform)
                self._remember(i, specs, lock)
            self._exp.add(c.family, specs)
            self._origin += [i] * (len(self._exp.specs) - len(self._origin))
        return self._exp.specs[before:]

    def all(self) -> list[ImageSpec]:
        """Every declared image, in images.expand()'s order."""
        self.expand(range(len(self.plan)))
        order = sorted(range(len(self._origin)), key=self._origin.__getitem__)   # stable
        return [self._exp.specs[n] for n in order]

    def _recalled(self, i: int) -> list[ImageSpec] | None:
        rec = self._stored.get(str(i))
        if rec is None:
            return None
        try:
            if not (isinstance(rec, dict) and set(rec) == {"label", "lock", "specs"}
                    and rec["label"] == self.plan[i].label and isinstance(rec["specs"], list)):
                return None
            lock = rec["lock"]
            if lock is not None:
                if not (isinstance(lock, list) and len(lock) == 2 and isinstance(lock[0], str)
                        and (lock[1] is None or isinstance(lock[1], str))):
                    return None
                rel, digest = lock
                if os.path.isabs(rel) or ".." in rel.split("/") or self._digest(rel) != digest:
                    return None                   # a lock was written, changed or removed
            return [_spec_from(self.k, spec) for spec in rec["specs"]]
        except (_NotCached, OSError, ValueError, TypeError, KeyError, AttributeError):
            return None

    def _digest(self, rel: str) -> str | None:
        if rel not in self._digests:
            self._digests[rel] = file_sha256(_lock_folder(self.k) / rel)
        return self._digests[rel]

    def _remember(self, i: int, specs: list[ImageSpec], lock: str | None) -> None:
        digests = self._exp.lock_digests
        if self.path is None or digests is None or (lock is not None and lock not in digests):
            return                                # a lock that could not be hashed: not kept
        try:
            self._fresh[str(i)] = {"label": self.plan[i].label,
                                   "lock": None if lock is None else [lock, digests[lock]],
                                   "specs": [_spec_record(self.k, spec) for spec in specs]}
        except (_NotCached, ValueError, TypeError):
            pass                                  # a value the record has no form for

    def save(self) -> None:
        """Keep what this process computed beside what the file held (best effort, atomic: a
        reader sees the whole old file or the whole new one; two processes that save at once
        keep one's records, and the other's are computed again later). The least recently
        written files beyond CACHE_FILES are removed."""
        if self.path is None or not (self._fresh or self._ruled_fresh):
            return
        from ..atomic import OutputRefused, atomic_file
        try:
            ruled = {where: sorted(found) for where, found in self._ruled.items()}
            for where, found in self._ruled_fresh.items():
                old = ruled.pop(where, [])       # re-added last: the hosts asked most recently stay
                ruled[where] = sorted(set(old) | found)
            ruled = dict(list(ruled.items())[-CACHE_HOSTS:])
            doc = {"schema": CACHE_SCHEMA, "key": self.key,
                   "combinations": {**self._stored, **self._fresh}, "ruled_out": ruled}
            text = json.dumps(doc, separators=(",", ":"))
            with atomic_file(self.path, "w", perm=0o600, parents=True, own=True) as f:   # ours
                f.write(text)
            usercache.prune(self.path.parent, f"{CACHE_PREFIX}*.json", CACHE_FILES)
        except (_NotCached, OSError, ValueError, TypeError, OutputRefused):
            pass        # a FIFO or a folder where the cache file goes: not replaced, not cached


def _host_key(host) -> str:
    """A host as could_fit's verdicts are filed: every fact the resolver reads of it."""
    return json.dumps(dataclasses.asdict(host), sort_keys=True, separators=(",", ":"))


def _cache_read(path: Path, key: dict) -> tuple[dict, dict]:
    """The records of the cache file at `path` (by combination index) and the combinations ruled
    out per host (a host's list is used only when it is a list of integers: 1.0 or true is no
    index), when it is one for `key`; ({}, {}) otherwise."""
    try:
        data = usercache.read_own(path, CACHE_MAX_BYTES)
        if data is None:
            return {}, {}
        doc = json.loads(data)
    except (OSError, ValueError, RecursionError):   # (RecursionError: nested deeper than the parser goes)
        return {}, {}
    if not (isinstance(doc, dict) and doc.get("schema") == CACHE_SCHEMA and doc.get("key") == key
            and isinstance(doc.get("combinations"), dict)):
        return {}, {}
    ruled = doc.get("ruled_out")
    ruled = {where: set(found) for where, found in (ruled.items() if isinstance(ruled, dict) else ())
             if isinstance(found, list) and all(type(n) is int for n in found)}
    return doc["combinations"], ruled


def _spec_record(k: Knowledge, spec: ImageSpec) -> dict:
    rec = {}
    for f in dataclasses.fields(ImageSpec):
        value = getattr(spec, f.name)
        if f.name in _TABLE_FIELDS:
            value = None if value is None else _table_key(getattr(k, _TABLE_FIELDS[f.name]), value)
        elif isinstance(value, tuple):
            value = list(value)
        elif f.name == "build":
            value = {n: list(v) if isinstance(v, tuple) else v for n, v in value.items()}
        rec[f.name] = value
    _spec_from(k, rec)          # what could not be read back is not written
    return rec


def _table_key(table: dict, entry: dict) -> str:
    for key, value in table.items():
        if value is entry:
            return key
    raise _NotCached("an entry that is not the knowledge's own")


def _strs(value, what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(what)
    return tuple(value)


def _spec_from(k: Knowledge, rec) -> ImageSpec:
    """An ImageSpec from its record, every field checked for its type (ValueError otherwise)."""
    fields = dataclasses.fields(ImageSpec)
    if not isinstance(rec, dict) or set(rec) != {f.name for f in fields}:
        raise ValueError("not an image record")
    kw = {}
    for f in fields:
        value = rec[f.name]
        if f.name in _TABLE_FIELDS:
            table = getattr(k, _TABLE_FIELDS[f.name])
            if value is None and f.name == "rdma":
                kw[f.name] = None
                continue
            if not isinstance(value, str) or value not in table:
                raise ValueError(f.name)
            value = table[value]
        elif f.name == "stack":
            if not isinstance(value, dict) or not all(isinstance(c, str) and isinstance(v, str)
                                                      for c, v in value.items()):
                raise ValueError(f.name)
        elif f.name == "build":
            if not isinstance(value, dict) or not all(
                    isinstance(n, str) and isinstance(v, (bool, str, list)) for n, v in value.items()):
                raise ValueError(f.name)
            value = {n: _strs(v, n) if isinstance(v, list) else v for n, v in value.items()}
        elif f.name == "extra":
            if value != {}:                          # expand() sets none
                raise ValueError(f.name)
            value = {}
        elif f.type == "tuple[str, ...]":
            value = _strs(value, f.name)
        elif f.type == "str":
            if not isinstance(value, str):
                raise ValueError(f.name)
        elif f.type == "str | None":
            if value is not None and not isinstance(value, str):
                raise ValueError(f.name)
        else:                                        # a field this reader does not know
            raise ValueError(f.name)
        kw[f.name] = value
    return ImageSpec(**kw)
