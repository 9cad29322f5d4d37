"""What a test run works with: the image under test, how the run is asked for (TestOptions), and
the few container operations the smoke run needs with guaranteed clean-up (Containers)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass, field

from .. import labels as L
from ..engines import Container, ImageInfo
from ..errors import EngineError, EngineRefused, NoSuchImage, SmokeError


@dataclass(frozen=True)
class ImageUnderTest:
    """The image a test run is about: the reference it was named by (every container starts from
    it) and the engine's ImageInfo of it."""
    ref: str
    info: ImageInfo


class Containers:
    """The few container operations the smoke run needs, with guaranteed clean-up, on an engine's
    ContainerSession (imagebuild.engines).

    Everything created carries the label ``io.imagebuild.smoke=<token>``; ``close()`` (called by
    ``with``, also on Ctrl-C) removes every container and network, killing those still running.
    """

    def __init__(self, engine, prefix: str = "imagebuild-smoke", env: dict | None = None):
        self._session = engine.containers(prefix, L.SMOKE)
        self.token = self._session.token
        self._networks = 0
        self._env = dict(env or {})      # every container's, under what each start() adds

    def __enter__(self) -> "Containers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def network(self) -> str:
        name = f"{self.token}-net{self._networks}"
        try:
            self._session.network(name)
        except EngineRefused as exc:
            raise EngineError(f"cannot create network {name}: {exc.detail}") from None
        self._networks += 1
        return name

    def start(self, image: str, command: list[str], *, name: str, env: dict | None = None,
              network: str | None = None, hostname: str | None = None, shm_size: str = "512m",
              files: bytes | None = None, shareable: bool = False, join: Container | None = None,
              gpus: bool = False) -> Container:
        """Create and start a container: on `network` only (its one interface besides loopback),
        `files` (a tar) unpacked at / before it starts, its IPC namespace `shareable`, or joining
        the IPC and PID namespaces of the container `join` (two processes in two containers that
        see each other as on one host); with `gpus`, every GPU of the engine's host."""
        try:
            container = self._session.create(image, command, name=name, env={**self._env, **(env or {})},
                                             network=network,
                                             hostname=hostname, shm_size=shm_size, shareable=shareable,
                                             join=join, gpus=gpus)
            if files is not None and not self._session.put_files(container, files):
                raise SmokeError(f"cannot copy files into a container of {image}")
            self._session.start(container)
        except NoSuchImage:
            raise SmokeError(f"image {image} not found") from None
        except EngineRefused as exc:
            text = " ".join(str(exc.detail).split())
            raise SmokeError(f"cannot start a container of {image}: {text}") from None
        return container

    def wait(self, container: Container, deadline: float) -> int | None:
        """The exit code, or None after killing a container still running at the deadline."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                code = self._session.wait(container, max(1, min(left, 30)))
            except EngineRefused as exc:
                raise EngineError(f"waiting for container {container.name}: {exc.detail}") from None
            if code is not None:
                return code
        self._kill(container)
        return None

    def logs(self, container: Container, lines: int = 20) -> str:
        try:
            return self._session.logs(container, lines)
        except Exception:  # noqa: BLE001 - logs are a courtesy in an error message
            return ""

    def follow(self, container: Container):
        """The container's output, in chunks as it comes, until it exits."""
        return self._session.follow(container)

    def listening(self, container: Container, port: int, deadline: float) -> bool:
        """Whether a process in `container` listens on TCP `port` before the deadline (read from
        /proc/net/tcp*, no tool needed); False at once when the container has stopped."""
        want = f":{port:04X}"
        while time.monotonic() < deadline:
            if self._session.status(container) != "running":
                return False
            code, out = self._session.exec(container, ["cat", "/proc/net/tcp", "/proc/net/tcp6"])
            for line in (out or b"").decode("ascii", "replace").splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and fields[1].endswith(want) and fields[3] == "0A":   # LISTEN
                    return True
            time.sleep(0.2)
        return False

    def read_files(self, container: Container, path: str) -> dict[str, bytes]:
        """Regular files at path (a file or a folder) in a container, running or stopped."""
        try:
            data = self._session.read_archive(container, path)
        except EngineRefused as exc:
            raise EngineError(f"cannot read {path} from {container.name}: {exc.detail}") from None
        if data is None:
            return {}
        files = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                if member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        files[member.name] = fh.read()
        return files

    def read_json(self, container: Container, path: str) -> dict | None:
        for content in self.read_files(container, path).values():
            try:
                data = json.loads(content)
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
        return None

    def _kill(self, container: Container) -> None:
        try:
            self._session.kill(container)
        except Exception:  # noqa: BLE001 - already gone is fine
            pass

    def close(self) -> None:
        self._session.close()


@dataclass
class TestOptions:
    """How `imagebuild test` runs the suite. Tier gpu gives the suite's container every GPU of the
    engine's host and adds the GPU-only checks (nccl-tests); its ranks default to the suite's own
    choice, one per GPU (None), where tier cpu runs 2."""
    ranks: int | None = 2
    timeout: float = 180.0
    only: list[str] = field(default_factory=list)
    tier: str = "cpu"
    # set in every container of the run (emulation.EMULATED_ENV for an image run under QEMU)
    env: dict = field(default_factory=dict)

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only
