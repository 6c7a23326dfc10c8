"""The probe's cache (issue 21, item 6): keyed by the machine's identity, measured again
when the identity changes, the file is corrupt or asked to."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest

from outofcore import config
from outofcore.machine import probe, probe_cache
from outofcore.machine.probe import Figures
from outofcore.machine.probe_cache import machine_figures, machine_identity
from tests.outofcore.machine.test_probe import FIGURES


class Counting:
    """A measurement that returns set figures and counts its calls (the real one is
    tested by itself below)."""

    def __init__(self, figures: Figures = FIGURES) -> None:
        self.figures, self.calls = figures, []

    def __call__(self, threads: int) -> Figures:
        self.calls.append(threads)
        return replace(self.figures, threads=threads)


def test_the_cache_is_used_for_the_same_identity(tmp_path):
    path, measure = tmp_path / "machine.json", Counting()
    first = machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    assert first.fresh and first.why == "no cache yet" and measure.calls == [2]
    again = machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    assert not again.fresh and again.why is None and measure.calls == [2]
    assert again.figures == first.figures == FIGURES
    assert json.loads(path.read_text())["identity"] == {"cpu": "A"}


def test_a_changed_identity_probes_again_and_replaces_the_cache(tmp_path):
    path, measure = tmp_path / "machine.json", Counting()
    machine_figures(2, path=path, identity={"cpu": "A", "blas": ["x 1"]}, measure=measure)
    other = machine_figures(2, path=path, identity={"cpu": "A", "blas": ["x 2"]}, measure=measure)
    assert other.fresh and "another machine identity" in other.why
    assert measure.calls == [2, 2]
    assert json.loads(path.read_text())["identity"] == {"cpu": "A", "blas": ["x 2"]}
    # The first identity's figures are gone: back on it, the probe runs again.
    back = machine_figures(2, path=path, identity={"cpu": "A", "blas": ["x 1"]}, measure=measure)
    assert back.fresh and measure.calls == [2, 2, 2]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"identity": {"cpu": "A"}, "figu', "could not be read"),
        (b"\xff\xfe\x00garbage", "could not be read"),
        (b"[1, 2, 3]", "not a probe's"),
        (b'{"identity": {"cpu": "A"}, "figures": {"2": {"sgemm_flops": 1e9}}}', "not a probe's"),
        (b"", "could not be read"),
    ],
)
def test_a_corrupt_cache_probes_again_and_is_rewritten(tmp_path, content, why):
    path, measure = tmp_path / "machine.json", Counting()
    path.write_bytes(content)
    probed = machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    assert probed.fresh and why in probed.why and measure.calls == [2]
    assert machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure).fresh is False


def test_figures_with_a_rate_that_is_not_positive_are_not_used(tmp_path):
    path, measure = tmp_path / "machine.json", Counting()
    machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    document = json.loads(path.read_text())
    for field, bad in (("sgemm_flops", 0), ("cpu_share", -1), ("overlap", 1.5)):
        spoilt = json.loads(json.dumps(document))
        spoilt["figures"]["2"][field] = bad
        path.write_text(json.dumps(spoilt))
        probed = machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
        assert probed.fresh and "not a probe's" in probed.why, field
        assert probed.figures == FIGURES


def test_reprobe_measures_again_and_other_thread_counts_join_the_cache(tmp_path):
    path, measure = tmp_path / "machine.json", Counting()
    machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    one = machine_figures(1, path=path, identity={"cpu": "A"}, measure=measure)
    assert one.fresh and "no figures for 1 thread(s)" in one.why and one.figures.threads == 1
    assert sorted(json.loads(path.read_text())["figures"]) == ["1", "2"]
    measure.figures = replace(FIGURES, sgemm_flops=3e9)
    again = machine_figures(2, path=path, reprobe=True, identity={"cpu": "A"}, measure=measure)
    assert again.fresh and again.why == "asked to measure again"
    assert again.figures.sgemm_flops == 3e9 and measure.calls == [2, 1, 2]
    kept = machine_figures(1, path=path, identity={"cpu": "A"}, measure=measure)
    assert not kept.fresh and kept.figures.sgemm_flops == FIGURES.sgemm_flops


def test_a_cache_that_cannot_be_written_still_gives_the_figures(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    path, measure = blocker / "outofcore" / "machine.json", Counting()
    probed = machine_figures(2, path=path, identity={"cpu": "A"}, measure=measure)
    assert probed.fresh and probed.figures == FIGURES and not path.exists()
    assert list(tmp_path.iterdir()) == [blocker]  # no partial file left behind


def test_threads_below_one_are_refused(tmp_path):
    with pytest.raises(ValueError, match="threads = 0"):
        machine_figures(0, path=tmp_path / "m.json", identity={}, measure=Counting())


def test_the_cache_folder_follows_xdg_and_the_home_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert probe_cache.cache_path() == tmp_path / "xdg" / "outofcore" / "machine.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if os.name == "posix" and sys.platform != "darwin":
        assert config.cache_dir() == tmp_path / "home" / ".cache" / "outofcore"
    assert config.cache_dir().is_relative_to(tmp_path / "home")


def test_the_test_run_never_writes_the_users_cache():
    """tests/conftest.py gives the whole run (and the processes it starts) a temporary
    cache folder: figures probed under the suite's load never reach the user's cache."""
    import tempfile  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    cache = Path(os.environ["XDG_CACHE_HOME"])
    assert cache.name.startswith("outofcore-test-cache-")
    assert cache.parent == Path(tempfile.gettempdir())
    assert probe_cache.cache_path().is_relative_to(cache)


def test_the_identity_names_this_machine_and_its_blas():
    identity = machine_identity()
    assert identity == machine_identity()  # stable within a process
    assert identity["logical_cpus"] == os.cpu_count()
    assert identity["numpy"] == np.__version__
    assert identity["probe_version"] == probe.PROBE_VERSION
    assert identity["memory_bytes"] > 0 and identity["cpu"]
    # SciPy's BLAS (the one outofcore.backends.blas calls) is loaded and named with its version.
    assert identity["blas"] and all(len(entry.split()) >= 2 for entry in identity["blas"])
    assert json.loads(json.dumps(identity)) == identity  # what the cache file holds


def test_the_cpu_model_is_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Some CPU @ 3.0GHz\n")
    assert probe_cache._cpu_model(str(cpuinfo)) == "Some CPU @ 3.0GHz"
    assert probe_cache._cpu_model(str(tmp_path / "missing"))  # platform's answer instead
