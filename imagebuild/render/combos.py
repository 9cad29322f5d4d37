"""The combinations a matrix's image families declare, before the resolver runs: each family's
PyTorch releases x CUDA variants (or NCCL releases, for a communication family), on each of its
OSes and platforms, in the order images.expand() resolves them. What a combination's wishes fix
before resolving (Combination.fixed) lets `resolve` expand only the combinations that can hold the
best image for a host (render/expandcache.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..knowledge import Knowledge, version_matcher
from ..knowledge.families import Family
from ..versions import NONE, is_version, parse_version


@dataclass(frozen=True, eq=False)
class Combination:
    """One combination a family declares, before it is resolved: its wishes on one OS (and
    platform). combinations(k) lists them in the expansion's order."""
    family: Family
    combo: str
    wishes: dict
    vtag: str
    os_id: str
    platform: str | None

    @property
    def label(self) -> str:
        return (f"{self.family.name}: {self.combo} on {self.os_id}"
                + (f" for {self.platform}" if self.platform else ""))

    def fixed(self) -> dict[str, str]:
        """The stack's versions the wishes fix before the resolver runs: the OS and platform, a
        PyTorch release named exactly (or none), CUDA when it is none."""
        out = {"os": self.os_id, **({"platform": self.platform} if self.platform else {})}
        torch, cuda = self.wishes.get("pytorch"), self.wishes.get("cuda")
        if torch == NONE or (torch and torch.startswith("==")):
            out["pytorch"] = torch.removeprefix("==")
        if cuda == NONE:
            out["cuda"] = NONE
        return out

    def screen(self, k: Knowledge) -> dict[str, str]:
        """Wishes every image of this combination meets as resolve.check reads its stack (each
        component a prefix of the image's version): for solver.could_hold, so looser than the
        combination's own where exactness is not certain. The PyTorch release is one of the
        knowledge's (its images hold that very string); OS and platform are names; CUDA is `none`,
        or the wished major.minor when no CUDA release of the knowledge is written shorter (a
        12.8 wish met by a release written "12" could not be told from 12.9); the pins of UCX,
        Open MPI, Python and NCCL are left out."""
        out = {c: v for c, v in self.fixed().items() if c != "cuda"}
        cuda = self.wishes.get("cuda")
        if cuda == NONE:
            out["cuda"] = NONE
        elif cuda is not None and is_version(cuda) and all(
                len(parse_version(v).release) >= len(parse_version(cuda).release)
                for v in k.domain("cuda", True) if v != NONE):
            out["cuda"] = cuda
        return out

    def cuda(self) -> bool | None:
        """Whether its images hold CUDA, when the wishes say (a CUDA release or none)."""
        cuda = self.wishes.get("cuda")
        return None if cuda is None else cuda != NONE


def _family_plan(k: Knowledge, f: Family) -> list[Combination]:
    return [Combination(f, combo, wishes, vtag, os_id, plat)
            for combo, wishes, vtag in _combinations(k, f)
            for os_id in f.oses for plat in f.platforms or [None]]


def combinations(k: Knowledge) -> list[Combination]:
    """Every combination the matrix's families declare, in the order expand() resolves them."""
    return [c for f in k.families for c in _family_plan(k, f)]


def _combinations(k: Knowledge, fam: Family):
    """(label, wishes, variant tag) for each PyTorch release x variant (or NCCL for comms)."""
    if fam.pytorch is None or fam.pytorch == NONE:
        for nccl in fam.nccl or (None,):
            w = {"pytorch": NONE}
            if nccl:
                w["nccl"] = "==" + nccl
            for cuda in fam.cuda or (None,):
                ww = dict(w)
                if cuda:
                    ww["cuda"] = cuda
                yield (f"nccl {nccl}" if nccl else "comms"), ww, ""
        return
    spec = fam.pytorch
    match = version_matcher(spec if spec[:1] in tuple("<>=!~") else "==" + spec)
    mode = fam.variants
    # a family without PyTorch's CUDA (cuda: none) takes the CPU builds; gate 3 allows it only
    # for the cpu flavor
    cpu_only = fam.cuda == (NONE,)
    for ver in sorted(k.pytorch, key=parse_version, reverse=True):
        if not match(ver):
            continue
        # an image is built only from a build whose every library is confirmed
        vs = [v for (pv, _), v in k.variants.items() if pv == ver and v.verified and v.nccl_verified]
        if cpu_only:
            vs = [v for v in vs if v.cuda == NONE]
        else:
            vs = [v for v in vs if v.cuda != NONE]
            if mode == "default-and-newest" and vs:
                newest = max(vs, key=lambda v: parse_version(v.cuda))
                vs = [v for v in vs if v.default or v is newest]
            elif mode == "default":
                vs = [v for v in vs if v.default]
        for v in sorted(vs, key=lambda v: (v.cuda == NONE, parse_version("0" if v.cuda == NONE
                                                                             else v.cuda))):
            cuda_w = NONE if v.cuda == NONE else v.cuda
            yield f"torch {ver}+{v.tag}", {"pytorch": "==" + ver, "cuda": cuda_w}, v.tag
