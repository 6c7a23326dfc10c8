"""A quiet library (issue 45, item 1): ``matmul``, ``to_zarr`` and ``xarray.dot`` with a
Client given print nothing on stdout or stderr at the default log level; the command
line keeps its bar and summary."""

from __future__ import annotations

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from distributed import Client

import outofcore
import outofcore.xarray
from tests.helpers import assert_product_close, write_zarr


def test_library_calls_with_a_client_print_nothing(tmp_path, local_cluster, capfd):
    rng = np.random.default_rng(45)
    a = rng.standard_normal((120, 90)).astype("float32")
    b = rng.standard_normal((90, 70)).astype("float32")
    write_zarr(tmp_path / "a.zarr", a, (40, 30))
    write_zarr(tmp_path / "b.zarr", b, (30, 35))
    with Client(local_cluster(n_workers=1)) as client:
        capfd.readouterr()
        outofcore.matmul(tmp_path / "a.zarr", tmp_path / "b.zarr", tmp_path / "c.zarr",
                         client=client)  # fmt: skip
        x, y = da.from_zarr(str(tmp_path / "a.zarr")), da.from_zarr(str(tmp_path / "b.zarr"))
        outofcore.to_zarr(x @ y, str(tmp_path / "d.zarr"), client=client)
        xa = xr.DataArray(x, dims=("i", "k"))
        yb = xr.DataArray(y, dims=("k", "j"))
        product = outofcore.xarray.dot(xa, yb, dim="k", out=str(tmp_path / "e.zarr"), client=client)
        out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    for name in ("c.zarr", "d.zarr"):
        assert_product_close(zarr.open_array(tmp_path / name)[...], a, b)
    assert_product_close(product.values, a, b)
