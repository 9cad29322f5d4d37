"""An image another builder made, brought to the form BuildKit gives (issue 27: portable build
contexts). Pure logic on synthetic layers and configs; the real builds (BuildKit and buildah on
the same context) are in tests/builder/test_context_builders.py.

What BuildKit writes for each instruction was read off images Docker 20.10's BuildKit built from
the generated recipes (smoke-cpu, the Debian communication image and its devel image): the
expected strings below are those, for the instruction forms the recipes use."""

from __future__ import annotations

import io
import tarfile

import pytest

from imagebuild.builder import builders
from imagebuild.builder import reproducible as rp
from imagebuild.errors import ImagebuildError

EPOCH = 1795219200

DOCKERFILE = """\
# Generated: a comment line
FROM imagebuild/base:debian-bookworm AS devel
RUN echo devel > /opt/x

FROM imagebuild/base:debian-bookworm
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# OS packages
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 \\
 && rm -rf /var/lib/apt/lists/*
COPY --from=devel /opt/x /opt/x
COPY requirements/wheels.txt /opt/imagebuild/requirements/wheels.txt
RUN --mount=type=secret,id=ca-bundle if [ -s /run/secrets/ca-bundle ]; then export X=1; fi \\
 && true
ENTRYPOINT ["/usr/local/bin/imagebuild-entrypoint"]
CMD ["/bin/bash"]
ENV IMAGEBUILD_IMAGE_ID="smoke-cpu" \\
    PATH="/opt/venv/bin:/usr/bin:/bin"
LABEL io.imagebuild.flavor="cpu" \\
      org.opencontainers.image.description="CPU test image: Debian's Open MPI, \\"quoted\\""
"""

EXPECTED = [
    ("SHELL [/bin/bash -o pipefail -c]", True),
    ("RUN /bin/bash -o pipefail -c apt-get update  && apt-get install -y --no-install-recommends python3"
     "  && rm -rf /var/lib/apt/lists/* # buildkit", False),
    ("COPY /opt/x /opt/x # buildkit", False),
    ("COPY requirements/wheels.txt /opt/imagebuild/requirements/wheels.txt # buildkit", False),
    ("RUN /bin/bash -o pipefail -c if [ -s /run/secrets/ca-bundle ]; then export X=1; fi  && true # buildkit", False),
    ('ENTRYPOINT ["/usr/local/bin/imagebuild-entrypoint"]', True),
    ('CMD ["/bin/bash"]', True),
    ("ENV IMAGEBUILD_IMAGE_ID=smoke-cpu PATH=/opt/venv/bin:/usr/bin:/bin", True),
    ("LABEL io.imagebuild.flavor=cpu org.opencontainers.image.description=CPU test image: Debian's Open MPI, "
     '"quoted"', True),
]


def test_the_last_stage_gives_buildkits_history():
    got = builders.buildkit_history(DOCKERFILE, ["bash"])
    assert [(e["created_by"], e.get("empty_layer", False)) for e in got] == EXPECTED
    assert {e["comment"] for e in got} == {builders.BUILDKIT_COMMENT}


@pytest.mark.parametrize("line, words", [
    ("WORKDIR /opt", "WORKDIR"), ("USER nobody", "USER"), ("ARG X=1", "ARG"),
    ('RUN ["/bin/true"]', "exec form"), ("COPY --chown=1:1 a /a", "--chown"),
    ("RUN --network=none true", "--network"), ("CMD /bin/bash", "JSON form"),
])
def test_an_instruction_whose_record_is_not_known_is_refused(line, words):
    with pytest.raises(ImagebuildError) as err:
        builders.buildkit_history(f"FROM x\n{line}\n")
    assert words in str(err.value)


def _buildah_config(env, history_extra=0, layers=5):
    """A config as buildah writes it for DOCKERFILE on a one-layer base with one history entry."""
    entries = [{"created": "2026-11-27T10:00:00Z", "created_by": f"/bin/sh -c #(nop) STEP {i}",
                "comment": f"FROM {i}", **({"empty_layer": True} if i in (0, 5, 6, 7, 8) else {})}
               for i in range(9 + history_extra)]
    return {
        "architecture": "amd64", "os": "linux", "created": "2026-11-27T10:00:01Z",
        "container": "abc", "parent": "sha256:" + "1" * 64, "container_config": {"Hostname": "abc"},
        "config": {"Hostname": "e7804f85aa52", "Domainname": "", "User": "", "AttachStdin": False,
                   "Tty": False, "Env": env, "Cmd": ["/bin/bash"], "Image": "", "Volumes": {},
                   "WorkingDir": "", "Entrypoint": ["/usr/local/bin/imagebuild-entrypoint"], "OnBuild": [],
                   "Labels": {"io.buildah.version": "1.28.2", "io.imagebuild.flavor": "cpu"},
                   "Shell": ["/bin/bash", "-o", "pipefail", "-c"]},
        "history": [{"created": "2023-06-10T00:00:00Z", "created_by": "imagebuild base"}] + entries,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + f"{i}" * 64 for i in range(layers)]},
    }


BASE = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["bash"]}
BUILDAH_ENV = ["IMAGEBUILD_IMAGE_ID=smoke-cpu", "PATH=/opt/venv/bin:/usr/bin:/bin"]   # buildah's order


def test_a_buildah_config_is_written_as_buildkit_writes_it():
    config = _buildah_config(BUILDAH_ENV)
    assert builders.built_by_buildah(config)
    out = builders.as_buildkit(config, DOCKERFILE, BASE, base_layers=1, what="image x")
    assert sorted(out) == ["architecture", "config", "created", "history", "os", "rootfs"]
    # only the fields BuildKit writes; the environment in its order (the base's PATH in place)
    assert out["config"] == {
        "ArgsEscaped": True, "Cmd": ["/bin/bash"], "Entrypoint": ["/usr/local/bin/imagebuild-entrypoint"],
        "Env": ["PATH=/opt/venv/bin:/usr/bin:/bin", "IMAGEBUILD_IMAGE_ID=smoke-cpu"],
        "Labels": {"io.imagebuild.flavor": "cpu"}, "OnBuild": None,
        "Shell": ["/bin/bash", "-o", "pipefail", "-c"]}
    assert out["history"][0] == config["history"][0]                   # the base's own entries
    assert [(h["created_by"], h.get("empty_layer", False)) for h in out["history"][1:]] == EXPECTED
    assert not builders.built_by_buildah(out)


def test_a_buildah_image_that_is_not_a_build_of_the_dockerfile_is_refused():
    # two layers too few above the base (built without --layers: one layer for all steps)
    with pytest.raises(ImagebuildError, match=r"1 layer\(s\) above its base, but the Dockerfile's last stage "
                                              r"makes 4: not a `buildah bud --layers` build"):
        builders.as_buildkit(_buildah_config(BUILDAH_ENV, layers=2), DOCKERFILE, BASE, base_layers=1, what="x")
    # an environment the Dockerfile does not set
    with pytest.raises(ImagebuildError, match="its environment is not the one"):
        builders.as_buildkit(_buildah_config(BUILDAH_ENV + ["EXTRA=1"]), DOCKERFILE, BASE, base_layers=1, what="x")
    # a history that is not one entry per instruction
    config = _buildah_config(BUILDAH_ENV)
    config["history"][1]["comment"] = ""
    with pytest.raises(ImagebuildError, match="one entry per instruction"):
        builders.as_buildkit(config, DOCKERFILE, BASE, base_layers=1, what="x")


# -- layers: what differs between builders and not between file systems ----------------------

def _tar(path, entries):
    """entries: (name, kind, extra) with kind dir|file|whiteout; extra: uname, or the file's bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tf:
        for name, kind, extra in entries:
            info = tarfile.TarInfo(name)
            info.mtime, info.uname, info.gname = EPOCH + 60, extra if kind == "dir" else "", ""
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                data = b"" if kind == "whiteout" else extra
                info.size, info.mode = len(data), (0o600 if kind == "whiteout" else 0o644)
                tf.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


def _with_type_bits(path):
    """The tar at ``path`` with each directory's mode field holding the file type too (0o40755),
    as buildah writes it (Python's tarfile writes the permission bits only)."""
    data = bytearray(path.read_bytes())
    with tarfile.open(path) as tf:
        offsets = [m.offset for m in tf.getmembers() if m.isdir()]
    for at in offsets:
        header = data[at:at + 512]
        header[100:108] = b"0040755\0"
        header[148:156] = b" " * 8
        header[148:156] = b"%06o\0 " % sum(header)
        data[at:at + 512] = header
    path.write_bytes(bytes(data))
    with tarfile.open(path) as tf:
        assert {m.mode for m in tf.getmembers() if m.isdir()} == {0o40755}
    return path


def test_a_layer_is_rewritten_without_what_only_names_its_builder(tmp_path):
    base = _tar(tmp_path / "base.tar", [("etc", "dir", "root"), ("run", "dir", "root"),
                                       ("var/lib/apt/lists", "dir", "root")])
    # BuildKit's step: names from its host's user database, an opaque marker in the directory it
    # made, a whiteout with its own mode; the parent it only touched
    buildkit = _tar(tmp_path / "bk.tar", [
        ("etc", "dir", "root"), ("etc/ssh", "dir", "root"), ("etc/ssh/.wh..wh..opq", "whiteout", None),
        ("etc/ssh/sshd_config", "file", b"x"), ("var/lib/apt/lists/.wh.partial", "whiteout", None),
        ("run", "dir", "root")])
    # buildah's: no names, no opaque marker, its mount points left behind
    buildah = _tar(tmp_path / "bah.tar", [
        ("etc", "dir", ""), ("etc/hosts", "file", b""), ("etc/ssh", "dir", ""),
        ("etc/ssh/sshd_config", "file", b"x"), ("var/lib/apt/lists/.wh.partial", "whiteout", None),
        ("run", "dir", "")])
    _with_type_bits(buildah)
    digests = []
    for name, layer in (("bk", buildkit), ("bah", buildah)):
        lower = rp.Lower()
        lower.add_tar(base)
        digests.append(rp.normalize_layer(layer, tmp_path / f"{name}.out", EPOCH, lower))
        assert "etc/ssh/sshd_config" in lower.paths       # the layer is now below the next one
    assert digests[0] == digests[1]
    with tarfile.open(tmp_path / "bk.out") as tf:
        got = {m.name: m for m in tf.getmembers()}
    assert sorted(got) == ["etc", "etc/ssh", "etc/ssh/sshd_config", "var/lib/apt/lists/.wh.partial"]
    assert {(m.uname, m.gname) for m in got.values()} == {("", "")}
    assert (got["var/lib/apt/lists/.wh.partial"].mode, got["var/lib/apt/lists/.wh.partial"].mtime) == (0, 0)


def test_what_the_layers_below_decide_stays(tmp_path):
    """An opaque marker over a directory the layers below hold hides their files; a directory
    whose mode changed is a change; an /etc/hosts the layers below have is the image's own."""
    base = _tar(tmp_path / "base.tar", [("etc", "dir", "root"), ("etc/ssh", "dir", "root"),
                                       ("etc/ssh/old", "file", b"o"), ("etc/hosts", "file", b"")])
    layer = _tar(tmp_path / "l.tar", [("etc/ssh", "dir", "root"), ("etc/ssh/.wh..wh..opq", "whiteout", None),
                                      ("etc/hosts", "file", b"")])
    lower = rp.Lower()
    lower.add_tar(base)
    rp.normalize_layer(layer, tmp_path / "out.tar", EPOCH, lower)
    with tarfile.open(tmp_path / "out.tar") as tf:
        names = [m.name for m in tf.getmembers()]
    assert names == ["etc/hosts", "etc/ssh", "etc/ssh/.wh..wh..opq"]
    assert "etc/ssh/old" not in lower.paths and "etc/ssh" in lower.paths     # hidden by the marker
    # without what lies below, nothing is taken for a builder's
    rp.normalize_layer(layer, tmp_path / "alone.tar", EPOCH)
    with tarfile.open(tmp_path / "alone.tar") as tf:
        assert [m.name for m in tf.getmembers()] == names
