"""atomic.atomic_file / write_atomic: the host side's one way to replace a file (a temporary file
beside it, renamed on success, removed on any failure)."""

from __future__ import annotations

import os
import stat

import pytest

from imagebuild.atomic import atomic_file, write_atomic


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_text_and_bytes_replace_the_file_whole(tmp_path):
    target = tmp_path / "out.txt"
    write_atomic(target, "héllo\nworld\n")
    assert target.read_bytes() == "héllo\nworld\n".encode("utf-8")
    write_atomic(str(target), b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_permissions_are_the_umasks_unless_given(tmp_path):
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "plain", "x")
        write_atomic(tmp_path / "private", "x", perm=0o600)
        write_atomic(tmp_path / "script", "x", perm=0o755)
    finally:
        os.umask(umask)
    assert (_mode(tmp_path / "plain"), _mode(tmp_path / "private"), _mode(tmp_path / "script")) == \
        (0o644, 0o600, 0o755)


def test_a_failure_inside_the_block_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "lock.txt"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_file(target, "w") as fh:
            fh.write("half")
            raise RuntimeError("interrupted")
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(target, "wb") as fh:
            raise KeyboardInterrupt
    with pytest.raises(TypeError):
        write_atomic(target, 12345)  # type: ignore[arg-type] - neither text nor bytes
    assert target.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["lock.txt"]


def test_the_temporary_file_can_be_checked_before_it_takes_the_place(tmp_path):
    target = tmp_path / "matrix.yaml"
    target.write_text("old\n")
    with atomic_file(target, "w", suffix=".sync") as fh:
        fh.write("new\n")
        fh.flush()
        tmp = fh.name
        assert os.path.dirname(tmp) == str(tmp_path) and os.path.basename(tmp).startswith(".matrix.yaml.")
        assert tmp.endswith(".sync") and open(tmp).read() == "new\n"
        assert target.read_text() == "old\n"
    assert target.read_text() == "new\n" and not os.path.exists(tmp)


def test_folders_are_made_only_when_asked(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "a" / "b.json", "{}")
    write_atomic(tmp_path / "a" / "b.json", "{}", parents=True)
    assert (tmp_path / "a" / "b.json").read_text() == "{}"


def test_only_new_files_are_written(tmp_path):
    with pytest.raises(ValueError):
        with atomic_file(tmp_path / "x", "a"):
            pass
