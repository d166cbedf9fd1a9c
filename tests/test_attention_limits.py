"""benchmarks/attention_limits.py on CPU: the parser of ncu's raw page, the "limited by" rule, and that a side that
cannot run is a "not run" row with no figures.

The CSV below is a FORMAT FIXTURE written by hand from the documented layout of `ncu -i R --page raw --csv
--print-units base` (a header row: ID, process, kernel name, launch columns, then one column per metric; a row of
units with the identity cells empty; one row per launch; ncu's own ==PROF== lines around it). Its numbers are made
up to exercise the parser: they are NOT measurements of any kernel."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from xlang.task import Peer, get_task

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("attention_limits", ROOT / "benchmarks" / "attention_limits.py")
lim = importlib.util.module_from_spec(_spec)
sys.modules["attention_limits"] = lim  # its dataclasses look their module up there
_spec.loader.exec_module(lim)

_METRICS = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "smsp__issue_active.avg.pct_of_peak_sustained_active", "launch__registers_per_thread",
            "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic",
            "sm__warps_active.avg.per_cycle_active", "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "lts__t_sector_hit_rate.pct", "launch__grid_size",
            "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
            "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
            "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",
            "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
            "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"]
_IDENT = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC"]
_UNITS = ["ns", "%", "%", "%", "%", "register/thread", "byte", "byte", "warp", "%", "%", "", "", "", "", "", ""]
# main_kernel: 2.0 ms, tensor 61.5 (gmma), stalls 3 + 1 + 1 + 4 + 1 = 10 per issue; small_kernel: 0.5 ms, "n/a"s.
_MAIN = ["2000000", "70.25", "61.5", "0", "55", "168", "0", "15,360", "12.5", "20", "55", "(1056, 1, 1)",
         "3", "1", "1", "4", "1"]
_SMALL = ["500,000", "30", "n/a", "n/a", "20", "32", "1024", "0", "40", "85", "10", "(24576, 1, 1)",
          "2", "0.5", "1", "0.5", "0"]


def _q(cells) -> str:
    return ",".join(f'"{c}"' for c in cells)


SAMPLE = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    _q(_IDENT + _METRICS),
    _q([""] * len(_IDENT) + _UNITS),
    _q(["0", "4242", "python3.12", "127.0.0.1", "main_kernel", "1", "7", "(384, 1, 1)", "(1056, 1, 1)", "0", "9.0"]
       + _MAIN),
    _q(["1", "4242", "python3.12", "127.0.0.1", "small_kernel", "1", "7", "(256, 1, 1)", "(24576, 1, 1)", "0",
        "9.0"] + _SMALL),
    "==PROF== Disconnected from process 4242",
])


def test_raw_page_is_read_per_launch_with_units_and_values():
    launches = lim.parse_raw_page(SAMPLE)
    assert [(ln.id, ln.kernel) for ln in launches] == [("0", "main_kernel"), ("1", "small_kernel")]
    main, small = launches
    assert set(main.values) == set(_METRICS)  # only metric columns: not Context, Stream, CC...
    assert main.units["gpu__time_duration.sum"] == "ns"
    assert main.number("launch__shared_mem_per_block_dynamic") == 15360  # thousands separators dropped
    assert small.number("gpu__time_duration.sum") == 500000
    assert small.number("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active") is None  # n/a
    assert main.number("launch__grid_size") is None and main.values["launch__grid_size"] == "(1056, 1, 1)"


def test_the_long_form_reads_the_same():
    header = _q(_IDENT + ["Section Name", "Metric Name", "Metric Unit", "Metric Value"])
    rows = [_q(["0", "1", "p", "h", "k", "1", "7", "(1, 1, 1)", "(1, 1, 1)", "0", "9.0", "s", m, u, v])
            for m, u, v in (("gpu__time_duration.sum", "ns", "1,500"), ("launch__registers_per_thread", "", "90"))]
    (launch,) = lim.parse_raw_page("\n".join([header, *rows]))
    assert launch.kernel == "k" and lim.figures(launch)["ms"] == pytest.approx(0.0015)
    assert launch.number("launch__registers_per_thread") == 90


def test_figures_of_a_launch():
    main = lim.figures(lim.parse_raw_page(SAMPLE)[0])
    assert main["ms"] == pytest.approx(2.0)
    assert main["tensor_pct"] == 61.5 and main["issue_pct"] == 55 and main["regs"] == 168
    assert main["smem_kib"] == pytest.approx(15.0)
    assert main["dram_pct"] == 20 and main["l2_hit_pct"] == 55 and main["warps_per_sm"] == 12.5
    # shares of all warp cycles per issue (selected included in the total), largest first
    assert list(main["stalls"]) == ["wait", "long_scoreboard", "barrier", "selected", "sleeping"]
    assert main["stalls"]["wait"] == pytest.approx(0.4) and sum(main["stalls"].values()) == pytest.approx(1.0)
    assert lim._stalls_text(main["stalls"]) == "wait 40% long_scoreboard 30% barrier 10%"


def test_a_side_lists_its_kernels_heaviest_first_with_their_share():
    res = lim.side_result("attn_bwd", "cuDNN", list(reversed(lim.parse_raw_page(SAMPLE))))
    assert [k["kernel"] for k in res["kernels"]] == ["main_kernel", "small_kernel"]
    assert [k["share"] for k in res["kernels"]] == pytest.approx([0.8, 0.2])
    assert res["total_ms"] == pytest.approx(2.5)
    assert res["limited_by"].startswith("wait stalls (40% of warp cycles)")
    text = lim.table([res])
    assert "attn_bwd cuDNN     main_kernel" in text and "+ small_kernel" in text
    assert "attn_bwd cuDNN     wait stalls (40% of warp cycles)" in text and "2 kernels, 2.500 ms in all" in text


@pytest.mark.parametrize("fig, expected", [
    ({"tensor_pct": 80.0, "dram_pct": 95.0, "issue_pct": 90.0}, "tensor pipe (80% busy)"),
    ({"tensor_pct": 79.9, "dram_pct": 85.0, "issue_pct": 90.0}, "DRAM bandwidth (85% of peak)"),
    ({"tensor_pct": 50.0, "dram_pct": 10.0, "issue_pct": 82.0}, "issue slots (82% of cycles issue)"),
    ({"tensor_pct": 50.0, "issue_pct": 40.0, "stalls": {"selected": 0.5, "barrier": 0.3, "wait": 0.2}},
     "barrier stalls (30% of warp cycles): waiting at a CTA / named barrier"),
    ({"stalls": {"some_new_reason": 0.6, "selected": 0.4}}, "some_new_reason stalls (60% of warp cycles)"),
    ({"tensor_pct": None, "stalls": {}}, "undetermined (ncu gave no tensor, DRAM, issue or stall figures)"),
])
def test_the_limited_by_rule(fig, expected):
    assert lim.limited_by(fig) == expected


def test_a_side_that_cannot_run_is_a_not_run_row():
    task = dataclasses.replace(get_task("attn_fwd"), peers=(Peer(
        name="absent", display="Absent", distributions=("no-such-dist",), modules=("xlang_no_such_module",),
        call=lambda inputs, shape: None),))
    sides = lim.plan_sides(task, ["triton", "no_such_lang"])
    assert [(s.name, s.kind) for s in sides] == [("cuDNN", "vendor"), ("Absent", "peer"), ("triton", "lang"),
                                                 ("no_such_lang", "lang")]
    assert sides[0].reason is None and sides[2].reason is None
    assert "not installed" in sides[1].reason and "unknown language 'no_such_lang'" in sides[3].reason
    row = lim.not_run("attn_fwd", "Absent", sides[1].reason)
    text = lim.table([row])
    assert f"attn_fwd Absent    not run: {sides[1].reason}" in text.splitlines()
    assert "limited by" in text and "Absent    " not in text.split("limited by")[1]  # no rule line without figures


def test_without_ncu_every_side_is_not_run_and_the_table_prints(tmp_path, capsys):
    assert lim.main(["--tasks", "attn_fwd", "--langs", "triton", "--ncu", str(tmp_path / "ncu"),
                     "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert f"attn_fwd cuDNN     not run: ncu (Nsight Compute) not found at {tmp_path / 'ncu'}" in printed
    data = json.loads((tmp_path / "out" / "attention_limits.json").read_text())
    assert [r["status"] for r in data["results"]] == ["not_run"] * 3
    assert all(r["kernels"] == [] and r["reason"] for r in data["results"])
