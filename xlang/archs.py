"""The architecture registry, read from archs.toml (figures with sources, instruction families)."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from xlang.errors import XlangError


@dataclass(frozen=True)
class Family:
    name: str
    doc: str
    ptx: re.Pattern
    sass: re.Pattern
    narrow_accumulate: re.Pattern | None = None  # its MMAs that accumulate in fp16 (full SASS opcode), if visible
    math: str = ""  # "tensor_core", "cuda_core" or "" (not math): what its instructions compute
    opcodes: tuple["TensorCoreOpcode", ...] = ()  # a tensor-core family's opcodes (archs.toml `opcodes`)
    # archs.toml `sass_operands`: a rule on the instruction's operand text too, for forms the opcode does not tell
    # apart (a block-scaled tcgen05.mma has its kind's opcode and one more operand).
    operands: re.Pattern | None = None

    def matches(self, opcode: str, operands: str | None = None) -> bool:
        """Whether one SASS instruction belongs to this family. A family with an operand rule never takes an
        instruction whose operands are unknown (None): it can neither be told in nor out."""
        if not self.sass.search(opcode):
            return False
        return self.operands is None or (operands is not None and bool(self.operands.search(operands)))


@dataclass(frozen=True)
class TensorCoreOpcode:
    """One tensor-core SASS opcode (or a set spelled alike) of a family: priced by the Nsight Compute stage,
    grouped by the report's instruction mix."""

    name: str  # the base opcode it is reported under, e.g. "HGMMA"; "UTCMMA" stands for every UTC*MMA
    pattern: str  # regular expression of the base opcode (no anchors): the name, or archs.toml `opcode_patterns`
    family: str
    shape: str  # "gmma" | "mma" | "descriptor": how the full opcode spells the MMA shape (archs.toml header)
    mix: str  # its class in the report's instruction mix
    note: str  # the operand types it takes


@dataclass(frozen=True)
class Arch:
    name: str
    title: str
    generation: str  # "hopper" | "blackwell": which expert solution and docs apply
    docs: str  # arch_docs/<docs>: the knowledge pack for this architecture
    sm: str  # e.g. "sm_90a"
    compute_capability: int  # 90, 100
    figures: dict
    sources: tuple[str, ...]
    families: tuple[str, ...]
    default_required: tuple[str, ...]
    extra: dict = field(default_factory=dict)

    @property
    def compute(self) -> str:
        return self.sm.replace("sm_", "compute_")

    @property
    def template_dirs(self) -> list:
        """Include path of the CUDA template headers: this architecture's own, then those shared by
        Hopper and Blackwell (TMA, mbarrier, fences: the same PTX on both)."""
        from xlang import resources

        docs = resources.folder("arch_docs")
        return [docs / self.docs / "templates", docs / "common" / "templates"]

    @property
    def gencode(self) -> str:
        """The nvcc flag: the arch-specific 'a' targets are the only ones that accept wgmma / tcgen05."""
        return f"-gencode=arch={self.compute},code=[{self.sm},{self.compute}]"


# Flags that are not figures: announce_when_absent = reports say so when this architecture is not in a comparison.
_EXTRA_KEYS = ("announce_when_absent",)

_FIGURE_KEYS = (
    "sms", "smem_per_sm_kib", "smem_per_block_kib", "registers_per_sm", "tmem_per_sm_kib", "l2_mib",
    "peak_dense_bf16_tflops", "peak_dense_fp8_tflops", "peak_dense_fp4_tflops", "mem_bandwidth_tbs", "memory_gib", "measured_bf16_tflops", "measured_copy_tbs",
)


@functools.cache
def _data() -> dict:
    return tomllib.loads((Path(__file__).parent / "archs.toml").read_text())


@functools.cache
def _registry() -> tuple[dict[str, Family], dict[str, Arch]]:
    data = _data()
    families = {
        name: Family(name, f["doc"], re.compile(f["ptx"]), re.compile(f["sass"]),
                     re.compile(f["narrow_accumulate"]) if f.get("narrow_accumulate") else None, f.get("math", ""),
                     tuple(TensorCoreOpcode(op, f.get("opcode_patterns", {}).get(op, op), name, f["shape"], f["mix"],
                                            note) for op, note in f.get("opcodes", {}).items()),
                     re.compile(f["sass_operands"]) if f.get("sass_operands") else None)
        for name, f in data["families"].items()
    }
    archs = {}
    for name, a in data["archs"].items():
        unknown = [f for f in a["families"] + a["default_required"] if f not in families]
        assert not unknown, f"archs.toml: {name} names unknown families {unknown}"
        archs[name] = Arch(
            name=name,
            title=a["title"],
            generation=a["generation"],
            docs=a["docs"],
            sm=a["sm"],
            compute_capability=a["compute_capability"],
            figures={k: a[k] for k in _FIGURE_KEYS if k in a},
            sources=tuple(a["sources"]),
            families=tuple(a["families"]),
            default_required=tuple(a["default_required"]),
            extra={k: a[k] for k in _EXTRA_KEYS if k in a},
        )
    return families, archs


def families() -> dict[str, Family]:
    return _registry()[0]


def archs() -> dict[str, Arch]:
    return _registry()[1]


def tensor_core_opcodes() -> tuple[TensorCoreOpcode, ...]:
    """Every tensor-core opcode archs.toml lists, family by family in file order."""
    return tuple(op for fam in families().values() for op in fam.opcodes)


def mix_classes() -> tuple[tuple[str, str], ...]:
    """The report's instruction-mix classes in match order, each (name, anchored regular expression of the base
    opcode): the tensor-core classes (the families' `mix`, grouping their `opcodes`, in file order), then archs.toml
    `[mix.classes]`."""
    patterns: dict[str, list[str]] = {}
    for op in tensor_core_opcodes():
        patterns.setdefault(op.mix, []).append(op.pattern)
    listed = _data()["mix"]["classes"]
    assert not set(listed) & set(patterns), f"archs.toml [mix.classes] repeats a tensor-core class: {set(listed) & set(patterns)}"
    patterns.update({name: list(ops) for name, ops in listed.items()})
    return tuple((name, rf"^({'|'.join(ps)})$") for name, ps in patterns.items())


def mix_other() -> str:
    """The instruction-mix class of an opcode that is in none of `mix_classes` (archs.toml `[mix] other`)."""
    return _data()["mix"]["other"]


def get_arch(name: str) -> Arch:
    try:
        return archs()[name.lower()]
    except KeyError:
        raise XlangError(f"unknown architecture '{name}' (known: {', '.join(archs())})") from None


def device_arch(arch: Arch, device_name: str | None) -> Arch:
    """The architecture whose figures describe the GPU present: the one of the same compute capability whose model
    (its title's second word, e.g. "H200") is a word of the device's name ("NVIDIA H200"), else `arch`. A candidate
    judged as h100 on an H200 (the same ISA) is timed on the H200's memory, so its roofline and bandwidth share must
    be the H200's: with the H100's 3.35 TB/s an honest decode kernel at 3.4 TB/s on an H200 read as 102% of the
    bandwidth and "beyond roofline" (2026-12-04, harness 7)."""
    words = set((device_name or "").upper().replace("-", " ").split())
    for other in archs().values():
        model = other.title.split()[1].upper() if len(other.title.split()) > 1 else ""
        if other.compute_capability == arch.compute_capability and model in words:
            return other
    return arch


def parse_required(arch: Arch, spec: str | None, task_default: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Required families: the CLI's comma list if given, else the task's, else the architecture's default."""
    if spec:
        names = tuple(s.strip() for s in spec.split(",") if s.strip())
    else:
        names = task_default or arch.default_required
    unknown = [n for n in names if n not in arch.families]
    if unknown:
        raise XlangError(
            f"instruction famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} not available on "
            f"{arch.name} (its families: {', '.join(arch.families)})"
        )
    return names
