"""Before a `build --locked`: every image is in images.lock and its build inputs are what the lock
records; the bases to pin the build to."""

from __future__ import annotations

from pathlib import Path


def check_locked(image_ids: list[str], k, lock_path: Path, *, every: dict | None = None) -> dict[str, dict[str, dict]]:
    """Before building: every image is in the lock, and its build inputs are what the lock says.
    `k` is the run's loaded matrix; the generated recipes are read beside it. Returns the bases to
    build from (imagebuild.builder.pinning): image ref -> {FROM ref -> the lock's {"id", "digest"}}, for
    every external base (a matrix image another one starts from is built in this run instead).
    ``every``: the matrix's images by id, when the run has expanded them already."""
    from ..deliver import lockfile
    from ..engines import get_engine
    from ..errors import BuildError
    from ..render.images import expand, select, with_bases

    locked = lockfile.read_lock(lock_path)
    every = every if every is not None else {s.id: s for s in expand(k)[0]}
    specs = with_bases(select(every, image_ids), every)
    engine = get_engine()
    root = Path(k.path).resolve().parent
    problems = []
    ours = {s.local_ref for s in every.values()}
    pins = {spec.local_ref: {ref: dict(base) for ref, base in (locked[spec.id].get("bases") or {}).items()
                             if ref not in ours}
            for spec in specs if spec.id in locked}
    from ..render.renderer import Renderer
    renderer = Renderer()      # the Dockerfiles this build renders, as `lock` hashed them
    for spec in specs:
        if spec.id not in locked:
            users = [s.id for s in specs if spec.id in s.depends_on]
            problems.append(f"{spec.id}: not in {lock_path.name}"
                            + (f" (the image {users[0]} is built FROM it)" if users else ""))
            continue
        current = lockfile.entry_for_image(engine, image_id=spec.id, stack=dict(spec.stack),
                                           local_ref=spec.local_ref, root=root,
                                           dockerfile_text=renderer.dockerfile(spec, k))
        # a base that is a matrix image (a devel's runtime) is built in this run from its own
        # locked inputs, checked above: its engine id is no input of this image's build
        lines = lockfile.drift(lockfile.without_bases(locked[spec.id], ours),
                               lockfile.without_bases(current, ours), only=lockfile.BUILD_INPUTS)
        problems += [f"{spec.id}: {line}" for line in lines]
    if problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        # `lock IMAGE` locks what `build IMAGE` builds (the runtime of a devel too): the images
        # asked for, when named by id (`lock` takes no family name), accept every line above
        named = image_ids and all(i in every for i in image_ids)
        accept = " ".join(["imagebuild lock", *(image_ids if named else [])])
        raise BuildError(f"refusing to build: drifted from {lock_path}: "
                         + "; ".join(problems[:3]) + more + f" (run `{accept}` to accept)")
    return pins
