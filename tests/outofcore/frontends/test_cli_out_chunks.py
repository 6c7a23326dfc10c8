"""``--out-chunks`` and ``--out-shards``: the output's layout from the command line (issue 45,
item 3), parsed as ``chunks=`` and ``shards=`` are checked, and the refusal of an array the
user made naming them."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import outofcore
from outofcore.errors import InputError
from outofcore.frontends.cli_parser import build_parser
from tests.helpers import cli, random_matrix, write_zarr


def parse(*options: str):
    return build_parser().parse_args(["matmul", "a.zarr", "b.zarr", "-o", "c.zarr", *options])


@pytest.mark.parametrize("command", ["matmul", "gram", "plan"])
def test_every_job_command_takes_the_output_layout(command):
    operands = {"matmul": ["a", "b", "-o", "c"], "gram": ["x", "-o", "g"], "plan": ["a", "b"]}
    args = build_parser().parse_args(
        [command, *operands[command], "--out-chunks", "64,29", "--out-shards", "128,58"]
    )
    assert args.out_chunks == (64, 29) and args.shards == (128, 58)


def test_the_layout_options_and_their_defaults():
    args = parse()
    assert args.out_chunks is None and args.shards is True
    assert parse("--out-chunks", "40").out_chunks == (40, 40)  # one number is both
    assert parse("--no-shards").shards is False


@pytest.mark.parametrize("value", ["0,3", "1,2,3", "a,b", "64x29"])
def test_a_layout_that_is_not_two_sizes_is_a_usage_error(capsys, value):
    with pytest.raises(SystemExit) as stopped:
        parse("--out-chunks", value)
    assert stopped.value.code == 2
    assert "expected" in capsys.readouterr().err


def test_no_shards_and_a_shard_shape_are_not_both_taken(capsys):
    with pytest.raises(SystemExit) as stopped:
        parse("--no-shards", "--out-shards", "64,64")
    assert stopped.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(2)
    a, b = random_matrix(rng, (83, 61), "float32"), random_matrix(rng, (61, 47), "float32")
    write_zarr(tmp_path / "a.zarr", a, (20, 17))
    write_zarr(tmp_path / "b.zarr", b, (17, 13))
    return tmp_path, a, b


def test_the_command_creates_the_output_in_the_layout_asked(inputs):
    folder, a, b = inputs
    out = folder / "c.zarr"
    layout = ["--out-chunks", "32,13", "--out-shards", "64,26"]
    done = cli("matmul", str(folder / "a.zarr"), str(folder / "b.zarr"), "-o", str(out),
               *layout, "--scheduler", "sync", "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    c = zarr.open_array(str(out), mode="r")
    assert c.chunks == (32, 13) and c.shards == (64, 26)
    np.testing.assert_allclose(c[...], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_a_user_array_given_by_path_is_refused_naming_the_command_line_way(inputs):
    folder, _, _ = inputs
    zarr.create_array(str(folder / "theirs.zarr"), shape=(83, 47), chunks=(32, 13), dtype="f4")
    done = cli("matmul", str(folder / "a.zarr"), str(folder / "b.zarr"), "-o",
               str(folder / "theirs.zarr"), "--scheduler", "sync")  # fmt: skip
    assert done.returncode == 2
    assert "outofcore did not write" in done.stderr and "--out-chunks R,C" in done.stderr
    assert "--overwrite" not in done.stderr


def test_a_user_array_given_as_an_object_is_refused_naming_the_way(inputs):
    folder, _, _ = inputs
    theirs = zarr.create_array(str(folder / "theirs.zarr"), shape=(83, 47), chunks=(32, 13),
                               dtype="f4")  # fmt: skip
    with pytest.raises(InputError) as refused:
        outofcore.matmul(str(folder / "a.zarr"), str(folder / "b.zarr"), theirs, client="sync")
    assert "chunks=(rows, cols)" in str(refused.value)
    assert theirs.nchunks_initialized == 0
