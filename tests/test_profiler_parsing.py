"""Pure parsing and judging functions of the profiler (no GPU): Nsight Compute pages, compute-sanitizer
memcheck output, kernel-name matching, the worker's comparison helpers. Fixtures recorded on the H200 live
in tests/fixtures/profiler/ (see test_profiler_fixtures.py); these are small hand-made cases."""

import pytest

from xlang.profiler import executed, ncu, sanitizer

SOURCE_PAGE = '''==PROF== Connected to process 1234
"Kernel Name","gemm_kernel"
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","Thread Instructions Executed","Predicated-On Thread Instructions Executed"
"0x7f0000000000","      UTMALDG.2D [UR8], [UR4] ;","3","1,280","40,960","1,280"
"0x7f0000000010","  @!P0 HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;","10","25,600","819,200","819,200"
"0x7f0000000020","      SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4+0x10], R3 ;","0","500","16,000","16,000"
"0x7f0000000030","      FFMA R1, R2, R3, R4 ;","0","0","0","0"
"Kernel Name","_Z24ampere_bf16_s16816gemm_xyzv"
"Address","Source","Instructions Executed","Thread Instructions Executed","Predicated-On Thread Instructions Executed"
"0x1","      HMMA.16816.F32.BF16 R0, R4, R8, R0 ;","100","3200","3200"
'''


def test_parse_source_page():
    kernels = ncu.parse_source_page(SOURCE_PAGE)
    assert [k.name for k in kernels] == ["gemm_kernel", "_Z24ampere_bf16_s16816gemm_xyzv"]
    hg = kernels[0].lines[1]
    assert hg.opcode == "HGMMA.64x128x16.F32.BF16" and hg.threads == 819200 and hg.warp_instructions == 25600


def test_summarize_candidate_and_forbidden():
    kernels = ncu.parse_source_page(SOURCE_PAGE)
    s = executed.summarize(kernels, ["gemm_kernel"], ["wgmma", "tma", "mbarrier", "mma_sync", "ffma"], ["wgmma", "tma"])
    assert s["families"]["wgmma"] == 819200 and s["families"]["tma"] == 1280 and s["families"]["mbarrier"] == 16000
    assert s["families"]["mma_sync"] == 0  # the vendor kernel's HMMA does not count
    assert s["missing"] == []
    assert [k["name"] for k in s["forbidden_kernels"]] == ["_Z24ampere_bf16_s16816gemm_xyzv"]
    own = s["kernels"][0]
    assert own["lines"]["ffma"] == [0, 1]  # one static FFMA line, never executed


def test_summarize_dead_family_is_missing():
    page = SOURCE_PAGE.replace('"25,600","819,200","819,200"', '"0","0","0"')
    s = executed.summarize(ncu.parse_source_page(page), ["gemm_kernel"], ["wgmma", "tma"], ["wgmma", "tma"])
    assert s["missing"] == ["wgmma"]


def test_opcode_of():
    assert ncu.opcode_of("  @!UP0 UTMALDG.2D [UR8], [UR4] ;") == "UTMALDG.2D"
    assert ncu.opcode_of("{ HGMMA.64x64x16.F32.BF16 R0, gdesc[UR4], R0 ; }") == "HGMMA.64x64x16.F32.BF16"
    assert ncu.opcode_of("") is None


def test_per_opcode_instances_and_family_of_base_opcode():
    assert ncu.parse_instances("HGMMA: 819200; SYNCS: 16000; IMAD: 1,024") == {
        "HGMMA": 819200.0, "SYNCS": 16000.0, "IMAD": 1024.0}
    from xlang.archs import families

    assert executed.classify_opcode("SYNCS", ["mbarrier"], families()) == "mbarrier"
    assert executed.classify_opcode("UTMALDG", ["wgmma", "tma"], families()) == "tma"


@pytest.mark.parametrize("profiled, candidate, same", [
    ("gemm_kernel", "gemm_kernel", True),
    ("_ZN12_GLOBAL__N_117xlang_gemm_hopperE14CUtensorMap_stS0_P13__nv_bfloat16iii",
     "_ZN12_GLOBAL__N_117xlang_gemm_hopperE14CUtensorMap_stS0_P13__nv_bfloat16iii", True),
    ("(anonymous namespace)::xlang_gemm_hopper(CUtensorMap_st, CUtensorMap_st, __nv_bfloat16 *, int, int, int)",
     "_ZN12_GLOBAL__N_117xlang_gemm_hopperE14CUtensorMap_stS0_P13__nv_bfloat16iii", True),
    ("void fma_gemm<128>(const float *)", "_Z8fma_gemmILi128EEvPKf", True),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm_kernel", False),
])
def test_kernel_name_matching(profiled, candidate, same):
    assert ncu.is_candidate_kernel(profiled, [candidate]) is same


def test_forbidden_names():
    for name in ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n",
                 "void cutlass::Kernel2<cutlass_80_wmma>", "cudnn_generated_fort_native_sdpa_sm90",
                 "void pytorch_flash::flash_fwd_kernel<...>", "ampere_bf16_s16816gemm_bf16_128x128"):
        assert ncu.forbidden_reason(name), name
    for name in ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
                 "distribution_elementwise_grid_stride_kernel"):
        assert ncu.forbidden_reason(name) is None, name


MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at tail_peek+0x1a0
=========     by thread (3,0,0) in block (0,0,0)
=========     Address 0x7f1234000fe0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f1234000000 of size 1040000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Invalid __global__ read of size 2 bytes
=========     at tail_peek+0x1a0
=========     by thread (4,0,0) in block (0,0,0)
=========     Address 0x7f1234000fe2 is out of bounds
=========
========= ERROR SUMMARY: 2 errors
"""


def test_parse_memcheck():
    p = sanitizer.parse_memcheck(MEMCHECK)
    assert p["errors"] == 2 and p["summary_found"]
    first = p["reports"][0]
    assert first["kernel"] == "tail_peek" and first["thread"] == "3,0,0" and "out of bounds" in first["address"]
    assert p["kinds"] == {"Invalid __global__ read": 2}
    assert "tail_peek" in sanitizer.describe(p)


def test_parse_memcheck_clean():
    p = sanitizer.parse_memcheck("========= COMPUTE-SANITIZER\nok\n========= ERROR SUMMARY: 0 errors\n")
    assert p["errors"] == 0 and p["summary_found"] and sanitizer.describe(p) == "memcheck clean"


def test_worker_comparisons_on_cpu():
    torch = pytest.importorskip("torch")
    from xlang.profiler.judge import verify as worker
    from xlang.profiler.judge.timing import _stats

    ref = torch.randn(4, 5)
    got = ref.clone().to(torch.bfloat16)
    assert "failure" not in worker.compare_output("C", got, ref, 1e-2, 1e-2)
    bad = got.clone()
    bad[2, 3] = ref[2, 3] + 1.0
    s = worker.compare_output("C", bad, ref, 1e-2, 1e-2)
    assert s["failure"]["kind"] == "mismatch" and s["failure"]["index"] == [2, 3] and s["mismatches"] == 1
    text = worker.describe_failure(s, {"M": 4}, 0, 7, 1e-2, 1e-2)
    assert "C[2, 3]" in text and "seed 7" in text
    nan = got.clone()
    nan[1, 0] = float("nan")
    s = worker.compare_output("C", nan, ref, 1e-2, 1e-2)
    assert s["failure"]["kind"] == "nan" and s["failure"]["index"] == [1, 0]
    inf = got.clone()
    inf[0, 4] = float("inf")
    assert worker.compare_output("C", inf, ref, 1e-2, 1e-2)["failure"]["kind"] == "inf"
    a = {"A": torch.ones(3, 3)}
    b = {"A": torch.ones(3, 3)}
    assert worker.compare_inputs(a, b) is None
    b["A"][1, 2] = 5
    ch = worker.compare_inputs(a, b)
    assert ch["input"] == "A" and ch["index"] == [1, 2] and ch["changed"] == 1
    st = _stats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert st["median_ms"] == 3.0 and st["min_ms"] == 1.0 and st["reps"] == 5


def test_nvidia_smi_parse():
    from xlang.profiler.gpu import parse_nvidia_smi

    g = parse_nvidia_smi("0, NVIDIA H200, 9.0, 580.159.04, 1980, 3201, 1980, 3201, 143771\n")
    assert g[0]["compute_capability"] == 90 and g[0]["name"] == "NVIDIA H200" and g[0]["memory_mib"] == 143771


# ---- the card's clock and power while a side is timed ---------------------------------------------------------

def test_power_summary_names_slowdowns_and_averages():
    from xlang.profiler.gpu import power_summary

    # (SM MHz, W, NVML clock-event bits): 0x4 software power cap, 0x1 idle (not a slowdown), 0x40 hardware thermal
    got = power_summary([(1980, 400.0, 0x1), (1776, 692.0, 0x4), (1650, 694.5, 0x4 | 0x40)])
    assert got == {"sm_clock_mhz": 1802, "sm_clock_min_mhz": 1650, "power_w": 595.5, "power_max_w": 694.5,
                   "throttle": ["sw_power_cap", "hw_thermal"], "samples": 3}
    assert power_summary([]) is None


def test_power_sampler_without_a_readable_gpu_records_nothing_and_does_not_fail():
    import time

    from xlang.profiler.gpu import PowerSampler, gpus

    if any(g.get("compute_capability") for g in gpus()):
        pytest.skip("a GPU answers here: the sampler would record it")
    with PowerSampler(period_s=0.001) as p:
        time.sleep(0.02)
    assert p.summary() is None


def test_eval_shows_each_sides_clock_and_power_while_timed():
    from xlang.profiler.commands import power_cell

    assert power_cell({"sm_clock_mhz": 1776, "power_w": 692.4, "throttle": ["sw_power_cap"]}) == "1776, 692 W, sw_power_cap"
    assert power_cell({"sm_clock_mhz": 1980, "power_w": 350.0, "throttle": []}) == "1980, 350 W"
    assert power_cell(None) == "-"


def _kernel(start, end, name):
    """A one-block kernel record (grid 1 x 1 x 1, as the runner's primer is)."""
    from xlang.profiler.observer_records import KernelRecord

    return KernelRecord(start, end, 0, 1, 7, 1, (1, 1, 1), (128, 1, 1), 0, 0, False, "m", name)


def test_a_calls_profile_lists_its_activities_and_the_idle_time_between_them():
    from xlang.profiler.observer_records import SetRecord, activities

    # memset 10-100, kernel a 300-1300, kernel b on another stream 1200-1500 (overlaps a), kernel c 2000-2100
    records = [_kernel(300, 1300, "a"), SetRecord(10, 100, 0, 1, 7, 2, 64), _kernel(2000, 2100, "c"),
               _kernel(1200, 1500, "b")]
    assert activities(records) == [("memset", 0, 90), ("a", 200, 1000), ("b", 0, 300), ("c", 500, 100)]


def test_call_profile_takes_medians_over_calls_with_the_last_calls_activities():
    from xlang.profiler.judge.timing import call_profile

    profiles = [[("a", 0, 1_000_000), ("b", 100_000, 3_000_000)],
                [("a", 0, 2_000_000), ("b", 300_000, 5_000_000)],
                [("x", 0, 9_000_000), ("y", 200_000, 1)],  # another sequence: its durations are not mixed in
                [("a", 0, 3_000_000), ("b", 500_000, 4_000_000)]]
    profile = call_profile(profiles)
    assert profile == {"activities": [{"name": "a", "idle_before_ms": 0.0, "median_ms": 2.0},
                                      {"name": "b", "idle_before_ms": 0.3, "median_ms": 4.0}],
                       "idle_ms": 0.25, "calls": 3}


def test_eval_prints_a_calls_profile_with_short_names():
    from xlang.profiler.commands import profile_line

    long = "_ZN5hbwd222attn_bwd_fused_kernelILi128ELb0EEEv14CUtensorMap_stS0_S0_S0_PKfS2_Pf"
    line = profile_line({"activities": [{"name": "prep(int)", "idle_before_ms": 0.0, "median_ms": 0.1914},
                                        {"name": long, "idle_before_ms": 0.65, "median_ms": 7.075}],
                         "idle_ms": 0.6512, "calls": 80})
    assert line == "prep 0.191 · (idle 0.650) _ZN5hbwd222attn_bwd_fused_kernelILi12... 7.075 ms; idle in all 0.651 ms"


FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)"


def test_the_runners_primer_is_left_out_of_a_timed_calls_span():
    from xlang.profiler.judge.timing import without_primer
    from xlang.profiler.observer_records import span

    primer, work = _kernel(1_000, 3_000, FILL), [_kernel(900_000, 2_000_000, "prep"), _kernel(2_000_100, 9_000_000, "main")]
    assert without_primer([primer, *work]) == work
    assert span(without_primer([primer, *work])) == 9_000_000 - 900_000


def test_only_a_short_one_block_utility_kernel_first_and_alone_counts_as_the_primer():
    import dataclasses

    from xlang.profiler.judge.timing import without_primer

    work = [_kernel(900_000, 2_000_000, "prep")]
    not_primers = [
        _kernel(1_000, 50_000, FILL),                  # longer than 20 us: real work
        _kernel(1_000, 3_000, "my_first_kernel"),      # not a utility kernel
        _kernel(1_000, 950_000, FILL),                 # overlaps the next activity (and too long)
        dataclasses.replace(_kernel(1_000, 3_000, FILL), grid=(4, 1, 1)),  # more than one block
    ]
    for first in not_primers:
        assert without_primer([first, *work]) == [first, *work], first
    late = _kernel(2_500_000, 2_502_000, FILL)  # a fill after the call's first activity is the call's own
    assert without_primer([*work, late]) == [*work, late]
    assert without_primer([]) == []
