"""Request semantics shared by the Python e2e servers (fastapi_app.py, aiohttp_app.py).

The contract every e2e server implements (Go and Node copy it; see ../README.md):
POST /v1/chat/completions with model, stream, max_tokens (content frames, default 16),
stream_options.include_usage and the test controls x_token_ms (gap between content frames,
default 5), x_prefill_ms (delay before the first content frame, default 20) and x_fail
("http": 500 with a JSON error body; "stream": an error frame after half the tokens).
A stream is: a vLLM-style role-only frame at once, the prefill delay, max_tokens content frames
separated by the token delay, a finish frame, the usage frame when asked, then [DONE].

POST /v1/responses (the OpenAI Responses API, as vLLM streams it: an `event:` line, then the
event's JSON): max_output_tokens for max_tokens, input for the prompt, the same x_ controls;
x_reasoning N makes the first N deltas reasoning text. response.created and
response.in_progress at once, the prefill delay, the message item and its content part, the
deltas separated by the token delay, the done events, response.completed with usage (always:
the Responses API states it). x_fail "stream" sends response.failed after half the tokens.
"""
import argparse
import asyncio
import itertools
import json
import socket
import sys
import time

DEFAULT_MAX_TOKENS = 16
DEFAULT_TOKEN_MS = 5
DEFAULT_PREFILL_MS = 20
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"

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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_line(who, path, prefix, proc, timeout=20):
    """The first line of path starting with prefix, written by proc; who names the caller in
    the message that ends it when proc exits or timeout passes first."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{who}: {proc.args[0]} exited {proc.returncode}")
        try:
            for line in open(path):
                if line.startswith(prefix):
                    return line.strip()
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    sys.exit(f"{who}: no '{prefix}' from {proc.args[0]} in {timeout} s")


def wait_port(who, what, port, proc, timeout=20):
    """Returns once proc (what: its name in the messages) accepts on port."""
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"{who}: {what} exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{who}: {what} not listening on {port} in {timeout} s")


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
        self.max_tokens = int(body.get("max_tokens") or body.get("max_output_tokens") or
                              DEFAULT_MAX_TOKENS)
        self.reasoning = int(body.get("x_reasoning") or 0)
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


    # The Responses API (RESPONSES_PATH).

    def response(self, status, usage=None, **extra):
        obj = {"id": "resp_" + self.id, "object": "response", "created_at": self.created,
               "model": self.model, "status": status, "output": [], "usage": usage,
               "error": None, "incomplete_details": None}
        obj.update(extra)
        return obj

    def responses_usage(self, output):
        return {"input_tokens": self.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output,
                "output_tokens_details": {"reasoning_tokens": min(self.reasoning, output)},
                "total_tokens": self.prompt_tokens + output}

    async def responses_events(self):
        """The Responses API's SSE body, one event per item, sleeping as the request asks."""
        seq = itertools.count()

        def ev(type_, **fields):
            obj = {"type": type_, "sequence_number": next(seq), **fields}
            return b"event: " + type_.encode() + b"\ndata: " + json.dumps(obj).encode() + \
                b"\n\n"

        yield ev("response.created", response=self.response("in_progress"))
        yield ev("response.in_progress", response=self.response("in_progress"))
        await asyncio.sleep(self.prefill_s)
        yield ev("response.output_item.added", output_index=0,
                 item={"id": "msg_1", "type": "message", "role": "assistant", "content": [],
                       "status": "in_progress"})
        yield ev("response.content_part.added", item_id="msg_1", output_index=0,
                 content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        for i in range(self.max_tokens):
            if self.fail == "stream" and i == self.max_tokens // 2:
                yield ev("response.failed", response=self.response(
                    "failed", self.responses_usage(i),
                    error={"code": "server_error", "message": "injected"}))
                return
            if i:
                await asyncio.sleep(self.token_s)
            kind = "reasoning_text" if i < self.reasoning else "output_text"
            yield ev(f"response.{kind}.delta", item_id="msg_1", output_index=0,
                     content_index=0, delta=token_text(i))
        yield ev("response.output_text.done", item_id="msg_1", output_index=0, content_index=0,
                 text="".join(token_text(i) for i in range(self.max_tokens)))
        yield ev("response.completed",
                 response=self.response("completed", self.responses_usage(self.max_tokens)))

    async def responses_body(self):
        """The stream:false body of the Responses API."""
        await asyncio.sleep(self.prefill_s + self.token_s * max(self.max_tokens - 1, 0))
        text = "".join(token_text(i) for i in range(self.max_tokens))
        return self.response("completed", self.responses_usage(self.max_tokens), output=[{
            "id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}])


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
    for key in ("prompt", "input"):
        if isinstance(body.get(key), str):
            words += len(body[key].split())
    return max(words, 1)
