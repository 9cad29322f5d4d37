"""The one reporter (issue 14, imagebuild/cli/reporter.py): every command takes --json; the reporter's
renderings; and, for the commands that need no engine, registry or network, that --json puts
exactly one JSON document on stdout (the standard rendering: sorted keys, indent 2), holding the
same facts as the text, with anything else on stderr as JSON lines."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
from pathlib import Path

from conftest import ROOT
from imagebuild import __version__, cli
from imagebuild.render.run import load_images
from imagebuild.cli.reporter import SCHEMA, Reporter, dumps

MATRIX = str(ROOT / "matrix.yaml")
DGX = str(ROOT / "tests" / "fixtures" / "doctor" / "dgx-h100-ib")


# --------------------------------------------------------------------------- every command


def _without_json(parser: argparse.ArgumentParser) -> list[str]:
    """The progs of the parsers a user ends in (a parser with subcommands: each subcommand's)
    that have no --json option."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    if subs:
        return [prog for a in subs for sub in a.choices.values() for prog in _without_json(sub)]
    return [] if "--json" in parser._option_string_actions else [parser.prog]  # noqa: SLF001


def _parser(name: str) -> argparse.ArgumentParser:
    module_name, helptext = cli.COMMANDS[name]
    parser = cli._Parser(prog=f"imagebuild {name}", description=helptext)  # noqa: SLF001
    importlib.import_module(f"imagebuild.cli.commands.{module_name}").configure(parser)
    return parser


def test_every_command_takes_json():
    assert len(cli.COMMANDS) >= 21
    assert [prog for name in cli.COMMANDS for prog in _without_json(_parser(name))] == []
    # the subcommands are reached, not only their parent
    assert _parser("knowledge").parse_args(["show", "gpus", "--json"]).json is True
    assert _parser("sources").parse_args(["list", "--json"]).json is True
    # plan's --json is its --format json
    assert _parser("plan").parse_args(["--driver-from", "1", "--driver-to", "2", "--gpu", "any", "--json"]).format == "json"


def test_the_check_sees_a_parser_without_json():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--quiet", action="store_true")
    sub = parser.add_subparsers(dest="action")
    sub.add_parser("a", prog="x a").add_argument("--json", action="store_true")
    sub.add_parser("b", prog="x b")
    assert _without_json(parser) == ["x b"]
    plain = argparse.ArgumentParser(prog="y")
    assert _without_json(plain) == ["y"]


def _stderr_users(folder: Path) -> list[str]:
    """file:line of every `sys.stderr` in the modules of ``folder``."""
    out = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr == "stderr"
                    and isinstance(node.value, ast.Name) and node.value.id == "sys"):
                out.append(f"{path.name}:{node.lineno}")
    return out


def test_no_command_writes_stderr_itself(tmp_path):
    """stderr belongs to the reporter (and to cli.py's one error line): a command that printed
    there itself would put a plain line among --json's event lines."""
    assert _stderr_users(ROOT / "imagebuild" / "cli" / "commands") == []
    (tmp_path / "planted.py").write_text("import sys\n\ndef run():\n    print('x', file=sys.stderr)\n")
    assert _stderr_users(tmp_path) == ["planted.py:4"]


# --------------------------------------------------------------------------- renderings


def _say_everything(rep: Reporter) -> None:
    rep.progress("step 1", image="a")
    rep.warn("careful")
    rep.error("a: failed", image="a")
    rep.line("== a", message="testing a", image="a")
    rep.result({"b": [1, 2], "a": None}, "the answer")


def test_text_mode_is_plain_lines(capsys):
    rep = Reporter("build")
    assert rep.mode == "text"
    _say_everything(rep)
    out, err = capsys.readouterr()
    assert out == "== a\nthe answer\n"
    assert err == "step 1\nimagebuild build: warning: careful\nimagebuild build: a: failed\n"


def test_json_mode_is_one_document_and_event_lines(capsys):
    rep = Reporter("build", json_mode=True)
    assert rep.mode == "json"
    _say_everything(rep)
    out, err = capsys.readouterr()
    assert out == '{\n  "a": null,\n  "b": [\n    1,\n    2\n  ]\n}\n'
    assert out == dumps({"b": [1, 2], "a": None}) + "\n"
    assert [json.loads(line) for line in err.splitlines()] == [
        {"event": "progress", "command": "build", "message": "step 1", "image": "a"},
        {"event": "warning", "command": "build", "message": "careful"},
        {"event": "error", "command": "build", "message": "a: failed", "image": "a"},
        {"event": "progress", "command": "build", "message": "testing a", "image": "a"},
    ]
    # a field never replaces what the event is
    rep.progress("m", event="result", command="other")
    assert json.loads(capsys.readouterr().err) == {"event": "progress", "command": "build", "message": "m"}


def test_quiet_drops_progress_only(capsys):
    rep = Reporter("base", quiet=True)
    assert rep.mode == "quiet"
    _say_everything(rep)
    out, err = capsys.readouterr()
    assert out == "== a\nthe answer\n"
    assert err == "imagebuild base: warning: careful\nimagebuild base: a: failed\n"
    rep = Reporter("base", json_mode=True, quiet=True)
    _say_everything(rep)
    out, err = capsys.readouterr()
    assert json.loads(out) == {"a": None, "b": [1, 2]}
    assert [json.loads(line)["event"] for line in err.splitlines()] == ["warning", "error", "progress"]


def test_result_without_text_prints_nothing_and_end_is_kept(capsys):
    Reporter("x").result({"a": 1})
    Reporter("x").result({"a": 1}, "no newline", end="")
    assert capsys.readouterr().out == "no newline"


def test_for_args_reads_json_and_quiet():
    assert Reporter.for_args("x", argparse.Namespace()).mode == "text"
    assert Reporter.for_args("x", argparse.Namespace(quiet=True)).mode == "quiet"
    rep = Reporter.for_args("x", argparse.Namespace(json=True, quiet=True))
    assert rep.mode == "json" and rep.quiet and rep.command == "x"


# --------------------------------------------------------------------------- commands with --json


def _json_run(capsys, *argv: str, code: int = 0) -> tuple[dict, list[dict]]:
    """Run a command with --json: its exit code, one envelope on stdout in the standard rendering
    (README, "Output"), and stderr made only of JSON event lines. Returns the envelope's result."""
    assert cli.main([*argv, "--json"]) == code
    out, err = capsys.readouterr()
    envelope = json.loads(out)                  # one document: json.loads refuses two
    assert out == dumps(envelope) + "\n"
    events = [json.loads(line) for line in err.splitlines()]
    assert all(e["event"] in ("progress", "warning", "error") and e["command"] == argv[0] for e in events)
    command = " ".join(argv[:2]) if argv[0] in ("knowledge", "wheels") else argv[0]
    if argv[0] == "sources":
        command = "sources " + next(a for a in argv[1:] if a in ("list", "fetch"))
    assert set(envelope) == ENVELOPE_KEYS and envelope["schema"] == SCHEMA
    assert envelope["command"] == command and envelope["exit_code"] == code and envelope["ok"] is (code == 0)
    assert envelope["imagebuild"] == __version__
    # what went to stderr as a warning or error is in the envelope too (an answer may add its own)
    said = {e["message"] for e in events if e["event"] == "warning"}
    assert said <= {w["message"] for w in envelope["warnings"]}
    assert [e["message"] for e in events if e["event"] == "error"] == [e["message"] for e in envelope["errors"]]
    if "--matrix" in argv:
        assert envelope["knowledge"]["path"] == str(Path(argv[argv.index("--matrix") + 1]).resolve())
        assert envelope["knowledge"]["origin"] == "--matrix" and envelope["knowledge"]["as_of"]
    return envelope["result"], events


ENVELOPE_KEYS = {"schema", "imagebuild", "command", "exit_code", "ok", "result", "warnings", "errors",
                 "knowledge"}


def _text_run(capsys, *argv: str, code: int = 0) -> str:
    assert cli.main(list(argv)) == code
    return capsys.readouterr().out


def test_resolve_images_tags_check(capsys):
    doc, events = _json_run(capsys, "resolve", "--matrix", MATRIX, "--driver", "550.54.15", "--gpu", "H100")
    assert doc["ok"] is True and doc["stack"]["driver"] == "550.54.15" and events == []
    doc, _ = _json_run(capsys, "images", "--matrix", MATRIX)
    assert [i["id"] for i in doc["images"]] == list(load_images(MATRIX))
    doc, _ = _json_run(capsys, "tags", "smoke-cpu", "--matrix", MATRIX)
    assert [t["tag"] for t in doc["tags"]] == list(load_images(MATRIX)["smoke-cpu"].tags)
    doc, _ = _json_run(capsys, "check", "--matrix", MATRIX, "--driver", "550.54.15", "--gpu", "H100",
                       "--torch", "2.5.1", "--cuda", "12.4")
    assert doc["ok"] is True


def test_generate_check(capsys):
    doc, events = _json_run(capsys, "generate", "--check", "--matrix", MATRIX)
    assert doc["check"] is True and doc["up_to_date"] is True and doc["stale"] == [] and events == []
    assert doc["images"] == list(load_images(MATRIX))
    text = _text_run(capsys, "generate", "--check", "--matrix", MATRIX)
    assert text == f"{len(doc['files'])} generated files are up to date ({len(doc['images'])} images)\n"
    assert all((ROOT / f).is_file() for f in doc["files"])


def test_generate_writes_and_says_what_changed(capsys, tmp_path):
    doc, _ = _json_run(capsys, "generate", "smoke-cpu", "--output", str(tmp_path), "--matrix", MATRIX)
    assert doc["check"] is False and doc["images"] == ["smoke-cpu"] and doc["output"] == str(tmp_path)
    assert doc["changed"] == doc["files"] and "Dockerfiles/smoke-cpu/Dockerfile" in doc["files"]
    assert all((tmp_path / f).is_file() for f in doc["files"])
    doc, _ = _json_run(capsys, "generate", "smoke-cpu", "--output", str(tmp_path), "--matrix", MATRIX)
    assert doc["changed"] == []
    (tmp_path / "Dockerfiles/smoke-cpu/Dockerfile").write_text("FROM scratch\n")
    doc, _ = _json_run(capsys, "generate", "smoke-cpu", "--check", "--output", str(tmp_path),
                       "--matrix", MATRIX, code=1)
    assert doc["up_to_date"] is False and doc["stale"] == ["Dockerfiles/smoke-cpu/Dockerfile"]


def test_plan_json_is_format_json(capsys):
    argv = ["plan", "--matrix", MATRIX, "--driver-from", "550.54.15", "--driver-to", "580.95.05", "--gpu", "H100"]
    doc, _ = _json_run(capsys, *argv)
    assert json.loads(_text_run(capsys, *argv, "--format", "json"))["result"] == doc
    assert doc["driver_to"] == "580.95.05" and doc["images"]
    assert {v["image"] for v in doc["images"]} <= set(load_images(MATRIX))


def test_knowledge(capsys):
    doc, _ = _json_run(capsys, "knowledge", "validate", "--matrix", MATRIX)
    text = _text_run(capsys, "knowledge", "validate", "--matrix", MATRIX)
    numbers = [int(n) for n in re.findall(r"\d+", text.split("\n", 1)[1])]
    assert numbers == [doc["sources"], doc["facts"], doc["rules"], doc["unverified_facts"],
                       doc["unverified_rules"]]
    doc, _ = _json_run(capsys, "knowledge", "show", "gpus", "--matrix", MATRIX)
    text = _text_run(capsys, "knowledge", "show", "gpus", "--matrix", MATRIX)
    (table,) = doc["tables"]
    assert table["columns"] == re.split(r"\s{2,}", text.splitlines()[0].strip())
    assert len(table["rows"]) == len(text.splitlines()) - 2 > 0
    # the source is shown in brackets, and is its plain id in the document
    assert all(f"[{row[-1]}]" in line for row, line in zip(table["rows"], text.splitlines()[2:]))


def test_lock_write_and_check_on_a_fixture(capsys, tmp_path):
    lock = str(tmp_path / "images.lock")
    common = ["--no-engine", "--matrix", MATRIX, "--lock", lock, "--reports-dir", str(tmp_path / "r")]
    doc, _ = _json_run(capsys, "lock", "smoke-cpu", *common)
    assert doc == {"check": False, "lock": lock, "locked": ["smoke-cpu"], "images": ["smoke-cpu"],
                   "publish_records_dropped": []}
    assert json.loads((tmp_path / "images.lock").read_text())["images"]["smoke-cpu"]["stack"]
    doc, events = _json_run(capsys, "lock", "smoke-cpu", "--check", *common)
    assert doc["match"] is True and doc["drifted"] == {} and events == []
    text = (tmp_path / "images.lock").read_text()
    (tmp_path / "images.lock").write_text(text.replace('"python": "3.11"', '"python": "3.10"'))
    doc, events = _json_run(capsys, "lock", "smoke-cpu", "--check", *common, code=1)
    assert doc["match"] is False and any("python" in line for line in doc["drifted"]["smoke-cpu"])
    assert [e["event"] for e in events][-1] == "error" and "drifted" in events[-1]["message"]
    # the same run as text: the drift on stdout, the summary on stderr
    assert cli.main(["lock", "smoke-cpu", "--check", *common]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("smoke-cpu: ") and "python" in out
    assert err == f"imagebuild lock: 1 image(s) drifted from {lock}\n"


def test_wheels_check_and_sources_list(capsys):
    doc, _ = _json_run(capsys, "wheels", "check", "smoke-cpu", "--matrix", MATRIX)
    spec = load_images(MATRIX)["smoke-cpu"]
    assert doc["action"] == "check" and doc["current"] == 1 and doc["bad"] == doc["missing"] == 0
    assert doc["sets"] == [{"lock": spec.wheel_lock, "images": ["smoke-cpu"], "status": "current"}]
    doc, _ = _json_run(capsys, "sources", "--matrix", MATRIX, "list")
    assert isinstance(doc, list) and all(re.fullmatch(r"[0-9a-f]{64}", t["sha256"]) for t in doc)


def test_slurm_script_json_holds_the_script(capsys, tmp_path):
    out = tmp_path / "job.sh"
    doc, events = _json_run(capsys, "slurm-script", "smoke-cpu", "--nodes", "2", "--gpus-per-node", "0",
                            "--output", str(out), "--matrix", MATRIX)
    assert doc["script"] == out.read_text() and doc["nodes"] == 2 and doc["output"] == str(out)
    assert events == [{"event": "progress", "command": "slurm-script", "message": f"wrote {out}"}]
    # without --output the text is the script itself, byte for byte
    text = _text_run(capsys, "slurm-script", "smoke-cpu", "--nodes", "2", "--gpus-per-node", "0",
                     "--image-path", doc["image_path"], "--matrix", MATRIX)
    assert text == doc["script"]


def test_doctor_capture(capsys, tmp_path):
    doc, _ = _json_run(capsys, "doctor", "--matrix", MATRIX, "--root", DGX, "--capture", str(tmp_path / "c"))
    assert doc["files"] and all((tmp_path / "c" / f).is_file() for f in doc["files"])


def test_an_error_with_json_is_the_usual_line_and_an_envelope(capsys):
    """A fatal error: its one line on stderr as ever, and on stdout the envelope saying so, with
    no result; an argument argparse refuses, too (the rendering is read from the typed words)."""
    assert cli.main(["images", "--matrix", str(ROOT / "no-such-matrix.yaml"), "--json"]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and err.startswith("imagebuild images: ")
    envelope = json.loads(out)
    assert set(envelope) == ENVELOPE_KEYS and envelope["ok"] is False and envelope["exit_code"] == 2
    assert envelope["result"] is None and envelope["knowledge"] is None and envelope["warnings"] == []
    assert envelope["errors"] == [{"message": err.strip().split(": ", 1)[1], "fatal": True}]
    assert cli.main(["resolve", "--drvier", "550.54.15", "--json"]) == 2
    out, err = capsys.readouterr()
    envelope = json.loads(out)
    assert envelope["command"] == "resolve" and envelope["exit_code"] == 2 and "did you mean --driver" in err
    assert envelope["errors"][0]["message"] in err
    # without --json a fatal error leaves stdout empty
    assert cli.main(["images", "--matrix", str(ROOT / "no-such-matrix.yaml")]) == 2
    assert capsys.readouterr().out == ""


def test_the_answers_own_warnings_are_the_envelopes(capsys):
    """resolve's end-of-life warning, in its answer, is in the envelope's warnings: CI reads one
    place whatever the command."""
    doc, _ = _json_run(capsys, "resolve", "--matrix", MATRIX, "--driver", "535.104.05", "--gpu", "H100")
    cli.main(["resolve", "--matrix", MATRIX, "--driver", "535.104.05", "--gpu", "H100", "--json"])
    envelope = json.loads(capsys.readouterr().out)
    assert any("end of life" in w for w in doc["warnings"])
    assert [w["message"] for w in envelope["warnings"]] == doc["warnings"]


def test_test_json_without_an_engine(capsys, tmp_path, monkeypatch):
    """`test --json` over a stand-in for the engine and the suite (testrun is tested on its own):
    the verdict and counts per image on stdout, each check as it ends and the suite's output as
    stderr events; the text run prints the same lines it always did."""
    import signal

    from imagebuild import engines
    from imagebuild.testrun import runner as testrun
    from imagebuild.smoke.report import CheckResult, Report

    def fake_test_image(engine, ref, opts, progress=None, log=None):
        checks = [CheckResult("versions", "pass", "all match", {"seconds": 1.5}),
                  CheckResult("mpi.allreduce", "fail", "rank 1 got 3"),
                  CheckResult("gpudirect", "skip", "no GPU")]
        if log:
            log("hello from the suite")
        for c in checks:
            progress(c)
        return Report(image=ref, checks=checks, extra={"imagebuild_id": "smoke-cpu"})

    monkeypatch.setattr(engines, "get_engine", lambda *a, **k: object())
    from imagebuild.engines import ImageInfo
    from imagebuild.testrun.containers import ImageUnderTest
    monkeypatch.setattr(testrun, "inspect_image", lambda engine, ref: ImageUnderTest(
        ref, ImageInfo(id="sha256:" + "1" * 64, repo_digests=(), size=0)))
    monkeypatch.setattr(testrun, "test_image", fake_test_image)
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    ref, report = "imagebuild/smoke-cpu:local", str(tmp_path / "r.json")
    doc, events = _json_run(capsys, "test", ref, "--report", report, code=1)
    assert doc == {"passed": False, "images": [{
        "ref": ref, "image": "smoke-cpu", "passed": False, "tier": "cpu",
        "summary": {"pass": 1, "fail": 1, "skip": 1}, "skipped": {"gpudirect": "no GPU"},
        "failed_checks": ["mpi.allreduce"], "report": report, "junit": str(tmp_path / "r.xml")}]}
    assert json.loads((tmp_path / "r.json").read_text())["summary"] == doc["images"][0]["summary"]
    assert [(e.get("check"), e.get("status")) for e in events if "check" in e] == \
        [("versions", "pass"), ("mpi.allreduce", "fail"), ("gpudirect", "skip")]
    assert {"event": "progress", "command": "test", "message": "hello from the suite", "image": ref,
            "stream": "suite"} in events
    assert cli.main(["test", ref, "--report", report]) == 1
    out, err = capsys.readouterr()
    assert err == "" and out.splitlines() == [
        f"== {ref}", "   | hello from the suite",
        "PASS versions             1.5s  all match",
        "FAIL mpi.allreduce        0.0s  rank 1 got 3",
        "SKIP gpudirect            0.0s  no GPU",
        f"FAILED {ref}: 1 passed, 1 failed, 1 skipped (skipped: gpudirect); report {report}"]
