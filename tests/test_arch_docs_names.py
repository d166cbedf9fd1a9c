"""Every Python API name the arch-docs language guides mention exists in the pinned packages.

The names are parsed out of the docs, never listed here: every code span and code block of
``arch_docs/<arch>/templates/{cutedsl,gluon,triton}.md`` and the Python spans of
``arch_docs/<arch>/contracts.md``. A new wrong name in a doc fails this test.

What is checked, per doc (its language picks the package and the short roots, e.g. ``tcgen05.``
= ``cutlass.cute.nvgpu.tcgen05`` in a CuTe DSL guide, ``gl.`` = ``triton.experimental.gluon.language``):

* a dotted name whose first part is a root (``cute.arch.elect_one``) resolves attribute by
  attribute (importing submodules as needed);
* a bare CamelCase name (``TmemAllocator``, ``Ld16x64bOp``) or a bare call (``allocate(ncols)``)
  is an attribute of one of the doc's modules or of a class the doc names;
* a span that is one bare identifier is such an attribute or a parameter of a callable the doc
  names (``tx_count``, ``warp_specialize``);
* every keyword argument written in a call (``tl.range(..., warp_specialize=True)``) is a
  parameter of that callable (unless it takes ``**kwargs``).

Slash forms are expanded (``mbarrier.init / expect / wait``, ``setmaxregister_increase/decrease``).
PTX spellings (``tcgen05.commit.cta_group::1``, the "observed" and "family" columns) are not Python
and are skipped; C++ (``xl::``) too. The packages are the ones the docs name: nvidia-cutlass-dsl
4.8.1 and Triton 3.6.0 (checked first, so a version drift fails here, not as a missing name).
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import re
import warnings
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "arch_docs"
PINNED = {"cutedsl": ("nvidia-cutlass-dsl", "4.8.1"), "gluon": ("triton", "3.6.0"), "triton": ("triton", "3.6.0")}

GLUON = "triton.experimental.gluon"
GL_ARCH = {"b200": f"{GLUON}.language.nvidia.blackwell", "h100": f"{GLUON}.language.nvidia.hopper"}


def roots(lang: str, arch: str) -> dict[str, str]:
    """Short first parts of dotted names -> the module they stand for, as the guides write them."""
    if lang == "cutedsl":
        return {"cute": "cutlass.cute", "cutlass": "cutlass", "tcgen05": "cutlass.cute.nvgpu.tcgen05",
                "cpasync": "cutlass.cute.nvgpu.cpasync", "warpgroup": "cutlass.cute.nvgpu.warpgroup",
                "warp": "cutlass.cute.nvgpu.warp", "hopper_helpers": "cutlass.utils.hopper_helpers",
                "blackwell_helpers": "cutlass.utils.blackwell_helpers", "nvvm": "cutlass._mlir.dialects.nvvm"}
    out = {"triton": "triton", "tl": "triton.language", "gl": f"{GLUON}.language", "gluon": GLUON,
           "tma": f"{GL_ARCH[arch]}.tma", "mbarrier": f"{GL_ARCH[arch]}.mbarrier"}
    if lang == "triton":  # in the Triton guide tma./mbarrier. only occur in the Gluon row
        out["TensorDescriptor"] = "triton.tools.tensor_descriptor.TensorDescriptor"
    else:
        out["TensorDescriptor"] = f"{GLUON}.nvidia.hopper.TensorDescriptor"
    return out


def namespace_modules(lang: str, arch: str) -> list[str]:
    """Modules whose attributes a bare name may be (besides the classes the doc names)."""
    if lang == "cutedsl":
        mods = ["cutlass", "cutlass.cute", "cutlass.cute.arch", "cutlass.cute.nvgpu", "cutlass.cute.nvgpu.cpasync",
                "cutlass.pipeline", "cutlass.memory", "cutlass.utils"]
        mods += (["cutlass.cute.nvgpu.tcgen05", "cutlass.utils.blackwell_helpers"] if arch == "b200" else
                 ["cutlass.cute.nvgpu.warpgroup", "cutlass.cute.nvgpu.warp", "cutlass.utils.hopper_helpers"])
        return mods
    mods = [f"{GLUON}.language", GL_ARCH[arch], f"{GL_ARCH[arch]}.tma", f"{GL_ARCH[arch]}.mbarrier",
            f"{GLUON}.nvidia.hopper"]
    if lang == "triton":
        mods += ["triton", "triton.language", "triton.tools.tensor_descriptor", "triton.backends.compiler",
                 "triton.compiler"]
    return mods


# ---- parsing the docs --------------------------------------------------------------------------------

PTX_FIRST = {"tcgen05", "wgmma", "cp", "mbarrier", "fence", "setmaxnreg", "elect", "ldmatrix", "stmatrix",
             "barrier", "cvt", "mma", "prefetch", "createpolicy", "st", "ld", "mapa", "red"}
PTX_TCGEN05_OPS = {"alloc", "dealloc", "relinquish_alloc_permit", "mma", "commit", "ld", "st", "cp", "shift",
                   "wait", "fence"}


def is_ptx_or_cpp(span: str, lang: str) -> bool:
    """A span that spells PTX, SASS or C++ rather than Python."""
    s = span.strip()
    if "::" in s or s.startswith(("#", "-")) or re.match(r"^[A-Z][A-Z0-9_.]+$", s):
        return True  # PTX qualifiers / C++ scopes, flags, SASS mnemonics (UTCHMMA, LDTM.x32)
    m = re.match(r"^([a-z0-9_]+)\.([a-z0-9_]+)", s)
    if m and m.group(1) in PTX_FIRST and "(" not in s:
        if lang in ("gluon", "triton") and m.group(1) in ("mbarrier",):
            return " " not in s and "/" not in s and m.group(2) in ("try_wait", "arrive", "expect_tx")
        if m.group(1) == "tcgen05" and lang == "cutedsl":
            return m.group(2) in PTX_TCGEN05_OPS
        return True
    return False


def code_spans(text: str) -> tuple[list[str], list[str]]:
    """(inline spans, fenced blocks) of the text. Tables: only the construct column is Python."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    spans, keep = [], []
    construct_col = None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if set("".join(cells)) <= set("-: "):
                continue
            if any("construct" in c.lower() for c in cells) and construct_col is None:
                construct_col = next(i for i, c in enumerate(cells) if "construct" in c.lower())
                continue
            if construct_col is not None and len(cells) > construct_col:
                keep.append(cells[construct_col])
            else:
                keep.append(line)
        else:
            construct_col = None
            keep.append(line)
    # an inline span may run over a line break (a wrapped call); never over a blank line
    for para in re.split(r"\n\s*\n", "\n".join(keep)):
        spans += [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", para)]
    return spans, blocks


NAME = r"[A-Za-z_]\w*"
DOTTED = re.compile(rf"(?<![\w.]){NAME}(?:\.{NAME})*")


def expand_slashes(span: str) -> list[str]:
    """`a.b / c / d` -> a.b, a.c, a.d (spaced: whole last parts); `x_load/store` -> x_load, x_store and
    `mbarrier.init/expect` -> mbarrier.init, mbarrier.expect (unspaced: the alternative replaces the
    text after the last `_` or `.`)."""
    m = re.match(rf"^\s*({NAME}(?:\.{NAME})*)\.({NAME})((?:\s+/\s+{NAME})+)\s*$", span)
    if m:
        head = m.group(1)
        return [f"{head}.{m.group(2)}"] + [f"{head}.{alt.strip()}" for alt in m.group(3).split("/")[1:]]
    out = [span]
    for m in re.finditer(rf"({NAME}(?:\.{NAME})*)((?:/{NAME})+)", span):
        stem, alts = m.group(1), m.group(2).split("/")[1:]
        cut = max(stem.rfind("_"), stem.rfind("."))
        if cut > 0:
            out += [stem[:cut + 1] + alt + span[m.end():m.end() + 1].replace(")", "") for alt in alts]
        out[0] = out[0].replace(m.group(0), stem, 1)
    return out


def is_path(span: str) -> bool:
    """A file or folder name (`04-tma.py`, `tasks/*/solutions/`, `examples/77_blackwell_fmha`)."""
    s = span.strip()
    if not re.fullmatch(r"[\w./*-]+", s):
        return False
    return bool(re.search(r"\.(py|md|cu|cuh|hpp|h|inl|toml)$", s)) or ("/" in s and (
        s.count("/") >= 2 or s.endswith("/")))


def _call_args(span: str):
    """(callee, the text between its parentheses) for every call in the span."""
    for m in re.finditer(rf"({NAME}(?:\.{NAME})*)\(", span):
        depth, i = 1, m.end()
        while i < len(span) and depth:
            depth += {"(": 1, ")": -1}.get(span[i], 0)
            i += 1
        yield m.group(1), span[m.end():i - 1]


def _calls(span: str):
    """(callee, keyword names) for every call written in the span, parentheses matched."""
    for m in re.finditer(rf"({NAME}(?:\.{NAME})*)\(", span):
        depth, i = 1, m.end()
        while i < len(span) and depth:
            depth += {"(": 1, ")": -1}.get(span[i], 0)
            i += 1
        inner = span[m.end():i - 1]
        # keywords at this call's own depth only
        flat, d = [], 0
        for ch in inner:
            d += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
            flat.append(ch if d == 0 or ch in "([{" else " ")
        kws = re.findall(rf"(?<![\w.=!<>])({NAME})\s*=(?!=)", "".join(flat))
        yield m.group(1), kws


# ---- resolving -----------------------------------------------------------------------------------------

_MISSING = object()


@cache
def _module(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def resolve(path: str):
    """Object for a full dotted path (module prefix imported, then attributes), or _MISSING."""
    parts = path.split(".")
    obj = None
    for i in range(len(parts), 0, -1):
        try:
            obj = _module(".".join(parts[:i]))
        except ImportError:
            continue
        rest = parts[i:]
        break
    else:
        return _MISSING
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j, attr in enumerate(rest):
            nxt = getattr(obj, attr, _MISSING)
            if nxt is _MISSING and inspect.ismodule(obj):
                try:
                    nxt = _module(f"{obj.__name__}.{attr}")
                except ImportError:
                    nxt = _MISSING
            if nxt is _MISSING:
                return _MISSING
            obj = nxt
    return obj


def _params(obj) -> set[str] | None:
    """Parameter names of a callable (a class: its __init__ / create); None = takes **kwargs."""
    target = obj
    if inspect.isclass(obj):
        target = obj.__init__
    fn = getattr(target, "fn", None)  # triton.jit-style wrappers
    try:
        sig = inspect.signature(fn if callable(fn) and not inspect.isclass(obj) else target)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return set(sig.parameters)


class Doc:
    def __init__(self, path: Path, lang: str, arch: str, python_only: bool = False):
        self.path, self.lang, self.arch = path, lang, arch
        spans, blocks = code_spans(path.read_text())
        if python_only:  # contracts.md: only the spans that are CuTe DSL
            spans = [s for s in spans if re.search(r"\b(cute|cutlass|nvvm|cpasync)\.|\btcgen05\.[A-Z]", s)]
        self.spans = [e for s in spans if not is_ptx_or_cpp(s, lang) and not is_path(s)
                      for e in expand_slashes(s)]
        self.blocks = [b for b in blocks if lang != "cutedsl" or "import" in b or "cute." in b]
        self.roots = roots(lang, arch)
        self.problems: list[str] = []
        self.classes: list = []

    def full(self, dotted: str) -> str | None:
        first, _, rest = dotted.partition(".")
        if first not in self.roots:
            return None
        return self.roots[first] + ("." + rest if rest else "")

    def lookup_bare(self, name: str):
        for mod in namespace_modules(self.lang, self.arch):
            obj = resolve(f"{mod}.{name}")
            if obj is not _MISSING:
                return obj
        for cls in self.classes:
            if hasattr(cls, name):
                return getattr(cls, name)
        return _MISSING

    def check(self) -> list[str]:
        texts = self.spans + self.blocks
        callables = {}
        # pass 1: dotted names with a root
        for text in texts:
            for m in DOTTED.finditer(text):
                tok = m.group(0)
                full = self.full(tok)
                if full is None:
                    continue
                if text[m.end():m.end() + 1] == "*":  # `cute.arch.mbarrier_*`: some attribute starts so
                    head, _, prefix = full.rpartition(".")
                    owner = resolve(head)
                    if owner is _MISSING or not any(a.startswith(prefix) for a in dir(owner)):
                        self.problems.append(f"`{tok}*`: nothing in {head} starts with {prefix!r}")
                    continue
                obj = resolve(full)
                if obj is _MISSING:
                    self.problems.append(f"`{tok}` ({full}) does not exist")
                    continue
                callables[tok] = obj
                parts = full.split(".")  # every class on the path (`...PipelineTmaUmma.create`)
                for i in range(2, len(parts) + 1):
                    owner = resolve(".".join(parts[:i]))
                    if inspect.isclass(owner):
                        self.classes.append(owner)
        # pass 2: bare CamelCase names and bare calls; classes first so their methods resolve
        for text in texts:
            for m in re.finditer(rf"(?<![\w.]){NAME}(?![\w.])", text):
                tok = m.group(0)
                if re.match(r"^[A-Z][a-z]\w*[a-z]\w*$", tok) or re.match(r"^[A-Z]\w*Op$", tok):
                    obj = self.lookup_bare(tok)
                    if obj is not _MISSING and inspect.isclass(obj):
                        self.classes.append(obj)
        for text in texts:
            for m in re.finditer(rf"(?<![\w.])({NAME})(?![\w.])(\s*\()?", text):
                tok, called = m.group(1), bool(m.group(2))
                camel = re.match(r"^[A-Z][a-z]\w*[a-z]\w*$", tok) or re.match(r"^[A-Z]\w*Op$", tok)
                if tok in self.roots or (not camel and not called) or hasattr(builtins, tok):
                    continue
                if tok in ("if", "for", "with", "while", "not", "and", "or", "in", "return", "assert"):
                    continue
                obj = self.lookup_bare(tok)
                if obj is _MISSING:
                    self.problems.append(f"`{tok}` is not in {namespace_modules(self.lang, self.arch)} "
                                         f"nor a member of a class the doc names")
                else:
                    callables[tok] = obj
        # pass 3: a span that is one bare identifier: an attribute, or a parameter of a named callable
        params = set()
        for obj in callables.values():
            if callable(obj):
                p = _params(obj)
                params |= p or set()
                create = getattr(obj, "create", None)
                if inspect.isclass(obj) and callable(create):
                    params |= _params(create) or set()
        # names the doc itself introduces: arguments and loop variables it writes in its calls
        local = {n for text in texts for _, inner in _call_args(text) for n in re.findall(NAME, inner)}
        local |= {mod.rsplit(".", 1)[-1] for mod in namespace_modules(self.lang, self.arch)}
        for span in self.spans:
            s = span.strip()
            if re.fullmatch(r"[a-z_][a-z0-9_]*", s) and not hasattr(builtins, s) and s not in self.roots:
                if self.lookup_bare(s) is _MISSING and s not in params and s not in local:
                    self.problems.append(f"`{s}` is neither an API name nor a parameter of one the doc names")
        # pass 4: keyword arguments of calls
        for text in texts:
            for callee, kws in _calls(text):
                obj = callables.get(callee)
                if obj is None:
                    full = self.full(callee)
                    obj = resolve(full) if full else self.lookup_bare(callee) if "." not in callee else _MISSING
                if obj is _MISSING or not callable(obj) or not kws:
                    continue
                accepted = _params(obj)
                if inspect.isclass(obj) and callee.endswith(".create") is False and accepted is not None:
                    create = getattr(obj, "create", None)
                    accepted |= (_params(create) or set()) if callable(create) else set()
                if accepted is None:
                    continue
                for kw in kws:
                    if kw not in accepted:
                        self.problems.append(f"`{callee}(... {kw}=...)`: {callee} has no parameter {kw!r} "
                                             f"(has {sorted(accepted)})")
        return self.problems


def docs() -> list[tuple[str, str, str, bool]]:
    out = []
    for arch in ("b200", "h100"):
        for lang in ("cutedsl", "gluon", "triton"):
            out.append((f"{arch}/templates/{lang}.md", lang, arch, False))
        out.append((f"{arch}/contracts.md", "cutedsl", arch, True))
    return out


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


@pytest.mark.parametrize("dist,pinned", sorted(set(PINNED.values())))
def test_pinned_package_installed(dist, pinned):
    got = _version(dist)
    assert got == pinned, (f"the arch docs name {dist} {pinned}; installed: {got}. Install it "
                           f"(pip install '{dist}=={pinned}') or re-check every name of the guides against {got}")


@pytest.mark.parametrize("rel,lang,arch,python_only", docs(), ids=[d[0] for d in docs()])
def test_every_api_name_exists(rel, lang, arch, python_only):
    dist, pinned = PINNED[lang]
    assert _version(dist) == pinned, f"{dist} {pinned} is not installed (test_pinned_package_installed)"
    doc = Doc(DOCS / rel, lang, arch, python_only)
    assert doc.spans or doc.blocks or python_only, f"{rel}: no code spans parsed"
    problems = doc.check()
    assert not problems, f"{rel}:\n  " + "\n  ".join(dict.fromkeys(problems))


def test_the_parser_sees_the_names():
    """The checks above are only as good as the parsing: a guide's known constructs must be among
    the names it checks, and a wrong name, a wrong keyword and a wrong attribute must be caught."""
    doc = Doc(DOCS / "b200/templates/cutedsl.md", "cutedsl", "b200")
    joined = " ".join(doc.spans)
    for must in ("cute.nvgpu.tcgen05.MmaF16BF16Op", "TmemAllocator", "cute.arch.setmaxregister_decrease",
                 "cutlass.pipeline.PipelineTmaUmma.create"):
        assert must in joined, f"parser lost {must}"
    for bad_span, expect in [("cute.arch.fence_tcgen05_after()", "does not exist"),
                             ("cutlass.pipeline.PipelineTmaUmma.create(num_stage=2)", "no parameter 'num_stage'"),
                             ("TmemAllocater(smem_ptr)", "is not in"),
                             ("tcgen05.CtaGroup.THREE", "does not exist")]:
        doc = Doc(DOCS / "b200/templates/cutedsl.md", "cutedsl", "b200")
        doc.spans, doc.blocks = expand_slashes(bad_span), []
        assert any(expect in p for p in doc.check()), f"{bad_span!r} was not caught"
    doc = Doc(DOCS / "b200/templates/triton.md", "triton", "b200")
    doc.spans, doc.blocks = ["tl.range(0, K, BK, warp_specialise=True)"], []
    assert any("warp_specialise" in p for p in doc.check())
    assert expand_slashes("mbarrier.init / expect / wait") == ["mbarrier.init", "mbarrier.expect", "mbarrier.wait"]
    assert "cute.arch.setmaxregister_decrease" in expand_slashes("cute.arch.setmaxregister_increase/decrease")
