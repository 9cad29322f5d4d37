"""What moved between an images.lock entry and the image as it is now, in words (`lock --check`,
`build --locked`, `find`), and the keys of an entry that the comparison knows: those every entry
has, those an older lock may lack, the provenance hashes, a build's inputs and what only an
engine can say (`lock --check --no-engine` leaves those out)."""

from __future__ import annotations

ENTRY_KEYS = ("base_image", "dockerfile_sha256", "image_id", "smoke", "stack")
OPTIONAL_KEYS = ("bases", "provenance", "published")   # a lock without them is still read
#: what an image was made from and what vouches for it (see provenance_for)
PROVENANCE_KEYS = ("base_digest", "recipe_sha256", "sbom_sha256", "test_report_sha256", "wheel_lock_sha256")


def _short(value) -> str:
    if value is None:
        return "none"
    text = str(value)
    return text[:19] if text.startswith("sha256:") else text


#: the inputs of a build: what `build --locked` compares before building
BUILD_INPUTS = ("stack", "dockerfile_sha256", "base_image", "bases")


def drift(lock_entry: dict, current: dict, *, only: tuple[str, ...] | None = None) -> list[str]:
    """Human-readable differences between a locked entry and the current one, in a stable order:
    stack components (sorted), then Dockerfile, base image, built image, smoke report.

    ``only`` restricts the comparison to some entry keys (e.g. BUILD_INPUTS before a build, when
    the image and its report do not exist yet).
    """
    if only is not None:
        unknown = set(only) - set(ENTRY_KEYS) - set(OPTIONAL_KEYS)
        if unknown:
            raise ValueError(f"unknown lock keys {sorted(unknown)}")
        lock_entry = {k: v for k, v in lock_entry.items() if k in only}
        current = {k: v for k, v in current.items() if k in only}
    out: list[str] = []
    old_stack, new_stack = lock_entry.get("stack") or {}, current.get("stack") or {}
    for comp in sorted(set(old_stack) | set(new_stack)):
        old, new = old_stack.get(comp), new_stack.get(comp)
        if old == new:
            continue
        if old is None:
            out.append(f"{comp} added ({new})")
        elif new is None:
            out.append(f"{comp} removed (was {old})")
        else:
            out.append(f"{comp} {old} -> {new}")
    if (only is None or "dockerfile_sha256" in only) and \
            lock_entry.get("dockerfile_sha256") != current.get("dockerfile_sha256"):
        out.append("Dockerfile sha256 changed")
    if (only is None or "base_image" in only) and lock_entry.get("base_image") != current.get("base_image"):
        out.append(f"base image {_short(lock_entry.get('base_image'))} -> {_short(current.get('base_image'))}")
    if (only is None or "bases" in only) and "bases" in lock_entry and "bases" in current:
        old_b, new_b = lock_entry["bases"], current["bases"]
        for ref in sorted(set(old_b) | set(new_b)):
            was, now = old_b.get(ref), new_b.get(ref)
            if was is None:
                out.append(f"base {ref} added")
            elif now is None:
                out.append(f"base {ref} removed")
            else:
                for key in ("id", "digest"):
                    if was.get(key) != now.get(key):
                        out.append(f"base {ref} {key} {_short(was.get(key))} -> {_short(now.get(key))}")
    if (only is None or "provenance" in only) and "provenance" in lock_entry and "provenance" in current:
        old_p, new_p = lock_entry["provenance"], current["provenance"]
        for key in PROVENANCE_KEYS:
            was, now = old_p.get(key), new_p.get(key)
            if was == now or key == "test_report_sha256":   # the smoke lines say it
                continue
            what = key.removesuffix("_sha256").replace("_", " ")
            if key == "base_digest":
                out.append(f"built on base {_short(was)} -> {_short(now)}")
            else:
                out.append(f"{what} sha256 {'added' if was is None else 'removed' if now is None else 'changed'}")
    if (only is None or "image_id" in only) and lock_entry.get("image_id") != current.get("image_id"):
        out.append(f"image {_short(lock_entry.get('image_id'))} -> {_short(current.get('image_id'))}")
    old_smoke, new_smoke = lock_entry.get("smoke"), current.get("smoke")
    if old_smoke != new_smoke:
        if old_smoke is None or new_smoke is None:
            out.append(f"smoke report {'none' if old_smoke is None else 'present'} -> "
                       f"{'none' if new_smoke is None else 'present'}")
        else:
            if old_smoke.get("passed") != new_smoke.get("passed"):
                verdict = {True: "passed", False: "failed"}
                out.append(f"smoke {verdict[bool(old_smoke.get('passed'))]} -> "
                           f"{verdict[bool(new_smoke.get('passed'))]}")
            old_c, new_c = old_smoke.get("counts") or {}, new_smoke.get("counts") or {}
            for status in sorted(set(old_c) | set(new_c)):
                if old_c.get(status, 0) != new_c.get(status, 0):
                    out.append(f"smoke {status} {old_c.get(status, 0)} -> {new_c.get(status, 0)}")
            if old_smoke.get("report_sha256") != new_smoke.get("report_sha256") and not any(
                    line.startswith("smoke ") for line in out):
                out.append("smoke report sha256 changed")
    return out


#: what only an engine can say: the built and base images' ids and digests, and the SBOM (recorded
#: only when it describes the built image id)
ENGINE_FIELDS = ("image_id", "base_image", "bases")
ENGINE_PROVENANCE = ("base_digest", "sbom_sha256")


def engine_free(entry: dict) -> dict:
    """``entry`` without what only an engine can say (ENGINE_FIELDS, ENGINE_PROVENANCE): what a
    machine with no engine compares (`lock --check --no-engine`, e.g. the job that merges the
    shard locks of several builders)."""
    out = {k: v for k, v in entry.items() if k not in ENGINE_FIELDS}
    if isinstance(out.get("provenance"), dict):
        out["provenance"] = {k: v for k, v in out["provenance"].items() if k not in ENGINE_PROVENANCE}
    return out


def drift_all(locked: dict[str, dict], current: dict[str, dict], *,
              engine: bool = True) -> dict[str, list[str]]:
    """drift per image id over both sides; images only in one side are reported as such. With
    ``engine`` False, what only an engine can say is left out of the comparison (engine_free)."""
    if not engine:
        locked = {k: engine_free(v) for k, v in locked.items()}
        current = {k: engine_free(v) for k, v in current.items()}
    result: dict[str, list[str]] = {}
    for image_id in sorted(set(locked) | set(current)):
        if image_id not in locked:
            result[image_id] = ["not in the lock"]
        elif image_id not in current:
            result[image_id] = ["in the lock but no longer declared"]
        else:
            lines = drift(locked[image_id], current[image_id])
            if lines:
                result[image_id] = lines
    return result


def without_bases(entry: dict, refs) -> dict:
    """``entry`` without the bases among ``refs`` (images `build` makes in the same run from their
    own locked inputs: a devel image's runtime), and without ``base_image`` when it was one of
    theirs. The entry itself is not changed."""
    bases = entry.get("bases") or {}
    drop = [b for ref, b in bases.items() if ref in refs]
    if not drop:
        return entry
    out = dict(entry, bases={ref: b for ref, b in bases.items() if ref not in refs})
    if any(b.get("id") == entry.get("base_image") for b in drop):
        out["base_image"] = None
    return out
