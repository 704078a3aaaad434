#!/usr/bin/env python3
"""A small, real GPU streaming server for tokenscope's GPU check (scripts/gpu-check.sh).

Two processes, like vLLM: this one speaks HTTP (aiohttp, or a minimal asyncio HTTP/1.1 server
when aiohttp is missing) and queues requests; an engine process started with multiprocessing
(spawn) owns the GPU. The engine holds a decoder-only transformer with random weights (fp16 on
CUDA). For each request it prefills the prompt eagerly into a static KV cache, then decodes one
token per step by replaying a CUDA graph captured once at start-up. Every step ends with argmax
on the GPU and `.item()` (a device-to-host copy and a host wait: where tokenscope ends a GPU
step); the token then goes to the HTTP process over a pipe and out as an SSE frame.

Requests are served one at a time, in arrival order: concurrent requests wait in a queue, and
that waiting is what tokenscope's queue time must show.

    gpu_server.py [--port 0] [--log steps.jsonl] [--layers 8] [--d-model 1024] [--heads 16]
                  [--vocab 32000] [--max-len 2048] [--http auto|aiohttp|asyncio] [--no-gpu]

Prints `server pid S engine pid E` and then `listening on 127.0.0.1:PORT` (flushed) when ready.
With --log the engine writes one JSON line per step:
    {"step": N, "kind": "prefill"|"decode", "start_ns": ..., "end_ns": ..., "req": R, "token": I}
start_ns is time.monotonic_ns() before the step's first CUDA call, end_ns after the token's
.item() returned: CLOCK_MONOTONIC, the clock of tokenscope's timestamps.

API: POST /v1/chat/completions (OpenAI chat, stream true or false), max_tokens (default 16),
stream_options.include_usage. The prompt is never read for meaning: its length in bytes sets the
number of prompt tokens (bytes // 4, at least 8).

--no-gpu replaces the GPU by sleeps (no torch): for trying the HTTP side on a machine without one.
"""
import argparse
import asyncio
import importlib.util
import itertools
import json
import math
import multiprocessing as mp
import os
import signal
import socket
import sys
import time

CHAT_PATH = "/v1/chat/completions"
DEFAULT_MAX_TOKENS = 16
MIN_PROMPT_TOKENS = 8
BYTES_PER_TOKEN = 4
MIN_MAX_LEN = 64  # room for the start-up warm-up and timing (16 prompt + 32 decode positions)
ENGINE_START_TIMEOUT_S = 240  # import torch, CUDA context, weights, warm-up, graph capture
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def log(msg):
    print(f"gpu_server: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The engine: the GPU process. torch is imported only in engine_main, so the HTTP process
# never maps the CUDA libraries; only the engine does, as in vLLM.
# --------------------------------------------------------------------------------------------


class Engine:
    """A decoder-only transformer with random weights, batch size 1, fp16 on CUDA."""

    def __init__(self, torch, cfg):
        self.torch = torch
        self.F = torch.nn.functional
        # cuda and fp16 here; another device and dtype only to check the arithmetic on a CPU.
        dev = torch.device(cfg.get("device", "cuda"))
        dt = getattr(torch, cfg.get("dtype", "float16"))
        self.device = dev
        self.nlayers, d, self.heads = cfg["layers"], cfg["d_model"], cfg["heads"]
        self.d, self.vocab, self.max_len = d, cfg["vocab"], cfg["max_len"]
        self.hd = d // self.heads
        self.scale = 1.0 / math.sqrt(self.hd)
        torch.manual_seed(0)

        def weight(n_in, n_out):
            # Unit-variance outputs, so activations stay finite in fp16 over all the layers.
            return torch.randn(n_in, n_out, device=dev, dtype=dt) / math.sqrt(n_in)

        def ones():
            return torch.ones(d, device=dev, dtype=dt)

        self.emb = torch.randn(self.vocab, d, device=dev, dtype=dt)  # tied with the LM head
        self.pemb = torch.randn(self.max_len, d, device=dev, dtype=dt) * 0.1
        self.layers = [
            {"ln1": ones(), "wqkv": weight(d, 3 * d), "wo": weight(d, d),
             "ln2": ones(), "w1": weight(d, 4 * d), "w2": weight(4 * d, d)}
            for _ in range(self.nlayers)
        ]
        self.lnf = ones()
        # The static KV cache: fixed shape and address, so the captured graph can use it.
        shape = (self.nlayers, self.heads, self.max_len, self.hd)
        self.k_cache = torch.zeros(shape, device=dev, dtype=dt)
        self.v_cache = torch.zeros(shape, device=dev, dtype=dt)
        self.positions = torch.arange(self.max_len, device=dev)
        # The graph's static inputs: the last token and its position; it advances both itself.
        self.tok = torch.zeros(1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        self.graph = None
        self.out = None  # the graph's static output: the sampled token id, on the GPU

    def _norm(self, x, w):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * self.torch.rsqrt(var + 1e-6)).to(x.dtype) * w

    def _mlp(self, x, p):
        return self.F.gelu(self._norm(x, p["ln2"]) @ p["w1"]) @ p["w2"]

    def _qkv(self, x, p, n):
        # (n, 3d) -> three (heads, n, head_dim) views
        qkv = (self._norm(x, p["ln1"]) @ p["wqkv"]).view(n, 3, self.heads, self.hd)
        return qkv.permute(1, 2, 0, 3).unbind(0)

    def _logits_argmax(self, x):
        return (self._norm(x, self.lnf) @ self.emb.t()).argmax(-1)

    def prefill(self, n, seed):
        """Eager forward over n prompt tokens from position 0; fills the KV cache, sets the
        graph's inputs for the first decode step and returns the first token (on the GPU)."""
        # Prompt token ids made on the GPU: a host-to-device copy of a pageable tensor would
        # add a host wait (cudaMemcpy + sync) and split the prefill into two GPU steps.
        ids = (self.torch.arange(n, device=self.device) * 7919 + seed) % self.vocab
        return self.prefill_ids(ids)

    def prefill_ids(self, ids):
        """prefill() for given token ids (a 1-D tensor on the device)."""
        n = ids.shape[0]
        x = self.emb.index_select(0, ids) + self.pemb[:n]
        for li, p in enumerate(self.layers):
            q, k, v = self._qkv(x, p, n)
            self.k_cache[li, :, :n] = k
            self.v_cache[li, :, :n] = v
            a = self.F.scaled_dot_product_attention(q.unsqueeze(0), k.unsqueeze(0),
                                                    v.unsqueeze(0), is_causal=True)[0]
            x = x + a.transpose(0, 1).reshape(n, self.d) @ p["wo"]
            x = x + self._mlp(x, p)
        nxt = self._logits_argmax(x[-1:])
        self.tok.copy_(nxt)
        self.pos.fill_(n)
        return nxt

    def _decode_body(self):
        """One decode step for the token in self.tok at self.pos: what the graph captures.
        Attention runs over the whole static cache with the positions after pos masked."""
        t = self.torch
        x = self.emb.index_select(0, self.tok) + self.pemb.index_select(0, self.pos)
        hidden = self.positions > self.pos  # cache slots this token may not see
        for li, p in enumerate(self.layers):
            q, k, v = self._qkv(x, p, 1)
            kc, vc = self.k_cache[li], self.v_cache[li]
            kc.index_copy_(1, self.pos, k)
            vc.index_copy_(1, self.pos, v)
            s = t.matmul(q, kc.transpose(1, 2)) * self.scale  # (heads, 1, max_len)
            s = s.masked_fill(hidden, float("-inf"))
            a = t.matmul(t.softmax(s.float(), -1).to(s.dtype), vc)  # (heads, 1, head_dim)
            x = x + a.transpose(0, 1).reshape(1, self.d) @ p["wo"]
            x = x + self._mlp(x, p)
        out = self._logits_argmax(x)
        self.tok.copy_(out)  # the next step's input, without a trip through the host
        self.pos.add_(1)
        return out

    def warm_up_and_capture(self):
        """Warm up the eager and graph paths, then capture the decode step once."""
        t = self.torch
        for n in (8, 16, 64, 200):
            self.prefill(min(n, self.max_len // 2), 0).item()
        self.prefill(8, 0).item()  # the warm-up decode steps below start at position 8
        # PyTorch's recipe: warm up on a side stream, then capture.
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for _ in range(3):
                self._decode_body()
        t.cuda.current_stream().wait_stream(side)
        t.cuda.synchronize()
        self.graph = t.cuda.CUDAGraph()
        with t.cuda.graph(self.graph):
            self.out = self._decode_body()
        t.cuda.synchronize()

    def time_steps(self, n_prompt=16, n_decode=32):
        """Milliseconds of one prefill and one decode step, for the start-up message."""
        t0 = time.monotonic_ns()
        self.prefill(n_prompt, 0).item()
        t1 = time.monotonic_ns()
        for _ in range(n_decode):
            self.graph.replay()
            self.out.item()
        t2 = time.monotonic_ns()
        return (t1 - t0) / 1e6, (t2 - t1) / 1e6 / n_decode

    def generate(self, n_prompt, max_tokens, seed):
        """Yields (kind, token_id, start_ns, end_ns) per generated token: one prefill step,
        then max_tokens - 1 decode steps (one graph replay and one .item() each)."""
        t0 = time.monotonic_ns()
        tok = self.prefill(n_prompt, seed).item()
        yield "prefill", tok, t0, time.monotonic_ns()
        for _ in range(max_tokens - 1):
            t0 = time.monotonic_ns()
            self.graph.replay()
            tok = self.out.item()
            yield "decode", tok, t0, time.monotonic_ns()


class SleepEngine:
    """--no-gpu: the same protocol with sleeps instead of GPU work."""

    max_len = 1 << 20

    def generate(self, n_prompt, max_tokens, seed):
        t0 = time.monotonic_ns()
        time.sleep(0.005 + n_prompt * 1e-5)
        yield "prefill", seed % 32000, t0, time.monotonic_ns()
        for i in range(max_tokens - 1):
            t0 = time.monotonic_ns()
            time.sleep(0.002)
            yield "decode", (seed + i) % 32000, t0, time.monotonic_ns()


def _die_with_parent():
    """Ask the kernel to SIGTERM the engine when the HTTP process dies (Linux prctl)."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except Exception:
        pass


def engine_main(work, results, cfg, log_path):
    """Entry point of the engine process. Receives (req_id, prompt_tokens, max_tokens) jobs on
    `work` and answers on `results` with ("tok", req_id, token_id) per token and
    ("done", req_id, tokens, error) at the end. Both are one-way pipes, not socketpairs, so the
    tracer's socket tracing never mistakes this traffic for a connection."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the HTTP process
    _die_with_parent()
    try:
        if cfg["no_gpu"]:
            engine, info = SleepEngine(), {"device": "none (--no-gpu: sleeps)"}
        else:
            import torch

            torch.set_grad_enabled(False)
            t0 = time.monotonic()
            engine = Engine(torch, cfg)
            engine.warm_up_and_capture()
            prefill_ms, decode_ms = engine.time_steps()
            params = sum(w.numel() for p in engine.layers for w in p.values())
            params += engine.emb.numel() + engine.pemb.numel()
            info = {
                "device": torch.cuda.get_device_name(0),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "params_M": round(params / 1e6, 1),
                "layers": cfg["layers"], "d_model": cfg["d_model"], "heads": cfg["heads"],
                "vocab": cfg["vocab"], "max_len": cfg["max_len"],
                "startup_s": round(time.monotonic() - t0, 2),
                "prefill16_ms": round(prefill_ms, 3),
                "decode_step_ms": round(decode_ms, 3),
            }
    except Exception as e:  # report start-up failures to the parent instead of a bare exit
        results.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    results.send(("ready", info))

    steps = open(log_path, "w") if log_path else None
    nstep = 0
    while True:
        try:
            job = work.recv()
        except (EOFError, OSError):
            break  # the HTTP process is gone
        if job is None:
            break
        req_id, n_prompt, max_tokens = job
        produced, error = 0, None
        try:
            for i, (kind, tok, start_ns, end_ns) in enumerate(
                    engine.generate(n_prompt, max_tokens, req_id)):
                results.send(("tok", req_id, tok))  # the token first: logging can wait
                produced += 1
                if steps:
                    steps.write(json.dumps({"step": nstep, "kind": kind, "start_ns": start_ns,
                                            "end_ns": end_ns, "req": req_id, "token": i}) + "\n")
                nstep += 1
        except (BrokenPipeError, EOFError, OSError):
            break
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        if steps:
            steps.flush()
        try:
            results.send(("done", req_id, produced, error))
        except OSError:
            break
    if steps:
        steps.close()


def start_engine(args):
    """Starts the engine process and waits until it is ready; returns (process, work pipe,
    results pipe, info). Exits with a message when the engine fails to start."""
    cfg = {"layers": args.layers, "d_model": args.d_model, "heads": args.heads,
           "vocab": args.vocab, "max_len": args.max_len, "no_gpu": args.no_gpu}
    return spawn_engine(engine_main, cfg, args.log, "gpu-engine", ENGINE_START_TIMEOUT_S)


def spawn_engine(target, cfg, log_path, name, timeout_s):
    """target(work, results, cfg, log_path) in a spawned process, with a pipe each way;
    returns (process, work pipe, results pipe, the info of its "ready" message), waited for
    up to timeout_s (wait_engine). scripts/cb_server.py's engine too."""
    ctx = mp.get_context("spawn")
    work_r, work_w = ctx.Pipe(duplex=False)
    res_r, res_w = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(work_r, res_w, cfg, log_path), name=name,
                       daemon=True)
    proc.start()
    # Close our copies of the engine's ends, so either side sees EOF when the other dies.
    work_r.close()
    res_w.close()
    return proc, work_w, res_r, wait_engine(proc, res_r, timeout_s)


def wait_engine(proc, res_r, timeout_s):
    """The engine's ("ready", info) message, waited for up to timeout_s; exits with the reason
    when the engine fails or dies first (scripts/cb_server.py's engine too)."""
    deadline = time.monotonic() + timeout_s
    msg = None
    while msg is None:
        if res_r.poll(0.5):
            try:
                msg = res_r.recv()
            except EOFError:
                msg = ("fatal", "the engine exited during start-up")
        elif not proc.is_alive():
            msg = ("fatal", f"the engine exited during start-up (exit code {proc.exitcode})")
        elif time.monotonic() > deadline:
            msg = ("fatal", f"the engine was not ready after {timeout_s} s")
    if msg[0] != "ready":
        print(f"{os.path.basename(sys.argv[0])}: cannot start: {msg[1]}", file=sys.stderr,
              flush=True)
        if proc.is_alive():
            proc.terminate()
        proc.join(5)
        sys.exit(1)
    return msg[1]


# --------------------------------------------------------------------------------------------
# The HTTP process: parse requests, queue them, stream the engine's tokens as SSE.
# --------------------------------------------------------------------------------------------


class BadRequest(Exception):
    pass


class ChatRequest:
    """What a response depends on: model, stream, max_tokens, usage, prompt length. max_len
    bounds prompt + output; a max_tokens past half of it is cut to that (strict: refused).
    Also the request of scripts/cb_server.py, with its own model name and id prefix."""

    _ids = itertools.count(1)
    MODEL = "gpu-check"
    ID_PREFIX = "chatcmpl-gpu-"
    STRICT = False

    def __init__(self, raw, max_len):
        try:
            body = json.loads(raw or b"{}")
        except ValueError as e:
            raise BadRequest(f"invalid JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        self.id = next(self._ids)
        self.model = str(body.get("model") or self.MODEL)
        self.stream = bool(body.get("stream", False))
        try:
            self.max_tokens = int(body.get("max_tokens") or DEFAULT_MAX_TOKENS)
        except (TypeError, ValueError):
            raise BadRequest("max_tokens must be an integer") from None
        if self.max_tokens < 1:
            raise BadRequest("max_tokens must be at least 1")
        if self.STRICT and self.max_tokens > max_len // 2:
            raise BadRequest(f"max_tokens must be within 1..{max_len // 2}")
        self.max_tokens = min(self.max_tokens, max_len // 2)
        opts = body.get("stream_options") or {}
        self.include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        n = max(MIN_PROMPT_TOKENS, prompt_bytes(body) // BYTES_PER_TOKEN)
        self.prompt_tokens = min(n, max_len - self.max_tokens)
        self.chat_id = f"{self.ID_PREFIX}{self.id}"
        self.created = int(time.time())

    def chunk(self, choices, usage=None):
        obj = {"id": self.chat_id, "object": "chat.completion.chunk", "created": self.created,
               "model": self.model, "choices": choices}
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    def delta(self, delta, finish_reason=None):
        return self.chunk([{"index": 0, "delta": delta, "finish_reason": finish_reason}])

    def usage(self, completion_tokens):
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens}


def prompt_bytes(body):
    """Bytes of prompt text in messages[].content (string or text parts) and prompt."""
    n = 0
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            n += len(content.encode())
        elif isinstance(content, list):
            n += sum(len(str(part.get("text", "")).encode())
                     for part in content if isinstance(part, dict))
    if isinstance(body.get("prompt"), str):
        n += len(body["prompt"].encode())
    return n


def token_text(token_id):
    return f"tok{token_id} "


class Job:
    """One request's work for the engine, and the tokens coming back."""

    def __init__(self, req):
        self.req = req
        self.tokens = asyncio.Queue()  # token ids, then None at the end
        self.produced = 0
        self.error = None
        self.finished = asyncio.get_running_loop().create_future()

    async def __aiter__(self):
        while True:
            tok = await self.tokens.get()
            if tok is None:
                return
            yield tok

    def finish(self, error=None):
        if not self.finished.done():
            self.error = error
            self.tokens.put_nowait(None)
            self.finished.set_result(None)


class Scheduler:
    """Serves one request at a time, in arrival order: a FIFO, one worker task, and the engine
    behind two pipes. The results pipe is read from the event loop (add_reader)."""

    def __init__(self, work, results, on_engine_gone):
        self.loop = asyncio.get_running_loop()
        self.work, self.results = work, results
        self.queue = asyncio.Queue()
        self.current = None
        self.engine_gone = False
        self.on_engine_gone = on_engine_gone
        self.loop.add_reader(results.fileno(), self._on_results)

    def submit(self, req):
        job = Job(req)
        if self.engine_gone:
            job.finish("the engine is gone")
        else:
            self.queue.put_nowait(job)
        return job

    async def run(self):
        while True:
            job = await self.queue.get()
            if self.engine_gone:
                job.finish("the engine is gone")
                continue
            self.current = job
            try:
                self.work.send((job.req.id, job.req.prompt_tokens, job.req.max_tokens))
            except OSError:
                self._gone()
            await job.finished
            self.current = None

    def _on_results(self):
        while True:
            try:
                if not self.results.poll():
                    return
                msg = self.results.recv()
            except (EOFError, OSError):
                self._gone()
                return
            job = self.current
            if job is None or msg[1] != job.req.id:
                continue  # nothing waits for it (cannot happen: one job at a time)
            if msg[0] == "tok":
                job.produced += 1
                job.tokens.put_nowait(msg[2])
            elif msg[0] == "done":
                job.finish(msg[3])

    def _gone(self):
        if self.engine_gone:
            return
        self.engine_gone = True
        self.loop.remove_reader(self.results.fileno())
        log("the engine process is gone; stopping")
        if self.current:
            self.current.finish("the engine is gone")
        while not self.queue.empty():
            self.queue.get_nowait().finish("the engine is gone")
        self.on_engine_gone()


async def stream_frames(sched, req):
    """The SSE body of one streamed chat request, frame by frame. The role frame goes out at
    once, as vLLM's does; content frames follow the engine's tokens."""
    yield req.delta({"role": "assistant", "content": ""})
    job = sched.submit(req)
    async for tok in job:
        yield req.delta({"content": token_text(tok)})
    if job.error:
        yield b"data: " + json.dumps({"error": {"message": job.error, "type": "server_error",
                                                "code": 500}}).encode() + b"\n\n"
    else:
        yield req.delta({}, "length")
        if req.include_usage:
            yield req.chunk([], req.usage(job.produced))
    yield DONE


async def completion_body(sched, req):
    """The stream:false answer: one JSON object after the whole generation."""
    job = sched.submit(req)
    text = "".join([token_text(tok) async for tok in job])
    if job.error:
        return 500, {"error": {"message": job.error, "type": "server_error", "code": 500}}
    return 200, {"id": req.chat_id, "object": "chat.completion", "created": req.created,
                 "model": req.model,
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                              "finish_reason": "length"}],
                 "usage": req.usage(job.produced)}


def error_body(status, message):
    return {"error": {"message": message, "type": "invalid_request_error", "code": status}}


async def start_aiohttp(sock, sched, max_len):
    """Serves on sock with aiohttp; returns a coroutine function that stops it."""
    from aiohttp import web

    async def chat(http):
        try:
            req = ChatRequest(await http.read(), max_len)
        except BadRequest as e:
            return web.json_response(error_body(400, str(e)), status=400)
        if not req.stream:
            status, body = await completion_body(sched, req)
            return web.json_response(body, status=status)
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(http)
        try:
            async for frame in stream_frames(sched, req):
                await resp.write(frame)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away; the engine finishes the request regardless
        return resp

    app = web.Application()
    app.router.add_post(CHAT_PATH, chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()

    async def stop():
        await runner.cleanup()

    return stop


async def start_asyncio(sock, sched, max_len):
    """Serves on sock with a minimal HTTP/1.1 server (keep-alive, Content-Length bodies,
    chunked SSE responses): the fallback when aiohttp is not installed."""

    async def send_json(writer, status, obj, keep):
        body = json.dumps(obj).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error",
                  501: "Not Implemented"}.get(status, "Error")
        close = "" if keep else "Connection: close\r\n"
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n{close}\r\n".encode() + body)
        await writer.drain()

    async def one_request(reader, writer):
        """Serves one request; returns whether the connection stays open."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return False
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await send_json(writer, 400, error_body(400, "bad request line"), False)
            return False
        method, path, version = parts
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            await send_json(writer, 501, error_body(501, "chunked request bodies"), False)
            return False
        try:
            body = await reader.readexactly(int(headers.get("content-length") or 0))
        except (ValueError, asyncio.IncompleteReadError, ConnectionError):
            return False
        if method != "POST" or path.split("?")[0] != CHAT_PATH:
            await send_json(writer, 404, error_body(404, f"no route {method} {path}"), keep)
            return keep
        try:
            req = ChatRequest(body, max_len)
        except BadRequest as e:
            await send_json(writer, 400, error_body(400, str(e)), keep)
            return keep
        if not req.stream:
            status, obj = await completion_body(sched, req)
            await send_json(writer, status, obj, keep)
            return keep
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n"
                     + (b"" if keep else b"Connection: close\r\n") + b"\r\n")
        await writer.drain()
        async for frame in stream_frames(sched, req):
            # One chunk per frame, one write each: what uvicorn + h11 put on the wire.
            writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return keep

    async def handle(reader, writer):
        try:
            while await one_request(reader, writer):
                pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, sock=sock)

    async def stop():
        server.close()
        await server.wait_closed()

    return stop


async def serve(args, engine, work, results):
    loop = asyncio.get_running_loop()
    stop_event = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_event.set)
    gone = []
    sched = Scheduler(work, results, lambda: (gone.append(1), stop_event.set()))
    worker = asyncio.create_task(sched.run())

    sock = listen_socket(args.port)
    http = args.http
    if http == "auto":
        http = "aiohttp" if importlib.util.find_spec("aiohttp") else "asyncio"
    max_len = args.max_len if not args.no_gpu else SleepEngine.max_len
    start = start_aiohttp if http == "aiohttp" else start_asyncio
    stop_http = await start(sock, sched, max_len)
    log(f"HTTP server: {http}")
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)

    await stop_event.wait()
    worker.cancel()
    await shut_down(stop_http, work)
    return 1 if gone else 0


def listen_socket(port):
    """A non-blocking listening socket on 127.0.0.1:port (0: any free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def shut_down(stop_http, work):
    """Stops the HTTP side (at most 5 s), then tells the engine to exit."""
    try:
        await asyncio.wait_for(stop_http(), 5)
    except (asyncio.TimeoutError, Exception):  # noqa: BLE001 (stopping regardless)
        pass
    try:
        work.send(None)  # the engine's signal to exit
    except OSError:
        pass


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free)")
    ap.add_argument("--log", help="the engine writes one JSON line per GPU step here")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-len", type=int, default=2048, help="KV cache length (tokens)")
    ap.add_argument("--http", choices=("auto", "aiohttp", "asyncio"), default="auto")
    ap.add_argument("--no-gpu", action="store_true", help="sleeps instead of a GPU (testing)")
    args = ap.parse_args()
    if args.d_model % args.heads:
        ap.error("--d-model must be a multiple of --heads")
    if args.max_len < MIN_MAX_LEN:
        ap.error(f"--max-len must be at least {MIN_MAX_LEN}")
    return args


def run_server(engine, info, serving, join_s):
    """Says the pids and serves until stopped (serving: the HTTP side's coroutine); then waits
    join_s for the engine to exit, and exits with serving's status."""
    log("engine ready: " + json.dumps(info))
    print(f"server pid {os.getpid()} engine pid {engine.pid}", flush=True)
    try:
        rc = asyncio.run(serving)
    except KeyboardInterrupt:
        rc = 0
    engine.join(join_s)
    if engine.is_alive():
        engine.terminate()
        engine.join(2)
    sys.exit(rc)


def main():
    args = parse_args()
    engine, work, results, info = start_engine(args)
    run_server(engine, info, serve(args, engine, work, results), 5)


if __name__ == "__main__":
    main()
