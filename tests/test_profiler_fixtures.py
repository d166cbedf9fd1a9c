"""Parsing and judging of real tool output recorded on the H200 (tests/fixtures/profiler, see its README)."""

import gzip
import json
from pathlib import Path

import pytest

from xlang.archs import get_arch
from xlang.profiler import executed, ncu, sanitizer

FIX = Path(__file__).resolve().parent / "fixtures" / "profiler"
META = json.loads((FIX / "recorded.json").read_text())
H200 = get_arch("h200")


def _text(name: str) -> str:
    return gzip.open(FIX / name, "rt").read()


def _summary(label: str) -> dict:
    profiles = ncu.merge(ncu.parse_source_page(_text(f"{label}.ncu_source.csv.gz")),
                         ncu.parse_details_page(_text(f"{label}.ncu_details.csv.gz")))
    names = META[label]["build_kernels"] + META[label]["own_kernels"]
    return executed.summarize(profiles, names, H200.families, ("wgmma", "tma"))


@pytest.mark.parametrize("label", ["triton-gemm_tma", "cuda_ptx-gemm_tile_hopper"])
def test_correct_gemms_executed_wgmma_and_tma(label):
    s = _summary(label)
    assert s["missing"] == [] and s["forbidden_kernels"] == []
    assert s["families"]["wgmma"] == 293_601_280  # 8192x7168x5120 in 64x128x16 HGMMAs x 128 threads
    assert s["families"]["tma"] > 0 and s["families"]["mbarrier"] > 0
    k = s["kernels"][0]
    assert k["candidate"] and k["source"] == "sass_lines"


def test_source_page_agrees_with_per_opcode_metric():
    src = ncu.parse_source_page(_text("triton-gemm_tma.ncu_source.csv.gz"))
    det = ncu.parse_details_page(_text("triton-gemm_tma.ncu_details.csv.gz"))
    assert len(src) == len(det) == 1
    from_lines = sum(ln.threads for ln in src[0].lines if ln.opcode.startswith("HGMMA"))
    assert from_lines == det[0].per_opcode["HGMMA"] == 293_601_280
    assert sum(ln.threads for ln in src[0].lines if ln.opcode.startswith("UTMALDG")) == det[0].per_opcode["UTMALDG"]


def test_runtime_cublas_kernel_is_forbidden():
    s = _summary("triton-runtime_matmul")
    assert [k["name"] for k in s["forbidden_kernels"]] == ["nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"]
    # cuBLAS's own HGMMA does not count for the candidate; the candidate's own kernel did run wgmma.
    own = [k for k in s["kernels"] if k["candidate"]]
    assert [k["name"] for k in own] == ["gemm_kernel"] and own[0]["families"]["wgmma"] > 0


@pytest.mark.parametrize("label, dead", [("triton-dead_branch", "gemm_tc"),
                                         ("cuda_ptx-gemm_dead_wgmma", "_Z21dead_wgmma_tma_kernel14CUtensorMap_stS_Pf")])
def test_dead_code_wgmma_not_executed(label, dead):
    s = _summary(label)
    assert s["missing"] == ["wgmma", "tma"]
    assert s["not_launched"] == [dead]
    assert s["forbidden_kernels"] == []  # the live FMA kernel is the candidate's own (named *gemm*)
    assert all(k["candidate"] for k in s["kernels"])


def test_memcheck_out_of_bounds_read():
    p = sanitizer.parse_memcheck(_text("triton-oob_read.memcheck.txt.gz"))
    assert p["errors"] == 78 and p["summary_found"]
    first = p["reports"][0]
    assert first["kernel"] == "tail_peek" and first["kind"].startswith("Invalid __global__ read")
    assert "1 bytes after the nearest allocation" in first["address"]


def test_memcheck_clean():
    p = sanitizer.parse_memcheck(_text("triton-gemm_tma.memcheck.txt.gz"))
    assert p["errors"] == 0 and p["summary_found"]
