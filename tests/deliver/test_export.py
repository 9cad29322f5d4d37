"""Exports for Slurm: enroot squashfs (reproducible, enroot's files), OCI bundle run by runc, and
SIF's one-line refusal where Apptainer is missing. Real engine, real mksquashfs/skopeo/umoci/runc."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import uuid

import pytest

from imagebuild import cli
from imagebuild.deliver import export
from imagebuild.engines import get_engine
from imagebuild.errors import ExportError, ImagebuildError

from conftest import ROOT, need

BASE = "imagebuild/base:debian-bookworm"


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def image(docker_client):
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with debootstrap + docker import")
    token = uuid.uuid4().hex
    # a tiny image (a shell, cat, mkdir and their libraries, about 3 MB) keeps exports to seconds
    lib = "/usr/lib/x86_64-linux-gnu"
    dockerfile = (f"FROM {BASE} AS src\n"
                  f"RUN mkdir -p /out/work && echo {token} > /out/work/token\n"
                  "FROM scratch\n"
                  "COPY --from=src /usr/bin/dash /bin/sh\n"
                  "COPY --from=src /usr/bin/cat /usr/bin/mkdir /bin/\n"
                  f"COPY --from=src {lib}/libc.so.6 {lib}/libselinux.so.1 {lib}/libpcre2-8.so.0 "
                  "/lib/x86_64-linux-gnu/\n"
                  f"COPY --from=src {lib}/ld-linux-x86-64.so.2 /lib64/\n"
                  "COPY --from=src /out/ /\n"
                  'ENV PATH=/bin GREETING="hello world" IMAGEBUILD_X=1\n'
                  "WORKDIR /work\n"
                  "VOLUME /data\n"
                  'LABEL io.imagebuild.image-id=export-test io.imagebuild.flavor=cpu\n'
                  'CMD ["cat", "token"]\n')
    ref = "imagebuild/export-test:test"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    return {"ref": ref, "token": token, "client": get_engine("docker", client=docker_client)}


# ----------------------------------------------------------------------------- pure logic

def test_enroot_files_follow_the_image_config():
    files = export.enroot_files({
        "Env": ["PATH=/usr/bin:/bin", "A=x y"], "WorkingDir": "/work dir",
        "Entrypoint": ["/entry.sh"], "Cmd": ["--flag", "$(id); rm -rf /"],
        "Labels": {"b": "2", "a": "multi\nline"}, "Volumes": {"/data": {}, "/cache": {}}})
    assert files["etc/environment"] == "PATH=/usr/bin:/bin\nA=x y\n"
    assert files["etc/fstab"] == ("${ENROOT_ROOTFS}/cache /cache none x-create=dir,bind,rw,nosuid,nodev\n"
                                  "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n")
    rc = files["etc/rc"]
    assert rc.startswith("# a multi line\n# b 2\n\n")
    assert "cd '/work dir' && unset OLDPWD || exit 1\n" in rc
    assert "    exec /entry.sh \"$@\"\n" in rc
    assert "    exec /entry.sh --flag '$(id); rm -rf /'\n" in rc
    assert export.enroot_files({})["etc/fstab"] == ""  # no volumes: an empty fstab
    assert "    exec /bin/sh\n" in export.enroot_files({})["etc/rc"]
    with pytest.raises(ExportError):
        export.enroot_files({"Env": ["BAD=one\ntwo"]})


def test_rc_runs_as_enroot_would(tmp_path):
    """/etc/rc is a real shell script: run it with sh, with and without arguments."""
    rc = tmp_path / "rc"
    rc.write_text(export.enroot_files({"WorkingDir": str(tmp_path), "Cmd": ["pwd"]})["etc/rc"])
    out = subprocess.run(["sh", str(rc)], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(tmp_path)
    out = subprocess.run(["sh", str(rc), "echo", "a b"], capture_output=True, text=True, check=True).stdout
    assert out == "a b\n"


@pytest.mark.parametrize("ref", ["$(id)", "a;rm -rf /", "x\ny", "../etc:1", "UPPER:tag", "", "-rf"])
def test_hostile_references_are_refused(ref):
    with pytest.raises(ImagebuildError):
        export.check_ref(ref)


def test_missing_mksquashfs_names_the_debian_package(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ExportError, match=r"mksquashfs not found on PATH \(install the Debian package "
                                          r"squashfs-tools\)"):
        export.export_sqsh(None, "imagebuild/x:1", tmp_path / "x.sqsh")
    assert cli.main(["export", "imagebuild/x:1", "--format", "sqsh", "--output", str(tmp_path / "x.sqsh")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["imagebuild export: mksquashfs not found on PATH (install the Debian package squashfs-tools)"]
    assert not (tmp_path / "x.sqsh").exists()


def test_sif_without_apptainer_is_one_line(monkeypatch, tmp_path, capsys):
    if export.find_apptainer():
        pytest.skip("apptainer is installed here; the missing-tool line cannot be shown")
    out = tmp_path / "x.sif"
    assert cli.main(["export", "imagebuild/x:1", "--format", "sif", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs apptainer or singularity on PATH" in err[0]
    assert not out.exists()


# ----------------------------------------------------------------------------- real engine

@pytest.mark.engine
def test_sqsh_is_reproducible_and_carries_enroot_files(image, tmp_path):
    if shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None:
        need("mksquashfs/unsquashfs (Debian package squashfs-tools)", "not on PATH")
    client, ref = image["client"], image["ref"]
    one = export.export_sqsh(client, ref, tmp_path / "one.sqsh").path
    two = export.export_sqsh(client, ref, tmp_path / "two.sqsh").path
    assert sha256(one) == sha256(two)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.sqsh", "two.sqsh"]  # nothing left over
    root = tmp_path / "root"
    subprocess.run(["unsquashfs", "-q", "-n", "-d", str(root), str(one)], check=True, capture_output=True)
    assert (root / "etc/environment").read_text().splitlines() == [
        "PATH=/bin", "GREETING=hello world", "IMAGEBUILD_X=1"]
    assert (root / "etc/fstab").read_text() == \
        "${ENROOT_ROOTFS}/data /data none x-create=dir,bind,rw,nosuid,nodev\n"
    assert "# io.imagebuild.image-id export-test\n" in (root / "etc/rc").read_text()
    assert not (root / ".dockerenv").exists() and os.listdir(root / "dev") == []
    # the rc enroot would start with: cd WORKDIR, then exec CMD (or the arguments given)
    run = subprocess.run([shutil.which("chroot") or "/usr/sbin/chroot", str(root), "/bin/sh", "/etc/rc"],
                         capture_output=True, text=True, env={"PATH": "/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == image["token"]
    listing = subprocess.run(["unsquashfs", "-lls", str(one)], capture_output=True, text=True, check=True).stdout
    owners = {line.split()[1] for line in listing.splitlines() if line[:1] in "-dlcbps" and "squashfs-root" in line}
    assert owners == {"root/root"}


@pytest.mark.engine
def test_failed_mksquashfs_leaves_no_half_written_file(image, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "mksquashfs"  # writes a partial file, then fails, as a full disk would
    fake.write_text('#!/bin/sh\nprintf partial > "$2"\necho "Write failed: No space left on device" >&2\nexit 1\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    out = tmp_path / "out" / "x.sqsh"
    with pytest.raises(ExportError, match="mksquashfs failed .*No space left on device"):
        export.export_sqsh(image["client"], image["ref"], out)
    assert os.listdir(out.parent) == []


def test_image_user_becomes_uid_and_gid(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nalice:x:1000:1001::/home/a:/bin/sh\n")
    (tmp_path / "etc/group").write_text("root:x:0:\nvideo:x:44:\n")
    assert export.resolve_user("", tmp_path) == {"uid": 0, "gid": 0}
    assert export.resolve_user("alice", tmp_path) == {"uid": 1000, "gid": 1001}
    assert export.resolve_user("1000", tmp_path) == {"uid": 1000, "gid": 1001}
    assert export.resolve_user("alice:video", tmp_path) == {"uid": 1000, "gid": 44}
    assert export.resolve_user("5:6", tmp_path) == {"uid": 5, "gid": 6}
    with pytest.raises(ExportError, match="'bob' is not in the image's /etc/passwd"):
        export.resolve_user("bob", tmp_path)


def test_runtime_config_suits_a_batch_job(tmp_path):
    defaults = {"process": {"terminal": True, "args": ["sh"], "rlimits": [{"type": "RLIMIT_NOFILE"}]},
                "root": {"path": "rootfs", "readonly": True}, "hostname": "runc",
                "mounts": [{"destination": "/dev/shm", "type": "tmpfs", "options": ["nosuid", "size=65536k"]}],
                "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]}}
    config = export.runtime_config({"Entrypoint": ["/e"], "Cmd": ["x"], "Env": ["A=1"], "WorkingDir": "/w",
                                    "Labels": {"b": "2", "a": "1"}}, defaults, tmp_path)
    assert config["process"]["args"] == ["/e", "x"] and config["process"]["env"] == ["A=1"]
    assert config["process"]["cwd"] == "/w" and config["process"]["terminal"] is False
    assert "rlimits" not in config["process"] and "hostname" not in config
    assert config["root"] == {"path": "rootfs", "readonly": False}
    assert [n["type"] for n in config["linux"]["namespaces"]] == ["pid", "ipc", "mount"]
    assert config["mounts"][0]["options"] == ["nosuid"]
    assert list(config["annotations"]) == ["a", "b"]


@pytest.mark.engine
def test_enroot_files_never_written_through_image_symlinks(docker_client, tmp_path):
    """An image whose /etc/rc and /etc/environment are links to absolute paths: the export writes
    its own regular files and nothing lands at the link targets on the host."""
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with debootstrap + docker import")
    if shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None:
        need("mksquashfs (Debian package squashfs-tools)", "not on PATH")
    outside = tmp_path / "outside"
    outside.mkdir()
    dockerfile = (f"FROM {BASE} AS src\nRUN mkdir -p /out/etc && ln -s {outside}/rc /out/etc/rc "
                  f"&& ln -s {outside}/environment /out/etc/environment\n"
                  "FROM scratch\nCOPY --from=src /out/ /\n")
    ref = "imagebuild/export-links:test"
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    out = export.export_sqsh(get_engine("docker", client=docker_client), ref, tmp_path / "x.sqsh").path
    assert os.listdir(outside) == []
    listing = subprocess.run(["unsquashfs", "-lls", str(out)], capture_output=True, text=True,
                             check=True).stdout
    kinds = {line.split()[-1]: line[0] for line in listing.splitlines() if "squashfs-root/etc/" in line}
    assert kinds["squashfs-root/etc/rc"] == "-" and kinds["squashfs-root/etc/environment"] == "-"


@pytest.mark.engine
@pytest.mark.parametrize("method", export.OCI_METHODS)
def test_oci_bundle_runs_under_runc(image, tmp_path, method):
    for tool in (("skopeo", "umoci", "runc") if method == "umoci" else ("runc",)):
        if shutil.which(tool) is None:
            need(f"{tool} (Debian package {tool})", "not on PATH")
    bundle = export.export_oci_bundle(image["client"], image["ref"], tmp_path / "bundle", method=method).path
    config = json.loads((bundle / "config.json").read_text())
    assert config["process"]["cwd"] == "/work"
    assert "GREETING=hello world" in config["process"]["env"]
    assert config["process"]["args"] == ["cat", "token"]
    # fit for a multi-node job: the host's network and hostname, no terminal
    assert {ns["type"] for ns in config["linux"]["namespaces"]}.isdisjoint({"network", "uts"})
    assert config["process"]["terminal"] is False and "hostname" not in config
    assert (bundle / "rootfs/work/token").read_text().strip() == image["token"]
    with pytest.raises(ExportError, match="already exists"):
        export.export_oci_bundle(image["client"], image["ref"], bundle, method=method)
    name = f"imagebuild-test-{uuid.uuid4().hex[:8]}"
    run = subprocess.run(["runc", "run", "--bundle", str(bundle), name], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == image["token"]


# ----------------------------------------------------------------------------- hostile images

def _build_from_base(docker_client, name: str, steps: str) -> str:
    try:
        docker_client.images.get(BASE)
    except Exception:  # noqa: BLE001
        need(f"the base image {BASE}", "create it with `imagebuild base debian-bookworm`")
    ref = f"imagebuild/export-{name}:test"
    docker_client.images.build(fileobj=io.BytesIO(f"FROM {BASE}\n{steps}".encode()), tag=ref, rm=True)
    return ref


def _cli(*args: str) -> subprocess.CompletedProcess:
    import sys
    return subprocess.run([sys.executable, "-m", "imagebuild", "export", *args], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def hostile(docker_client, tmp_path_factory):
    """An image whose /etc/passwd is a link to a file of the host (which names uid 4242 with gid
    777), with a character device, a block device, a FIFO and setuid/setgid programs."""
    host = tmp_path_factory.mktemp("host")
    (host / "passwd").write_text("root:x:0:0::/root:/bin/sh\nhostile:x:4242:777::/:/bin/sh\n")
    ref = _build_from_base(docker_client, "hostile", (
        f"RUN mknod /srv/null c 1 3 && mknod /srv/loop0 b 7 0 && mkfifo /srv/fifo"
        " && cp /bin/true /usr/local/bin/suid-true && chmod 4755 /usr/local/bin/suid-true"
        " && cp /bin/true /usr/local/bin/sgid-true && chmod 2755 /usr/local/bin/sgid-true"
        f" && ln -sf {host}/passwd /etc/passwd\n"
        "USER 4242\n"))
    return {"ref": ref, "host": host}


@pytest.mark.engine
def test_hostile_image_oci_bundle(hostile, tmp_path):
    """The user lookup stays inside the image (the host's passwd would give gid 777), no special
    file reaches the bundle, setuid/setgid files are listed and their bits removed."""
    if shutil.which("runc") is None:
        need("runc (Debian package runc)", "not on PATH")
    out = tmp_path / "bundle"
    run = _cli(hostile["ref"], "--format", "oci-bundle", "--output", str(out))
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["process"]["user"] == {"uid": 4242, "gid": 0}
    rootfs = out / "rootfs"
    assert os.path.islink(rootfs / "etc/passwd")  # kept as the image has it, never followed
    kinds = {}
    for top, dirs, files in os.walk(rootfs):
        for name in dirs + files:
            mode = os.lstat(os.path.join(top, name)).st_mode
            kinds[os.path.join(top, name)] = mode
    import stat as st
    assert not [p for p, m in kinds.items()
                if st.S_ISCHR(m) or st.S_ISBLK(m) or st.S_ISFIFO(m) or st.S_ISSOCK(m)]
    assert not [p for p, m in kinds.items() if st.S_ISREG(m) and m & 0o6000]
    assert st.S_IMODE(os.stat(rootfs / "usr/local/bin/suid-true").st_mode) == 0o755
    warnings = [line for line in run.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, run.stderr
    assert "/srv/null" in warnings[0] and "/srv/loop0" in warnings[0] and "/srv/fifo" in warnings[0]
    assert "setuid/setgid" in warnings[1] and "bits removed" in warnings[1]
    assert "/usr/local/bin/sgid-true" in warnings[1]


@pytest.mark.engine
def test_hostile_image_keep_setuid_and_sqsh(hostile, docker_client, tmp_path):
    if shutil.which("mksquashfs") is None or shutil.which("unsquashfs") is None:
        need("mksquashfs/unsquashfs (Debian package squashfs-tools)", "not on PATH")
    res = export.export_oci_bundle(get_engine("docker", client=docker_client), hostile["ref"], tmp_path / "kept",
                                   keep_setuid=True)
    assert "/usr/local/bin/suid-true" in res.setuid_files and res.setuid_kept
    assert "/srv/null" in res.special_files and "/srv/fifo" in res.special_files
    assert oct(os.stat(res.path / "rootfs/usr/local/bin/suid-true").st_mode & 0o7777) == oct(0o4755)
    sq = export.export_sqsh(get_engine("docker", client=docker_client), hostile["ref"], tmp_path / "x.sqsh")
    assert set(sq.setuid_files) >= {"/usr/local/bin/suid-true", "/usr/local/bin/sgid-true"}
    assert not sq.setuid_kept
    listing = subprocess.run(["unsquashfs", "-lls", str(sq.path)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    entries = [line for line in listing if "squashfs-root" in line]
    assert entries and not [line for line in entries if line[0] in "cbps"]
    assert not [line for line in entries if line[0] == "-" and ("s" in line[1:10].lower())]
    assert os.listdir(hostile["host"]) == ["passwd"]  # nothing written beside the host's file


@pytest.mark.engine
@pytest.mark.parametrize("name,steps,message", [
    ("bigpasswd", "RUN head -c 20000000 /dev/zero | tr '\\\\0' a > /etc/passwd\nUSER bob\n",
     "the image's /etc/passwd is larger than 4 MiB; refusing to read it for the image's USER"),
    ("zerogroup", "RUN ln -sf /dev/zero /etc/group\nUSER root:video\n",
     "image group 'video' is not in the image's /etc/group"),
    ("climbing", "RUN rm /etc/passwd && ln -s ../../../../../../../../etc/passwd /etc/passwd\nUSER root\n",
     "/etc/passwd of the image has more than 40 symbolic links on its way"),
])
def test_hostile_account_files_are_one_line(docker_client, tmp_path, name, steps, message):
    """A huge /etc/passwd, /etc/group linked to /dev/zero (a MemoryError before), a link climbing
    out with '..': each export is refused with one line, exit 2, and nothing is left behind."""
    ref = _build_from_base(docker_client, name, steps)
    out = tmp_path / "out" / "bundle"
    run = _cli(ref, "--format", "oci-bundle", "--output", str(out))
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("imagebuild")]
    assert errors == [f"imagebuild export: {message}"], run.stderr
    assert "Traceback" not in run.stderr
    assert os.listdir(out.parent) == []


def test_resolve_in_root_never_leaves_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/abs").symlink_to("/etc/passwd")
    (root / "etc/up").symlink_to("../../../../../../etc")
    (root / "etc/loop").symlink_to("loop")
    real = os.path.realpath(root)
    assert export.resolve_in_root(root, "/etc/abs") == export.Path(real, "etc/passwd")
    assert export.resolve_in_root(root, "/etc/up/shadow") == export.Path(real, "etc/shadow")
    assert export.resolve_in_root(root, "/../../x") == export.Path(real, "x")
    with pytest.raises(ExportError, match="more than 40 symbolic links"):
        export.resolve_in_root(root, "/etc/loop")
    with pytest.raises(ExportError, match="not a valid uid"):
        export.resolve_user("²", root)
    with pytest.raises(ExportError, match="not a valid uid"):
        export.resolve_user("99999999999", root)


@pytest.mark.engine
def test_hostile_image_through_umoci(hostile, docker_client, tmp_path):
    """The skopeo + umoci path unpacks the layers itself: the same special files are left out and
    the same bits removed."""
    for tool in ("skopeo", "umoci"):
        if shutil.which(tool) is None:
            need(f"{tool} (Debian package {tool})", "not on PATH")
    res = export.export_oci_bundle(get_engine("docker", client=docker_client), hostile["ref"], tmp_path / "b",
                                   method="umoci")
    assert {"/srv/null", "/srv/loop0", "/srv/fifo"} <= set(res.special_files)
    assert "/usr/local/bin/suid-true" in res.setuid_files
    import stat as st
    for top, dirs, files in os.walk(res.path / "rootfs"):
        for name in dirs + files:
            mode = os.lstat(os.path.join(top, name)).st_mode
            assert not (st.S_ISCHR(mode) or st.S_ISBLK(mode) or st.S_ISFIFO(mode) or st.S_ISSOCK(mode))
            assert not (st.S_ISREG(mode) and mode & 0o6000), os.path.join(top, name)
