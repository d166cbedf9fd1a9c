"""The instruction mix of the report: each SASS opcode a candidate's kernels executed, in a class (the tensor-core
families' opcodes from archs.toml, then CUDA-core math, memory, ...), summed per cell."""

from __future__ import annotations
import re
import pandas as pd
from xlang.archs import tensor_core_opcodes
from xlang.report.data import Dataset
from xlang.report.tables import best_turns, sort_cells


def _tensor_core_classes() -> list[tuple[str, str]]:
    """The tensor-core classes of the mix, from archs.toml's tensor-core opcodes (`mix`), in file order."""
    patterns: dict[str, list[str]] = {}
    for op in tensor_core_opcodes():
        patterns.setdefault(op.mix, []).append(op.pattern)
    return [(name, rf"^({'|'.join(ps)})$") for name, ps in patterns.items()]


MIX_CLASSES = _tensor_core_classes() + [
    ("TMA and bulk copies", r"^(UTMA[A-Z]*|UBLKCP|UBLKRED|UBLKPF)$"),
    ("tensor memory", r"^(LDTM|STTM|UTCATOMSWS|UTCCP|UTCBAR|UTCSHIFT)$"),
    ("shared memory", r"^(LDS|STS|LDSM|STSM|LDGSTS|ATOMS)$"),
    ("global memory", r"^(LDG|STG|LD|ST|ATOMG|ATOM|RED|REDG|LDGDEPBAR)$"),
    ("barriers and sync", r"^(SYNCS|BAR|MEMBAR|WARPGROUP|DEPBAR|FENCE|ARRIVES|ERRBAR|CCTL|CCTLL|WARPSYNC|ELECT|"
                          r"VOTE|VOTEU|REDUX|USETMAXREG|ACQBULK|UCGABAR_ARV|UCGABAR_WAIT|CGAERRBAR)$"),
    ("fp arithmetic", r"^(FFMA|FADD|FMUL|FMNMX|MUFU|HFMA2|HADD2|HMUL2|HMNMX2|F2F|F2FP|FSEL|FSETP|FCHK|F2I|I2F|"
                      r"FRND|FSWZADD|DADD|DFMA|DMUL)$"),
    ("control", r"^(BRA|BRX|EXIT|BSSY|BSYNC|CALL|RET|NOP|YIELD|JMP|JMX|BPT|BREAK|KILL|NANOSLEEP|WARPSYNC|"
                r"ENDCOLLECTIVE|PMTRIG)$"),
]


MIX_OTHER = "integer, address and other"


MIX_ORDER = [name for name, _ in MIX_CLASSES] + [MIX_OTHER]


_MIX_RE = [(name, re.compile(p)) for name, p in MIX_CLASSES]


def mix_class(opcode: str) -> str:
    for name, rx in _MIX_RE:
        if rx.match(opcode):
            return name
    return MIX_OTHER


def instruction_mix(ds: Dataset) -> pd.DataFrame:
    """SASS instruction mix (static census of each run's best compiled candidate), per arch × lang:
    the share of instructions in each class, with the number of candidates and instructions behind it."""
    best = best_turns(ds)
    rows = []
    if best.empty:
        return pd.DataFrame(columns=["arch", "lang", "candidates", "instructions", *MIX_ORDER])
    best = best[best["compiled"]]
    for (arch, lang), g in best.groupby(["arch", "lang"], sort=False):
        counts = {name: 0 for name in MIX_ORDER}
        candidates = 0
        for r in g.itertuples(index=False):
            ops = ds.opcodes.get((r.run_id, r.turn))
            if not ops:
                continue
            candidates += 1
            for op, n in ops.items():
                counts[mix_class(op)] += n
        total = sum(counts.values())
        if not total:
            continue
        rows.append({"arch": arch, "lang": lang, "candidates": candidates, "instructions": total,
                     **{k: v / total for k, v in counts.items()}})
    df = pd.DataFrame(rows, columns=["arch", "lang", "candidates", "instructions", *MIX_ORDER])
    return sort_cells(df, ("arch", "lang"))
