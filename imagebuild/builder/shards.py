"""Split the matrix's images among N builders: `imagebuild images --shard K/N`, `build --shard K/N`.

- **Chains stay together.** An image built FROM another matrix image (a devel from its runtime)
  is in its base's shard: union of the `depends_on` edges, each chain named by its first id.
- **Balanced by cost.** A chain weighs the sum of its images' build costs, estimated from what the
  recipe compiles (docs/benchmarks.md: the communication image's cold build is about 866 s on the
  2-core VM, nearly all of it UCX and Open MPI; an image that only installs packages and wheels is
  a few minutes): 1 per image, +4 each for UCX and Open MPI compiled from source, +1 each for
  gdrcopy and nccl-tests.
- **Stable.** Consistent hashing with bounded loads: each chain ranks the shards by
  sha256(chain, shard) (rendezvous hashing) and takes the first whose load stays within
  ceil(1.1 x average), or the least loaded when none has room; chains are placed in the order of
  their own hash. Adding or removing one chain moves few others (benchmarks/bench_shards.py: at
  most 5 of 32 for 8 builders, where a split by list position moves half), never a renumbering
  by list position.
- **Exact.** Shards 1..N together are every image, each once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..digests import sha256_raw
from ..components import COMPONENTS
from ..errors import UsageError

SHARD_RE = re.compile(r"^([1-9][0-9]{0,3})/([1-9][0-9]{0,3})\Z")
SLACK = 1.1
COMPILED_WEIGHT = {c.name: c.weight for c in COMPONENTS}   # each compiled component's share


def parse_shard(text: str, argument: str = "--shard") -> tuple[int, int]:
    m = SHARD_RE.match(str(text))
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise UsageError(f"expected K/N with 1 <= K <= N (e.g. 2/4), not {text!r}", argument=argument)
    return int(m.group(1)), int(m.group(2))


@dataclass(frozen=True)
class Chain:
    root: str                 # the chain's first image id (its name)
    images: tuple[str, ...]   # in build order: bases first
    weight: int


def image_weight(k, spec) -> int:
    """1, plus what the recipe compiles (COMPILED_WEIGHT) in the form the family builds it."""
    from ..render import sources

    return 1 + sum(COMPILED_WEIGHT.get(tb.name, 0) for tb in sources.for_image(k, spec, spec.sources))


def chains(k, specs: dict) -> list[Chain]:
    """The images grouped into FROM chains (union of depends_on), each with its weight."""
    parent = {i: i for i in specs}

    def find(i: str) -> str:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for spec in specs.values():
        for dep in spec.depends_on:
            if dep in specs:
                a, b = find(spec.id), find(dep)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for image_id in specs:
        groups.setdefault(find(image_id), []).append(image_id)
    out = []
    for members in groups.values():
        ordered = _build_order(members, specs)
        out.append(Chain(ordered[0], tuple(ordered), sum(image_weight(k, specs[i]) for i in ordered)))
    return sorted(out, key=lambda c: c.root)


def _build_order(members: list[str], specs: dict) -> list[str]:
    """Bases before the images built FROM them, otherwise by id."""
    done: list[str] = []
    pending = sorted(members)
    while pending:
        ready = [i for i in pending if all(d in done or d not in members for d in specs[i].depends_on)]
        if not ready:                     # a cycle cannot come from expand(); keep every image
            ready = pending[:1]
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def _score(name: str, shard: int) -> bytes:
    return sha256_raw(f"{name}\0{shard}")


def assign(all_chains: list[Chain], n: int) -> dict[str, int]:
    """chain root -> shard (1..n), bounded-load rendezvous hashing (module docstring)."""
    total = sum(c.weight for c in all_chains)
    heaviest = max((c.weight for c in all_chains), default=0)
    capacity = max(math.ceil(SLACK * total / n), heaviest) if n else 0
    load = dict.fromkeys(range(1, n + 1), 0)
    out: dict[str, int] = {}
    for chain in sorted(all_chains, key=lambda c: sha256_raw(c.root)):
        ranked = sorted(range(1, n + 1), key=lambda s: _score(chain.root, s), reverse=True)
        shard = next((s for s in ranked if load[s] + chain.weight <= capacity),
                     min(ranked, key=lambda s: load[s]))
        load[shard] += chain.weight
        out[chain.root] = shard
    return out


def split(k, specs: dict, n: int) -> dict[int, tuple[list[str], int]]:
    """Every shard of ``n`` at once: shard -> (its ids, chains in root order, bases first in each;
    its total weight). The chains are grouped and placed once."""
    all_chains = chains(k, specs)
    placed = assign(all_chains, n)
    out: dict[int, tuple[list[str], int]] = {s: ([], 0) for s in range(1, n + 1)}
    for c in all_chains:
        ids, weight = out[placed[c.root]]
        out[placed[c.root]] = (ids + list(c.images), weight + c.weight)
    return out


def shard_of(k, specs: dict, shard: int, n: int) -> list[str]:
    """The ids of shard ``shard`` of ``n``, chains in root order, bases first in each."""
    return split(k, specs, n)[shard][0]


def loads(k, specs: dict, n: int) -> dict[int, int]:
    """Each shard's total weight (for `images --shard` and the tests)."""
    return {s: weight for s, (_ids, weight) in split(k, specs, n).items()}
