"""Arrays of the PyData stack as job arguments, and outputs with dimension names (issue 21 item 5).

dask arrays made by ``da.from_zarr`` (their ``.T`` too) run on their zarr arrays;
numpy arrays run in this process and are refused, with the line that stores
them, on a cluster; other dask arrays and other types are refused with that
line.  Outputs carry the inputs' dimension names (format 3's
``dimension_names``, xarray's ``_ARRAY_DIMENSIONS`` in format 2) and open in
xarray.  Real zarr stores on disk, a real LocalCluster, float64 references.
"""

from __future__ import annotations

from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import outofcore
from outofcore.api import ATTRIBUTE, JobSpec, job_status, run_job
from outofcore.errors import InputError
from outofcore.jobs.inputs import Operands
from outofcore.journal.resume import ResumeError
from outofcore.operands import interop
from tests.helpers import (
    assert_gemm_close,
    break_chunk,
    random_matrix,
    restore_chunk,
    write_zarr,
)

SYNC = {"client": "sync", "progress": False}


@pytest.fixture
def stored(tmp_path):
    """A (47x31, chunks 10x7) and B (31x23, chunks 9x8), float64, named dimensions, both
    stored transposed too (at.zarr, bt.zarr), with numpy copies."""
    rng = np.random.default_rng(211)
    a = random_matrix(rng, (47, 31), "float64")
    b = random_matrix(rng, (31, 23), "float64")
    for name, data, chunks, dims in (
        ("a", a, (10, 7), ("sample", "feature")),
        ("at", a.T.copy(), (7, 10), ("feature", "sample")),
        ("b", b, (9, 8), ("feature", "target")),
        ("bt", b.T.copy(), (8, 9), ("target", "feature")),
    ):
        zarr.create_array(
            str(tmp_path / f"{name}.zarr"), data=data, chunks=chunks, dimension_names=dims
        )
    return tmp_path, a, b


def from_path(path: Path):
    return da.from_zarr(str(path))


def from_array(path: Path):
    return da.from_zarr(zarr.open_array(str(path), mode="r"), chunks=(5, 5))


def inlined(path: Path):
    return da.from_zarr(str(path), inline_array=True)


def wrapped(path: Path):
    return da.from_array(zarr.open_array(str(path), mode="r"))


@pytest.mark.parametrize("make", [from_path, from_array, inlined, wrapped])
def test_from_zarr_dask_inputs_give_the_product_of_their_arrays(stored, make):
    folder, a, b = stored
    by_path = run_job(folder / "a.zarr", folder / "b.zarr", folder / "p.zarr", **SYNC)
    by_dask = run_job(make(folder / "a.zarr"), make(folder / "b.zarr"), folder / "d.zarr", **SYNC)
    got = zarr.open_array(str(folder / "d.zarr"))[...]
    assert_gemm_close(got, a, b, accumulated_in="float64")
    assert np.array_equal(got, zarr.open_array(str(folder / "p.zarr"))[...])
    # The job read the stored arrays, named by their paths, with their own chunk grids.
    assert by_dask.summary["product"] == by_path.summary["product"]
    assert by_dask.plan.problem == by_path.plan.problem


@pytest.mark.parametrize(
    ("make_a", "make_b", "flags", "transposes"),
    [
        (lambda f: from_path(f / "at.zarr").T, lambda f: f / "b.zarr", {}, (True, False)),
        (lambda f: f / "a.zarr", lambda f: from_path(f / "bt.zarr").T, {}, (False, True)),
        # A dask .T with transpose_a: the two cancel; .T.T is the array itself.
        (
            lambda f: from_path(f / "a.zarr").T,
            lambda f: from_path(f / "b.zarr").T.T,
            {"transpose_a": True},
            (False, False),
        ),
        (
            lambda f: from_path(f / "at.zarr").T,
            lambda f: from_path(f / "b.zarr").T,
            {"transpose_b": True},
            (True, False),
        ),
    ],
)
def test_a_transposed_dask_input_is_its_array_with_the_transpose_flag(
    stored, make_a, make_b, flags, transposes
):
    folder, a, b = stored
    result = run_job(make_a(folder), make_b(folder), folder / "c.zarr", **SYNC, **flags)
    assert_gemm_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b, accumulated_in="float64")
    product = result.summary["product"]
    assert (product["transpose_a"], product["transpose_b"]) == transposes
    assert outofcore.verify(make_a(folder), make_b(folder), folder / "c.zarr", **flags).passed
    # No transposed copy was written anywhere: the folder holds the inputs and c.zarr.
    assert sorted(p.name for p in folder.iterdir()) == [
        "a.zarr", "at.zarr", "b.zarr", "bt.zarr", "c.zarr"
    ]  # fmt: skip


def test_gram_of_a_dask_input_is_symmetric_and_half_the_work(stored):
    folder, a, _ = stored
    x = from_path(folder / "a.zarr")
    g = outofcore.gram(x, folder / "g.zarr", memory="64KiB", **SYNC)
    record = g.attrs[ATTRIBUTE]
    assert record["product"]["symmetric"] is True
    assert_gemm_close(g[...], a, a, accumulated_in="float64", transpose_a=True)
    assert (g[...] == g[...].T).all()
    # matmul(x.T, x) with dask arrays is the same job: recognised as a Gram product.
    h = outofcore.matmul(x.T, x, folder / "h.zarr", memory="64KiB", **SYNC)
    assert h.attrs[ATTRIBUTE]["product"]["symmetric"] is True
    assert np.array_equal(h[...], g[...])


def test_a_dask_input_and_its_path_are_one_job_for_a_resume(stored):
    folder, _, _ = stored
    spec = JobSpec(memory="1MiB")
    by_path = Operands.open(folder / "a.zarr", folder / "b.zarr", folder / "c.zarr", spec)
    by_dask = Operands.open(
        from_path(folder / "a.zarr"), from_path(folder / "b.zarr").T.T, folder / "c.zarr", spec
    )
    assert by_dask.identity == by_path.identity
    assert not (folder / "c.zarr").exists()


def test_an_interrupted_dask_job_resumes_by_path_and_a_numpy_job_by_content(tmp_path):
    rng = np.random.default_rng(5)
    a = random_matrix(rng, (80, 60), "float32")
    b = random_matrix(rng, (60, 50), "float32")
    write_zarr(tmp_path / "b.zarr", b, (10, 10))
    c = tmp_path / "c.zarr"
    options = {"memory": "1MiB", "tile": (80, 10), **SYNC}

    broken = break_chunk(tmp_path / "b.zarr", "3/2")  # columns 20:30 of B
    with pytest.raises(Exception, match="chunk"):
        run_job(a, tmp_path / "b.zarr", c, **options)  # A: a numpy array, in this process
    state = job_status(c)
    assert 0 < state["tiles_done"] < state["tiles_total"]
    restore_chunk(broken)

    # Other values in a numpy array of the same shape: its content fingerprint says so.
    other = a.copy()
    other[0, 0] += 1
    with pytest.raises(ResumeError, match="input A"):
        run_job(other, tmp_path / "b.zarr", c, **options)
    # The same values (a new copy, a new in-memory array): the job resumes.
    result = run_job(a.copy(), from_path(tmp_path / "b.zarr"), c, **options)
    assert result.summary["tiles_skipped"] == state["tiles_done"]
    assert_gemm_close(zarr.open_array(str(c))[...], a, b, accumulated_in="float32")


def test_numpy_inputs_and_addend_run_in_this_process(tmp_path):
    rng = np.random.default_rng(8)
    a = random_matrix(rng, (37, 1100), "float64")  # more than one in-memory chunk along k
    b = random_matrix(rng, (1100, 29), "float32")
    d = random_matrix(rng, (37, 29), "float64")
    c = outofcore.matmul(a, b, tmp_path / "c.zarr", alpha=2.0, beta=-1.0, addend=d, **SYNC)
    assert_gemm_close(c[...], a, b, accumulated_in="float64", alpha=2.0, beta=-1.0, addend=d)
    assert c.attrs[ATTRIBUTE]["complete"] is True
    # Only the output was written: the numpy arrays were copied into memory, not to disk.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.zarr"]
    # A numpy product with k = 0 (no cluster, written in this process) follows numpy.
    empty = outofcore.matmul(np.ones((3, 0)), np.ones((0, 4)), tmp_path / "e.zarr", **SYNC)
    assert (empty[...] == 0).all() and empty.shape == (3, 4)


@pytest.mark.parametrize("where", ["a", "b", "addend"])
def test_numpy_arguments_are_refused_on_a_cluster_with_the_line_that_stores_them(
    tmp_path, two_process_client, where
):
    rng = np.random.default_rng(3)
    a, b, d = (random_matrix(rng, shape, "float64") for shape in ((40, 3000), (3000, 7), (40, 7)))
    write_zarr(tmp_path / "a.zarr", a, (8, 8))
    write_zarr(tmp_path / "b.zarr", b, (8, 7))
    write_zarr(tmp_path / "d.zarr", d, (8, 7))
    args = {"a": tmp_path / "a.zarr", "b": tmp_path / "b.zarr", "addend": tmp_path / "d.zarr"}
    args[where] = {"a": a, "b": b, "addend": d}[where]
    shape = {"a": (40, 2048), "b": (2048, 7), "addend": (40, 7)}[where]
    label = {"a": "input A", "b": "input B", "addend": "the addend"}[where]
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InputError) as refused:
        outofcore.matmul(
            args["a"], args["b"], tmp_path / "c.zarr", beta=1.0, addend=args["addend"],
            client=two_process_client, progress=False,
        )  # fmt: skip
    message = str(refused.value)
    assert message.startswith(f"{label} is a numpy.ndarray in this process's memory")
    assert f"zarr.create_array('{where}.zarr', data={where}, chunks={shape})" in message
    assert "client='sync'" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_numpy_input_with_worker_processes_is_refused_before_a_cluster_starts(
    tmp_path, capfd, outofcore_settings
):
    outofcore_settings(in_process_worker=False)  # the job's workers get processes
    write_zarr(tmp_path / "b.zarr", np.ones((5, 3)), (5, 3))
    with pytest.raises(InputError, match=r"numpy.ndarray.*zarr.create_array\('a.zarr'"):
        outofcore.matmul(np.ones((4, 5)), tmp_path / "b.zarr", tmp_path / "c.zarr")
    assert "LocalCluster" not in capfd.readouterr().err
    assert not (tmp_path / "c.zarr").exists()


def test_an_output_in_memory_is_refused_for_worker_processes(stored, capfd, outofcore_settings):
    """An existing output in a MemoryStore, like an input there: Dask worker processes
    cannot see it (the check is made again once the job's arrays are opened, for inputs
    that only then turn out to be in memory)."""
    folder, _, _ = stored
    out = zarr.create_array(zarr.storage.MemoryStore(), shape=(47, 23), dtype="f8", chunks=(9, 8))
    outofcore_settings(in_process_worker=False)
    with pytest.raises(InputError) as refused:
        outofcore.matmul(folder / "a.zarr", folder / "b.zarr", out, progress=False)
    message = str(refused.value)
    assert message.startswith("the output is a zarr array in a MemoryStore in this process's")
    assert "zarr.create_array('output.zarr'" in message and "client='sync'" in message
    assert not np.any(out[...])  # nothing written into it
    assert "LocalCluster" not in capfd.readouterr().err


def test_from_zarr_dask_inputs_run_on_a_cluster(stored, two_process_client):
    folder, a, b = stored
    result = run_job(
        from_path(folder / "at.zarr").T,
        from_array(folder / "b.zarr"),
        folder / "c.zarr",
        memory="256KiB",
        client=two_process_client,
        progress=False,
    )
    assert len({r.worker for r in result.results}) == 2  # both worker processes read them
    assert_gemm_close(zarr.open_array(str(folder / "c.zarr"))[...], a, b, accumulated_in="float64")
    assert result.summary["product"]["transpose_a"] is True


def test_from_zarr_dask_inputs_on_s3_are_their_urls(tmp_path, moto_server, s3_bucket):
    """dask's own fsspec store (credentials inside) is read as is: same job as the URLs."""
    options = moto_server.options
    rng = np.random.default_rng(23)
    a, b = random_matrix(rng, (29, 17), "float32"), random_matrix(rng, (17, 13), "float32")
    for name, data, chunks in (("a", a, (8, 5)), ("b", b, (5, 6))):
        zarr.create_array(
            f"{s3_bucket}/{name}.zarr", data=data, chunks=chunks, storage_options=options
        )
    urls = [f"{s3_bucket}/{name}.zarr" for name in "ab"]
    dask_inputs = [da.from_zarr(url, storage_options=options) for url in urls]
    spec = JobSpec(memory="16MiB", storage_options=options)
    by_url = Operands.open(*urls, tmp_path / "c.zarr", spec)
    assert Operands.open(*dask_inputs, tmp_path / "c.zarr", spec).identity == by_url.identity
    c = outofcore.matmul(*dask_inputs, tmp_path / "c.zarr", memory="16MiB", **SYNC)
    assert_gemm_close(c[...], a, b, accumulated_in="float32")
    assert outofcore.verify(*dask_inputs, c).passed


def computed(folder: Path):
    x = from_path(folder / "a.zarr")
    return {
        "slice": x[::2],  # strided (a unit-step slice is a region, read as stored)
        "arithmetic": x**2,  # a power: no step (x + 1 and x * x are read, then computed)
        "rechunk": x.rechunk((5, 5))[3:40],  # a slice of new blocks (a rechunk alone: read)
        "astype": x.astype("int32"),  # integers: exact products do not take steps
        "random": da.random.default_rng(1).random((47, 31), chunks=(10, 10)),
        "numpy-backed": da.from_array(np.ones((47, 31))),
    }


@pytest.mark.parametrize(
    "kind", ["slice", "arithmetic", "rechunk", "astype", "random", "numpy-backed"]
)
def test_other_dask_arrays_are_refused_with_the_line_that_stores_them(stored, kind):
    folder, _, _ = stored
    x = computed(folder)[kind]
    b = folder / "b.zarr" if kind != "slice" else from_path(folder / "b.zarr")
    with pytest.raises(InputError) as refused:
        outofcore.matmul(x, b, folder / "c.zarr", **SYNC)
    message = str(refused.value)
    assert message.startswith("input A is a dask array (dask.array.core.Array")
    assert "not one that only reads a zarr array" in message
    # zarr stores regular chunks only: an irregular rechunk is rechunked first
    line = (
        "da.to_zarr(a.rechunk('auto'), 'a.zarr')"
        if kind == "rechunk"
        else "da.to_zarr(a, 'a.zarr')"
    )
    assert message.endswith(line)
    assert not (folder / "c.zarr").exists()


def test_a_computed_dask_b_or_addend_is_refused_naming_it(stored, two_process_client):
    folder, _, _ = stored
    b = from_path(folder / "b.zarr")
    with pytest.raises(InputError, match=r"^input B is a dask array.*da.to_zarr\(b, 'b.zarr'\)$"):
        outofcore.matmul(folder / "a.zarr", b**2, folder / "c.zarr", **SYNC)
    addend = da.zeros((47, 23), chunks=(10, 10))
    with pytest.raises(
        InputError, match=r"^the addend is a dask array.*da.to_zarr\(addend, 'addend.zarr'\)$"
    ):
        outofcore.matmul(
            folder / "a.zarr", b, folder / "c.zarr", beta=1.0, addend=addend,
            client=two_process_client, progress=False,
        )  # fmt: skip
    # A dask .T as the addend: the addend has no transpose flag.
    write_zarr(folder / "dt.zarr", np.zeros((23, 47)), (8, 8))
    with pytest.raises(InputError, match=r"^the addend is the transpose of the zarr array .*dt"):
        outofcore.matmul(
            folder / "a.zarr", b, folder / "c.zarr", beta=1.0,
            addend=from_path(folder / "dt.zarr").T, **SYNC,
        )  # fmt: skip
    assert not (folder / "c.zarr").exists()


@pytest.mark.parametrize(
    ("value", "kind", "line"),
    [
        ([[1.0, 2.0]], "builtins.list", "data=np.asarray(a), chunks=(2048, 2048))"),
        (np.ma.ones((2, 2)), "numpy.ma.MaskedArray", "data=a.filled(), chunks=(2, 2))"),
    ],
)
def test_other_types_are_refused_naming_the_type_and_the_line(stored, value, kind, line):
    folder, _, _ = stored
    with pytest.raises(InputError) as refused:
        outofcore.matmul(value, folder / "b.zarr", folder / "c.zarr", **SYNC)
    message = str(refused.value)
    assert message.startswith(f"input A is a {kind}; outofcore reads a zarr.Array")
    assert message.endswith(f"zarr.create_array('a.zarr', {line}")


def test_zarr_behind_finds_the_array_only_for_reads(stored):
    folder, _, _ = stored
    z = zarr.open_array(str(folder / "a.zarr"), mode="r")
    assert interop.zarr_behind(da.from_zarr(z)) == (z, False)
    assert interop.zarr_behind(da.from_zarr(z).T) == (z, True)
    assert interop.zarr_behind(da.from_zarr(z).transpose()) == (z, True)
    assert interop.zarr_behind(da.from_zarr(z).T.T) == (z, False)
    for kind, x in computed(folder).items():
        assert interop.zarr_behind(x) is None, kind
    assert interop.zarr_behind(da.from_zarr(z).T + 0) is None
    # dask opened the local array through fsspec: reopened by its path (one fingerprint).
    found, _ = interop.zarr_behind(from_path(folder / "a.zarr"))
    assert type(found.store) is type(z.store) and found.store.root == z.store.root


# Dimension names ----------------------------------------------------------------


def names_of(c: zarr.Array):
    if c.metadata.zarr_format == 3:
        return c.metadata.dimension_names
    return c.attrs.get("_ARRAY_DIMENSIONS")


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_outputs_carry_the_inputs_dimension_names(stored, zarr_format):
    folder, _, _ = stored
    options = {**SYNC, "zarr_format": zarr_format}
    listed = ["sample", "target"] if zarr_format == 2 else ("sample", "target")

    def job(a, b, name, **flags):
        return names_of(outofcore.matmul(a, b, folder / name, **options, **flags))

    assert job(folder / "a.zarr", folder / "b.zarr", "c1.zarr") == listed
    # op(A)'s rows, op(B)'s columns: flags and dask transposes alike.
    assert job(folder / "at.zarr", folder / "b.zarr", "c2.zarr", transpose_a=True) == listed
    assert job(from_path(folder / "at.zarr").T, folder / "b.zarr", "c3.zarr") == listed
    swapped = ["target", "sample"] if zarr_format == 2 else ("target", "sample")
    assert (
        job(from_path(folder / "b.zarr").T, folder / "at.zarr", "c4.zarr", transpose_b=False)
        == swapped
    )
    # A Gram product: one dimension twice, the second called name_2.
    feature = ["feature", "feature_2"] if zarr_format == 2 else ("feature", "feature_2")
    g = outofcore.gram(folder / "a.zarr", folder / "g.zarr", **options)
    assert names_of(g) == feature
    gr = outofcore.gram(folder / "a.zarr", folder / "gr.zarr", rows=True, **options)
    assert tuple(names_of(gr)) == ("sample", "sample_2")
    # An empty product (k = 0), written without a plan, is named too.
    write_zarr(folder / "e1.zarr", np.ones((3, 0)), (3, 1))
    write_zarr(folder / "e2.zarr", np.ones((0, 4)), (1, 4))
    for name, dims in (("e1.zarr", ("rows", "inner")), ("e2.zarr", ("inner", "cols"))):
        # Names given as xarray gives them in format 2 (read from format 3 arrays too).
        zarr.open_array(str(folder / name), mode="r+").attrs["_ARRAY_DIMENSIONS"] = list(dims)
    empty = outofcore.matmul(folder / "e1.zarr", folder / "e2.zarr", folder / "e.zarr", **options)
    assert tuple(names_of(empty)) == ("rows", "cols")


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_unnamed_dimensions_get_xarrays_default_names(stored, zarr_format):
    """issue 31: outputs from unnamed inputs are named as xarray names them (dim_0, ...),
    so xarray opens every output; a name an input gives is not taken twice."""
    folder, a, b = stored
    write_zarr(folder / "plain.zarr", b, (9, 8))  # no dimension names
    c = outofcore.matmul(
        folder / "a.zarr", folder / "plain.zarr", folder / "c.zarr", zarr_format=zarr_format, **SYNC
    )
    assert tuple(names_of(c)) == ("sample", "dim_1")
    n = outofcore.matmul(a, b, folder / "n.zarr", zarr_format=zarr_format, **SYNC)  # numpy
    assert n.metadata.zarr_format == zarr_format
    assert tuple(names_of(n)) == ("dim_0", "dim_1")
    write_zarr(folder / "d1.zarr", a, (9, 8))
    zarr.open_array(str(folder / "d1.zarr"), mode="r+").attrs["_ARRAY_DIMENSIONS"] = ["dim_1", "k"]
    clash = outofcore.matmul(folder / "d1.zarr", folder / "plain.zarr", folder / "d.zarr",
                             zarr_format=zarr_format, **SYNC)  # fmt: skip
    assert tuple(names_of(clash)) == ("dim_1", "dim_1_2")  # A's rows are called dim_1


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_the_output_opens_in_xarray_with_its_dimensions(tmp_path, zarr_format):
    rng = np.random.default_rng(17)
    x = xr.DataArray(random_matrix(rng, (41, 13), "float64"), dims=("sample", "feature"))
    w = xr.DataArray(random_matrix(rng, (13, 5), "float64"), dims=("feature", "component"))
    # Inputs written by xarray (a group per dataset); outputs in a group of their own.
    x.to_dataset(name="x").to_zarr(tmp_path / "x.zarr", zarr_format=zarr_format, consolidated=False)
    w.to_dataset(name="w").to_zarr(tmp_path / "w.zarr", zarr_format=zarr_format, consolidated=False)
    zarr.open_group(str(tmp_path / "results.zarr"), mode="w", zarr_format=zarr_format)
    options = {"zarr_format": zarr_format, **SYNC}
    outofcore.matmul(
        tmp_path / "x.zarr/x", tmp_path / "w.zarr/w", tmp_path / "results.zarr/y", **options
    )
    projected = xr.open_dataarray(tmp_path / "results.zarr", engine="zarr", consolidated=False)
    assert projected.dims == ("sample", "component") and projected.name == "y"
    assert_gemm_close(projected.values, x.values, w.values, accumulated_in="float64")
    assert projected.attrs["outofcore"]["complete"] is True

    outofcore.gram(tmp_path / "x.zarr/x", tmp_path / "results.zarr/g", **options)
    results = xr.open_zarr(tmp_path / "results.zarr", consolidated=False)
    g = results["g"]
    assert g.dims == ("feature", "feature_2")
    assert_gemm_close(g.values, x.values, x.values, accumulated_in="float64", transpose_a=True)
    # Named dimensions work as xarray's: a reduction over one of them.
    assert results["y"].sum("sample").dims == ("component",)


@pytest.mark.parametrize("kind", ["dask", "irregular dask", "dataarray", "centred dataarray"])
def test_the_line_that_stores_a_refused_operand_runs_as_quoted(stored, kind, monkeypatch):
    """Issue 55, item 2: every suggestion that quotes code is valid code: the refusal's
    line, run as written where the user is (``a`` their operand), stores what the job
    then reads (it suggested ``da.to_zarr('feature')), "'feature')).zarr")`` for a
    DataArray)."""
    folder, _, _ = stored
    (folder / "user").mkdir()
    monkeypatch.chdir(folder / "user")  # where the user runs the line (a.zarr is free)
    random = da.random.default_rng(2).random((47, 31), chunks=(10, 10))
    if kind == "dask":
        a = random
    elif kind == "irregular dask":  # chunks zarr cannot store as they are
        a = random.rechunk(((10, 2, 35), (31,)))
    else:
        a = xr.DataArray(random, dims=("sample", "feature"), name="x")
        if kind == "centred dataarray":  # computes more than a read: a rolling mean
            a = a - a.rolling(sample=3, min_periods=1).mean()
    with pytest.raises(InputError) as refused:
        outofcore.matmul(a, folder / "b.zarr", folder / "c.zarr", **SYNC)
    quoted = str(refused.value).rsplit(": ", 1)[1]
    code, _, path = quoted.partition(" and pass ")
    # Here, not on the module's cluster (its workers write relative paths in their own cwd)
    with dask.config.set(scheduler="sync"):
        exec(code, {"da": da, "a": a})  # noqa: S102 (the message's own line, as a user runs it)
    path = eval(path) if path else "a.zarr"  # noqa: S307 (the quoted path)
    c = outofcore.matmul(path, folder / "b.zarr", folder / "c.zarr", **SYNC)
    expected = np.asarray(a) @ zarr.open_array(folder / "b.zarr")[...]
    np.testing.assert_allclose(c[...], expected, rtol=1e-5)
