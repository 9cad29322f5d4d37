"""imagebuild normalize REF --context DIR: rewrite an image built outside imagebuild from a context
`imagebuild context` wrote as `imagebuild build` rewrites its own (fixed times, layers re-packed
in a fixed order, no build-host noise), with the labels `build` adds at build time: the base
image's name and digest as the engine holds it now, and those imagebuild-context.json records.
The same inputs give the image ID `imagebuild build` gives."""

from __future__ import annotations

import json
from pathlib import Path

from ..reporter import Reporter
from ...errors import UsageError
from .context import CONTEXT_FILE


def configure(parser) -> None:
    parser.add_argument("ref", metavar="REF", help="the built image in the engine (its reference or ID)")
    parser.add_argument("--context", required=True, type=Path, metavar="DIR",
                        help=f"the context it was built from (with its {CONTEXT_FILE})")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


def _read_context(folder: Path) -> tuple[dict, str]:
    from ...localfile import read_text
    try:
        meta = json.loads(read_text(folder / CONTEXT_FILE, 1 << 20))
        dockerfile = read_text(folder / "Dockerfile", 4 << 20)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{folder}: not a context `imagebuild context` wrote ({type(exc).__name__}: "
                         f"{getattr(exc, 'strerror', None) or exc})", argument="--context") from None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    epoch = meta.get("source_date_epoch") if isinstance(meta, dict) else None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()) \
            or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise UsageError(f"{folder / CONTEXT_FILE}: no labels mapping or source_date_epoch",
                         argument="--context")
    return meta, dockerfile


def run(args) -> int:
    from ...build.reproducible import base_labels, normalize_image
    from ...dockerfile import final_base
    from ...engines import get_engine

    meta, dockerfile = _read_context(Path(args.context))
    engine = get_engine("docker")
    rep = Reporter.for_args("normalize", args)
    labels = {**base_labels(engine, dockerfile), **meta["labels"]}
    new_id = normalize_image(engine, args.ref, meta["source_date_epoch"], base=final_base(dockerfile),
                             workdir=Path(args.context).parent, progress=rep.progress, labels=labels,
                             dockerfile=dockerfile)
    rep.result({"ref": args.ref, "image_id": new_id, "labels_added": labels}, f"{args.ref} {new_id}")
    return 0
