"""One module per command: `configure(parser)` adds its arguments, `run(args)` does the work
through the core modules and prints. Core modules never print."""


def knowledge_used(args, k) -> dict:
    """Which knowledge an answer came from: the matrix's path, where that choice came from
    (workspace.ORIGINS), its `as_of` date and the sha256 of its bytes, so that two answers can be
    told apart when they came from different matrices."""
    from pathlib import Path

    from ... import __version__
    from ...digests import sha256_file

    path = Path(k.path)
    origin = getattr(args, "matrix_origin", "--matrix")
    digest = getattr(k, "sha256", None) or sha256_file(path)
    return {"path": str(path.resolve()), "origin": origin, "as_of": k.as_of,
            "sha256": digest,
            **({"imagebuild": __version__} if origin == "packaged" else {})}


def knowledge_of(args) -> dict | None:
    """`knowledge_used` for the --json envelope of any command with --matrix: the knowledge the
    command loaded (knowledge.loader.LOADED), else read from the file (a command that failed
    before loading it): None when it cannot be read or has no `as_of`, the error having been said
    already."""
    from pathlib import Path
    from types import SimpleNamespace

    from ...errors import ImagebuildError
    from ...knowledge import load_yaml
    from ...knowledge.loader import loaded

    seen = loaded(args.matrix)
    if seen is not None:        # the command loaded it: the bytes it read, not a second read
        digest, as_of = seen
        return knowledge_used(args, SimpleNamespace(path=args.matrix, as_of=as_of, sha256=digest))
    try:
        doc = load_yaml(Path(args.matrix))
    except (ImagebuildError, OSError):
        return None
    as_of = doc.get("as_of") if isinstance(doc, dict) else None
    if as_of is None:
        return None
    try:
        return knowledge_used(args, SimpleNamespace(path=args.matrix, as_of=str(as_of)))
    except OSError:
        return None


def knowledge_line(info: dict) -> str:
    """One line of text for `knowledge_used`'s answer."""
    where = {"--matrix": "given by --matrix", "$IMAGEBUILD_MATRIX": "from $IMAGEBUILD_MATRIX",
             "./matrix.yaml": "from the current folder",
             "packaged": f"packaged with imagebuild {info.get('imagebuild', '')}".rstrip()}[info["origin"]]
    return f"knowledge: {info['path']} ({where}), as of {info['as_of']}"
