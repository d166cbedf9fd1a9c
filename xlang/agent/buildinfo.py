"""What the feedback says about a build beyond pass/fail: registers, spills and local memory per kernel, and the
source lines memcheck pointed at; and the toolchain a verdict was made with.

Registers, spills and shared memory come from ptxas's `-v` report when the build kept one (cuda_ptx passes -Xptxas -v:
build.ptxas_v; "Used N registers, used N barriers, N bytes smem",
"N bytes spill stores, N bytes spill loads"); otherwise from `cuobjdump -res-usage` on each compiled kernel's
binary (REG, LOCAL, STACK, SHARED per function; LOCAL is per-thread local memory, where spills go). Needs no GPU.

Memcheck source lines: compute-sanitizer prints `... in FILE:LINE` for code built with -lineinfo; any such
location found in the verdict's memcheck report that names the candidate's file is quoted from the candidate.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import shutil
import subprocess

from xlang import toolchain
from xlang.backend import toolchain_packages

# ptxas -v's report, one block per entry function. Each line is matched whole and a block only counts when its lines
# come in ptxas's own order: a candidate can have the compiler echo a source line into the log (a diagnostic quotes
# the line it is about), and such an echo never forms a whole block.
_PTXAS_ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([\w$.]+)' for '(sm_\w+)'")
_PTXAS_PROPS = re.compile(r"ptxas info\s*: Function properties for ([\w$.]+)")
_PTXAS_FRAME = re.compile(r"\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*: Used (\d+) registers(?:, used (\d+) barriers)?((?:, [^,]+)*)")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")
_RES_FUNC = re.compile(r"^\s*Function\s+([^:\s]+):\s*$")
_RES_FIELDS = re.compile(r"\b(REG|STACK|SHARED|LOCAL):(\d+)")
_LOCATION = re.compile(r"([\w./\\-]+\.(?:cu|cuh|hpp|h|cpp|py|ptx)):(\d+)")


def parse_ptxas_v(log: str | None) -> list[dict]:
    """ptxas -v output -> [{kernel, registers, spill_stores, spill_loads, stack, shared, barriers, lines}] (bytes;
    shared: the kernel's static shared memory, `N bytes smem`), in order; `lines` are ptxas's own lines for the
    kernel, quoted in the feedback. A kernel reported twice keeps its last block (ptxas's, after any echo)."""
    lines = [ln.rstrip() for ln in (log or "").splitlines()]
    out: dict[str, dict] = {}
    for i, line in enumerate(lines):
        entry = _PTXAS_ENTRY.fullmatch(line)
        if not entry or i + 3 >= len(lines):
            continue
        name = entry.group(1)
        props, frame, used = _PTXAS_PROPS.fullmatch(lines[i + 1]), _PTXAS_FRAME.fullmatch(lines[i + 2]), \
            _PTXAS_USED.fullmatch(lines[i + 3])
        if not (props and props.group(1) == name and frame and used):
            continue
        smem = _PTXAS_SMEM.search(used.group(3) or "")
        out.pop(name, None)
        out[name] = {"kernel": name, "source": "ptxas -v", "stack": int(frame.group(1)),
                     "spill_stores": int(frame.group(2)), "spill_loads": int(frame.group(3)),
                     "registers": int(used.group(1)), "barriers": int(used.group(2) or 0),
                     "shared": int(smem.group(1)) if smem else 0,
                     "lines": [lines[i + 2].strip(), lines[i + 3].split(":", 1)[1].strip()]}
    return list(out.values())


def parse_res_usage(text: str | None) -> list[dict]:
    """cuobjdump -res-usage output -> [{kernel, registers, local, stack, shared}] (bytes)."""
    out, current = [], None
    for line in (text or "").splitlines():
        m = _RES_FUNC.match(line)
        if m:
            current = {"kernel": m.group(1), "source": "cuobjdump -res-usage"}
            continue
        if current is not None:
            fields = dict(_RES_FIELDS.findall(line))
            if "REG" in fields:
                current.update(registers=int(fields["REG"]), local=int(fields.get("LOCAL", 0)),
                               stack=int(fields.get("STACK", 0)), shared=int(fields.get("SHARED", 0)))
                out.append(current)
                current = None
    return out


def kernel_resources(build: dict | None) -> list[dict]:
    """Registers, spills and shared memory of each kernel of a build (BuildResult.to_dict()); [] when none can be
    read. ptxas -v's report when the build kept one (cuda_ptx: build.ptxas_v), only for kernels the binary has;
    else cuobjdump -res-usage of each kernel's binary, with the shared memory a launch asks for from the
    language's compile metadata where it records it (Triton: metadata.shared, kernel meta shared_bytes; Triton's
    n_regs / n_spills are filled only when a driver loads the kernel, which a static build does not)."""
    if not build or not build.get("ok"):
        return []
    names = {k.get("name") for k in build.get("kernels") or []}
    from_log = [r for r in parse_ptxas_v(build.get("ptxas_v") or build.get("log")) if not names or r["kernel"] in names]
    if from_log:
        return from_log
    tool = toolchain.find_tool("cuobjdump")
    if tool is None:
        return []
    out, seen = [], set()
    for k in build.get("kernels") or []:
        path = k.get("cubin")
        if not path or path in seen:
            continue
        seen.add(path)
        try:
            proc = subprocess.run([str(tool), "-res-usage", path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        out += parse_res_usage(proc.stdout)
    launch_shared = {k.get("name"): (k.get("meta") or {}).get("shared_bytes") for k in build.get("kernels") or []}
    for r in out:
        if isinstance(launch_shared.get(r["kernel"]), int):
            r.update(shared=launch_shared[r["kernel"]], shared_source=f"{build.get('lang') or 'compile'} metadata")
    return out


def resources_text(resources: list[dict] | None, limit: int = 6) -> str:
    if not resources:
        return ""
    lines = []
    for r in resources[:limit]:
        parts = [f"{r['registers']} registers"]
        if "spill_stores" in r:
            parts.append(f"{r['spill_stores']} bytes spill stores, {r['spill_loads']} bytes spill loads")
        if "local" in r:
            parts.append(f"{r['local']} bytes local memory per thread (spills land here)")
        if r.get("stack"):
            parts.append(f"{r['stack']} bytes stack")
        if r.get("shared"):  # ptxas: static __shared__ only (dynamic shared memory is the launch's)
            parts.append(f"{r['shared']} bytes {'static ' if r.get('source') == 'ptxas -v' else ''}shared memory"
                         + (f" ({r['shared_source']})" if r.get("shared_source") else ""))
        lines.append(f"- {r['kernel'][:80]}: {', '.join(parts)}")
        if r.get("lines"):
            lines.append("  ptxas: " + " · ".join(f"`{q}`" for q in r["lines"]))
    more = f"\n- ... and {len(resources) - limit} more kernels" if len(resources) > limit else ""
    source = resources[0].get("source", "")
    return f"Registers, spills and shared memory per kernel ({source}):\n" + "\n".join(lines) + more


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def memcheck_locations(memcheck: dict | None) -> list[tuple[str, int]]:
    """(file, line) pairs named anywhere in a memcheck report, in order, without repeats."""
    found: list[tuple[str, int]] = []
    for r in (memcheck or {}).get("reports") or []:
        if isinstance(r, dict) and r.get("file") and r.get("line"):
            found.append((str(r["file"]), int(r["line"])))
    for text in _strings(memcheck or {}):
        for f, line in _LOCATION.findall(text):
            found.append((f, int(line)))
    return list(dict.fromkeys(found))


def memcheck_source_lines(memcheck: dict | None, code: str | None, limit: int = 5) -> str:
    """The candidate's lines memcheck pointed at, quoted; "" when the report names none."""
    locations = memcheck_locations(memcheck)
    if not locations:
        return ""
    lines = (code or "").splitlines()
    out = []
    for f, n in locations[:limit]:
        name = re.split(r"[/\\]", f)[-1]
        quoted = lines[n - 1].strip() if name.startswith("candidate") and 0 < n <= len(lines) else None
        out.append(f"- {name}:{n}" + (f": `{quoted}`" if quoted else ""))
    return "memcheck points at:\n" + "\n".join(out)


def _tool_release(name: str) -> str | None:
    tool = toolchain.find_tool(name)
    if tool is None:
        return None
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release [\d.]+, (V[\w.]+)", out)
    return m.group(1) if m else (out.strip().splitlines() or [None])[-1]


def _driver() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "none (no nvidia-smi)"
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    versions = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return ", ".join(versions) if out.returncode == 0 and versions else "none (no GPU answered)"


def package_version(dist: str) -> str | None:
    """The installed version of a Python distribution, None when absent: the one place every toolchain record and
    every cell identity (xlang.identity) reads package versions from."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def tool_release(name: str) -> str | None:
    """An NVIDIA tool's release (e.g. 'V13.0.88' for nvcc or ptxas; cuobjdump's last version line), None when absent."""
    return _tool_release(name)


@functools.cache
def driver_version() -> str:
    return _driver()


@functools.cache
def toolchain_versions() -> dict:
    """The toolchain a verdict was made with: nvcc, ptxas, cuobjdump, every language's packages (under their short
    names, Backend.fingerprint_packages), torch and the NVIDIA driver. Absent tools and packages are named as
    absent (None), not left out."""
    out: dict = {"nvcc": tool_release("nvcc"), "ptxas": tool_release("ptxas"), "cuobjdump": tool_release("cuobjdump")}
    for dist, key in (*toolchain_packages().items(), ("torch", "torch")):
        out[key] = package_version(dist)
    out["driver"] = driver_version()
    return out
