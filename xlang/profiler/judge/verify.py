"""Whether one call's answer is right, in the judge: its outputs against the fp32 reference within the task's
tolerance and error bound (compare_output), its inputs untouched (compare_inputs), the slack around its buffers
intact (verify, through Call.check_slack)."""

from __future__ import annotations

from xlang.profiler.judge.calls import Call, Outcome
from xlang.task import format_shape


def compare_output(name: str, got, expected, atol: float, rtol: float, bound=None) -> dict:
    """Stats of one output against its fp32 reference; 'failure' set when it fails (NaN, Inf, mismatch). Per element
    |got - expected| <= atol + rtol |expected| (+ bound: the task's error bound of this output, a tensor of its
    shape, Task.error_bound, where it has one). max_ratio: the worst |got - expected| / allowed (1 or more fails)."""
    import torch

    g = got.float()
    e = expected.float()
    nan = torch.isnan(g)
    inf = torch.isinf(g)
    diff = (g - e).abs()
    allowed = atol + rtol * e.abs()
    if bound is not None:
        allowed = allowed + bound.float().to(allowed.device)
    ok_elem = diff <= allowed  # NaN compares False
    bad = ~ok_elem
    n_bad, n_nan, n_inf = int(bad.sum()), int(nan.sum()), int(inf.sum())
    finite = ~(nan | inf)
    fdiff = torch.where(finite, diff, torch.zeros_like(diff))
    rel = fdiff / e.abs().clamp_min(max(atol, 1e-30))
    stats = {
        "output": name, "elements": g.numel(),
        "max_abs_err": float(fdiff.max()) if g.numel() else 0.0,
        "max_rel_err": float(rel.max()) if g.numel() else 0.0,
        "max_ratio": float("inf") if n_nan or n_inf else float((diff / allowed.clamp_min(1e-30)).max())
        if g.numel() else 0.0,
        "mismatches": n_bad, "nan": n_nan, "inf": n_inf,
    }
    if n_bad or n_nan or n_inf:
        where = nan if n_nan else inf if n_inf else bad
        flat = int(where.flatten().nonzero()[0])
        index = list(_unravel(flat, tuple(g.shape)))
        kind = "nan" if n_nan else "inf" if n_inf else "mismatch"
        stats["failure"] = {
            "kind": kind, "index": index,
            "got": float(g.flatten()[flat]), "expected": float(e.flatten()[flat]),
        }
        if bound is not None:
            stats["failure"]["allowed"] = float(allowed.flatten()[flat])
    return stats


def _unravel(flat: int, shape: tuple[int, ...]):
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return tuple(reversed(out))


def compare_inputs(before: dict, after: dict) -> dict | None:
    import torch

    for name, old in before.items():
        new = after[name]
        if old.dtype.is_floating_point and old.element_size() == 1:
            # fp8: compared bit for bit, as bytes (not every torch build compares fp8 tensors on every device)
            old, new = old.view(torch.uint8), new.view(torch.uint8)
        if not torch.equal(old, new):
            changed = (old != new) & ~(torch.isnan(old) & torch.isnan(new))
            n = int(changed.sum())
            if not n:  # NaN inputs (attn_decode_paged's garbage pages) are never torch.equal to themselves
                continue
            flat = int(changed.flatten().nonzero()[0])
            return {"input": name, "changed": n, "elements": old.numel(),
                    "index": list(_unravel(flat, tuple(old.shape))),
                    "was": float(old.flatten()[flat].float()), "now": float(new.flatten()[flat].float())}
    return None


def describe_failure(stats: dict, shape: dict, trial: int, seed: int, atol: float, rtol: float,
                     bound_rule: str = "") -> str:
    f = stats["failure"]
    where = f"{stats['output']}[{', '.join(map(str, f['index']))}]"
    at = f"(shape {format_shape(shape)}, trial {trial}, seed {seed})"
    if f["kind"] == "nan":
        return (f"{stats['output']}: {stats['nan']} of {stats['elements']} elements are NaN (left unwritten, or "
                f"computed as NaN); first at {where}, expected {f['expected']:.6g} {at}")
    if f["kind"] == "inf":
        return f"{stats['output']}: {stats['inf']} elements are Inf; first at {where}, expected {f['expected']:.6g} {at}"
    if "allowed" in f:  # the task's error bound applies (Task.error_bound)
        return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
                f"rtol={rtol} plus the task's error bound ({bound_rule}); first at {where}: got {f['got']:.6g}, "
                f"expected {f['expected']:.6g}, allowed |err| {f['allowed']:.4g}; worst |err| / allowed "
                f"{stats['max_ratio']:.4g}, max abs err {stats['max_abs_err']:.4g} {at}")
    return (f"{stats['output']}: {stats['mismatches']} of {stats['elements']} elements outside atol={atol} "
            f"rtol={rtol}; first at {where}: got {f['got']:.6g}, expected {f['expected']:.6g}; "
            f"max abs err {stats['max_abs_err']:.4g}, max rel err {stats['max_rel_err']:.4g} {at}")


def verify(state, call: Call, inputs: dict, where: str, kind: str = "normal") -> dict:
    """Check one finished call against the judge's own copy of its inputs (of value kind `kind`): slack, inputs,
    outputs (each with its tolerance, Task.tolerance_for, and the task's error bound, Task.error_bound: both the
    reference and the bound come from the judge's `inputs`, never from the candidate's buffers)."""
    task = state.task
    call.check_slack(where)
    changed = compare_inputs(inputs, call.input_tensors())
    if changed:
        raise Outcome("incorrect", f"input {changed['input']} was modified by the candidate: {changed['changed']} of "
                                   f"{changed['elements']} elements changed, first at {changed['input']}"
                                   f"[{', '.join(map(str, changed['index']))}] ({where})")
    reference = task.reference(inputs, call.shape)
    bounds = task.error_bound(inputs, call.shape) if task.error_bound is not None else {}
    stats = []
    for name, got in call.output_tensors().items():
        atol, rtol = task.tolerance_for(name, kind)
        s = compare_output(name, got, reference[name], atol, rtol, bounds.get(name))
        stats.append(s)
        if "failure" in s:
            text = describe_failure(s, call.shape, -1, -1, atol, rtol, task.error_bound_rule)
            raise Outcome("incorrect", text[: text.rfind(" (shape ")] + f" ({where})")
    return {"outputs": stats}
