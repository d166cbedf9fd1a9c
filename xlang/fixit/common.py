"""What the fixit commands share: JSONL files, ids, what counts as a fix, and near-duplicate detection."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from xlang import verdict as V
from xlang.errors import XlangError

ACCEPT = ("ok", "static_ok", "category")
# The candidate's failures (harness_error is none: the judge could not judge it, there is nothing to repair)
FAILURES = tuple(c for c in V.STAGE_ORDER if c not in (V.OK, V.STATIC_OK, V.HARNESS_ERROR))
DEFAULT_SKIP = (V.NO_CODE,)  # a failure with no code has nothing to repair from
def fence(lang: str) -> str:
    """The code-block tag of the language's candidates (its backend's first fence; '' for an unknown one)."""
    from xlang.backend import backends

    backend = backends().get(lang)
    return backend.fences[0] if backend is not None and backend.fences else ""


def fixes(failed: str, category: str | None, accept: str) -> bool:
    """Does a candidate of `category` fix a failure of `failed`?
    ok: it is ok; static_ok: ok or static_ok (no runtime: the best verdict a static-only run gives);
    category: it passed the stage that failed (a later stage in xlang.verdict.STAGE_ORDER)."""
    if category is None:
        return False
    if accept == "ok":
        return category == V.OK
    if accept == "static_ok":
        return category in (V.OK, V.STATIC_OK)
    order = V.STAGE_ORDER
    return category in order and failed in order and order.index(category) > order.index(failed)


def kernel_ok(category: str | None, accept: str) -> bool:
    """A final kernel for KernelGen: ok (also static_ok when --accept static_ok)."""
    return category == V.OK or (accept == "static_ok" and category == V.STATIC_OK)


def check_accept(accept: str) -> None:
    if accept not in ACCEPT:
        raise XlangError(f"--accept {accept}: unknown (one of: {', '.join(ACCEPT)})")


def digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p if p is not None else "").encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------ JSONL


def read_jsonl(path: Path, missing_ok: bool = False) -> list[dict]:
    if not path.is_file():
        if missing_ok:
            return []
        raise XlangError(f"{path}: not found (run `xlang fixit collect --out {path.parent}` first)")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise XlangError(f"{path}: line {n} is not JSON ({e.msg})") from None
    return out


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """Atomically (a temporary file renamed over the old one): a killed command never leaves half a file."""
    write_text(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows))


def append_jsonl(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=1, ensure_ascii=False, sort_keys=True, default=str) + "\n")


def read_json(path: Path) -> dict:
    if not path.is_file():
        raise XlangError(f"{path}: not found (run `xlang fixit collect --out {path.parent}` first)")
    return json.loads(path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------ near-duplicates

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/|#[^\n]*", re.S)
_STRING = re.compile(r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\S")
SHINGLE = 5


def tokens(code: str | None) -> list[str]:
    """Normalised tokens: comments dropped (# and // lines, /* */ blocks; #include and friends too, which is fine
    for comparing), strings kept as one token, whitespace and layout ignored."""
    text = _COMMENT.sub(" ", code or "")
    return _TOKEN.findall(text)


def shingles(code: str | None, n: int = SHINGLE) -> frozenset:
    t = tokens(code)
    if len(t) < n:
        return frozenset([" ".join(t)])
    return frozenset(" ".join(t[i:i + n]) for i in range(len(t) - n + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class Deduper:
    """Near-duplicate code by Jaccard similarity of normalised-token shingles (5 tokens), per bucket: a candidate
    whose similarity to one kept already is >= threshold is a duplicate (1.0: only identical token streams)."""

    def __init__(self, threshold: float):
        if not 0.0 < threshold <= 1.0:
            raise XlangError(f"--dedup {threshold}: a similarity in (0, 1]")
        self.threshold = threshold
        self.kept: dict[tuple, list[tuple[str, frozenset]]] = {}

    def seen(self, bucket: tuple, code: str | None) -> str | None:
        """The id of a kept near-duplicate, or None (then remember(bucket, id, code) to keep this one)."""
        sh = shingles(code)
        for kid, other in self.kept.get(bucket, []):
            if jaccard(sh, other) >= self.threshold:
                return kid
        return None

    def remember(self, bucket: tuple, ident: str, code: str | None) -> None:
        self.kept.setdefault(bucket, []).append((ident, shingles(code)))


def bucket_key(row: dict, with_category: bool = True) -> tuple:
    return ((row["category"],) if with_category else ()) + (row["task"], row["lang"], row["arch"])


def bucket_name(key: tuple) -> str:
    return "/".join(str(k) for k in key)


def rebalance(rows: list[dict], cap: int | None, seed: int, with_category: bool = True) -> tuple[list[dict], dict]:
    """At most `cap` rows per bucket ((category,) task, lang, arch), chosen by a seeded hash of their id (the same
    inputs always keep the same rows); rows keep their order. Returns (kept, {bucket: {available, kept}})."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(bucket_key(r, with_category), []).append(r)
    keep_ids, stats = set(), {}
    for key, members in sorted(groups.items()):
        chosen = members if cap is None or len(members) <= cap else \
            sorted(members, key=lambda r: digest(seed, r["id"]))[:cap]
        keep_ids.update(r["id"] for r in chosen)
        stats[bucket_name(key)] = {"available": len(members), "kept": len(chosen)}
    return [r for r in rows if r["id"] in keep_ids], stats


SCHEMAS = Path(__file__).resolve().parent / "schemas"


def schema(name: str) -> dict:
    """A published JSON Schema: fixit, kernelgen, note, pair, unfixed, datacard (xlang/fixit/schemas/NAME.schema.json)."""
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text(encoding="utf-8"))


# What export, formats and recipe share (kept here so that none of them imports another).
FORMAT_VERSION = 1


def failure_context(pair: dict) -> str:
    """The task, the failed candidate and what the judge said of it: how every teacher sees a failure."""
    f = fence(pair["lang"])
    return (f"{pair['task_prompt']}\n\n## A candidate that failed\n\n```{f}\n{(pair['failed_code'] or '').rstrip()}\n"
            f"```\n\n## What the judge said ({pair['category']})\n\n{pair['feedback'] or pair['error']}\n\n")


def fixit_user(pair: dict) -> str:
    return (failure_context(pair)
            + f"Explain what is wrong, then reply with the complete fixed source in one ```{fence(pair['lang'])} block.")


def fixit_assistant(pair: dict) -> str:
    f = fence(pair["lang"])
    head = (pair.get("explanation") or "").strip()
    code = f"```{f}\n{pair['fixed_code'].rstrip()}\n```"
    return f"{head}\n\n{code}" if head else code


PAIR_META = ("store", "run_id", "sample_idx", "failed_turn", "fixed_turn", "origin", "task", "lang", "arch", "shape",
             "model", "fix_model", "failed_model", "docs_level", "category", "fixed_category", "fixed_speedup",
             "accept", "explained_by", "harness_version", "fix_harness_version", "xlang_version")
KERNEL_META = ("store", "run_id", "sample_idx", "turn", "task", "lang", "arch", "shape", "model", "kernel_model",
               "docs_level", "category", "speedup", "harness_version", "xlang_version")
