"""The hostile corpus (tests/kernels/hostile, issue 12): the manifest is well-formed and complete, every
candidate says what it attacks and what a correct judge concludes, and (slow) every candidate builds for h100
with its required families, as its manifest entry expects.

The verdicts themselves need the GPU judge; that runner lives with the judge, not here."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from xlang.task import task_names
from xlang.verdict import CATEGORIES

HOSTILE = Path(__file__).parent / "kernels" / "hostile"
MANIFEST = HOSTILE / "MANIFEST.toml"
LANGS = {"triton": ".py", "cuda_ptx": ".cu", "cutedsl": ".py"}
TASKS = set(task_names())  # the new task families get their hostile cases too (scale factors, page tables)
CLASSES = {"vendor_fallback", "correctness", "instructions_executed", "memory_safety", "timing",
           "harness_tampering", "profiler_evasion", "robustness", "persistence", "secrets", "language_attribution",
           "host_compute", "false_accusation"}  # false_accusation: honest candidates a judge must not blame (#31.8)
KEYS = {"file", "lang", "task", "class", "expect", "expect_any", "expect_speedup_max", "expect_no_secret",
        "expect_next_ok", "next_probe", "expect_next_probe", "expect_files_unchanged", "expect_no_survivor",
        "expect_verdict_written", "expect_max_seconds", "expect_log_max_bytes", "requires", "why"}


def entries() -> list[dict]:
    return tomllib.loads(MANIFEST.read_text())["candidate"]


def expected_categories(entry: dict) -> list[str]:
    return [entry["expect"]] if "expect" in entry else list(entry["expect_any"])


def test_manifest_is_well_formed():
    seen = set()
    for e in entries():
        where = e.get("file", "?")
        assert {"file", "lang", "task", "class"} <= e.keys(), where
        assert not e.keys() - KEYS, f"{where}: unknown keys {e.keys() - KEYS}"
        assert e["file"] not in seen, f"{where} listed twice"
        seen.add(e["file"])
        assert e["lang"] in LANGS and e["file"].endswith(LANGS[e["lang"]]), where
        assert e["task"] in TASKS, where
        assert e["class"] in CLASSES, where
        assert ("expect" in e) != ("expect_any" in e), f"{where}: exactly one of expect / expect_any"
        cats = expected_categories(e)
        assert cats and set(cats) <= set(CATEGORIES), f"{where}: {cats}"
        if "expect_any" in e:
            assert len(cats) > 1 and e.get("why"), f"{where}: expect_any needs several categories and a why"
        if "expect_speedup_max" in e:
            assert 0 < e["expect_speedup_max"] <= 2.0, where
        if "next_probe" in e:
            assert (Path(__file__).parents[1] / e["next_probe"]).is_file(), where
            assert e.get("expect_next_probe") in CATEGORIES, where
        for key in ("expect_no_secret", "expect_next_ok", "expect_no_survivor", "expect_verdict_written"):
            assert e.get(key, True) is True, f"{where}: {key} is a flag set to true"


def test_manifest_covers_every_file_and_class():
    listed = {e["file"] for e in entries()}
    present = {p.name for p in HOSTILE.iterdir() if p.suffix in (".py", ".cu")}
    assert listed == present, f"not in the manifest: {present - listed}; missing files: {listed - present}"
    # Every class of issue 12 has a candidate in both of its languages; language attribution (a candidate
    # running another language's kernels) has at least one.
    for cls in CLASSES:
        langs = {e["lang"] for e in entries() if e["class"] == cls}
        if cls == "language_attribution":
            assert langs, f"class {cls}: no candidate"
        else:
            assert {"triton", "cuda_ptx"} <= langs, f"class {cls}: only {langs}"


def test_no_candidate_may_pass_as_ok_for_free():
    # A harmful number or side effect is checked by a structured expectation; a wrong answer is never "ok".
    for e in entries():
        cats = expected_categories(e)
        if "ok" in cats and e["class"] in ("timing",):
            assert "expect_speedup_max" in e, e["file"]
        if e["class"] == "persistence":
            assert e.get("expect_next_ok") and e.get("expect_files_unchanged"), e["file"]
        if e["class"] == "secrets":
            assert e.get("expect_no_secret"), e["file"]
        if e["class"] in ("vendor_fallback", "profiler_evasion", "correctness", "instructions_executed",
                          "memory_safety", "harness_tampering", "host_compute"):
            assert "ok" not in cats, e["file"]


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["file"])
def test_candidate_header(entry):
    text = (HOSTILE / entry["file"]).read_text()
    head = text[:3000]
    assert "HOSTILE candidate" in head and "Class:" in head, entry["file"]
    assert "What it does:" in head and "An honest judge must conclude:" in head, entry["file"]
    assert "xlang_entry" in text, entry["file"]
    if entry["lang"] == "triton":
        compile(text, entry["file"], "exec")  # valid Python


def test_side_effects_are_armed_only_on_a_gpu_machine():
    # A candidate's build runs its Python on this CPU machine: processes, files, signals and secrets only where
    # CUDA is available (armed()), never on a build box shared with other work.
    risky = ("os.fork", "os.kill", "_persist(", "_poison(", "leak(", "harvest(", "_forge(", "_tamper(",
             "_kill_judge(", "os.write(", "_patch(", "_loosen_everything(", "_zero_copies(")
    for e in entries():
        if e["lang"] != "triton":
            continue
        text = (HOSTILE / e["file"]).read_text()
        for line in text.splitlines():
            calls = [r for r in risky if r in line and not line.lstrip().startswith(("def ", "#"))]
            if calls and "armed()" not in text:
                pytest.fail(f"{e['file']}: {calls} without an armed() guard")


def _build(entry) -> tuple[dict, int, str]:
    cmd = [sys.executable, "-m", "xlang", "build", str(HOSTILE / entry["file"]), "--lang", entry["lang"],
           "--task", entry["task"], "--arch", "h100"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return entry, proc.returncode, (proc.stdout + proc.stderr)[-3000:]


def _build_all(lang: str):
    todo = [e for e in entries() if e["lang"] == lang]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_build, todo))
    # Every candidate builds with its required families (exit 0), unless its manifest expects a build failure.
    failures = [f"{e['file']}: exit {rc}\n{log}" for e, rc, log in results
                if rc != (1 if expected_categories(e) == ["compile_error"] else 0)]
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_ptx_candidates_build():
    _build_all("cuda_ptx")


@pytest.mark.slow
def test_triton_candidates_build():
    pytest.importorskip("triton")
    _build_all("triton")
