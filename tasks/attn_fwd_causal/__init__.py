"""attn_fwd_causal: see tasks/_attention.py for the contract, reference and baseline shared by the attention tasks."""

from .._attention import make_task

TASK = make_task("attn_fwd_causal", backward=False, causal=True)
