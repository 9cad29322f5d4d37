"""`rdma:`: RDMA user space other than the distribution's rdma-core (DOCA-OFED): a repository per
OS, a signing key, and the package names that replace rdma-core's. (recipe_inputs.validate checks the
fields that reach a recipe.)"""

from __future__ import annotations

from ..context import _Ctx
from ..model import RdmaEntry, RdmaKey
from ..yamlfile import _List


def load(c: _Ctx, doc, sources, oses) -> dict[str, RdmaEntry]:
    rdma: dict[str, RdmaEntry] = {}
    for r in c.seq(doc.get("rdma", _List()), "rdma", doc, "rdma"):
        w = "rdma[]"
        c.shape(r, "rdma[]", w)
        rid = c.text(r, "id", w)
        if rid in rdma or rid == "rdma-core":
            c.fail(f"{w}: id {rid!r} is used twice (rdma-core is the distribution's)", r, "id")
        c.version(r, "version", w)
        key = c.shape(r["key"], "rdma[].key", f"{w}.key")
        if not key.get("fingerprint") and not key.get("long_id"):
            c.fail(f"{w}.key: a fingerprint or a long_id is needed to check the key", r, "key")
        os_map = c.shape(r["os"], "rdma[].os", f"{w}.os", keys=oses.keys())
        pk = c.shape(r["packages"], "rdma[].packages", f"{w}.packages")
        for pm, lists in pk.items():
            c.shape(lists, "rdma[].packages.PM", f"{w}.packages.{pm}")
            for flavor in ("runtime", "devel"):
                c.seq(lists[flavor], f"{w}.packages.{pm}.{flavor}", lists, flavor)
        rdma[rid] = RdmaEntry(
            id=rid, name=c.text(r, "name", w), version=str(r["version"]), repo=c.text(r, "repo", w),
            os={str(a): str(b) for a, b in os_map.items()},
            key=RdmaKey(**{kk: str(vv) for kk, vv in key.items()}),
            packages={pm: {f: tuple(str(x) for x in v[f]) for f in ("runtime", "devel")}
                      for pm, v in pk.items()},
            verified=c.flag(r, "verified", w, True), source=c.source(r, sources, w),
            line=getattr(r, "line", None))
    return rdma
