"""What every check gets: the tier, rank count, expectation, deadline and a scratch folder."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field

from . import expect as _expect
from . import libs, proc


class CheckTimeout(Exception):
    """Raised (by the runner's alarm, or by a check) when a check ran past its timeout."""


@dataclass
class Context:
    tier: str = "cpu"
    ranks: int = 2
    timeout: float = 180.0
    expectation: dict | None = None
    workdir: str = "/tmp"
    python: str = sys.executable or "python3"
    deadline: float = 0.0
    _probe: dict | None = field(default=None, repr=False)

    # -- expectation -------------------------------------------------------------------------
    @property
    def has_expectation(self) -> bool:
        return self.expectation is not None

    def expected(self, component: str) -> str | None:
        """The expected version, "none" for absent, or None when there is no expectation."""
        if self.expectation is None:
            return None
        return self.expectation.get("stack", {}).get(component, "none")

    def expects_absent(self, component: str) -> bool:
        return self.expectation is not None and _expect.is_absent(self.expected(component))

    def expects_present(self, component: str) -> bool:
        return self.expectation is not None and not _expect.is_absent(self.expected(component))

    def feature(self, name: str) -> bool:
        return bool((self.expectation or {}).get("features", {}).get(name, False))

    def built_trees(self, default: tuple[str, ...]) -> tuple[str, ...]:
        """The install prefixes the image compiled: image.json's `built`, else ``default``."""
        built = (self.expectation or {}).get("built")
        if isinstance(built, list) and all(isinstance(t, str) and t.startswith("/") for t in built):
            return tuple(built)
        return default

    def promises(self, name: str) -> bool | None:
        """What image.json's features say of `name`: True, False, or None when they do not name it
        (an image.json written before the feature existed)."""
        features = (self.expectation or {}).get("features")
        if not isinstance(features, dict) or name not in features:
            return None
        return bool(features[name])

    # -- time --------------------------------------------------------------------------------
    def start_clock(self) -> None:
        self.deadline = time.monotonic() + self.timeout

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise CheckTimeout()
        return left

    # -- processes ---------------------------------------------------------------------------
    @property
    def pythonpath(self) -> str:
        """The folder holding the imagebuild package, so ranks can import the workers."""
        here = os.path.dirname(os.path.abspath(__file__))  # .../imagebuild/smoke
        return os.path.dirname(os.path.dirname(here))

    def env(self, **extra: str) -> dict:
        env = dict(os.environ)
        old = env.get("PYTHONPATH", "")
        env["PYTHONPATH"] = self.pythonpath + (os.pathsep + old if old else "")
        env.setdefault("OMP_NUM_THREADS", "1")  # ranks share the cores; no thread oversubscription
        env.update(extra)
        return env

    def scratch(self, name: str) -> str:
        path = os.path.join(self.workdir, name)
        os.makedirs(path, exist_ok=True)
        return path

    # -- facts found once, in a child process --------------------------------------------------
    def system_libs(self) -> dict[str, str | None]:
        return {
            "nccl": libs.locate("libnccl.so.2", libs.nccl_dirs()),
            "cudnn": libs.locate("libcudnn.so.9", libs.cudnn_dirs()) or libs.locate("libcudnn.so.8", libs.cudnn_dirs()),
            "cudart": next((p for p in (libs.locate(f"libcudart.so.{m}", libs.cudart_dirs())
                                        for m in (13, 12, 11)) if p), None),
            "ucp": libs.locate("libucp.so.0") or libs.locate_near_binary("libucp.so.0", "ucx_info"),
            "mpi": libs.locate_near_binary("libmpi.so.40", "mpirun") or libs.locate("libmpi.so.40"),
        }

    def _run_probe(self, *args: str) -> tuple[dict | None, str]:
        out = proc.run([self.python, "-m", "imagebuild.smoke.workers.probe", *args],
                       timeout=min(self.left(), 120), env=self.env())
        if out.timed_out:
            raise CheckTimeout()
        try:
            data = json.loads(out.output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None, f"probe crashed (exit {out.returncode}): {out.tail(3)}"
        return (data, "") if isinstance(data, dict) else (None, f"probe printed {type(data).__name__}")

    def probe(self) -> dict:
        """The system libraries' versions and torch's facts, each from its own child process: a
        library loaded through ctypes would otherwise be the copy torch binds to (its soname)."""
        if self._probe is None:
            found = self.system_libs()
            asked = {k: v for k, v in found.items() if k != "mpi"}
            system, why = self._run_probe("system", json.dumps(asked))
            if system is None:
                system = {"versions": {}, "errors": {"probe": why}}
            torch, why = self._run_probe("torch")
            if torch is None:
                torch = {"present": False, "error": why}
            self._probe = {"system": system, "torch": torch, "paths": found}
        return self._probe

    def torch(self) -> dict:
        return self.probe()["torch"]

    def cuda_ranks(self) -> int:
        """How many ranks can each have a GPU (0 without CUDA)."""
        t = self.torch()
        return int(t.get("device_count", 0)) if t.get("cuda_available") else 0
