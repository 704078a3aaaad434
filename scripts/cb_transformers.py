"""cb_server.py's transformers engine: transformers' own continuous batching, with ground truth
taken from its scheduler. Imported only in the engine process (torch, transformers).

Read against the transformers source as stored (not yet run on a GPU):
  - 5.1x main (continuous_batching/ continuous_api.py with ModelRunner, OutputRouter,
    OffloadingManager.offload_one_request; scheduler.schedule_batch(token_budget, cache_budget)
    returning (requests | None, use_decode_fast_path, num_q_tokens, max_kv_read));
  - 5.13 to 5.17 (ContinuousBatchingConfig with page_size, block_size a deprecated alias from
    5.17; BackgroundThreadStatus; OffloadingManager.offload_requests() for the starved requests;
    schedule_batch(max_batch_tokens, cache.max_tokens_read); FutureRequestState.query_length;
    the scheduler sets DECODING when it schedules a prompt's last chunk, before it is computed).
Names that differ between those versions are looked up with getattr, alternatives named where
they are used; which hook was installed is logged in the meta line ("hooks"), and a hook point
without which the log would be wrong stops the engine at start-up with its name.

Hooks (instance attributes over the bound methods, so only this manager is affected):
  batch_processor.prepare_next_batch   step start (taken before it; kept when it returns True)
  scheduler.schedule_batch             the step's batch: request ids and token counts; prefill
                                       or decode from each request's status BEFORE scheduling
  batch_processor._generation_step     step end (sync batching: its device-to-host copy has
                                       returned)
  batch_processor.update_batch         output tokens per request (generated_tokens before and
                                       after), first token
  batch_processor.offloading_manager.offload_requests (5.13+) or .offload_one_request (5.1x)
                                       preemption: the ids that left scheduler.active_requests.
                                       CPU offloading is turned off (cpu_offload_space 0), so a
                                       preempted request is soft reset: its KV is dropped and it
                                       is prefilled again over prompt + output so far.
Settings forced: sync batching (use_async_batching False; with async batching update_batch
would see the previous step's batch), no prefix sharing (allow_block_sharing False), FIFO
scheduler, attention "paged|sdpa" (set before the manager is made, so the manager does not
switch to a flash-attention kernel, possibly fetched from the Hub, on its own).
"""
import dataclasses
import inspect
import math
import sys
import time

import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

# About 1 B parameters: 16 layers of (4 * 2048^2 attention with 8 KV heads + 3 * 2048 * 8192
# MLP) plus 2 * 32000 * 2048 embeddings.
MODEL = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
             num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
             max_position_embeddings=4096, tie_word_embeddings=False)
ATTN = "paged|sdpa"  # the manager's own name for paged SDPA ("paged|" + the model's attention)
RESULT_POLL_S = 0.05
REQUIRED_HOOKS = ("batch_processor.prepare_next_batch", "scheduler.schedule_batch",
                  "batch_processor._generation_step", "batch_processor.update_batch")


def now_ns():
    return time.monotonic_ns()


def _log(msg):
    print(f"cb_transformers: {msg}", file=sys.stderr, flush=True)


def _req(rid):
    try:
        return int(rid)
    except (TypeError, ValueError):
        return str(rid)


def _params(fn):
    """fn's parameter names, and whether it takes **kwargs; None when it cannot be read."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None, True
    return set(params), any(p.kind == p.VAR_KEYWORD for p in params.values())


def _kwargs(fn, wanted):
    """The items of `wanted` that fn accepts (the API moved between versions)."""
    names, var_kw = _params(fn)
    if names is None or var_kw:
        return dict(wanted)
    return {k: v for k, v in wanted.items() if k in names}


def _state_of(item):
    return getattr(item, "state", item)  # FutureRequestState wraps a RequestState (5.1x)


def _status(st):
    s = getattr(st, "_status", None)  # 5.1x: status is a property over _status
    if s is None:
        s = getattr(st, "status", None)
    return getattr(s, "name", str(s))


def _scheduled(res):
    """The scheduled requests of a schedule_batch result: a tuple whose first item is the list
    (5.1x), a list (4.5x), or an object with .requests (FutureBatch, as a later form)."""
    if isinstance(res, tuple):
        res = res[0] if res else None
    if res is not None and not isinstance(res, (list, tuple)) and hasattr(res, "requests"):
        res = res.requests
    return list(res or [])


def _query_len(item, st):
    n = getattr(item, "query_length", None)  # FutureRequestState.query_length (5.13+)
    if n is None:
        for name in ("tokens_to_process", "prompt_ids"):  # set to the chunk by the scheduler
            v = getattr(st, name, None)
            if v is not None:
                return len(v)
    return n


def _generated(st):
    for name in ("generated_tokens", "static_outputs"):  # static_outputs: 4.5x
        v = getattr(st, name, None)
        if v is not None:
            return len(v)
    return None


def _out_status(out):
    return getattr(getattr(out, "status", None), "name", "")



def prompt_ids(req, n, vocab=MODEL["vocab_size"]):
    """n prompt token ids, different for every request: no prefix is shared between requests,
    so prefix caching cannot shorten a prefill."""
    return [(req * 7919 + i * 104729) % (vocab - 2) + 1 for i in range(n)]

class TransformersEngine:
    def __init__(self, cfg, truth, emit):
        self.truth, self.emit = truth, emit
        self.hooks, self.missing, self.notes = [], [], []
        self.cur = None  # the step being run: {"start", "end", "batch"}
        self.seen, self.first, self.evicted, self.out_sent = set(), set(), {}, {}
        self.closing = False
        torch.manual_seed(0)
        config = LlamaConfig(**MODEL)
        # Random weights made on the GPU itself, in bf16: no CPU init, no download.
        prev = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device("cuda"):
                model = LlamaForCausalLM(config)
        finally:
            torch.set_default_dtype(prev)
        self.model = model.to(torch.bfloat16).eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        try:
            self.model.set_attn_implementation(ATTN)
        except Exception as e:  # noqa: BLE001 (the manager then picks its own)
            self.notes.append(f"set_attn_implementation({ATTN!r}) failed: {e}")
            _log(f"set_attn_implementation({ATTN!r}) failed ({e}); the manager picks")
        # eos -1: every request makes exactly max_tokens tokens (the manager's own "disabled").
        gen = GenerationConfig(do_sample=False, max_new_tokens=cfg["max_seq_tokens"] // 2,
                               eos_token_id=-1, pad_token_id=0)
        self.manager = self._make_manager(cfg, gen)
        mgr = self.manager
        # A batch processor made later (a version that does not reuse the warmed-up one) is
        # hooked when made; not during warm-up: its dummy batches are no requests.
        self.live = False
        if hasattr(mgr, "_create_batch_processor"):
            create = mgr._create_batch_processor

            def create_hooked(*a, **kw):
                bp = create(*a, **kw)
                if self.live:
                    self._hook(bp)
                return bp

            mgr._create_batch_processor = create_hooked
        else:
            self.missing.append("manager._create_batch_processor")
        if hasattr(mgr, "warmup"):
            mgr.warmup()  # makes the batch processor and captures the CUDA graphs now
        else:
            self.notes.append("no manager.warmup: CUDA graphs (if any) captured under load")
        if getattr(mgr, "batch_processor", None) is None and hasattr(mgr, "_create_batch_processor"):
            # The generation loop reuses (resets) an existing batch processor (5.1x): make it
            # here so that its hooks are in before the first request.
            mgr.batch_processor = create()
        self.live = True
        bp = getattr(mgr, "batch_processor", None)
        if bp is None:
            raise RuntimeError("no manager.batch_processor after warmup()/_create_batch_processor"
                               "(): nothing to hook")
        self._hook(bp)
        absent = [h for h in REQUIRED_HOOKS if h not in self.hooks]
        if absent:
            raise RuntimeError("hook points missing in transformers "
                               f"{transformers.__version__}: {', '.join(absent)}")
        if getattr(bp, "use_async_batching", False):
            raise RuntimeError("async batching is on (use_async_batching): update_batch would "
                               "see the previous step's batch; the hooks assume sync batching")
        mgr.start()

    def _make_manager(self, cfg, gen):
        cb_cls = getattr(transformers, "ContinuousBatchingConfig", None)
        for where in ("transformers.generation", "transformers.generation.configuration_utils",
                      "transformers.generation.continuous_batching"):
            if cb_cls is not None:
                break
            try:
                cb_cls = getattr(__import__(where, fromlist=["x"]), "ContinuousBatchingConfig",
                                 None)
            except ImportError:
                pass
        init = self.model.init_continuous_batching
        if cb_cls is None:
            raise RuntimeError("ContinuousBatchingConfig not found (transformers "
                               f"{transformers.__version__}): settings cannot be passed")
        names = {f.name for f in dataclasses.fields(cb_cls)}
        # page_size from 5.17 (block_size kept as a deprecated alias); block_size before.
        self.size_key = "page_size" if "page_size" in names else "block_size"
        cb = {self.size_key: cfg["block_size"], "max_batch_tokens": cfg["max_batch_tokens"],
              "scheduler_type": "fifo", "use_async_batching": False,
              # Prefix sharing would shorten prefills; the checker counts prompt tokens.
              "allow_block_sharing": False,
              # 0: no CPU swap pool, preemption by soft reset (recompute), as the fake engine.
              "cpu_offload_space": 0.0}
        if cfg["kv_blocks"]:
            cb["num_blocks"] = cfg["kv_blocks"]
        if cfg["cuda_graph"] != "auto":
            cb["use_cuda_graph"] = cfg["cuda_graph"] == "on"
        for k in cb:
            if k not in names:
                self.notes.append(f"ContinuousBatchingConfig has no {k} (not set)")
                if k in ("use_async_batching", "allow_block_sharing", "num_blocks",
                         "max_batch_tokens", self.size_key):
                    self.missing.append(f"ContinuousBatchingConfig.{k}")
        cbc = cb_cls(**{k: v for k, v in cb.items() if k in names})
        pnames, var_kw = _params(init)
        if pnames is not None and not var_kw and "continuous_batching_config" not in pnames:
            raise RuntimeError("init_continuous_batching takes no continuous_batching_config "
                               f"(its parameters: {sorted(pnames)})")
        return init(generation_config=gen, continuous_batching_config=cbc)

    # ---- what the meta line says -----------------------------------------------------------

    def _bp(self):
        return getattr(self.manager, "batch_processor", None)

    def _cb_config(self):
        bp = self._bp()
        return (getattr(bp, "cb_config", None)
                or getattr(self.manager, "continuous_batching_config", None))

    def _page(self):
        cbc, cache = self._cb_config(), getattr(self._bp(), "cache", None)
        for obj, name in ((cbc, "page_size"), (cbc, "block_size"), (cache, "block_size")):
            v = getattr(obj, name, None)
            if isinstance(v, int) and v > 0:
                return v
        return None

    def _graphs(self):
        cbc, bp = self._cb_config(), self._bp()
        v = getattr(cbc, "cuda_graph_booleans", None)  # property (5.13+)
        if v is None and callable(getattr(cbc, "get_cuda_graph_booleans", None)):
            v = cbc.get_cuda_graph_booleans()  # method (5.1x)
        if v is None:  # attributes of the batch processor (5.1x)
            v = (getattr(bp, "use_cuda_graph_varlen", None),
                 getattr(bp, "use_cuda_graph_decode", None))
        try:
            return {"varlen": v[0], "decode": v[1]}
        except (TypeError, IndexError):
            return {"raw": repr(v)}

    def info(self):
        bp = self._bp()
        cache = getattr(bp, "cache", None)
        return {"engine": "transformers", "transformers": transformers.__version__,
                "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                "params": self.params, "model": MODEL,
                "attn_implementation": getattr(self.model.config, "_attn_implementation", None),
                "kv_blocks": getattr(cache, "num_blocks", None),
                "block_size": self._page(), "page_size_key": self.size_key,
                "max_batch_tokens": getattr(cache, "max_batch_tokens", None),
                "cuda_graph": self._graphs(),
                "async_batching": getattr(bp, "use_async_batching", None),
                "scheduler": type(getattr(bp, "scheduler", None)).__name__,
                "preemption": "soft reset: KV dropped, prompt + output so far prefilled again",
                "hooks": self.hooks, "missing": self.missing, "notes": self.notes}

    # ---- hooks ---------------------------------------------------------------------------

    def _wrap(self, obj, name, make, where, required=True):
        fn = getattr(obj, name, None) if obj is not None else None
        if fn is None:
            if required:
                self.missing.append(f"{where}.{name}")
            return False
        setattr(obj, name, make(fn))
        self.hooks.append(f"{where}.{name}")
        return True

    def _hook(self, bp):
        if getattr(bp, "_tokenscope_hooked", False):
            return
        bp._tokenscope_hooked = True
        sched = getattr(bp, "scheduler", None)

        def active_ids():
            return set(getattr(sched, "active_requests", None) or ())

        def prepare(fn):
            def w(*a, **kw):
                self.cur = {"start": now_ns(), "end": None, "batch": []}
                ok = fn(*a, **kw)
                if not ok:
                    self.cur = None
                return ok
            return w

        def schedule(fn):
            def w(*a, **kw):
                # Status before scheduling: 5.13+ sets DECODING when it schedules a prompt's last
                # chunk, so only a request already DECODING (same state object) is a decode.
                before = {rid: (id(st), _status(st))
                          for rid, st in dict(getattr(sched, "active_requests", None)
                                              or {}).items()}
                res = fn(*a, **kw)
                items = _scheduled(res)
                cur = self.cur
                if not items or cur is None:
                    return res
                t, batch = cur["start"], []
                for it in items:
                    st = _state_of(it)
                    rid = _req(getattr(st, "request_id", None))
                    n = _query_len(it, st)
                    prev = before.get(getattr(st, "request_id", None))
                    dec = prev is not None and prev[0] == id(st) and prev[1] == "DECODING"
                    batch.append({"req": rid, "prefill": 0 if dec else n,
                                  "decode": n if dec else 0, "st": st})
                    if rid not in self.seen:
                        self.seen.add(rid)
                        self.truth.event(rid, "scheduled", t)
                    elif rid in self.evicted:
                        # Preempted in this same prepare_next_batch: after its preemption.
                        t_pre = self.evicted.pop(rid)
                        self.truth.event(rid, "resumed", t if t >= t_pre else now_ns())
                cur["batch"] = batch  # a retry after an offload replaces a failed try
                return res
            return w

        def step(fn):
            def w(*a, **kw):
                r = fn(*a, **kw)
                if self.cur is not None:
                    self.cur["end"] = now_ns()
                return r
            return w

        def update(fn):
            def w(*a, **kw):
                cur = self.cur
                before = {id(e["st"]): _generated(e["st"]) for e in cur["batch"]} if cur else {}
                r = fn(*a, **kw)
                if cur is None:
                    return r
                end = cur["end"] or now_ns()
                batch = []
                for e in cur["batch"]:
                    st = e.pop("st")
                    n0, n1 = before.get(id(st)), _generated(st)
                    e["out"] = (n1 - n0) if n0 is not None and n1 is not None else None
                    batch.append(e)
                    if e["out"] and e["req"] not in self.first:
                        self.first.add(e["req"])
                        self.truth.event(e["req"], "first_token", end)
                self.truth.step(cur["start"], end, batch)
                self.cur = None
                return r
            return w

        def offload(fn):
            def w(*a, **kw):
                gone = active_ids()
                r = fn(*a, **kw)
                t = now_ns()
                for rid in gone - active_ids():
                    self.evicted[_req(rid)] = t
                    self.truth.event(_req(rid), "preempted", t)
                return r
            return w

        self._wrap(bp, "prepare_next_batch", prepare, "batch_processor")
        self._wrap(sched, "schedule_batch", schedule, "scheduler")
        self._wrap(bp, "_generation_step", step, "batch_processor")
        self._wrap(bp, "update_batch", update, "batch_processor")
        om = getattr(bp, "offloading_manager", None)
        where = "batch_processor.offloading_manager"
        # offload_requests: 5.13+; offload_one_request: 5.1x before it. Both may exist.
        found = [self._wrap(om, n, offload, where, required=False)
                 for n in ("offload_requests", "offload_one_request")]
        if not any(found):
            self.missing.append(f"{where}.offload_requests|offload_one_request "
                                "(preemptions not logged)")

    # ---- requests ------------------------------------------------------------------------

    def add(self, req, n_prompt, max_tokens):
        cache = getattr(self._bp(), "cache", None)
        blocks, page = getattr(cache, "num_blocks", None), self._page()
        if blocks and page and math.ceil((n_prompt + max_tokens) / page) > blocks:
            # Alone it cannot fit: transformers would fail (or retry offloading forever).
            _log(f"request {req} cannot fit in the KV cache ({n_prompt} + {max_tokens} tokens, "
                 f"{blocks} blocks of {page}): answered with no tokens")
            self.emit(req, [], True)
            return
        self.out_sent[req] = 0  # before add_request: its first output may come at once
        add = self.manager.add_request
        rid = add(**_kwargs(add, {"input_ids": prompt_ids(req, n_prompt),
                                  "request_id": str(req), "max_new_tokens": max_tokens,
                                  "streaming": True}))
        if rid is None and not self.closing:
            # 5.13+: None when the manager is stopping or its thread died.
            _log(f"request {req} refused by the manager: answered with no tokens")
            self.out_sent.pop(req, None)
            self.emit(req, [], True)

    def _dead(self):
        mgr = self.manager
        running = getattr(mgr, "is_running", None)
        if running is None or running():
            return None
        status = getattr(mgr, "background_thread_status", None)
        err = getattr(status, "fatal_error", None) or getattr(mgr, "fatal_error", None)
        return f"the generation thread has exited ({err!r})"

    def run(self, stop):
        """Forwards the manager's outputs (streamed: all tokens so far) until told to stop."""
        while not stop.is_set():
            out = self.manager.get_result(timeout=RESULT_POLL_S)
            if out is None:
                why = self._dead()
                if why and not stop.is_set():
                    raise RuntimeError(why)
                continue
            req = _req(out.request_id)
            toks = list(getattr(out, "generated_tokens", None) or [])
            sent = self.out_sent.get(req, 0)
            err = getattr(out, "error", None)
            # is_finished(): FINISHED (5.1x), FINISHED or FAILED (5.17).
            done = (bool(out.is_finished()) if hasattr(out, "is_finished") else False) \
                or _out_status(out) in ("FINISHED", "FAILED") or err is not None
            if len(toks) > sent or done:
                self.emit(req, [int(t) for t in toks[sent:]], done)
                self.out_sent[req] = max(sent, len(toks))
            if done:
                if err is not None or _out_status(out) == "FAILED":
                    _log(f"request {req} failed: {err}")
                    self.truth.event(req, "failed", now_ns(), tokens=len(toks), error=str(err))
                else:
                    self.truth.event(req, "finished", now_ns(), tokens=len(toks))
                self.out_sent.pop(req, None)

    def close(self):
        self.closing = True
        try:
            self.manager.stop(block=True, timeout=5)
        except Exception as e:  # noqa: BLE001 (exiting regardless)
            _log(f"manager.stop: {e}")
