"""Gluon attention-forward expert for Hopper (sm_90a), warp-specialised, FA3-style; CAUSAL = True: attn_fwd_causal.

Pipeline, top down:
* Grid (query tiles of BM = 128 rows, B*H); causal tiles run longest first. Q, K, V are viewed as 2-D
  [rows, D] tensors (rows = batch x heads x S) read by TMA in tiles DP wide (D padded to 64 or 128; TMA
  zero-fills the columns past D, which add nothing to Q.K^T and give O columns never stored).
* gl.warp_specialize splits the CTA into three partitions (12 warps launched at 168 registers; setmaxnreg
  moves registers from the producer's warpgroup to the consumers'):
    - producer (1 warp, 24 registers): loads the two 64-row halves of the Q tile once, then streams K_j and
      V_j (BN = 128 keys) into a STAGES-deep ring. K and V of a slot have their own full/empty mbarriers, so
      a K slot is refilled as soon as both consumers' S = Q K^T have read it, before their later P V.
    - consumers (two 4-warp partitions = two warpgroups, 240 registers): warpgroup c owns query rows
      64c .. 64c+63 of the tile (wgmma m64). Per key block j >= 1 it issues, asynchronously and back to
      back, S_j = Q K_j^T (both operands in shared memory) and O += P_{j-1} V_{j-1} (P from registers as
      the wgmma A operand), waits for S_j only, releases K_j, runs the online softmax of S_j while P V is
      still on the tensor cores, then waits for P V, releases V_{j-1} and rescales O by alpha_j.
      A partition's mbarrier.arrive syncs only its own 4 warps (then one thread arrives), so the two
      warpgroups are not tied to each other.
    - PINGPONG: the consumers also take turns to issue their wgmma groups (two "turn" mbarriers, one
      arrival each): warpgroup 0 issues block j's GEMMs, then warpgroup 1 issues its own while 0 runs its
      softmax, so the tensor cores keep one warpgroup's work queued (FA3's scheduler barrier).
* Softmax in the exp2 domain: m is kept as max(s) * scale * log2(e); p = exp2(s * c - m) (one FFMA + MUFU).
  Only the first and the last key block are masked (keys >= S, which on the 2-D view belong to the next
  head, and for the causal variant keys after the query: with BM == BN the diagonal block is the last one
  a tile sees; masking the first block as well keeps every key of a fully visible block, so it only costs
  time); the blocks between skip the mask.
* mbarrier phases: ring slot s = j % STAGES is in its (j // STAGES)-th use: consumers wait the full barriers
  with parity (j // STAGES) & 1, the producer waits the empty ones (2 arrivals: one per consumer) with the
  opposite parity (a fresh barrier counts its "previous" phase as complete, so the first pass over the ring
  does not block). Turns: both consumers take n + 1 of them (k = 0 for block 0's S, k = j for step j,
  k = n for the last P V); turn k of consumer c waits turn[c] with parity (k & 1) ^ (c == 0), issues, then
  arrives on turn[1 - c]. Data waits come before a turn is taken, so a turn is never held across a wait.
* Epilogue from registers: O / l in bf16 and LSE = (m + log2 l) * ln 2 (natural log), masked stores
  (rows past S and columns past D are not ours).

On the H200 (benchmarks/expert_probe.py, 2026-11-30): correct at the default shape, S=1000 D=64 H=4 HKV=2 and
S=300 D=96 H=2 HKV=1; 596 TFLOP/s vs cuDNN 615 (do_bench) at B4 H48 S4096 D128 (PINGPONG False: 588 vs 607).
"""

import math

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

CAUSAL = False
PINGPONG = True
BLOCK_M, BLOCK_N = 128, 128  # query rows per CTA (two consumer warpgroups x 64), keys per block
CONSUMER_REGS = gl.constexpr(240)
PRODUCER_REGS = gl.constexpr(24)
MAXNREG = 168  # 12 warps x 32 threads x 168 <= 64K registers: the pool setmaxnreg redistributes


@gluon.jit
def _producer(descs, bufs, bars, geo, IS_CAUSAL: gl.constexpr, PP: gl.constexpr, WG: gl.constexpr):
    q_desc, k_desc, v_desc = descs
    q_smem, k_ring, v_ring = bufs
    q_bar, k_full, k_empty, v_full, v_empty, turn = bars
    q_row, kv_row, n_blocks, S, bh, start_m = geo
    STAGES: gl.constexpr = k_ring.shape[0]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    HM: gl.constexpr = q_desc.block_type.shape[0]
    mbarrier.expect(q_bar, 2 * q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem.index(0))
    tma.async_copy_global_to_shared(q_desc, [q_row + HM, 0], q_bar, q_smem.index(1))
    for j in range(n_blocks):
        slot = j % STAGES
        phase = (j // STAGES) & 1
        mbarrier.wait(k_empty.index(slot), phase ^ 1)
        mbarrier.expect(k_full.index(slot), k_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BN, 0], k_full.index(slot), k_ring.index(slot))
        mbarrier.wait(v_empty.index(slot), phase ^ 1)
        mbarrier.expect(v_full.index(slot), v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BN, 0], v_full.index(slot), v_ring.index(slot))


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, cols, rows, S, MASK: gl.constexpr, IS_CAUSAL: gl.constexpr):
    # s: raw Q.K^T of one block. Returns P (fp32), the new row max and sum, alpha = exp2(m_old - m_new).
    if MASK:
        if IS_CAUSAL:
            keep = gl.expand_dims(cols < S, 0) & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows, 1))
            s = gl.where(keep, s, float("-inf"))
        else:
            s = gl.where(gl.expand_dims(cols < S, 0), s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_new, 1))
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, m_new, l_i, alpha


@gluon.jit
def _take_turn(turn, k, PP: gl.constexpr, WG: gl.constexpr):
    if PP:
        mbarrier.wait(turn.index(WG), (k & 1) ^ (1 if WG == 0 else 0))


@gluon.jit
def _pass_turn(turn, PP: gl.constexpr, WG: gl.constexpr):
    if PP:
        mbarrier.arrive(turn.index(1 - WG))


@gluon.jit
def _step(j, q_smem, bufs, bars, state, qk_scale, cols0, rows, S, s_layout: gl.constexpr, o_layout: gl.constexpr,
          MASK: gl.constexpr, IS_CAUSAL: gl.constexpr, PP: gl.constexpr, WG: gl.constexpr):  # fmt: skip
    # One key block j >= 1: S_j and O += P_{j-1} V_{j-1} in flight together; softmax of S_j under the P V.
    _, k_ring, v_ring = bufs
    q_bar, k_full, k_empty, v_full, v_empty, turn = bars
    acc, p_op, m_i, l_i = state
    STAGES: gl.constexpr = k_ring.shape[0]
    BN: gl.constexpr = k_ring.shape[1]
    BM: gl.constexpr = q_smem.shape[0]
    slot = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(k_full.index(slot), (j // STAGES) & 1)
    mbarrier.wait(v_full.index(prev), ((j - 1) // STAGES) & 1)
    _take_turn(turn, j, PP, WG)
    s_zero = gl.zeros([BM, BN], gl.float32, s_layout)
    s_tok = warpgroup_mma(q_smem, k_ring.index(slot).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    o_tok = warpgroup_mma(p_op, v_ring.index(prev), acc, is_async=True)
    _pass_turn(turn, PP, WG)
    s = warpgroup_mma_wait(1, deps=[s_tok])  # the older group (S_j) is done; P V may still run
    mbarrier.arrive(k_empty.index(slot))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, j * BN + cols0, rows, S, MASK, IS_CAUSAL)
    acc, _ = warpgroup_mma_wait(0, deps=[o_tok, p_op])
    mbarrier.arrive(v_empty.index(prev))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, gl.SliceLayout(1, o_layout)), 1)
    p_op = gl.convert_layout(p.to(gl.bfloat16), gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2))
    return acc, p_op, m_i, l_i


@gluon.jit
def _consumer(descs, bufs, bars, geo, IS_CAUSAL: gl.constexpr, PP: gl.constexpr, WG: gl.constexpr):
    _, _, _, O, LSE, D, qk_scale = descs
    q_smem2, k_ring, v_ring = bufs
    q_bar, k_full, k_empty, v_full, v_empty, turn = bars
    q_row, kv_row, n_blocks, S, bh, start_m = geo
    STAGES: gl.constexpr = k_ring.shape[0]
    BM: gl.constexpr = q_smem2.shape[1]  # 64 rows: this warpgroup's half of the tile
    DP: gl.constexpr = q_smem2.shape[2]
    BN: gl.constexpr = k_ring.shape[1]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, DP, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    q_smem = q_smem2.index(WG)
    row0 = start_m + WG * BM
    rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, s_layout))
    cols0 = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))

    m_i = gl.full([BM], float("-inf"), gl.float32, gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BM], gl.float32, gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BM, DP], gl.float32, o_layout)

    # Key block 0 (turn 0): S only, masked (see the docstring).
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(k_full.index(0), 0)
    _take_turn(turn, 0, PP, WG)
    s_tok = warpgroup_mma(q_smem, k_ring.index(0).permute((1, 0)), gl.zeros([BM, BN], gl.float32, s_layout),
                          use_acc=False, is_async=True)  # fmt: skip
    _pass_turn(turn, PP, WG)
    s = warpgroup_mma_wait(0, deps=[s_tok])
    mbarrier.arrive(k_empty.index(0))
    p, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, cols0, rows, S, True, IS_CAUSAL)
    state = (acc, gl.convert_layout(p.to(gl.bfloat16), p_layout), m_i, l_i)

    # Blocks 1 .. n-2 are fully visible; block n-1 (when n > 1) is the masked one.
    for j in range(1, n_blocks - 1):
        state = _step(j, q_smem, bufs, bars, state, qk_scale, cols0, rows, S, s_layout, o_layout, False, IS_CAUSAL,
                      PP, WG)  # fmt: skip
    if n_blocks > 1:
        state = _step(n_blocks - 1, q_smem, bufs, bars, state, qk_scale, cols0, rows, S, s_layout, o_layout, True,
                      IS_CAUSAL, PP, WG)  # fmt: skip
    acc, p_op, m_i, l_i = state

    # The last P V (turn n).
    last = (n_blocks - 1) % STAGES
    mbarrier.wait(v_full.index(last), ((n_blocks - 1) // STAGES) & 1)
    _take_turn(turn, n_blocks, PP, WG)
    o_tok = warpgroup_mma(p_op, v_ring.index(last), acc, is_async=True)
    _pass_turn(turn, PP, WG)
    acc, _ = warpgroup_mma_wait(0, deps=[o_tok, p_op])
    mbarrier.arrive(v_empty.index(last))

    # LSE in natural log: m and log2(l) are in log2 units (scores were scaled by log2(e)).
    lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
    gl.store(LSE + bh.to(gl.int64) * S + rows, lse, mask=rows < S)
    out = acc / gl.expand_dims(gl.convert_layout(l_i, gl.SliceLayout(1, o_layout)), 1)
    o_rows = row0 + gl.arange(0, BM, layout=gl.SliceLayout(1, o_layout))
    o_cols = gl.arange(0, DP, layout=gl.SliceLayout(0, o_layout))
    offs = (bh.to(gl.int64) * S + gl.expand_dims(o_rows, 1)) * D + gl.expand_dims(o_cols, 0)
    mask = gl.expand_dims(o_rows < S, 1) & gl.expand_dims(o_cols < D, 0)
    gl.store(O + offs, out.to(gl.bfloat16), mask=mask)


@gluon.jit
def _attn_fwd_kernel(q_desc, k_desc, v_desc, O, LSE, H, HKV, S, D, qk_scale, IS_CAUSAL: gl.constexpr,
                     PP: gl.constexpr, STAGES: gl.constexpr):  # fmt: skip
    HM: gl.constexpr = q_desc.block_type.shape[0]  # 64: one consumer warpgroup's rows
    DP: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    BM: gl.constexpr = 2 * HM
    pid_m = gl.program_id(0)
    if IS_CAUSAL:
        pid_m = gl.num_programs(0) - 1 - pid_m  # longest tiles first
    start_m = pid_m * BM
    bh = gl.program_id(1)
    kvh = (bh // H) * HKV + (bh % H) // (H // HKV)
    end_n = S
    if IS_CAUSAL:
        end_n = gl.minimum(S, start_m + BM)
    n_blocks = gl.cdiv(end_n, BN)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, HM, DP], q_desc.layout)
    k_ring = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, DP], k_desc.layout)
    v_ring = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, DP], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    k_full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_full.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer warpgroup
        mbarrier.init(v_full.index(i), count=1)
        mbarrier.init(v_empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(turn.index(i), count=1)

    # Every partition gets the same arguments (workers take no distributed tensors); WG picks the half.
    descs = (q_desc, k_desc, v_desc, O, LSE, D, qk_scale)
    bufs = (q_smem, k_ring, v_ring)
    bars = (q_bar, k_full, k_empty, v_full, v_empty, turn)
    geo = (bh * S + start_m, kvh * S, n_blocks, S, bh, start_m)
    gl.warp_specialize(
        [
            (_consumer, (descs, bufs, bars, geo, IS_CAUSAL, PP, 0)),
            (_consumer, (descs, bufs, bars, geo, IS_CAUSAL, PP, 1)),
            (_producer, (descs, bufs, bars, geo, IS_CAUSAL, PP, 0)),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )


def _descriptor(t, rows, block):
    flat = t.view(rows, t.shape[-1])
    return TensorDescriptor.from_tensor(flat, block, gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def xlang_entry(Q, K, V, O, LSE, B, H, HKV, S, D):
    DP = 64 if D <= 64 else 128
    stages = 4 if DP == 64 else 2
    q_desc = _descriptor(Q, B * H * S, [BLOCK_M // 2, DP])
    k_desc = _descriptor(K, B * HKV * S, [BLOCK_N, DP])
    v_desc = _descriptor(V, B * HKV * S, [BLOCK_N, DP])
    qk_scale = (1.0 / math.sqrt(D)) * 1.4426950408889634
    grid = ((S + BLOCK_M - 1) // BLOCK_M, B * H)
    _attn_fwd_kernel[grid](q_desc, k_desc, v_desc, O, LSE, H, HKV, S, D, qk_scale, IS_CAUSAL=CAUSAL, PP=PINGPONG,
                           STAGES=stages, num_warps=4, maxnreg=MAXNREG)  # fmt: skip
