"""What a task is, and the task registry (tasks/<name>/__init__.py each define TASK).

A task owns: the PyTorch reference (computed in fp32), a seeded random input generator, output dtypes,
tolerance, FLOP count, the vendor baseline, its peers (public kernels timed beside the vendor), its shapes, and
the candidate contract: the one entry point every language exposes, destination-passing (the harness allocates
the outputs).

Nothing here imports torch: a task's functions import it when called.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import inspect
import random
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from xlang import resources, suites
from xlang.errors import XlangError

ENTRY_POINT = "xlang_entry"
DTYPE_BYTES = {"bf16": 2, "fp32": 4, "int32": 4, "fp8e4m3": 1, "u8": 1}
# fp8e4m3: OCP FP8 E4M3 (torch.float8_e4m3fn; cuda_fp8.h's __nv_fp8_e4m3), the PTX ISA's .e4m3. u8: raw bytes (the MX
# formats' UE8M0 scales: a biased exponent, value 2**(byte - 127)).
C_TYPES = {"bf16": "__nv_bfloat16", "fp32": "float", "int32": "int", "fp8e4m3": "__nv_fp8_e4m3", "u8": "uint8_t"}
_SIZE_PLUS = re.compile(r"(\w+)\+(\d+)")  # a tensor dimension "B+1": size B plus a constant (CSR offsets)


@dataclass(frozen=True)
class TensorArg:
    name: str
    role: str  # "in" or "out"
    dtype: str  # "bf16" | "fp32" | "int32" (indices: page tables, sequence offsets) | "fp8e4m3" | "u8"
    shape: tuple[str, ...]  # size names, e.g. ("M", "K"); a size plus a constant ("B+1"); "K/128": that size divided
    #                         by 128, rounded up
    doc: str = ""

    def dims(self, shape: dict[str, int]) -> tuple[int, ...]:
        return tuple(size_of(s, shape) for s in self.shape)


def size_of(dim: str, shape: dict[str, int]) -> int:
    """One dimension of a tensor: a size name ("K"), a size plus a constant ("B+1") or a size divided by a block and
    rounded up ("K/128")."""
    plus = _SIZE_PLUS.fullmatch(dim)
    if plus:
        return shape[plus.group(1)] + int(plus.group(2))
    name, _, block = dim.partition("/")
    return -(-shape[name] // int(block)) if block else shape[name]


@dataclass(frozen=True)
class Contract:
    """The entry point, identical in every language: tensors in this order, then the int sizes."""

    tensors: tuple[TensorArg, ...]
    sizes: tuple[str, ...]
    rules: str  # semantics and the shapes a candidate must handle, shown to the model verbatim

    @property
    def inputs(self) -> tuple[TensorArg, ...]:
        return tuple(t for t in self.tensors if t.role == "in")

    @property
    def outputs(self) -> tuple[TensorArg, ...]:
        return tuple(t for t in self.tensors if t.role == "out")

    def python_signature(self) -> str:
        names = [t.name for t in self.tensors] + list(self.sizes)
        return f"def {ENTRY_POINT}({', '.join(names)}) -> None"

    def c_signature(self) -> str:
        args = [
            f"{'const ' if t.role == 'in' else ''}{C_TYPES[t.dtype]}* {t.name}" for t in self.tensors
        ] + [f"int {s}" for s in self.sizes] + ["cudaStream_t stream"]
        return f'extern "C" void {ENTRY_POINT}({", ".join(args)})'

    def describe_tensors(self) -> str:
        lines = []
        for t in self.tensors:
            kind = "input " if t.role == "in" else "output"
            doc = f"  {t.doc}" if t.doc else ""
            lines.append(f"  {kind} {t.name}: {t.dtype}[{', '.join(t.shape)}], contiguous row-major{doc}")
        return "\n".join(lines)


@dataclass(frozen=True)
class SolutionVariant:
    """A task whose expert solutions are another task's with named constants set (a variant by parameter,
    not by copy): `NAME = value` in Python, `#define NAME value` in CUDA, each defined once in the file."""

    base_task: str
    constants: dict[str, str]


@dataclass(frozen=True)
class Solution:
    path: Path  # the file the text comes from (the base task's, for a variant)
    text: str  # what the reference model submits


def set_constants(text: str, constants: dict[str, str], where: str) -> str:
    changed = 0
    for name, value in constants.items():
        pattern = re.compile(rf"^(\s*#\s*define\s+{name}\s+|{name}\s*=\s*)\S.*$", re.M)
        found = pattern.findall(text)
        if len(found) > 1:
            raise ValueError(f"{where}: {name} is defined {len(found)} times")
        text, n = pattern.subn(lambda m: m.group(1) + value, text)
        changed += n
    if not changed:
        raise ValueError(f"{where}: defines none of {', '.join(constants)}")
    return text


@dataclass(frozen=True)
class Peer:
    """A public kernel timed beside the vendor baseline, the same way (a second baseline): a pip package used as
    a library, never copied. `call` imports it only when called, like `baseline` imports torch."""

    name: str  # short key: the runner's hello names it, records carry it (e.g. "fa4")
    display: str  # what tables and `xlang eval` show (e.g. "FA4")
    distributions: tuple[str, ...]  # the pip distributions it needs, named in the "not installed" reason
    modules: tuple[str, ...]  # the import names it needs (e.g. "flash_attn.cute")
    call: Callable[..., Callable[[], None]]  # (inputs, shape) -> a call that runs the peer's kernel
    # A peer that tunes on its first call and keeps what it tuned in a disk cache: the environment variable that
    # names that cache's folder, and the suffixes of its files worth keeping (the first: its tuned configs, which
    # tell a verdict that tuned from one that reused; then e.g. compiled kernels).
    # The judge keeps them between verdicts (xlang/profiler/judge/peer_cache.py), so it tunes once per GPU,
    # package versions and shape. None: nothing kept (every verdict's peer starts cold).
    cache_env: str | None = None
    cache_files: tuple[str, ...] = ()

    def missing(self) -> str | None:
        """Why this peer cannot run in this Python ("flash-attn-4 (flash_attn.cute) not installed"), or None.
        Cheap: it finds the modules without importing them (no torch, no package code)."""
        if all(_module_found(m) for m in self.modules):
            return None
        return f"{', '.join(self.distributions)} ({', '.join(self.modules)}) not installed"

    def load(self) -> None:
        """Import its modules now (the runner's load step), so that a broken install fails before any call."""
        import importlib

        for m in self.modules:
            importlib.import_module(m)

    def folders(self) -> list[str]:
        """The folders of the top-level packages of its modules, found without importing them (none when absent)."""
        out = []
        for m in self.modules:
            try:
                spec = _top_spec(m.split(".")[0])
            except (ImportError, ValueError):
                continue
            out += list(getattr(spec, "submodule_search_locations", None) or []) if spec is not None else []
        return out


def peer_library_folders() -> list[Path]:
    """The folders of every task's peer libraries: a candidate's jail hides them, so the public kernels we
    compare with can never be the candidate's answer."""
    return sorted({Path(f) for task in all_tasks() for peer in task.peers for f in peer.folders()})


def _top_spec(top: str):
    """The module spec of a top-level name, found on the path without running any package's __init__."""
    return getattr(sys.modules[top], "__spec__", None) if top in sys.modules else importlib.util.find_spec(top)


def _module_found(name: str) -> bool:
    """Whether `name` (dotted) can be imported, found on the path without running any package's __init__."""
    top, *rest = name.split(".")
    spec = _top_spec(top)
    for part in rest:
        locations = getattr(spec, "submodule_search_locations", None) if spec is not None else None
        if not locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
    return spec is not None


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    contract: Contract
    default_shape: dict[str, int]
    tolerance: dict[str, float]  # atol, rtol, applied per element as in torch.allclose
    flops: Callable[[dict], float]
    make_inputs: Callable[..., dict]  # (shape, seed, device, kind="normal") -> {name: tensor}
    reference: Callable[..., dict]  # (inputs, shape) -> {output name: fp32 tensor}
    baseline: Callable[..., Callable[[], None]]  # (inputs, shape) -> a call that runs the vendor kernel
    baseline_name: str
    # (rng, shape, fixed) -> one shape from the contract's allowed space, drawn with rng, keeping shape[k] for
    # every k in fixed (and whatever variant those sizes define); see draw_shapes.
    draw_shape: Callable[[random.Random, dict, frozenset], dict]
    check_shape: Callable[[dict], None]  # raises ValueError with the rule that is broken
    # The first drawn shape of every evaluation, where a task wants one of a kind each time (attention: a long
    # sequence); same signature as draw_shape. None: every drawn shape from draw_shape.
    draw_first: Callable[[random.Random, dict, frozenset], dict] | None = None
    required: dict[str, tuple[str, ...]] = field(default_factory=dict)  # generation -> families (else arch default)
    min_bytes: Callable[[dict], float] | None = None  # fewest bytes moved, for the roofline
    # What the prompt shows as "the PyTorch reference": these functions' source (default: reference itself),
    # after a first comment line saying how the task calls them.
    shown_reference: tuple[Callable, ...] = ()
    reference_call: str = ""
    solution_variant: SolutionVariant | None = None  # experts come from another task, constants set
    # Value distributions make_inputs knows; the judge cycles through them across trials (input_kind(trial)).
    # "normal" (N(0,1)) is first; the others are adversarial for precision shortcuts (see the task's module).
    input_kinds: tuple[str, ...] = ("normal",)
    # "Instructions executed" means the work (Nsight Compute, executed SASS): the required tensor-core family's
    # share of the candidate's math, and its FLOPs against the task's (xlang.profiler.executed.work_check). Share and
    # cap together leave other math (FFMA, mma.sync) at most cap * (1 - share) / share of the task: 0.5x here.
    # The accumulator precision the contract asks for: with "fp32", MMAs that accumulate in fp16 (archs.toml
    # narrow_accumulate: in the SASS, or executed under Nsight Compute) make the candidate incorrect.
    accumulator: str = "fp32"
    min_tc_share: float = 0.8
    tc_flops_ratio: tuple[float, float] = (0.5, 2.0)
    # "Correct" means the GPU computed it: the candidate's own kernels must execute at least this multiple of the
    # task's FLOPs at the profiled shape, whatever the instructions (xlang.profiler.executed.gpu_compute_check).
    min_gpu_flops_ratio: float = 0.5
    # Public kernels timed beside the vendor baseline when their packages are installed (xlang.profiler.judge).
    peers: tuple[Peer, ...] = ()
    # An output that needs a tolerance of its own ({"LSE": {"atol": ..., "rtol": ...}}): `tolerance` is the rest's.
    output_tolerance: dict[str, dict[str, float]] = field(default_factory=dict)
    # Input kinds that are another kind with inputs scaled by powers of two (exact in floating point), so an honest
    # kernel's outputs are that kind's scaled exactly: {kind: {output: factor}} scales the output's atol with it, and
    # the kind checks range (an fp16 accumulator overflows) and nothing else.
    kind_output_scale: dict[str, dict[str, float]] = field(default_factory=dict)
    # Sizes that follow from the others (attn_decode_paged: the block table's width MAXP = ceil(S / P)): shape -> {name:
    # value}. Task.shape fills them after the overrides, except those the caller gave (check_shape then says whether
    # they agree); draw_shape sets them itself.
    derived_sizes: Callable[[dict], dict] | None = None
    # The task's shape suites (xlang.suites): a file under the tasks folder, for tasks that share one (the four
    # attention tasks have the same sizes and the same models); "" is the task's own <name>/suites.toml.
    suites_file: str = ""
    # The baseline that runs at a shape, where that depends on the shape or the GPU (attn_prefill_ragged: FA2's
    # varlen forward, or its per-sequence fallback): shape -> name, called in the judge (same torch and GPU as the
    # vendor's process), which the timing record carries. None: baseline_name always.
    baseline_label: Callable[[dict], str] | None = None
    # An error bound per element on top of atol + rtol |ref|, for outputs whose honest error scales with the
    # magnitudes summed and not with the result (block-scaled GEMMs near cancellation: the fp8 tensor core keeps
    # ~14 bits of each partial sum): (inputs, shape) -> {output: fp32 tensor of the output's shape}, computed by
    # the judge from its own copy of the inputs, on their device, never from anything the candidate wrote. The
    # check is then |got - ref| <= atol + rtol |ref| + bound. error_bound_rule says it in words (the prompt, the
    # failure text, `xlang tasks` and the verdict's fingerprint quote it).
    error_bound: Callable[[dict, dict], dict] | None = None
    # The operand type the tensor cores multiply in (the roofline's compute ceiling: archs.toml peak_dense_<type>_tflops,
    # bf16's where an architecture has none for it): "bf16", "fp8", "fp4".
    math_type: str = "bf16"
    error_bound_rule: str = ""

    def baseline_at(self, shape: dict) -> str:
        """The name of the baseline that runs at this shape (baseline_label where the task has one)."""
        return self.baseline_label(shape) if self.baseline_label is not None else self.baseline_name

    def bound_for(self, output: str, inputs: dict, shape: dict):
        """The extra per-element allowance of one output (Task.error_bound), or None where the task has none."""
        if self.error_bound is None:
            return None
        return self.error_bound(inputs, shape).get(output)

    def tolerance_for(self, output: str, kind: str = "normal") -> tuple[float, float]:
        """(atol, rtol) of one output in a trial of input kind `kind`, applied per element as torch.allclose does."""
        tol = {**self.tolerance, **self.output_tolerance.get(output, {})}
        return tol["atol"] * self.kind_output_scale.get(kind, {}).get(output, 1.0), tol["rtol"]

    def peer(self, name: str) -> Peer:
        for p in self.peers:
            if p.name == name:
                return p
        raise XlangError(f"task {self.name} has no peer '{name}' (its peers: {', '.join(p.name for p in self.peers) or 'none'})")

    def shape(self, overrides: dict[str, int] | None = None) -> dict[str, int]:
        shape = dict(self.default_shape)
        for key, value in (overrides or {}).items():
            if key not in shape:
                raise XlangError(f"task {self.name} has no size '{key}' (its sizes: {', '.join(shape)})")
            shape[key] = int(value)
        if self.derived_sizes is not None:
            shape.update({k: v for k, v in self.derived_sizes(shape).items() if k not in (overrides or {})})
        try:
            self.check_shape(shape)
        except ValueError as e:
            raise XlangError(f"shape {format_shape(shape)} is not allowed for {self.name}: {e}") from None
        return shape

    def draw_shapes(self, shape: dict[str, int], rng: random.Random, n: int,
                    fixed=()) -> list[dict[str, int]]:
        """The correctness shapes of one evaluation: `shape` (the timed one) first, then up to n shapes drawn
        with rng from the contract's whole allowed space (tails against usual tiles, every head dim and GQA
        group the contract allows; sizes bounded so the fp32 reference stays cheap).

        `fixed`: size names the caller set explicitly (e.g. parse_shape("D=96,HKV=8").keys()); every drawn
        shape keeps shape[k] for those, and the variant they define (attention: fixing H or HKV keeps the GQA
        group H // HKV). Drawn shapes are distinct from each other and from `shape`: fewer than n come back
        only when the fixed sizes leave fewer. Same rng state, same shapes; the judge seeds rng and records
        the seed and the shapes in the verdict."""
        fixed = frozenset(fixed)
        unknown = fixed - set(shape)
        if unknown:
            raise XlangError(f"task {self.name} has no size '{sorted(unknown)[0]}' (its sizes: {', '.join(shape)})")
        out = [dict(shape)]
        for _ in range(50 * max(n, 1)):
            if len(out) > n:
                break
            first = len(out) == 1 and self.draw_first is not None
            drawn = (self.draw_first if first else self.draw_shape)(rng, dict(shape), fixed)
            self.check_shape(drawn)
            if drawn not in out:
                out.append(drawn)
        return out

    def input_kind(self, trial: int) -> str:
        """The value distribution of correctness trial `trial` (0, 1, ...): input_kinds, cycled."""
        return self.input_kinds[trial % len(self.input_kinds)]

    def required_for(self, arch) -> tuple[str, ...]:
        return tuple(self.required.get(arch.generation, arch.default_required))

    def reference_source(self) -> str:
        parts = [textwrap.dedent(inspect.getsource(f)) for f in (self.shown_reference or (self.reference,))]
        head = f"# {self.reference_call}\n" if self.reference_call else ""
        return head + "\n\n".join(p.rstrip() for p in parts)

    def folder(self):
        return resources.folder("tasks") / self.name

    def suites_path(self):
        return resources.folder("tasks") / self.suites_file if self.suites_file else self.folder() / suites.SUITES_FILE

    def suites(self) -> dict:
        """The task's named shape suites (suites_path(); xlang.suites): {name: Suite}."""
        return suites.task_suites(self)

    def suite(self, name: str):
        """One suite by name; XlangError listing the task's suites when it has no such one."""
        return suites.get_suite(self, name)

    def solution_path(self, lang: str, generation: str, suffix: str):
        """This task's own expert file: solutions/<lang>_<generation><suffix>, else solutions/<lang><suffix>."""
        for name in (f"{lang}_{generation}{suffix}", f"{lang}{suffix}"):
            path = self.folder() / "solutions" / name
            if path.is_file():
                return path
        return None

    def solution(self, lang: str, generation: str, suffix: str) -> Solution | None:
        """The expert solution: this task's own file, else its base task's with the variant's constants set."""
        path = self.solution_path(lang, generation, suffix)
        if path is not None:
            return Solution(path, path.read_text())
        if self.solution_variant is None:
            return None
        base = get_task(self.solution_variant.base_task).solution(lang, generation, suffix)
        if base is None:
            return None
        return Solution(base.path, set_constants(base.text, self.solution_variant.constants, str(base.path)))


def format_shape(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


MAX_SWEEP = 256
SHAPE_SYNTAX = ("NAME=INT pairs separated by commas (M=1024,N=512); a sweep lists values (M=1024,2048,4096) or "
                "a range LO:HI:STEP, HI included, STEP a number to add or xF to multiply by (M=1024:8192:x2, "
                "S=1024:4096:1024)")


def _values(text: str, item: str, shape: str) -> list[int]:
    """'1024' -> [1024]; '1024:8192:x2' -> [1024, 2048, 4096, 8192]; '1024:4096:1024' -> [1024, 2048, 3072, 4096]."""
    m = re.fullmatch(r"(\d+)(?::(\d+):(x?)(\d+))?", text.strip())
    if not m:
        raise XlangError(f"bad shape '{shape}' at '{item}': expected {SHAPE_SYNTAX}")
    lo = int(m.group(1))
    if m.group(2) is None:
        return [lo]
    hi, times, step = int(m.group(2)), bool(m.group(3)), int(m.group(4))
    if hi < lo or (times and step < 2) or (not times and step < 1) or lo < 1:
        raise XlangError(f"bad range '{item}' in --shape: LO <= HI, LO >= 1, STEP >= 1 (xF: F >= 2)")
    out, v = [], lo
    while v <= hi and len(out) <= MAX_SWEEP:
        out.append(v)
        v = v * step if times else v + step
    return out


def parse_shapes(text: str | None) -> list[dict[str, int]]:
    """--shape as a sweep: every combination of the values given per size, first size slowest.
    'M=1024,N=512' -> [{'M': 1024, 'N': 512}]; 'M=1024,2048,N=512' -> [{'M': 1024, 'N': 512}, {'M': 2048, 'N': 512}];
    'M=1024:4096:x2' -> M 1024, 2048, 4096. [{}] when no text."""
    import itertools

    if not text or not text.strip():
        return [{}]
    sizes: dict[str, list[int]] = {}
    name = None
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if sep:
            name = key.strip()
            if not re.fullmatch(r"\w+", name):
                raise XlangError(f"bad shape '{text}' at '{item}': expected {SHAPE_SYNTAX}")
            if name in sizes:
                raise XlangError(f"--shape '{text}' gives {name} twice")
            sizes[name] = []
        elif name is None:
            raise XlangError(f"bad shape '{text}': expected {SHAPE_SYNTAX}")
        sizes[name] += _values(value if sep else item, item, text)
    count = 1
    for values in sizes.values():
        count *= len(values)
    if count > MAX_SWEEP:
        raise XlangError(f"--shape '{text}' is {count} shapes, more than {MAX_SWEEP}: sweep fewer sizes or values")
    return [dict(zip(sizes, combo)) for combo in itertools.product(*(dict.fromkeys(v) for v in sizes.values()))]


def parse_shape(text: str | None) -> dict[str, int]:
    """'M=1024,N=512' -> {'M': 1024, 'N': 512}. One shape: a sweep is for `xlang compare`."""
    shapes = parse_shapes(text)
    if len(shapes) > 1:
        raise XlangError(f"--shape '{text}' is a sweep of {len(shapes)} shapes: only `xlang compare` sweeps; "
                         "give one value per size here")
    return shapes[0]


@functools.cache
def task_names() -> tuple[str, ...]:
    folder = resources.folder("tasks")
    return tuple(sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file() and not p.name.startswith("_")))


def get_task(name: str) -> Task:
    if name not in task_names():
        raise XlangError(f"unknown task '{name}' (known: {', '.join(task_names())})")
    return resources.import_module(f"tasks.{name}").TASK


def all_tasks() -> list[Task]:
    return [get_task(n) for n in task_names()]
