"""The declared images' expansion remembered across processes (`expand_cached`), for
`imagebuild resolve`: see the comment below for what is kept, where, and why nothing in it is
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
from .images import ImageSpec, Skipped


# -------------------------------------------------------------------------------------------------
# The expansion remembered across processes
#
# `imagebuild resolve` names the best declared image for the host, which needs the whole expansion
# (~45 resolver runs, the wheel locks read and checked): most of such a process's time, and the
# same answer every time until the matrix, a lock or imagebuild itself changes. expand_cached keeps
# it in one JSON file per matrix, options and imagebuild source in imagebuild's cache folder
# (usercache.py: $XDG_CACHE_HOME/imagebuild/, default ~/.cache/imagebuild/). Nothing in it is
# trusted: a file that is not a small regular file of this user's, not JSON, of another schema or
# key, or that names anything the knowledge lacks is not used, and the expansion is computed again
# (silently: a cache never makes an answer fail). It is JSON: reading it runs no code.

#: what a cache file holds; bumped whenever that changes, so an older file is never read as new
CACHE_SCHEMA = "imagebuild.declared-images/1"
CACHE_PREFIX = "declared-images-"
#: the largest cache file read (the project's matrix gives ~50 KB) and the most kept (one per
#: matrix, options and imagebuild source: the least recently written go first)
CACHE_MAX_BYTES = 8 << 20
CACHE_FILES = 8
# ImageSpec fields that hold an entry of a knowledge table: stored as the entry's key, read back
# as the knowledge's own entry (the key names the matrix, so it is the same one)
_TABLE_FIELDS = {"os": "os", "ucx": "ucx", "openmpi": "openmpi", "rdma": "rdma"}


def _cache_key(k: Knowledge, matrix: str, allow_unverified: bool) -> dict:
    """Everything but the wheel locks that the expansion depends on (the locks' bytes are in the
    file, checked on every read: which locks are read is known only once expanded)."""
    return {**usercache.runtime_key(), "matrix": matrix, "folder": str(_lock_folder(k)),
            "allow_unverified": bool(allow_unverified), "require_locks": True}


def expand_cached(k: Knowledge, matrix: str | None, *,
                  allow_unverified: bool = False) -> tuple[list[ImageSpec], list[Skipped]]:
    """expand(k, allow_unverified=...), remembered across processes (see above). `matrix`: the
    sha256 of the bytes `k` was loaded from, from matrix_sha256() taken before loading; None: no
    cache, the expansion is computed. The key is that digest, the options, imagebuild's version
    and source, the library versions that parse the matrix and versions, and the matrix's folder;
    the file also holds the sha256 of every wheel lock the expansion read (or that it was
    absent), compared with the locks' bytes on every read."""
    path = key = None
    if matrix is not None:
        try:
            here = usercache.folder()
            if here is not None:
                key = _cache_key(k, matrix, allow_unverified)
                name = sha256_bytes(json.dumps(key, sort_keys=True))[:32]
                path = here / f"{CACHE_PREFIX}{name}.json"
        except (_NotCached, OSError, RuntimeError, ValueError):   # RuntimeError: no home folder
            path = None
    if path is not None:
        hit = _cache_read(k, path, key)
        if hit is not None:
            return hit
    out = images._expansion(k, True, allow_unverified, lock_digests={} if path is not None else None)
    if path is not None and out.lock_digests is not None:
        _cache_write(path, k, key, out)
    return out.specs, out.skipped


def _cache_read(k: Knowledge, path: Path, key: dict) -> tuple[list, list] | None:
    try:
        data = usercache.read_own(path, CACHE_MAX_BYTES)
        if data is None:
            return None
        doc = json.loads(data)
        if not (isinstance(doc, dict) and doc.get("schema") == CACHE_SCHEMA
                and doc.get("key") == key and isinstance(doc.get("locks"), dict)
                and isinstance(doc.get("specs"), list) and isinstance(doc.get("skipped"), list)):
            return None
        folder = _lock_folder(k)
        for rel, digest in doc["locks"].items():
            if not (isinstance(rel, str) and not os.path.isabs(rel) and ".." not in rel.split("/")
                    and (digest is None or isinstance(digest, str))):
                return None
            if file_sha256(folder / rel) != digest:
                return None                       # a lock was written, changed or removed
        return [_spec_from(k, rec) for rec in doc["specs"]], [_skipped_from(rec) for rec in doc["skipped"]]
    except (_NotCached, OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None     # (RecursionError: JSON nested deeper than the parser goes)


def _cache_write(path: Path, k: Knowledge, key: dict, out: "images._Expansion") -> None:
    """Best effort, atomic (a temporary file renamed over the old one: a reader sees the whole
    old file or the whole new one); the least recently written beyond CACHE_FILES are removed."""
    from ..atomic import OutputRefused, atomic_file
    try:
        doc = {"schema": CACHE_SCHEMA, "key": key, "locks": out.lock_digests,
               "specs": [_spec_record(k, spec) for spec in out.specs],
               "skipped": [_skipped_record(x) for x in out.skipped]}
        text = json.dumps(doc, separators=(",", ":"))
        with atomic_file(path, "w", parents=True, own=True) as f:   # our cache: damage replaced
            f.write(text)
        usercache.prune(path.parent, f"{CACHE_PREFIX}*.json", CACHE_FILES)
    except (_NotCached, OSError, ValueError, TypeError, OutputRefused):
        pass        # a FIFO or a folder where the cache file goes: not replaced, not cached


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


def _skipped_record(x: Skipped) -> dict:
    return {"family": x.family, "combination": x.combination, "wishes": [list(w) for w in x.wishes],
            "why": x.why, "cuda_from": x.cuda_from, "no_lock": x.no_lock, "no_match": x.no_match}


def _skipped_from(rec) -> Skipped:
    if not isinstance(rec, dict) or set(rec) != {f.name for f in dataclasses.fields(Skipped)}:
        raise ValueError("not a skipped record")
    wishes = rec["wishes"]
    if not (isinstance(wishes, list) and all(isinstance(w, list) and len(w) == 2 for w in wishes)):
        raise ValueError("wishes")
    if not (all(isinstance(rec[n], str) for n in ("family", "combination", "cuda_from"))
            and (rec["why"] is None or isinstance(rec["why"], str))
            and isinstance(rec["no_lock"], bool) and isinstance(rec["no_match"], bool)):
        raise ValueError("skipped")
    return Skipped(rec["family"], rec["combination"], tuple(_strs(w, "wish") for w in wishes),
                   why=rec["why"], cuda_from=rec["cuda_from"], no_lock=rec["no_lock"],
                   no_match=rec["no_match"])
