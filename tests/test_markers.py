"""The markers of tests/markers.py: the slow list names tests that exist, and what the code
walk reads as a cluster or a process."""

from __future__ import annotations

import re

from tests import helpers, markers


def test_every_slow_entry_names_a_file_or_a_test_function_in_it():
    """A test renamed or moved leaves no stale line in tests/slow_tests.txt (it would quietly
    stop being slow)."""
    for entry in markers.slow_tests():
        path, _, name = entry.partition("::")
        assert (markers.ROOT / path).is_file(), entry
        if name:
            source = (markers.ROOT / path).read_text()
            function = name.split("::")[-1]
            assert re.search(rf"^\s*(async )?def {function}\(", source, re.MULTILINE), entry


def test_the_code_walk_follows_calls_into_the_helpers():
    """``helpers.cli`` runs the CLI as a process; a function that calls it starts one too;
    ``helpers.write_zarr`` starts nothing; ``gen_cluster`` and ``LocalCluster(`` are clusters."""
    assert markers._reaches(helpers.cli, markers.PROCESS)
    assert not markers._reaches(helpers.write_zarr, markers.PROCESS)
    assert not markers._reaches(helpers.write_zarr, markers.CLUSTER)
    assert markers._reaches(helpers.MotoServer.__init__, markers.PROCESS)  # from benchmarks/
    cluster = ["@gen_cluster(nthreads=[])", "with LocalCluster(n_workers=2) as c:"]
    cluster += ["matmul(a, b, c, workers=2)", 'cli("matmul", "--workers", "2")']
    for code in cluster:
        assert markers.CLUSTER.search(code), code
    for code in ["make_plan(p, 2**30, workers=4)", "run_job(a, b, c, workers=None)"]:
        assert not markers.CLUSTER.search(code), code
