"""imagebuild normalize REF --context DIR: rewrite an image built outside imagebuild from a context
`imagebuild context` wrote as `imagebuild build` rewrites its own (fixed times, layers re-packed
in a fixed order, no build-host noise), with the labels `build` adds at build time: the base
image's name and digest as the engine holds it now, and those imagebuild-context.json records.
The same inputs give the image ID `imagebuild build` gives."""

from __future__ import annotations

from pathlib import Path

from ..reporter import Reporter
from ...errors import UsageError
from ...builder.jobs import CONTEXT_FILE

from ...builder.reproducible import REVISION_LABEL
from ...render.project import SOURCE_LABEL

#: the labels imagebuild-context.json may carry: those build_labels makes from the clone
CONTEXT_LABELS = (SOURCE_LABEL, REVISION_LABEL)


def configure(parser) -> None:
    parser.add_argument("ref", metavar="REF", help="the built image in the engine (its reference or ID)")
    parser.add_argument("--context", required=True, type=Path, metavar="DIR",
                        help=f"the context it was built from (with its {CONTEXT_FILE})")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


def _read_context(folder: Path) -> tuple[dict, str]:
    from ...localfile import read_text
    from ... import untrusted
    if folder.is_symlink() or not folder.is_dir():
        raise UsageError(f"{folder}: not a folder (or a symbolic link): a context is the folder "
                         "`imagebuild context` wrote", argument="--context")
    try:
        meta = untrusted.loads(read_text(folder / CONTEXT_FILE, 1 << 20))
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
    foreign = sorted(set(labels) - set(CONTEXT_LABELS))
    if foreign:     # provenance comes from the engine and the bytes, never from the file
        raise UsageError(f"{folder / CONTEXT_FILE}: sets the label {foreign[0]!r}, which "
                         "`imagebuild context` never writes there (only the clone's source and "
                         "revision); refused: the base and image labels come from the engine",
                         argument="--context")
    return meta, dockerfile


def _check_base(engine, ref: str, base: str | None) -> None:
    """The image ``ref`` was built on ``base``, the Dockerfile's last FROM: the base's layers are
    the first layers of the image, in order. An edited FROM (or another image) is refused: the
    base labels would claim a base it was not built on."""
    if base is None:
        return
    built, parent = engine.lookup(ref), engine.lookup(base)
    if built is None:
        raise UsageError(f"{ref} is not in the engine", argument="REF")
    if parent is None:
        raise UsageError(f"the context's base {base} is not in the engine: nothing says what "
                         f"{ref} was built on", argument="--context")
    if not parent.layers or tuple(built.layers[:len(parent.layers)]) != tuple(parent.layers):
        raise UsageError(f"{ref} was not built on {base} (the base's layers are not the first "
                         "layers of the image); refused: the context does not describe this image",
                         argument="--context")


def run(args) -> int:
    from ...builder.reproducible import base_labels, normalize_image
    from ...dockerfile import final_base
    from ...engines import get_engine

    meta, dockerfile = _read_context(Path(args.context))
    engine = get_engine("docker")
    rep = Reporter.for_args("normalize", args)
    _check_base(engine, args.ref, final_base(dockerfile))
    labels = {**meta["labels"], **base_labels(engine, dockerfile)}     # the engine's say last
    new_id = normalize_image(engine, args.ref, meta["source_date_epoch"], base=final_base(dockerfile),
                             workdir=Path(args.context).parent, progress=rep.progress, labels=labels,
                             dockerfile=dockerfile)
    rep.result({"ref": args.ref, "image_id": new_id, "labels_added": labels}, f"{args.ref} {new_id}")
    return 0
