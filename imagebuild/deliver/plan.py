"""Planning for a driver upgrade: what each image of the matrix does on the old and the new driver.

For every image, its resolved stack is checked on a host with the old driver and on one with the new
driver (same GPU); the CUDA compatibility mode on each side decides the verdict:

- newly-usable: did not run before, runs after (build, test and publish it);
- improved: runs on both, in a better mode after (e.g. minor-version -> native): re-test it;
- unchanged: same mode on both;
- degraded: runs on both, in a worse mode after (native -> forward-compat with cuda-compat);
- broken: ran before, does not after (e.g. a branch that drops the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..render.images import ImageSpec
from ..knowledge import Knowledge
from ..resolve.solver import MODE_RANK, Host, check

#: every verdict, as the module docstring lists them (plus unusable: ran on neither driver)
STATUSES = ("newly-usable", "improved", "unchanged", "degraded", "broken", "unusable")
REBUILD = ("newly-usable", "improved", "degraded")


@dataclass(frozen=True)
class Verdict:
    image: str
    status: str
    before: str          # mode or "no"
    after: str
    detail: str
    base: str | None = None   # the matrix image this one is built FROM (a devel's runtime)

    def to_json(self) -> dict:
        doc = {"image": self.image, "status": self.status, "before": self.before,
               "after": self.after, "detail": self.detail}
        if self.base:
            doc["base"] = self.base
        return doc


def _mode(k: Knowledge, spec: ImageSpec, driver: str, gpu: str | None, date: str | None):
    host = Host(driver=driver, gpu=gpu, date=date)
    res = check(k, host, dict(spec.stack), image=True, cuda_from=spec.cuda_from)
    if not res.ok:
        return "no", res.explanation[-2] if len(res.explanation) > 1 else "; ".join(res.explanation)
    mode = res.mode.mode if res.mode else "n/a"
    return mode, res.mode.text if res.mode else "no CUDA"


def plan(k: Knowledge, specs: list[ImageSpec], driver_from: str, driver_to: str,
         gpu: str | None = None, date: str | None = None) -> list[Verdict]:
    out = []
    for spec in specs:
        before, why_b = _mode(k, spec, driver_from, gpu, date)
        after, why_a = _mode(k, spec, driver_to, gpu, date)
        if before == "no" and after == "no":
            status, detail = "unusable", why_a
        elif before == "no":
            status, detail = "newly-usable", why_a
        elif after == "no":
            status, detail = "broken", why_a
        elif MODE_RANK[after] < MODE_RANK[before]:
            status, detail = "improved", why_a
        elif MODE_RANK[after] > MODE_RANK[before]:
            status, detail = "degraded", why_a
        else:
            status, detail = "unchanged", why_a
        # a devel image shares its runtime's stack, so its verdict; it is rebuilt with it
        base = spec.depends_on[0] if spec.depends_on else None
        out.append(Verdict(spec.id, status, before, after, detail, base))
    return out


def github_matrix(verdicts: list[Verdict]) -> dict:
    """A GitHub Actions matrix of the images CI must (re)build, test and publish; an image built
    FROM another (a devel from its runtime) names it as its `base`, to be built first (`imagebuild
    build <devel>` builds it first on its own)."""
    return {"include": [{"image": v.image, "status": v.status, "mode": v.after,
                         **({"base": v.base} if v.base else {})}
                        for v in verdicts if v.status in REBUILD]}
