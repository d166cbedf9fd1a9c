"""The instruction mix of the report: each SASS opcode a candidate's kernels executed, in a class (the tensor-core
families' opcodes, then memory, barriers, fp arithmetic, control: all from archs.toml), summed per cell."""

from __future__ import annotations
import re
import pandas as pd
from xlang.archs import mix_classes, mix_other
from xlang.report.data import Dataset
from xlang.report.tables import best_turns, sort_cells


# The classes and the opcodes in them are data (archs.toml: the tensor-core families' `mix`, then `[mix]`).
MIX_CLASSES = list(mix_classes())


MIX_OTHER = mix_other()


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
