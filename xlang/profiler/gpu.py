"""The GPUs present, seen from the parent process through NVML (nvidia-ml-py) or nvidia-smi.

Never imports torch: the parent must stay light and must not hold a CUDA context while workers run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess

from xlang.errors import XlangError


def gpus() -> tuple[dict, ...]:
    """One dict per visible NVIDIA GPU: index, name, compute_capability (e.g. 90), driver, clocks, memory.

    XLANG_FAKE_GPUS (a JSON list of {index, name, compute_capability}) stands in for the hardware in tests.
    XLANG_GPUS (indices, comma-separated) keeps only those: a Ray GPU task sets it to the GPU Ray assigned it
    (NVML sees every GPU of the node whatever CUDA_VISIBLE_DEVICES says).
    """
    fake = os.environ.get("XLANG_FAKE_GPUS")
    found = tuple(json.loads(fake)) if fake is not None else _present()
    only = os.environ.get("XLANG_GPUS")
    if only is not None:
        keep = {int(i) for i in only.split(",") if i.strip().isdigit()}
        found = tuple(g for g in found if g.get("index") in keep)
    return found


@functools.cache
def _present() -> tuple[dict, ...]:
    found = from_nvml()
    if found is None:
        found = _from_nvidia_smi()
    return tuple(found or ())


def from_nvml() -> list[dict] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver / no GPU: NVML says so with its own exception types
        return []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda_driver = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:  # noqa: BLE001
            cuda_driver = None
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            info = {"index": i, "name": _text(pynvml.nvmlDeviceGetName(h)), "compute_capability": major * 10 + minor,
                    "driver": driver, "cuda_driver": cuda_driver}
            try:
                info["minor"] = pynvml.nvmlDeviceGetMinorNumber(h)  # its device node, /dev/nvidia<minor>
            except Exception:  # noqa: BLE001 - unknown: jails then bind every GPU's node
                pass
            info.update(_nvml_clocks(pynvml, h))
            try:
                info["memory_mib"] = pynvml.nvmlDeviceGetMemoryInfo(h).total >> 20
            except Exception:  # noqa: BLE001
                pass
            out.append(info)
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _nvml_clocks(pynvml, handle) -> dict:
    out = {}
    for key, fn, kind in (
        ("sm_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM),
        ("mem_clock_mhz", pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM),
        ("max_sm_clock_mhz", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM),
        ("max_mem_clock_mhz", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_MEM),
    ):
        try:
            out[key] = fn(handle, kind)
        except Exception:  # noqa: BLE001
            pass
    for key, fn in (("temperature_c", lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
                    ("power_limit_w", lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)):
        try:
            out[key] = fn(handle)
        except Exception:  # noqa: BLE001
            pass
    return out


# NVML's clock-event (throttle) reason bits (nvmlClocksEventReason*; "idle" and the others left out are not slowdowns)
THROTTLE_REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
                    0x80: "hw_power_brake"}


def power_summary(samples: list[tuple[int, float, int]]) -> dict | None:
    """(SM MHz, watts, throttle bits) samples -> SM clock mean / min, power mean / max, the slowdown reasons seen."""
    if not samples:
        return None
    mhz, watts = [s[0] for s in samples], [s[1] for s in samples]
    bits = 0
    for s in samples:
        bits |= s[2]
    return {"sm_clock_mhz": round(sum(mhz) / len(mhz)), "sm_clock_min_mhz": min(mhz),
            "power_w": round(sum(watts) / len(watts), 1), "power_max_w": round(max(watts), 1),
            "throttle": [name for bit, name in THROTTLE_REASONS.items() if bits & bit], "samples": len(samples)}


class PowerSampler:
    """Samples the SM clock, board power and throttle reasons of GPU `index` (NVML's numbering) every `period_s`
    in a thread, between __enter__ and __exit__. Under a power cap a kernel's speed depends on how hot the card
    is; two sides timed the same way can still run at different clocks, and this records it. Without NVML (or on
    any NVML error) it records nothing and `summary()` is None: it never fails the caller."""

    def __init__(self, index: int = 0, period_s: float = 0.005):
        import threading

        self.index, self.period = index, period_s
        self.samples: list[tuple[int, float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # noqa: BLE001 - no NVML here: nothing is recorded
            return
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            while not self._stop.is_set():
                self.samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                                     pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                                     pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)))
                self._stop.wait(self.period)
        except Exception:  # noqa: BLE001 - a failing query ends the sampling; what was read stays
            pass
        finally:
            try:
                pynvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=2.0)

    def summary(self) -> dict | None:
        return power_summary(list(self.samples))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _from_nvidia_smi() -> list[dict] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    fields = "index,name,compute_cap,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,memory.total"
    try:
        proc = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if proc.returncode != 0:
        return []
    return parse_nvidia_smi(proc.stdout)


def parse_nvidia_smi(text: str) -> list[dict]:
    """`nvidia-smi --query-gpu=index,name,compute_cap,driver_version,clocks...,memory.total --format=csv,noheader,nounits`."""
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not re.fullmatch(r"\d+\.\d+", parts[2]):
            continue
        major, minor = parts[2].split(".")
        info = {"index": int(parts[0]), "name": parts[1], "compute_capability": int(major) * 10 + int(minor),
                "driver": parts[3]}
        for key, value in zip(("sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "max_mem_clock_mhz",
                               "memory_mib"), parts[4:]):
            if value.isdigit():
                info[key] = int(value)
        out.append(info)
    return out


class Exclusive:
    """Holds one GPU for one evaluation, across threads and processes of this machine (an flock on a file per
    GPU), so that concurrent samples or runs never time their kernels while another candidate runs."""

    def __init__(self, gpu: dict):
        import tempfile

        self.path = os.path.join(tempfile.gettempdir(), f"xlang-gpu-{gpu.get('index', 0)}.lock")
        self.fd = None

    def acquire(self, timeout_s: float | None = None) -> "Exclusive":
        """Wait for the GPU, at most timeout_s (XLANG_GPU_LOCK_TIMEOUT_S, default an hour): a holder that never
        lets go gets one clear error, not a hang. The lock file is ours alone (0600): a candidate's uid cannot
        even open it, so it cannot hold it."""
        import fcntl
        import time

        limit = float(timeout_s if timeout_s is not None else os.environ.get("XLANG_GPU_LOCK_TIMEOUT_S", 3600))
        try:
            self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        except PermissionError:  # another user's lock file: ours beside it
            self.path += f".{os.getuid()}"
            self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        give_up = time.monotonic() + limit
        while True:
            try:  # a separate open file per holder: threads exclude each other too
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > give_up:
                    os.close(self.fd)
                    self.fd = None
                    raise XlangError(f"GPU {self.path}: still held by another evaluation after {limit:.0f} s")
                time.sleep(0.05)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing drops the lock
            self.fd = None


def gpus_for(arch, among=None) -> list[dict]:
    """The GPUs whose compute capability is the architecture's (sm_90a runs on any 9.0 part)."""
    return [g for g in (gpus() if among is None else among) if g["compute_capability"] == arch.compute_capability]


def find_gpu(arch) -> dict | None:
    found = gpus_for(arch)
    return found[0] if found else None


def arch_for_gpu(gpu: dict):
    """The registered architecture that best names this GPU (H200 -> h200), by compute capability and name."""
    from xlang.archs import archs

    same_cc = [a for a in archs().values() if a.compute_capability == gpu["compute_capability"]]
    if not same_cc:
        return None
    name = gpu["name"].lower().replace(" ", "")
    for a in same_cc:
        if a.name in name:
            return a
    return same_cc[0]


def auto_arch():
    """`--arch auto`: the architecture of the first GPU present; one clear error when there is none."""
    present = gpus()
    if not present:
        raise XlangError("--arch auto: no NVIDIA GPU found here; name an architecture (h100, h200, b200) "
                         "to build and take the static census without running")
    for g in present:
        arch = arch_for_gpu(g)
        if arch is not None:
            return arch
    names = ", ".join(f"{g['name']} (sm_{g['compute_capability']})" for g in present)
    raise XlangError(f"--arch auto: no registered architecture matches the GPU(s) present: {names}")
