"""The report's per-turn tables: the failure categories, the transitions between a sample's consecutive turns, the
tokens and the cost per turn."""

from __future__ import annotations
import math
import pandas as pd
from xlang.report.data import DONE, Dataset
from xlang.verdict import CATEGORIES
from xlang.report.tables import NO_REPLY, _groups, _sum, per_sample, sort_cells


def _category(c: str) -> str:
    return c or NO_REPLY


def category_order(present) -> list[str]:
    present = set(present)
    return [c for c in (*CATEGORIES, NO_REPLY) if c in present]


def _finished_turns(ds: Dataset) -> pd.DataFrame:
    done = ds.runs.loc[ds.runs["status"] == DONE, "run_id"]
    return ds.turns[ds.turns["run_id"].isin(done)].assign(category=lambda t: t["category"].map(_category))


def error_table(ds: Dataset, by=("model",)) -> pd.DataFrame:
    """The error-category distribution per turn: per group and turn index, how many candidates ended in each
    category (the first failing stage), over the finished samples that reached that turn."""
    by = list(by)
    turns = _finished_turns(ds) if not ds.empty else ds.turns
    if turns.empty:
        return pd.DataFrame(columns=[*by, "turn", "n"])
    cats = category_order(turns["category"])
    counts = turns.groupby([*by, "turn", "category"]).size().unstack("category", fill_value=0)
    counts = counts.reindex(columns=cats, fill_value=0).reset_index()
    counts.insert(len(by) + 1, "n", counts[cats].sum(axis=1))
    return sort_cells(counts, [*by, "turn"])


def transitions_table(ds: Dataset, by=("model",)) -> pd.DataFrame:
    """Turn-to-turn transitions: how often a sample's category at turn t was followed by each category at
    turn t+1 (count, and share of the transitions from that category)."""
    by = list(by)
    cols = [*by, "from", "to", "count", "share"]
    turns = _finished_turns(ds) if not ds.empty else ds.turns
    if turns.empty:
        return pd.DataFrame(columns=cols)
    t = turns.sort_values(["run_id", "turn"])
    nxt = t.groupby("run_id")["category"].shift(-1)
    pairs = t.assign(to=nxt).dropna(subset=["to"]).rename(columns={"category": "from"})
    if pairs.empty:
        return pd.DataFrame(columns=cols)
    out = pairs.groupby([*by, "from", "to"]).size().rename("count").reset_index()
    out["share"] = out["count"] / out.groupby([*by, "from"])["count"].transform("sum")
    order = {c: i for i, c in enumerate((*CATEGORIES, NO_REPLY))}
    out = out.sort_values([*by, "from", "to"], key=lambda s: s.map(order) if s.name in ("from", "to") else s,
                          kind="stable")
    return out.reset_index(drop=True)[cols]


def tokens_table(ds: Dataset, by=("model", "task", "arch", "lang")) -> pd.DataFrame:
    """Tokens (reasoning included) against best speedup, per group: completion tokens per turn and per sample
    (reasoning tokens are part of them), the reasoning tokens alone, and the group's best speedup among candidates
    correct with the target instructions."""
    by = list(by)
    cols = [*by, "samples", "turns", "completion_tokens_per_turn", "reasoning_tokens_per_turn",
            "completion_tokens_per_sample", "correct_with_arch_rate", "best_speedup"]
    if ds.empty:
        return pd.DataFrame(columns=cols)
    s = per_sample(ds)
    rows = []
    for key, g in _groups(s, by):
        turns = int(g["turns"].sum())
        ran = g[g["runtime_available"]]
        rows.append({**dict(zip(by, key)), "samples": len(g), "turns": turns,
                     "completion_tokens_per_turn": _sum(g["completion_tokens"]) / turns if turns else math.nan,
                     "reasoning_tokens_per_turn": _sum(g["reasoning_tokens"]) / turns if turns else math.nan,
                     "completion_tokens_per_sample": g["completion_tokens"].mean(),
                     "correct_with_arch_rate": ran["correct_with_arch"].mean() if len(ran) else math.nan,
                     "best_speedup": g["best_speedup"].max()})
    return sort_cells(pd.DataFrame(rows, columns=cols), by)


def cost_table(ds: Dataset, by=("model", "task", "arch", "lang")) -> pd.DataFrame:
    """Cost per group: samples, turns, tokens (prompt, completion, of which reasoning), USD in all, per sample and
    per sample correct with the target instructions (litellm's prices; 0 for models it cannot price)."""
    by = list(by)
    cols = [*by, "samples", "turns", "prompt_tokens", "completion_tokens", "reasoning_tokens", "cost_usd",
            "usd_per_sample", "usd_per_correct_with_target"]
    if ds.empty:
        return pd.DataFrame(columns=cols)
    s = per_sample(ds)
    rows = []
    for key, g in _groups(s, by):
        cost = float(g["cost_usd"].fillna(0).sum())
        k = int(g["correct_with_arch"].sum())
        rows.append({**dict(zip(by, key)), "samples": len(g), "turns": int(g["turns"].sum()),
                     "prompt_tokens": _sum(g["prompt_tokens"]), "completion_tokens": _sum(g["completion_tokens"]),
                     "reasoning_tokens": _sum(g["reasoning_tokens"]), "cost_usd": cost,
                     "usd_per_sample": cost / len(g) if len(g) else math.nan,
                     "usd_per_correct_with_target": cost / k if k else math.nan})
    return sort_cells(pd.DataFrame(rows, columns=cols), by)
