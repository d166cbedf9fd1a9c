"""The LLM client: the only module in xlang that imports litellm (never at CLI import, never on the GPU worker).

Provider errors that may pass (rate limits, overload, 5xx, timeouts, dropped connections) are retried with
exponential backoff and jitter (tenacity); others (authentication, bad request, context window) are returned as the turn's
error at once. Token usage comes from the response, cost from litellm.completion_cost (0 for unknown models).
Reasoning models: the reasoning token count (usage.completion_tokens_details.reasoning_tokens, part of the
completion tokens) and the reasoning text the provider returns (message.reasoning_content) are kept as well.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from dataclasses import dataclass

from xlang.errors import XlangError

_sleep = time.sleep  # tests replace it


@functools.cache
def litellm_module():
    # Offline, litellm would try to fetch its model cost map at import: use the copy in the wheel.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm


@dataclass
class Reply:
    text: str | None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    cost_usd: float = 0.0
    seconds: float = 0.0
    error: str | None = None  # the reply could not be obtained
    code: str | None = None  # set by sources that know the candidate (reference): no extraction
    attempts: int = 1
    reasoning_tokens: int | None = None  # included in completion_tokens (None: the provider did not say)
    reasoning: str | None = None  # the reasoning text, where the provider returns it


def check_environment(model: str) -> None:
    """One clear line, before any work: an unknown provider, a missing key or API base, an endpoint that does not
    answer. The common providers are checked without importing litellm (xlang.models)."""
    from xlang.models import check_model

    check_model(model, _litellm_check)


def _litellm_check(model: str) -> None:
    litellm = litellm_module()
    try:
        litellm.get_llm_provider(model)
    except Exception as e:  # noqa: BLE001 - litellm raises BadRequestError for a name it cannot route
        first = (str(e).splitlines() or [type(e).__name__])[0].removeprefix("litellm.BadRequestError: ")
        raise XlangError(f"model '{model}': litellm knows no provider for it ({first[:160]}); name one, e.g. "
                         "openai/..., anthropic/..., hosted_vllm/...") from None
    try:
        env = litellm.validate_environment(model)
    except Exception as e:  # noqa: BLE001 - litellm raises various things for unknown providers
        raise XlangError(f"model '{model}': litellm cannot use it ({type(e).__name__}: {e})") from None
    # An *_API_BASE has a default (e.g. ollama on localhost) or is checked by xlang.models: only keys here.
    missing = [k for k in env.get("missing_keys", []) if not k.endswith("_API_BASE")]
    if not env.get("keys_in_environment", True) and missing:
        raise XlangError(f"model '{model}' needs {' or '.join(missing)} in the environment (not set); "
                         "set it and run again")


_NO_SUCH_HOST = ("Name or service not known", "nodename nor servname", "Temporary failure in name resolution",
                 "No address associated with hostname", "getaddrinfo failed")


def _cannot_succeed(exc: BaseException) -> bool:
    """Errors no retry can fix: a host that does not resolve, a refused key, an unknown provider or model."""
    litellm = litellm_module()
    kinds = tuple(getattr(litellm, n) for n in ("AuthenticationError", "PermissionDeniedError", "NotFoundError",
                                                "BadRequestError") if hasattr(litellm, n))
    if isinstance(exc, kinds) or getattr(exc, "status_code", None) in (400, 401, 403, 404):
        return True
    seen, e = set(), exc
    while e is not None and id(e) not in seen:  # the DNS failure is usually a cause a few levels down
        seen.add(id(e))
        if isinstance(e, socket.gaierror) or any(s in str(e) for s in _NO_SUCH_HOST):
            return True
        e = e.__cause__ or e.__context__
    return False


def _retryable(exc: Exception) -> bool:
    if _cannot_succeed(exc):
        return False
    litellm = litellm_module()
    kinds = tuple(getattr(litellm, n) for n in ("RateLimitError", "APIConnectionError", "ServiceUnavailableError",
                                                "InternalServerError", "Timeout", "BadGatewayError")
                  if hasattr(litellm, n))
    if isinstance(exc, kinds):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status == 429 or status >= 500)


class LLMClient:
    def __init__(self, model: str, sampling: dict | None = None, retries: int = 6, backoff_s: float = 2.0,
                 max_backoff_s: float = 120.0, timeout_s: float = 900.0):
        self.model = model
        self.sampling = {k: v for k, v in (sampling or {}).items() if v is not None}
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s

    def complete(self, messages: list[dict], seed: int | None = None) -> Reply:
        litellm = litellm_module()
        kwargs = dict(self.sampling)
        if seed is not None:
            kwargs["seed"] = seed
        start = time.monotonic()
        attempts = 0

        def call():
            nonlocal attempts
            attempts += 1
            return litellm.completion(model=self.model, messages=messages, drop_params=True,
                                      timeout=self.timeout_s, num_retries=0, **kwargs)

        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random_exponential

        retrying = Retrying(stop=stop_after_attempt(self.retries + 1), retry=retry_if_exception(_retryable),
                            wait=wait_random_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
                            sleep=lambda seconds: _sleep(seconds), reraise=True)
        try:
            resp = retrying(call)
        except Exception as e:  # noqa: BLE001 - the provider's error is the turn's error
            return Reply(None, self.model, seconds=time.monotonic() - start, attempts=attempts,
                         error=f"{type(e).__name__}: {str(e)[:2000]}")
        choice = resp.choices[0] if resp.choices else None
        message = getattr(choice, "message", None) if choice else None
        text = getattr(message, "content", None)
        usage = getattr(resp, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=resp) or 0.0)
        except Exception:  # noqa: BLE001 - unknown model: no price
            cost = 0.0
        return Reply(text or "", getattr(resp, "model", None) or self.model,
                     prompt_tokens=getattr(usage, "prompt_tokens", None),
                     completion_tokens=getattr(usage, "completion_tokens", None),
                     total_tokens=getattr(usage, "total_tokens", None), cost_usd=cost,
                     seconds=time.monotonic() - start, attempts=attempts, reasoning_tokens=reasoning_tokens(usage),
                     reasoning=reasoning_text(message))


def reasoning_tokens(usage) -> int | None:
    """usage.completion_tokens_details.reasoning_tokens (OpenAI's and litellm's spelling for every provider)."""
    details = getattr(usage, "completion_tokens_details", None)
    if isinstance(details, dict):
        value = details.get("reasoning_tokens")
    else:
        value = getattr(details, "reasoning_tokens", None)
    return int(value) if isinstance(value, (int, float)) else None


def reasoning_text(message) -> str | None:
    """message.reasoning_content, else the text of Anthropic-style thinking blocks; None when there is none."""
    text = getattr(message, "reasoning_content", None)
    if isinstance(text, str) and text:
        return text
    blocks = getattr(message, "thinking_blocks", None) or []
    parts = [b.get("thinking") for b in blocks if isinstance(b, dict) and b.get("thinking")]
    return "\n\n".join(parts) if parts else None
