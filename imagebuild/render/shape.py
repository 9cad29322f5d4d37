"""The rendered text has the structure its steps make, and nothing else: a Dockerfile exactly
the instructions (and stages) its steps make, a Singularity definition exactly its sections, so
no value can add a line, an instruction or a section."""

from __future__ import annotations
from .checked import show as _show
from ..errors import RenderError
from .images import ImageSpec
from .steps import Stage


DOCKER_INSTRUCTIONS = frozenset({"FROM", "SHELL", "RUN", "WORKDIR", "COPY", "ENV", "LABEL", "ARG",
                                 "ENTRYPOINT", "CMD"})


def _docker_shape(stages: list[Stage], spec: ImageSpec) -> tuple[int, int]:
    """(instructions, comment lines) the Dockerfile template lays out for these stages."""
    instructions = comments = 0
    for stage in stages:
        instructions += 2  # FROM, SHELL
        for step in stage.steps:
            instructions += (len(step.items) if step.kind == "entrypoint" else 1) + \
                (2 if step.kind == "run" and step.workdir else 0)
            comments += 1 if step.comment else 0
    comments += 3 + (1 if spec.min_driver else 0)  # generated-by, image, stack, minimum driver
    return instructions, comments


def _check_docker(text: str, stages: list[Stage], spec: ImageSpec) -> None:
    """Count the instructions and comment lines of a rendered Dockerfile (a line continues the one
    before when that ends in a backslash): they must be exactly those its steps make. A value that
    smuggled in a line would show as one instruction or comment too many."""
    instructions = comments = 0
    continued = False
    for line in text.splitlines():
        if continued:
            continued = line.endswith("\\")
            continue
        if not line.strip():
            continue
        if line.startswith("#"):
            comments += 1
            continue
        word = line.split(" ", 1)[0]
        if word not in DOCKER_INSTRUCTIONS:
            raise RenderError(f"rendered Dockerfile of {spec.id}: a line starts with {_show(word)}, "
                              "not an instruction the templates write")
        instructions += 1
        continued = line.endswith("\\")
    want = _docker_shape(stages, spec)
    if (instructions, comments) != want:
        raise RenderError(f"rendered Dockerfile of {spec.id} has {instructions} instructions and "
                          f"{comments} comment lines where its steps make {want[0]} and {want[1]}: "
                          "a value changed the recipe's structure")


def _check_singularity(text: str, stages: list[Stage] | None, spec: ImageSpec, name: str) -> None:
    """Count the sections (%post, %files, ...) and Bootstrap headers of a rendered definition."""
    if stages is None:  # from-image.def: one header; %environment, %labels, %test, %runscript
        want_sections, want_headers = 4, 1
    else:
        want_headers = len(stages)
        want_sections = 4  # the last stage's %environment, %labels, %test, %runscript
        for stage in stages:
            copies = [s for s in stage.steps if s.kind == "copy"]
            want_sections += 1  # %post
            tarballs = any(s.sources for s in stage.steps if s.kind == "run")
            want_sections += 1 if tarballs or any(not c.from_stage for c in copies) else 0
            want_sections += len({c.from_stage for c in copies if c.from_stage})
    sections = sum(1 for ln in text.splitlines() if ln.lstrip().startswith("%"))
    headers = sum(1 for ln in text.splitlines() if ln.lstrip().startswith("Bootstrap:"))
    if (sections, headers) != (want_sections, want_headers):
        raise RenderError(f"rendered {name} for {spec.id} has {sections} sections and {headers} "
                          f"headers where its steps make {want_sections} and {want_headers}: a "
                          "value changed the definition's structure")
