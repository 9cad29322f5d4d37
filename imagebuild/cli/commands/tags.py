"""imagebuild tags IMAGE: the tags an image is published under (version-derived, then dated).

With --registry, each tag's full references: the docker form (HOST/NS/ID:TAG) and, beside it, the
form enroot and pyxis take (HOST#NS/ID:TAG, for `srun --container-image=`)."""

from __future__ import annotations

from .. import add_matrix_option
from ..reporter import Reporter


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("image", metavar="IMAGE")
    parser.add_argument("--registry", metavar="HOST[:PORT]/NAMESPACE",
                        help="print full references under this registry: docker's, then enroot/pyxis's")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...deliver.publish import parse_target

    target = parse_target(args.registry) if args.registry else None
    spec = MatrixRun.open(args.matrix).select([args.image])[0]
    rows = []
    for tag in spec.tags:
        row = {"tag": tag}
        if target is not None:
            repo = target.repository(spec.id)
            row["docker"] = f"{target.host}/{repo}:{tag}"
            row["enroot"] = f"{target.host}#{repo}:{tag}"
        rows.append(row)
    Reporter.for_args("tags", args).result(
        {"image": spec.id, "tags": rows},
        "\n".join(f"{row['docker']}  {row['enroot']}" if target is not None else row["tag"]
                  for row in rows) if rows else None)
    return 0
