"""A judged cell's identity: the toolchain it was judged with, and whether runtime ran.

A compare cell (task, language, architecture and the compare's options: xlang.compare.cell_key) is judged into a
run whose id is the cell key followed by a digest of the cell's toolchain identity:

  harness                     xlang.HARNESS_VERSION (a harness that measures differently)
  the language's packages     its Backend.distributions and torch, e.g. triton and torch
  the language's tools        its Backend.tools (nvcc: its release and ptxas's)
  cuobjdump                   the disassembler the SASS census reads
  runtime                     True when the verdicts are to run on a GPU (else static only)
  driver                      the NVIDIA driver, only when runtime runs here (--profiler local); a Ray cluster's
                              drivers are not known before its verdicts (`--rerun` judges again)

So a compare under another toolchain judges its cells again, and so does one where runtime is now available for
cells judged without it. A stored run satisfies a cell when it finished, is not superseded, its toolchain equals
the cell's (the driver only when runtime is asked for) and, when runtime is available, its verdicts ran it; a run
judged with runtime also satisfies a static-only compare (it holds more). Runs stored before identities were
recorded (their id is the cell key itself) are read from their recorded versions: a field such a run did not
record (cuobjdump) is not held against it; everything it recorded must match.
"""

from __future__ import annotations

import hashlib
import json

import xlang  # HARNESS_VERSION read when called (tests set it)
from xlang.agent import buildinfo  # its functions looked up when called (tests replace tool_release)
from xlang.backend import get_backend

IDENTITY_KEYS_OF_RUNTIME = ("runtime", "driver")


def toolchain_identity(lang: str, runtime=None) -> dict:
    """The toolchain identity of a cell of this language. runtime: the Runtime the cell is judged with (None or
    one that is not available: static only)."""
    backend = get_backend(lang)
    out: dict = {"harness": xlang.HARNESS_VERSION}
    for dist in dict.fromkeys((*backend.distributions, "torch")):
        out[dist] = buildinfo.package_version(dist)
    for tool in backend.tools:
        out[tool] = buildinfo.tool_release(tool)
        if tool == "nvcc":
            out["ptxas"] = buildinfo.tool_release("ptxas")
    out["cuobjdump"] = buildinfo.tool_release("cuobjdump")
    ran = bool(runtime is not None and runtime.available)
    out["runtime"] = ran
    if ran and runtime.name == "local":
        out["driver"] = buildinfo.driver_version()
    return out


def digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]


def stored_identity(run: dict) -> dict:
    """The identity a stored run was judged with: recorded in its config (config['toolchain']) since identities
    exist; for an older run, rebuilt from its recorded versions (versions_json) and runtime."""
    config = run.get("config") or {}
    if isinstance(config.get("toolchain"), dict):
        return dict(config["toolchain"])
    versions = dict(run.get("versions") or {})
    out = {k: v for k, v in versions.items() if k not in ("python", "xlang", "litellm", "driver")}
    out["runtime"] = runtime_available(run)
    if out["runtime"] and run.get("profiler") == "local":
        out["driver"] = versions.get("driver")
    out["legacy"] = True
    return out


def runtime_available(run: dict) -> bool:
    """The run's runtime could run its architecture's code (as its config recorded: runtime and runtime_note)."""
    config = run.get("config") or {}
    return config.get("runtime") not in (None, "none") and not config.get("runtime_note")


def runtime_ran_fully(run: dict, turns: list[dict]) -> bool:
    """Runtime was available for the run and no compiled candidate's verdict lost it (e.g. 'not run (the ray
    profiler failed: ...)')."""
    if not runtime_available(run):
        return False
    for t in turns:
        v = t.get("verdict") or {}
        if (v.get("build") or {}).get("ok") and v.get("category") not in ("forbidden_call",) \
                and str(v.get("runtime_note") or "").startswith("not run"):
            return False
    return True


def satisfies(run: dict, turns: list[dict], wanted: dict) -> bool:
    """A stored (unsuperseded) run answers a cell of identity `wanted` (see the module's text)."""
    have = stored_identity(run)
    legacy = have.pop("legacy", False)
    for key, value in wanted.items():
        if key in IDENTITY_KEYS_OF_RUNTIME:
            continue
        if key not in have and legacy:
            continue  # not recorded before identities: not held against an old run
        if have.get(key) != value:
            return False
    if wanted.get("runtime"):
        if not have.get("runtime") or not runtime_ran_fully(run, turns):
            return False
        if "driver" in wanted and have.get("driver") != wanted["driver"]:
            return False
    return True


def differences(run: dict, wanted: dict) -> list[str]:
    """What changed between a stored run's identity and the wanted one, as 'key old -> new' (for the log)."""
    have = stored_identity(run)
    have.pop("legacy", None)
    out = []
    for key in dict.fromkeys([*wanted, *have]):
        if key in have and key in wanted and have[key] != wanted[key]:
            out.append(f"{key} {have[key]} -> {wanted[key]}")
    return out
