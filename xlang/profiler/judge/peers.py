"""Peers, in the judge: each of the task's public kernels the plan names (the parent's peer_specs, stages/peers.py)
timed after the vendor, in a process of its own, the same way (time_peers), with its kept cache (peer_cache.py).
A peer never changes the verdict."""

from __future__ import annotations

import time

from xlang.profiler.judge import peer_cache
from xlang.profiler.judge.observed import make_observer
from xlang.profiler.judge.plan import PeerPlan
from xlang.profiler.judge.process import CandidateError, Outcome, Runner, RunnerGone, last_line, wait_alone
from xlang.profiler.judge.timing import per_s, tflops_of, time_calls


def time_peers(state, shape: dict, candidate_ms: float, progress, candidate_idle_ms: float | None = None) -> dict:
    """Each peer of plan.peers (peer_specs: name, display, and why it is skipped, if it is) timed as the
    vendor was: its own process, no candidate process alive, the same shape and method. A peer that cannot run
    is recorded with the reason; it never changes the candidate's verdict. -> {"peers": [...], "best_peer": ...}
    candidate_idle_ms: the candidate's median idle time inside a call (its call profile), for the speedup against
    a peer's GPU time alone (peer_record)."""
    records = []
    for peer in state.plan.peers:
        if peer.skip:  # not installed here, or peers turned off: no process is started
            records.append(peer_not_run(peer, peer.skip))
        else:
            records.append(_time_peer(state, peer, shape, candidate_ms, progress, candidate_idle_ms))
    return {"peers": records, "best_peer": best_peer(records)}


def _time_peer(state, peer: PeerPlan, shape: dict, candidate_ms: float, progress,
               candidate_idle_ms: float | None = None) -> dict:
    plan, task = state.plan, state.task
    deadline = time.monotonic() + float(plan.timing.peer_budget_s)
    observer = make_observer(plan)
    runner = kept = None
    try:
        progress(f"peer {peer.name}: start its process")  # the peer's phase opens here, its kept cache's copy in it
        kept = _KeptCache(task, next((p for p in task.peers if p.name == peer.name), None), shape)
        runner = Runner(plan, f"peer-{peer.name}", None, observer=observer, home_env=kept.home_env)
        runner.load_timeout_s = max(1.0, min(runner.load_timeout_s, deadline - time.monotonic()))
        alone = wait_alone(progress, plan.gpu_index or 0)
        progress(f"peer {peer.name}: load")
        runner.start({"op": "peer", "task": task.name, "peer": peer.name, "device": "cuda"})
        timed = time_calls(state, runner, observer, None, shape, progress, f"peer {peer.name}", verify_n=0,
                           deadline=deadline)
    except CandidateError as e:  # the runner's load reply: its package is missing or broken there
        return peer_not_run(peer, "could not load: " + last_line(str(e)))
    except (Outcome, RunnerGone) as e:
        return peer_not_run(peer, "failed: " + last_line(str(e)))
    except Exception as e:  # noqa: BLE001 - a peer's trouble (or ours starting it) is recorded, never the verdict
        return peer_not_run(peer, f"failed: {type(e).__name__}: {last_line(str(e))}")
    finally:
        if runner is not None:
            runner.close()  # its observer with it
        elif observer is not None:
            observer.close()
    return {**peer_record(task, shape, peer, timed, candidate_ms, alone, candidate_idle_ms),
            **kept.after(runner.home)}  # it ran


class _KeptCache:
    """A peer's kept cache for one verdict (judge/peer_cache.py): read before its process starts, given to it in
    its home, and what it left there kept after it closed, once it has run."""

    def __init__(self, task, peer, shape: dict):
        self.seeded = self.key = None
        self.cache_env = peer.cache_env if peer is not None else None  # None: a peer that keeps nothing
        self.peer = peer
        if self.cache_env:
            self.key = peer_cache.job_key(task, peer, shape)
            self.seeded = peer_cache.load(self.key)

    def home_env(self, home) -> dict:
        if not self.cache_env:
            return {}
        return {self.cache_env: str(peer_cache.seed(home, self.seeded))}

    def after(self, home) -> dict:
        """-> {"tuning": ...} for the peer's record: tuned now or reused (from the files it left), and kept."""
        if not self.cache_env:
            return {}
        try:
            left = peer_cache.harvest(home, self.peer.cache_files)
        except OSError as e:  # what it left cannot be read: nothing is kept, the figures stand
            return {"tuning": {"state": "not_kept", "key": self.key, "error": str(e)[:200]}}
        state = peer_cache.tuning_state(self.seeded, left, self.peer.cache_files[0])
        stored = False
        if state == "tuned_now" or (left and self.seeded is None):
            stored = peer_cache.store(self.key, left, {"peer": self.peer.name, "versions": peer_cache.versions(self.peer)})
        return {"tuning": {"state": state, "key": self.key, "given_files": len(self.seeded or {}),
                           "left_files": len(left), "stored": stored}}


def peer_not_run(peer: PeerPlan, reason: str) -> dict:
    return {"name": peer.name, "display": peer.display, "ran": False, "reason": reason}


def peer_record(task, shape: dict, peer: PeerPlan, timed: dict, candidate_ms: float, alone: dict | None = None,
                candidate_idle_ms: float | None = None) -> dict:
    """A peer that ran: its median, TFLOP/s, and the candidate's speedup against it (peer ms / candidate ms).
    Both are GPU spans of a call, which count the GPU's idle time inside it while the host launches the next
    kernel (FA4's backward: ~0.8 ms between its first two kernels, on the H200 2026-12-04). The speedup against
    the peer's GPU time alone (each side's median span less its median idle inside a call, from the call profiles)
    is recorded beside, as speedup_vs_peer_gpu_time: what a caller that keeps the GPU fed would see."""
    ms = timed["stats"]["median_ms"]
    flops = task.flops(shape)
    idle = (timed.get("profile") or {}).get("idle_ms")
    busy = ms - idle if idle is not None else None
    cand_busy = candidate_ms - (candidate_idle_ms or 0.0)
    return {"name": peer.name, "display": peer.display, "ran": True, "ms": ms,
            "tflops": tflops_of(flops, ms),
            "gbps": per_s(task.min_bytes(shape) if task.min_bytes is not None else None, ms, 1e9),
            "speedup_vs_peer": ms / candidate_ms if candidate_ms > 0 else None,
            "idle_ms": idle,
            "speedup_vs_peer_gpu_time": busy / cand_busy if busy is not None and busy > 0 and cand_busy > 0 else None,
            "method": timed["method"], "stats": timed["stats"], "wall_stats": timed.get("wall_stats"),
            "power": timed.get("power"), "profile": timed.get("profile"), "alone": alone}


def best_peer(records: list[dict]) -> dict | None:
    """The fastest peer that ran (name, display, ms, and the candidate's speedup against it), or None."""
    ran = [r for r in records if r.get("ran") and r.get("ms")]
    if not ran:
        return None
    best = min(ran, key=lambda r: r["ms"])
    return {"name": best["name"], "display": best["display"], "ms": best["ms"], "speedup": best["speedup_vs_peer"],
            "idle_ms": best.get("idle_ms"), "speedup_gpu_time": best.get("speedup_vs_peer_gpu_time")}
