"""The benchmark harness's shared helpers (issue 51, item 5): one copy each, used by every case."""

from __future__ import annotations

import argparse
from importlib import import_module

import pytest


def test_write_once_fills_a_new_array_and_leaves_a_whole_one_alone(tmp_path):
    inputs = import_module("benchmarks.harness.inputs")
    calls = []

    def fill(array) -> None:
        calls.append(array.shape)
        array[...] = 7

    path = tmp_path / "x.zarr"
    layout = {"shape": (4, 6), "chunks": (2, 3), "dtype": "int8"}
    assert inputs.write_once(path, fill, **layout) is True
    assert inputs.write_once(path, fill, **layout) is False  # the marker says it is whole
    assert calls == [(4, 6)] and (path / ".complete").exists()


def test_tables_lay_out_their_columns_once():
    reports = import_module("benchmarks.harness.reports")
    table = reports.markdown_table(("a", "b"), "lr", [("x", 1.5), ("failed", "")])
    assert table.splitlines() == ["| a | b |", "|---|---:|", "| x | 1.5 |", "| failed | |"]
    specs = ("<6", ">5")
    assert reports.text_row(("name", "1.0"), specs) == "name     1.0"
    assert reports.text_row(("name",), specs, sep="") == "name  "  # fewer cells: the first


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], {"n": 16, "chunk": 4, "vector_chunk": None}),
        (["--quick"], {"n": 8, "chunk": 2, "vector_chunk": None}),
        (["--quick", "--n", "32", "--vector-chunk", "3"], {"n": 32, "chunk": 2, "vector_chunk": 3}),
    ],
)
def test_a_race_takes_each_size_given_else_its_quick_or_full_default(argv, expected, monkeypatch):
    races = import_module("benchmarks.harness.races")
    seen: dict = {}

    def race(spec, args: argparse.Namespace) -> int:
        seen.update(spec=spec, quick=args.quick)
        return 0

    monkeypatch.setattr(races, "race", race)
    sizes = {
        "--n": races.Size("n", full=16, quick=8),
        "--chunk": races.Size("chunk", full=4, quick=2),
        "--vector-chunk": races.Size("x's chunks"),
    }
    assert races.race_main(argv, "a race", 2, sizes, lambda **given: given) == 0
    assert seen["spec"] == expected and seen["quick"] == ("--quick" in argv)


def test_a_case_answers_its_child_or_runs_its_main(monkeypatch, capsys):
    processes = import_module("benchmarks.harness.processes")
    monkeypatch.setattr("sys.argv", ["case", "--child", "numpy", "3"])
    with pytest.raises(SystemExit) as exited:
        processes.child_or_main(lambda: 5, lambda system, n: {system: int(n)}, prefix="RESULT ")
    assert exited.value.code == 0
    assert capsys.readouterr().out.splitlines()[-1] == 'RESULT {"numpy": 3}'
    monkeypatch.setattr("sys.argv", ["case", "--size", "2"])
    with pytest.raises(SystemExit) as exited:
        processes.child_or_main(lambda: 5, lambda: {})
    assert exited.value.code == 5
