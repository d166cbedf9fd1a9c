"""What a verdict's category means to a reader, in one place for the terminal and the report: passed, finished but
failed, or no verdict at all, each with its own mark, and the legend that defines them.

The sets are derived from xlang/verdict.py: a category passes when it is `ok` or `static_ok`; any other category the
pipeline decides (verdict.CATEGORIES) is a failure the candidate earned; everything else (a run that stopped short, a
missing expert, a reply that never came, the harness's own failure, a category this code does not know yet) is no
verdict on the candidate, never a pass and never a failure."""

from __future__ import annotations

from xlang import verdict as V

PASS, FAIL, NONE = "pass", "fail", "none"
PASSING = (V.OK, V.STATIC_OK)
# The harness could not judge the candidate (another GPU tenant, the judge's own failure): no verdict on it.
# getattr: the category is being added to verdict.py; until it is there, the word it will be stored as.
HARNESS_ERROR = getattr(V, "HARNESS_ERROR", "harness_error")
NO_VERDICT = (HARNESS_ERROR,)
MARKS = {PASS: "✓", FAIL: "✗", NONE: "○"}
COLOURS = {PASS: "green", FAIL: "red", NONE: "yellow"}


def outcome(category: str | None) -> str:
    """PASS, FAIL or NONE for one candidate's (or sample's best) category; None, "" or an unknown word: NONE."""
    if category in PASSING:
        return PASS
    if category in NO_VERDICT or category not in V.CATEGORIES:
        return NONE
    return FAIL


def worst(categories) -> str:
    """The outcome of a cell of several samples: FAIL when any sample failed, else NONE when any has no verdict,
    else PASS (an empty cell has no verdict)."""
    seen = {outcome(c) for c in categories} or {NONE}
    return FAIL if FAIL in seen else NONE if NONE in seen else PASS


def mark(result: str, rich: bool = False) -> str:
    """The mark of an outcome; with rich markup in its colour (the character alone tells them apart without colour)."""
    return f"[{COLOURS[result]}]{MARKS[result]}[/{COLOURS[result]}]" if rich else MARKS[result]


def failing_categories() -> list[str]:
    """The categories that are a failure, in the order the pipeline decides them (verdict.STAGE_ORDER first)."""
    order = [*V.STAGE_ORDER, *(c for c in V.CATEGORIES if c not in V.STAGE_ORDER)]
    return [c for c in order if outcome(c) == FAIL]


def legend() -> list[tuple[str, str]]:
    """(term, definition) for every mark and word the tables use without explaining it."""
    return [
        (MARKS[PASS], f"passed: the verdict is {V.OK} or {V.STATIC_OK}"),
        (MARKS[FAIL], "finished but failed: the verdict is the first stage the candidate failed ("
         + ", ".join(failing_categories()) + ")"),
        (MARKS[NONE], f"no verdict: not run, the run stopped short, a missing expert, or {HARNESS_ERROR} (the harness "
         "could not judge it); neither a pass nor a failure"),
        (V.OK, "correct on the GPU, with the architecture's required instruction families in its SASS and executed "
         "at run time"),
        (V.STATIC_OK, "compiled for the target with every required instruction family in its SASS, but no GPU of the "
         "architecture ran it: never counted as correct"),
        ("not run", "the runtime columns of a cell whose runtime could not run (the footnote says why, e.g. no sm_100a "
         "device): compiled and target instr. in SASS still count"),
        ("missing", "no candidate to judge (e.g. no expert solution for the model reference)"),
        (HARNESS_ERROR, "the harness could not judge the candidate: counted as not run, never as its failure"),
    ]
