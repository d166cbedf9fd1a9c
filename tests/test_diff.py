"""`xlang diff` and `xlang readiness` on two stores whose verdicts carry two recorded toolchains (Triton 3.6.0 and
3.9.0): the transitions, the families gained and lost, registers, the SASS mix, the speed change with its
interval, the summary sentence, the files, and the exit code of --fail-on."""

from __future__ import annotations

import csv

import pytest
from typer.testing import CliRunner

from xlang.store import Store


def _verdict(category, arch, families, opcodes, regs, timing=None, compiled=True, version="3.6.0",
             required=("tcgen05_mma", "tma"), error=None):
    census = {"arch": arch, "required": list(required), "present": [f for f in required if families.get(f)],
              "missing": [f for f in required if not families.get(f)], "families": families, "ptx": {},
              "kernels": [{"name": "k", "families": families, "opcodes": opcodes, "instructions": sum(opcodes.values())}]}
    build = {"ok": compiled, "seconds": 2.0 if version == "3.6.0" else 3.0, "cached": False, "error": error,
             "census": census if compiled else None,
             "resources": [{"kernel": "k", "registers": regs, "spill_stores": 0, "spill_loads": 0}] if compiled else []}
    return {"category": category, "build": build, "compiled": compiled, "census_ok": compiled and not census["missing"],
            "runtime_ran": timing is not None, "correct": True if timing else None,
            "executed_ok": True if timing else None, "timing": timing,
            "fingerprint": {"toolchain": {"triton": version}}}


def _timing(speedup, spread=0.02):
    c = 1.0
    b = speedup
    return {"speedup": speedup, "candidate": {"median_ms": c, "q20_ms": c * (1 - spread), "q80_ms": c * (1 + spread)},
            "baseline": {"median_ms": b, "q20_ms": b * (1 - spread), "q80_ms": b * (1 + spread)}}


def _store(path, version, entries):
    with Store(path) as s:
        for i, (task, arch, code, model, verdict) in enumerate(entries):
            run_id = f"run{i}"
            s.create_run(run_id, task=task, lang="triton", arch=arch, model=model, source="reference",
                         shape={"M": 64}, profiler="local",
                         config={"runtime": "local", "runtime_note": "",
                                 "toolchain": {"harness": "4", "triton": version, "torch": "2.13.0", "runtime": True}})
            s.start_sample(run_id, 0)
            s.add_turn(run_id, 0, 1, messages=[], reply="x", code=code, verdict=verdict, model=model)
            s.finish_run(run_id)


@pytest.fixture
def stores(tmp_path):
    b200 = {"tcgen05_mma": 8, "tma": 4}
    mix = {"UTCHMMA": 8, "UTMALDG": 4, "FFMA": 20}
    old = [("gemm", "b200", "expert code", "reference", _verdict("ok", "b200", b200, mix, 128, _timing(0.90))),
           ("gemm", "b200", "cand A", "m", _verdict("ok", "b200", b200, mix, 96, _timing(0.50))),
           ("gemm", "b200", "cand B", "m", _verdict("ok", "b200", b200, mix, 96, _timing(0.60))),
           ("gemm", "b200", "cand C", "m", _verdict("missing_instructions", "b200", {"tcgen05_mma": 0, "tma": 4},
                                                    {"UTMALDG": 4, "FFMA": 40}, 64, None)),
           ("gemm", "b200", "cand D", "m", _verdict("static_ok", "b200", b200, mix, 96, None))]
    new = [("gemm", "b200", "expert code", "reference", _verdict("ok", "b200", b200, mix, 120, _timing(0.99),
                                                                 version="3.9.0")),
           ("gemm", "b200", "cand A", "m", _verdict("missing_instructions", "b200", {"tcgen05_mma": 8, "tma": 0},
                                                    {"UTCHMMA": 8, "LDG": 4, "FFMA": 20}, 96, None, version="3.9.0")),
           ("gemm", "b200", "cand B", "m", _verdict("compile_error", "b200", {}, {}, 0, None, compiled=False,
                                                    version="3.9.0")),
           ("gemm", "b200", "cand C", "m", _verdict("ok", "b200", b200, mix, 64, _timing(0.40), version="3.9.0")),
           ("gemm", "b200", "cand D", "m", _verdict(
               "compile_error", "b200", {}, {}, 0, None, compiled=False, version="3.9.0",
               error="the build (import and entry point with the recording driver) exceeded 60 s (the build's time "
                     "limit)"))]
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    _store(a, "3.6.0", old)
    _store(b, "3.9.0", new)
    return a, b


def test_diff_transitions_families_speed_and_summary(stores, tmp_path):
    from xlang.diff import diff
    from xlang.diff_commands import write

    d = diff(*stores)
    A, B, C, D = "run1 s0 t1", "run2 s0 t1", "run3 s0 t1", "run4 s0 t1"
    c = d.candidates.set_index("candidate")
    assert len(c) == 5
    assert (c.loc[A, "old"], c.loc[A, "new"]) == ("ok", "missing_instructions")
    assert c.loc[A, "lost"] == "tma" and c.loc[A, "lost required"] == "tma"
    assert c.loc[C, "gained"] == "tcgen05_mma"
    assert bool(c.loc[B, "new compile error"]) and not bool(c.loc[B, "new build time-out"])
    assert bool(c.loc[D, "new build time-out"]) and not bool(c.loc[D, "new compile error"])
    assert (c.loc["expert", "registers old"], c.loc["expert", "registers new"]) == (128, 120)
    assert c.loc["expert", "speed ratio"] == pytest.approx(1.1)
    assert c.loc["expert", "speed ratio lo"] < 1.1 < c.loc["expert", "speed ratio hi"]
    assert c.loc[A, "SASS mix shift"] == pytest.approx(0.125)  # UTMALDG (4 of 32) became LDG
    assert c.loc["expert", "SASS mix shift"] == 0
    assert c.loc["expert", "old toolchain"] == "triton 3.6.0" and c.loc["expert", "new toolchain"] == "triton 3.9.0"
    (text,) = d.sentences()
    assert text.startswith("triton 3.6.0 -> triton 3.9.0, sm_100a (triton, 5/5 candidates matched)")
    assert "1 candidate gained tcgen05_mma" in text and "1 candidate lost tma" in text
    assert "1 new compile error(s)" in text and "geomean speed +10.0% over 1 timed" in text
    assert "1 build(s) stopped by the build's time limit (not a compile error)" in text
    files = write(d, tmp_path / "out")
    for f in ("html", "markdown", "candidates", "summary", "readiness"):
        assert files[f].stat().st_size > 0
    assert "1 candidate lost tma" in files["html"].read_text() and A in files["markdown"].read_text()
    rows = list(csv.DictReader(open(files["readiness"])))
    old_row = next(r for r in rows if r["store"] == "a.db")
    assert float(old_row["compiles"]) == 1.0 and float(old_row["required families in SASS"]) == 0.8
    assert float(old_row["experts' speed vs vendor"]) == pytest.approx(0.90)
    new_row = next(r for r in rows if r["store"] == "b.db")
    assert float(new_row["compiles"]) == 0.6 and new_row["toolchain"] == "triton 3.9.0"


def test_fail_on_sets_the_exit_code(stores):
    from xlang.cli import app

    a, b = map(str, stores)
    runner = CliRunner()
    assert runner.invoke(app, ["diff", a, b]).exit_code == 0
    r = runner.invoke(app, ["diff", a, b, "--fail-on", "lost-family"])
    assert r.exit_code == 1 and "lost-family: 1 candidate(s): gemm/triton/b200/run1 s0 t1" in r.output
    r = runner.invoke(app, ["diff", a, b, "--fail-on", "compile-error"])
    assert r.exit_code == 1 and "compile-error: 1 candidate(s): gemm/triton/b200/run2 s0 t1" in r.output  # not D
    assert runner.invoke(app, ["diff", a, b, "--fail-on", "slower:5%"]).exit_code == 0  # the one timed got faster
    assert runner.invoke(app, ["diff", b, a, "--fail-on", "slower:5%"]).exit_code == 1  # ... and back: slower
    assert runner.invoke(app, ["diff", a, a, "--fail-on", "lost-family,compile-error,slower:5%,unmatched"]
                         ).exit_code == 0
    r = runner.invoke(app, ["diff", a, b, "--fail-on", "faster"])
    assert r.exit_code != 0 and "unknown rule" in str(r.exception or r.output)


def test_unmatched_stores_are_refused_or_fail_unless_allowed(stores, tmp_path):
    """Issue 48: two stores of other architectures matched 0 of their candidates, printed "nvcc V13.0.88 -> ," and
    exited 0. Nothing matched: refused (XlangError, exit 2 from the command line) unless --allow-unmatched; some
    unmatched: the diff is written, a line says so, exit 1 unless --allow-unmatched."""
    from xlang.cli import app
    from xlang.diff import diff
    from xlang.errors import XlangError

    a, b = stores
    h100 = tmp_path / "h100.db"
    _store(h100, "3.9.0", [("gemm", "h100", "expert code", "reference",
                            _verdict("ok", "h100", {"wgmma": 8, "tma": 4}, {"HGMMA": 8}, 128, _timing(0.9),
                                     version="3.9.0", required=("wgmma", "tma")))])
    (text,) = diff(a, h100).sentences()
    assert "-> ," not in text and "0/5 candidates matched" in text and "(nothing matched)" in text
    runner = CliRunner()
    r = runner.invoke(app, ["diff", str(a), str(h100)])
    assert r.exit_code != 0 and isinstance(r.exception, XlangError)
    assert "0 of 5 candidates" in str(r.exception) and "--allow-unmatched" in str(r.exception)
    assert runner.invoke(app, ["diff", str(a), str(h100), "--allow-unmatched"]).exit_code == 0

    part = tmp_path / "part.db"  # the new store holds 2 of the old store's 5 candidates
    _store(part, "3.9.0", [("gemm", "b200", "expert code", "reference",
                            _verdict("ok", "b200", {"tcgen05_mma": 8, "tma": 4}, {"UTCHMMA": 8}, 120, _timing(0.99),
                                     version="3.9.0")),
                           ("gemm", "b200", "cand A", "m",
                            _verdict("ok", "b200", {"tcgen05_mma": 8, "tma": 4}, {"UTCHMMA": 8}, 96, _timing(0.5),
                                     version="3.9.0"))])
    r = runner.invoke(app, ["diff", str(a), str(part)])
    assert r.exit_code == 1 and "2 of 5 candidates" in r.output and "3 of the old store" in r.output, r.output
    assert runner.invoke(app, ["diff", str(a), str(part), "--allow-unmatched"]).exit_code == 0
    from xlang.cli import main

    with pytest.raises(SystemExit) as e:  # the command line's own exit code for the refusal
        main(["diff", str(a), str(h100)])
    assert e.value.code == 2
