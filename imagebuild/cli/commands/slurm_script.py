"""`imagebuild slurm-script IMAGE --nodes N --gpus-per-node G [--output FILE] [--image-path PATH]`

Writes (or prints) an sbatch script that runs the smoke suite inside IMAGE across N nodes with
`srun --mpi=pmix`, using the NCCL/UCX settings the GPUDirect probe recommends on each node.
"""

from __future__ import annotations

import os

from ...errors import UsageError
from ..reporter import Reporter


def _int(text: str) -> int:
    # strict: digits only, so "1; rm -rf /" or "$(id)" never become a count
    if not text.isdigit() or len(text) > 6:
        raise UsageError(f"{text!r} is not a whole number")
    return int(text)


def configure(parser) -> None:
    from .. import add_matrix_option

    parser.add_argument("image", metavar="IMAGE", help="an image id from the matrix")
    parser.add_argument("--nodes", required=True, type=_int, metavar="N", help="nodes (1..4096)")
    parser.add_argument("--gpus-per-node", required=True, type=_int, metavar="G",
                        help="GPUs per node (0..64); one task per GPU")
    parser.add_argument("--tasks-per-node", type=_int, default=None, metavar="T",
                        help="tasks per node (default: G, or 1 without GPUs)")
    parser.add_argument("--image-path", metavar="PATH",
                        help="absolute path of the exported image on the cluster "
                             "(default: ./<IMAGE>.sqsh, or ./<IMAGE>.bundle with --runtime oci, made absolute)")
    parser.add_argument("--runtime", choices=("pyxis", "oci"), default="pyxis",
                        help="pyxis/enroot (--container-image=SQSH) or Slurm's OCI support (--container=BUNDLE)")
    parser.add_argument("--only", nargs="+", metavar="CHECK", default=[], help="run only these smoke checks")
    parser.add_argument("--tier", choices=("cpu", "gpu"), default=None,
                        help="smoke tier (default: gpu when G > 0)")
    parser.add_argument("--time", default="00:30:00", help="time limit (default 00:30:00)")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--reports-dir", default=None, metavar="DIR",
                        help="absolute host folder for the reports (pyxis; default: submit dir)")
    parser.add_argument("--output", metavar="FILE", help="write the script here (default: stdout)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON document: the script's text, where it was written, the job's shape")
    add_matrix_option(parser)


def run(args) -> int:
    from ...deliver import slurm
    from ...render.run import MatrixRun

    image_id = slurm.check_name(args.image, "IMAGE")
    MatrixRun.open(args.matrix).lookup([image_id])  # an unknown image is one clear line
    image_path = args.image_path
    if image_path is None:
        suffix = ".bundle" if args.runtime == "oci" else ".sqsh"
        image_path = os.path.abspath(image_id + suffix)
    spec = slurm.SbatchSpec(
        image_path=image_path, nodes=args.nodes, gpus_per_node=args.gpus_per_node,
        tasks_per_node=args.tasks_per_node, runtime=args.runtime, checks=tuple(args.only),
        tier=args.tier, time_limit=args.time, job_name=f"smoke-{image_id}"[:64],
        partition=args.partition, account=args.account, reports_dir=args.reports_dir)
    text = slurm.render_sbatch(spec)
    rep = Reporter.for_args("slurm-script", args)
    if args.output:
        slurm.write_script(args.output, text)
        rep.progress(f"wrote {args.output}")
    rep.result({"image": image_id, "output": args.output, "image_path": image_path,
                "runtime": args.runtime, "job_name": spec.job_name, "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node, "tasks_per_node": args.tasks_per_node,
                "script": text},
               None if args.output else text, end="")
    return 0
