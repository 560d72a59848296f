"""A native function-calling agent over litellm: what users run against their own models.

The four surfaces map onto the chat format (docs/design.md section 1): the
procedure is the system prompt, the context surface becomes earlier turns,
the user surface is the user turn and the tool contract is ``tools``, with an
``ask_user`` function added and wired to the user simulator.  Tool calls run
against the environment by true name; an unknown name, malformed JSON
arguments or a schema violation come back as an error observation and the
loop goes on.  A reply without tool calls is the final answer.

Calls follow the protocol of docs/design.md section 3 (:class:`~..model.options.LLMSettings`):
rate-limit and timeout errors are retried with exponential backoff, every
other provider error is raised at once as a typed :class:`ProviderError`
whose message says what to fix.  litellm is imported on first use only, with
the local price map, so importing it never reaches the network.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..model.context import ASK_USER, EpisodeContext
from ..model.errors import InfrastructureError
from ..model.options import LLMSettings
from ..model.protocols import ERROR_PREFIX, Observation

log = logging.getLogger("pytest_agentperturb.llm")
T = TypeVar("T")

ASK_USER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": ASK_USER,
        "description": "Ask the user a question when information you need is missing, unclear or "
                       "contradictory. Returns the user's reply.",
        "parameters": {
            "type": "object",
            "properties": {"question": {"type": "string", "description": "The question for the user."}},
            "required": ["question"],
        },
    },
}


# -- litellm, imported lazily ------------------------------------------------------


def import_litellm() -> Any:
    """Import litellm without network access at import time.

    litellm downloads a model price map when imported unless
    ``LITELLM_LOCAL_MODEL_COST_MAP`` is set (and retries with sleeps when
    offline); the user's own setting is respected.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError:  # pragma: no cover - depends on the installation
        raise InfrastructureError(
            "model-backed agents need litellm: pip install 'pytest-agentperturb[llm]'") from None
    litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
    if not getattr(litellm, "_agentperturb_warm", False):
        # The first call imports more of litellm, whose pydantic types emit UserWarnings at
        # import; under ``filterwarnings = error`` those would turn an episode into an error.
        # A mock call (no network) here, with warnings ignored, does those imports once.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            litellm.completion(model="openai/agentperturb-warmup", mock_response="ok",
                               messages=[{"role": "user", "content": "warm-up"}])
        litellm._agentperturb_warm = True
    return litellm


# -- errors ------------------------------------------------------------------------


class ProviderError(InfrastructureError):
    """A model call failed; the episode is an ERROR, never a FAIL."""

    retry = False


class RateLimitError(ProviderError):
    """HTTP 429 or a provider quota error (retried)."""

    retry = True


class RequestTimeout(ProviderError):
    """The provider did not answer within the request timeout (retried)."""

    retry = True


class AuthenticationError(ProviderError):
    """The provider rejected the credentials (not retried)."""


class BadRequestError(ProviderError):
    """The provider rejected the request: model name, parameters, context size (not retried)."""


_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
_KEY_SHAPE = re.compile(r"\b(sk|pk|rk|key|token)-[A-Za-z0-9_\-]{6,}", re.I)


def redact(text: str) -> str:
    """``text`` without secrets: values of key-like environment variables and key-shaped words."""
    for name, value in os.environ.items():
        if len(value) >= 8 and _SECRET_NAME.search(name) and value in text:
            text = text.replace(value, f"<{name}>")
    return _KEY_SHAPE.sub(lambda m: m.group(1) + "-***", text)


def key_variable(model: str) -> str:
    """The environment variable litellm reads the key of ``model``'s provider from."""
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {"ollama": "OLLAMA_API_KEY (usually none needed)", "ollama_chat": "OLLAMA_API_KEY (usually none needed)",
            "vertex_ai": "GOOGLE_APPLICATION_CREDENTIALS"}.get(provider, f"{provider.upper()}_API_KEY")


def classify(exc: BaseException, model: str) -> ProviderError:
    """Turn a litellm/provider exception into a :class:`ProviderError` that says what to fix."""
    name = type(exc).__name__
    msg = redact(str(exc))[:400]
    if name == "RateLimitError":
        return RateLimitError(f"{model}: {msg}")
    if name in ("Timeout", "APITimeoutError") or isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return RequestTimeout(f"{model}: no reply within the request timeout ({msg})")
    missing_key = "missing credentials" in msg.lower() or "api_key client option must be set" in msg
    if name in ("AuthenticationError", "PermissionDeniedError") or missing_key:
        return AuthenticationError(
            f"{model}: the provider rejected the credentials ({msg}). Fix: set {key_variable(model)} "
            "to a valid key for this provider, or point --agentperturb-api-base at your endpoint")
    if name in ("BadRequestError", "NotFoundError", "ContextWindowExceededError", "UnsupportedParamsError",
                "UnprocessableEntityError"):
        return BadRequestError(
            f"{model}: the provider rejected the request ({msg}). Fix: check the model name "
            "(litellm's 'provider/model' form), --agentperturb-max-tokens and the endpoint")
    return ProviderError(f"{model}: {name}: {msg}")


async def with_retries(call: Callable[[], Awaitable[T]], model: str, settings: LLMSettings) -> T:
    """Run ``call``; retry rate-limit and timeout errors with backoff ``b, 2b, 4b...``."""
    for attempt in range(settings.attempts):
        try:
            return await call()
        except Exception as exc:
            err = exc if isinstance(exc, ProviderError) else classify(exc, model)
            if not err.retry or attempt + 1 >= settings.attempts:
                raise err from None
            delay = settings.backoff * 2 ** attempt
            log.warning("%s: %s; retry %d of %d in %.3g s", model, type(err).__name__, attempt + 1,
                        settings.attempts - 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


def call_kwargs(model: str, settings: LLMSettings) -> dict[str, Any]:
    """Keyword arguments common to every litellm call of ``model`` (no retries inside litellm)."""
    kw: dict[str, Any] = {"model": model, "max_tokens": settings.max_tokens, "timeout": settings.request_timeout,
                          "num_retries": 0, "max_retries": 0, "drop_params": True}
    if settings.api_base:
        kw["api_base"] = settings.api_base
    return kw


def usage_of(response: Any) -> dict[str, Any]:
    """Provider-reported usage of one call: input, output, reasoning tokens and cost (None if unpriced)."""
    u = getattr(response, "usage", None)
    details = getattr(u, "completion_tokens_details", None)
    # litellm prices every response once (None when the model is not in its price map)
    hidden = getattr(response, "_hidden_params", None) or {}
    raw_cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    cost = float(raw_cost) if isinstance(raw_cost, (int, float)) else None
    return {"input_tokens": int(getattr(u, "prompt_tokens", 0) or 0),
            "output_tokens": int(getattr(u, "completion_tokens", 0) or 0),
            "reasoning_tokens": int(getattr(details, "reasoning_tokens", 0) or 0),
            "cost_usd": cost}


# -- message format ------------------------------------------------------------------


def initial_messages(ctx: EpisodeContext) -> list[dict[str, Any]]:
    """Procedure as the system prompt, context as earlier turns, user surface as the user turn."""
    s = ctx.surfaces
    msgs: list[dict[str, Any]] = [{"role": "system", "content": s.procedure}]
    msgs += [{"role": t.role, "content": t.content} for t in s.context]
    msgs.append({"role": "user", "content": s.user})
    return msgs


def tool_list(ctx: EpisodeContext) -> list[dict[str, Any]]:
    """The advertised contract plus ``ask_user`` (unless the contract already names one)."""
    tools = [dict(t) for t in ctx.surfaces.tools]
    if ASK_USER not in ctx.surfaces.tool_names():
        tools.append(ASK_USER_TOOL)
    return tools


def tool_result_messages(call_id: str, name: str,
                         observation: Observation | str | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages carrying one tool result: text in the tool message, images in a following user turn.

    ``observation`` is an :class:`Observation`, text, or a list of JSON
    parts: ``{"type": "text", "text": ...}``, ``{"type": "image", "data":
    <base64>, "mime_type": "image/png"}`` or an OpenAI ``image_url`` part.
    Chat APIs accept images only in user turns, so they follow the tool
    message.  An image's text layer is never sent: models see pixels only.
    """
    if isinstance(observation, Observation):
        if not observation.images:
            return [{"role": "tool", "tool_call_id": call_id, "content": observation.text}]
        observation = observation.to_json()
    if isinstance(observation, str):
        return [{"role": "tool", "tool_call_id": call_id, "content": observation}]
    texts, images = [], []
    for p in observation:
        if p.get("type") == "text":
            texts.append(str(p.get("text", "")))
        elif p.get("type") == "image":
            url = f"data:{p.get('mime_type', 'image/png')};base64,{p['data']}"
            images.append({"type": "image_url", "image_url": {"url": url}})
        elif p.get("type") == "image_url":
            images.append(dict(p))
    note = f" ({len(images)} image(s) follow in the next message)" if images else ""
    out: list[dict[str, Any]] = [{"role": "tool", "tool_call_id": call_id, "content": "\n".join(texts) + note}]
    if images:
        out.append({"role": "user", "content": [{"type": "text", "text": f"Image output of {name}:"}, *images]})
    return out


def _bad_arguments(ctx: EpisodeContext, name: str, raw: str, err: str) -> str:
    """Record a call whose arguments are not JSON, and the error observation it gets."""
    ctx.tool_calls += 1
    ctx.trajectory.append({"role": "assistant", "tool": name, "args": raw})
    obs = f"{ERROR_PREFIX}the arguments of {name} are not valid JSON ({err}); call it again with a JSON object"
    ctx.trajectory.append({"role": "tool", "tool": name, "content": obs})
    return obs


# -- the agent -------------------------------------------------------------------------


class LiteLLMAgent:
    """Function-calling loop over ``litellm.acompletion`` for any litellm model name."""

    baseline = False

    def __init__(self, model: str, settings: LLMSettings | None = None) -> None:
        self.name = model
        self.settings = settings or LLMSettings()
        self._limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = \
            weakref.WeakKeyDictionary()

    def _limit(self) -> asyncio.Semaphore:
        """Per-model connection limit, one semaphore per event loop."""
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits[loop] = asyncio.Semaphore(self.settings.model_connections)
        return self._limits[loop]

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        """One model call under the connection limit and the retry policy."""
        litellm = import_litellm()
        kw = call_kwargs(self.name, self.settings)

        async def once() -> Any:
            async with self._limit():
                return await litellm.acompletion(messages=messages, tools=tools, **kw)

        return await with_retries(once, self.name, self.settings)

    async def run(self, ctx: EpisodeContext) -> None:
        """Play one episode: call the model, run its tool calls, stop at a reply without any."""
        messages, tools = initial_messages(ctx), tool_list(ctx)
        for turn in range(self.settings.max_turns):
            response = await self.complete(messages, tools)
            ctx.turns += 1
            usage = usage_of(response)
            ctx.add_usage(**usage)
            msg = response.choices[0].message
            calls = list(getattr(msg, "tool_calls", None) or [])
            text = msg.content or ""
            ctx.trajectory.append({"role": "assistant", "content": text, "turn": turn, "usage": usage})
            if not calls:
                ctx.finish(text)
                return
            messages.append({"role": "assistant", "content": text or None, "tool_calls": [
                {"id": c.id or f"call_{turn}_{i}", "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments or "{}"}}
                for i, c in enumerate(calls)]})
            for i, c in enumerate(calls):
                name, raw = str(c.function.name), c.function.arguments or "{}"
                obs: Observation | str
                try:
                    args = json.loads(raw)
                except json.JSONDecodeError as exc:
                    obs = _bad_arguments(ctx, name, raw, str(exc))
                else:
                    obs = await ctx.call_tool_async(name, args)  # ask_user never blocks the loop
                messages += tool_result_messages(c.id or f"call_{turn}_{i}", name, obs)
        ctx.trajectory.append({"role": "harness", "content": f"turn limit {self.settings.max_turns} reached"})



async def close_clients() -> None:
    """Close litellm's cached HTTP clients (end of session): async ones on the running loop, and the
    synchronous ones that a blocking user-simulator call may have opened."""
    import sys

    litellm = sys.modules.get("litellm")
    cache = getattr(litellm, "in_memory_llm_clients_cache", None)
    for client in list(getattr(cache, "cache_dict", {}).values()):
        for meth in ("aclose", "close"):
            fn = getattr(client, meth, None)
            is_async = asyncio.iscoroutinefunction(fn)
            if fn is None or not (is_async or (meth == "close" and not type(client).__name__.startswith("Async"))):
                continue
            try:
                await fn() if is_async else fn()
            except Exception:  # best effort: a client of another loop cannot be closed here
                log.debug("could not close a litellm client", exc_info=True)
            break
    if cache is not None:
        try:
            cache.flush_cache()
        except Exception:  # pragma: no cover - best effort
            pass
