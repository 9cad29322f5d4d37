#!/usr/bin/env python3
"""`imagebuild generate` against HPC Container Maker, measured in the same run.

- anchor: hpccm (PyPI `hpccm`), the way it is used: one `hpccm --recipe FILE --format F` process per
  recipe and format, for an Open MPI + UCX + gdrcopy recipe of its own building blocks. Also shown:
  hpccm rendering in one warm process (no start-up), for honesty.
- imagebuild: one `imagebuild generate --output TMP` process for the whole matrix (every image,
  Dockerfile + two Singularity definitions each), and the same in-process without start-up.
Target: the whole matrix, both formats, in under 1 s for one process; more than 40 recipes in the
time hpccm writes ten.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
K = 10


def hpccm_recipe_seconds() -> float:
    """Seconds per recipe per format, hpccm in one process (K recipes x 2 formats)."""
    code = r'''
import time, hpccm
from hpccm.building_blocks import gdrcopy, ucx, openmpi, packages
from hpccm.primitives import baseimage, environment
K = %d
t = time.perf_counter()
for i in range(K):
    for fmt in ("docker", "singularity"):
        hpccm.config.set_container_format(fmt)
        stage = hpccm.Stage()
        stage += baseimage(image="nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04", _as="devel")
        stage += packages(ospackages=["libibverbs-dev", "librdmacm-dev"])
        stage += gdrcopy(ldconfig=True, version="2.4.1")
        stage += ucx(cuda=True, gdrcopy="/usr/local/gdrcopy", ldconfig=True, version="1.17.0")
        stage += openmpi(cuda=True, infiniband=False, ucx="/usr/local/ucx", version="4.1.7")
        stage += environment(variables={"OMPI_MCA_pml": "ucx"})
        str(stage)
print((time.perf_counter() - t) / (2 * K))
''' % K
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


HPCCM_RECIPE = """
Stage0 += baseimage(image='nvcr.io/nvidia/cuda:12.4.1-devel-ubuntu22.04', _as='devel')
Stage0 += packages(ospackages=['libibverbs-dev', 'librdmacm-dev'])
Stage0 += gdrcopy(ldconfig=True, version='2.4.1')
Stage0 += ucx(cuda=True, gdrcopy='/usr/local/gdrcopy', ldconfig=True, version='1.17.0')
Stage0 += openmpi(cuda=True, infiniband=False, ucx='/usr/local/ucx', version='4.1.7')
Stage0 += environment(variables={'OMPI_MCA_pml': 'ucx'})
"""


def hpccm_process_seconds(recipe: Path, fmt: str) -> float:
    exe = Path(sys.executable).with_name("hpccm")
    t = time.perf_counter()
    subprocess.run([str(exe), "--recipe", str(recipe), "--format", fmt], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def imagebuild_process_seconds(out: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "imagebuild", "generate", "--output", str(out)],
                   cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    warm_hpccm = statistics.median(hpccm_recipe_seconds() for _ in range(3))
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "ompi_ucx.py"
        recipe.write_text(HPCCM_RECIPE)
        per_hpccm = statistics.median(hpccm_process_seconds(recipe, fmt)
                                      for fmt in ("docker", "singularity") for _ in range(3))
        proc = statistics.median(imagebuild_process_seconds(Path(tmp) / f"o{i}") for i in range(5))
        files = sum(1 for p in (Path(tmp) / "o0").rglob("*") if p.is_file())
    sys.path.insert(0, str(ROOT))
    from imagebuild.render import images, output
    from imagebuild import knowledge
    t = time.perf_counter()
    k = knowledge.load(ROOT / "matrix.yaml")
    specs, _ = images.expand(k)
    output.generate_all(k, specs)
    inproc = time.perf_counter() - t
    n_images = len(specs)
    recipes = n_images * 2  # a Dockerfile and a build definition per image (+ a wrapper .def)
    print(f"anchor  hpccm process, one recipe in one format           {per_hpccm*1000:8.1f} ms")
    print(f"        (hpccm warm, in one process, per recipe+format:   {warm_hpccm*1000:8.2f} ms)")
    print(f"        hpccm time for ten recipes                        {per_hpccm*10*1000:8.1f} ms")
    print(f"imagebuild generate, one process: {n_images} images, {files} files  {proc*1000:8.1f} ms  (target < 1000 ms)")
    print(f"imagebuild, in-process (load + resolve + render)          {inproc*1000:8.1f} ms")
    per_ib = proc / recipes
    print(f"per recipe per format, whole process                      {per_ib*1000:8.2f} ms  "
          f"ratio to hpccm {per_ib/per_hpccm:6.3f}")
    print(f"recipes imagebuild writes in the time hpccm writes ten:   {10*per_hpccm/per_ib:8.0f}  (target > 40)")


if __name__ == "__main__":
    main()
