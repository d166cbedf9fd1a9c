"""The GPU computed the answer (issue 40: host_compute) and padding cannot meet the work share (issue 31, item 5),
on parsed Nsight Compute fixtures (tests/fixtures/profiler, recorded on the H200) and on profiles made with the
parser's own types. CPU only."""

import gzip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from plans import plan

from xlang import verdict as V
from xlang.archs import families, get_arch
from xlang.profiler import executed, ncu
from xlang.task import all_tasks, get_task

FIX = Path(__file__).resolve().parent / "fixtures" / "profiler"
META = json.loads((FIX / "recorded.json").read_text())
H200 = get_arch("h200")
B200 = get_arch("b200")
GEMM = {"M": 4096, "N": 4096, "K": 4096}
TASK_FLOPS = 2 * 4096 ** 3
ISSUES = 4096 ** 3 // (64 * 128 * 16)  # warpgroup HGMMA.64x128x16 issues that do the task
FMAS = 4096 ** 3  # thread FFMAs that do the task


def _line(opcode: str, operands: str, warps: float, threads: float) -> ncu.SassLine:
    return ncu.SassLine(address="0x0", opcode=opcode, warp_instructions=warps, threads=threads, operands=operands)


def _hgmma(factor: float) -> ncu.SassLine:
    """HGMMA issues doing `factor` times the task's FLOPs."""
    issues = round(ISSUES * factor)
    return _line("HGMMA.64x128x16.F32.BF16", "R24, gdesc[UR4], R24, gsb0", 4 * issues, 128 * issues)


def _ffma(factor: float) -> ncu.SassLine:
    """Thread FFMAs doing `factor` times the task's FLOPs."""
    n = round(FMAS * factor)
    return _line("FFMA", "R1, R2, R3, R1", n / 32, n)


def _tma() -> ncu.SassLine:
    return _line("UTMALDG.2D", "[UR8], [UR4]", 1, 1)


def _summary(lines, task_flops=TASK_FLOPS, arch=H200, name="gemm_kernel") -> dict:
    profile = ncu.KernelProfile(name=name, lines=list(lines))
    return executed.summarize([profile], [name], arch.families, arch.default_required, families(), task_flops=task_flops)


def _judge(lines, task="gemm", shape=GEMM, name="gemm_kernel"):
    from xlang.profiler.stages.ncu import ncu_judgement

    spec = plan(mode="ncu", build_kernels=[name], trials=[[shape, "normal", 1]])  # Ncu.plan: its trials
    t = get_task(task)
    return ncu_judgement({}, [ncu.KernelProfile(name=name, lines=list(lines))], spec, H200,
                         t.required_for(H200), t)


# ---- issue 31, item 5: padding cannot meet the share rule ---------------------------------------------------

def test_padding_wgmma_beside_fma_work_passed_the_old_rule_and_fails_now():
    """The hostile case: FFMA did the GEMM, dummy wgmma on data of its own brought the share to 52% at 1.06x."""
    s = _summary([_hgmma(1.06), _tma(), _ffma(0.98)])
    assert s["tc_share"] == pytest.approx(0.52, abs=0.005) and s["tc_to_task"] == pytest.approx(1.06, abs=0.001)
    assert s["non_tc_to_task"] == pytest.approx(0.98, abs=0.001)  # FMA did the task's work
    assert executed.work_check(s, min_share=0.5, ratio=(0.5, 2.0)) is None  # the old rule: ok
    why = executed.work_check(s)
    assert why and "wgmma did 52.0% of the math" in why and "at least 80% required" in why
    assert "other math 0.98x the task's FLOPs" in why
    for task in all_tasks():
        assert executed.work_check(s, min_share=task.min_tc_share, ratio=task.tc_flops_ratio), task.name
    info, judged = _judge([_hgmma(1.06), _tma(), _ffma(0.98)])
    assert judged[0] == V.NOT_EXECUTED and info["non_tc_to_task"] == pytest.approx(0.98, abs=0.001)
    assert info["share_rule"] == {"min_share": 0.8, "ratio": [0.5, 2.0], "other_bound": pytest.approx(0.5)}


def test_every_tasks_share_and_cap_leave_fma_at_most_half_the_task():
    for task in all_tasks():
        bound = executed.other_math_bound(task.min_tc_share, task.tc_flops_ratio[1])
        assert bound <= executed.MAX_OTHER_TO_TASK + 1e-12, (task.name, bound)
    assert executed.other_math_bound(0.8, 2.0) == pytest.approx(0.5)
    assert executed.other_math_bound(0.5, 2.0) == pytest.approx(2.0)  # the old rule left FMA twice the task


@pytest.mark.parametrize("task_name", ["gemm", "attn_bwd"])
def test_no_padding_lets_fma_do_more_than_the_bound(task_name):
    """Over a grid of FMA work and padding wgmma, every candidate the rule passes has FMA math within the bound
    (share and cap together), and none whose FMA did the whole task passes, whatever the padding."""
    task = get_task(task_name)
    bound = executed.other_math_bound(task.min_tc_share, task.tc_flops_ratio[1])
    passed = []
    for fma in (0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1.0, 1.5):
        for pad in (0.5, 0.75, 1.0, 1.06, 1.5, 2.0, 2.5, 3.0, 4.0, 8.0):
            s = _summary([_hgmma(pad), _tma(), _ffma(fma)] if fma else [_hgmma(pad), _tma()])
            if executed.work_check(s, min_share=task.min_tc_share, ratio=task.tc_flops_ratio) is None:
                passed.append((fma, pad))
                assert s["non_tc_to_task"] <= bound * (1 + 1e-6), (fma, pad)
    assert all(fma < 1.0 for fma, _ in passed) and (0.0, 1.0) in passed
    assert max(fma for fma, _ in passed) <= bound + 1e-9  # 0.5 at the corner: 80% share at 2x


# What Nsight Compute measured for every expert on the H200 (reports/h200-reference: stores/*.db and
# attn_bwd_head_dims/*.db, verdict_json 'executed'): (task, lang, variant, tc_share, tc_to_task, gpu_to_task).
# Read 2026-12-01 with sqlite3 from the published stores. The forward head-dim variants (harness 2, logs only) kept
# no math accounting; their wgmma thread counts (attn_fwd_head_dims/summary.txt) equal D=128's at D=96 (padded
# to 128: 1.33x the task, causal 1.38x, under the 2x cap) and are 0.75 of them at D=64 (QK^T issues scale with D,
# P@V issues do not: 1.0x).
EXPERTS = [
    ("gemm", "triton", "", 1.0, 1.0, 1.0), ("gemm", "cuda_ptx", "", 1.0, 1.0, 1.0),
    ("gemm", "cutedsl", "", 1.0, 1.0, 1.0), ("gemm", "gluon", "", 1.0, 1.0, 1.0),
    ("attn_fwd", "triton", "", 0.9918, 1.0, 1.0083), ("attn_fwd", "cuda_ptx", "", 0.9921, 1.0, 1.0080),
    ("attn_fwd", "cutedsl", "", 0.9920, 1.0, 1.0081), ("attn_fwd", "gluon", "", 0.9918, 1.0, 1.0082),
    ("attn_fwd_causal", "triton", "", 0.9916, 1.0312, 1.0400),
    ("attn_fwd_causal", "cuda_ptx", "", 0.9921, 1.0312, 1.0395),
    ("attn_fwd_causal", "cutedsl", "", 0.9919, 1.0312, 1.0397),
    ("attn_fwd_causal", "gluon", "", 0.9917, 1.0312, 1.0398),
    ("attn_bwd", "triton", "", 0.9952, 1.4, 1.4067), ("attn_bwd", "triton", "D=64,HKV=8", 0.9905, 1.4, 1.4134),
    ("attn_bwd", "triton", "D=96", 0.9952, 1.8667, 1.8757),
    ("attn_bwd", "cuda_ptx", "", 0.9968, 1.0, 1.0032), ("attn_bwd", "cuda_ptx", "D=64,HKV=8", 0.9937, 1.0, 1.0063),
    ("attn_bwd", "cuda_ptx", "D=96", 0.9968, 1.3333, 1.3376),
    ("attn_bwd", "cutedsl", "", 0.9968, 1.0, 1.0033), ("attn_bwd", "cutedsl", "D=64,HKV=8", 0.9937, 1.0, 1.0064),
    ("attn_bwd", "cutedsl", "D=96", 0.9968, 1.3333, 1.3377),
    ("attn_bwd_causal", "triton", "", 0.9951, 1.4312, 1.4383),
    ("attn_bwd_causal", "cuda_ptx", "", 0.9967, 1.0312, 1.0347),
    ("attn_bwd_causal", "cutedsl", "", 0.9966, 1.0312, 1.0347),
]


@pytest.mark.parametrize("task_name, lang, variant, share, tc_to_task, gpu_to_task", EXPERTS)
def test_every_expert_passes_both_rules_with_margin(task_name, lang, variant, share, tc_to_task, gpu_to_task):
    task = get_task(task_name)
    other = gpu_to_task - tc_to_task
    s = _summary([_hgmma(tc_to_task), _tma(), _ffma(other)] if other > 0 else [_hgmma(tc_to_task), _tma()])
    assert s["tc_share"] == pytest.approx(share, abs=2e-4) and s["gpu_to_task"] == pytest.approx(gpu_to_task, 1e-3)
    assert executed.work_check(s, min_share=task.min_tc_share, ratio=task.tc_flops_ratio) is None
    assert executed.gpu_compute_check(s, task.min_gpu_flops_ratio)["status"] == "ok"
    # Margins: the cap 1.3x above the expert, the share's room for other math 5x the expert's, GPU FLOPs 2x the floor.
    assert tc_to_task * 1.3 <= task.tc_flops_ratio[1] and task.tc_flops_ratio[0] * 1.9 <= tc_to_task
    assert (1 - share) * 5 <= 1 - task.min_tc_share
    assert gpu_to_task >= 2 * task.min_gpu_flops_ratio


def test_tcgen05_descriptor_bound_uses_the_new_numbers():
    """tcgen05's FLOPs are not in the SASS: only the bound that holds whatever it did is checked, now 0.5x."""
    utc = _line("UTCHMMA", "gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR10]", 1, 1)
    light = _summary([utc, _tma(), _ffma(0.45)], arch=B200)
    assert light["tc_unknown"] == "descriptor" and executed.work_check(light) is None
    heavy = _summary([utc, _tma(), _ffma(0.55)], arch=B200)
    why = executed.work_check(heavy)
    assert why and "exceeds" in why and "80% share" in why
    assert executed.work_check(heavy, min_share=0.5) is None  # what the old 50% rule let through (up to 2x the task)


# ---- issue 40: the GPU computed the answer ----------------------------------------------------------------

def test_a_token_kernel_beside_host_compute_is_host_compute():
    """The GPU ran a copy kernel and a handful of FMAs; the answer came from the host."""
    token = [_line("LDG.E.128", "R4, desc[UR4][R2.64]", 1000, 32000), _line("STG.E.128", "desc[UR4][R6.64], R4", 1000,
                                                                             32000), _ffma(1e-6)]
    s = _summary(token, name="copy_kernel")
    gc = executed.gpu_compute_check(s, 0.5)
    assert gc["status"] == "off_gpu" and gc["gpu_to_task"] < 1e-5 and "at least 0.5x required" in gc["detail"]
    info, judged = _judge(token, name="copy_kernel")
    assert judged[0] == V.HOST_COMPUTE and "not computed on the GPU" in judged[1]  # before missing families
    assert info["gpu_compute"]["status"] == "off_gpu"


def test_no_math_at_all_on_the_gpu_is_host_compute():
    info, judged = _judge([_line("LDG.E", "R4, desc[UR4][R2.64]", 10, 320)], name="copy_kernel")
    assert judged[0] == V.HOST_COMPUTE and info["gpu_to_task"] == 0


@pytest.mark.parametrize("label", ["cuda_ptx-gemm_dead_wgmma", "triton-dead_branch"])
def test_an_honest_fma_gemm_computed_on_the_gpu(label, tmp_path):
    """The recorded FMA-only GEMMs (H200): their own kernels did the task's FLOPs on FFMA, so the GPU computed
    the answer; they miss the target instructions, which is a different verdict (not_executed / census)."""
    profiles = ncu.merge(ncu.parse_source_page(gzip.open(FIX / f"{label}.ncu_source.csv.gz", "rt").read()),
                         ncu.parse_details_page(gzip.open(FIX / f"{label}.ncu_details.csv.gz", "rt").read()))
    names = META[label]["build_kernels"] + META[label]["own_kernels"]
    s = executed.summarize(profiles, names, H200.families, ("wgmma", "tma"), task_flops=2 * 2048 * 2048 * 1024)
    gc = executed.gpu_compute_check(s, get_task("gemm").min_gpu_flops_ratio)
    assert gc["status"] == "ok" and gc["gpu_to_task"] == pytest.approx(1.0, rel=0.02)
    assert s["non_tc_to_task"] == pytest.approx(1.0, rel=0.02)
    if label == "cuda_ptx-gemm_dead_wgmma":
        from xlang.backend import build_candidate
        from xlang.profiler.stages.ncu import ncu_judgement

        # Provenance is by code: the profiled kernels must be this source's build, instruction for instruction.
        shape = {"M": 2048, "N": 2048, "K": 1024}
        source = Path(__file__).parent / "kernels" / "cuda_ptx" / "gemm_dead_wgmma.cu"
        build = build_candidate(source.read_text(), "cuda_ptx", get_task("gemm"), get_arch("h100"), shape,
                                cache=False, workdir=tmp_path / "build")
        assert build.ok, build.error
        spec = plan(mode="ncu", build_kernels=[k.name for k in build.kernels],
                    build_modules=sorted({k.cubin for k in build.kernels}), trials=[[shape, "normal", 1]])
        info, judged = ncu_judgement({}, profiles, spec, H200, ("wgmma", "tma"), get_task("gemm"))
        assert judged[0] == V.NOT_EXECUTED and info["gpu_compute"]["status"] == "ok"


def test_math_of_unknown_size_below_the_floor_is_unverified_not_an_accusation():
    utc = _line("UTCHMMA", "gdesc[UR4], gdesc[UR6], tmem[UR8], idesc[UR10]", 1000, 1000)
    s = _summary([utc, _tma()], arch=B200)
    gc = executed.gpu_compute_check(s, 0.5)
    assert gc["status"] == "unverified" and "lower bound" in gc["detail"]
    assert executed.gpu_compute_check(_summary([_ffma(1.0)], task_flops=None), 0.5)["status"] == "unverified"


def test_host_compute_is_never_correct_in_the_scores():
    assert V.STAGE_ORDER.index(V.INCORRECT) < V.STAGE_ORDER.index(V.HOST_COMPUTE) < V.STAGE_ORDER.index(V.MEMORY_ERROR)
    assert V.HOST_COMPUTE in V.CATEGORIES and V.HOST_COMPUTE not in V.CORRECT
    sc = V.scores({"category": V.HOST_COMPUTE, "correct": True, "compiled": True, "census_ok": False,
                   "timing": {"speedup": 0.01}})
    assert sc["correct"] is False and sc["speedup"] is None and sc["correct_with_target"] is False
    assert V.scores({"category": V.HOST_COMPUTE})["correct"] is False


def test_host_compute_feedback_tells_the_model_to_compute_on_the_gpu():
    from xlang.agent.feedback import HEADLINES, rank_key

    assert HEADLINES[V.HOST_COMPUTE] == "computed off the GPU"
    # Below every correct verdict, even a correct one without the target instructions.
    assert rank_key(V.HOST_COMPUTE, None) > rank_key(V.MISSING_INSTRUCTIONS, None,
                                                     {"category": V.MISSING_INSTRUCTIONS, "correct": True})


# ---- the evidence: copies to the host and host CPU time ---------------------------------------------------

def test_copies_are_labelled_with_direction_and_bytes():
    from xlang.profiler.observer_records import CopyRecord, activities, copied_bytes

    recs = [CopyRecord(100, 200, 0, 1, 7, 1, 4096, 2), CopyRecord(300, 350, 0, 1, 7, 2, 1024, 1),
            CopyRecord(400, 450, 0, 1, 7, 3, 512, 2)]
    assert copied_bytes(recs) == {"DtoH": 4608, "HtoD": 1024}
    assert [a[0] for a in activities(recs)] == ["memcpy DtoH 4,096 B", "memcpy HtoD 1,024 B", "memcpy DtoH 512 B"]


def test_host_evidence_flags_input_sized_copies_and_host_time_far_above_the_gpu():
    from xlang.profiler.judge.observed import call_evidence, host_evidence
    from xlang.profiler.observer_records import CopyRecord, KernelRecord

    mb = 1 << 20
    kernel = KernelRecord(start=1_000, end=21_000, device=0, ctx=1, stream=7, corr=9, grid=(1, 1, 1),
                          block=(128, 1, 1), dyn_smem=0, graph_id=0, device_launched=False, module="0" * 64,
                          name="copy_kernel")
    records = [CopyRecord(100, 900, 0, 1, 7, 1, 64 * mb, 2), kernel]
    host = call_evidence(records, 1500.0, 100.0, 64 * mb, True)
    assert host["dtoh_bytes"] == 64 * mb and host["cpu_ms"] == pytest.approx(1400.0)
    assert host["gpu_ms"] == pytest.approx(0.0208)  # busy: the copy and the kernel, not the 100 ns between
    honest = call_evidence([], 10.2, 10.0, 64 * mb, True)
    ev = host_evidence([host, honest])
    assert ev["input_sized_dtoh_calls"] == 1 and ev["dtoh_bytes"] == 64 * mb and ev["cpu_far_above_gpu_calls"] == 1
    from xlang.profiler.judge.observed import HOST_CPU_MIN_MS

    tick = call_evidence(records, 110.0, 100.0, 64 * mb, True)  # one clock tick of a 20 us call: rounding, not work
    assert HOST_CPU_MIN_MS >= 50.0 and host_evidence([tick])["cpu_far_above_gpu_calls"] == 0
    assert host_evidence([]) is None
    unobserved = call_evidence([], None, None, 10, False)
    assert unobserved["dtoh_bytes"] is None and unobserved["cpu_ms"] is None


# ---- the build record: host round trips in the source and the host binary (evidence, never a verdict) ------

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "kernels" / "hostile"


def test_the_build_records_host_round_trips_in_the_source_and_no_expert_has_one():
    from xlang.backend import BuildResult, get_backend

    empty = BuildResult(True, "triton", "gemm", "h100", {}, "")
    found = get_backend("triton").host_round_trip((HOSTILE / "gemm_numpy_host.py").read_text(), empty)
    assert any(".cpu()" in f for f in found) and any("numpy" in f for f in found)
    assert get_backend("triton").host_round_trip("# x = A.cpu().numpy()\n", empty) == []  # comments are not code
    found = get_backend("cuda_ptx").host_round_trip((HOSTILE / "gemm_host_loop.cu").read_text(), empty)
    assert any("cudaMemcpyDeviceToHost" in f for f in found)
    for path in sorted((ROOT / "tasks").glob("*/solutions/*")):
        lang = next((n for n in ("cuda_ptx", "cutedsl", "gluon", "triton") if path.name.startswith(n)), None)
        if lang:
            assert get_backend(lang).host_round_trip(path.read_text(), empty) == [], path


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("objdump")), reason="needs nvcc and objdump")
def test_host_code_calling_cudamemcpy_device_to_host_is_read_from_the_shared_object(tmp_path):
    from xlang.backends.cuda_ptx.backend import host_copy_calls

    body = "__global__ void k(float* x) { x[threadIdx.x] += 1.f; }\n"
    honest = body + 'extern "C" void xlang_entry(float* x, cudaStream_t s) { k<<<1, 32, 0, s>>>(x); }\n'
    # The kind comes from a variable, so no source pattern can see it: only the call in the binary does.
    hostile = body + ('static cudaMemcpyKind kind() { return static_cast<cudaMemcpyKind>(2); }\n'
                      'extern "C" void xlang_entry(float* x, cudaStream_t s) { float h[32];\n'
                      '  cudaMemcpy(h, x, sizeof h, kind()); k<<<1, 32, 0, s>>>(x); }\n')
    found = {}
    for name, text in (("honest", honest), ("hostile", hostile)):
        (tmp_path / f"{name}.cu").write_text("#include <cuda_runtime.h>\n" + text)
        subprocess.run(["nvcc", "-O3", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp_path / f"{name}.so"),
                        str(tmp_path / f"{name}.cu")], check=True, capture_output=True, timeout=300)
        found[name] = host_copy_calls(str(tmp_path / f"{name}.so"))
    assert found["honest"] == []
    assert found["hostile"] and "cudaMemcpyDeviceToHost" in found["hostile"][0]


@pytest.mark.slow
@pytest.mark.parametrize("name, lang", [("gemm_numpy_host.py", "triton"), ("gemm_host_loop.cu", "cuda_ptx")])
def test_the_host_compute_candidates_build_with_their_round_trip_recorded(name, lang):
    if lang == "cuda_ptx" and not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    if lang == "triton":
        pytest.importorskip("triton")
    from xlang.backend import build_candidate

    build = build_candidate((HOSTILE / name).read_text(), lang, get_task("gemm"), get_arch("h100"), cache=False)
    assert build.ok and build.census.ok, build.error  # wgmma and TMA are in the SASS: the census alone passes
    assert build.host_round_trip and "host_round_trip" in build.to_dict()
    if lang == "cuda_ptx" and shutil.which("objdump"):
        assert any("host code calls cudaMemcpy with cudaMemcpyDeviceToHost" in f for f in build.host_round_trip)


def test_eval_output_and_the_ok_detail_say_where_the_math_was_done():
    from xlang.profiler.commands import math_line
    from xlang.profiler.evaluate import gpu_compute_text

    info, judged = _judge([_hgmma(1.0), _tma(), _ffma(0.008)])
    assert judged is None
    line = math_line(info)
    assert line.startswith("math: GPU 1.008x the task's FLOPs") and "wgmma 99.2% of it, 1.000x the task" in line
    assert "other (FMA, mma.sync) 0.008x (at most 0.5x)" in line
    assert gpu_compute_text(info) == "GPU computed it (1.01x the task's FLOPs in its own kernels)"
    assert "not verified" in gpu_compute_text({"ran": False}) and math_line({"ran": False}) == ""


@pytest.mark.skipif(os.geteuid() != 0, reason="reads another uid's processes: needs root, as the judge has")
def test_host_cpu_time_of_a_jail_uid_is_read_from_proc():
    import time

    from xlang.profiler.judge.observed import process_cpu_ms
    from xlang.sandbox import CANDIDATE_UID_BASE, kill_uid

    uid = CANDIDATE_UID_BASE + 999  # a slot no stage uses (4 per GPU)
    assert process_cpu_ms(os.getuid()) is None  # not a jail uid: the judge's own time would count
    # CPU time, not a fixed amount of work (dd copying 4 GB of zeros took 40 ms of CPU on one machine here, under
    # the 100 ms asked for): a child shell spins for a second of wall time (reaped by the shell, its time moves to the
    # shell's cutime), then a sleep keeps the shell alive.
    busy = subprocess.Popen(["/bin/sh", "-c", "timeout 1 /bin/sh -c 'while :; do :; done'; sleep 30"],
                            user=uid, group=uid, cwd="/")
    try:
        deadline = time.monotonic() + 30
        while (process_cpu_ms(uid) or 0) < 100 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process_cpu_ms(uid) >= 100, process_cpu_ms(uid)
    finally:
        kill_uid(uid)  # the shell and its sleep
        busy.wait()


def test_the_fixit_schemas_know_the_new_category():
    """A host_compute failure and its fix are fixit pairs like any other: every category enum lists it."""
    from xlang.fixit import common as C

    def enums(node):
        if isinstance(node, dict):
            if "incorrect" in node.get("enum", []):
                yield node["enum"]
            for v in node.values():
                yield from enums(v)
        elif isinstance(node, list):
            for v in node:
                yield from enums(v)

    for name in ("fixit", "note", "pair", "unfixed"):
        found = list(enums(C.schema(name)))
        assert found and all(set(C.FAILURES) - {V.NO_CODE} <= set(e) for e in found), name
