"""Every "required / undefined" rule of contracts.md that names an instruction has a ptxas probe.

Rules are parsed from ``arch_docs/<arch>/contracts.md`` and the language guides
``templates/*.md``: a sentence with must / required / undefined /
never / rejects / needs / "executed by" / "together" / "may not" that names a PTX instruction
(``tcgen05.*``, ``wgmma``, ``setmaxnreg``, ``cp.async.bulk*``, ``mbarrier.*``, ``.cta_group`` ...).
Each must carry a marker ``[ptxas rejects: `ROW`]`` (ptxas catches the violation) or ``[ptxas
accepts: `ROW`]`` (ptxas lets the violation through: a run-time rule). ROW is a row of the arch's
params.md table "Forms ptxas accepts or rejects", whose verdict must say the same;
tests/test_arch_docs_claims.py compiles every such row (a rejected one must fail with the named error
and has an accepted twin; an accepted run-time-rule row must really contain the violating
instructions in its SASS). So a rule and the compiler's behaviour cannot drift apart, and a new rule
without a probe fails here.

One rule is also checked for meaning, because it was wrong once (audit 2026-12-01, N1):
``setmaxnreg`` is warpgroup-collective, so a recipe that uses it with a thread count that is not a
multiple of 128 must say that this is not allowed (carry the marker of the half-warpgroup probe).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_arch_docs_claims import form_claims

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "arch_docs"

RULE = re.compile(r"\b(must|required|requires|undefined|never|rejects?|illegal|needs|executed by|together|"
                  r"may not|not allowed)\b", re.I)
INSTR = re.compile(r"\b(tcgen05\.\w+|wgmma(?:\.\w+)?|setmaxnreg(?:\.\w+)?|cp\.async\.bulk[\w.:]*|cp\.reduce[\w.:]*|"
                   r"mbarrier\.\w+|elect\.sync|ldmatrix|stmatrix|fence\.proxy[\w.:]*|fence\.mbarrier_init|"
                   r"barrier\.cluster|mapa|prefetch\.tensormap)|\.cta_group\b")
MARKER = re.compile(r"\[ptxas (accepts|rejects): ((?:[^\]`]|`[^`]*`)*)\]")


def items(text: str) -> list[str]:
    """Bullets, numbered steps and paragraphs, line breaks folded (tables and headings dropped)."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        for it in re.split(r"\n(?=\s*(?:- |\d+\. ))", para):
            flat = " ".join(it.split())
            if flat and not flat.startswith(("|", "#")):
                out.append(flat)
    return out


def sentences(item: str) -> list[str]:
    # split at '. ' / '; ' outside backticks and brackets
    out, cur, tick, depth = [], [], False, 0
    for i, ch in enumerate(item):
        cur.append(ch)
        tick ^= ch == "`"
        if not tick:
            depth += {"[": 1, "]": -1}.get(ch, 0)
        nxt = item[i + 1:i + 3]
        if not tick and depth <= 0 and ch in ".;" and re.match(r" [A-Z*(`]", nxt):
            out.append("".join(cur).strip())
            cur = []
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def rule_files(arch: str) -> list[Path]:
    return [DOCS / arch / "contracts.md", *sorted((DOCS / arch / "templates").glob("*.md"))]


def rules(arch: str) -> list[str]:
    text = "\n\n".join(f.read_text() for f in rule_files(arch))
    out = []
    for it in items(text):
        for s in sentences(it):
            bare = MARKER.sub("", s)
            if RULE.search(bare) and INSTR.search(bare):
                out.append(s)
    return out


def markers(text: str) -> list[tuple[bool, str]]:
    """(accepted?, row) for every marker in the text."""
    out = []
    for m in MARKER.finditer(text):
        for row in re.findall(r"`([^`]+)`", m.group(2)):
            out.append((m.group(1) == "accepts", " ".join(row.split())))
    return out


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_every_rule_has_a_probe(arch):
    found = rules(arch)
    assert len(found) >= 5, f"{arch}: only {len(found)} rules parsed: the parser lost them"
    bare = [s for s in found if not markers(s)]
    assert not bare, (f"{arch} contracts.md / templates: rules naming an instruction with no ptxas probe (add a row to "
                      f"params.md 'Forms ptxas accepts or rejects', a probe in test_arch_docs_claims.py and a "
                      f"[ptxas accepts|rejects: `row`] marker):\n  " + "\n  ".join(bare))


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_markers_match_the_probed_verdicts(arch):
    table = form_claims(arch)
    text = "\n\n".join(f.read_text() for f in rule_files(arch))
    wrong = []
    for accepted, row in markers(" ".join(text.split())):
        if row not in table:
            wrong.append(f"marker names `{row}`, which is not a row of {arch}/params.md's forms table")
        elif table[row][1] != accepted:
            wrong.append(f"`{row}`: contracts.md says ptxas {'accepts' if accepted else 'rejects'} it, "
                         f"params.md (and its probe) says {'accepted' if table[row][1] else 'rejected'}")
    assert markers(text.replace("\n", " ")), f"{arch}: no markers at all"
    assert not wrong, "\n".join(wrong)


WARPS = re.compile(r"(\d+) warps")
BOUNDS = re.compile(r"__launch_bounds__\((\d+)")


@pytest.mark.parametrize("arch", ["b200", "h100"])
def test_setmaxnreg_only_with_whole_warpgroups(arch):
    """A design that names setmaxnreg next to a block size that is not whole warpgroups must say it
    is not allowed there (PTX setmaxnreg: the same instruction is executed by all warps of a
    warpgroup)."""
    wrong = []
    for rel in ["contracts.md", *(f"templates/{p.name}" for p in sorted((DOCS / arch / "templates").glob("*.md")))]:
        for it in items((DOCS / arch / rel).read_text()):
            if "setmaxnreg" not in it and "setmaxregister" not in it:
                continue
            threads = [int(t) for t in BOUNDS.findall(it)] + [32 * int(w) for w in WARPS.findall(it)]
            odd = [t for t in threads if t % 128]
            if odd and not any("warp" in row and "setmaxnreg" in row for ok, row in markers(it) if ok):
                wrong.append(f"{arch}/{rel}: setmaxnreg with {odd[0]} threads ({odd[0] / 128:g} warpgroups) "
                             f"and no statement that this is undefined: ...{it[:200]}...")
    assert not wrong, "\n".join(wrong)


def test_the_rule_parser_catches():
    """A rule without a marker, a marker with the wrong verdict, and the old N1 advice all fail."""
    assert rules.__doc__ is None or True
    item = "Producer and MMA warps can give registers to the epilogue with `setmaxnreg` (needs `__launch_bounds__(threads, 1)`)."
    assert any(RULE.search(s) and INSTR.search(s) and not markers(s) for s in sentences(item))
    n1 = ("- **Roles** (e.g. 6 warps, `__launch_bounds__(192, 1)`): warp 5 = TMA producer. Producer and MMA "
          "warps can give registers to the epilogue with `setmaxnreg` (needs `__launch_bounds__(threads, 1)`).")
    threads = [int(t) for t in BOUNDS.findall(n1)] + [32 * int(w) for w in WARPS.findall(n1)]
    assert any(t % 128 for t in threads) and not markers(n1)
    assert markers("x [ptxas accepts: `a b`, `c`] y") == [(True, "a b"), (True, "c")]
    assert sentences("A `x. Y` b. C d.") == ["A `x. Y` b.", "C d."]
