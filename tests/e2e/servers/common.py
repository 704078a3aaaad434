"""Request semantics shared by the Python e2e servers (fastapi_app.py, aiohttp_app.py).

The contract every e2e server implements (Go and Node copy it; see ../README.md):
POST /v1/chat/completions with model, stream, max_tokens (content frames, default 16),
stream_options.include_usage and the test controls x_token_ms (gap between content frames,
default 5), x_prefill_ms (delay before the first content frame, default 20) and x_fail
("http": 500 with a JSON error body; "stream": an error frame after half the tokens).
A stream is: a vLLM-style role-only frame at once, the prefill delay, max_tokens content frames
separated by the token delay, a finish frame, the usage frame when asked, then [DONE].
"""
import argparse
import asyncio
import itertools
import json
import time

DEFAULT_MAX_TOKENS = 16
DEFAULT_TOKEN_MS = 5
DEFAULT_PREFILL_MS = 20
CHAT_PATH = "/v1/chat/completions"

ERROR_HTTP = {"error": {"message": "injected", "type": "server_error", "code": 500}}
DONE = b"data: [DONE]\n\n"

_ids = itertools.count(1)


class BadRequest(Exception):
    pass


def parse_args(description, extra=None):
    """Port as first argument or --port (0 picks a free one); extra(parser) adds flags."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("port_pos", nargs="?", type=int, metavar="PORT")
    ap.add_argument("--port", type=int)
    ap.add_argument("--tls-cert", metavar="PEM",
                    help="serve TLS with this certificate (and its key, in the same file)")
    if extra:
        extra(ap)
    args = ap.parse_args()
    args.port = args.port if args.port is not None else args.port_pos
    if args.port is None:
        ap.error("a port is required (0 picks a free one)")
    return args


def announce(port):
    print(f"listening on 127.0.0.1:{port}", flush=True)


class Request:
    """One parsed chat request: everything the response depends on."""

    def __init__(self, raw):
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise BadRequest(f"invalid JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        self.model = str(body.get("model") or "e2e-model")
        self.stream = bool(body.get("stream", False))
        self.max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS)
        opts = body.get("stream_options") or {}
        self.include_usage = bool(opts.get("include_usage", False))
        self.token_s = float(body.get("x_token_ms", DEFAULT_TOKEN_MS)) / 1000.0
        self.prefill_s = float(body.get("x_prefill_ms", DEFAULT_PREFILL_MS)) / 1000.0
        self.fail = body.get("x_fail")
        self.prompt_tokens = prompt_tokens(body)
        self.id = f"chatcmpl-{next(_ids)}"
        self.created = int(time.time())

    def usage(self):
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.max_tokens,
            "total_tokens": self.prompt_tokens + self.max_tokens,
        }

    def chunk(self, choices, usage=None):
        obj = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            obj["usage"] = usage
        return sse(obj)

    def delta(self, delta, finish_reason=None):
        return self.chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    async def frames(self):
        """The SSE body, one frame per item, sleeping as the request asks."""
        yield self.delta({"role": "assistant", "content": ""})
        await asyncio.sleep(self.prefill_s)
        for i in range(self.max_tokens):
            if self.fail == "stream" and i == self.max_tokens // 2:
                yield sse(ERROR_HTTP)
                yield DONE
                return
            if i:
                await asyncio.sleep(self.token_s)
            yield self.delta({"content": token_text(i)})
        yield self.delta({}, "length")
        if self.include_usage:
            yield self.chunk([], self.usage())
        yield DONE

    async def completion(self):
        """The stream:false body, after as long as the stream would have taken."""
        await asyncio.sleep(self.prefill_s + self.token_s * max(self.max_tokens - 1, 0))
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant",
                            "content": "".join(token_text(i) for i in range(self.max_tokens))},
                "finish_reason": "length",
            }],
            "usage": self.usage(),
        }


def token_text(i):
    return f"tok{i} "


def sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def prompt_tokens(body):
    """Whitespace-separated words of the prompt: the same count in every e2e server."""
    words = 0
    for m in body.get("messages") or []:
        if isinstance(m, dict) and isinstance(m.get("content"), str):
            words += len(m["content"].split())
    if isinstance(body.get("prompt"), str):
        words += len(body["prompt"].split())
    return max(words, 1)
