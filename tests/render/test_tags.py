"""imagebuild tags: the tags of an image and, under a registry, the references docker and
enroot/pyxis take (pyxis's srun --container-image needs HOST#NS/IMAGE:TAG)."""

from __future__ import annotations


from conftest import ROOT, answer
from imagebuild.render.run import load_images
from imagebuild import cli

MATRIX = str(ROOT / "matrix.yaml")


def _spec():
    return load_images(MATRIX)["smoke-cpu"]


def test_tags_alone_are_the_floating_then_the_dated_tag(capsys):
    assert cli.main(["tags", "smoke-cpu", "--matrix", MATRIX]) == 0
    assert capsys.readouterr().out.splitlines() == list(_spec().tags)


def test_registry_gives_docker_and_pyxis_references_side_by_side(capsys):
    assert cli.main(["tags", "smoke-cpu", "--matrix", MATRIX, "--registry", "localhost:5000/hpc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"localhost:5000/hpc/smoke-cpu:{t}  localhost:5000#hpc/smoke-cpu:{t}" for t in _spec().tags]


def test_json_and_an_ipv6_registry(capsys):
    assert cli.main(["tags", "smoke-cpu", "--matrix", MATRIX, "--registry", "[::1]:5000/hpc/team", "--json"]) == 0
    doc = answer(capsys.readouterr().out, "tags")
    assert doc["image"] == "smoke-cpu" and [r["tag"] for r in doc["tags"]] == list(_spec().tags)
    assert doc["tags"][0]["enroot"] == f"[::1]:5000#hpc/team/smoke-cpu:{_spec().tags[0]}"


def test_a_malformed_registry_is_one_line(capsys):
    assert cli.main(["tags", "smoke-cpu", "--matrix", MATRIX, "--registry", "evil host/$(id)"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.strip().splitlines()) == 1 and "--registry" in out.err
