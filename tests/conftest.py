"""Shared test setup: GPU-only tests (marked `gpu`) are skipped where no NVIDIA GPU answers; a private build cache."""

import functools
import os
import shutil
import subprocess

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_build_cache(tmp_path_factory):
    """Tests neither read nor fill the user's build cache (~/.cache/xlang/builds): one of their own per session."""
    os.environ["XLANG_BUILD_CACHE"] = str(tmp_path_factory.mktemp("build-cache"))


@pytest.fixture
def xlang(capsys):
    """Run `xlang ARGS` in this process as a user would (xlang.cli.main, its error handling included):
    returns (exit code, stdout, stderr)."""
    from xlang.cli import main

    def call(*args) -> tuple[int, str, str]:
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return call


@functools.cache
def gpu_present() -> bool:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
