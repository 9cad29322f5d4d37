"""The human page of an image, as NGC's release notes and AWS's image tables give one: what is
inside a tag and what it was proven with. Every line comes from the matrix (versions and their
sources, the driver the image needs and its compatibility mode on each supported branch), the
image's wheel lock, or images.lock (the smoke result, the SBOM's and report's sha256, where it was
published); what none of them records is said to be not recorded, never filled in. Markdown,
deterministic: the same inputs give the same bytes."""

from __future__ import annotations

from ..versions import NONE, major_minor, parse_driver

COMPONENTS = ("os", "python", "cuda", "cudnn", "nccl", "ucx", "openmpi", "pytorch")


def _source(k, comp: str, stack: dict) -> str:
    """The source id of one component's version in this stack, or "" when the matrix names none."""
    val = stack.get(comp, NONE)
    if val == NONE:
        return ""
    if comp in ("os", "python"):
        entry = k.os.get(stack.get("os"))
        return entry.source if entry is not None else ""
    if comp == "cuda":
        rel = k.releases.get(val)
        return rel.source if rel else ""
    if comp in ("pytorch", "cudnn", "nccl") and stack.get("pytorch", NONE) != NONE:
        var = k.variants.get((stack["pytorch"], major_minor(stack["cuda"]) if stack.get("cuda", NONE)
                              != NONE else NONE))
        if var is not None:
            return var.nccl_cited if comp == "nccl" else var.source
    if comp in ("nccl", "cudnn"):
        rel = (k.library_releases.get(comp) or {}).get(val)
        return ", ".join(rel.sources) if rel else ""
    entry = getattr(k, comp).get(val) if comp in ("ucx", "openmpi") else None
    return entry.source if entry is not None else ""


def _candidates(k, branch: int) -> list[str]:
    """The driver releases of a branch the matrix names (Table 3, the minor-version floors, GPU
    floors), lowest first, between stand-ins for its first (B.0.0) and newest (B.999.99)."""
    named = {r.driver for r in k.releases.values() if r.driver}
    named |= {floor for floor, _ in k.majors.values()}
    named |= {d for g in k.gpus.values() for d in [g.first_driver] if d}
    mine = sorted((d for d in named if parse_driver(d).branch == branch), key=parse_driver)
    return [f"{branch}.0.0"] + mine + [f"{branch}.999.99"]


def branch_modes(k, spec, date: str | None = None) -> list[tuple[int, str]]:
    """(branch, what the image does on it) for every branch NVIDIA supports on `date` (else the
    matrix's as_of), newest first: the compatibility mode from the lowest release the matrix names
    that runs it, and each better mode from where it starts; or that it does not run."""
    from ..resolve.solver import Host, check

    day = date or k.as_of
    out = []
    for branch in sorted(k.branches, reverse=True):
        if k.branch_supported(branch, day)[0] is not True:
            continue
        steps, last = [], None
        for drv in _candidates(k, branch):
            res = check(k, Host(driver=drv, date=day), dict(spec.stack), image=True,
                        cuda_from=spec.cuda_from, warnings=False)
            mode = (res.mode.mode if res.mode else "runs") if res.ok else None
            if mode != last and mode is not None:
                shown = {f"{branch}.0.0": "its first release",
                         f"{branch}.999.99": "its newest"}.get(drv, drv)
                pkg = res.mode.package if res.mode else None
                steps.append(mode + (f" (with {pkg})" if pkg else "") + f" from {shown}")
            last = mode
        out.append((branch, "; ".join(steps) if steps else "does not run"))
    return out


def _wheels(k, spec) -> list[tuple[str, str]]:
    from ..render.steps import image_lock
    lock = image_lock(spec, k)
    if lock is None:
        return []
    return sorted((e.name, e.version) for e in lock.entries.values())


def render(k, spec, entry: dict | None, *, tags: list[str] | None = None,
           date: str | None = None) -> str:
    """The Markdown page of one image: `entry` is its images.lock entry (None: not locked)."""
    from ..render.requires import image_requires

    stack = dict(spec.stack)
    lines = [f"# {spec.id}", ""]
    if spec.description:
        lines += [spec.description, ""]
    tags = list(tags or spec.tags or (spec.tag,))
    lines += ["Tags: " + ", ".join(f"`{t}`" for t in tags), ""]
    lines += ["## What is inside", "", "| component | version | source |", "|---|---|---|"]
    for comp in COMPONENTS:
        val = stack.get(comp, NONE)
        if comp == "os":
            val = k.os[val].name if val in k.os else val
        src = _source(k, comp, stack)
        absent = stack.get(comp, NONE) == NONE
        lines.append(f"| {comp} | {'not in this image' if absent else val} | "
                     f"{'' if absent else src or 'not recorded'} |")
    lines += ["", f"Platform: {spec.oci_platform or stack.get('platform', 'not recorded')}", ""]
    lines += ["## The driver it needs", ""]
    if stack.get("cuda", NONE) == NONE:
        lines += ["No CUDA: any driver, or none.", ""]
    else:
        lines += [f"Minimum driver: {spec.min_driver or 'not known'} (CUDA {stack['cuda']}"
                  + (", from NVIDIA's wheels" if spec.cuda_from == "wheels" else "") + ").", ""]
        req = image_requires(spec, k)
        for name, value in sorted(req.items()):
            lines.append(f"- `{name}={value}`")
        if req:
            lines.append("")
        lines += [f"By driver branch NVIDIA supports on {date or k.as_of}:", "",
                  "| branch | this image |", "|---|---|"]
        lines += [f"| R{b} | {what} |" for b, what in branch_modes(k, spec, date)]
        lines.append("")
    wheels = _wheels(k, spec)
    lines += ["## Wheels", ""]
    if wheels:
        lines += [f"{len(wheels)} wheels, each pinned by sha256 in `{spec.wheel_lock}`:", ""]
        lines += [f"- {n}=={v}" for n, v in wheels]
    else:
        lines.append("No wheel lock: this image installs no pinned wheel set.")
    lines += ["", "## What it was proven with", ""]
    if entry is None:
        lines += ["Not in images.lock: not built, tested or published from this lock.", ""]
        return "\n".join(lines).rstrip("\n") + "\n"
    smoke = entry.get("smoke")
    if smoke:
        counts = smoke.get("counts") or {}
        lines.append(f"- smoke suite: {'passed' if smoke.get('passed') else 'FAILED'} ("
                     + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("pass", "fail", "skip"))
                     + f"), report sha256 `{smoke.get('report_sha256')}`")
    else:
        lines.append("- smoke suite: not recorded")
    prov = entry.get("provenance") or {}
    lines.append(f"- engine image id: `{entry.get('image_id') or 'not recorded'}`")
    lines.append("- SBOM sha256: " + (f"`{prov['sbom_sha256']}`" if prov.get("sbom_sha256")
                                        else "not recorded"))
    lines.append("- recipe sha256: " + (f"`{prov['recipe_sha256']}`" if prov.get("recipe_sha256")
                                          else "not recorded"))
    published = entry.get("published") or {}
    if published:
        lines += ["", "## Published", ""]
        for repo, rec in sorted(published.items()):
            lines.append(f"- `{repo}@{rec.get('digest')}`: " + ", ".join(f"`{t}`" for t in rec.get("tags", [])))
    return "\n".join(lines).rstrip("\n") + "\n"
