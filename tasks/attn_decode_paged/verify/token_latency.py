"""Per-token cost of the CuTe DSL decode expert's split kernel, read off its SASS (no GPU): the instructions of one
token's block (the code between the per-row branches of the compute loop) and the cycles one warp alone needs for
it under in-order issue, one instruction a cycle, each instruction waiting for its source registers.

Latencies are assumptions, not measurements: SHFL 24, LDS 30, MUFU 18, any other instruction 4 cycles. The model
ignores other warps, bank conflicts and the gathers; it is for comparing two builds' dependency chains.

    python3 tasks/attn_decode_paged/verify/token_latency.py split_kernel.sass
(the split kernel's part of `cuobjdump -sass k0.cubin` from a `xlang build ... --keep` folder)
"""

import re
import sys

LATENCY = {"SHFL": 24, "LDS": 30, "MUFU": 18}
LINE = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(@!?U?P\w+\s+)?([A-Z][\w.]*)\s*([^;]*);")


def latency(op):
    return next((v for k, v in LATENCY.items() if op.startswith(k)), 4)


def token_blocks(path):
    """The compute loop's blocks from the tile's DEPBAR.LE + BAR.SYNC to the next BAR.SYNC, cut at branches; only
    blocks with shuffles (a token's work) are kept."""
    ins = [(m.group(3), m.group(4)) for m in map(LINE.search, open(path)) if m]
    i0 = next(i for i, (op, _) in enumerate(ins) if op.startswith("DEPBAR.LE"))
    i1 = next(i for i in range(i0 + 2, len(ins)) if ins[i][0].startswith("BAR.SYNC"))
    blocks, cur = [], []
    for op, args in ins[i0 + 2:i1]:
        if op == "BRA":
            blocks.append(cur)
            cur = []
        else:
            cur.append((op, args))
    blocks.append(cur)
    return [b for b in blocks if any(op.startswith("SHFL") for op, _ in b)]


def cycles(block):
    ready, t = {}, 0
    for op, args in block:
        regs = [int(r) for r in re.findall(r"\bR(\d+)\b", args)]
        if not regs or op.startswith(("ISETP", "STS", "BSSY", "BSYNC")):
            t += 1
            continue
        t = max([t + 1] + [ready.get(r, 0) for r in regs[1:]])
        for k in range(2 if op.endswith(".64") else 1):
            ready[regs[0] + k] = t + latency(op)
    return max([t, *ready.values()])


def main(path):
    blocks = token_blocks(path)
    n = sum(map(len, blocks)) / len(blocks)
    c = sum(map(cycles, blocks)) / len(blocks)
    print(f"{path}: {len(blocks)} token blocks; per token {n:.0f} instructions, {c:.0f} cycles (one warp alone)")


if __name__ == "__main__":
    main(sys.argv[1])
