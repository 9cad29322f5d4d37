"""Planning for a driver upgrade: what each image of the matrix does on the old and the new driver,
what to do about it, and which published tag each GPU pool should move to.

A driver is an input to no recipe: an upgrade never changes an image's bytes. What it changes is
which images run, and in which CUDA compatibility mode. For every image, its resolved stack is
checked on a host with the old driver and on one with the new driver, on each GPU pool named; the
modes decide its status:

- newly-usable: did not run before, runs after;
- improved: runs on both, in a better mode after (e.g. minor-version -> native);
- unchanged: same mode on both;
- degraded: runs on both, in a worse mode after;
- broken: ran before, does not after (e.g. a branch that drops the GPU);
- unusable: runs on neither.

and, with what images.lock says was built and published, its action:

- keep: still runs and is published (or was never needed): nothing to do;
- move: runs after, better than before, and is published: a pool may move to it (below);
- build: runs after and was never built into the lock (a first build, not a rebuild);
- rebuild: runs after and its recipe changed since the lock recorded it;
- retire: no longer runs on the new driver;
- none: runs on neither driver.

Per GPU pool, the best image that runs (the order of `find` and `resolve`), among the published
ones where any is, before and after: the pool stays, or moves to the new tag, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..knowledge import Knowledge
from ..resolve.solver import MODE_RANK, Host, check
from ..render.images import ImageSpec

#: every status, as the module docstring lists them
STATUSES = ("newly-usable", "improved", "unchanged", "degraded", "broken", "unusable")
#: every action, likewise
ACTIONS = ("keep", "move", "build", "rebuild", "retire", "none")
#: the actions CI carries out by building an image
BUILDS = ("build", "rebuild")


@dataclass(frozen=True)
class Verdict:
    image: str
    status: str
    before: str          # mode or "no"
    after: str
    detail: str
    base: str | None = None   # the matrix image this one is built FROM (a devel's runtime)
    action: str = "keep"
    published: bool = False
    why: str = ""        # the action in the user's words

    def to_json(self) -> dict:
        doc = {"image": self.image, "status": self.status, "before": self.before,
               "after": self.after, "detail": self.detail, "action": self.action,
               "published": self.published, "why": self.why}
        if self.base:
            doc["base"] = self.base
        return doc


@dataclass(frozen=True)
class Pool:
    """One GPU pool: the image (and tag) it runs before and after the upgrade."""
    gpu: str
    before: str | None
    after: str | None
    before_tag: str | None
    after_tag: str | None
    action: str          # stay | move | build | none
    why: str
    published_only: bool = True

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "before": self.before, "after": self.after,
                "before_tag": self.before_tag, "after_tag": self.after_tag, "action": self.action,
                "why": self.why, "published_only": self.published_only}


@dataclass
class Plan:
    verdicts: list[Verdict]
    pools: list[Pool] = field(default_factory=list)
    lock_read: bool = False


def _said(res) -> str:
    """The first fact that rules a stack out, as the user would say it: the wishes the check
    makes of the image's own versions are not reasons ("you asked for cuda 13.0.3")."""
    lines = [ln for ln in res.explanation
             if "(your wish)" not in ln and "you asked for" not in ln and
             not ln.startswith(("no ", "the host has"))]
    return (lines or res.explanation or ["does not run"])[0]


def _mode(k: Knowledge, spec: ImageSpec, driver: str, gpu: str | None, date: str | None):
    host = Host(driver=driver, gpu=gpu, date=date)
    res = check(k, host, dict(spec.stack), image=True, cuda_from=spec.cuda_from, warnings=False)
    if not res.ok:
        return "no", _said(res)
    mode = res.mode.mode if res.mode else "n/a"
    return mode, res.mode.text if res.mode else "no CUDA"


def _best(modes: list[str]) -> str:
    runs = [m for m in modes if m != "no"]
    return min(runs, key=lambda m: MODE_RANK.get(m, 9)) if runs else "no"


def plan(k: Knowledge, specs: list[ImageSpec], driver_from: str, driver_to: str,
         gpu: str | None = None, date: str | None = None) -> list[Verdict]:
    """The statuses of every image on one GPU (None: any), without a lock: see `day`."""
    return day(k, specs, driver_from, driver_to, [gpu], date).verdicts


def day(k: Knowledge, specs: list[ImageSpec], driver_from: str, driver_to: str,
        gpus: list[str | None], date: str | None = None, locked: dict | None = None,
        recipes: dict[str, str] | None = None) -> Plan:
    """The upgrade's plan over GPU pools `gpus` (None: any GPU). `locked`: images.lock's entries
    (None: no lock read: nothing counts as built); `recipes`: image id -> the sha256 of the
    Dockerfile the matrix renders now (an entry recording another was built from an older recipe)."""
    by_id = {s.id: s for s in specs}
    verdicts = []
    for spec in specs:
        per = [(_mode(k, spec, driver_from, g, date), _mode(k, spec, driver_to, g, date)) for g in gpus]
        before = _best([b for (b, _), _a in per])
        after = _best([a for _b, (a, _) in per])
        why_after = next((w for _b, (a, w) in per if a == after), per[0][1][1])
        why_before = next((w for (b, w), _a in per if b == before), per[0][0][1])
        if before == "no" and after == "no":
            status, detail = "unusable", why_after
        elif before == "no":
            status, detail = "newly-usable", why_after
        elif after == "no":
            status, detail = "broken", why_after
        elif MODE_RANK[after] < MODE_RANK[before]:
            status, detail = "improved", why_after
        elif MODE_RANK[after] > MODE_RANK[before]:
            status, detail = "degraded", why_after
        else:
            status, detail = "unchanged", why_after
        # a devel image shares its runtime's stack, so its verdict; it is rebuilt with it
        base = spec.depends_on[0] if spec.depends_on else None
        entry = (locked or {}).get(spec.id)
        published = bool(entry and entry.get("published"))
        action, why = _action(status, entry, (recipes or {}).get(spec.id), driver_to, why_before,
                              detail, published)
        verdicts.append(Verdict(spec.id, status, before, after, detail, base, action, published, why))
    # a devel is built FROM its runtime: building one builds the other first
    acts = {v.image: v for v in verdicts}
    for v in list(verdicts):
        if v.base and v.action in BUILDS and v.base in acts and acts[v.base].action not in BUILDS:
            b = acts[v.base]
            verdicts[verdicts.index(b)] = Verdict(b.image, b.status, b.before, b.after, b.detail, b.base,
                                                  v.action, b.published,
                                                  f"{v.image} is built FROM it: {v.why}")
    pools = [_pool(k, by_id, verdicts, g, driver_from, driver_to, date) for g in gpus]
    return Plan(verdicts, pools, locked is not None)


def current_recipes(k, specs: list[ImageSpec], locked: dict | None) -> dict[str, str] | None:
    """image id -> the sha256 of the Dockerfile the matrix renders now, for the images the lock
    records (None without a lock): what `day` compares with the lock's dockerfile_sha256."""
    if not locked:
        return None
    from ..digests import sha256_bytes
    from ..render.renderer import Renderer
    renderer = Renderer()
    return {s.id: sha256_bytes(renderer.dockerfile(s, k).encode("utf-8")) for s in specs if s.id in locked}


def _action(status: str, entry: dict | None, recipe: str | None, driver: str, why_before: str,
            why_after: str, published: bool) -> tuple[str, str]:
    if status == "unusable":
        return "none", f"runs on neither driver: {why_after}"
    if status == "broken":
        return "retire", f"does not run on {driver}: {why_after}"
    changed = entry is not None and recipe is not None and entry.get("dockerfile_sha256") != recipe
    if changed:
        return "rebuild", ("its recipe changed since images.lock recorded it (the matrix moved); "
                           "the driver alone would not")
    if status in ("newly-usable", "improved"):
        if entry is None:
            return "build", (f"runs on {driver} ({why_after}) and was never built into images.lock")
        if published:
            return "move", f"runs on {driver} ({why_after}): already published, nothing to build"
        return "keep", f"runs on {driver} ({why_after}); built but not published: publish it to offer it"
    if status == "degraded":
        return "keep", f"still runs, in a worse mode: {why_after} (was: {why_before})"
    return "keep", "still runs, in the same mode: nothing to do"


def _pool(k, by_id: dict, verdicts: list[Verdict], gpu: str | None, driver_from: str,
          driver_to: str, date: str | None) -> Pool:
    from .hostfit import best

    name = gpu or "any"
    published = [by_id[v.image] for v in verdicts if v.published]
    pool_specs = published or list(by_id.values())
    before = best(k, pool_specs, Host(driver=driver_from, gpu=gpu, date=date))
    after = best(k, pool_specs, Host(driver=driver_to, gpu=gpu, date=date))
    b_id, a_id = (before.spec.id if before else None), (after.spec.id if after else None)
    b_tag, a_tag = (before.spec.tag if before else None), (after.spec.tag if after else None)
    kind = "published image" if published else "image of the matrix (none is published)"
    if after is None:
        action, why = "none", f"no {kind} runs on {driver_to} with {name} GPUs"
    elif b_id == a_id:
        action, why = "stay", (f"{a_tag} is still the best {kind} on {driver_to} "
                               f"({after.mode}; was {before.mode})")
    else:
        action = "move" if published else "build"
        was = f"from {b_tag} ({before.mode}) " if before else ""
        why = (f"{was}to {a_tag}: the best {kind} on {driver_to}, {after.mode}: {after.detail}")
    return Pool(name, b_id, a_id, b_tag, a_tag, action, why, bool(published))


def github_matrix(verdicts: list[Verdict], platforms: dict[str, str] | None = None,
                  runners: dict[str, str] | None = None) -> dict:
    """A GitHub Actions matrix of the images CI must build: those to build or rebuild (a driver
    alone queues none it has built and published). A devel image and the runtime it is built FROM
    share one entry (`images`: the runtime, then the devel; `base`: the runtime), so one job builds
    the runtime once and the devel on it. `platforms`: image id -> OCI platform; with `runners`
    (OCI platform -> runner label), each entry names its `runner`, and an image whose platform has
    no runner is left out (never compiled under emulation inside a job's time limit)."""
    chosen = [v for v in verdicts if v.action in BUILDS]
    bases = {v.base for v in chosen if v.base}
    out = []
    for v in chosen:
        if v.image in bases:
            continue                    # built in its devel's job
        row = {"image": v.image, "status": v.status, "mode": v.after, "action": v.action,
               "images": f"{v.base} {v.image}" if v.base and v.base in {c.image for c in chosen}
               else v.image}
        if v.base:
            row["base"] = v.base
        plat = (platforms or {}).get(v.image)
        if plat:
            row["platform"] = plat
        if runners is not None:
            if plat not in runners:
                continue
            row["runner"] = runners[plat]
        out.append(row)
    return {"include": out}


def left_out(verdicts: list[Verdict], platforms: dict[str, str], runners: dict[str, str]) -> list[str]:
    """The images to build that github_matrix leaves out for want of a runner of their platform."""
    return [v.image for v in verdicts if v.action in BUILDS and platforms.get(v.image) not in runners]


def gitlab_pipeline(verdicts: list[Verdict], platforms: dict[str, str], tags: dict[str, str],
                    registry_var: str = "IMAGEBUILD_REGISTRY") -> str:
    """A GitLab child pipeline (YAML) with one job per entry of github_matrix: build, smoke test,
    lock and publish each image (the runtime before its devel), on a runner with the tag the user
    gave for the image's platform (`tags`: OCI platform -> runner tag); images of a platform
    without one are left out. The job's shell needs imagebuild installed and an engine."""
    import yaml

    from ..workspace import REPORTS

    matrix = github_matrix(verdicts, platforms, tags)["include"]
    install = "python3 -m pip install ${IMAGEBUILD_PIP_ARGS:-imagebuild}"
    jobs: dict = {}
    for row in matrix:
        script = [install]
        for image in row["images"].split():
            script += [f"imagebuild build {image}", f"imagebuild test {image}",
                       f"imagebuild lock {image}",
                       f'if [ -n "${{{registry_var}:-}}" ]; then imagebuild publish {image} '
                       f'--registry "${registry_var}" --sbom --notes; fi']
        # each job's lock under its own name: the locks job merges them
        script += ["mkdir -p job-locks", f"cp images.lock job-locks/{row['image']}.lock"]
        jobs[f"image:{row['image']}"] = {
            "stage": "images", "tags": [row["runner"]], "script": script,
            "artifacts": {"when": "always", "paths": ["job-locks/", f"{REPORTS.as_posix()}/"]},
        }
    if jobs:
        jobs["locks"] = {
            "stage": "locks", "needs": [{"job": name, "artifacts": True} for name in jobs],
            "script": [install, "imagebuild lock --merge job-locks/*.lock --lock images.lock"],
            "artifacts": {"paths": ["images.lock"]},
        }
    else:
        jobs["nothing-to-build"] = {"stage": "images", "script": ["echo the upgrade builds no image"]}
    doc = {"stages": ["images", "locks"], **jobs}
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)
