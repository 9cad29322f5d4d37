"""imagebuild notes IMAGE|REF: the human page of an image (Markdown): what is inside it and where
each version comes from, the driver it needs and its mode on each supported branch, its wheels,
and what it was proven and published with (images.lock). REF: a reference the lock records as
published (HOST[:PORT]/NS/IMAGE:TAG or @DIGEST), or an image's local reference."""

from __future__ import annotations

from .. import add_matrix_option
from ...errors import UsageError
from ..reporter import Reporter

EXAMPLES = """examples:
  imagebuild notes smoke-cpu
  imagebuild notes pytorch-2.13.0-cu130-ubuntu24.04-runtime --output NOTES.md
  imagebuild notes registry.example.org:5000/hpc/smoke-cpu:2.13.0-cpu-debian12 --lock images.lock
"""


def configure(parser) -> None:
    parser.add_argument("image", metavar="IMAGE|REF",
                        help="an image id of the matrix, or a reference images.lock records")
    parser.add_argument("--lock", dest="lock_in", default=None, metavar="FILE",
                        help="images.lock to read the proof from (default: beside the matrix, or "
                             "the current folder for the packaged matrix); a missing lock is said")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="write the page to FILE (whole or not at all) instead of printing it")
    parser.add_argument("--date", default=None,
                        help="the day branch support is judged on (default: the matrix's as_of)")
    parser.add_argument("--json", action="store_true", help="print the page inside a JSON document")
    add_matrix_option(parser)
    parser.epilog = EXAMPLES


def _image_of(text: str, specs: dict, locked: dict) -> str:
    if text in specs:
        return text
    for spec in specs.values():
        if text == spec.local_ref:
            return spec.id
    name, _, tag = text.rpartition(":") if "@" not in text else (text.split("@")[0], "", "")
    digest = text.split("@", 1)[1] if "@" in text else None
    for image_id, entry in sorted(locked.items()):
        for repo, rec in (entry.get("published") or {}).items():
            if digest and text.split("@")[0] == repo and rec.get("digest") == digest:
                return image_id
            if not digest and name == repo and tag in (rec.get("tags") or []):
                return image_id
    raise UsageError(f"{text!r} is neither an image of the matrix nor a reference the lock records "
                     "as published (`imagebuild images` lists the ids)", argument="IMAGE|REF")


def run(args) -> int:
    import datetime as _dt
    from pathlib import Path

    from ...atomic import write_atomic
    from ...deliver import lockfile, notes
    from ...errors import LockError
    from ...render.run import MatrixRun
    from ...workspace import Workspace

    if args.date is not None:
        try:
            _dt.date.fromisoformat(args.date)
        except ValueError:
            raise UsageError(f"malformed date {args.date!r} (YYYY-MM-DD)", argument="--date") from None
    matrix_run = MatrixRun.open(args.matrix)
    k, specs = matrix_run.k, matrix_run.images
    lock_path = Path(args.lock_in) if args.lock_in else Workspace.of(args.matrix).lock
    try:
        locked = lockfile.read_lock(lock_path)
    except LockError:
        if args.lock_in:
            raise
        locked = {}     # no lock yet: the page says the image is not recorded there
    image_id = _image_of(args.image, specs, locked)
    page = notes.render(k, specs[image_id], locked.get(image_id), date=args.date)
    rep = Reporter.for_args("notes", args)
    if args.output:
        write_atomic(Path(args.output), page.encode("utf-8"))
        rep.result({"image": image_id, "output": args.output, "markdown": page},
                   f"{args.output}: the notes of {image_id} ({len(page.encode())} bytes)")
    else:
        rep.result({"image": image_id, "markdown": page}, page, end="")
    return 0
