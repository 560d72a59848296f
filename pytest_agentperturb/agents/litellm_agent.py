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
the local price map, so importing it never reaches the network; the session
calls :meth:`LiteLLMAgent.prepare` in pytest's main thread before the first
episode, so the import (seconds) never stalls the episodes sharing the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextvars
import datetime
import email.utils
import json
import logging
import math
import os
import re
import sys
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from ..model.context import ASK_USER, EpisodeContext
from ..model.trajectory import harness_note, tool_call, tool_result
from ..model.errors import InfrastructureError
from ..model.heap import collector_paused
from ..model.options import LLMSettings
from ..model.protocols import ERROR_PREFIX, Observation
from ..model.redact import redact_text

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
    ready = sys.modules.get("litellm")
    if ready is not None and getattr(ready, "_agentperturb_warm", False):
        return ready
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with collector_paused():   # about a million objects that live as long as the process (a sixth of the time)
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
    """A model call failed; the episode is an ERROR, never a FAIL.

    ``retry_after``: seconds the provider asked to wait (its ``Retry-After``
    header), when it said.
    """

    retry = False
    retry_after: float | None = None


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


_KEY_SHAPE = re.compile(r"\b(sk|pk|rk|key|token)-[A-Za-z0-9_\-]{6,}", re.I)


def redact(text: str) -> str:
    """``text`` without secrets: every configured secret (:mod:`~..model.redact`) and key-shaped words."""
    return _KEY_SHAPE.sub(lambda m: m.group(1) + "-***", redact_text(text))


def key_variable(model: str) -> str:
    """The environment variable litellm reads the key of ``model``'s provider from."""
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return {"ollama": "OLLAMA_API_KEY (usually none needed)", "ollama_chat": "OLLAMA_API_KEY (usually none needed)",
            "vertex_ai": "GOOGLE_APPLICATION_CREDENTIALS"}.get(provider, f"{provider.upper()}_API_KEY")


def retry_after(exc: BaseException) -> float | None:
    """Seconds a provider's error reply asks to wait (``retry-after-ms`` or ``Retry-After``), if it says."""
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None or not hasattr(headers, "get"):
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000.0) if math.isfinite(float(ms)) else None
        raw = headers.get("retry-after")
        if raw is None:
            return None
        try:
            secs = float(raw)
        except ValueError:  # an HTTP date
            when = email.utils.parsedate_to_datetime(str(raw))
            secs = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        return max(0.0, secs) if math.isfinite(secs) else None
    except (TypeError, ValueError, OverflowError):
        return None


def classify(exc: BaseException, model: str) -> ProviderError:
    """Turn a litellm/provider exception into a :class:`ProviderError` that says what to fix."""
    err = _classify(exc, model)
    err.retry_after = retry_after(exc)
    return err


def _classify(exc: BaseException, model: str) -> ProviderError:
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


def retry_delay(err: ProviderError, attempt: int, settings: LLMSettings) -> float:
    """Seconds before retry ``attempt + 1``: ``b, 2b, 4b...``, or the provider's ``Retry-After``.

    A ``Retry-After`` is honoured up to the longest delay of the configured
    schedule (``backoff x 2^(attempts - 2)``), so a provider cannot park an
    episode for longer than the user allowed.
    """
    if err.retry_after is None:
        return float(settings.backoff * 2 ** attempt)
    return min(err.retry_after, float(settings.backoff * 2 ** max(settings.attempts - 2, 0)))


async def with_retries(call: Callable[[], Awaitable[T]], model: str, settings: LLMSettings) -> T:
    """Run ``call``; retry rate-limit and timeout errors after :func:`retry_delay`."""
    for attempt in range(settings.attempts):
        try:
            return await call()
        except Exception as exc:
            err = exc if isinstance(exc, ProviderError) else classify(exc, model)
            if not err.retry or attempt + 1 >= settings.attempts:
                raise err from None
            delay = retry_delay(err, attempt, settings)
            log.warning("%s: %s; retry %d of %d in %.3g s", model, type(err).__name__, attempt + 1,
                        settings.attempts - 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover


async def with_deadline(call: Awaitable[T], model: str, settings: LLMSettings) -> T:
    """Await one model call for at most ``request_timeout`` seconds in all (:class:`RequestTimeout` after).

    litellm's ``timeout`` bounds each read, so a server that trickles one
    byte at a time would hold a call until the episode timeout; this is a
    deadline for the whole reply.  On the episode loop (:class:`LoopExecutor`)
    litellm prepares the request inline when ``model``'s provider is one
    that prepares without I/O (:func:`prepares_inline`).
    """
    token = _INLINE_PREP.set(prepares_inline(model))
    try:
        async with asyncio.timeout(settings.request_timeout):  # no extra task per call, unlike wait_for
            return await call
    except TimeoutError:
        raise RequestTimeout(f"{model}: no reply within the request timeout ({settings.request_timeout:g} s "
                             "for the whole reply)") from None
    finally:
        _INLINE_PREP.reset(token)


# -- litellm's request preparation on the episode loop -------------------------------

#: True while an episode awaits one litellm call whose preparation may run inline (see :class:`LoopExecutor`)
_INLINE_PREP: contextvars.ContextVar[bool] = contextvars.ContextVar("agentperturb_inline_prep", default=False)
#: Providers authenticated by a key from the environment: litellm prepares their requests (provider lookup,
#: parameter mapping, logging set-up) without I/O.  Cloud providers that may fetch credentials or tokens
#: while preparing (vertex_ai, bedrock, sagemaker, azure, watsonx...) are not listed: theirs stays in a thread.
INLINE_PROVIDERS = frozenset({
    "openai", "text-completion-openai", "anthropic", "hosted_vllm", "ollama", "ollama_chat", "lm_studio",
    "openrouter", "together_ai", "groq", "deepseek", "mistral", "fireworks_ai", "gemini", "xai", "cerebras",
    "deepinfra", "perplexity", "cohere", "cohere_chat", "llamafile", "litellm_proxy",
})


def prepares_inline(model: str) -> bool:
    """Whether litellm prepares ``model``'s requests without I/O (its provider is in :data:`INLINE_PROVIDERS`)."""
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return provider in INLINE_PROVIDERS


class LoopExecutor(cf.ThreadPoolExecutor):
    """The episode loop's default executor: litellm's request preparation inline, everything else in threads.

    ``litellm.acompletion`` prepares each request in the running loop's
    default executor (several milliseconds of pure CPU) and awaits that
    thread.  On a loop shared by dozens of episodes the handoff costs more
    than the work: the thread competes with the loop for the GIL, and every
    wake-up of either waits for it, which stretches every call in flight.
    So, while an episode awaits one litellm call of an inline provider
    (:func:`with_deadline`), the first job that episode submits -- litellm's
    preparation, before any network -- runs inline on the loop; later jobs
    of the call (a DNS lookup) and all others (an agent's
    ``asyncio.to_thread``, a blocking user simulator) go to threads as usual.
    """

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> cf.Future[T]:
        if not _INLINE_PREP.get():
            return super().submit(fn, *args, **kwargs)
        _INLINE_PREP.set(False)  # the submitting episode's context: only this call's first job runs inline
        fut: cf.Future[T] = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # delivered to the awaiting call, as a thread's error would be
            fut.set_exception(exc)
        return fut


def call_kwargs(model: str, settings: LLMSettings) -> dict[str, Any]:
    """Keyword arguments common to every litellm call of ``model`` (no retries inside litellm)."""
    kw: dict[str, Any] = {"model": model, "max_tokens": settings.max_tokens, "timeout": settings.request_timeout,
                          "num_retries": 0, "max_retries": 0, "drop_params": True}
    if settings.api_base:
        kw["api_base"] = settings.api_base
    return kw


def usage_of(response: Any) -> dict[str, Any]:
    """Provider-reported usage of one call: input, output, reasoning tokens and cost (None if unpriced).

    Token counts are ``None`` when the provider reported no usage.  litellm
    fills a reply without ``usage`` with zeros, and a real call always has
    prompt tokens, so zero input and output tokens also mean "not reported".
    """
    u = getattr(response, "usage", None)
    details = getattr(u, "completion_tokens_details", None)
    # litellm prices every response once (None when the model is not in its price map)
    hidden = getattr(response, "_hidden_params", None) or {}
    raw_cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    cost = float(raw_cost) if isinstance(raw_cost, (int, float)) else None
    prompt, completion = getattr(u, "prompt_tokens", None), getattr(u, "completion_tokens", None)
    if u is None or not prompt and not completion:
        return {"input_tokens": None, "output_tokens": None, "reasoning_tokens": None, "cost_usd": cost}
    return {"input_tokens": int(prompt or 0), "output_tokens": int(completion or 0),
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
    ctx.trajectory.append(tool_call(name, raw))
    obs = f"{ERROR_PREFIX}the arguments of {name} are not valid JSON ({err}); call it again with a JSON object"
    ctx.trajectory.append(tool_result(name, obs))
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
        self._kwargs = call_kwargs(model, self.settings)
        self._litellm: Any = None

    def prepare(self) -> None:
        """Import litellm now (seconds, once per process): the session calls this in pytest's main
        thread before the first episode, so the import never blocks the episode loop."""
        self._litellm = import_litellm()

    def _limit(self) -> asyncio.Semaphore:
        """Per-model connection limit, one semaphore per event loop."""
        loop = asyncio.get_running_loop()
        if loop not in self._limits:
            self._limits[loop] = asyncio.Semaphore(self.settings.model_connections)
        return self._limits[loop]

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       seed: int | None = None) -> Any:
        """One model call under the connection limit and the retry policy.

        ``seed`` (the episode seed) goes to providers that accept one;
        ``drop_params`` leaves it out for those that do not.
        """
        litellm = self._litellm or import_litellm()  # prepared by the session; else imported here, once
        kw = self._kwargs if seed is None else {**self._kwargs, "seed": seed}
        limit = self._limit()

        async def once() -> Any:
            async with limit:
                return await with_deadline(litellm.acompletion(messages=messages, tools=tools, **kw),
                                           self.name, self.settings)

        return await with_retries(once, self.name, self.settings)

    async def run(self, ctx: EpisodeContext) -> None:
        """Play one episode: call the model, run its tool calls, stop at a reply without any."""
        messages, tools = initial_messages(ctx), tool_list(ctx)
        for turn in range(self.settings.max_turns):
            response = await self.complete(messages, tools, seed=ctx.seed)
            ctx.turns += 1
            usage = usage_of(response)
            ctx.add_usage(**usage)
            choices = getattr(response, "choices", None) or []
            msg = getattr(choices[0], "message", None) if choices else None
            if msg is None:
                raise ProviderError(
                    f"{self.name}: the provider returned no choices (an empty 'choices' list). Fix: check that "
                    "the endpoint (--agentperturb-api-base) serves OpenAI-style chat completions for this model")
            calls = list(getattr(msg, "tool_calls", None) or [])
            text = ctx.reply(str(msg.content or ""), turn=turn, usage=usage)  # cut past the reply limit
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
        ctx.trajectory.append(harness_note(f"turn limit {self.settings.max_turns} reached"))



async def close_clients() -> None:
    """Close litellm's cached HTTP clients (end of session): async ones on the running loop, and the
    synchronous ones that a blocking user-simulator call may have opened."""
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
