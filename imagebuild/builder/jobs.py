"""The build stage's jobs: each matrix image rendered into a build context (or a ready context
taken as it is), with the labels a build adds, the source tarballs it binds, and the platform it
is built for. `imagebuild build` and `imagebuild context` hand these to the scheduler."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import UsageError
from ..workspace import Workspace

CA_SECRET = "ca-bundle"   # RUN --mount=type=secret,id=ca-bundle  ->  /run/secrets/ca-bundle
#: the metadata file `imagebuild context` writes into each context (labels, source date)
CONTEXT_FILE = "imagebuild-context.json"


def build_labels(spec, root: Path) -> dict[str, str]:
    """Labels added at build time, beside those the Dockerfile sets: the project's repository from
    `git remote get-url origin` (https only, credentials removed) when matrix.yaml states none.
    A fact of the clone, so it is kept out of the committed recipes; no remote, no label.
    The commit (org.opencontainers.image.revision) when the clone has no uncommitted change.
    The base image's name and digest are added by reproducible.BuildTimeEngine, just before each
    build."""
    from ..render.images import SOURCE_LABEL, git_source_url
    from ..builder.reproducible import REVISION_LABEL, git_revision
    labels = {}
    url = None if spec.labels.get(SOURCE_LABEL) else git_source_url(str(root))
    if url:
        labels[SOURCE_LABEL] = url
    rev = git_revision(root)
    if rev:
        labels[REVISION_LABEL] = rev
    return labels


def jobs_for(image_ids: list[str], k, workdir: Path, *,
             secrets: dict[str, Path] | None = None, sources: str | None = None,
             progress=None, every: dict | None = None) -> list:
    """BuildJobs for matrix images: each rendered into workdir/<id> by imagebuild.render.

    `k` is the run's one loaded matrix (imagebuild.knowledge.load): the images are expanded from
    it and `write_context(spec, dest, k=k)` renders each context from it, so a build never reads
    another matrix. Images a requested one depends on are added. Just before each build, the
    tarballs the image compiles are put in the source cache (.imagebuild/sources beside the
    matrix), from `sources` (a mirror folder or URL) or their upstream URLs, each checked against
    the matrix's sha256, and from there into its context. ``every``: the matrix's images by id,
    when the run has expanded them already.
    """
    from ..render import sources as S
    from ..builder.scheduler import BuildJob
    from ..render.images import expand, with_bases
    from ..render.output import write_context

    specs = every if every is not None else {s.id: s for s in expand(k)[0]}
    unknown = [i for i in image_ids if i not in specs]
    if unknown:
        raise UsageError(f"unknown image {unknown[0]!r} (known: {', '.join(sorted(specs))})",
                         argument="IMAGE")
    ws = Workspace.of(k.path)
    jobs = []
    for spec in with_bases([specs[i] for i in image_ids or sorted(specs)], specs):
        ctx = write_context(spec, Path(workdir) / spec.id, k=k)
        # a devel image is FROM its runtime image, which compiled them: it reads no tarball
        tarballs = [] if spec.from_image else S.for_image(k, spec, spec.sources)
        prepare = None
        if tarballs:
            prepare = functools.partial(_put_sources, tarballs, Path(ctx),
                                        ws.sources, sources, progress)
        jobs.append(BuildJob(image_id=spec.id, context=Path(ctx), ref=spec.local_ref,
                             labels=build_labels(spec, ws.root), secrets=dict(secrets or {}),
                             depends_on=tuple(spec.depends_on), prepare=prepare,
                             platform=foreign_platform(spec)))
    return jobs


def foreign_platform(spec) -> str | None:
    """The OCI platform to build ``spec`` for when it is not this host's (linux/arm64 on an
    x86_64 builder), else None: the engine's own, as before platforms were listed."""
    from ..builder.emulation import PLATFORMS, is_native
    target = PLATFORMS.get(spec.oci_platform)
    return None if target is None or is_native(target) else target.oci


def check_platforms(specs) -> None:
    """Before anything is rendered or downloaded: each foreign platform asked for can run here
    (binfmt_misc and QEMU), or one line naming the image and the fix."""
    from ..builder.emulation import PLATFORMS, emulation_for, host_platform
    host = host_platform()
    skip = f" (or build this host's images only: --platform {host.oci})" if host else ""
    for spec in specs:
        oci = foreign_platform(spec)
        if oci is not None:
            emulation_for(spec.id, PLATFORMS[oci], hint=skip)


def _put_sources(tarballs, ctx: Path, cache: Path, origin: str | None, progress) -> None:
    """Before an image's build: its tarballs into the source cache (from `origin` or upstream,
    each checked against the matrix by sources.fetch), then into the context's sources/, which
    the Dockerfile binds (and checks again): hard links where the file system allows, copies
    otherwise."""
    import shutil

    from ..render import sources as S
    S.fetch(tarballs, cache, origin, progress=progress, argument="--sources")
    (ctx / "sources").mkdir(exist_ok=True)
    for t in tarballs:
        try:
            os.link(cache / t.file, ctx / "sources" / t.file)
        except OSError:
            shutil.copy2(cache / t.file, ctx / "sources" / t.file)


def jobs_for_contexts(contexts: list[Path], *, secrets: dict[str, Path] | None = None) -> list:
    from ..builder.scheduler import BuildJob
    from ..engines import NAME_RE, check_ref
    jobs = []
    for ctx in contexts:
        if not (ctx / "Dockerfile").is_file():
            raise UsageError(f"{ctx} has no Dockerfile", argument="--context")
        image_id = ctx.resolve().name.lower()
        if not NAME_RE.match(image_id):
            raise UsageError(f"the folder name {image_id!r} cannot be an image id", argument="--context")
        jobs.append(BuildJob(image_id=image_id, context=ctx, ref=check_ref(f"imagebuild/{image_id}:local"),
                             secrets=dict(secrets or {})))
    return jobs
