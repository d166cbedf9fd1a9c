"""Our hostile corpus (tests/kernels/hostile/MANIFEST.toml) judged on a real Hopper GPU: each candidate gets
the verdict a correct judge must give, no speed is inflated, no planted secret appears, and the judge is
unchanged for the next candidate. Marked gpu (skipped here); benchmarks/hostile_corpus_run.py prints the
same checks as a table on the device."""

from __future__ import annotations

import importlib.util
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "kernels" / "hostile"
ENTRIES = tomllib.loads((HOSTILE / "MANIFEST.toml").read_text())["candidate"]

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _runner():
    spec = importlib.util.spec_from_file_location("hostile_corpus_run", ROOT / "benchmarks" / "hostile_corpus_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_hostile_candidate(entry, monkeypatch):
    run = _runner()
    monkeypatch.setenv("XLANG_TEST_API_KEY", run.SECRET)
    v, seconds = run.judge(HOSTILE / entry["file"], entry["lang"], entry["task"], Path(entry["file"]).stem)
    problems = run.check(entry, v, seconds)
    if entry.get("expect_no_survivor", True):
        left = run.survivors()
        assert not left, f"processes of the candidate's uid left: {left}"
    assert not problems, f"{entry['file']}: {problems}; detail: {v.detail[:500]}"


def test_next_candidate_unchanged_after_the_corpus():
    run = _runner()
    v, _ = run.judge(ROOT / "tests" / "kernels" / "bad" / "off_by_one.py", "triton", "gemm", "probe")
    assert v.category == "incorrect", v.detail
    assert os.environ.get("XLANG_TEST_API_KEY") is None or run.SECRET not in v.detail
