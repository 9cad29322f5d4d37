"""`imagebuild slurm-script IMAGE --nodes N --gpus-per-node G [--output FILE] [--image-path PATH |
--image-ref REF] [--torchrun SCRIPT ARGS...]`

Writes (or prints) an sbatch script that runs the smoke suite inside IMAGE across N nodes with
`srun --mpi=pmix` (reports to a folder of the host), or the user's own torchrun job, using the
NCCL/UCX settings the GPUDirect probe recommends on each node.
"""

from __future__ import annotations

import argparse
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
    parser.add_argument("--image-ref", metavar="REF",
                        help="a registry reference pyxis pulls instead ([USER@][REGISTRY#]IMAGE[:TAG|@sha256:...], "
                             "or HOST[:PORT]/NS/IMAGE:TAG; `imagebuild tags IMAGE --registry` prints it)")
    parser.add_argument("--runtime", choices=("pyxis", "oci"), default="pyxis",
                        help="pyxis/enroot (--container-image=SQSH) or Slurm's OCI support (--container=BUNDLE)")
    parser.add_argument("--only", nargs="+", metavar="CHECK", default=[], help="run only these smoke checks")
    parser.add_argument("--tier", choices=("cpu", "gpu"), default=None,
                        help="smoke tier (default: gpu when G > 0)")
    parser.add_argument("--time", default="00:30:00",
                        help="time limit in Slurm's formats: MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, "
                             "DAYS-HOURS[:MINUTES[:SECONDS]] (default 00:30:00)")
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--reports-dir", default=None, metavar="DIR",
                        help="absolute host folder for the smoke reports, on a file system the nodes share "
                             "(default: <submit dir>/imagebuild-reports)")
    parser.add_argument("--torchrun", nargs=argparse.REMAINDER, metavar="SCRIPT",
                        help="instead of the smoke suite: the user's training script and its arguments (the "
                             "rest of the line), run by torchrun on every node, one worker per GPU")
    parser.add_argument("--output", metavar="FILE", help="write the script here (default: stdout)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON document: the script's text, where it was written, the job's shape")
    add_matrix_option(parser)


def run(args) -> int:
    from ...deliver import slurm
    from ...render.run import MatrixRun

    image_id = slurm.check_name(args.image, "IMAGE")
    spec_image = MatrixRun.open(args.matrix).lookup([image_id])[image_id]  # unknown: one clear line
    stack = getattr(spec_image, "stack", {}) or {}
    torchrun = args.torchrun is not None
    if torchrun and stack.get("pytorch", "none") == "none":
        raise UsageError(f"{image_id} has no PyTorch: a torchrun job needs a PyTorch image", argument="--torchrun")
    if args.image_path and args.image_ref:
        raise UsageError("give --image-path or --image-ref, not both", argument="--image-ref")
    image_path = args.image_path
    if image_path is None and args.image_ref is None:
        suffix = ".bundle" if args.runtime == "oci" else ".sqsh"
        image_path = os.path.abspath(image_id + suffix)
    spec = slurm.SbatchSpec(
        image_path=image_path, image_ref=args.image_ref, nodes=args.nodes,
        gpus_per_node=args.gpus_per_node, tasks_per_node=args.tasks_per_node, runtime=args.runtime,
        checks=tuple(args.only), tier=args.tier, time_limit=args.time,
        job_name=f"{'train' if torchrun else 'smoke'}-{image_id}"[:64], partition=args.partition,
        account=args.account, reports_dir=args.reports_dir, job="torchrun" if torchrun else "smoke",
        command=tuple(args.torchrun or ()), cpu_image=stack.get("cuda", "none") == "none")
    text = slurm.render_sbatch(spec)
    rep = Reporter.for_args("slurm-script", args)
    if args.output:
        slurm.write_script(args.output, text)
        rep.progress(f"wrote {args.output}")
    rep.result({"image": image_id, "output": args.output, "image_path": image_path,
                "image_ref": spec.image_ref, "job": spec.job, "tier": None if torchrun else spec.smoke_tier,
                "runtime": args.runtime, "job_name": spec.job_name, "nodes": args.nodes,
                "gpus_per_node": args.gpus_per_node, "tasks_per_node": args.tasks_per_node,
                "time": spec.time_limit, "script": text},
               None if args.output else text, end="")
    return 0
