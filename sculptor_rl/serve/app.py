"""The OpenAI-compatible HTTP app: `GET /v1/models`, `POST /v1/chat/completions`.

Default mode: the request's messages are the task messages of one agent-loop rollout (`run_rollouts`, the
code training uses) in a fresh environment (`--environment`: ACM, or a MemTool session whose requests are
the user messages; the environment gives its system prompt, a client's own system message follows it); the
loop's final answer is the response, and the extension field `sculptor_trace` carries
every step on request. Pass-through mode (the request has `tools`): one completion rendered with the client's
tools; its calls come back as standard `tool_calls` for the client to run.

Each request's work runs in a worker thread; all engine calls go through one `MicroBatcher`, so concurrent
requests share the engine and are generated together. A streamed answer is sent once the loop has finished
(its tool steps are not the answer); SSE comments keep the connection alive meanwhile.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..agent.chat import ChatFormat
from ..agent.loop import LoopConfig, run_rollouts
from ..engines.base import Engine, SamplingConfig
from ..engines.base import Request as EngineRequest
from ..envs import conversation_env
from ..trajectory import Trajectory
from . import protocol
from .batcher import Caller, MicroBatcher
from .config import ServeConfig
from .protocol import APIError, ChatRequest

log = logging.getLogger(__name__)

__all__ = ["build_app"]


@dataclass
class _Job:
    id: str
    request: ChatRequest
    messages: list[dict]
    tools: list[dict] | None  # pass-through mode: the client's tools
    env: object | None  # default mode: the request's environment, fresh
    prompt_ids: list[int]  # the first prompt, as the engine will see it
    max_new_tokens: int
    max_tool_calls: int
    caller: Caller
    deadline: float  # time.monotonic()
    released: bool = False


@dataclass
class _Result:
    content: str | None
    calls: list[dict] | None
    finish_reason: str
    prompt_tokens: int  # over every engine call of the request
    completion_tokens: int
    trace: dict | None = None


def build_app(engine: Engine, fmt: ChatFormat, cfg: ServeConfig, model_name: str) -> FastAPI:
    """The app serving `engine` as `model_name`; it owns a `MicroBatcher` and the request threads."""
    return _ChatApp(engine, fmt, cfg, model_name).app


class _ChatApp:
    """The routes and the state they share: limits, the batcher, the request threads, the slots in use."""

    def __init__(self, engine: Engine, fmt: ChatFormat, cfg: ServeConfig, model_name: str):
        self.fmt, self.cfg, self.model_name = fmt, cfg, model_name
        self.batcher = MicroBatcher(engine)
        try:  # a summary asks the policy through the batcher: it joins the other requests' next engine call
            self.make_env = conversation_env(cfg.environment, cfg.environment_params, fmt.tokenizer,
                                             cfg.llm(self.batcher.caller(), fmt))
        except Exception:
            self.batcher.close()  # a bad environment or LLM setting leaves no dispatcher thread behind
            raise
        limits = [n for n in (cfg.max_context_tokens, engine.max_model_len) if n]
        self.max_context = min(limits) if limits else LoopConfig.max_context_tokens
        self.pool = ThreadPoolExecutor(cfg.max_concurrent_requests, thread_name_prefix="request")
        self.in_flight = 0  # touched only on the event loop
        self.created = int(time.time())

        @asynccontextmanager
        async def lifespan(app):
            yield
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.batcher.close()

        app = FastAPI(title="sculptor-rl", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
        app.add_exception_handler(APIError, _api_error)
        app.add_exception_handler(HTTPException, _http_error)
        app.add_exception_handler(Exception, _internal_error)
        if cfg.api_key:
            app.add_middleware(_RequireKey, key=cfg.api_key)
        app.add_api_route("/health", self.health, methods=["GET"])
        app.add_api_route("/v1/models", self.models, methods=["GET"])
        app.add_api_route("/v1/chat/completions", self.chat, methods=["POST"])
        app.state.batcher = self.batcher  # for introspection (batch sizes) by tests and benchmarks
        self.app = app

    # ---- routes -------------------------------------------------------------------------------------------------

    async def health(self) -> Response:
        """200 once the server answers (as vLLM's `/health`): for probes and load balancers, no key needed."""
        return Response(status_code=200)

    async def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": self.created,
                                            "owned_by": "sculptor-rl", "max_model_len": self.max_context}]}

    async def chat(self, request: Request) -> Response:
        if self.in_flight >= self.cfg.max_concurrent_requests:
            raise APIError(429, f"the server is busy ({self.in_flight} requests in flight); retry later",
                           type="rate_limit_error", code="rate_limit_exceeded")
        self.in_flight += 1
        try:
            req = protocol.parse_request(await self._body(request))
            job = await asyncio.wrap_future(self.pool.submit(_no_stop_iteration, self._prepare, req))
        except BaseException:
            self.in_flight -= 1
            raise
        # from here on the job holds the slot; `_release` frees it exactly once
        work = self.pool.submit(_no_stop_iteration, self._run, job)
        if req.stream:
            return StreamingResponse(self._stream(job, work), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"},
                                     background=BackgroundTask(self._release, job))
        try:
            result = await self._wait(job, work, request)
        except APIError:
            raise
        except Exception:  # answered here, not by the app-wide handler, which makes uvicorn drop the connection
            log.exception("%s failed", job.id)
            return JSONResponse(_INTERNAL.body(), status_code=_INTERNAL.status)
        finally:
            self._release(job)
        if result is None:  # the client left
            return Response(status_code=499)
        return JSONResponse(protocol.completion(
            job.id, self.model_name, result.content, result.calls, result.finish_reason,
            protocol.usage(result.prompt_tokens, result.completion_tokens), result.trace))

    # ---- request handling ---------------------------------------------------------------------------------------

    async def _body(self, request: Request) -> bytes:
        limit = self.cfg.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise _too_large(limit) if length.isdigit() else APIError(400, "invalid Content-Length header")

        async def read() -> bytes:
            body = bytearray()
            async for piece in request.stream():
                body += piece
                if len(body) > limit:
                    raise _too_large(limit)
            return bytes(body)

        try:
            return await asyncio.wait_for(read(), self.cfg.request_timeout)
        except asyncio.TimeoutError:
            raise APIError(408, "the request body did not arrive in time") from None
        except ClientDisconnect:
            raise APIError(400, "the client disconnected while sending the body") from None

    def _prepare(self, req: ChatRequest) -> _Job:
        """Validate what the wire format cannot (limits, model, mode) and render the first prompt."""
        cfg = self.cfg
        if req.model != self.model_name:
            raise APIError(404, f"model {req.model!r} is not served here; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")
        if len(req.messages) > cfg.max_messages:
            raise APIError(400, f"{len(req.messages)} messages; this server takes at most {cfg.max_messages}",
                           param="messages")
        asked = req.max_completion_tokens or req.max_tokens
        if asked is not None and asked > cfg.max_new_tokens:
            raise APIError(400, f"max_tokens={asked}; this server generates at most {cfg.max_new_tokens} tokens "
                                "per completion", param="max_tokens")
        max_tool_calls = req.sculptor.max_tool_calls
        if max_tool_calls is not None and max_tool_calls > cfg.max_tool_calls:
            raise APIError(400, f"sculptor.max_tool_calls={max_tool_calls}; this server allows at most "
                                f"{cfg.max_tool_calls}", param="sculptor.max_tool_calls")
        messages = protocol.chat_messages(req)
        tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
        env = None
        if tools is None:
            bad = next((i for i, m in enumerate(messages) if m["role"] == "tool" or "tool_calls" in m), None)
            if bad is not None:
                raise APIError(400, f"messages.{bad}: tool messages and tool_calls need the request's `tools` "
                                    "(pass-through mode); without `tools` the server runs its own "
                                    f"{self.cfg.environment} "
                                    "environment", param=f"messages.{bad}")
            try:
                env = self.make_env(messages, req.seed or 0)
            except ValueError as e:
                raise APIError(400, f"the {self.cfg.environment} environment cannot take these messages: {e}",
                               param="messages") from None
        try:
            prompt_ids = self.fmt.head_ids(env.render(), env.tools) if env else self.fmt.head_ids(messages, tools)
        except Exception as e:  # the template rejects this conversation (jinja2 raises many kinds)
            raise APIError(400, f"the chat template cannot render these messages: {e}", param="messages") from None
        if len(prompt_ids) >= self.max_context:
            raise APIError(400, f"the messages take {len(prompt_ids)} tokens; this server's context limit is "
                                f"{self.max_context} tokens (prompt and completions)", param="messages",
                           code="context_length_exceeded")
        sampling = SamplingConfig(temperature=cfg.temperature if req.temperature is None else req.temperature,
                                  top_p=cfg.top_p if req.top_p is None else req.top_p, seed=cfg.seed)
        return _Job(id=protocol.new_id(), request=req, messages=messages, tools=tools, env=env,
                    prompt_ids=prompt_ids, max_new_tokens=asked or cfg.max_new_tokens,
                    max_tool_calls=cfg.max_tool_calls if max_tool_calls is None else max_tool_calls,
                    caller=self.batcher.caller(sampling), deadline=time.monotonic() + cfg.request_timeout)

    def _run(self, job: _Job) -> _Result:
        start = time.perf_counter()
        result = self._passthrough(job) if job.tools is not None else self._agent(job)
        log.info("%s %s: %s, %d prompt + %d completion tokens, %.2fs", job.id,
                 "pass-through" if job.tools is not None else "agent", result.finish_reason, result.prompt_tokens,
                 result.completion_tokens, time.perf_counter() - start)
        return result

    def _agent(self, job: _Job) -> _Result:
        """One agent-loop rollout of the request's messages in its fresh environment; no answer, so no score."""
        loop = LoopConfig(max_tool_calls=job.max_tool_calls, max_context_tokens=self.max_context,
                          max_new_tokens=job.max_new_tokens)
        (traj,) = run_rollouts([job.env.task], job.caller, self.fmt, lambda t, i: job.env, loop, progress=False)
        last = traj.steps[-1]
        if traj.stop_reason == "answer":
            content, finish = traj.answer, last.finish_reason
        else:  # a cap stopped the loop: what the last completion said besides its calls
            content, finish = self.fmt.parser.parse(last.text).content, "length"
        return _Result(content, None, finish, sum(len(s.prompt_ids) for s in traj.steps), traj.generated_tokens,
                       _trace(traj) if job.request.sculptor.return_trace else None)

    def _passthrough(self, job: _Job) -> _Result:
        """One completion with the client's tools; well-formed calls come back as `tool_calls`."""
        room = self.max_context - len(job.prompt_ids)
        (out,) = job.caller.generate([EngineRequest(prompt_ids=job.prompt_ids, messages=job.messages,
                                                    max_new_tokens=min(job.max_new_tokens, room))])
        generated = len(out.token_ids if out.token_ids is not None else self.fmt.completion_ids(out.text))
        # the parser reads the model's own call markers, which the engine's text may have dropped as special tokens
        text = out.text if out.token_ids is None else self.fmt.strip_stop(self.fmt.decode(out.token_ids))
        parsed = self.fmt.parser.parse(text, job.tools)
        calls = parsed.calls if job.request.tool_choice != "none" else []
        if calls and all(c.error is None and isinstance(c.arguments, dict) for c in calls):
            return _Result(parsed.content or None, protocol.tool_calls(calls), "tool_calls", len(job.prompt_ids),
                           generated)
        # no calls, or a malformed one: the text as generated (as vLLM's tool parsers do)
        return _Result(out.text, None, out.finish_reason, len(job.prompt_ids), generated)

    async def _wait(self, job: _Job, work: Future, request: Request) -> _Result | None:
        """The job's result; 504 after the deadline; None when the client disconnected (its loop is stopped)."""
        fut = asyncio.wrap_future(work)
        while True:
            remaining = job.deadline - time.monotonic()
            done, _ = await asyncio.wait({fut}, timeout=max(0.0, min(1.0, remaining)))
            if done:
                return fut.result()
            if remaining <= 0:
                job.caller.cancelled.set()
                raise _timeout(self.cfg.request_timeout)
            if await request.is_disconnected():
                job.caller.cancelled.set()
                return None

    async def _stream(self, job: _Job, work: Future):
        """SSE: the role, keep-alive comments while the loop runs, the answer in pieces, the finish, [DONE]."""
        cid, model = job.id, self.model_name
        try:
            yield protocol.sse(protocol.chunk(cid, model, {"role": "assistant", "content": ""}))
            try:
                fut = asyncio.wrap_future(work)
                while True:
                    remaining = job.deadline - time.monotonic()
                    done, _ = await asyncio.wait({fut}, timeout=max(0.0, min(self.cfg.keepalive_interval, remaining)))
                    if done:
                        break
                    if remaining <= 0:
                        raise _timeout(self.cfg.request_timeout)
                    yield ": keep-alive\n\n"
                result = fut.result()
                for piece in protocol.stream_pieces(result.content or ""):
                    yield protocol.sse(protocol.chunk(cid, model, {"content": piece}))
                if result.calls:
                    deltas = [{"index": i, **c} for i, c in enumerate(result.calls)]
                    yield protocol.sse(protocol.chunk(cid, model, {"tool_calls": deltas}))
                extra = {} if result.trace is None else {"sculptor_trace": result.trace}
                yield protocol.sse(protocol.chunk(cid, model, {}, result.finish_reason, **extra))
                options = job.request.stream_options
                if options is not None and options.include_usage:
                    use = protocol.usage(result.prompt_tokens, result.completion_tokens)
                    yield protocol.sse(protocol.chunk(cid, model, None, usage=use))
            except APIError as e:
                yield protocol.sse(e.body())
            except Exception:
                log.exception("%s failed while streaming", cid)
                yield protocol.sse(_INTERNAL.body())
            yield protocol.sse("[DONE]")
        finally:
            self._release(job)

    def _release(self, job: _Job) -> None:
        """Free the request's slot and stop its loop if still running (idempotent; on the event loop)."""
        if not job.released:
            job.released = True
            job.caller.cancelled.set()
            self.in_flight -= 1


def _trace(traj: Trajectory) -> dict:
    return {
        "stop_reason": traj.stop_reason, "tool_calls": traj.num_tool_calls,
        "context_tokens_before": traj.context_tokens_before, "context_tokens_after": traj.context_tokens_after,
        "steps": [{"text": s.text, "prompt_tokens": len(s.prompt_ids), "completion_tokens": len(s.completion_ids),
                   "finish_reason": s.finish_reason, "calls": s.calls} for s in traj.steps],
    }


def _no_stop_iteration(fn, *args):
    """`fn(*args)` in a request thread. An asyncio future cannot take a StopIteration (an engine or env may leak
    one): it would never resolve and the request would hold its slot forever, so it is raised as a RuntimeError."""
    try:
        return fn(*args)
    except StopIteration as e:
        raise RuntimeError(f"StopIteration escaped {fn.__name__}") from e


def _too_large(limit: int) -> APIError:
    return APIError(413, f"the request body is larger than this server's limit of {limit} bytes",
                    code="request_too_large")


def _timeout(seconds: float) -> APIError:
    return APIError(504, f"the request did not finish within {seconds:g} s", type="timeout_error", code="timeout")


_INTERNAL = APIError(500, "internal server error (logged on the server)", type="server_error")


async def _api_error(request: Request, e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


async def _http_error(request: Request, e: HTTPException) -> JSONResponse:  # unknown route, wrong method
    return JSONResponse(APIError(e.status_code, str(e.detail)).body(), status_code=e.status_code, headers=e.headers)


async def _internal_error(request: Request, e: Exception) -> JSONResponse:
    return JSONResponse(_INTERNAL.body(), status_code=500)


class _RequireKey:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer KEY` (unknown paths too), but for
    `GET /health`, which a probe sends without one and which tells nothing but that the server is up."""

    def __init__(self, app, key: str):
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not (scope["path"] == "/health" and scope["method"] == "GET"):
            scheme, _, token = dict(scope["headers"]).get(b"authorization", b"").partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
                err = APIError(401, "missing or incorrect API key; send it as `Authorization: Bearer KEY`",
                               code="invalid_api_key")
                response = JSONResponse(err.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
