"""Models, caches, eviction policies, diffusion schedules: load, tokenize, forward a step plan,
generate (autoregressive with any eviction policy, masked diffusion with any cache schedule) and a
teacher-forced eviction eval (include/kvsieve/model.h, generate.h, policy.h, schedule.h)."""
import ctypes
import os

import numpy as np

from . import _lib as L
from .core import INVALID_ARGUMENT, Device, KvsError, _closed, check, fail


def locate(name):
    """kvs_model_locate: the path of model `name` (a path that exists, $KVSIEVE_MODELS, the
    repository's models/, ../shared/models next to the source tree). Raises KvsError(NOT_FOUND)."""
    buf = ctypes.create_string_buffer(8192)
    check(L.lib.kvs_model_locate(str(name).encode(), buf, len(buf)))
    return buf.value.decode()


def _i32(a, what):
    try:
        arr = np.ascontiguousarray(np.asarray(a, dtype=np.int64))
    except (TypeError, ValueError):
        fail(INVALID_ARGUMENT, "%s must be a sequence of ints" % what)
    if arr.ndim != 1:
        fail(INVALID_ARGUMENT, "%s must be one-dimensional" % what)
    if arr.size and (arr.min() < -2**31 or arr.max() >= 2**31):
        fail(6, "%s: a value does not fit int32" % what)
    return np.ascontiguousarray(arr.astype(np.int32))


def _p32(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)) if a is not None and a.size else None


def _stats(s):
    return {f: getattr(s, f) for f, _ in L.GenStats._fields_}


class Policy:
    """A built-in eviction policy: Policy("h2o"), Policy("snapkv", window=32); names: Policy.names().
    Keyword parameters are kvs_policy_params' fields (n_sink, window, kernel, beta, alpha, base,
    threshold, lag, first_stage, n_future)."""

    @staticmethod
    def names():
        arr, out, i = L.lib.kvs_policy_names(), [], 0
        while arr[i]:
            out.append(arr[i].decode())
            i += 1
        return out

    def __init__(self, name, **params):
        p = L.lib.kvs_policy_params_default()
        for k, v in params.items():
            if k not in dict(L.PolicyParams._fields_):
                fail(INVALID_ARGUMENT, "Policy: unknown parameter %r" % k)
            setattr(p, k, v.encode() if k == "base" else v)
        self._h = ctypes.c_void_p()
        check(L.lib.kvs_policy_create(ctypes.byref(self._h), str(name).encode(), ctypes.byref(p)))
        self.name = name

    @classmethod
    def learned(cls, model, path=None, kind=None, seed=1, threshold=float("-inf"), alpha=0.0, latent_features=0):
        """A learned policy (learned.h) for `model`: weights from the side file `path` written by
        `kvsieve train` (checked against the model's shape; kind, if given, must match), or fresh
        weights of `kind` ("retention", "indexer", "rl") from `seed` when path is None.
        threshold / alpha / latent_features as kvs_learned_policy."""
        want = -1
        if kind is not None:
            k = ctypes.c_int(-1)
            check(L.lib.kvs_learned_kind_from_name(str(kind).encode(), ctypes.byref(k)))
            want = k.value
        lw = ctypes.c_void_p()
        if path is not None:
            check(L.lib.kvs_learned_load(ctypes.byref(lw), str(path).encode(), ctypes.byref(model._hp), want), str(path))
        elif want < 0:
            fail(INVALID_ARGUMENT, "Policy.learned: give a side file path or a kind")
        else:
            check(L.lib.kvs_learned_create(ctypes.byref(lw), want, ctypes.byref(model._hp), int(seed)))
        self = cls.__new__(cls)
        self._h, self.name = ctypes.c_void_p(), "learned"
        try:
            check(L.lib.kvs_learned_policy(ctypes.byref(self._h), lw, float(threshold), float(alpha), int(latent_features)))
        finally:
            L.lib.kvs_learned_destroy(ctypes.byref(lw))  # the policy holds a copy of the weights
        return self

    def close(self):
        if self._h:
            L.lib.kvs_policy_destroy(ctypes.byref(self._h))
            self._h = None

    def __del__(self):
        self.close()


class Schedule:
    """A diffusion cache schedule: Schedule("elastic", gamma=0.9, window=16), "none", "prefix",
    "dual", "delayed" (reload=4), "d2cache" (its defaults); wavefilter=dict(budget=0.5, levels=3,
    family="haar", keep_mass=0.9) (or True: the defaults) wraps it in
    WaveFilter sparse KV (keep_mass: the PSA-style top-p keep-sets, kvs_topp on a CPU device)."""

    def __init__(self, name="none", *, reload=4, wavefilter=None, **elastic):
        self._h = None  # set before any check can raise: __del__ runs on a half-built Schedule too
        if wavefilter is True:
            wavefilter = {}  # WaveFilter at its defaults
        elif wavefilter is False:
            wavefilter = None
        elif wavefilter is not None and not isinstance(wavefilter, dict):
            fail(INVALID_ARGUMENT, "Schedule: wavefilter wants a dict of WaveFilter parameters or True (got %r)"
                 % (wavefilter,))
        ep = L.lib.kvs_elastic_params_default()
        for k, v in elastic.items():
            if k == "sim":
                v = L.ELASTIC_SIM.get(v, -1)
            if k not in dict(L.ElasticParams._fields_):
                fail(INVALID_ARGUMENT, "Schedule: unknown elastic parameter %r" % k)
            setattr(ep, k, v)
        self._h = ctypes.c_void_p()
        check(L.lib.kvs_dlm_schedule_from_name(ctypes.byref(self._h), str(name).encode(), int(reload), ctypes.byref(ep)))
        if wavefilter is not None:
            wp = L.lib.kvs_wavefilter_params_default()
            for k, v in dict(wavefilter).items():
                if k == "family":
                    if v not in L.WAVELETS:
                        self.close()
                        fail(INVALID_ARGUMENT, "wavefilter family %r (want haar, db2, db4)" % (v,))
                    v = L.WAVELETS[v]
                if k not in dict(L.WavefilterParams._fields_):
                    self.close()
                    fail(INVALID_ARGUMENT, "Schedule: unknown wavefilter parameter %r" % k)
                setattr(wp, k, v)
            w = ctypes.c_void_p()
            base, self._h = self._h, None
            check(L.lib.kvs_dlm_schedule_wavefilter(ctypes.byref(w), base, ctypes.byref(wp)))  # takes base
            self._h = w

    @property
    def name(self):
        return L.lib.kvs_dlm_schedule_name(self._h).decode()

    @property
    def cache_flags(self):
        return int(L.lib.kvs_dlm_schedule_cache_flags(self._h))

    def close(self):
        if self._h:
            L.lib.kvs_dlm_schedule_destroy(ctypes.byref(self._h))
            self._h = None

    def __del__(self):
        self.close()


class Cache:
    """A KV cache for a model (kvs_cache_create): capacity rows per kv head, mode "positional"
    (diffusion, whole-sequence plans) or "append" (autoregressive), keep_x for schedules that
    recompute from layer inputs; element types of K and V (type_k, type_v; dtype sets both unless
    they are given): "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "qh8" (QuantSpec's hierarchical 4/8-bit
    type; the block types and qh8 need head_dim % 32 == 0); rotate: keys (and queries) rotated by the fixed Hadamard
    transform (KVS_CACHE_ROTATE)."""

    _TYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 4, "q4_0": 5, "q4_1": 6, "iq4_nl": 9, "qh8": 16}

    def __init__(self, model, capacity, mode="append", keep_x=False, dtype="f32", type_k=None, type_v=None,
                 rotate=False):
        p = L.lib.kvs_model_cache_params(model._h)
        if mode not in ("append", "positional"):
            fail(INVALID_ARGUMENT, "Cache: mode %r, want append or positional" % (mode,))
        tk, tv = type_k or dtype, type_v or dtype
        for t in (tk, tv):
            if t not in self._TYPES:
                fail(3, "Cache: cache type %r, want one of %s" % (t, ", ".join(self._TYPES)))
        p.capacity, p.mode = int(capacity), L.CACHE_APPEND if mode == "append" else L.CACHE_POSITIONAL
        p.type_k, p.type_v = self._TYPES[tk], self._TYPES[tv]
        p.flags = (L.CACHE_KEEP_X if keep_x else 0) | (2 if rotate else 0)  # KVS_CACHE_ROTATE
        self._h = ctypes.c_void_p()
        check(L.lib.kvs_cache_create(ctypes.byref(self._h), model.device.handle, ctypes.byref(p)))
        self.model, self.capacity, self.mode = model, int(capacity), mode
        model.device._children.add(self)

    @property
    def handle(self):
        if not self._h:
            _closed("the Cache", "(by .close() or by closing its Model's Device)")
        return self._h

    def reset(self):
        check(L.lib.kvs_cache_reset(self.handle))

    def length(self, layer=0, head=0):
        return int(L.lib.kvs_cache_len(self.handle, layer, head))

    def bytes_used(self):
        return int(L.lib.kvs_cache_bytes_used(self.handle))

    def close(self):
        if self._h:
            if getattr(self.model.device, "_h", None):  # not after its device (see Tensor.close)
                L.lib.kvs_cache_destroy(ctypes.byref(self._h))
            self._h = None
            self.model.device._children.discard(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Model:
    """A checkpoint on a device: Model(device, "stories260K-f32.v3.gguf") (a path or a name found
    by locate()); weight_dtype "f32" / "f16" / "bf16". .hparams is a dict of the hyperparameters
    (arch "llama", "qwen2", "qwen3" = autoregressive; "llada", "dream" = masked diffusion)."""

    def __init__(self, device, name, weight_dtype="f32"):
        if not isinstance(device, Device):
            fail(INVALID_ARGUMENT, "Model: device must be a kvsieve.Device")
        self.device, self.path = device, locate(name)
        mf, self._h, self._tok = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        check(L.lib.kvs_model_file_open(ctypes.byref(mf), self.path.encode(), None), self.path)
        try:
            check(L.lib.kvs_tokenizer_from_model_file(ctypes.byref(self._tok), mf))
            mp = L.lib.kvs_model_params_default()
            kinds = {"f32": L.F32, "f16": L.F16, "bf16": L.BF16}
            if weight_dtype not in kinds:
                fail(3, "Model: weight_dtype %r, want f32, f16 or bf16" % (weight_dtype,))
            mp.weight_dtype = kinds[weight_dtype]
            check(L.lib.kvs_model_create(ctypes.byref(self._h), device.handle, mf, ctypes.byref(mp)))
        finally:
            L.lib.kvs_model_file_close(ctypes.byref(mf))
        hp = L.lib.kvs_model_get_hparams(self._h).contents
        self._hp = L.ModelHparams.from_buffer_copy(hp)
        self.hparams = {f: getattr(hp, f) for f, _ in L.ModelHparams._fields_}
        self.hparams["arch"] = L.ARCH_NAMES.get(hp.arch, str(hp.arch))
        device._children.add(self)

    @property
    def handle(self):
        if not self._h:
            _closed("the Model %s" % os.path.basename(self.path), "(by .close() or by closing its Device)")
        return self._h

    @property
    def _tok_handle(self):
        if not self._tok:
            _closed("the Model %s" % os.path.basename(self.path), "(by .close() or by closing its Device)")
        return self._tok

    @property
    def arch(self):
        return self.hparams["arch"]

    def set_draft_weights(self, dtype):
        """QuantSpec's draft weights (kvs_model_set_draft_weights): speculative decoding's draft passes
        multiply by a copy of every matrix quantized to dtype ("q4_0", "q4_1", "iq4_nl", "q8_0"; "f32"
        removes the copies); the verify keeps the model's own weights. Returns the copies' bytes."""
        from .core import _DTYPES
        if dtype not in _DTYPES:
            fail(INVALID_ARGUMENT, "unknown dtype %r" % (dtype,))
        check(L.lib.kvs_model_set_draft_weights(self.handle, _DTYPES[dtype]))
        return int(L.lib.kvs_model_draft_weight_bytes(self.handle))

    # ---- tokenizer ---------------------------------------------------------------------------
    def tokenize(self, text, bos=True, eos=False):
        """Token ids (int32 array) of text; bos/eos add the model's BOS/EOS."""
        if not isinstance(text, str):
            fail(INVALID_ARGUMENT, "tokenize: text must be a str")
        b = text.encode()
        flags = (L.TOKENIZE_ADD_BOS if bos else 0) | (L.TOKENIZE_ADD_EOS if eos else 0)
        n = ctypes.c_int64(0)
        cap = len(b) + 8
        ids = np.zeros(cap, dtype=np.int32)
        check(L.lib.kvs_tokenizer_encode(self._tok_handle, b, len(b), flags, _p32(ids), cap, ctypes.byref(n)))
        return ids[: n.value].copy()

    def detokenize(self, ids):
        ids = _i32(ids, "ids")
        n = ctypes.c_size_t(0)
        buf = ctypes.create_string_buffer(16 * len(ids) + 16)
        st = L.lib.kvs_tokenizer_decode(self._tok_handle, _p32(ids), len(ids), buf, len(buf), ctypes.byref(n))
        if st == 6 and n.value >= len(buf):
            buf = ctypes.create_string_buffer(n.value + 1)
            st = L.lib.kvs_tokenizer_decode(self._tok_handle, _p32(ids), len(ids), buf, len(buf), ctypes.byref(n))
        check(st)
        return buf.raw[: n.value].decode(errors="replace")

    def _prompt(self, prompt):
        if isinstance(prompt, str):
            return self.tokenize(prompt, bos=True)
        return _i32(prompt, "prompt")

    # ---- the step-plan forward ---------------------------------------------------------------
    def cache(self, capacity, mode="append", keep_x=False, dtype="f32"):
        return Cache(self, capacity, mode, keep_x, dtype)

    def forward(self, cache, tokens, positions=None, logit_rows=None, layers=None):
        """One step plan (kvs_model_forward) against cache: tokens (the new tokens of an append
        cache, or the whole sequence of a positional one), positions (optional int32), logit_rows
        (default: the last token). layers: None (every layer computes every token) or a list of
        n_layers dicts with keys rows, stat_rows, stat_all_rows, probe_rows, want_argmax, want_x.
        Returns {"logits": (n_logit_rows, vocab), "rows_computed": int, "layers": [per layer:
        {"n_kv", "key_mass" (n_kv_heads, n_kv), "probs", "argmax", "x"} for what was asked]}."""
        if not isinstance(cache, Cache) or cache.model is not self:
            fail(INVALID_ARGUMENT, "forward: cache must be a Cache made for this model")
        tok = _i32(tokens, "tokens")
        if tok.size == 0:
            fail(INVALID_ARGUMENT, "forward: no tokens")
        pos = _i32(positions, "positions") if positions is not None else None
        if pos is not None and pos.size != tok.size:
            fail(2, "forward: %d positions for %d tokens" % (pos.size, tok.size))
        lr = _i32([tok.size - 1] if logit_rows is None else logit_rows, "logit_rows")
        keep = [tok, pos, lr]
        plan = L.StepPlan(tokens=_p32(tok), n_tokens=tok.size, positions=_p32(pos), logit_rows=_p32(lr),
                          n_logit_rows=lr.size)
        nl, hp = self._hp.n_layers, self._hp
        if layers is not None:
            if len(layers) != nl:
                fail(INVALID_ARGUMENT, "forward: %d layer plans for %d layers" % (len(layers), nl))
            arr = (L.LayerPlan * nl)()
            for i, d in enumerate(layers):
                d = dict(d or {})
                for key in d:
                    if key not in ("rows", "stat_rows", "stat_all_rows", "probe_rows", "want_argmax", "want_x"):
                        fail(INVALID_ARGUMENT, "forward: unknown layer plan key %r" % key)
                for key, nkey in (("rows", "n_rows"), ("stat_rows", "n_stat_rows"), ("probe_rows", "n_probe")):
                    if d.get(key) is not None:
                        a = _i32(d[key], key)
                        keep.append(a)
                        setattr(arr[i], key, _p32(a))
                        setattr(arr[i], nkey, a.size)
                arr[i].stat_all_rows = int(bool(d.get("stat_all_rows", 0)))
                arr[i].want_argmax = int(bool(d.get("want_argmax", 0)))
                arr[i].want_x = int(bool(d.get("want_x", 0)))
            keep.append(arr)
            plan.layers = arr
        res = L.StepResult()
        check(L.lib.kvs_model_forward(self.handle, cache.handle, ctypes.byref(plan), ctypes.byref(res)))
        out = {"logits": np.ctypeslib.as_array(res.logits, (res.n_logit_rows, res.vocab)).copy(),
               "rows_computed": int(res.rows_computed), "layers": []}
        for i in range(nl):
            st = res.layers[i]
            d = {"n_kv": int(st.n_kv)}
            if st.key_mass:
                d["key_mass"] = np.ctypeslib.as_array(st.key_mass, (hp.n_kv_heads, st.n_kv)).copy()
            if st.argmax:
                rows = layers[i].get("rows") if layers and layers[i] and layers[i].get("rows") is not None else None
                n_rows = len(rows) if rows is not None else tok.size
                d["argmax"] = np.ctypeslib.as_array(st.argmax, (n_rows, hp.n_heads)).copy()
            if st.probs:
                n_probe = len(layers[i]["probe_rows"])
                d["probs"] = np.ctypeslib.as_array(st.probs, (n_probe, hp.n_heads, st.n_kv)).copy()
            if st.x:
                d["x"] = np.ctypeslib.as_array(st.x, (st.n_x_rows, hp.dim)).copy()
            out["layers"].append(d)
        return out

    # ---- generation --------------------------------------------------------------------------
    def generate(self, prompt="", max_new=None, **kw):
        """generate_ar for an autoregressive model, generate_dlm for a diffusion one (llada, dream;
        max_new = gen_len)."""
        if self.arch in L.DIFFUSION_ARCHS:
            return self.generate_dlm(prompt, gen_len=max_new or 64, **kw)
        return self.generate_ar(prompt, max_new=max_new or 256, **kw)

    def generate_ar(self, prompt="", max_new=256, temperature=0.0, top_p=1.0, seed=42, policy=None,
                    budget=1.0, scope="head", buffer=0, cache_dtype="f32", draft=0):
        """Autoregressive decoding (kvs_generate_ar). prompt: text (BOS added) or ids. policy: None,
        a name or a Policy; budget a fraction (0, 1] or tokens per kv head. draft > 0: QuantSpec
        self-speculative decoding drafting that many tokens per verify step from the 4-bit view of a
        qh8 cache (cache_dtype "qh8"; kvs_ar_params.draft). Returns
        {"tokens" (int32), "text", "stats" (kvs_gen_stats as a dict)}."""
        ids = self._prompt(prompt)
        p = L.lib.kvs_ar_params_default()
        p.max_new, p.temperature, p.top_p, p.seed = int(max_new), float(temperature), float(top_p), int(seed)
        if scope not in L.SCOPES:
            fail(INVALID_ARGUMENT, "scope %r, want head, layer or global" % (scope,))
        pol = Policy(policy) if isinstance(policy, str) else policy
        if pol is not None and not isinstance(pol, Policy):
            fail(INVALID_ARGUMENT, "policy must be None, a name or a Policy")
        p.policy = pol._h if pol is not None else None
        p.budget, p.scope, p.evict_buffer = float(budget), L.SCOPES[scope], int(buffer)
        if isinstance(draft, bool) or not isinstance(draft, (int, np.integer)) or not 0 <= draft < 2**31:
            fail(INVALID_ARGUMENT, "draft must be an int >= 0 (tokens drafted per verify step), not %r" % (draft,))
        p.draft = int(draft)
        if max_new < 1:
            fail(INVALID_ARGUMENT, "max_new must be >= 1")
        cap = int(L.lib.kvs_ar_capacity(self.handle, ids.size, ctypes.byref(p)))
        check(0 if cap > 0 else 1)
        c = Cache(self, cap, "append", dtype=cache_dtype)
        out = np.zeros(int(max_new), dtype=np.int32)
        n = ctypes.c_int64(0)
        st = L.GenStats()
        try:
            check(L.lib.kvs_generate_ar(self.handle, c._h, _p32(ids), ids.size, ctypes.byref(p), L.TOKEN_CB(0), None,
                                        _p32(out), ctypes.byref(n), ctypes.byref(st)))
        finally:
            c.close()
        toks = out[: n.value].copy()
        # the continuation's text as printed after the prompt (the prompt's own text cut off)
        text = self.detokenize(np.concatenate([ids, toks]))[len(self.detokenize(ids)):]
        return {"tokens": toks, "text": text, "stats": _stats(st)}

    def generate_dlm(self, prompt="", gen_len=64, block_len=32, steps=0, threshold=0.0, schedule=None,
                     stop_eos=False, block_causal=False, **schedule_params):
        """Masked-diffusion decoding (kvs_generate_dlm). schedule: None / "none" (no cache), a name
        ("prefix", "dual", "delayed", "elastic"; schedule_params go to Schedule) or a Schedule.
        threshold > 0: Fast-dLLM parallel decoding; stop_eos: LLaDA's early stop at EOS;
        block_causal: block diffusion (prompt causal, blocks causal across; schedules none/prefix).
        Returns {"tokens", "text", "stats"}."""
        if self.arch not in L.DIFFUSION_ARCHS:
            fail(INVALID_ARGUMENT, "generate_dlm: %s is a %s model, not a masked-diffusion one" % (self.path, self.arch))
        ids = self._prompt(prompt)
        own = None
        if schedule is None or isinstance(schedule, str):
            own = schedule = Schedule(schedule or "none", **schedule_params)
        elif schedule_params:
            fail(INVALID_ARGUMENT, "schedule parameters go with a schedule name, not a Schedule")
        if not isinstance(schedule, Schedule):
            fail(INVALID_ARGUMENT, "schedule must be None, a name or a Schedule")
        p = L.lib.kvs_dlm_params_default()
        p.gen_len, p.block_len, p.steps, p.threshold = int(gen_len), int(block_len), int(steps or gen_len), float(threshold)
        p.schedule, p.stop_eos = schedule._h, int(bool(stop_eos))
        p.block_causal = int(bool(block_causal))
        c = Cache(self, ids.size + int(gen_len), "positional", keep_x=bool(schedule.cache_flags & L.CACHE_KEEP_X))
        out = np.zeros(max(int(gen_len), 1), dtype=np.int32)
        st = L.GenStats()
        try:
            check(L.lib.kvs_generate_dlm(self.handle, c._h, _p32(ids), ids.size, ctypes.byref(p), L.TOKEN_CB(0), None,
                                         _p32(out), ctypes.byref(st)))
        finally:
            c.close()
            if own is not None:
                own.close()
        return {"tokens": out.copy(), "text": self.detokenize(out), "stats": _stats(st)}

    # ---- eval --------------------------------------------------------------------------------
    def eval_eviction(self, text, policy, budget=0.25, ctx=256, scope="head", buffer=0):
        """Teacher-forced fidelity of eviction on one window of `text` (as `kvsieve eval`): the
        window (BOS + ctx-1 tokens) is decoded token by token with the full cache and with the
        policy's evictor; returns {"kl" (mean KL(full || evicted), nats), "top1_agreement",
        "perplexity", "perplexity_full", "predictions"}."""
        if self.arch in L.DIFFUSION_ARCHS:
            fail(INVALID_ARGUMENT, "eval_eviction: %s is a %s model: eviction is evaluated on autoregressive "
                 "models (next-token perplexity means nothing for a masked-diffusion one)" % (self.path, self.arch))
        ids = self.tokenize(text, bos=True)[: int(ctx)]
        if ids.size < 2:
            fail(INVALID_ARGUMENT, "eval_eviction: text too short")
        pol = Policy(policy) if isinstance(policy, str) else policy
        # the weight-reading policies (critical: Wo, expected: Wq) score from this model's weights
        L.lib.kvs_policy_set_model(pol._h, self.handle)
        ep = L.lib.kvs_evict_params_default()
        ep.policy, ep.budget, ep.scope, ep.buffer = pol._h, float(budget), L.SCOPES.get(scope, -1), int(buffer)
        ev = ctypes.c_void_p()
        check(L.lib.kvs_evictor_create(ctypes.byref(ev), ctypes.byref(ep), ctypes.byref(self._hp), ids.size))
        full = Cache(self, ids.size, "append")
        evc = Cache(self, int(L.lib.kvs_evictor_capacity(ev, 1)), "append")
        lplan = (L.LayerPlan * self._hp.n_layers)()
        kl = nll_f = nll_e = 0.0
        agree = 0
        try:
            check(L.lib.kvs_evictor_begin(ev, evc._h))
            for t in range(ids.size - 1):
                lf = self.forward(full, ids[t:t + 1], positions=[t])["logits"][0].astype(np.float64)
                any_ = ctypes.c_int(0)
                check(L.lib.kvs_evictor_plan(ev, 1, lplan, ctypes.byref(any_)))
                tok, pos, zero = ids[t:t + 1].copy(), np.array([t], np.int32), np.zeros(1, np.int32)
                plan = L.StepPlan(tokens=_p32(tok), n_tokens=1, positions=_p32(pos), logit_rows=_p32(zero),
                                  n_logit_rows=1, layers=lplan if any_.value else None)
                res = L.StepResult()
                check(L.lib.kvs_model_forward(self.handle, evc._h, ctypes.byref(plan), ctypes.byref(res)))
                le = np.ctypeslib.as_array(res.logits, (1, res.vocab))[0].astype(np.float64)
                check(L.lib.kvs_evictor_update(ev, evc._h, ctypes.byref(res)))
                lpf, lpe = lf - np.logaddexp.reduce(lf), le - np.logaddexp.reduce(le)
                kl += max(0.0, float(np.sum(np.exp(lpf) * (lpf - lpe))))
                agree += int(np.argmax(lf) == np.argmax(le))
                nll_f -= lpf[ids[t + 1]]
                nll_e -= lpe[ids[t + 1]]
        finally:
            full.close()
            evc.close()
            L.lib.kvs_evictor_destroy(ctypes.byref(ev))
        n = ids.size - 1
        return {"kl": kl / n, "top1_agreement": agree / n, "perplexity": float(np.exp(nll_e / n)),
                "perplexity_full": float(np.exp(nll_f / n)), "predictions": n}

    def close(self):
        if getattr(self, "_h", None):
            dev = getattr(self, "device", None)
            if dev is None or getattr(dev, "_h", None):  # not after its device (see Tensor.close)
                L.lib.kvs_model_destroy(ctypes.byref(self._h))
            self._h = None
        if getattr(self, "_tok", None):
            L.lib.kvs_tokenizer_destroy(ctypes.byref(self._tok))
            self._tok = None
        if getattr(self, "device", None) is not None:
            self.device._children.discard(self)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


__all__ = ["Model", "Cache", "Policy", "Schedule", "locate", "KvsError"]
