"""imagebuild tags IMAGE: the tags an image is published under (version-derived, then dated)."""

from __future__ import annotations

from ..cli import add_matrix_option


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("image", metavar="IMAGE")
    parser.add_argument("--registry", metavar="HOST[:PORT]/NAMESPACE",
                        help="print full references under this registry")


def run(args) -> int:
    from .. import images as I

    spec = I.select(I.load_images(args.matrix), [args.image])[0]
    for tag in spec.tags:
        if args.registry:
            print(f"{args.registry.rstrip('/')}/{spec.id}:{tag}")
        else:
            print(tag)
    return 0
