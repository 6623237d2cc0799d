"""The ops of include/kvsieve/ops.h on numpy arrays or device Tensors.

Every function takes the device first, then arrays (numpy, uploaded for the call) or Tensors (used
in place), and returns numpy arrays (downloaded). Shapes are numpy order, slowest first, as the C
comments write them: q [n_q][n_heads][head_dim] is a numpy array of shape (n_q, n_heads, head_dim).
Bad dtypes and shapes raise KvsError before or from the C call; nothing crashes.

Dtypes: each argument's docstring names what it takes. A numpy float64 array (numpy's default, and
a list of floats) is converted to float32 (a rounded copy) where float32 is taken, an integer array
to int32 where int32 is taken (values checked to fit); every other dtype raises
KvsError(KVS_ERR_DTYPE) naming the argument (float16 only where the docstring lists it; integers
never become floats). Tensors are used as they are, never converted.
"""
import ctypes

import numpy as np

from . import _lib as L
from .core import DTYPE, INVALID_ARGUMENT, SHAPE, Tensor, as_tensor, check, fail

_ptr = ctypes.c_void_p


def _h(t):
    return t.handle if t is not None else None


def _out(dev, shape, dtype="f32"):
    return Tensor(dev, shape=shape, dtype=dtype)


def _free(*ts):
    for t in ts:
        if t is not None:
            t.close()


def attention(dev, q, k, v, *, causal=False, scale=0.0, n_kv=0, q_pos=None, k_pos=None, kv_len=None,
              row_len=None, mask=None, key_mass=False, stat_rows=None, probe_rows=None, argmax=False,
              row_stats=False):
    """Grouped-query attention with the statistics of the same pass (kvs_attention).

    q: (n_q, n_heads, head_dim) float32; k, v: (n_kv_heads, capacity, head_dim) float32 (or float16,
    both the same). causal: query i at position n_kv - n_q + i sees keys 0..its position (q_pos /
    k_pos int32 arrays override the positions). kv_len (n_kv_heads,), row_len (n_q,) int32 limits;
    mask (n_q, n_kv) float32 additive bias. Statistics, each optional:
      key_mass=True  -> "key_mass" (n_kv_heads, capacity): attention each key received, summed over
                        the query rows (stat_rows: int32 subset), mean over each GQA group
      probe_rows=[..]-> "probs" (n_probe, n_heads, capacity): the attention rows of those queries
      argmax=True    -> "argmax" (n_q, n_heads) int32: the most-attended key (-1 when none visible)
      row_stats=True -> "row_max", "row_sum" (n_q, n_heads): softmax max logit and normaliser
    Returns {"out": (n_q, n_heads, head_dim) float32, plus the statistics asked for}."""
    made = []

    def arg(x, what, dtype=None, shape=None):
        if x is None:
            return None
        t = as_tensor(dev, x, what, dtype, shape)
        if t is not x:
            made.append(t)
        return t

    try:
        tq = arg(q, "q", "f32")
        if tq is None:
            fail(INVALID_ARGUMENT, "q is required")
        if len(tq.shape) != 3:
            fail(SHAPE, "q: shape %s, want (n_q, n_heads, head_dim)" % (tq.shape,))
        n_q, n_heads, d = tq.shape
        tk = arg(k, "k", ("f32", "f16"))
        tv = arg(v, "v", ("f32", "f16"))
        if tk is None or tv is None:
            fail(INVALID_ARGUMENT, "k and v are required")
        if len(tk.shape) != 3 or tk.shape != tv.shape or tk.shape[2] != d:
            fail(SHAPE, "k %s and v %s: want both (n_kv_heads, capacity, %d)" % (tk.shape, tv.shape, d))
        h_kv, cap = tk.shape[0], tk.shape[1]
        p = L.lib.kvs_attention_params_default()
        p.scale, p.causal, p.n_kv = float(scale), int(bool(causal)), int(n_kv)
        for name, x, shape in (("q_pos", q_pos, (n_q,)), ("k_pos", k_pos, (h_kv, cap)), ("kv_len", kv_len, (h_kv,)),
                               ("row_len", row_len, (n_q,)), ("stat_rows", stat_rows, (None,)),
                               ("probe_rows", probe_rows, (None,))):
            t = arg(x, name, "i32", shape)
            setattr(p, name, _h(t))
        tm = arg(mask, "mask", "f32", (n_q, None))
        p.mask = _h(tm)
        out = _out(dev, (n_q, n_heads, d))
        made.append(out)
        stats = {}
        if key_mass:
            stats["key_mass"] = _out(dev, (h_kv, cap))
            p.key_mass = stats["key_mass"].handle
        if probe_rows is not None:
            n_probe = int(np.asarray(probe_rows).size) if not isinstance(probe_rows, Tensor) else probe_rows.shape[0]
            stats["probs"] = _out(dev, (n_probe, n_heads, cap))
            p.probs = stats["probs"].handle
        if argmax:
            stats["argmax"] = _out(dev, (n_q, n_heads), "i32")
            p.argmax = stats["argmax"].handle
        if row_stats:
            stats["row_max"] = _out(dev, (n_q, n_heads))
            stats["row_sum"] = _out(dev, (n_q, n_heads))
            p.row_max, p.row_sum = stats["row_max"].handle, stats["row_sum"].handle
        made.extend(stats.values())
        check(L.lib.kvs_attention(dev.handle, tq.handle, tk.handle, tv.handle, out.handle, ctypes.byref(p)))
        res = {"out": out.numpy()}
        for name, t in stats.items():
            res[name] = t.numpy()
        return res
    finally:
        _free(*made)


def _unary(dev, x, what):
    t = as_tensor(dev, x, what, "f32")
    return t, (t is not x)


def dwt(dev, x, wavelet="haar", levels=1):
    """Multi-level DWT along the last axis (kvs_dwt): x (rows, n) float32 ->
    (rows, kvs_dwt_length(n, levels)) laid out [a_J | d_J | ... | d_1] as pywt.wavedec."""
    if wavelet not in L.WAVELETS:
        fail(INVALID_ARGUMENT, "unknown wavelet %r (want haar, db2, db4)" % (wavelet,))
    t, own = _unary(dev, x, "x")
    try:
        if len(t.shape) != 2:
            fail(SHAPE, "dwt: x shape %s, want (rows, n)" % (t.shape,))
        m = int(L.lib.kvs_dwt_length(t.shape[1], int(levels)))
        if m < 0:
            fail(6, "dwt: levels %r outside 1..24 or n < 1" % (levels,))
        y = _out(dev, (t.shape[0], m))
        try:
            check(L.lib.kvs_dwt(dev.handle, t.handle, y.handle, L.WAVELETS[wavelet], int(levels)))
            return y.numpy()
        finally:
            y.close()
    finally:
        if own:
            t.close()


def idwt(dev, y, n, wavelet="haar", levels=1):
    """Inverse of dwt: y (rows, kvs_dwt_length(n, levels)) float32 -> x (rows, n)."""
    if wavelet not in L.WAVELETS:
        fail(INVALID_ARGUMENT, "unknown wavelet %r (want haar, db2, db4)" % (wavelet,))
    t, own = _unary(dev, y, "y")
    try:
        if len(t.shape) != 2:
            fail(SHAPE, "idwt: y shape %s, want (rows, coefficients)" % (t.shape,))
        if not isinstance(n, int) or n < 1:
            fail(INVALID_ARGUMENT, "idwt: n must be an int >= 1")
        x = _out(dev, (t.shape[0], n))
        try:
            check(L.lib.kvs_idwt(dev.handle, t.handle, x.handle, L.WAVELETS[wavelet], int(levels)))
            return x.numpy()
        finally:
            x.close()
    finally:
        if own:
            t.close()


def topk(dev, x, k, *, order_by_index=False, row_len=None, values=True, global_=False):
    """Top-k (kvs_topk per row of x (rows, n); global_=True: kvs_topk_global over all of x).
    Returns (idx int32 (rows, k) or (k,), values float32 of the same shape or None)."""
    t, own = _unary(dev, x, "x")
    made = []
    try:
        if not isinstance(k, (int, np.integer)):
            fail(INVALID_ARGUMENT, "topk: k must be an int")
        p = L.lib.kvs_topk_params_default()
        p.k, p.order_by_index = int(k), int(bool(order_by_index))
        if k < 1:
            fail(6, "topk: k = %d, want 1 <= k <= n" % k)
        shape = (int(k),) if global_ else (int(np.prod(t.shape[:-1])) if len(t.shape) > 1 else 1, int(k))
        if row_len is not None:
            if global_:
                fail(INVALID_ARGUMENT, "topk: row_len applies to per-row top-k only")
            rl = as_tensor(dev, row_len, "row_len", "i32", (shape[0],))
            if rl is not row_len:
                made.append(rl)
            p.row_len = rl.handle
        idx = _out(dev, shape, "i32")
        made.append(idx)
        val = _out(dev, shape) if values else None
        if val is not None:
            made.append(val)
        fn = L.lib.kvs_topk_global if global_ else L.lib.kvs_topk
        check(fn(dev.handle, t.handle, idx.handle, _h(val), ctypes.byref(p)))
        return idx.numpy(), (val.numpy() if val is not None else None)
    finally:
        _free(*made)
        if own:
            t.close()


def gather(dev, src, idx, n_dst=None):
    """dst[g][i] = src[g][idx[g][i]] (kvs_gather). src (G, N, row) or (N, row), any of float32 /
    float16 / int32; idx int32 (G, n) or (n,). Returns dst (G, n_dst or n, row) (rows >= n zero)."""
    ts = as_tensor(dev, src, "src")
    ti = as_tensor(dev, idx, "idx", "i32")
    made = [t for t, a in ((ts, src), (ti, idx)) if t is not a]
    try:
        n = ti.shape[-1]
        shape = ts.shape[:-2] + (int(n_dst or n), ts.shape[-1]) if len(ts.shape) >= 2 else None
        if shape is None:
            fail(SHAPE, "gather: src shape %s, want (G, N, row) or (N, row)" % (ts.shape,))
        dst = Tensor(dev, np.zeros(shape, dtype=ts.numpy_dtype))
        made.append(dst)
        check(L.lib.kvs_gather(dev.handle, ts.handle, ti.handle, dst.handle))
        return dst.numpy()
    finally:
        _free(*made)


def scatter(dev, src, idx, dst, src_token_major=False):
    """dst[g][idx[g][i]] = src[g][i] (kvs_scatter); dst is a numpy array (a modified copy is
    returned) or a Tensor (written in place, returned downloaded)."""
    ts, ti = as_tensor(dev, src, "src"), as_tensor(dev, idx, "idx", "i32")
    td = as_tensor(dev, dst, "dst")
    made = [t for t, a in ((ts, src), (ti, idx), (td, dst)) if t is not a]
    try:
        check(L.lib.kvs_scatter(dev.handle, ts.handle, ti.handle, td.handle, int(bool(src_token_major))))
        return td.numpy()
    finally:
        _free(*made)


def compact(dev, t, idx):
    """In-place compaction t[g][i] = old t[g][idx[g][i]] (kvs_compact); t as in scatter's dst."""
    tt, ti = as_tensor(dev, t, "t"), as_tensor(dev, idx, "idx", "i32")
    made = [x for x, a in ((tt, t), (ti, idx)) if x is not a]
    try:
        check(L.lib.kvs_compact(dev.handle, tt.handle, ti.handle))
        return tt.numpy()
    finally:
        _free(*made)


def softmax(dev, x, scale=1.0):
    """Row softmax along the last axis (kvs_softmax)."""
    t, own = _unary(dev, x, "x")
    y = _out(dev, t.shape)
    try:
        check(L.lib.kvs_softmax(dev.handle, t.handle, y.handle, float(scale)))
        return y.numpy()
    finally:
        y.close()
        if own:
            t.close()


def rmsnorm(dev, x, w, eps=1e-5):
    """RMSNorm of the rows of x (.., dim) with weight w (dim,) (kvs_rmsnorm)."""
    t, own = _unary(dev, x, "x")
    tw = as_tensor(dev, w, "w", "f32")
    y = _out(dev, t.shape)
    try:
        check(L.lib.kvs_rmsnorm(dev.handle, t.handle, tw.handle, y.handle, float(eps)))
        return y.numpy()
    finally:
        _free(y, tw if tw is not w else None, t if own else None)


def matmul(dev, W, x):
    """y = x W^T (kvs_matmul): W (m, k) float32/float16, x (n, k) float32 -> y (n, m)."""
    tw = as_tensor(dev, W, "W", ("f32", "f16"))
    tx = as_tensor(dev, x, "x", "f32")
    made = [t for t, a in ((tw, W), (tx, x)) if t is not a]
    try:
        if len(tw.shape) != 2:
            fail(SHAPE, "matmul: W shape %s, want (m, k)" % (tw.shape,))
        n = int(np.prod(tx.shape)) // tw.shape[1] if tw.shape[1] else 0
        y = _out(dev, (max(n, 1), tw.shape[0]))
        made.append(y)
        check(L.lib.kvs_matmul(dev.handle, tw.handle, tx.handle, y.handle, 0))
        return y.numpy()
    finally:
        _free(*made)


def rope(dev, x, pos, mode="adjacent", theta_base=10000.0, n_rot=0):
    """RoPE of x (n, n_heads, head_dim) at int32 positions pos (n,) (kvs_rope); returns the rotated x."""
    tx = as_tensor(dev, x, "x", "f32")  # a numpy x is uploaded as a copy: the caller's array is not rotated
    tp = as_tensor(dev, pos, "pos", "i32")
    made = [t for t, a in ((tx, x), (tp, pos)) if t is not a]
    try:
        p = L.lib.kvs_rope_params_default()
        if mode not in ("adjacent", "neox"):
            fail(INVALID_ARGUMENT, "rope: mode %r, want adjacent or neox" % (mode,))
        p.mode = L.ROPE_ADJACENT if mode == "adjacent" else L.ROPE_NEOX
        p.theta_base, p.n_rot = float(theta_base), int(n_rot)
        check(L.lib.kvs_rope(dev.handle, tx.handle, tp.handle, ctypes.byref(p)))
        return tx.numpy()
    finally:
        _free(*made)


def add(dev, a, b):
    """a + b element-wise (kvs_add), float32, equal element counts; returns a's shape."""
    ta, tb = as_tensor(dev, a, "a", "f32"), as_tensor(dev, b, "b", "f32")
    made = [t for t, x in ((ta, a), (tb, b)) if t is not x]
    try:
        y = _out(dev, ta.shape)
        made.append(y)
        check(L.lib.kvs_add(dev.handle, ta.handle, tb.handle, y.handle))
        return y.numpy()
    finally:
        _free(*made)


def log_mass(dev, row_max, row_sum):
    """row_max + log(row_sum), -inf where row_sum == 0 (kvs_log_mass: an attention call's log softmax
    mass, the form lse_extra takes), float32, equal element counts; returns row_max's shape."""
    tm, tl = as_tensor(dev, row_max, "row_max", "f32"), as_tensor(dev, row_sum, "row_sum", "f32")
    made = [t for t, x in ((tm, row_max), (tl, row_sum)) if t is not x]
    try:
        y = _out(dev, tm.shape)
        made.append(y)
        check(L.lib.kvs_log_mass(dev.handle, tm.handle, tl.handle, y.handle))
        return y.numpy()
    finally:
        _free(*made)


def swiglu(dev, gate, up):
    """silu(gate) * up (kvs_swiglu), float32, identical shapes."""
    tg, tu = as_tensor(dev, gate, "gate", "f32"), as_tensor(dev, up, "up", "f32")
    made = [t for t, x in ((tg, gate), (tu, up)) if t is not x]
    try:
        y = _out(dev, tg.shape)
        made.append(y)
        check(L.lib.kvs_swiglu(dev.handle, tg.handle, tu.handle, y.handle))
        return y.numpy()
    finally:
        _free(*made)


def copy(dev, src, dtype):
    """Converts src (float32 / float16 array or Tensor) to dtype "f32", "f16" or "bf16" (kvs_copy,
    round-to-nearest-even). bf16 comes back as its raw uint16 bits."""
    ts = as_tensor(dev, src, "src", ("f32", "f16", "bf16"))
    made = [ts] if ts is not src else []
    try:
        if dtype not in ("f32", "f16", "bf16"):
            fail(3, "copy: dtype %r, want f32, f16 or bf16" % (dtype,))
        y = _out(dev, ts.shape, dtype)
        made.append(y)
        check(L.lib.kvs_copy(dev.handle, ts.handle, y.handle))
        return y.numpy()
    finally:
        _free(*made)


def embedding(dev, table, ids):
    """out[i] = table[ids[i]] (kvs_embedding): table (vocab, dim) float32/float16, ids ints in
    [0, vocab) (checked by the library: KVS_ERR_OUT_OF_RANGE names the first bad id)."""
    tt = as_tensor(dev, table, "table", ("f32", "f16"))
    made = [tt] if tt is not table else []
    try:
        if len(tt.shape) != 2:
            fail(SHAPE, "embedding: table shape %s, want (vocab, dim)" % (tt.shape,))
        ids = np.asarray(ids)
        if ids.size and ids.dtype.kind not in "iu":
            fail(DTYPE, "embedding: ids dtype %s, want integers" % ids.dtype)
        ids = np.ascontiguousarray(ids.astype(np.int64).reshape(-1))
        if ids.size and (ids.min() < -2**31 or ids.max() >= 2**31):
            fail(6, "embedding: an id does not fit int32")
        ids = ids.astype(np.int32)
        if ids.size == 0:
            fail(INVALID_ARGUMENT, "embedding: no ids")
        y = _out(dev, (ids.size, tt.shape[1]))
        made.append(y)
        check(L.lib.kvs_embedding(dev.handle, tt.handle, ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                  ids.size, y.handle))
        return y.numpy()
    finally:
        _free(*made)
