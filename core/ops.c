/* Op front-ends: validate once at the public boundary, derive sizes, dispatch to the backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---- validation helpers ------------------------------------------------------------------- */

#define CHECK_NONNULL(op, t)                                                                       \
    do {                                                                                           \
        if (!(t)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, #t);            \
    } while (0)

static kvs_status same_dev(const char *op, kvs_device *dev, const kvs_tensor *t, const char *what) {
    if (!dev) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: device is NULL", op);
    if (t && t->dev != dev)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: tensor %s ('%s') lives on another device", op, what, t->name);
    return KVS_OK;
}

static kvs_status want_dtype(const char *op, const kvs_tensor *t, const char *what, kvs_dtype d) {
    if (t->dtype != d)
        return kvs_error(KVS_ERR_DTYPE, "%s: %s ('%s') must be %s, got %s", op, what, t->name,
                         kvs_dtype_name(d), kvs_dtype_name(t->dtype));
    return KVS_OK;
}

static kvs_status want_nel(const char *op, const kvs_tensor *t, const char *what, int64_t n) {
    if (kvs_tensor_nelements(t) != n)
        return kvs_error(KVS_ERR_SHAPE, "%s: %s ('%s') must have %lld elements, has %lld", op, what,
                         t->name, (long long)n, (long long)kvs_tensor_nelements(t));
    return KVS_OK;
}

/* Exact shape check: ne[0..3] == want (trailing ones implied). */
static kvs_status want_shape(const char *op, const kvs_tensor *t, const char *what, int64_t a, int64_t b,
                             int64_t c) {
    if (t->ne[0] != a || t->ne[1] != b || t->ne[2] != c || t->ne[3] != 1)
        return kvs_error(KVS_ERR_SHAPE, "%s: %s ('%s') must be ne={%lld,%lld,%lld}, is {%lld,%lld,%lld,%lld}",
                         op, what, t->name, (long long)a, (long long)b, (long long)c, (long long)t->ne[0],
                         (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    return KVS_OK;
}

static int overlaps(const kvs_tensor *a, const kvs_tensor *b) {
    if (!a || !b || a->buf != b->buf) return 0;
    return a->offset < b->offset + b->nbytes && b->offset < a->offset + a->nbytes;
}

static int is_float(kvs_dtype d) { return d == KVS_F32 || d == KVS_F16 || d == KVS_BF16; }

#define TRY_DEV(t) KVS_TRY(same_dev(op, dev, t, #t))

/* ---- dispatch: the backend's supports() first, then the op (nothing in query mode) ---------- */

static kvs_status ask_supports(kvs_device *dev, kvs_op_id op, const void *args) {
    if (!dev->ops->supports) return KVS_OK;
    char why[256] = "";
    if (dev->ops->supports(dev, op, args, why, sizeof why)) return KVS_OK;
    return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_%s (%s, %s): %s", kvs_op_name(op), dev->ops->name, dev->info.name,
                     why[0] ? why : "not supported by this device");
}

#define KVS_OP_DISPATCH_(ctx, name, args)                                                          \
    static kvs_status dispatch_##name(kvs_device *dev, const args *a) {                             \
        KVS_TRY(ask_supports(dev, KVS_OP_##name, a));                                               \
        if (dev->query) return KVS_OK;                                                              \
        if (!dev->prof) return dev->ops->name(dev, a);                                              \
        double t0_ = kvs_profile_begin(dev);                                                        \
        kvs_status s_ = dev->ops->name(dev, a);                                                     \
        kvs_profile_end(dev, KVS_OP_##name, t0_, 0);                                                \
        return s_;                                                                                  \
    }
KVS_OP_LIST(KVS_OP_DISPATCH_, ~)

/* ---- dense ops ---------------------------------------------------------------------------- */

kvs_status kvs_matmul(kvs_device *dev, const kvs_tensor *W, const kvs_tensor *x, kvs_tensor *y, int accumulate) {
    const char *op = "kvs_matmul";
    CHECK_NONNULL(op, W); CHECK_NONNULL(op, x); CHECK_NONNULL(op, y);
    TRY_DEV(W); TRY_DEV(x); TRY_DEV(y);
    if (!is_float(W->dtype) && !kvs_dtype_is_quant(W->dtype))
        return kvs_error(KVS_ERR_DTYPE, "%s: W dtype %s (want f32, f16, bf16 or a block type)", op,
                         kvs_dtype_name(W->dtype));
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    KVS_TRY(want_dtype(op, y, "y", KVS_F32));
    if (W->ne[2] != 1 || W->ne[3] != 1)
        return kvs_error(KVS_ERR_SHAPE, "%s: W ('%s') must be 2-D [m][k]", op, W->name);
    kvs_matmul_args a = {.W = W, .x = x, .y = y, .k = W->ne[0], .m = W->ne[1], .accumulate = accumulate != 0};
    if (x->ne[0] != a.k)
        return kvs_error(KVS_ERR_SHAPE, "%s: x row length %lld != W ne[0] %lld ('%s')", op, (long long)x->ne[0],
                         (long long)a.k, W->name);
    a.n = kvs_tensor_rows(x);
    if (y->ne[0] != a.m || kvs_tensor_rows(y) != a.n)
        return kvs_error(KVS_ERR_SHAPE, "%s: y must be [%lld][%lld], is ne={%lld, rows %lld}", op, (long long)a.n,
                         (long long)a.m, (long long)y->ne[0], (long long)kvs_tensor_rows(y));
    if (overlaps(y, x) || overlaps(y, W)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: y aliases x or W", op);
    return dispatch_matmul(dev, &a);
}

/* Shared checks of the f32 element-wise ops y = f(a, b): non-NULL, one device, f32, equal element
 * counts (written to *n), y either the same view as an input or disjoint from it. */
static kvs_status check_ew2(kvs_device *dev, const char *op, const kvs_tensor *a, const char *an, const kvs_tensor *b,
                            const char *bn, const kvs_tensor *y, const char *yn, int64_t *n) {
    const kvs_tensor *t[3] = {a, b, y};
    const char *nm[3] = {an, bn, yn};
    for (int i = 0; i < 3; i++) {
        if (!t[i]) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, nm[i]);
        KVS_TRY(same_dev(op, dev, t[i], nm[i]));
    }
    KVS_TRY(want_dtype(op, a, an, KVS_F32));
    KVS_TRY(want_dtype(op, b, bn, KVS_F32));
    KVS_TRY(want_dtype(op, y, yn, KVS_F32));
    *n = kvs_tensor_nelements(a);
    KVS_TRY(want_nel(op, b, bn, *n));
    KVS_TRY(want_nel(op, y, yn, *n));
    if ((overlaps(y, a) && y->offset != a->offset) || (overlaps(y, b) && y->offset != b->offset))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: %s partially overlaps an input", op, yn);
    return KVS_OK;
}

kvs_status kvs_add(kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y) {
    int64_t n = 0;
    KVS_TRY(check_ew2(dev, "kvs_add", a, "a", b, "b", y, "y", &n));
    kvs_binary_args args = {.a = a, .b = b, .y = y, .n = n};
    return dispatch_add(dev, &args);
}

kvs_status kvs_log_mass(kvs_device *dev, const kvs_tensor *row_max, const kvs_tensor *row_sum, kvs_tensor *lse) {
    int64_t n = 0;
    KVS_TRY(check_ew2(dev, "kvs_log_mass", row_max, "row_max", row_sum, "row_sum", lse, "lse", &n));
    kvs_binary_args args = {.a = row_max, .b = row_sum, .y = lse, .n = n};
    return dispatch_log_mass(dev, &args);
}

kvs_status kvs_copy(kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst) {
    const char *op = "kvs_copy";
    CHECK_NONNULL(op, src); CHECK_NONNULL(op, dst);
    TRY_DEV(src); TRY_DEV(dst);
    if (!is_float(src->dtype) || !is_float(dst->dtype))
        return kvs_error(KVS_ERR_DTYPE, "%s: %s -> %s (want f32, f16, bf16)", op, kvs_dtype_name(src->dtype),
                         kvs_dtype_name(dst->dtype));
    int64_t n = kvs_tensor_nelements(src);
    KVS_TRY(want_nel(op, dst, "dst", n));
    if (overlaps(src, dst)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: dst aliases src", op);
    kvs_copy_args a = {.src = src, .dst = dst, .n = n};
    return dispatch_copy(dev, &a);
}

kvs_status kvs_rmsnorm(kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w, kvs_tensor *y, float eps) {
    const char *op = "kvs_rmsnorm";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, w); CHECK_NONNULL(op, y);
    TRY_DEV(x); TRY_DEV(w); TRY_DEV(y);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    KVS_TRY(want_dtype(op, w, "w", KVS_F32));
    KVS_TRY(want_dtype(op, y, "y", KVS_F32));
    int64_t dim = x->ne[0];
    KVS_TRY(want_nel(op, w, "w", dim));
    if (y->ne[0] != dim || kvs_tensor_rows(y) != kvs_tensor_rows(x))
        return kvs_error(KVS_ERR_SHAPE, "%s: y shape differs from x", op);
    if (!(eps > 0.0f) || !isfinite(eps)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: eps must be > 0", op);
    if (overlaps(y, x) && y->offset != x->offset) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: y partially overlaps x", op);
    kvs_rmsnorm_args a = {.x = x, .w = w, .y = y, .rows = kvs_tensor_rows(x), .dim = dim, .eps = eps};
    return dispatch_rmsnorm(dev, &a);
}

kvs_status kvs_swiglu(kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up, kvs_tensor *out) {
    int64_t n = 0;
    KVS_TRY(check_ew2(dev, "kvs_swiglu", gate, "gate", up, "up", out, "out", &n));
    kvs_binary_args a = {.a = gate, .b = up, .y = out, .n = n};
    return dispatch_swiglu(dev, &a);
}

kvs_status kvs_softmax(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, float scale) {
    const char *op = "kvs_softmax";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, y);
    TRY_DEV(x); TRY_DEV(y);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    KVS_TRY(want_dtype(op, y, "y", KVS_F32));
    if (y->ne[0] != x->ne[0] || kvs_tensor_rows(y) != kvs_tensor_rows(x))
        return kvs_error(KVS_ERR_SHAPE, "%s: y shape differs from x", op);
    if (!(scale > 0.0f) || !isfinite(scale)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: scale must be finite and > 0", op);
    if (overlaps(y, x) && y->offset != x->offset) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: y partially overlaps x", op);
    kvs_softmax_args a = {.x = x, .y = y, .rows = kvs_tensor_rows(x), .n = x->ne[0], .scale = scale};
    return dispatch_softmax(dev, &a);
}

kvs_status kvs_embedding(kvs_device *dev, const kvs_tensor *table, const int32_t *ids, int64_t n, kvs_tensor *out) {
    const char *op = "kvs_embedding";
    CHECK_NONNULL(op, table); CHECK_NONNULL(op, out);
    TRY_DEV(table); TRY_DEV(out);
    if (!ids || n < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: need n >= 1 ids", op);
    if (!is_float(table->dtype) && !kvs_dtype_is_quant(table->dtype))
        return kvs_error(KVS_ERR_DTYPE, "%s: table dtype %s", op, kvs_dtype_name(table->dtype));
    KVS_TRY(want_dtype(op, out, "out", KVS_F32));
    int64_t dim = table->ne[0], vocab = kvs_tensor_rows(table);
    if (out->ne[0] != dim || kvs_tensor_rows(out) != n)
        return kvs_error(KVS_ERR_SHAPE, "%s: out must be [%lld][%lld]", op, (long long)n, (long long)dim);
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: ids[%lld] = %d outside vocabulary [0, %lld)", op, (long long)i,
                             ids[i], (long long)vocab);
    kvs_embedding_args a = {.table = table, .out = out, .ids = ids, .n = n, .dim = dim};
    return dispatch_embedding(dev, &a);
}

/* ---- rope --------------------------------------------------------------------------------- */

kvs_rope_params kvs_rope_params_default(void) {
    kvs_rope_params p = {.mode = KVS_ROPE_ADJACENT, .theta_base = 10000.0f, .n_rot = 0, .freq_scale = 1.0f};
    return p;
}

static kvs_status rope_resolve(const char *op, const kvs_rope_params *p, int64_t head_dim, kvs_rope_params *out) {
    if (!p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: params is NULL", op);
    *out = *p;
    if (p->mode != KVS_ROPE_ADJACENT && p->mode != KVS_ROPE_NEOX)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: unknown rope mode %d", op, (int)p->mode);
    if (!(p->theta_base > 1.0f) || !isfinite(p->theta_base))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: theta_base must be > 1", op);
    if (!(p->freq_scale > 0.0f) || !isfinite(p->freq_scale))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: freq_scale must be > 0", op);
    if (out->n_rot == 0) out->n_rot = (int)head_dim;
    if (out->n_rot < 2 || out->n_rot % 2 || out->n_rot > head_dim)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: n_rot %d must be even and in [2, head_dim=%lld]", op,
                         out->n_rot, (long long)head_dim);
    return KVS_OK;
}

kvs_status kvs_rope(kvs_device *dev, kvs_tensor *x, const kvs_tensor *pos, const kvs_rope_params *p) {
    const char *op = "kvs_rope";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, pos);
    TRY_DEV(x); TRY_DEV(pos);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    KVS_TRY(want_dtype(op, pos, "pos", KVS_I32));
    if (x->ne[3] != 1) return kvs_error(KVS_ERR_SHAPE, "%s: x must be [n][n_heads][head_dim]", op);
    kvs_rope_args a = {.x = x, .pos = pos, .head_dim = x->ne[0], .pos_div = x->ne[1]};
    a.n_vec = x->ne[1] * x->ne[2];
    KVS_TRY(want_nel(op, pos, "pos", x->ne[2]));
    KVS_TRY(rope_resolve(op, p, a.head_dim, &a.p));
    return dispatch_rope(dev, &a);
}

kvs_status kvs_rope_shift(kvs_device *dev, kvs_tensor *k, const kvs_tensor *delta, int64_t n_rows,
                          const kvs_rope_params *p) {
    const char *op = "kvs_rope_shift";
    CHECK_NONNULL(op, k); CHECK_NONNULL(op, delta);
    TRY_DEV(k); TRY_DEV(delta);
    if (k->dtype != KVS_F32 && k->dtype != KVS_F16)
        return kvs_error(KVS_ERR_DTYPE, "%s: k must be f32 or f16, got %s", op, kvs_dtype_name(k->dtype));
    KVS_TRY(want_dtype(op, delta, "delta", KVS_I32));
    if (k->ne[3] != 1) return kvs_error(KVS_ERR_SHAPE, "%s: k must be [n_kv_heads][capacity][head_dim]", op);
    int64_t cap = k->ne[1];
    KVS_TRY(want_nel(op, delta, "delta", cap * k->ne[2]));
    if (n_rows < 1 || n_rows > cap)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: n_rows %lld outside [1, capacity=%lld]", op, (long long)n_rows,
                         (long long)cap);
    kvs_rope_args a = {.x = k, .pos = delta, .head_dim = k->ne[0], .pos_div = 1, .n_vec = cap * k->ne[2],
                       .vec_stride_rows = cap, .n_rows = n_rows};
    KVS_TRY(rope_resolve(op, p, a.head_dim, &a.p));
    return dispatch_rope(dev, &a);
}

/* ---- attention ---------------------------------------------------------------------------- */

kvs_attention_params kvs_attention_params_default(void) {
    kvs_attention_params p;
    memset(&p, 0, sizeof p);
    return p;
}

kvs_status kvs_attention(kvs_device *dev, const kvs_tensor *q, const kvs_tensor *k, const kvs_tensor *v,
                         kvs_tensor *out, const kvs_attention_params *p) {
    const char *op = "kvs_attention";
    CHECK_NONNULL(op, q); CHECK_NONNULL(op, k); CHECK_NONNULL(op, v); CHECK_NONNULL(op, out); CHECK_NONNULL(op, p);
    TRY_DEV(q); TRY_DEV(k); TRY_DEV(v); TRY_DEV(out);
    KVS_TRY(want_dtype(op, q, "q", KVS_F32));
    KVS_TRY(want_dtype(op, out, "out", KVS_F32));
    const kvs_tensor *kv2[2] = {k, v};
    for (int w = 0; w < 2; w++) {
        const kvs_dtype t = kv2[w]->dtype;
        if (!(t == KVS_F32 || t == KVS_F16 || t == KVS_BF16 || t == KVS_Q8_0 || t == KVS_Q4_0 || t == KVS_Q4_1 ||
              t == KVS_IQ4_NL))
            return kvs_error(KVS_ERR_DTYPE, "%s: %s must be f32, f16, bf16, q8_0, q4_0, q4_1 or iq4_nl, got %s", op,
                             w ? "v" : "k", kvs_dtype_name(t));
    }
    kvs_attention_args a;
    memset(&a, 0, sizeof a);
    a.q = q; a.k = k; a.v = v; a.out = out; a.p = *p;
    a.head_dim = k->ne[0];
    a.head_dim_v = v->ne[0];
    const int64_t d_q = q->ne[0];
    a.n_heads = q->ne[1];
    a.n_q = q->ne[2];
    a.n_kv_heads = k->ne[2];
    a.capacity = k->ne[1];
    if (q->ne[3] != 1) return kvs_error(KVS_ERR_SHAPE, "%s: q must be 3-D [n_q][n_heads][head_dim]", op);
    /* q and k share d_k (q->ne[0]), v and out share d_v (v->ne[0]); the two may differ */
    if (!p->q_channels && d_q != a.head_dim)
        return kvs_error(KVS_ERR_SHAPE, "%s: k's head_dim %lld differs from q's %lld (q and k share d_k)", op,
                         (long long)a.head_dim, (long long)d_q);
    if (p->q_channels && a.head_dim > d_q)
        return kvs_error(KVS_ERR_SHAPE, "%s: k's head_dim %lld (d_k) exceeds q's %lld with q_channels", op,
                         (long long)a.head_dim, (long long)d_q);
    if (out->ne[0] != a.head_dim_v)
        return kvs_error(KVS_ERR_SHAPE, "%s: out's head_dim %lld differs from v's %lld (v and out share d_v)", op,
                         (long long)out->ne[0], (long long)a.head_dim_v);
    KVS_TRY(want_shape(op, k, "k", a.head_dim, a.capacity, a.n_kv_heads));
    KVS_TRY(want_shape(op, v, "v", a.head_dim_v, a.capacity, a.n_kv_heads));
    if (p->q_channels)
        for (int64_t e = 0; e < a.n_kv_heads * a.head_dim; e++)
            if (p->q_channels[e] < 0 || p->q_channels[e] >= d_q)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: q_channels[head %lld][%lld] = %d outside [0, d_q=%lld)", op,
                                 (long long)(e / a.head_dim), (long long)(e % a.head_dim), p->q_channels[e], (long long)d_q);
    KVS_TRY(want_shape(op, out, "out", a.head_dim_v, a.n_heads, a.n_q));
    if (a.n_heads % a.n_kv_heads)
        return kvs_error(KVS_ERR_SHAPE, "%s: n_heads %lld is not a multiple of n_kv_heads %lld (GQA)", op,
                         (long long)a.n_heads, (long long)a.n_kv_heads);
    if (overlaps(out, q) || overlaps(out, k) || overlaps(out, v))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out aliases q, k or v", op);
    if (p->n_kv < 0 || p->n_kv > a.capacity)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: n_kv %lld outside [0, capacity=%lld]", op, (long long)p->n_kv,
                         (long long)a.capacity);
    a.n_kv = p->n_kv ? p->n_kv : a.capacity;
    a.p.n_kv = a.n_kv;
    if (p->scale < 0.0f || !isfinite(p->scale)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: scale must be >= 0", op);
    a.p.scale = p->scale > 0.0f ? p->scale : (float)(1.0 / sqrt((double)d_q));
    a.p.q_channels = NULL; /* backends read the gathered q (below) */
    a.p.causal = p->causal != 0;
    a.p.unnormalised = p->unnormalised != 0;
    a.p.key_mass_accumulate = p->key_mass_accumulate != 0;

    const struct { const kvs_tensor *t; const char *name; kvs_dtype dt; int64_t n; } in[] = {
        {p->q_pos, "q_pos", KVS_I32, a.n_q},
        {p->k_pos, "k_pos", KVS_I32, a.n_kv_heads * a.capacity},
        {p->kv_len, "kv_len", KVS_I32, a.n_kv_heads},
        {p->row_len, "row_len", KVS_I32, a.n_q},
        {p->mask, "mask", KVS_F32, a.n_q * a.n_kv},
        {p->key_mass, "key_mass", KVS_F32, a.n_kv_heads * a.capacity},
        {p->argmax, "argmax", KVS_I32, a.n_q * a.n_heads},
        {p->row_max, "row_max", KVS_F32, a.n_q * a.n_heads},
        {p->row_sum, "row_sum", KVS_F32, a.n_q * a.n_heads},
        {p->lse_extra, "lse_extra", KVS_F32, a.n_q * a.n_heads},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        if (!in[i].t) continue;
        KVS_TRY(same_dev(op, dev, in[i].t, in[i].name));
        KVS_TRY(want_dtype(op, in[i].t, in[i].name, in[i].dt));
        KVS_TRY(want_nel(op, in[i].t, in[i].name, in[i].n));
    }
    if (p->stat_rows) {
        KVS_TRY(same_dev(op, dev, p->stat_rows, "stat_rows"));
        KVS_TRY(want_dtype(op, p->stat_rows, "stat_rows", KVS_I32));
        a.n_stat_rows = kvs_tensor_nelements(p->stat_rows);
        if (!p->key_mass) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: stat_rows given without key_mass", op);
    } else if (p->key_mass) {
        a.n_stat_rows = a.n_q;
    }
    if (p->lse_extra && p->unnormalised)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: lse_extra (an external normaliser) with unnormalised = 1 "
                         "(an unnormalised output has no normaliser to add it to)", op);
    if (p->lse_extra && (overlaps(p->lse_extra, out) || overlaps(p->lse_extra, p->row_max) ||
                         overlaps(p->lse_extra, p->row_sum)))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: lse_extra aliases out, row_max or row_sum", op);
    if ((p->probe_rows == NULL) != (p->probs == NULL))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: probe_rows and probs must be given together", op);
    if (p->probe_rows) {
        KVS_TRY(same_dev(op, dev, p->probe_rows, "probe_rows"));
        KVS_TRY(same_dev(op, dev, p->probs, "probs"));
        KVS_TRY(want_dtype(op, p->probe_rows, "probe_rows", KVS_I32));
        KVS_TRY(want_dtype(op, p->probs, "probs", KVS_F32));
        a.n_probe = kvs_tensor_nelements(p->probe_rows);
        KVS_TRY(want_nel(op, p->probs, "probs", a.n_probe * a.n_heads * a.capacity));
    }
    const kvs_tensor *los[2] = {p->k_lo, p->v_lo};
    for (int w = 0; w < 2; w++) {
        if (!los[w]) continue;
        const char *nm = w ? "v_lo" : "k_lo";
        KVS_TRY(same_dev(op, dev, los[w], nm));
        if (!dev->caps.kv_hierarchical)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s (a qh8 cache's lower plane) is not read by the %s backend", op, nm,
                             dev->ops->name);
        KVS_TRY(want_dtype(op, los[w], nm, KVS_QH8_LO));
        if (kv2[w]->dtype != KVS_Q4_1)
            return kvs_error(KVS_ERR_DTYPE, "%s: %s given, so %s must be the q4_1 upper plane, got %s", op, nm, w ? "v" : "k",
                             kvs_dtype_name(kv2[w]->dtype));
        KVS_TRY(want_shape(op, los[w], nm, w ? a.head_dim_v : a.head_dim, a.capacity, a.n_kv_heads));
        if (overlaps(out, los[w])) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: out aliases %s", op, nm);
    }
    kvs_tensor *outs[] = {p->key_mass, p->probs, p->argmax, p->row_max, p->row_sum};
    for (size_t i = 0; i < 5; i++) {
        if (!outs[i]) continue;
        if (overlaps(outs[i], out) || overlaps(outs[i], q) || overlaps(outs[i], k) || overlaps(outs[i], v))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: a statistics output aliases q, k, v or out", op);
        for (size_t j = i + 1; j < 5; j++)
            if (overlaps(outs[i], outs[j]))
                return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: two statistics outputs alias", op);
    }
    if (!p->q_channels) return dispatch_attention(dev, &a);
    /* q_channels: qg[i][g][c] = q[i][g][q_channels[g / G][c]] by kvs_gather over the n_q * n_heads
     * query vectors seen as groups of 4-byte rows, then the op on qg [n_q][n_heads][d_k] */
    const int64_t nv = a.n_q * a.n_heads, G = a.n_heads / a.n_kv_heads, dk = a.head_dim;
    kvs_tensor *qg = NULL, *qsrc = NULL, *qdst = NULL, *gi = NULL;
    int32_t *hidx = malloc(sizeof(int32_t) * (size_t)(nv * dk));
    kvs_status s = hidx ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int64_t r = 0; s == KVS_OK && r < nv; r++)
        memcpy(hidx + r * dk, p->q_channels + ((r % a.n_heads) / G) * dk, sizeof(int32_t) * (size_t)dk);
    const int64_t ne_src[3] = {1, d_q, nv}, ne_dst[3] = {1, dk, nv};
    if (s == KVS_OK) s = kvs_tensor_new(&qg, dev, KVS_F32, dk, a.n_heads, a.n_q, 1);
    if (s == KVS_OK) s = kvs_tensor_new(&gi, dev, KVS_I32, dk, nv, 1, 1);
    if (s == KVS_OK) s = kvs_tensor_upload(gi, hidx, 0, sizeof(int32_t) * (size_t)(nv * dk));
    if (s == KVS_OK) s = kvs_tensor_view(&qsrc, (kvs_tensor *)q, 0, 3, ne_src);
    if (s == KVS_OK) s = kvs_tensor_view(&qdst, qg, 0, 3, ne_dst);
    if (s == KVS_OK) s = kvs_gather(dev, qsrc, gi, qdst);
    if (s == KVS_OK) {
        a.q = qg;
        s = dispatch_attention(dev, &a);
    }
    kvs_tensor_destroy(&qdst);
    kvs_tensor_destroy(&qsrc);
    kvs_tensor_destroy(&gi);
    kvs_tensor_destroy(&qg);
    free(hidx);
    return s;
}

/* ---- wavelets ----------------------------------------------------------------------------- */

static const char *const kvs_wavelet_names[] = {"haar", "db2", "db4"};

const char *kvs_wavelet_name(kvs_wavelet w) {
    return (w >= 0 && w <= KVS_WAVELET_DB4) ? kvs_wavelet_names[w] : "unknown";
}

kvs_status kvs_wavelet_from_name(const char *name, kvs_wavelet *out) {
    if (!name || !out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_wavelet_from_name: NULL argument");
    for (int i = 0; i <= KVS_WAVELET_DB4; i++)
        if (strcmp(name, kvs_wavelet_names[i]) == 0) {
            *out = (kvs_wavelet)i;
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "unknown wavelet '%s' (haar, db2, db4)", name);
}

int kvs_wavelet_filter(kvs_wavelet w, double *lo) {
    /* Orthonormal Daubechies scaling filters (sum = sqrt(2)), Daubechies 1992 table 6.1. */
    static const double haar[2] = {0.70710678118654752440, 0.70710678118654752440};
    static const double db2[4] = {0.48296291314469025, 0.83651630373746899, 0.22414386804185735,
                                  -0.12940952255092145};
    static const double db4[8] = {0.23037781330885523, 0.71484657055254153, 0.63088076792959036,
                                  -0.02798376941698385, -0.18703481171888114, 0.03084138183598697,
                                  0.03288301166698295, -0.01059740178499728};
    const double *f;
    int L;
    switch (w) {
    case KVS_WAVELET_HAAR: f = haar; L = 2; break;
    case KVS_WAVELET_DB2: f = db2; L = 4; break;
    case KVS_WAVELET_DB4: f = db4; L = 8; break;
    default: return 0;
    }
    if (lo) memcpy(lo, f, (size_t)L * sizeof *lo);
    return L;
}

int64_t kvs_dwt_level_length(int64_t n, int level) {
    for (int l = 0; l < level; l++) n = (n + 1) / 2;
    return n;
}

int64_t kvs_dwt_length(int64_t n, int levels) {
    if (n < 1 || levels < 1 || levels > KVS_DWT_MAX_LEVELS) return -1;
    int64_t total = kvs_dwt_level_length(n, levels);
    for (int l = 1; l <= levels; l++) total += kvs_dwt_level_length(n, l);
    return total;
}

static kvs_status dwt_common(const char *op, kvs_device *dev, const kvs_tensor *x, const kvs_tensor *y,
                             kvs_wavelet w, int levels, kvs_dwt_args *a) {
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, y);
    TRY_DEV(x); TRY_DEV(y);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    KVS_TRY(want_dtype(op, y, "y", KVS_F32));
    if (kvs_wavelet_filter(w, NULL) == 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: unknown wavelet %d", op, (int)w);
    if (levels < 1 || levels > KVS_DWT_MAX_LEVELS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: levels %d outside 1..%d", op, levels, KVS_DWT_MAX_LEVELS);
    a->n = x->ne[0];
    a->rows = kvs_tensor_rows(x);
    a->ncoef = kvs_dwt_length(a->n, levels);
    a->w = w;
    a->levels = levels;
    if (y->ne[0] != a->ncoef || kvs_tensor_rows(y) != a->rows)
        return kvs_error(KVS_ERR_SHAPE, "%s: coefficients must be [%lld][%lld] for n=%lld, %d levels", op,
                         (long long)a->rows, (long long)a->ncoef, (long long)a->n, levels);
    if (overlaps(x, y)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: x and y alias", op);
    return KVS_OK;
}

kvs_status kvs_dwt(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, kvs_wavelet w, int levels) {
    kvs_dwt_args a;
    KVS_TRY(dwt_common("kvs_dwt", dev, x, y, w, levels, &a));
    a.src = x;
    a.dst = y;
    return dispatch_dwt(dev, &a);
}

kvs_status kvs_idwt(kvs_device *dev, const kvs_tensor *y, kvs_tensor *x, kvs_wavelet w, int levels) {
    kvs_dwt_args a;
    KVS_TRY(dwt_common("kvs_idwt", dev, x, y, w, levels, &a));
    a.src = y;
    a.dst = x;
    return dispatch_idwt(dev, &a);
}

/* ---- top-k -------------------------------------------------------------------------------- */

kvs_topk_params kvs_topk_params_default(void) {
    kvs_topk_params p = {.k = 1, .order_by_index = 0, .row_len = NULL};
    return p;
}

static kvs_status topk_outputs(const char *op, kvs_device *dev, kvs_topk_args *a) {
    KVS_TRY(want_dtype(op, a->idx, "idx", KVS_I32));
    KVS_TRY(want_nel(op, a->idx, "idx", a->rows * a->k));
    if (a->idx->ne[0] != a->k) return kvs_error(KVS_ERR_SHAPE, "%s: idx ne[0] must be k=%lld", op, (long long)a->k);
    if (a->val) {
        KVS_TRY(same_dev(op, dev, a->val, "val"));
        KVS_TRY(want_dtype(op, a->val, "val", KVS_F32));
        KVS_TRY(want_nel(op, a->val, "val", a->rows * a->k));
        if (overlaps(a->val, a->idx) || overlaps(a->val, a->x))
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: val aliases idx or x", op);
    }
    if (overlaps(a->idx, a->x)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: idx aliases x", op);
    return KVS_OK;
}

kvs_status kvs_topk(kvs_device *dev, const kvs_tensor *x, kvs_tensor *idx, kvs_tensor *val, const kvs_topk_params *p) {
    const char *op = "kvs_topk";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, idx); CHECK_NONNULL(op, p);
    TRY_DEV(x); TRY_DEV(idx);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    kvs_topk_args a = {.x = x, .idx = idx, .val = val, .rows = kvs_tensor_rows(x), .n = x->ne[0], .k = p->k, .p = *p};
    if (p->k < 1 || p->k > a.n)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: k=%lld outside [1, n=%lld]", op, (long long)p->k, (long long)a.n);
    if (a.n > INT32_MAX) return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: rows longer than 2^31-1", op);
    if (p->row_len) {
        KVS_TRY(same_dev(op, dev, p->row_len, "row_len"));
        KVS_TRY(want_dtype(op, p->row_len, "row_len", KVS_I32));
        KVS_TRY(want_nel(op, p->row_len, "row_len", a.rows));
    }
    KVS_TRY(topk_outputs(op, dev, &a));
    return dispatch_topk(dev, &a);
}

kvs_status kvs_topk_global(kvs_device *dev, const kvs_tensor *x, kvs_tensor *idx, kvs_tensor *val,
                           const kvs_topk_params *p) {
    const char *op = "kvs_topk_global";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, idx); CHECK_NONNULL(op, p);
    TRY_DEV(x); TRY_DEV(idx);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    kvs_topk_args a = {.x = x, .idx = idx, .val = val, .rows = 1, .n = kvs_tensor_nelements(x), .k = p->k, .p = *p};
    if (p->row_len) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: row_len is per-row only", op);
    if (a.n > INT32_MAX) return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: more than 2^31-1 elements", op);
    if (p->k < 1 || p->k > a.n)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: k=%lld outside [1, n=%lld]", op, (long long)p->k, (long long)a.n);
    KVS_TRY(want_dtype(op, idx, "idx", KVS_I32));
    KVS_TRY(want_nel(op, idx, "idx", a.k));
    if (val) {
        KVS_TRY(same_dev(op, dev, val, "val"));
        KVS_TRY(want_dtype(op, val, "val", KVS_F32));
        KVS_TRY(want_nel(op, val, "val", a.k));
    }
    if (overlaps(idx, x) || overlaps(val, x) || overlaps(val, idx))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: outputs alias", op);
    return dispatch_topk_global(dev, &a);
}

/* ---- top-p over mass ---------------------------------------------------------------------- */

kvs_topp_params kvs_topp_params_default(void) {
    kvs_topp_params p = {.p = 0.9, .row_len = NULL};
    return p;
}

kvs_status kvs_topp(kvs_device *dev, const kvs_tensor *x, kvs_tensor *count, kvs_tensor *thr, const kvs_topp_params *p) {
    const char *op = "kvs_topp";
    CHECK_NONNULL(op, x); CHECK_NONNULL(op, count); CHECK_NONNULL(op, p);
    TRY_DEV(x); TRY_DEV(count);
    KVS_TRY(want_dtype(op, x, "x", KVS_F32));
    kvs_topp_args a = {.x = x, .count = count, .thr = thr, .rows = kvs_tensor_rows(x), .n = x->ne[0], .p = *p};
    if (!(p->p > 0.0 && p->p <= 1.0))
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: p=%g outside (0, 1]", op, p->p);
    if (a.n > INT32_MAX) return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: rows longer than 2^31-1", op);
    KVS_TRY(want_dtype(op, count, "count", KVS_I32));
    KVS_TRY(want_nel(op, count, "count", a.rows));
    if (thr) {
        TRY_DEV(thr);
        KVS_TRY(want_dtype(op, thr, "thr", KVS_F32));
        KVS_TRY(want_nel(op, thr, "thr", a.rows));
    }
    if (p->row_len) {
        KVS_TRY(same_dev(op, dev, p->row_len, "row_len"));
        KVS_TRY(want_dtype(op, p->row_len, "row_len", KVS_I32));
        KVS_TRY(want_nel(op, p->row_len, "row_len", a.rows));
    }
    if (overlaps(count, x) || overlaps(thr, x) || overlaps(thr, count))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: outputs alias x or each other", op);
    return dispatch_topp(dev, &a);
}

/* ---- gather / scatter / compact ----------------------------------------------------------- */

static kvs_status rows_common(const char *op, kvs_device *dev, const kvs_tensor *grouped, const kvs_tensor *idx,
                              kvs_rows_args *a) {
    CHECK_NONNULL(op, idx);
    TRY_DEV(idx);
    KVS_TRY(want_dtype(op, idx, "idx", KVS_I32));
    if (kvs_dtype_block(grouped->dtype) > 1 && grouped->ne[0] % kvs_dtype_block(grouped->dtype) != 0)
        return kvs_error(KVS_ERR_DTYPE, "%s: %s rows of %lld values are not whole blocks", op,
                         kvs_dtype_name(grouped->dtype), (long long)grouped->ne[0]);
    if (grouped->ne[3] != 1) return kvs_error(KVS_ERR_SHAPE, "%s: tensors must be [G][N][row] (3-D)", op);
    a->groups = grouped->ne[2];
    a->row_bytes = (int64_t)kvs_dtype_bytes(grouped->dtype, grouped->ne[0]);
    if (idx->ndim == 1 || (idx->ne[1] == 1 && a->groups != 1)) {
        a->idx_shared = 1;
        a->n = idx->ne[0];
    } else if (idx->ne[1] == a->groups && idx->ne[2] == 1 && idx->ne[3] == 1) {
        a->n = idx->ne[0];
    } else {
        return kvs_error(KVS_ERR_SHAPE, "%s: idx must be [n] or [G=%lld][n]", op, (long long)a->groups);
    }
    a->idx = idx;
    return KVS_OK;
}

kvs_status kvs_gather(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx, kvs_tensor *dst) {
    const char *op = "kvs_gather";
    CHECK_NONNULL(op, src); CHECK_NONNULL(op, dst);
    TRY_DEV(src); TRY_DEV(dst);
    kvs_rows_args a;
    memset(&a, 0, sizeof a);
    KVS_TRY(rows_common(op, dev, src, idx, &a));
    if (dst->dtype != src->dtype) return kvs_error(KVS_ERR_DTYPE, "%s: dst dtype differs from src", op);
    if (dst->ne[0] != src->ne[0] || dst->ne[2] != src->ne[2] || dst->ne[3] != 1)
        return kvs_error(KVS_ERR_SHAPE, "%s: dst must be [G=%lld][Nd][%lld]", op, (long long)a.groups, (long long)src->ne[0]);
    a.src = src; a.dst = dst;
    a.src_rows = src->ne[1];
    a.dst_rows = dst->ne[1];
    if (a.n > a.dst_rows) return kvs_error(KVS_ERR_SHAPE, "%s: %lld indices but dst holds %lld rows", op, (long long)a.n, (long long)a.dst_rows);
    if (overlaps(src, dst) || overlaps(idx, dst)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: dst aliases src or idx", op);
    return dispatch_gather(dev, &a);
}

static kvs_status scatter_args(const char *op, kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx, kvs_tensor *dst,
                                int src_token_major, kvs_rows_args *ap) {
    CHECK_NONNULL(op, src); CHECK_NONNULL(op, dst);
    TRY_DEV(src); TRY_DEV(dst);
    kvs_rows_args a;
    memset(&a, 0, sizeof a);
    KVS_TRY(rows_common(op, dev, dst, idx, &a));
    if (dst->dtype != src->dtype) {
        const kvs_dtype t = dst->dtype;
        if (src->dtype != KVS_F32 || !(t == KVS_F16 || t == KVS_BF16 || t == KVS_Q8_0 || t == KVS_Q4_0 || t == KVS_Q4_1 ||
                                       t == KVS_IQ4_NL))
            return kvs_error(KVS_ERR_DTYPE,
                             "%s: src %s -> dst %s: rows are copied as they are, or converted from f32 to f16, bf16, "
                             "q8_0, q4_0, q4_1 or iq4_nl",
                             op, kvs_dtype_name(src->dtype), kvs_dtype_name(t));
        a.convert = 1;
    }
    a.src_token_major = src_token_major != 0;
    int64_t want1 = a.src_token_major ? a.groups : a.n, want2 = a.src_token_major ? a.n : a.groups;
    if (src->ne[0] != dst->ne[0] || src->ne[1] != want1 || src->ne[2] != want2 || src->ne[3] != 1)
        return kvs_error(KVS_ERR_SHAPE, "%s: src must be ne={%lld,%lld,%lld} (%s), is {%lld,%lld,%lld}", op,
                         (long long)dst->ne[0], (long long)want1, (long long)want2,
                         a.src_token_major ? "[n][G][row]" : "[G][n][row]", (long long)src->ne[0],
                         (long long)src->ne[1], (long long)src->ne[2]);
    a.src = src; a.dst = dst;
    a.src_rows = a.n;
    a.dst_rows = dst->ne[1];
    if (overlaps(src, dst) || overlaps(idx, dst)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: dst aliases src or idx", op);
    *ap = a;
    return KVS_OK;
}

kvs_status kvs_scatter(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx, kvs_tensor *dst, int src_token_major) {
    kvs_rows_args a;
    KVS_TRY(scatter_args("kvs_scatter", dev, src, idx, dst, src_token_major, &a));
    return dispatch_scatter(dev, &a);
}

kvs_status kvs_scatter_qh8(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx, kvs_tensor *hi, kvs_tensor *lo,
                           int src_token_major) {
    const char *op = "kvs_scatter_qh8";
    CHECK_NONNULL(op, lo);
    kvs_rows_args a;
    KVS_TRY(scatter_args(op, dev, src, idx, hi, src_token_major, &a));
    TRY_DEV(lo);
    KVS_TRY(want_dtype(op, src, "src", KVS_F32));
    KVS_TRY(want_dtype(op, hi, "hi", KVS_Q4_1));
    KVS_TRY(want_dtype(op, lo, "lo", KVS_QH8_LO));
    KVS_TRY(want_shape(op, lo, "lo", hi->ne[0], hi->ne[1], hi->ne[2]));
    if (overlaps(src, lo) || overlaps(idx, lo) || overlaps(hi, lo))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: lo aliases src, idx or hi", op);
    if (!dev->caps.kv_hierarchical)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: the %s backend does not write qh8 planes (kvs_caps.kv_hierarchical = 0)",
                         op, dev->ops->name);
    a.dst_lo = lo;
    return dispatch_scatter(dev, &a);
}

kvs_status kvs_compact(kvs_device *dev, kvs_tensor *t, const kvs_tensor *idx) {
    const char *op = "kvs_compact";
    CHECK_NONNULL(op, t);
    TRY_DEV(t);
    kvs_rows_args a;
    memset(&a, 0, sizeof a);
    KVS_TRY(rows_common(op, dev, t, idx, &a));
    a.src = t; a.dst = t;
    a.src_rows = a.dst_rows = t->ne[1];
    if (a.n > a.dst_rows) return kvs_error(KVS_ERR_SHAPE, "%s: %lld indices but t holds %lld rows", op, (long long)a.n, (long long)a.dst_rows);
    if (overlaps(idx, t)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: idx aliases t", op);
    return dispatch_compact(dev, &a);
}
