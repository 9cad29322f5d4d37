"""imagebuild context IMAGE... --output DIR: self-contained build contexts for builders without
imagebuild (issue 27).

Each image gets DIR/<image id>/: the Dockerfile, every file it copies (the smoke suite, image.json,
the wheel requirements), the source tarballs it binds (fetched into the source cache from
--sources or upstream and checked against matrix.yaml, as `build` does) and
imagebuild-context.json: the local reference the recipe's FROM lines use, the source date, and
the labels `imagebuild build` adds at build time (the clone's source URL and commit). Built by a
plain BuildKit `docker build` (DOCKER_BUILDKIT=1 with Docker's own client, or buildx),
`imagebuild normalize REF --context DIR/<image id>` rewrites the result as `build` does, with the
base image's labels read from the engine, to the image ID `imagebuild build` gives on BuildKit:
always for the recipes that mount (the CUDA images), and with --ca-bundle for the others, which
`build` otherwise gives to Docker's classic builder (its history differs, and so does its ID).
Built by `buildah bud --layers --format docker` and loaded into the engine, `normalize` gives it
the same ID too: it rewrites buildah's config as BuildKit writes it (imagebuild.builder.builders)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from .. import add_matrix_option
from ..reporter import Reporter
from ...errors import UsageError
from ...workspace import Workspace
from ...builder.jobs import CONTEXT_FILE


def configure(parser) -> None:
    add_matrix_option(parser)
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image ids or family names")
    parser.add_argument("--output", required=True, type=Path, metavar="DIR",
                        help="write DIR/<image id>/ for each image (an existing one is refused)")
    parser.add_argument("--sources", metavar="DIR|URL",
                        help="fill the source cache from this mirror folder or URL (default: upstream)")
    parser.add_argument("--json", action="store_true", help="print a JSON document")


def run(args) -> int:
    from ...render.run import MatrixRun
    from ...render.images import select
    from ...sourcedate import source_epoch
    from ...engines import dockerfile_needs_buildkit
    from ...builder.jobs import CA_SECRET, build_labels, jobs_for

    rep = Reporter.for_args("context", args)
    matrix_run = MatrixRun.open(args.matrix)    # the run's one read of the matrix
    k, every = matrix_run.k, dict(matrix_run.images)
    chosen = list(dict.fromkeys(s.id for s in select(every, args.images)))
    out = Path(args.output)
    # every folder this run writes, the images a chosen one is FROM included (a devel's runtime):
    # write_context replaces a folder, so an existing one (or a link, or a file) of that name is
    # refused before anything is written: nothing the run did not make is replaced
    from ...render.images import with_bases
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"{out} is not a folder (or is a link); nothing was written", argument="--output")
    for spec in with_bases([every[i] for i in chosen], every):
        where = out / spec.id
        if where.exists() or where.is_symlink():
            raise UsageError(f"{where} exists; nothing was written (choose another --output, or "
                             "remove it)", argument="--output")
    root = Workspace.of(args.matrix).root
    jobs = jobs_for(chosen, k, out, sources=args.sources, progress=rep.progress, every=every)
    docs, lines = [], []
    for job in jobs:
        if job.prepare is not None:
            job.prepare()       # the source tarballs, fetched into the cache and checked
        spec = every[job.image_id]
        # `imagebuild build` uses BuildKit where the recipe mounts (the CUDA images) or with
        # --ca-bundle, the classic builder else: the same ID comes only from the same builder, and
        # only BuildKit's --label leaves the history as it is (normalize adds the labels)
        mounts = dockerfile_needs_buildkit((job.context / "Dockerfile").read_text(encoding="utf-8"))
        doc = {"image_id": spec.id, "ref": spec.local_ref, "from_image": spec.from_image,
               "builder": "buildkit", "same_id_as": "imagebuild build" + ("" if mounts else " --ca-bundle FILE"),
               "source_date_epoch": source_epoch(spec.as_of), "labels": build_labels(spec, root),
               "secrets": {CA_SECRET: "optional: a CA bundle for the package index"}}
        (job.context / CONTEXT_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n",
                                                encoding="utf-8")
        docs.append(dict(doc, context=str(job.context)))
        ctx, archive = shlex.quote(str(job.context)), shlex.quote(f"{job.context}.tar")
        labels = " ".join(f"--label {shlex.quote(f'{key}={val}')}" for key, val in sorted(doc["labels"].items()))
        lines += [f"{spec.id}: {job.context}" + (f" (FROM {spec.from_image}: build it first)" if spec.from_image else ""),
                  f"  DOCKER_BUILDKIT=1 docker build [--secret id={CA_SECRET},src=CA.pem] "
                  + (labels + " " if labels else "") + f"-t {spec.local_ref} {ctx}",
                  f"  (or buildah: buildah bud --layers --format docker [--secret id={CA_SECRET},src=CA.pem] "
                  f"-t {spec.local_ref} {ctx} && buildah push {spec.local_ref} "
                  f"docker-archive:{archive}:{spec.local_ref} && docker load -i {archive})",
                  f"  imagebuild normalize {spec.local_ref} --context {ctx}"]
    rep.result({"contexts": docs}, "\n".join(lines))
    return 0
