"""Hand-made report records (what xlang.report.source reads out of a store) for tests/test_report*.py and
tests/test_browser*.py: Hopper cells that ran on a GPU, Blackwell cells that could only be compiled, a missing
expert solution and an unfinished run."""

from __future__ import annotations

NOT_RUN = "not run (no sm_100a device)"
HOPPER_OPS = {"HGMMA": 48, "UTMALDG": 8, "SYNCS": 20, "LDS": 6, "FFMA": 12, "IMAD": 90, "BRA": 10, "STG": 16}
BLACKWELL_OPS = {"UTCHMMA": 24, "LDTM": 12, "UTCBAR": 4, "UTMALDG": 8, "SYNCS": 24, "IMAD": 70, "EXIT": 2}


def verdict(category, arch, lang, task, speedup=None, ran=True, ops=None, missing=()):
    compiled = category not in ("no_code", "compile_error")
    return {
        "category": category, "lang": lang, "task": task, "arch": arch, "detail": f"{category} detail",
        "runtime_ran": ran, "runtime_note": "" if ran else NOT_RUN,
        "timing": {"speedup": speedup, "tflops": 600.0} if speedup else None,
        "build": {"ok": compiled, "census": {"missing": list(missing), "kernels": [
            {"name": "k", "families": {}, "opcodes": dict(ops or HOPPER_OPS), "instructions": 1}]}} if compiled
        else {"ok": False, "census": None},
        "fingerprint": {"gpu": "NVIDIA H200", "driver": "580.159.04", "seeds": [1, 2, 3]} if ran else {},
    }


def run(run_id, task, lang, arch, sample, turns, status="done", limit=8):
    return {"run_id": run_id, "task": task, "lang": lang, "arch": arch, "model": "reference", "sample": sample,
            "turns_limit": limit, "docs": "contracts", "status": status, "note": "",
            "turns": [{"turn": i, "verdict": v} for i, v in enumerate(turns, 1)]}


def records() -> list[dict]:
    h, b = "h100", "b200"
    return [
        # gemm · triton · h100: sample 0 correct at turn 3 (1.1x, with arch), sample 1 correct without
        # executing the required families at turn 1 (not_executed), then ok at turn 5 (0.8x).
        run("g-t-h-0", "gemm", "triton", h, 0, [
            verdict("compile_error", h, "triton", "gemm"), verdict("incorrect", h, "triton", "gemm"),
            verdict("ok", h, "triton", "gemm", 1.1)]),
        run("g-t-h-1", "gemm", "triton", h, 1, [
            verdict("not_executed", h, "triton", "gemm", 0.5), verdict("incorrect", h, "triton", "gemm"),
            verdict("incorrect", h, "triton", "gemm"), verdict("incorrect", h, "triton", "gemm"),
            verdict("ok", h, "triton", "gemm", 0.8)]),
        # gemm · cuda_ptx · h100: one sample, never correct.
        run("g-c-h-0", "gemm", "cuda_ptx", h, 0, [verdict("compile_error", h, "cuda_ptx", "gemm"),
                                                   verdict("runtime_error", h, "cuda_ptx", "gemm")]),
        # gemm on b200: static only.
        run("g-t-b-0", "gemm", "triton", b, 0, [verdict("static_ok", b, "triton", "gemm", ran=False,
                                                        ops=BLACKWELL_OPS)], limit=1),
        run("g-c-b-0", "gemm", "cuda_ptx", b, 0, [verdict("missing_instructions", b, "cuda_ptx", "gemm", ran=False,
                                                          ops=BLACKWELL_OPS, missing=["tcgen05_mma"])], limit=1),
        # attn_fwd · cuda_ptx: no expert solution; attn_fwd · triton · h100: interrupted.
        run("a-c-h-0", "attn_fwd", "cuda_ptx", h, 0, [], status="missing"),
        run("a-t-h-0", "attn_fwd", "triton", h, 0, [verdict("incorrect", h, "triton", "attn_fwd")],
            status="running"),
    ]
