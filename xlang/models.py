"""Checks of a litellm model name before any work: its provider, its key, and its endpoint.

The common providers are checked from the table below without importing litellm (a 5-10 s import), so a missing
key is said at once; any other name goes through litellm itself (an unknown provider is refused there). A provider
that has no default endpoint (hosted_vllm, openai_like) needs its API base; the endpoint a run will call (the API
base that is set, else the common provider's public one) must resolve and accept a connection: a wrong host or a
machine without network is one line now, not a stored run that failed at its first turn.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import urllib.request

from xlang.errors import XlangError

# provider prefix -> the environment variables that hold its key (any one of them)
KEYS = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY", "TOGETHER_AI_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY", "FIREWORKS_API_KEY"),
}
# provider prefix -> the variables that may hold its endpoint; required where there is no default endpoint
BASES = {
    "hosted_vllm": (("HOSTED_VLLM_API_BASE",), True),
    "openai_like": (("OPENAI_LIKE_API_BASE",), True),
    "ollama": (("OLLAMA_API_BASE",), False),  # default http://localhost:11434
    "ollama_chat": (("OLLAMA_API_BASE",), False),
    "openai": (("OPENAI_BASE_URL", "OPENAI_API_BASE"), False),
    "anthropic": (("ANTHROPIC_BASE_URL", "ANTHROPIC_API_BASE"), False),
}
DEFAULT_BASES = {"ollama": "http://localhost:11434", "ollama_chat": "http://localhost:11434",
                 # the common providers' public endpoints: a machine that cannot reach them stops before the run
                 "openai": "https://api.openai.com", "anthropic": "https://api.anthropic.com",
                 "gemini": "https://generativelanguage.googleapis.com", "deepseek": "https://api.deepseek.com",
                 "openrouter": "https://openrouter.ai", "together_ai": "https://api.together.xyz",
                 "groq": "https://api.groq.com", "mistral": "https://api.mistral.ai", "xai": "https://api.x.ai",
                 "fireworks_ai": "https://api.fireworks.ai"}
CONNECT_TIMEOUT_S = 5.0


def provider(model: str) -> str | None:
    return model.split("/", 1)[0] if "/" in model else None


def _first(names) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def check_endpoint(url: str, what: str) -> None:
    """The host of url resolves and accepts a TCP connection (CONNECT_TIMEOUT_S), else one line. Behind an HTTP(S)
    proxy (HTTPS_PROXY, ...; NO_PROXY respected) the proxy is what must answer."""
    parsed = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
    proxy = urllib.request.getproxies().get(parsed.scheme or "http")
    if proxy and parsed.hostname and not urllib.request.proxy_bypass(parsed.hostname):
        what, url = f"{what} through the proxy", proxy
        parsed = urllib.parse.urlparse(proxy if "://" in proxy else f"http://{proxy}")
    host = parsed.hostname
    if not host:
        raise XlangError(f"{what} '{url}' is not a URL (expected http://HOST:PORT/...)")
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise XlangError(f"{what} '{url}' has a bad port") from None
    try:
        addrs = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise XlangError(f"{what} {url}: host '{host}' does not resolve ({e.strerror or e})") from None
    last = None
    for family, kind, proto, _, addr in addrs:
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(CONNECT_TIMEOUT_S)
                s.connect(addr)
                return
        except OSError as e:
            last = e
    raise XlangError(f"{what} {url}: no answer at {host}:{port} ({getattr(last, 'strerror', None) or last})")


def check_model(model: str, litellm_check=None) -> None:
    """One line (XlangError) when the model cannot be used: unknown provider, missing key or API base, an
    endpoint that does not answer. litellm_check(model) handles names outside the table (it imports litellm)."""
    prov = provider(model)
    if prov in KEYS and not _first(KEYS[prov]):
        raise XlangError(f"model '{model}' needs {' or '.join(KEYS[prov])} in the environment (not set); "
                         "set it and run again")
    if prov not in KEYS and prov not in BASES and litellm_check is not None:
        litellm_check(model)
    names, required = BASES.get(prov, ((), False))
    base = _first(names) or DEFAULT_BASES.get(prov or "")
    if base is None and required:
        raise XlangError(f"model '{model}' needs its endpoint: set {' or '.join(names)} "
                         "(e.g. http://HOST:8000/v1)")
    if base is not None:
        check_endpoint(base, f"model '{model}' endpoint" + (f" ({' or '.join(names)})" if names else ""))
