"""images.lock: what each image was built from and what it proved, so that a later build can say
exactly what drifted.

The lock is JSON with sorted keys, two-space indent and a trailing newline (same inputs, same
bytes), written through a temporary file and a rename (never half-written)::

    {
      "images": {
        "<image-id>": {
          "base_image": "sha256:...",          # id/digest of the FROM image
          "bases": {                           # every external FROM (absent in older locks)
            "ubuntu:22.04": {"id": "sha256:...", "digest": "ubuntu@sha256:..." | null}
          },
          "dockerfile_sha256": "<hex>",        # of Dockerfiles/<id>/Dockerfile
          "image_id": "sha256:..." | null,     # the engine's id of the built image
          "smoke": {"counts": {"fail": 0, "pass": 9, "skip": 1}, "passed": true,
                    "report_sha256": "<hex>"} | null,
          "stack": {"cuda": "12.4.1", "pytorch": "2.4.1", ...},
          "published": {                       # what `imagebuild publish` pushed (absent: never)
            "HOST[:PORT]/NS/<image-id>": {"digest": "sha256:...", "tags": ["<dated>", "<floating>"]}
          }
        }
      },
      "version": 1
    }

What a base's "digest" is: ``id`` is the engine's image id, the sha256 of the image's config,
which names the layers by their own sha256: a content address the engine verifies, and the only
digest an image that never went through a registry has (the local base that `imagebuild base`
makes is one, and its id is a pure function of its root file system). ``digest`` is the registry
manifest digest (``NAME@sha256:...``) the engine recorded when the image was pulled or pushed,
null when it never was. `build --locked` refuses to build when either differs from the lock.

``published`` is written by `imagebuild publish` after it pushed the image whose engine id the
entry records and read every tag's manifest digest back from the registry: per repository
(``HOST[:PORT]/NAMESPACE/<image-id>``, the docker reference without a tag), the manifest digest and
the tags (sorted) that served it then. It is the registry-side identity of the tested image:
`imagebuild find --registry` prints ``REPOSITORY@DIGEST`` and asks the registry whether the dated
tag still serves that digest. `imagebuild lock` keeps the record while the entry's image id is
unchanged and drops it when the image changed (a new build is not what was pushed) or when no
image id is recorded (``--no-engine``). It is no build input: `lock --check` does not compare it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from ..atomic import write_atomic
from ..digests import sha256_bytes, sha256_file
from ..dockerfile import BASE_DIGEST_LABEL, base_refs
from ..reference import DIGEST_RE, is_repo_digest
from ..workspace import LOCK_FILE
from ..errors import ImagebuildError, LockError  # LockError: the one of errors.py, named here too
from ..localfile import MAX_DOCUMENT_BYTES, read_bytes, read_text
from .. import untrusted
from .drift import (BUILD_INPUTS, ENGINE_FIELDS, ENGINE_PROVENANCE, ENTRY_KEYS,  # noqa: F401 - re-exported
                    OPTIONAL_KEYS, PROVENANCE_KEYS, _short, drift, drift_all, engine_free, without_bases)
from ..patterns import SHA256_HEX

LOCK_VERSION = 1
DEFAULT_LOCK = LOCK_FILE
STATUSES = ("fail", "pass", "skip")

_HEX64 = re.compile(rf"^{SHA256_HEX}\Z")
_IMAGE_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}\Z")
# a stack: component names and the versions the matrix writes (13.0.2, 2.13.0, ubuntu24.04, none)
_COMPONENT = re.compile(r"^[a-z][a-z0-9_-]{0,63}\Z")
_STACK_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+_~-]{0,63}\Z")


def dockerfile_path(root: str | os.PathLike, image_id: str) -> Path:
    """Where `imagebuild generate` writes an image's Dockerfile: Dockerfiles/<id>/Dockerfile."""
    return Path(root) / "Dockerfiles" / image_id / "Dockerfile"


def summarize_report(report: dict, raw: bytes) -> dict:
    """The lock's summary of a smoke report: passed, counts per status, sha256 of its bytes."""
    summary = report.get("summary")
    if isinstance(summary, dict):
        counts = {s: int(summary.get(s, 0)) for s in STATUSES}
    else:
        checks = report.get("checks") if isinstance(report.get("checks"), list) else []
        counts = {s: sum(1 for c in checks if isinstance(c, dict) and c.get("status") == s)
                  for s in STATUSES}
    return {"counts": counts, "passed": report.get("passed") is True, "report_sha256": sha256_bytes(raw)}


def read_report_summary(path: str | os.PathLike) -> dict | None:
    """summarize_report of the JSON report at ``path``; None when there is no report yet."""
    try:
        raw = read_bytes(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ImagebuildError(f"cannot read the smoke report ({exc.strerror or type(exc).__name__})",
                              file=str(path)) from None
    try:
        report = untrusted.loads(raw)
    except ValueError as exc:       # untrusted.BadData, a non-UTF-8 file
        raise ImagebuildError(f"malformed smoke report ({exc})", file=str(path),
                              line=getattr(exc, "line", None), column=getattr(exc, "column", None)) from None
    if not isinstance(report, dict):
        raise ImagebuildError("the smoke report is not a JSON object", file=str(path))
    return summarize_report(report, raw)


def compute_entry(*, stack: dict[str, str], dockerfile_sha256: str, base_image: str | None,
                  image_id: str | None, smoke: dict | None, bases: dict | None = None) -> dict:
    """One lock entry from plain values (``smoke`` as returned by summarize_report; ``bases``
    ref -> {"id", "digest"}, left out when None)."""
    if not _HEX64.match(dockerfile_sha256 or ""):
        raise ImagebuildError(f"dockerfile_sha256 {dockerfile_sha256!r} is not a sha256 hex digest")
    extra = {} if bases is None else {
        "bases": {str(ref): {"digest": b.get("digest"), "id": b.get("id")} for ref, b in sorted(bases.items())}}
    return {**extra,
        "base_image": base_image,
        "dockerfile_sha256": dockerfile_sha256,
        "image_id": image_id,
        "smoke": None if smoke is None else {
            "counts": {s: int(smoke["counts"].get(s, 0)) for s in STATUSES},
            "passed": bool(smoke["passed"]),
            "report_sha256": smoke["report_sha256"],
        },
        "stack": {str(k): str(v) for k, v in sorted(stack.items())},
    }


def dumps(entries: dict[str, dict]) -> str:
    return json.dumps({"images": entries, "version": LOCK_VERSION}, indent=2, sort_keys=True) + "\n"


#: how long a writer waits for another one to finish with the same lock file
WRITER_WAIT_S = 300.0


@contextlib.contextmanager
def one_writer(path: str | os.PathLike, wait: float = WRITER_WAIT_S):
    """Hold the lock file at ``path`` for one read-modify-write at a time across processes (two
    CI jobs publishing from one checkout, a `lock` beside a `publish`): each reads what the other
    wrote instead of overwriting it. The writers meet on ``.<name>.lock`` beside it (filelock:
    an OS lock, released when the holder exits, however it exits)."""
    import filelock

    path = Path(path)
    guard = path.parent / f".{path.name}.lock"
    try:
        guard.parent.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(guard), timeout=wait):
            yield
    except filelock.Timeout:
        raise LockError(f"another imagebuild has been writing this lock for {wait:.0f} s (it holds "
                        f"{guard.name}); try again when it is done", file=str(path)) from None
    except OSError as exc:
        if exc.filename is None or Path(exc.filename) not in (guard, guard.parent):
            raise
        raise LockError(f"cannot take {guard.name} to write the lock: {exc.strerror}", file=str(path)) from None


def merge(locks: list[tuple[str, dict[str, dict]]]) -> dict[str, dict]:
    """One lock from several (each (path, entries), as read_lock gives them): the shard locks of
    builders that built different images. The same image in two of them must be the same build:
    reproducible builds mean two builders that built one base agree on its image ID, so another ID
    (or another stack, recipe or smoke report under the same ID) is a LockError naming both files.
    Their publish records are joined; one repository with two digests is refused the same way."""
    merged: dict[str, dict] = {}
    origin: dict[str, str] = {}
    for path, entries in locks:
        for image_id, entry in entries.items():
            if image_id not in merged:
                merged[image_id] = json.loads(json.dumps(entry))
                origin[image_id] = path
                continue
            have = merged[image_id]
            for key in sorted(set(have) | set(entry)):
                if key == "published":
                    continue
                if have.get(key) != entry.get(key):
                    what = "image ID" if key == "image_id" else key
                    raise LockError(f"{image_id}: {origin[image_id]} records {what} "
                                    f"{_shown(have.get(key))}, {path} records {_shown(entry.get(key))}; "
                                    "not merged (build it once, or on builders that agree)", file=path)
            published = dict(have.get("published") or {})
            for repo, record in (entry.get("published") or {}).items():
                before = published.get(repo)
                if before is not None and before["digest"] != record["digest"]:
                    raise LockError(f"{image_id}: {origin[image_id]} records {repo}@{before['digest']}, "
                                    f"{path} records {repo}@{record['digest']}; not merged", file=path)
                tags = sorted(set((before or {}).get("tags", [])) | set(record.get("tags", [])))
                published[repo] = {"digest": record["digest"], "tags": tags}
            if published:
                have["published"] = dict(sorted(published.items()))
    return dict(sorted(merged.items()))


def _shown(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return _short(text) if isinstance(value, str) and value.startswith("sha256:") else str(text)[:120]


def write_lock(path: str | os.PathLike, entries: dict[str, dict]) -> None:
    """Write the lock atomically (temp file in the same folder, then rename)."""
    for image_id, entry in entries.items():
        _check_entry(image_id, entry, str(path))
    write_atomic(path, dumps(entries), perm=0o644, parents=True)


def _check_entry(image_id: str, entry, where: str) -> None:
    def bad(why: str) -> LockError:
        return LockError(f"image {image_id!r}: {why}", file=where)

    if not isinstance(image_id, str) or not _IMAGE_ID.match(image_id):
        raise LockError(f"invalid image id {image_id!r}", file=where)
    if not isinstance(entry, dict):
        raise bad("entry is not an object")
    missing = [k for k in ENTRY_KEYS if k not in entry]
    if missing:
        raise bad(f"missing {', '.join(missing)}")
    extra = sorted(set(entry) - set(ENTRY_KEYS) - set(OPTIONAL_KEYS))
    if extra:
        raise bad(f"unknown key {extra[0]!r}")
    if "bases" in entry:
        bases = entry["bases"]
        if not isinstance(bases, dict) or not all(
                isinstance(ref, str) and isinstance(b, dict) and set(b) == {"id", "digest"}
                for ref, b in bases.items()):
            raise bad("bases must map image references to {id, digest}")
        for ref, b in bases.items():
            if b["id"] is not None and not (isinstance(b["id"], str) and DIGEST_RE.match(b["id"])):
                raise bad(f"bases[{ref!r}].id is not sha256:<64 hex digits> or null")
            if b["digest"] is not None and not (isinstance(b["digest"], str)
                                                and is_repo_digest(b["digest"])):
                raise bad(f"bases[{ref!r}].digest is not NAME@sha256:<64 hex digits> or null")
    if "provenance" in entry:
        prov = entry["provenance"]
        if not isinstance(prov, dict) or set(prov) != set(PROVENANCE_KEYS):
            raise bad(f"provenance must be {{{', '.join(PROVENANCE_KEYS)}}}")
        for key in PROVENANCE_KEYS:
            value = prov[key]
            ok = value is None or (isinstance(value, str) and (
                DIGEST_RE.match(value) if key == "base_digest" else _HEX64.match(value)))
            if not ok or (key == "recipe_sha256" and value is None):
                raise bad(f"provenance.{key} is not a sha256 {'digest' if key == 'base_digest' else 'hex digest'}"
                          f"{'' if key == 'recipe_sha256' else ' or null'}")
    if "published" in entry:
        why = _published_problem(image_id, entry["published"])
        if why:
            raise bad(why)
    if not isinstance(entry["stack"], dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in entry["stack"].items()):
        raise bad("stack must map component names to version strings")
    for name, version in entry["stack"].items():
        if not _COMPONENT.match(name) or not _STACK_VALUE.match(version):
            raise bad(f"stack entry {name[:40]!r}: {version[:40]!r} is not a component name and a "
                      "version (letters, digits and . + _ ~ -)")
    if not isinstance(entry["dockerfile_sha256"], str) or not _HEX64.match(entry["dockerfile_sha256"]):
        raise bad("dockerfile_sha256 is not a sha256 hex digest")
    for key in ("base_image", "image_id"):
        if entry[key] is not None and not (isinstance(entry[key], str) and DIGEST_RE.match(entry[key])):
            raise bad(f"{key} is not sha256:<64 hex digits> or null")
    smoke = entry["smoke"]
    if smoke is not None:
        if not isinstance(smoke, dict) or set(smoke) != {"counts", "passed", "report_sha256"}:
            raise bad("smoke must be null or {counts, passed, report_sha256}")
        if not isinstance(smoke["passed"], bool) or not isinstance(smoke["counts"], dict) \
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                           for v in smoke["counts"].values()) \
                or set(smoke["counts"]) - set(STATUSES) \
                or not isinstance(smoke["report_sha256"], str) or not _HEX64.match(smoke["report_sha256"]):
            raise bad("smoke has values of the wrong type")


def _published_problem(image_id: str, published) -> str | None:
    """Why ``published`` is not a valid record for ``image_id`` (None when it is): a non-empty map
    of ``HOST[:PORT]/NAMESPACE/<image_id>`` (or the name of a multi-platform image, whose
    repository holds each platform's) to {digest: sha256:<64 hex>, tags: sorted, unique, non-empty
    list of tags}."""
    from ..platforms import repository_names
    from .publish import HOST_RE, NAMESPACE_RE, TAG_RE

    if not isinstance(published, dict) or not published:
        return "published must map HOST[:PORT]/NAMESPACE/IMAGE to {digest, tags}"
    for repo, record in published.items():
        host, _, path = repo.partition("/") if isinstance(repo, str) else ("", "", "")
        namespace, _, last = path.rpartition("/")
        if not (HOST_RE.match(host) and NAMESPACE_RE.match(namespace)
                and last in repository_names(image_id)):
            return f"published key {repo!r} is not HOST[:PORT]/NAMESPACE/{image_id}"
        if not isinstance(record, dict) or set(record) != {"digest", "tags"}:
            return f"published[{repo!r}] must be {{digest, tags}}"
        if not isinstance(record["digest"], str) or not DIGEST_RE.match(record["digest"]):
            return f"published[{repo!r}].digest is not sha256:<64 hex digits>"
        tags = record["tags"]
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and TAG_RE.match(t)
                                                             for t in tags):
            return f"published[{repo!r}].tags must be a non-empty list of tags"
        if tags != sorted(set(tags)):
            return f"published[{repo!r}].tags must be sorted and unique"
    return None


def record_published(path: str | os.PathLike, image_id: str, *, engine_image_id: str, repository: str,
                     digest: str, tags: list[str]) -> None:
    """Record in the lock at ``path`` that ``repository`` (HOST/NS/<image_id>) holds ``digest``
    under ``tags``, pushed from the engine image ``engine_image_id``; written atomically.

    Refused (one line) when the lock no longer records that engine image for ``image_id`` (it was
    rewritten since publish checked it): the record would vouch for another image. The tags are
    merged with those already recorded for the same digest; another digest replaces the record.
    One writer at a time (``one_writer``), so two publishes never lose each other's record."""
    with one_writer(path):
        _record_published(path, image_id, engine_image_id=engine_image_id, repository=repository,
                          digest=digest, tags=tags)


def _record_published(path, image_id: str, *, engine_image_id: str, repository: str, digest: str,
                      tags: list[str]) -> None:
    entries = read_lock(path)
    entry = entries.get(image_id)
    if entry is None or entry.get("image_id") != engine_image_id:
        raise LockError(f"{image_id}: pushed as {repository}@{digest}, but the lock no longer records "
                        f"image {_short(engine_image_id)} for it; not recorded (run `imagebuild lock`, "
                        "then publish again)", file=str(path))
    published = dict(entry.get("published") or {})
    before = published.get(repository)
    if before is not None and before["digest"] == digest:
        tags = [*before["tags"], *tags]
    published[repository] = {"digest": digest, "tags": sorted(set(tags))}
    entry["published"] = dict(sorted(published.items()))
    write_lock(path, entries)


def carry_published(old: dict[str, dict], new: dict[str, dict]) -> list[str]:
    """Copy each ``published`` record of the ``old`` lock entries into the ``new`` ones whose
    image id is the same (and not null); the ids of the images whose record was dropped."""
    dropped = []
    for image_id, entry in sorted(new.items()):
        record = (old.get(image_id) or {}).get("published")
        if not record:
            continue
        if entry.get("image_id") is not None and entry.get("image_id") == old[image_id].get("image_id"):
            entry["published"] = record
        else:
            entry.pop("published", None)
            dropped.append(image_id)
    return dropped


def read_lock(path: str | os.PathLike) -> dict[str, dict]:
    """The entries of the lock at ``path`` (image id -> entry); LockError naming the file (and
    line/column for JSON syntax errors) when it is malformed."""
    where = str(path)
    try:
        text = read_text(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError:
        raise LockError("no lock file (write one with `imagebuild lock`)", file=where) from None
    except UnicodeDecodeError:
        raise LockError("cannot read (not UTF-8)", file=where) from None
    except OSError as exc:
        raise LockError(f"cannot read ({exc.strerror or type(exc).__name__})", file=where) from None
    try:
        data = untrusted.loads(text)       # one key twice, a 5,000-digit number: refused
    except untrusted.BadData as exc:
        raise LockError(str(exc), file=where, line=exc.line, column=exc.column) from None
    if not isinstance(data, dict) or set(data) != {"images", "version"}:
        raise LockError("expected an object with exactly the keys 'images' and 'version'", file=where)
    if data["version"] != LOCK_VERSION:
        raise LockError(f"lock version {data['version']!r} is not supported (expected {LOCK_VERSION})",
                        file=where)
    if not isinstance(data["images"], dict):
        raise LockError("'images' is not an object", file=where)
    for image_id, entry in data["images"].items():
        _check_entry(image_id, entry, where)
    return data["images"]


def entry_for_image(engine, *, image_id: str, stack: dict[str, str], local_ref: str,
                    root: str | os.PathLike = ".", reports_dir: str | os.PathLike | None = None,
                    dockerfile_text: str | None = None) -> dict:
    """The current lock entry of one image, read from the repository and the engine.

    ``engine`` is an imagebuild Engine (None: base and built image ids are recorded as null). The
    base image is the engine id of the first external FROM of the Dockerfile: ``dockerfile_text``,
    the one `imagebuild build` renders from the matrix (what `lock` passes: no generated file is
    needed, so a pip-installed imagebuild locks from an empty folder), else the generated file.
    """
    from .publish import default_report_path
    from ..workspace import REPORTS

    if dockerfile_text is None:
        path = dockerfile_path(root, image_id)
        try:
            dockerfile_text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ImagebuildError(f"no generated Dockerfile for {image_id} (`imagebuild generate "
                                  f"{image_id}` writes it)", file=str(path)) from None
    dockerfile_sha = sha256_bytes(dockerfile_text.encode("utf-8"))
    refs = base_refs(dockerfile_text)
    base = built = None
    bases = {ref: {"id": None, "digest": None} for ref in refs}
    if engine is not None:
        for ref in refs:
            image = engine.lookup(ref)
            if image is None:
                continue
            bases[ref] = {"id": image.id, "digest": repo_digest(ref, list(image.repo_digests))}
        base = bases[refs[0]]["id"] if refs else None
        image = engine.lookup(local_ref)
        built = image.id if image is not None else None
    report = default_report_path(image_id, Path(root) / REPORTS if reports_dir is None else reports_dir)
    return compute_entry(stack=stack, dockerfile_sha256=dockerfile_sha, base_image=base, image_id=built,
                         smoke=read_report_summary(report), bases=bases)


def repo_digest(ref: str, repo_digests: list[str]) -> str | None:
    """The registry digest (``NAME@sha256:...``) among an image's RepoDigests that belongs to
    ``ref``'s repository; None when the engine has none (the image was never pulled or pushed)."""
    name = ref.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    names = {name, f"docker.io/{name}", f"docker.io/library/{name}"}
    for entry in sorted(repo_digests):
        if entry.split("@", 1)[0] in names and is_repo_digest(entry):
            return entry
    return None


# --------------------------------------------------------------------------- provenance

def context_sha256(folder: str | os.PathLike, *,
                   exclude: tuple[str, ...] = ("wheels", "sources")) -> str:
    """sha256 of a build context: of the sorted lines ``<sha256 of the file>  <relative path>``
    (a symlink: ``-> <target>`` instead of the file's hash), top-level ``exclude`` folders left
    out (host wheels: each is pinned by its sha256 in requirements/wheels.txt; source tarballs:
    each is pinned by its sha256 in the Dockerfile, which is hashed)."""
    root = Path(folder)
    lines = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/", 1)[0] in exclude:
            continue
        if path.is_symlink():
            lines.append(f"-> {os.readlink(path)}  {rel}")
        elif path.is_file():
            lines.append(f"{sha256_file(path)}  {rel}")
    return sha256_bytes(("\n".join(lines) + "\n").encode())


def recipe_sha256(spec, k) -> str:
    """context_sha256 of the context `imagebuild build` renders for ``spec`` from the knowledge
    ``k`` (the command's one load of its matrix): the Dockerfile, the smoke suite, image.json,
    the wheel lock."""
    import tempfile

    from ..render.output import write_context
    with tempfile.TemporaryDirectory(prefix="imagebuild-recipe-") as tmp:
        return context_sha256(write_context(spec, Path(tmp) / spec.id, k=k))


def _read_if_there(path: str | os.PathLike) -> bytes | None:
    """The file's bytes, or None when there is no such file (any other failure is one line)."""
    try:
        return read_bytes(path, MAX_DOCUMENT_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ImagebuildError(f"cannot read ({exc.strerror or type(exc).__name__})", file=str(path)) from None


def sbom_sha256_for(path: str | os.PathLike, built_id: str | None) -> str | None:
    """sha256 of the SBOM at ``path`` when it is the SBOM of the image ``built_id`` (its
    metadata.component bom-ref is ``image:<id>``, as `imagebuild sbom` writes it); None when there
    is none, or it describes another image (a stale SBOM vouches for nothing)."""
    raw = _read_if_there(path)
    if raw is None:
        return None
    try:
        doc = untrusted.loads(raw)
        subject = doc["metadata"]["component"]["bom-ref"]
    except (ValueError, KeyError, TypeError):
        raise ImagebuildError("not a CycloneDX SBOM written by `imagebuild sbom`", file=str(path)) from None
    return sha256_bytes(raw) if built_id and subject == f"image:{built_id}" else None


def report_sha256_for(path: str | os.PathLike, built_id: str | None) -> str | None:
    """sha256 of the smoke report at ``path`` when it reports on the image ``built_id``."""
    raw = _read_if_there(path)
    if raw is None:
        return None
    try:
        report = untrusted.loads(raw)
    except ValueError:
        raise ImagebuildError("malformed smoke report", file=str(path)) from None
    ok = isinstance(report, dict) and built_id is not None and report.get("image_id") == built_id
    return sha256_bytes(raw) if ok else None


def _lock_root(k) -> Path:
    from ..render.wheellock import lock_root
    return lock_root(k)


def provenance_for(engine, spec, k, *, root: str | os.PathLike, built_id: str | None,
                   report_path: str | os.PathLike, sbom_path: str | os.PathLike) -> dict:
    """The provenance of one image: the base it was built on (the built image's
    org.opencontainers.image.base.digest label), the recipe's hash, the wheel lock's, and the
    hashes of the SBOM and the smoke report that describe exactly this image id (null otherwise)."""
    base_digest = None
    if engine is not None and built_id is not None:
        value = engine.inspect(built_id).labels.get(BASE_DIGEST_LABEL)
        base_digest = value if isinstance(value, str) and DIGEST_RE.match(value) else None
    wheel_lock = getattr(spec, "wheel_lock", None)
    return {
        "base_digest": base_digest,
        "recipe_sha256": recipe_sha256(spec, k),
        "sbom_sha256": sbom_sha256_for(sbom_path, built_id),
        "test_report_sha256": report_sha256_for(report_path, built_id),
        # the wheel lock is read beside the matrix, as the renderer reads it (the packaged
        # matrix's locks are in the package, not in the folder a pip-installed CI runs in)
        "wheel_lock_sha256": sha256_file(_lock_root(k) / wheel_lock) if wheel_lock else None,
    }


def check_publishable(entry: dict | None, *, name: str, engine_id: str, report_raw: bytes,
                      lock_path: str) -> None:
    """Refuse (ImagebuildError, one line) unless the lock records, for this image, the engine image
    id being pushed and the sha256 of the report being trusted as its test report."""
    from .publish import NotTestedError

    def refuse(why: str) -> NotTestedError:
        return NotTestedError(f"{name}: {why}; not published (run `imagebuild lock` after "
                              "`imagebuild test`)", file=lock_path)

    if entry is None:
        raise refuse("not in the lock")
    if entry.get("image_id") != engine_id:
        raise refuse(f"the lock records image {_short(entry.get('image_id'))}, the engine holds "
                     f"{_short(engine_id)}")
    recorded = (entry.get("provenance") or {}).get("test_report_sha256")
    if recorded is None:
        raise refuse("the lock records no test report for that image")
    if recorded != sha256_bytes(report_raw):
        raise refuse("the smoke report is not the one the lock records")
