"""engines.base.ContainerSession on the docker SDK: the containers and networks of one
`imagebuild test` run (or one check), each labelled with the session's token, and all of them
removed when the session closes, also those whose create call was interrupted."""

from __future__ import annotations

import contextlib
import secrets as _secrets
from typing import Iterator, Mapping, Sequence

from .. import labels as L
from ..errors import EngineError, EngineRefused, EngineUnavailable, ImagebuildError, NoSuchImage
from .base import Container, check_hostname, check_key, check_name, docker_host
from .common import _one_line

OWNER_LABEL = {L.OWNER: "imagebuild"}


@contextlib.contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Turn docker SDK and transport errors into one-line EngineErrors naming the action."""
    import docker.errors
    import requests
    try:
        yield
    except ImagebuildError:
        raise
    except docker.errors.ImageNotFound as exc:
        raise NoSuchImage(f"{action}: no such image in the engine at DOCKER_HOST={docker_host()}",
                          detail=str(exc.explanation or exc)) from None
    except docker.errors.APIError as exc:
        text = _one_line(exc.explanation or exc)
        if "no space left on device" in text.lower():
            raise EngineRefused(f"{action}: the engine's disk is full ({text})",
                                detail=str(exc.explanation or exc)) from None
        raise EngineRefused(f"{action}: {text}", detail=str(exc.explanation or exc)) from None
    except docker.errors.DockerException as exc:
        raise EngineError(f"{action}: {_one_line(exc)}") from None
    except requests.exceptions.RequestException as exc:
        raise EngineUnavailable(f"{action}: the engine at DOCKER_HOST={docker_host()} stopped "
                                f"answering ({type(exc).__name__})") from None


class DockerSession:
    """engines.base.ContainerSession on the docker SDK."""

    def __init__(self, client, prefix: str, label: str):
        self._client = client
        self.token = f"{prefix}-{_secrets.token_hex(4)}"
        check_name(self.token, "container name prefix")
        self._labels = {**OWNER_LABEL, check_key(label, "label"): self.token}
        self._selector = {"label": f"{label}={self.token}"}     # this session's, and only those
        self._containers: dict[str, object] = {}     # id -> the SDK's container
        self._networks: list = []

    def __enter__(self) -> "DockerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get(self, container: Container):
        return self._containers[container.id]

    def network(self, name: str) -> str:
        """An internal bridge network (no route out, only between its containers)."""
        name = check_name(name, "network name")
        with engine_errors(f"creating network {name}"):
            net = self._client.networks.create(name, driver="bridge", internal=True,
                                               labels=dict(self._labels))
        self._networks.append(net)
        return name

    def create(self, image: str, command: Sequence[str], *, name: str,
               env: Mapping[str, str] | None = None, network: str | None = None,
               hostname: str | None = None, shm_size: str | None = None, shareable: bool = False,
               join: Container | None = None, gpus: bool = False) -> Container:
        """A container of ``image`` named ``<token>-<name>``: on ``network`` only (reachable there
        as ``hostname``), its IPC namespace ``shareable``, or joining the IPC and PID namespaces
        of ``join`` (then without a /dev/shm of its own); with ``gpus``, every GPU of the host
        (``docker run --gpus all``: the engine's NVIDIA runtime hook must be installed)."""
        kwargs: dict = {"command": list(command), "detach": True,
                        "name": check_name(f"{self.token}-{name}", "container name"),
                        "environment": dict(env or {}), "labels": dict(self._labels)}
        if join is not None:
            other = self._get(join).id
            kwargs.update(ipc_mode=f"container:{other}", pid_mode=f"container:{other}")
        else:
            if shm_size:
                kwargs["shm_size"] = shm_size
            if shareable:
                kwargs["ipc_mode"] = "shareable"
        if gpus:
            import docker.types
            kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if hostname:
            kwargs["hostname"] = check_hostname(hostname)
        if network:
            kwargs["network"] = check_name(network, "network name")
            kwargs["networking_config"] = {network: self._client.api.create_endpoint_config(
                aliases=[hostname] if hostname else None)}
        with engine_errors(f"creating a container of {image}"):
            made = self._client.containers.create(image, **kwargs)
        self._containers[made.id] = made
        return Container(id=made.id, name=made.name)

    def put_files(self, container: Container, tar: bytes, path: str = "/") -> bool:
        """Unpack the tar ``tar`` at ``path`` in the container; whether the engine took it."""
        with engine_errors(f"copying files into {container.name}"):
            return bool(self._get(container).put_archive(path, tar))

    def start(self, container: Container) -> None:
        with engine_errors(f"starting {container.name}"):
            self._get(container).start()

    def wait(self, container: Container, timeout: float) -> int | None:
        """The exit code, or None when it still runs after ``timeout`` seconds (at least 1)."""
        import requests
        with engine_errors(f"waiting for {container.name}"):
            try:
                return int(self._get(container).wait(timeout=max(1, timeout))["StatusCode"])
            except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
                return None

    def kill(self, container: Container) -> None:
        with engine_errors(f"killing {container.name}"):
            self._get(container).kill()

    def status(self, container: Container) -> str:
        """"created", "running", "exited", ... as the engine says now."""
        c = self._get(container)
        with engine_errors(f"inspecting {container.name}"):
            c.reload()
        return str(c.status)

    def exec(self, container: Container, argv: Sequence[str]) -> tuple[int | None, bytes]:
        """Run ``argv`` in the running container: its exit code and its output."""
        with engine_errors(f"running a command in {container.name}"):
            code, out = self._get(container).exec_run(list(argv), demux=False)
        return code, out or b""

    def logs(self, container: Container, tail: int | None = None) -> str:
        with engine_errors(f"reading the output of {container.name}"):
            data = self._get(container).logs(**({"tail": tail} if tail is not None else {}))
        return data.decode("utf-8", "replace")

    def follow(self, container: Container) -> Iterator[bytes]:
        """The container's output as it comes, until it exits."""
        with engine_errors(f"following the output of {container.name}"):
            yield from self._get(container).logs(stream=True, follow=True)

    def read_archive(self, container: Container, path: str) -> bytes | None:
        """A tar of ``path`` (a file or a folder) in the container, running or stopped; None when
        there is no such path."""
        import docker.errors
        with engine_errors(f"reading {path} from {container.name}"):
            try:
                stream, _ = self._get(container).get_archive(path)
                return b"".join(stream)
            except docker.errors.NotFound:
                return None

    def close(self) -> None:
        """Remove every container (killing those still running) and network of the session,
        also those whose create call was interrupted before it returned."""
        found, networks = dict(self._containers), list(self._networks)
        try:
            # sparse: the listing's own fields, no inspect per container, which fails with
            # NotFound for one removed between the list and the inspect (and lost the rest)
            for c in self._client.containers.list(all=True, filters=self._selector, sparse=True):
                found.setdefault(c.id, c)
            known = {n.id for n in networks}
            networks += [n for n in self._client.networks.list(filters=self._selector) if n.id not in known]
        except Exception:  # noqa: BLE001 - best effort: the engine may be the thing that failed
            pass
        for c in reversed(list(found.values())):
            with contextlib.suppress(Exception):    # never mask the original error
                c.remove(force=True)
        self._containers.clear()
        for net in reversed(networks):
            with contextlib.suppress(Exception):
                net.remove()
        self._networks.clear()
