"""ddp.elastic on the host's torch (the smoke-cpu run in tests/smoke/test_smoke_image.py runs it inside the
image): a real torchrun with --max-restarts 1, a worker that really kills itself, and the case
where no worker dies, which must fail (the check proves a restart, not just a finished run)."""

from __future__ import annotations

import os

import pytest

from imagebuild.smoke import elastic
from imagebuild.smoke.context import Context

pytest.importorskip("torch", reason="ddp.elastic needs torch (the smoke-cpu image test runs it too)")


def _ctx(tmp_path) -> Context:
    ctx = Context(workdir=str(tmp_path), timeout=120)
    ctx.start_clock()
    return ctx


def test_elastic_run_survives_a_killed_worker(tmp_path):
    res = elastic.check_ddp_elastic(_ctx(tmp_path))
    assert res.status == "pass", res.detail
    assert res.metrics["restart_count"] == 1 and res.metrics["resumed_at"] == elastic.KILL_AT
    assert res.metrics["max_rank_diff"] == 0 and res.metrics["max_rel_diff"] <= 1e-6
    marker = tmp_path / "ddp-elastic" / "killed"
    assert marker.read_text().startswith(f"rank 1 killed itself at step {elastic.KILL_AT}")


def test_a_run_without_a_kill_fails(tmp_path):
    """The marker already exists: no worker dies, no restart happens, and the check says so."""
    os.makedirs(tmp_path / "ddp-elastic")
    (tmp_path / "ddp-elastic" / "killed").write_text("already\n")
    res = elastic.check_ddp_elastic(_ctx(tmp_path))
    assert res.status == "fail"
    assert "finished in restart 0, not 1" in res.detail
    assert f"resumed at step 0, not {elastic.KILL_AT}" in res.detail
