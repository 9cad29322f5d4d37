"""Mutated matrix.yaml files through the real CLI: a valid mutant answers (exit 0 or 1); anything
else is exit code 2 with exactly one line on stderr naming the file (and the line, where the problem
has one), never a traceback.

The mutants come from the real matrix.yaml with fixed seeds (the same file gives the same mutants):
line deletions, duplications, swapped characters, changed indentation, versions replaced with
garbage, unknown keys, unknown source ids, a second contradicting CUDA release, a GPU with an
unknown compute capability, and truncation. Targeted cases then pin the line and column of each
error class, and the argument named for a malformed command-line value.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from imagebuild import cli

ARGS = ["--driver", "550.54.15", "--gpu", "H100"]
GARBAGE = ["12.x", "latest", "1.0; rm -rf /", "", "$(reboot)", "9.1.0.70 && id", "v12", "12..4",
           "１２.４"]
VERSION_RE = re.compile(r'"([0-9]+(?:\.[0-9]+)+)"')
SOURCE_RE = re.compile(r"\bsource: ([A-Za-z0-9]+)\b")
PER_KIND = 20
# the fast tier (CI's) runs the first half of each kind's seeds, the heavy tier the second: the
# same mutants as before, split (each load is a whole matrix, about 0.9 s on the 2-core CI machine)
FAST_SEEDS = 10


@pytest.fixture(scope="module")
def original(repo_root) -> str:
    return (repo_root / "matrix.yaml").read_text(encoding="utf-8")


def run_cli(path: Path, capsys, extra=()) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = cli.main(["resolve", "--matrix", str(path), *ARGS, *extra])
    except BaseException as exc:  # noqa: BLE001 - an escaped exception is the failure we look for
        pytest.fail(f"the CLI raised {type(exc).__name__}: {exc}")
    out, err = capsys.readouterr()
    return rc, out, err


def error_location(err: str, path: Path) -> tuple[int | None, int | None]:
    """The line and column the one-line error names for `path` (None when it names none)."""
    m = re.match(rf"^imagebuild resolve: {re.escape(str(path))}(?::(\d+))?(?::(\d+))?: \S", err)
    assert m, f"the error does not start by naming the file: {err!r}"
    return (int(m.group(1)) if m.group(1) else None, int(m.group(2)) if m.group(2) else None)


# --------------------------------------------------------------------------------------------------
# mutation operators: each returns (new text, the 1-based line the problem is on, or None)


def _lines(text):
    return text.splitlines(keepends=True)


def _pick(rng, lines, pred):
    idx = [i for i, ln in enumerate(lines) if pred(ln)]
    return rng.choice(idx)


def m_delete(rng, text):
    lines = _lines(text)
    i = rng.randrange(len(lines))
    del lines[i]
    return "".join(lines), None


def m_duplicate(rng, text):
    lines = _lines(text)
    i = rng.randrange(len(lines))
    lines.insert(i, lines[i])
    return "".join(lines), None


def m_swap(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: len(ln.strip()) > 2)
    ln = lines[i]
    j = rng.randrange(len(ln.rstrip("\n")) - 1)
    lines[i] = ln[:j] + ln[j + 1] + ln[j] + ln[j + 2:]
    return "".join(lines), None


def m_indent(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: ln.strip() and not ln.lstrip().startswith("#"))
    ln = lines[i]
    if ln.startswith(" ") and rng.random() < 0.5:
        lines[i] = ln[rng.choice([1, 2]):]
    else:
        lines[i] = " " * rng.choice([1, 2, 3]) + ln
    return "".join(lines), None


def m_garbage_version(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: VERSION_RE.search(ln) and not ln.lstrip().startswith("#"))
    matches = list(VERSION_RE.finditer(lines[i]))
    m = rng.choice(matches)
    bad = rng.choice(GARBAGE).replace('"', "")
    lines[i] = lines[i][:m.start(1)] + bad + lines[i][m.end(1):]
    return "".join(lines), i + 1


def m_unknown_key(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: re.search(r"- \{[a-z_]+: ", ln) is not None)
    key = rng.choice(["colour", "verifed", "drvier", "x_extra"])
    lines[i] = lines[i].replace("{", f"{{{key}: 1, ", 1)
    return "".join(lines), i + 1


def m_unknown_source(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: SOURCE_RE.search(ln) and not ln.lstrip().startswith("#"))
    lines[i] = SOURCE_RE.sub(f"source: {rng.choice(['S999', 'NOPE', 'S1x'])}", lines[i], count=1)
    return "".join(lines), i + 1


def m_contradicting_cuda(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: re.match(r'\s+- \{version: "[0-9.]+", driver: "[0-9.]+"', ln))
    copy = re.sub(r'driver: "[0-9.]+"', f'driver: "{rng.choice(["999.99.99", "400.1", "555.42.02"])}"',
                  lines[i])
    lines.insert(i + 1, copy)
    return "".join(lines), i + 2


def m_unknown_cc(rng, text):
    lines = _lines(text)
    i = _pick(rng, lines, lambda ln: re.match(r"\s+- \{name: [^,]+, cc: \"[0-9.]+\"", ln))
    lines[i] = re.sub(r'cc: "[0-9.]+"', f'cc: "{rng.choice(["9.9", "4.2", "13.7"])}"', lines[i], count=1)
    return "".join(lines), i + 1


def m_truncate(rng, text):
    return text[:rng.randrange(len(text))], None


KINDS = {"delete": m_delete, "duplicate": m_duplicate, "swap": m_swap, "indent": m_indent,
         "garbage-version": m_garbage_version, "unknown-key": m_unknown_key,
         "unknown-source": m_unknown_source, "contradicting-cuda": m_contradicting_cuda,
         "unknown-cc": m_unknown_cc, "truncate": m_truncate}
# kinds whose problem is on the mutated line, so an error must name exactly that line
MUST_FAIL = {"unknown-key", "unknown-source", "contradicting-cuda", "unknown-cc"}


@pytest.mark.parametrize("seeds", [pytest.param(range(FAST_SEEDS), id="fast"),
                                   pytest.param(range(FAST_SEEDS, PER_KIND), id="heavy",
                                                marks=pytest.mark.heavy)])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_mutants(kind, seeds, original, tmp_path, capsys):
    outcomes = {"answered": 0, "refused": 0}
    for seed in seeds:
        rng = random.Random(f"{kind}:{seed}")
        text, line = KINDS[kind](rng, original)
        path = tmp_path / f"{kind}-{seed}.yaml"
        path.write_text(text, encoding="utf-8")
        rc, out, err = run_cli(path, capsys)
        what = f"{kind} seed {seed} (line {line})"
        assert "Traceback" not in err + out, what
        if rc in (0, 1):
            assert kind not in MUST_FAIL, f"{what}: the mutant was accepted: {out[:300]}"
            assert out.strip(), f"{what}: answered with nothing"
            outcomes["answered"] += 1
            continue
        assert rc == 2, f"{what}: exit {rc}: {err}"
        assert len(err.splitlines()) == 1 and err.endswith("\n"), f"{what}: {err!r}"
        err_line, _ = error_location(err, path)
        if line is not None:
            assert err_line == line, f"{what}: the error names line {err_line}: {err}"
        elif kind != "truncate":
            # a line-level edit of a file that was valid: the loader always knows where
            assert err_line is not None, f"{what}: no line in {err!r}"
        outcomes["refused"] += 1
    assert sum(outcomes.values()) == len(seeds)
    if kind in MUST_FAIL:
        assert outcomes["refused"] == len(seeds)


# --------------------------------------------------------------------------------------------------
# targeted: each error class names its line and column


def _line_of(text: str, pattern: str) -> int:
    for i, ln in enumerate(text.splitlines(), 1):
        if re.search(pattern, ln):
            return i
    raise AssertionError(f"no line matches {pattern!r}")


def _edit(text: str, lineno: int, fn) -> str:
    lines = text.splitlines(keepends=True)
    lines[lineno - 1] = fn(lines[lineno - 1])
    return "".join(lines)


def _refused(tmp_path, capsys, text, name="m.yaml", extra=()):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    rc, out, err = run_cli(path, capsys, extra)
    assert rc == 2, (rc, out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return path, err


def test_yaml_syntax_error(original, tmp_path, capsys):
    n = _line_of(original, r"^schema: 1")
    text = _edit(original, n, lambda ln: ln + "\tbroken: [1, 2\n")
    path, err = _refused(tmp_path, capsys, text)
    assert error_location(err, path) == (n + 1, 1)
    assert "YAML error" in err


def test_unknown_key(original, tmp_path, capsys):
    n = _line_of(original, r"- \{name: H100, ")
    text = _edit(original, n, lambda ln: ln.replace("datacenter: true", "datacenter: true, colour: green"))
    path, err = _refused(tmp_path, capsys, text)
    col = text.splitlines()[n - 1].index("colour") + 1
    assert error_location(err, path) == (n, col)
    assert "unknown key 'colour'" in err


def test_a_scalar_where_a_mapping_belongs_says_what_it_found(original, tmp_path, capsys):
    """knowledge's sections and gate 3 share grammar.check_mapping, and its message."""
    n = _line_of(original, r"- \{name: H100, ")
    text = _edit(original, n, lambda ln: ln[:ln.index("{")] + "H100\n")
    _path, err = _refused(tmp_path, capsys, text)
    assert "gpus[]: expected a mapping, not a string" in err


@pytest.mark.parametrize("bad", ["12.x", "latest", "1.0; rm -rf /"])
def test_bad_version(original, tmp_path, capsys, bad):
    n = _line_of(original, r'- \{version: "12\.4\.1", driver:')
    text = _edit(original, n, lambda ln: ln.replace('"12.4.1"', f'"{bad}"'))
    path, err = _refused(tmp_path, capsys, text)
    col = text.splitlines()[n - 1].index("version") + 1
    assert error_location(err, path) == (n, col)
    assert "malformed version" in err and repr(bad) in err


def test_unknown_reference(original, tmp_path, capsys):
    n = _line_of(original, r"- \{name: A100, ")
    text = _edit(original, n, lambda ln: re.sub(r"\bsource: \w+", "source: S999", ln))
    path, err = _refused(tmp_path, capsys, text)
    col = re.search(r"\bsource: S999", text.splitlines()[n - 1]).start() + 1
    assert error_location(err, path) == (n, col)
    assert "unknown source 'S999'" in err


def test_contradicting_facts(original, tmp_path, capsys):
    n = _line_of(original, r'- \{version: "12\.4\.1", driver:')
    text = _edit(original, n, lambda ln: ln + ln.replace("550.54.15", "560.1"))
    path, err = _refused(tmp_path, capsys, text)
    col = text.splitlines()[n].index("version") + 1
    assert error_location(err, path) == (n + 1, col)
    assert "12.4.1 is listed twice" in err


def test_unknown_gpu_architecture(original, tmp_path, capsys):
    n = _line_of(original, r"- \{name: H200, ")
    text = _edit(original, n, lambda ln: re.sub(r'cc: "[0-9.]+"', 'cc: "9.9"', ln))
    path, err = _refused(tmp_path, capsys, text)
    col = text.splitlines()[n - 1].index("cc:") + 1
    assert error_location(err, path) == (n, col)
    assert "compute capability 9.9 is not under architectures" in err


def test_truncated_to_nothing(tmp_path, capsys):
    path, err = _refused(tmp_path, capsys, "")
    assert str(path) in err


def test_missing_file(tmp_path, capsys):
    path = tmp_path / "absent.yaml"
    rc, _, err = run_cli(path, capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and f"{path}: file not found" in err


@pytest.mark.parametrize("extra,argument,needle", [
    (["--cuda", ">=12.x"], "--cuda", "malformed specifier"),
    (["--cuda", "1.0; rm -rf /"], "--cuda", "malformed specifier"),
    (["--python", "latest"], "--python", "malformed specifier"),
    (["--os", "windows95"], "--os", "unknown OS"),
])
def test_malformed_wish_on_the_command_line(original, tmp_path, capsys, extra, argument, needle):
    _, err = _refused(tmp_path, capsys, original, extra=extra)
    assert f"argument {argument}: " in err and needle in err


@pytest.mark.parametrize("flag,value,needle", [
    ("--driver", "550.abc", "malformed driver version"),
    ("--driver", "$(id)", "malformed driver version"),
    ("--gpu", "Z9000", "unknown GPU"),
])
def test_malformed_host_fact_on_the_command_line(original, tmp_path, capsys, flag, value, needle):
    path = tmp_path / "m.yaml"
    path.write_text(original, encoding="utf-8")
    capsys.readouterr()
    args = dict(zip(ARGS[::2], ARGS[1::2]))
    args[flag] = value
    rc = cli.main(["resolve", "--matrix", str(path), *[x for kv in args.items() for x in kv]])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"argument {flag}: " in err and needle in err


# --------------------------------------------------------------------------------------------------
# hostile values in every field that reaches a recipe (tests/fuzz_mutants.py; tests/fuzz_report.py
# runs the whole set and prints the figures of docs/reliability.md)


@pytest.fixture(scope="module")
def workdir(original, tmp_path_factory):
    from fuzz_mutants import Workdir
    return Workdir(tmp_path_factory.mktemp("fuzz"), original)


def _sample(original, half: int):
    """A seeded sample: every recipe-facing scalar with one hostile string (the pool rotates, so
    each hostile string meets many fields), wrong types and removed keys for a rotating subset,
    and hostile strings in other sections. Split in two halves (each mutant generates all 59
    images' recipes, about 0.5 s): the fast tier runs half 0, the heavy tier half 1; each half
    takes whole turns of the hostile pool, so each tries every hostile string."""
    from fuzz_mutants import HOSTILE, mutants
    ms = mutants(original, seed=7, hostile_per_leaf=1, others=30)
    hostile = [m for m in ms if m.kind == "hostile"]
    rng = random.Random(7)
    rest = [m for m in ms if m.kind != "hostile"]
    others = rng.sample(rest, min(60, len(rest)))
    turn = len(HOSTILE)
    return [m for i, m in enumerate(hostile) if (i // turn) % 2 == half] + others[half::2]


@pytest.mark.parametrize("half", [pytest.param(0, id="fast"),
                                  pytest.param(1, id="heavy", marks=pytest.mark.heavy)])
def test_hostile_mutants_never_inject_and_are_refused_on_their_line(original, workdir, half):
    from fuzz_mutants import HOSTILE
    sample = _sample(original, half)
    problems, refused, accepted, seen = [], 0, 0, set()
    for m in sample:
        o = workdir.run(m)
        for p in o.problems:
            problems.append(f"{m.kind} {m.where} = {m.value!r} (line {m.line}): {p}")
        refused += not o.accepted
        accepted += o.accepted
        if m.value is not None:
            seen.add(m.value)
    assert not problems, f"{len(problems)} problems, e.g.:\n" + "\n".join(problems[:10])
    # the sample really is hostile: every string of the pool was tried, most were refused
    assert seen == set(HOSTILE)
    assert refused > 3 * accepted > 0


@pytest.mark.parametrize("where,value,needle", [
    ("description", "x\nRUN id", "U+000A"),
    ("description", "x\u2028%post", "U+2028"),
    ("description", "x\r\nRUN id", "U+000D"),
    ("description", 'a" && id && echo "', "holds '\"'"),
    ("description", "$(id)", "holds '$'"),
])
def test_image_description_is_refused_at_load_on_its_line(original, tmp_path, capsys, where,
                                                          value, needle):
    n = _line_of(original, r"^    description: ")
    text = _edit(original, n, lambda ln: re.sub(r'description: ".*"',
                                                 lambda _: f"description: {json.dumps(value)}", ln))
    for cmd in (["knowledge", "validate"], ["images"], ["resolve", *ARGS]):
        path = tmp_path / "m.yaml"
        path.write_text(text, encoding="utf-8")
        capsys.readouterr()
        rc = cli.main([*cmd[:1], *(cmd[1:2] if cmd[0] == "knowledge" else []), "--matrix",
                       str(path), *(cmd[1:] if cmd[0] == "resolve" else [])])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert f"{path}:{n}:" in err and needle in err, err


def test_rdma_name_with_a_newline_is_refused_on_its_line(original, tmp_path, capsys):
    n = _line_of(original, r"^    name: \"NVIDIA DOCA")
    text = _edit(original, n, lambda ln: ln.replace('name: "NVIDIA', 'name: "NVIDIA\\n%post\\n id'))
    _, err = _refused(tmp_path, capsys, text)
    assert f":{n}:" in err and "U+000A" in err


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace('gdrcopy: {version: "2.5.1"', 'gdrcopy: {version: 2.5', 1),
     "tools.gdrcopy.version must be a string, not a number"),
    (lambda t: t.replace('  gdrcopy: {', '  gdrcpy: {', 1), "tools: unknown key 'gdrcpy'"),
    (lambda t: t.replace("v{version}.tar.gz\", sha256: \"c6d5", "v{version.__class__}.tar.gz\", "
                         "sha256: \"c6d5", 1), "placeholder {version.__class__}"),
    (lambda t: t.replace('sha256: "c6d5', 'sha256: "C6D5', 1), "64 lower-case hex digits"),
    (lambda t: t.replace("os: [ubuntu22.04, ubuntu24.04]", "os: [ubuntu22.04, windows95]", 1),
     "unknown os 'windows95'"),
    (lambda t: t.replace("rdma: doca-ofed ", "rdma: doca-ofd ", 1), "unknown rdma 'doca-ofd'"),
    (lambda t: t.replace("flavors: [runtime, devel]", "flavors: [runtime, debug]", 1),
     "'debug' is not one of"),
    (lambda t: t.replace("flavors: [runtime, devel]", "flavors: [devel]", 1),
     "a devel image is built FROM the runtime image of its stack"),
    (lambda t: t.replace('runtime: [ibverbs-providers,', 'runtime: ["ibverbs-providers;id",', 1),
     "must be a package name"),
    (lambda t: t.replace('base: "ubuntu:24.04"', 'base: "ubuntu:24.04 AS x"', 1),
     "must be an image reference"),
])
def test_tools_images_and_rdma_are_validated_at_load(original, tmp_path, capsys, edit, needle):
    """`knowledge validate` used to call these matrices valid: tools, images and rdma were
    checked only when a command rendered them."""
    text = edit(original)
    assert text != original
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    capsys.readouterr()
    rc = cli.main(["knowledge", "validate", "--matrix", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err
    changed = next(i for i, (a, b) in enumerate(zip(original.splitlines(), text.splitlines()), 1)
                   if a != b)
    assert error_location(err.replace("imagebuild knowledge:", "imagebuild resolve:"), path)[0] \
        == changed, err


# --------------------------------------------------------------------------------------------------
# YAML bombs: refused quickly in bounded memory (a subprocess under an address-space limit)

_LIMITED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (256 * 2**20, 256 * 2**20))
from imagebuild import cli
rc = cli.main(["knowledge", "validate", "--matrix", sys.argv[1]])
sys.stderr.flush()
# this process's own peak (ru_maxrss would carry pytest's peak over fork and exec)
print(next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:")))
sys.exit(rc)
"""


def _limited(path: Path) -> tuple[int, str, int]:
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _LIMITED, str(path)], capture_output=True,
                          text=True, timeout=120)
    peak_kib = int(proc.stdout.split()[-1]) if proc.stdout.split() else -1
    return proc.returncode, proc.stderr, peak_kib


def _with_description(original: str, yaml_value: str) -> tuple[str, int]:
    n = _line_of(original, r"^    description: ")
    return _edit(original, n, lambda ln: ln.split("description:")[0] + "description: "
                 + yaml_value + "\n"), n


def test_deeply_nested_yaml_is_refused_in_bounded_memory(original, tmp_path):
    """100,000 nested lists used to crash the C composer (SIGSEGV) or raise RecursionError."""
    text, n = _with_description(original, "[" * 100_000 + "]" * 100_000)
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    rc, err, peak_kib = _limited(path)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{path}:{n}:" in err and "nested more than" in err
    assert 0 < peak_kib < 256 * 1024


def test_alias_bomb_is_refused_in_bounded_memory(original, tmp_path):
    """Nine levels of ten aliases stand for 10**9 strings: printing the description would need
    tens of GiB. The loader counts what aliases expand to and stops at the alias that crosses its
    budget."""
    levels = ["&a0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    text, n = _with_description(original, "[" + ", ".join(levels) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text(text, encoding="utf-8")
    rc, err, peak_kib = _limited(path)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{path}:{n}:" in err and "alias bomb" in err
    assert 0 < peak_kib < 256 * 1024


def test_a_few_aliases_are_still_fine(original, tmp_path, capsys):
    text = original.replace('description: "PyTorch with CUDA-aware Open MPI on UCX, NCCL and '
                            'nccl-tests"', '&desc "PyTorch with CUDA-aware Open MPI on UCX, NCCL '
                            'and nccl-tests"'.join(["description: ", ""]), 1)
    text = text.replace('description: "PyTorch with CUDA-aware Open MPI on UCX, NCCL and '
                        'nccl-tests"', "description: *desc", 1)
    assert text.count("*desc") == 1
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    assert cli.main(["knowledge", "validate", "--matrix", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("source", ["big", "/dev/zero"])
def test_oversized_input_is_refused_without_reading_it_all(tmp_path, capsys, source):
    from imagebuild.knowledge.grammar import MAX_BYTES
    if source == "big":
        path = tmp_path / "big.yaml"
        path.write_text("# padding\n" * (MAX_BYTES // 10 + 1), encoding="utf-8")
    else:
        path = Path(source)
        if not path.exists():
            pytest.skip("no /dev/zero")
    capsys.readouterr()
    assert cli.main(["knowledge", "validate", "--matrix", str(path)]) == 2
    err = capsys.readouterr().err
    # a file too big is refused by its size; a device (/dev/zero) before reading a byte of it
    said = "more than" if source == "big" else "not a regular file"
    assert len(err.splitlines()) == 1 and f"{path}: " in err and said in err, err


@pytest.mark.parametrize("raw,needle", [
    ("\x00", "U+0000"), ("\u2028", "U+2028"), ("\u202e", "U+202E"), ("\r", "U+000D"),
])
def test_raw_control_characters_are_refused_even_in_comments(original, tmp_path, capsys, raw,
                                                             needle):
    n = _line_of(original, r"^# The order")
    text = _edit(original, n, lambda ln: ln.replace("The order", f"The{raw}order"))
    path, err = _refused(tmp_path, capsys, text)
    assert error_location(err, path) == (n, 6) and needle in err


def test_invalid_utf8_names_its_line(original, tmp_path, capsys):
    n = _line_of(original, r"^as_of:")
    data = original.encode().replace(b"as_of:", b"as_of\xff:", 1)
    path = tmp_path / "m.yaml"
    path.write_bytes(data)
    rc, _, err = run_cli(path, capsys)
    assert rc == 2 and f"{path}:{n}:6: not UTF-8" in err, err


def test_prose_notes_may_span_lines(original, tmp_path, capsys):
    text = original.replace('note: "Added CUDA 13 support"', 'note: "Added\\nCUDA 13\\tsupport"', 1)
    assert text != original
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    assert cli.main(["knowledge", "validate", "--matrix", str(path)]) == 0


def _family_span(text: str, description: str) -> tuple[int, int]:
    """First and last line (1-based) of the images: family whose description contains ``description``."""
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if "description:" in ln and description in ln)
    start = max(i for i in range(at + 1) if lines[i].lstrip().startswith("- family:"))
    end = next((i for i in range(at + 1, len(lines)) if lines[i].lstrip().startswith("- family:")
                or (lines[i] and not lines[i].startswith(" "))), len(lines))
    return start + 1, end


@pytest.mark.parametrize("mutation", ["empty-install", "no-ucx", "os-packages-without-torch"])
def test_cuda_from_wheels_families_are_checked_at_load(original, tmp_path, capsys, mutation):
    """What images.expand would refuse at generate is refused by validate, naming the line: an
    empty `install`, a wheels family without UCX pinned, OS packages where nothing brings torch."""
    if mutation == "empty-install":
        n = _line_of(original, r'- \{version: "1\.13\.1", install: os')
        text = _edit(original, n, lambda ln: ln.replace("install: os", 'install: ""'))
        want, line = "install must be source or os", n
    else:
        first, last = _family_span(original, "PyTorch with CUDA from its own wheels on Debian")
        key = "ucx" if mutation == "no-ucx" else "pytorch"
        n = next(i for i in range(first, last + 1)
                 if re.match(rf"\s+{key}: ", original.splitlines()[i - 1]))
        text = _edit(original, n, lambda ln: "")
        want = ("needs ucx pinned" if mutation == "no-ucx"
                else "without PyTorch, with the OS's UCX and Open MPI, is a communication image built from the registries: name its NCCL")
        line = None
    path, err = _refused(tmp_path, capsys, text)
    assert want in err, err
    if line is not None:
        assert error_location(err, path)[0] == line
    else:
        assert error_location(err, path)[0] is not None
