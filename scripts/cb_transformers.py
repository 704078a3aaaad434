"""cb_server.py's transformers engine: transformers' own continuous batching, with ground truth
taken from its scheduler. Imported only in the engine process (torch, transformers).

Read against transformers' main branch as stored in late 2026 (the code of the 5.1x series:
`ContinuousBatchingConfig` with block_size, num_blocks, max_batch_tokens, use_cuda_graph,
scheduler_type, cpu_offload_space, use_async_batching, allow_block_sharing;
`ContinuousBatchingManager` with warmup(), start(), add_request(), get_result(), stop(); its
`batch_processor` (a ContinuousBatchProcessor) with prepare_next_batch(), _generation_step(),
update_batch(), `scheduler` (schedule_batch(), pop_request_to_evict()) and `offloading_manager`
(offload_one_request(): CPU offload, or a "soft reset" that drops the KV cache and recomputes the
request later: the preemption this engine has). Not yet run on a GPU.

Hooks (instance attributes over the bound methods, so only this manager is affected):
  batch_processor.prepare_next_batch   step start (taken before it; kept when it returns True)
  scheduler.schedule_batch             the step's batch: request ids, status and token counts
                                       read from each state as scheduled
  batch_processor._generation_step     step end (its device-to-host copy has returned)
  batch_processor.update_batch         output tokens per request, first token, finished
  scheduler.pop_request_to_evict       preemption (the evicted request's id), or
  offloading_manager.offload_one_request  (the id that left active_requests)
A missing one is reported in the log's meta line ("missing") and on stderr, and what it gives is
not logged.
"""
import dataclasses
import inspect
import threading
import time

import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

# About 1 B parameters: 16 layers of (4 * 2048^2 attention with 8 KV heads + 3 * 2048 * 8192
# MLP) plus 2 * 32000 * 2048 embeddings.
MODEL = dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
             num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
             max_position_embeddings=4096, tie_word_embeddings=False)
RESULT_POLL_S = 0.05


def now_ns():
    return time.monotonic_ns()


def _req(rid):
    try:
        return int(rid)
    except (TypeError, ValueError):
        return str(rid)


def _kwargs(fn, wanted):
    """The items of `wanted` that fn accepts (the API moved between versions)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(wanted)
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return dict(wanted)
    return {k: v for k, v in wanted.items() if k in params}


def _state_of(item):
    return getattr(item, "state", item)  # FutureRequestState wraps a RequestState


def _pending_tokens(st):
    for name in ("tokens_to_process", "prompt_ids"):
        v = getattr(st, name, None)
        if v is not None:
            return len(v)
    return None


def _generated(st):
    for name in ("generated_tokens", "static_outputs"):
        v = getattr(st, name, None)
        if v is not None:
            return len(v)
    return None


class TransformersEngine:
    def __init__(self, cfg, truth, emit):
        self.truth, self.emit = truth, emit
        self.hooks, self.missing = [], []
        self.lock = threading.Lock()
        self.cur = None  # the step being run: {"start", "end", "batch"}
        self.seen, self.first, self.evicted, self.out_sent = set(), set(), set(), {}
        torch.set_default_dtype(torch.bfloat16)
        torch.manual_seed(0)
        config = LlamaConfig(**MODEL)
        # Random weights made on the GPU itself: no CPU init, no download.
        with torch.device("cuda"):
            self.model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        # eos -1: every request makes exactly max_tokens tokens.
        gen = GenerationConfig(do_sample=False, max_new_tokens=cfg["max_seq_tokens"] // 2,
                               eos_token_id=-1, pad_token_id=0)
        cb = {"block_size": cfg["block_size"], "max_batch_tokens": cfg["max_batch_tokens"],
              "scheduler_type": "fifo", "use_async_batching": False,
              # Prefix sharing would shorten prefills; the checker counts prompt tokens.
              "allow_block_sharing": False}
        if cfg["kv_blocks"]:
            cb["num_blocks"] = cfg["kv_blocks"]
        if cfg["cuda_graph"] != "auto":
            cb["use_cuda_graph"] = cfg["cuda_graph"] == "on"
        cb_cls = getattr(transformers, "ContinuousBatchingConfig", None)
        if cb_cls is None:
            try:
                from transformers.generation.configuration_utils import (
                    ContinuousBatchingConfig as cb_cls)
            except ImportError:
                cb_cls = None
        init = self.model.init_continuous_batching
        if cb_cls is not None:
            names = {f.name for f in dataclasses.fields(cb_cls)}
            self.missing += [f"ContinuousBatchingConfig.{k}" for k in cb if k not in names]
            cbc = cb_cls(**{k: v for k, v in cb.items() if k in names})
            self.manager = init(**_kwargs(init, {"generation_config": gen,
                                                 "continuous_batching_config": cbc}))
        else:  # older versions: the same settings in the GenerationConfig
            self.missing.append("ContinuousBatchingConfig (settings put in GenerationConfig)")
            for k, v in cb.items():
                setattr(gen, "scheduler" if k == "scheduler_type" else k, v)
            self.manager = init(generation_config=gen)
        mgr = self.manager
        self.live = not hasattr(mgr, "warmup")
        if hasattr(mgr, "_create_batch_processor"):
            create = mgr._create_batch_processor

            def create_hooked(*a, **kw):
                bp = create(*a, **kw)
                if self.live:  # not during warm-up: its dummy batches are no requests
                    self._hook(bp)
                return bp

            mgr._create_batch_processor = create_hooked
        else:
            self.missing.append("manager._create_batch_processor")
        if hasattr(mgr, "warmup"):
            mgr.warmup()  # captures the CUDA graphs now rather than under load
        else:
            self.missing.append("manager.warmup (graphs captured under load)")
        self.live = True
        if getattr(mgr, "batch_processor", None) is not None:
            self._hook(mgr.batch_processor)
        mgr.start()

    def info(self):
        bp = getattr(self.manager, "batch_processor", None)
        cache = getattr(bp, "cache", None)
        graphs = (getattr(bp, "use_cuda_graph_varlen", None),
                  getattr(bp, "use_cuda_graph_decode", None))
        return {"engine": "transformers", "transformers": transformers.__version__,
                "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                "params": self.params, "model": MODEL,
                "kv_blocks": getattr(cache, "num_blocks", None),
                "block_size": getattr(cache, "block_size", None),
                "max_batch_tokens": getattr(cache, "max_batch_tokens", None),
                "cuda_graph": {"varlen": graphs[0], "decode": graphs[1]},
                "scheduler": type(getattr(bp, "scheduler", None)).__name__,
                "hooks": self.hooks, "missing": self.missing}

    # ---- hooks ---------------------------------------------------------------------------

    def _wrap(self, obj, name, make, where):
        fn = getattr(obj, name, None) if obj is not None else None
        if fn is None:
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

        def prepare(fn):
            def w(*a, **kw):
                t = now_ns()
                with self.lock:
                    self.cur = {"start": t, "end": None, "batch": []}
                ok = fn(*a, **kw)
                if not ok:
                    self.cur = None
                return ok
            return w

        def schedule(fn):
            def w(*a, **kw):
                res = fn(*a, **kw)
                items = res[0] if isinstance(res, tuple) else res
                if items and self.cur is not None:
                    t = self.cur["start"]
                    for it in items:
                        st = _state_of(it)
                        rid = _req(getattr(st, "request_id", None))
                        n = _pending_tokens(st)
                        status = getattr(getattr(st, "status", None), "name", "")
                        dec = status == "DECODING"
                        self.cur["batch"].append({"req": rid, "prefill": 0 if dec else n,
                                                  "decode": n if dec else 0, "st": st})
                        if rid not in self.seen:
                            self.seen.add(rid)
                            self.truth.event(rid, "scheduled", t)
                        elif rid in self.evicted:
                            self.evicted.discard(rid)
                            self.truth.event(rid, "resumed", t)
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
                before = {e["req"]: _generated(e["st"]) for e in cur["batch"]} if cur else {}
                r = fn(*a, **kw)
                if cur is None:
                    return r
                end = cur["end"] or now_ns()
                batch = []
                for e in cur["batch"]:
                    st = e.pop("st")
                    n0, n1 = before.get(e["req"]), _generated(st)
                    e["out"] = (n1 - n0) if n0 is not None and n1 is not None else None
                    batch.append(e)
                    if e["out"] and e["req"] not in self.first:
                        self.first.add(e["req"])
                        self.truth.event(e["req"], "first_token", end)
                self.truth.step(cur["start"], end, batch)
                self.cur = None
                return r
            return w

        def evict(fn):
            def w(*a, **kw):
                r = fn(*a, **kw)
                rid = _req(r[0] if isinstance(r, tuple) else getattr(r, "request_id", r))
                self.evicted.add(rid)
                self.truth.event(rid, "preempted", now_ns())
                return r
            return w

        def offload(fn):
            def w(*a, **kw):
                before = set(getattr(sched, "active_requests", {}) or {})
                r = fn(*a, **kw)
                t = now_ns()
                for rid in before - set(getattr(sched, "active_requests", {}) or {}):
                    self.evicted.add(_req(rid))
                    self.truth.event(_req(rid), "preempted", t)
                return r
            return w

        self._wrap(bp, "prepare_next_batch", prepare, "batch_processor")
        self._wrap(sched, "schedule_batch", schedule, "scheduler")
        self._wrap(bp, "_generation_step", step, "batch_processor")
        self._wrap(bp, "update_batch", update, "batch_processor")
        if hasattr(sched, "pop_request_to_evict"):
            self._wrap(sched, "pop_request_to_evict", evict, "scheduler")
        elif not self._wrap(getattr(bp, "offloading_manager", None), "offload_one_request",
                            offload, "batch_processor.offloading_manager"):
            self.missing.append("scheduler.pop_request_to_evict (preemptions not logged)")

    # ---- requests ------------------------------------------------------------------------

    def add(self, req, n_prompt, max_tokens):
        from cb_server import prompt_ids

        add = self.manager.add_request
        add(**_kwargs(add, {"input_ids": prompt_ids(req, n_prompt), "request_id": str(req),
                            "max_new_tokens": max_tokens, "streaming": True}))
        self.out_sent[req] = 0

    def run(self, stop):
        """Forwards the manager's outputs (streamed: all tokens so far) until told to stop."""
        while not stop.is_set():
            out = self.manager.get_result(timeout=RESULT_POLL_S)
            if out is None:
                continue
            req = _req(out.request_id)
            toks = list(getattr(out, "generated_tokens", []) or [])
            sent = self.out_sent.get(req, 0)
            done = out.is_finished() if hasattr(out, "is_finished") else False
            if len(toks) > sent or done:
                self.emit(req, [int(t) for t in toks[sent:]], done)
                self.out_sent[req] = len(toks)
            if done:
                self.truth.event(req, "finished", now_ns(), tokens=len(toks))
                self.out_sent.pop(req, None)

    def close(self):
        try:
            self.manager.stop(block=True, timeout=5)
        except Exception:  # noqa: BLE001 (exiting regardless)
            pass
