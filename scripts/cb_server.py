#!/usr/bin/env python3
"""A continuous-batching streaming server for tokenscope's GPU check (scripts/gpu-check.sh).

Two processes, as vLLM's front end and engine core: this one speaks OpenAI-compatible HTTP
(aiohttp) and an engine process started with multiprocessing (spawn) schedules and runs the
requests. torch is imported only in the engine process.

    cb_server.py [--port 0] [--log engine.jsonl] [--engine transformers|fake] [--kv-blocks N]
                 [--block-size 32] [--max-batch-tokens 256] [--step-ms 4] [--cuda-graph auto]

Engines:
  transformers  transformers' own continuous batching (`model.init_continuous_batching()`: paged
                attention, its scheduler, its CUDA graphs where it uses them) over a random-
                weight Llama model of about 1 B parameters (bf16, built on the GPU from a
                LlamaConfig; no download, no tokenizer: requests are token ids). Ground truth
                comes from wrapping the manager's batch processor and scheduler methods at run
                time; a hook point missing in the installed version is named on stderr and in
                the log's first line, and what it would have logged is not logged.
  fake          no torch: a scheduler of its own with the same shape (a token budget per step,
                chunked prefill, a paged KV pool of --kv-blocks blocks of --block-size tokens,
                decode first, preemption by eviction and recompute when a running request needs
                a block and none is free: the newest running request is evicted) that sleeps
                --step-ms plus 20 us per token per step instead of a forward pass.

Prints `server pid S engine pid E` and then `listening on 127.0.0.1:PORT` (flushed) when ready.

The engine log (--log, JSON lines; times are time.monotonic_ns(): CLOCK_MONOTONIC, the clock of
tokenscope's timestamps):
  {"meta": {"engine": ..., "pid": E, "kv_blocks": N, "block_size": B, "max_batch_tokens": T,
            "hooks": [...], "missing": [...], ...}}                            (first line)
  {"step": N, "start_ns": ..., "end_ns": ..., "batch": [{"req": R, "prefill": P, "decode": D,
            "out": O}, ...]}
      one per engine step: the requests it computed, P prompt (or recompute) tokens and D decode
      tokens each, O the output tokens it produced for that request (0 for a prefill chunk that
      did not finish the prompt). start_ns: before the step is scheduled; end_ns: when its
      outputs reached the host.
  {"req": R, "event": E, "t_ns": ...}
      E: "arrival" (the HTTP process read the request; with "port", the client's TCP port, and
      "prompt_tokens", "max_tokens"), "scheduled" (first in a step), "first_token",
      "preempted" (evicted from the batch, its KV blocks freed), "resumed" (scheduled again after
      a preemption: its recompute starts), "finished" (with "tokens": output tokens),
      "failed" (transformers engine: the request ended with an error, with "tokens" and
      "error").
The chunk ids of the responses are "chatcmpl-R" with R the engine's request id, and the
arrival event carries the client's port: a checker joins client, tokenscope and engine by
either.

API: POST /v1/chat/completions (stream true or false), max_tokens (default 16),
stream_options.include_usage. The prompt is never read for meaning or logged: its length in
bytes sets its number of tokens (bytes // 4, at least 8).
"""
import argparse
import asyncio
import collections
import itertools
import json
import os
import queue
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_server import (BadRequest, ChatRequest, _die_with_parent, error_body,  # noqa: E402
                        listen_socket, run_server, shut_down, spawn_engine)

CHAT_PATH = "/v1/chat/completions"
MAX_SEQ_TOKENS = 4096  # prompt + output of one request; the model's max_position_embeddings
ENGINE_START_TIMEOUT_S = 300  # torch and transformers imports, weights, graph warm-up
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
FAKE_US_PER_TOKEN = 20  # the fake engine's modelled step time: --step-ms plus this per token


def log(msg):
    print(f"cb_server: {msg}", file=sys.stderr, flush=True)


def now_ns():
    return time.monotonic_ns()


# --------------------------------------------------------------------------------------------
# The engine process.
# --------------------------------------------------------------------------------------------


class TruthLog:
    """The engine's ground truth, one JSON line per step or request event (see the docstring).
    Thread-safe: the transformers engine logs from its generation thread and its intake."""

    def __init__(self, path):
        self.f = open(path, "w", buffering=1) if path else None
        self.lock = threading.Lock()
        self.steps = itertools.count()

    def write(self, obj):
        if self.f:
            line = json.dumps(obj, separators=(",", ":"))
            with self.lock:
                self.f.write(line + "\n")

    def event(self, req, event, t_ns, **extra):
        self.write({"req": req, "event": event, "t_ns": t_ns, **extra})

    def step(self, start_ns, end_ns, batch):
        self.write({"step": next(self.steps), "start_ns": start_ns, "end_ns": end_ns,
                    "batch": batch})


class FakeReq:
    def __init__(self, req, n_prompt, max_tokens):
        self.req, self.n_prompt, self.max_tokens = req, n_prompt, max_tokens
        self.generated = 0
        self.computed = 0  # tokens whose KV is in the cache
        self.blocks = 0
        self.scheduled = False
        self.preempted = False

    def to_prefill(self):
        """Tokens still to prefill: the prompt, and after an eviction the output so far too
        (the recompute)."""
        pending = self.n_prompt + self.generated - self.computed
        # One pending token after the first output is the newest output: a decode step's.
        return 0 if self.generated and pending <= 1 else pending


class FakeEngine:
    """Continuous batching without a GPU; the shape of vLLM's and transformers' schedulers."""

    def __init__(self, cfg, truth, emit):
        self.kv_blocks, self.block = cfg["kv_blocks"] or 4096, cfg["block_size"]
        self.budget, self.step_ms = cfg["max_batch_tokens"], cfg["step_ms"]
        self.truth, self.emit = truth, emit
        self.free = self.kv_blocks
        self.waiting = collections.deque()
        self.running = []  # admission order: the newest is evicted first
        self.inbox = queue.Queue()
        if self.budget < 2:
            raise ValueError("max_batch_tokens must be at least 2")

    def info(self):
        return {"engine": "fake", "kv_blocks": self.kv_blocks, "block_size": self.block,
                "max_batch_tokens": self.budget, "step_ms": self.step_ms,
                "preemption": "evict the newest running request, recompute it later",
                "hooks": [], "missing": []}

    def add(self, req, n_prompt, max_tokens):
        if -(-(n_prompt + max_tokens) // self.block) > self.kv_blocks:
            log(f"request {req} cannot fit in the KV cache: answered with no tokens")
            self.emit(req, [], True)
            return
        self.inbox.put(FakeReq(req, n_prompt, max_tokens))

    def _grow(self, r, tokens):
        """Allocates the blocks r needs to hold `tokens` more; False when the pool is short."""
        need = -(-(r.computed + tokens) // self.block) - r.blocks
        if need <= 0:
            return True
        if need > self.free:
            return False
        self.free -= need
        r.blocks += need
        return True

    def _evict(self, r, t_ns):
        self.running.remove(r)
        self.free += r.blocks
        r.blocks, r.computed, r.preempted = 0, 0, True
        self.waiting.appendleft(r)
        self.truth.event(r.req, "preempted", t_ns)

    def _schedule(self, t_ns):
        """One step's batch: [(FakeReq, prefill tokens, decode tokens)]."""
        batch, budget = [], self.budget
        # Decode first, oldest first; a request that needs a block and finds none evicts the
        # newest running request not already in this step (itself when there is none).
        for r in list(self.running):
            if r not in self.running or r.to_prefill() or budget < 1:
                continue
            while not self._grow(r, 1):
                taken = {id(b[0]) for b in batch}
                self._evict(next(v for v in reversed(self.running) if id(v) not in taken),
                            t_ns)
                if r not in self.running:
                    break
            if r in self.running:
                batch.append((r, 0, 1))
                budget -= 1
        # Then prefill chunks: running requests part-way through theirs, then waiting ones in
        # order, while the budget and the KV pool last (a request that does not fit waits).
        cands = [r for r in self.running if r.to_prefill()] + list(self.waiting)
        for r in cands:
            if budget < 1:
                break
            n = min(r.to_prefill(), budget)
            if not self._grow(r, n):
                break
            if r in self.waiting:
                self.waiting.remove(r)
                self.running.append(r)
                if r.preempted:
                    r.preempted = False
                    self.truth.event(r.req, "resumed", t_ns)
            if not r.scheduled:
                r.scheduled = True
                self.truth.event(r.req, "scheduled", t_ns)
            batch.append((r, n, 0))
            budget -= n
        return batch

    def run(self, stop):
        while not stop.is_set():
            block = not self.running and not self.waiting
            try:
                while True:
                    self.waiting.append(self.inbox.get(timeout=0.1) if block else
                                        self.inbox.get_nowait())
                    block = False
            except queue.Empty:
                pass
            if not self.running and not self.waiting:
                continue
            start = now_ns()
            batch = self._schedule(start)
            if not batch:
                # Part-prefilled requests hold every block: evict the newest, as vLLM would.
                if len(self.running) > 1:
                    self._evict(self.running[-1], start)
                time.sleep(self.step_ms / 1e3)
                continue
            tokens = sum(p + d for _, p, d in batch)
            time.sleep((self.step_ms + tokens * FAKE_US_PER_TOKEN / 1e3) / 1e3)
            end = now_ns()
            out, logged = [], []
            for r, p, d in batch:
                r.computed += p + d
                o = 1 if r.computed == r.n_prompt + r.generated else 0
                logged.append({"req": r.req, "prefill": p, "decode": d, "out": o})
                if o:
                    r.generated += 1
                    out.append(r)
            self.truth.step(start, end, logged)
            for r in out:
                if r.generated == 1:
                    self.truth.event(r.req, "first_token", end)
                done = r.generated >= r.max_tokens
                self.emit(r.req, [r.generated], done)
                if done:
                    self.running.remove(r)
                    self.free += r.blocks
                    self.truth.event(r.req, "finished", end, tokens=r.generated)


def engine_main(work, results, cfg, log_path):
    """Entry point of the engine process. Receives ("add", req, prompt tokens, max tokens,
    arrival_ns, port) on `work` (None: exit) and answers on `results` with
    ("tok", req, [token ids], done). Both are one-way pipes, not sockets, so tokenscope never
    takes this traffic for a connection."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the HTTP process
    _die_with_parent()
    truth = TruthLog(log_path)
    send_lock = threading.Lock()

    def emit(req, tokens, done):
        with send_lock:
            results.send(("tok", req, tokens, done))

    try:
        if cfg["engine"] == "fake":
            engine = FakeEngine(cfg, truth, emit)
        else:
            import cb_transformers  # torch and transformers: the engine process only

            engine = cb_transformers.TransformersEngine(cfg, truth, emit)
    except Exception as e:  # noqa: BLE001 (anything at start-up is fatal, and said)
        results.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    info = dict(engine.info(), pid=os.getpid())
    truth.write({"meta": info})
    for m in info.get("missing", []):
        log(f"hook point missing in this transformers: {m}")
    results.send(("ready", info))

    stop = threading.Event()

    def intake():
        while True:
            try:
                msg = work.recv()
            except (EOFError, OSError):
                msg = None
            if msg is None:
                stop.set()
                return
            _, req, n_prompt, max_tokens, arrival_ns, port = msg
            truth.event(req, "arrival", arrival_ns, port=port, prompt_tokens=n_prompt,
                        max_tokens=max_tokens)
            engine.add(req, n_prompt, max_tokens)

    threading.Thread(target=intake, daemon=True, name="intake").start()
    try:
        engine.run(stop)
    finally:
        if hasattr(engine, "close"):
            engine.close()


def start_engine(args):
    """Starts the engine process and waits until it is ready; returns (process, work pipe,
    results pipe, info). Exits with a message when the engine fails to start."""
    cfg = {"engine": args.engine, "kv_blocks": args.kv_blocks, "block_size": args.block_size,
           "max_batch_tokens": args.max_batch_tokens, "step_ms": args.step_ms,
           "cuda_graph": args.cuda_graph, "max_seq_tokens": MAX_SEQ_TOKENS}
    return spawn_engine(engine_main, cfg, args.log, "cb-engine", ENGINE_START_TIMEOUT_S)


# --------------------------------------------------------------------------------------------
# The HTTP process.
# --------------------------------------------------------------------------------------------


class Chat(ChatRequest):
    """One request: what its response depends on, and its tokens as they come."""

    _ids = itertools.count(1)
    MODEL = "cb-check"
    ID_PREFIX = "chatcmpl-"
    STRICT = True

    def __init__(self, raw):
        super().__init__(raw, MAX_SEQ_TOKENS)
        self.tokens = asyncio.Queue()  # lists of token ids, then None at the end
        self.produced = 0

    async def token_lists(self):
        while (toks := await self.tokens.get()) is not None:
            self.produced += len(toks)
            yield toks


class Front:
    """Hands requests to the engine and routes its tokens back, on the event loop."""

    def __init__(self, work, results, on_gone):
        self.work, self.results, self.on_gone = work, results, on_gone
        self.chats = {}

    def start(self):
        asyncio.get_running_loop().add_reader(self.results.fileno(), self._on_results)

    def submit(self, chat, port):
        self.chats[chat.id] = chat
        self.work.send(("add", chat.id, chat.prompt_tokens, chat.max_tokens, chat.arrival_ns,
                        port))

    def _on_results(self):
        try:
            while self.results.poll():
                kind, req, toks, done = self.results.recv()
                chat = self.chats.get(req)
                if kind != "tok" or chat is None:
                    continue
                chat.tokens.put_nowait(toks)
                if done:
                    chat.tokens.put_nowait(None)
                    del self.chats[req]
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self.results.fileno())
            log("the engine process is gone")
            for chat in self.chats.values():
                chat.tokens.put_nowait(None)
            self.on_gone()


async def serve(args, work, results):
    from aiohttp import web

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    gone = []
    front = Front(work, results, lambda: (gone.append(1), stop.set()))
    front.start()

    async def chat(http):
        arrival = now_ns()
        try:
            c = Chat(await http.read())
        except BadRequest as e:
            return web.json_response(error_body(400, str(e)), status=400)
        c.arrival_ns = arrival
        peer = http.transport.get_extra_info("peername") if http.transport else None
        front.submit(c, peer[1] if peer else 0)
        if not c.stream:
            ids = [t async for toks in c.token_lists() for t in toks]
            return web.json_response({
                "id": c.chat_id, "object": "chat.completion", "created": c.created,
                "model": c.model, "usage": c.usage(c.produced),
                "choices": [{"index": 0, "finish_reason": "length", "message": {
                    "role": "assistant", "content": "".join(f"tok{t} " for t in ids)}}]})
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(http)
        try:
            await resp.write(c.delta({"role": "assistant", "content": ""}))
            async for toks in c.token_lists():
                # One frame per token, all of a step's tokens of this request in one write.
                await resp.write(b"".join(c.delta({"content": f"tok{t} "}) for t in toks))
            tail = c.delta({}, "length")
            if c.include_usage:
                tail += c.chunk([], c.usage(c.produced))
            await resp.write(tail + DONE)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away; the engine finishes the request regardless
        return resp

    app = web.Application()
    app.router.add_post(CHAT_PATH, chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = listen_socket(args.port)
    await web.SockSite(runner, sock).start()
    print(f"listening on 127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await stop.wait()
    await shut_down(runner.cleanup, work)
    return 1 if gone else 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free)")
    ap.add_argument("--log", help="the engine's ground truth, JSON lines (see above)")
    ap.add_argument("--engine", choices=("transformers", "fake"), default="transformers")
    ap.add_argument("--kv-blocks", type=int, default=0,
                    help="KV cache blocks (0: the engine's default; small: it must evict)")
    ap.add_argument("--block-size", type=int, default=32, help="tokens per KV block")
    ap.add_argument("--max-batch-tokens", type=int, default=256, help="token budget per step")
    ap.add_argument("--step-ms", type=float, default=4.0, help="fake engine: time per step")
    ap.add_argument("--cuda-graph", choices=("auto", "on", "off"), default="auto",
                    help="transformers engine: its use_cuda_graph (auto: its own choice)")
    return ap.parse_args()


def main():
    args = parse_args()
    import aiohttp  # noqa: F401 (fail before the engine starts, not after)
    engine, work, results, info = start_engine(args)
    run_server(engine, info, serve(args, work, results), 8)


if __name__ == "__main__":
    main()
