"""The driver-upgrade workflow (.github/workflows/images.yml): triggers, the plan -> matrix wiring,
and every `imagebuild ...` line it runs naming a real command with arguments that command accepts."""

from __future__ import annotations

import argparse
import json
import importlib
import re
import shlex

import pytest
import yaml

from imagebuild import cli

from conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "images.yml"
CALL_RE = re.compile(r"(?<![\w./-])imagebuild\s+([a-z][a-z-]*)([^)\n|;&<>]*)")
# `${VAR:+words}` gives its words when VAR is set: the arguments checked are those words
OPTIONAL_RE = re.compile(r"\$\{\w+:\+([^}]*)\}")


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def runs(workflow: dict):
    for job_name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            if "run" in step:
                # shell line continuations joined, so a call spread over lines is one call
                yield job_name, step.get("name", ""), re.sub(r"\\\n\s*", " ", step["run"])


def test_triggers_driver_file_and_manual_dispatch(workflow):
    on = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert on["push"]["paths"] == ["cluster/driver.yaml"]
    inputs = on["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"driver-from", "driver-to"} and all(i["required"] for i in inputs.values())
    driver = yaml.safe_load((ROOT / "cluster" / "driver.yaml").read_text())
    assert re.fullmatch(r"[0-9]{3}\.[0-9]{1,3}\.[0-9]{1,3}", str(driver["driver"])) and driver["gpu"]


def test_plan_output_feeds_the_image_matrix(workflow):
    plan, images = workflow["jobs"]["plan"], workflow["jobs"]["images"]
    assert plan["outputs"]["matrix"] == "${{ steps.plan.outputs.matrix }}"
    plan_step = next(s for s in plan["steps"] if s.get("id") == "plan")
    assert "imagebuild plan" in plan_step["run"] and "--format github" in plan_step["run"]
    assert 'echo "matrix=$matrix" >> "$GITHUB_OUTPUT"' in plan_step["run"]
    assert images["needs"] == "plan"
    assert images["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert images["env"]["IMAGE"] == "${{ matrix.image }}"
    # build, test and publish, in this order, for every image of the matrix
    order = [cmd for _job, _name, text in runs({"jobs": {"images": images}})
             for cmd, _args in CALL_RE.findall(text)]
    positions = [order.index(c) for c in ("build", "test", "publish")]
    assert positions == sorted(positions)


def test_secrets_only_reach_the_publish_step(workflow):
    for job in workflow["jobs"].values():
        for step in job.get("steps", []):
            text = yaml.safe_dump(step)
            if "secrets." in text:
                assert "imagebuild publish" in step.get("run", ""), step.get("name")
            # no ${{ }} expression is pasted into a shell line: values travel through env
            assert "${{" not in step.get("run", ""), step.get("name")


def calls(workflow: dict) -> list[tuple[str, str, str]]:
    """(step name, command, its arguments) of every `imagebuild ...` line the workflow runs."""
    out = []
    for _job, name, text in runs(workflow):
        text = OPTIONAL_RE.sub(r"\1", text)
        for m in CALL_RE.finditer(text):
            args = m.group(2)
            line_start = text.rfind("\n", 0, m.start()) + 1
            if re.search(r"\bxargs\b", text[line_start:m.start()]):
                args += " xargs-appends-the-images"     # the names xargs adds from its input
            out.append((name, m.group(1), args))
    return out


def test_every_imagebuild_call_is_a_real_command_with_valid_arguments(workflow):
    assert {cmd for _n, cmd, _a in calls(workflow)} >= {"plan", "base", "build", "test", "publish", "export",
                                                      "slurm-script"}
    check_calls(workflow)


def check_calls(workflow: dict) -> None:
    unchecked = []
    for step, cmd, args in calls(workflow):
        assert cmd in cli.COMMANDS, f"step {step!r} runs unknown command imagebuild {cmd}"
        module_name, _help = cli.COMMANDS[cmd]
        try:
            module = importlib.import_module(f"imagebuild.cli.commands.{module_name}")
        except ImportError:
            unchecked.append(cmd)  # the command's module is not written yet
            continue
        parser = cli._Parser(prog=f"imagebuild {cmd}")
        module.configure(parser)
        argv = shlex.split(args)
        parsed = parser.parse_args(argv)  # raises ImagebuildError on an unknown or malformed flag
        assert isinstance(parsed, argparse.Namespace)
    assert unchecked == [], f"commands without a module: {unchecked}"


def test_plan_prints_the_matrix_the_workflow_expects(capsys):
    """The contract between job `plan` and job `images`: one line of JSON with an `include` list
    whose entries name images of the matrix under `image`."""
    from imagebuild.render.run import load_images

    driver = yaml.safe_load((ROOT / "cluster" / "driver.yaml").read_text())
    assert cli.main(["plan", "--matrix", str(ROOT / "matrix.yaml"), "--driver-from", "550.54.15",
                     "--driver-to", str(driver["driver"]), "--gpu", str(driver["gpu"]),
                     "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one line for $GITHUB_OUTPUT
    matrix = json.loads(out)
    known = load_images(ROOT / "matrix.yaml")
    assert matrix["include"], "an upgrade from 550 to the cluster's driver rebuilds some images"
    assert all(entry["image"] in known for entry in matrix["include"])


def test_actions_are_pinned_by_full_commit(workflow):
    """A tag can be moved to other code; a commit cannot. Every `uses:` names a 40-digit commit
    (the tag it was in a comment beside it)."""
    uses = [step["uses"] for job in workflow["jobs"].values() for step in job.get("steps", [])
            if "uses" in step]
    assert uses
    for ref in uses:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}", ref), ref


# --- the heavy tier's workflow (.github/workflows/heavy.yml) ---------------------------------------

HEAVY = ROOT / ".github" / "workflows" / "heavy.yml"


@pytest.fixture(scope="module")
def heavy() -> dict:
    return yaml.safe_load(HEAVY.read_text())


def test_the_heavy_tier_runs_weekly_and_when_a_compiled_component_changes(heavy):
    from imagebuild.components import COMPONENTS
    on = heavy[True] if True in heavy else heavy["on"]
    (cron,) = [entry["cron"] for entry in on["schedule"]]
    assert len(cron.split()) == 5 and cron.split()[2:4] == ["*", "*"] and cron.split()[4] != "*"  # weekly
    assert "workflow_dispatch" in on
    paths = set(on["push"]["paths"])
    # every compiled block's fragment, the blocks themselves, imagebuild's NCCL benchmark, and what
    # makes an image reproducible
    for block in COMPONENTS:
        assert f"imagebuild/recipes/fragments/{block.name}.sh.j2" in paths, block.name
    assert {"imagebuild/recipes/fragments/nccl-bench.sh.j2", "imagebuild/smoke/bench/nccl_bw.c"} <= paths
    assert {"imagebuild/render/blocks.py", "imagebuild/components.py", "imagebuild/packagers.py",
            "imagebuild/recipes/fragments/packages.sh.j2", "imagebuild/builder/reproducible.py",
            "matrix.yaml"} <= paths
    for path in paths:
        assert (ROOT / path).is_file(), path


def test_the_heavy_workflow_runs_the_heavy_tier_under_ci(heavy):
    (job,) = heavy["jobs"].values()
    lines = [step["run"] for step in job["steps"] if "run" in step]
    assert any(re.search(r"\bbash scripts/test --heavy$", line.strip()) for line in lines)
    (test_step,) = [step for step in job["steps"] if "scripts/test --heavy" in step.get("run", "")]
    assert test_step["env"]["CI"] == "true"          # a test that needs a service fails, never skips
    # what the tier builds comes from the package registries: no source mirror to fetch from
    assert not [line for line in lines if "sources fetch" in line] and "env" not in job
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert uses and all(re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}", ref) for ref in uses)


def test_the_heavy_marker_is_left_out_of_the_default_run_and_selected_by_heavy():
    import subprocess
    import sys
    args = [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider",
            "tests/builder/test_reproducible.py", "tests/smoke/test_comms_wheels_image.py"]
    fast = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    heavy_run = subprocess.run([*args, "--heavy"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert fast.returncode == 0 and heavy_run.returncode == 0, fast.stdout[-2000:] + heavy_run.stdout[-2000:]
    fast_ids = [ln for ln in fast.stdout.splitlines() if "::" in ln]
    heavy_ids = [ln for ln in heavy_run.stdout.splitlines() if "::" in ln]
    assert sorted(heavy_ids) == sorted([
        "tests/smoke/test_comms_wheels_image.py::test_a_second_cold_build_gives_the_same_image_id",
        "tests/builder/test_reproducible.py::test_smoke_cpu_two_cold_builds_give_one_id_that_lock_check_accepts"])
    assert not set(fast_ids) & set(heavy_ids) and len(fast_ids) > 20
    assert " deselected" in fast.stdout and " deselected" in heavy_run.stdout


# --- the sharded build of the whole matrix (.github/workflows/shards.yml, issue 27) ----------------

SHARDS = ROOT / ".github" / "workflows" / "shards.yml"


@pytest.fixture(scope="module")
def sharded() -> dict:
    return yaml.safe_load(SHARDS.read_text())


def test_the_split_feeds_one_build_job_per_shard_and_one_merge(sharded):
    jobs = sharded["jobs"]
    assert set(jobs) == {"shards", "build", "merge"}
    split = next(s for s in jobs["shards"]["steps"] if s.get("id") == "split")
    assert jobs["shards"]["outputs"]["matrix"] == "${{ steps.split.outputs.matrix }}"
    assert 'imagebuild images --shards "$builders" --format github' in split["run"]
    assert 'echo "matrix=$matrix" >> "$GITHUB_OUTPUT"' in split["run"]
    build = jobs["build"]
    assert build["needs"] == "shards" and build["strategy"]["fail-fast"] is False
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.shards.outputs.matrix) }}"
    assert build["env"]["SHARD"] == "${{ matrix.shard }}"
    # each builder builds, tests, locks and publishes its own shard, in that order
    order = [cmd for _n, cmd, _a in calls({"jobs": {"build": build}})]
    positions = [order.index(c) for c in ("build", "test", "lock", "publish")]
    assert positions == sorted(positions)
    (build_call,) = [a for _n, c, a in calls({"jobs": {"build": build}}) if c == "build"]
    assert '--shard "$SHARD"' in build_call and "--cache-from" in build_call and "--cache-to" in build_call
    # the merge job runs after every shard: one lock, checked with no engine, kept
    merge = jobs["merge"]
    assert merge["needs"] == "build" and "if" not in merge      # a failed shard stops the merge
    merge_calls = [(c, a) for _n, c, a in calls({"jobs": {"merge": merge}})]
    assert [c for c, _a in merge_calls] == ["lock", "lock"]
    assert "--merge shards/*/shard.lock" in merge_calls[0][1]
    assert "--check" in merge_calls[1][1] and "--no-engine" in merge_calls[1][1]
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["pattern"] == "shard-*"
    uploads = {s["with"]["name"]: s for j in jobs.values() for s in j["steps"]
               if s.get("uses", "").startswith("actions/upload-artifact@")}
    assert set(uploads) == {"shard-${{ strategy.job-index }}", "images-lock"}
    assert "shard.lock" in uploads["shard-${{ strategy.job-index }}"]["with"]["path"]


def test_every_imagebuild_call_of_the_sharded_workflow_is_valid(sharded):
    assert {cmd for _n, cmd, _a in calls(sharded)} == {"images", "generate", "wheels", "base", "build",
                                                     "test", "lock", "publish"}
    check_calls(sharded)


def test_sharded_workflow_secrets_reach_only_publish_and_the_cache_push(sharded):
    for job in sharded["jobs"].values():
        for step in job.get("steps", []):
            run = step.get("run", "")
            if "secrets." in yaml.safe_dump(step):
                assert "imagebuild publish" in run or "--cache-to" in run, step.get("name")
            assert "${{" not in run, step.get("name")   # values travel through env, not the shell line
    uses = [s["uses"] for j in sharded["jobs"].values() for s in j["steps"] if "uses" in s]
    assert uses and all(re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+@[0-9a-f]{40}", ref) for ref in uses)


@pytest.mark.parametrize("path", [WORKFLOW, SHARDS], ids=["images", "shards"])
def test_artifacts_under_imagebuild_keep_their_hidden_folder(path):
    """upload-artifact leaves hidden files and folders out since v4.4.0: an artifact that keeps
    .imagebuild/reports/ (the smoke reports) must say include-hidden-files."""
    doc = yaml.safe_load(path.read_text())
    uploads = [s for j in doc["jobs"].values() for s in j["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    hidden = [s for s in uploads if ".imagebuild/" in s["with"]["path"]]
    assert hidden
    for step in hidden:
        assert step["with"].get("include-hidden-files") is True, step.get("name")
