"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The command lines are parsed by the real parsers (Dask's click commands and
outofcore's argparse), so a misspelt option fails here; tests/system/test_cluster.py
runs the same command lines natively.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from distributed.cli import dask_scheduler, dask_worker

from outofcore.frontends.cli_parser import build_parser
from outofcore.runtime.tls import tls_settings
from tests.certificates import make_certificates
from tests.helpers import COMPOSE_VARIABLE, ROOT, interpolate


def command(compose: dict, service: str) -> list[str]:
    return [interpolate(str(part)) for part in compose["services"][service]["command"]]


def test_services_and_the_data_volume(compose):
    services = compose["services"]
    assert {"scheduler", "worker", "gpu-worker", "job"} <= set(services)
    assert "data" in compose["volumes"]
    for name in ("worker", "gpu-worker", "job"):
        assert "data:/data" in services[name]["volumes"], name
    # Scalable with --scale worker=N: no fixed container name and no host ports.
    for name in ("worker", "gpu-worker"):
        assert "container_name" not in services[name] and "ports" not in services[name]
    ports = [interpolate(port) for port in services["scheduler"]["ports"]]
    assert {"8786:8786", "8787:8787"} <= set(ports)
    # Workers and the job wait for a healthy scheduler.
    for name in ("worker", "gpu-worker", "job"):
        assert services[name]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert "healthcheck" in services["scheduler"]


def test_scheduler_and_worker_commands_parse_with_dask(compose):
    scheduler = command(compose, "scheduler")
    assert scheduler[:2] == ["dask", "scheduler"]  # dask-scheduler is gone since 2026.6
    params = dask_scheduler.main.make_context("dask scheduler", scheduler[2:]).params
    assert params["port"] == "8786" and params["dashboard_address"] == ":8787"

    worker = command(compose, "worker")
    assert worker[:2] == ["dask", "worker"]
    params = dask_worker.main.make_context("dask worker", worker[2:]).params
    assert params["scheduler"] == "tcp://scheduler:8786"
    assert params["nthreads"] == 1
    assert params["memory_limit"] == "4GiB"
    assert not params["resources"]


def test_gpu_worker_is_dask_cuda_s_and_advertises_its_gpu(compose):
    gpu = compose["services"]["gpu-worker"]
    assert gpu["profiles"] == ["gpu"]
    [device] = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert device["count"] == 1  # `dask cuda worker` starts one worker per GPU it sees
    # The image has dask-cuda and numba-cuda: the [gpu] extra (which holds [cuda]).
    assert "gpu" in gpu["build"]["args"]["EXTRAS"].split(",")
    args = command(compose, "gpu-worker")
    assert args[:3] == ["dask", "cuda", "worker"]
    # Parsed by dask-cuda's own click command (imported without a GPU; never started here).
    cli = pytest.importorskip("dask_cuda.cli", reason="dask-cuda (the [gpu] extra) parses it")
    params = cli.worker.make_context("dask cuda worker", args[3:]).params
    assert params["scheduler"] == "tcp://scheduler:8786"
    assert params["resources"] == "GPU=1" and params["nthreads"] == 1
    assert params["memory_limit"] == "16GiB"


def test_job_command_parses_with_the_outofcore_cli(compose):
    job = command(compose, "job")
    assert job[0] == "outofcore"
    args = build_parser().parse_args(job[1:])
    assert args.command == "matmul"
    assert args.scheduler == "tcp://scheduler:8786"
    assert all(path.startswith("/data/") for path in (args.a, args.b, args.out))
    assert args.memory == 2 * 2**30
    # The job's budget must fit in a worker's memory limit with room for the interpreter.
    worker_limit = 4 * 2**30
    assert args.memory * 1.25 + 768 * 2**20 <= worker_limit
    overridden = [
        interpolate(str(p), {"JOB_MEMORY": "64MiB"}) for p in compose["services"]["job"]["command"]
    ]
    assert build_parser().parse_args(overridden[1:]).memory == 64 * 2**20


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.tls.yml"])
def test_every_variable_has_a_default(name):
    text = (ROOT / name).read_text()
    names = COMPOSE_VARIABLE.findall(text)
    assert names, "expected configurable values"
    interpolate(text)  # raises naming a variable without a default


@pytest.fixture(scope="module")
def compose_tls() -> dict:
    """docker-compose.tls.yml (the TLS variant, an override file), parsed."""
    return yaml.safe_load((ROOT / "docker-compose.tls.yml").read_text())


#: The options of the TLS variant, which the plain file's command lines do not have.
TLS_OPTIONS = ("--tls-ca-file", "--tls-cert", "--tls-key", "--protocol")


def without_tls(line: list[str]) -> list[str]:
    """A command line without its TLS options, and its tls:// address as tcp://."""
    kept, skip = [], False
    for part in line:
        if skip:
            skip = False
        elif part in TLS_OPTIONS:
            skip = True
        else:
            kept.append(part.replace("tls://", "tcp://"))
    return kept


def test_the_tls_variant_changes_only_commands_and_certificates(compose, compose_tls):
    """Each service of the override exists in the plain file; only its command line and
    the certificate folder change, and its command line is the plain one plus TLS."""
    for name, service in compose_tls["services"].items():
        assert name in compose["services"], name
        assert set(service) == {"command", "volumes"}, name
        assert service["volumes"] == ["${TLS_DIR:-./certs}:/certs:ro"]
        tls_line = [str(part) for part in service["command"]]
        plain = [str(part) for part in compose["services"][name]["command"]]
        assert without_tls(tls_line) == plain, name
        assert "tcp://" not in " ".join(tls_line)


def test_the_tls_command_lines_parse_with_dask_and_outofcore(compose_tls, tmp_path):
    made = make_certificates(tmp_path)  # Dask's parsers check that the files exist

    def line(service: str) -> list[str]:
        parts = compose_tls["services"][service]["command"]
        return [interpolate(str(p)).replace("/certs/", f"{tmp_path}/") for p in parts]

    def files(params: dict) -> tuple[Path, ...]:
        return tuple(Path(params[key]) for key in ("tls_ca_file", "tls_cert", "tls_key"))

    params = dask_scheduler.main.make_context("dask scheduler", line("scheduler")[2:]).params
    assert params["protocol"] == "tls" and params["port"] == "8786"
    assert files(params) == (made.ca, made.scheduler.cert, made.scheduler.key)

    params = dask_worker.main.make_context("dask worker", line("worker")[2:]).params
    assert params["scheduler"] == "tls://scheduler:8786"
    assert files(params) == (made.ca, made.worker.cert, made.worker.key)

    args = build_parser().parse_args(line("job")[1:])
    assert args.scheduler == "tls://scheduler:8786"
    assert tuple(map(Path, (args.tls_ca_file, args.tls_cert, args.tls_key))) == (
        made.ca, made.client.cert, made.client.key,
    )  # fmt: skip
    assert tls_settings(args.scheduler, args.tls_ca_file, args.tls_cert, args.tls_key)

    cli = pytest.importorskip("dask_cuda.cli", reason="dask-cuda (the [gpu] extra) parses it")
    params = cli.worker.make_context("dask cuda worker", line("gpu-worker")[3:]).params
    assert params["scheduler"] == "tls://scheduler:8786" and params["resources"] == "GPU=1"
    assert files(params) == (made.ca, made.worker.cert, made.worker.key)


def test_image_builds_from_this_repository(compose):
    for name in ("scheduler", "worker", "job", "gpu-worker"):
        assert compose["services"][name]["build"]["context"] == "."
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1[1-9]", dockerfile, re.MULTILINE)
    # the package with its EXTRAS (s3fs by default), at the versions the tests ran with
    assert re.search(r'pip install -c constraints\.txt "\.\[\$\{EXTRAS\}\]"', dockerfile)
    assert re.search(r'^ARG EXTRAS="s3"$', dockerfile, re.MULTILINE)
    # An image with the gpu extra fails to build unless `dask cuda worker` starts.
    assert re.search(r"\*,gpu,\*\) dask cuda worker --help", dockerfile)
    copied = re.findall(r"^COPY (.+) \S+$", dockerfile, re.MULTILINE)
    sources = [src for line in copied for src in line.split()]
    assert {"pyproject.toml", "constraints.txt", "outofcore"} <= set(sources)
    # the planner and the runtime are inside the package; scheduler/ holds only its README
    assert "scheduler" not in sources
    for source in sources:
        assert (ROOT / source).exists(), source
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()
    }
    assert not ignored & set(sources), "the image needs these files"
    assert {".git", ".venv"} <= ignored
