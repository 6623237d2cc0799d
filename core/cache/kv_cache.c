/* The KV cache object: per-layer K/V/pos/len tensors on the device with host mirrors, and the RoPE
 * position each key row is rotated at (kvs_cache_rerotate renumbers them within the cache). */
#include <stdint.h>
#include <unistd.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvsieve/cache.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"

struct kvs_kv_cache {
    kvs_device *dev;
    kvs_cache_params p;
    kvs_tensor **k, **v, **pos, **len, **x; /* [n_layers] each */
    kvs_tensor **rdelta;                    /* [n_layers] [capacity][dim] F32 (KVS_CACHE_KEEP_DELTA) or NULL */
    int32_t *host_pos;                      /* [n_layers][n_kv_heads][capacity] */
    int32_t *host_rpos;                     /* [n_layers][n_kv_heads][capacity] RoPE position of each
                                             * row's key (-1 empty) */
    kvs_tensor *delta;                      /* [n_kv_heads][capacity] I32, kvs_cache_rerotate's
                                             * per-row shifts (created at the first use) */
    int32_t *scratch_delta;                 /* [n_kv_heads][capacity] host side of delta */
    int64_t *host_len;                      /* [n_layers][n_kv_heads] */
    int32_t *scratch;                       /* host scratch for uploads */
    int64_t next_pos;                       /* 1 + the largest position ever written (0: empty) */
    kvs_tensor *slots;                      /* [n_kv_heads * capacity] I32: rows written by the last write */
    int32_t *scratch_slots;                 /* [n_kv_heads * capacity] host scratch of kvs_cache_write_rows */
    int32_t *slots_host;                    /* [n_kv_heads * capacity] what slots holds */
    int64_t slots_n;                        /* entries of slots_host valid (0: none) */
    kvs_tensor *krot;                       /* KVS_CACHE_ROTATE: [rows][n_kv_heads][head_dim] F32 rotated keys */
    float *krot_host;                       /* host scratch of the rotation */
    int64_t krot_rows;                      /* rows krot holds */
    /* qh8 (hierarchical) K and/or V: k[l] / v[l] hold the upper planes (Q4_1 tensors), these the
     * lower ones (QH8_LO [n_kv_heads][capacity][head_dim]); NULL arrays for other types */
    kvs_tensor **k_lo, **v_lo;
    /* ThinK's pruned key layout per layer (kvs_cache_prune_keys; zeroed = never pruned). While on,
     * rows [0, rows[h]) of kv head h hold only the channels ch[h][0..d) of their keys, in k
     * ([n_kv_heads][capacity][d], type_k), and k[l] is not the full-width tensor but the tail
     * [n_kv_heads][tcap][head_dim]: its row j is the cache row rows[h] + j (appended since). */
    struct kvs_pruned_seg {
        kvs_tensor *k, *len;        /* len: [n_kv_heads] I32 = rows */
        kvs_tensor *tlen, *tpos;    /* the tail's rows [n_kv_heads] I32 and positions [n_kv_heads][tcap] I32 */
        kvs_tensor *tslots;         /* [n_kv_heads * tcap] I32: tail rows written by the last write */
        int32_t *ch;                /* host [n_kv_heads][d] ascending */
        int64_t *rows;              /* host [n_kv_heads] */
        int64_t tcap;               /* the tail's capacity */
        int d;                      /* d_k' of the last pruning (0: never pruned) */
        int on;                     /* 1: the pruned layout (k[l] is the tail) */
    } *kp;                          /* [n_layers] */
    int64_t tail_rows;              /* kvs_cache_set_tail_rows (0: the capacity decides) */
};

static int kp_active(const kvs_kv_cache *c, int l) { return c->kp && c->kp[l].on; }

kvs_cache_params kvs_cache_params_default(void) {
    kvs_cache_params p;
    memset(&p, 0, sizeof p);
    p.type_k = KVS_F32;
    p.type_v = KVS_F32;
    p.mode = KVS_CACHE_POSITIONAL;
    return p;
}

/* The pruned layout's device state: P per head, the tail's row counts and its rows' positions
 * (INT32_MAX beyond the tail's length). */
static kvs_status sync_pruned(kvs_kv_cache *c, int l) {
    if (!kp_active(c, l)) return KVS_OK;
    const kvs_cache_params *p = &c->p;
    struct kvs_pruned_seg *g = &c->kp[l];
    const int H = p->n_kv_heads;
    const size_t cap = (size_t)p->capacity, tcap = (size_t)g->tcap;
    int32_t *tp = malloc(((size_t)H * tcap + 2 * (size_t)H) * sizeof *tp);
    if (!tp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache: out of host memory");
    int32_t *P = tp + (size_t)H * tcap, *A = P + H;
    for (int h = 0; h < H; h++) {
        const int64_t len = c->host_len[(size_t)l * H + h], a = len - g->rows[h];
        const int32_t *pos = c->host_pos + ((size_t)l * H + h) * cap;
        for (int64_t j = 0; j < (int64_t)tcap; j++) tp[h * tcap + j] = j < a ? pos[g->rows[h] + j] : INT32_MAX;
        P[h] = (int32_t)g->rows[h];
        A[h] = (int32_t)a;
    }
    kvs_status s = kvs_tensor_upload(g->tpos, tp, 0, (size_t)H * tcap * 4);
    if (s == KVS_OK) s = kvs_tensor_upload(g->len, P, 0, (size_t)H * 4);
    if (s == KVS_OK) s = kvs_tensor_upload(g->tlen, A, 0, (size_t)H * 4);
    free(tp);
    return s;
}

static kvs_status sync_layer(kvs_kv_cache *c, int l) {
    const kvs_cache_params *p = &c->p;
    size_t npos = (size_t)p->n_kv_heads * (size_t)p->capacity;
    KVS_TRY(kvs_tensor_upload(c->pos[l], c->host_pos + (size_t)l * npos, 0, npos * 4));
    for (int h = 0; h < p->n_kv_heads; h++) c->scratch[h] = (int32_t)c->host_len[(size_t)l * p->n_kv_heads + h];
    KVS_TRY(kvs_tensor_upload(c->len[l], c->scratch, 0, (size_t)p->n_kv_heads * 4));
    return sync_pruned(c, l);
}

void kvs_cache_destroy(kvs_kv_cache **cp) {
    if (!cp || !*cp) return;
    kvs_kv_cache *c = *cp;
    for (int l = 0; l < c->p.n_layers; l++) {
        if (c->k) kvs_tensor_destroy(&c->k[l]);
        if (c->v) kvs_tensor_destroy(&c->v[l]);
        if (c->pos) kvs_tensor_destroy(&c->pos[l]);
        if (c->len) kvs_tensor_destroy(&c->len[l]);
        if (c->x) kvs_tensor_destroy(&c->x[l]);
        if (c->rdelta) kvs_tensor_destroy(&c->rdelta[l]);
        if (c->k_lo) kvs_tensor_destroy(&c->k_lo[l]);
        if (c->v_lo) kvs_tensor_destroy(&c->v_lo[l]);
        if (c->kp) {
            kvs_tensor_destroy(&c->kp[l].k);
            kvs_tensor_destroy(&c->kp[l].len);
            kvs_tensor_destroy(&c->kp[l].tlen);
            kvs_tensor_destroy(&c->kp[l].tpos);
            kvs_tensor_destroy(&c->kp[l].tslots);
            free(c->kp[l].ch);
            free(c->kp[l].rows);
        }
    }
    free(c->kp);
    free(c->k_lo); free(c->v_lo);
    free(c->k); free(c->v); free(c->pos); free(c->len); free(c->x); free(c->rdelta);
    free(c->host_pos); free(c->host_rpos); free(c->host_len); free(c->scratch);
    kvs_tensor_destroy(&c->slots);
    kvs_tensor_destroy(&c->delta);
    free(c->scratch_delta);
    kvs_tensor_destroy(&c->krot);
    free(c->krot_host);
    free(c->slots_host);
    free(c->scratch_slots);
    free(c);
    *cp = NULL;
}

static int cache_type_ok(kvs_dtype t) {
    return t == KVS_F32 || t == KVS_F16 || t == KVS_BF16 || t == KVS_Q8_0 || t == KVS_Q4_0 || t == KVS_Q4_1 ||
           t == KVS_IQ4_NL || t == KVS_QH8;
}

/* The dtype of the tensor that holds a cache type (qh8: its upper plane, a Q4_1 tensor). */
static kvs_dtype plane_type(kvs_dtype t) { return t == KVS_QH8 ? KVS_Q4_1 : t; }

kvs_status kvs_cache_type_from_name(const char *name, kvs_dtype *out) {
    static const kvs_dtype all[] = {KVS_F32, KVS_F16, KVS_BF16, KVS_Q8_0, KVS_Q4_0, KVS_Q4_1, KVS_IQ4_NL, KVS_QH8};
    if (!name || !out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_type_from_name: NULL argument");
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, kvs_dtype_name(all[i])) == 0) {
            *out = all[i];
            return KVS_OK;
        }
    return kvs_error(KVS_ERR_INVALID_ARGUMENT, "unknown cache type '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, qh8)",
                     name);
}

/* Asks the backend, before anything is written, whether its scatter can convert f32 rows into a
 * cache tensor t of another type (the write path of every step): a backend that cannot is refused
 * at creation with its reason, not mid-decode. */
static kvs_status cache_write_supported(kvs_device *dev, kvs_tensor *t, kvs_tensor *lo) {
    if (t->dtype == KVS_F32 || !dev->ops->supports) return KVS_OK;
    kvs_tensor src = *t;
    src.dtype = KVS_F32;
    kvs_rows_args a;
    memset(&a, 0, sizeof a);
    a.src = &src;
    a.dst = t;
    a.idx = t;
    a.groups = t->ne[2];
    a.row_bytes = (int64_t)kvs_dtype_bytes(t->dtype, t->ne[0]);
    a.n = 1;
    a.src_rows = 1;
    a.dst_rows = t->ne[1];
    a.src_token_major = 1;
    a.convert = 1;
    a.dst_lo = lo; /* qh8: both planes (kvs_scatter_qh8) */
    char why[256] = "";
    if (dev->ops->supports(dev, KVS_OP_scatter, &a, why, sizeof why)) return KVS_OK;
    return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_cache_create: a %s KV cache is not supported on %s ('%s'): %s",
                     lo ? "qh8" : kvs_dtype_name(t->dtype), dev->ops->name, dev->info.name, why);
}

kvs_status kvs_cache_create(kvs_kv_cache **out, kvs_device *dev, const kvs_cache_params *p) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: out is NULL");
    *out = NULL;
    if (!dev || !p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: NULL device or params");
    if (p->n_layers < 1 || p->n_kv_heads < 1 || p->head_dim < 1 || p->capacity < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT,
                         "kvs_cache_create: n_layers=%d n_kv_heads=%d head_dim=%d capacity=%lld must all be >= 1",
                         p->n_layers, p->n_kv_heads, p->head_dim, (long long)p->capacity);
    if (p->capacity > INT32_MAX) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: capacity above 2^31-1");
    const kvs_dtype types[2] = {p->type_k, p->type_v};
    for (int w = 0; w < 2; w++) {
        const char *kv = w ? "type_v" : "type_k";
        if (!cache_type_ok(types[w]))
            return kvs_error(KVS_ERR_DTYPE,
                             "kvs_cache_create: %s %s is not a cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, qh8)", kv,
                             kvs_dtype_name(types[w]));
        if ((kvs_dtype_is_quant(types[w]) || types[w] == KVS_QH8) && p->head_dim % 32 != 0)
            return kvs_error(KVS_ERR_DTYPE,
                             "kvs_cache_create: %s %s stores blocks of 32 values along head_dim, and head_dim %d is not a "
                             "multiple of 32 (use f32, f16 or bf16 for this model)",
                             kv, kvs_dtype_name(types[w]), p->head_dim);
        if (types[w] == KVS_F16 && !dev->caps.fp16_storage)
            return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_cache_create: device '%s' has no f16 storage", dev->info.name);
        if (types[w] == KVS_QH8 && !dev->caps.kv_hierarchical)
            return kvs_error(KVS_ERR_UNSUPPORTED,
                             "kvs_cache_create: a qh8 (hierarchical 4/8-bit) KV cache is not supported on %s ('%s'): its "
                             "attention kernels do not read the lower-nibble plane (kvs_caps.kv_hierarchical = 0)",
                             dev->ops->name, dev->info.name);
    }
    if (p->mode != KVS_CACHE_POSITIONAL && p->mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: unknown mode %d", (int)p->mode);
    if (p->flags & ~(KVS_CACHE_KEEP_X | KVS_CACHE_ROTATE | KVS_CACHE_KEEP_DELTA))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: unknown flags 0x%x", p->flags);
    if ((p->flags & KVS_CACHE_ROTATE) && p->head_dim % 2 != 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: KVS_CACHE_ROTATE needs an even head_dim (got %d)",
                         p->head_dim);
    if ((p->flags & KVS_CACHE_KEEP_X) && p->dim < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: KVS_CACHE_KEEP_X needs dim >= 1");
    if ((p->flags & KVS_CACHE_KEEP_DELTA) && p->dim < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_create: KVS_CACHE_KEEP_DELTA needs dim >= 1");
    /* the whole request, before any allocation: device rows (K, V, their qh8 planes, positions,
     * lengths) and the host's per-row bookkeeping (positions, RoPE positions: 8 bytes a row) plus a
     * few hundred bytes of tensor handles per layer. More than this machine's memory (or than a
     * size_t) is refused with the figure instead of allocating until the OS stops it. */
    {
        const double rows = (double)p->n_layers * p->n_kv_heads * (double)p->capacity;
        /* K and V as stored (qh8: both planes, kvs_cache_row_bytes), positions and lengths */
        const double row = (double)kvs_dtype_bytes(p->type_k, p->head_dim) + (double)kvs_dtype_bytes(p->type_v, p->head_dim) +
                           4.0 + 8.0;
        const double per_layer = 512.0 * 8 + (double)p->n_kv_heads * 8.0 +
                                 ((p->flags & (KVS_CACHE_KEEP_X | KVS_CACHE_KEEP_DELTA)) ? 8.0 * p->dim * (double)p->capacity : 0.0);
        const double total = rows * row + (double)p->n_layers * per_layer;
        const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const double phys = pages > 0 && psz > 0 ? (double)pages * (double)psz : 0.0;
        if (total >= (double)SIZE_MAX / 2 || (phys > 0 && total > phys))
            return kvs_error(KVS_ERR_OUT_OF_MEMORY,
                             "kvs_cache_create: %d layers x %d kv heads x %lld rows (head_dim %d, %s / %s) ask for %.3g bytes, "
                             "more than this machine's %.3g bytes of memory",
                             p->n_layers, p->n_kv_heads, (long long)p->capacity, p->head_dim, kvs_dtype_name(p->type_k),
                             kvs_dtype_name(p->type_v), total, phys);
    }
    kvs_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_create: out of host memory");
    c->dev = dev;
    c->p = *p;
    size_t L = (size_t)p->n_layers, H = (size_t)p->n_kv_heads, cap = (size_t)p->capacity;
    c->k = calloc(L, sizeof *c->k);
    c->v = calloc(L, sizeof *c->v);
    c->pos = calloc(L, sizeof *c->pos);
    c->len = calloc(L, sizeof *c->len);
    c->x = calloc(L, sizeof *c->x);
    c->rdelta = calloc(L, sizeof *c->rdelta);
    if (p->type_k == KVS_QH8) c->k_lo = calloc(L, sizeof *c->k_lo);
    if (p->type_v == KVS_QH8) c->v_lo = calloc(L, sizeof *c->v_lo);
    c->host_pos = malloc(L * H * cap * sizeof *c->host_pos);
    c->host_rpos = malloc(L * H * cap * sizeof *c->host_rpos);
    c->host_len = calloc(L * H, sizeof *c->host_len);
    c->scratch = malloc((H > 16 ? H : 16) * sizeof *c->scratch);
    c->slots_host = malloc(H * cap * sizeof *c->slots_host);
    c->scratch_slots = malloc(H * cap * sizeof *c->scratch_slots);
    kvs_status s = KVS_OK;
    if (!c->k || !c->v || !c->pos || !c->len || !c->x || !c->rdelta || (p->type_k == KVS_QH8 && !c->k_lo) ||
        (p->type_v == KVS_QH8 && !c->v_lo) || !c->host_pos || !c->host_rpos || !c->host_len || !c->scratch || !c->slots_host || !c->scratch_slots) {
        s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_create: out of host memory");
        goto fail;
    }
    for (size_t l = 0; l < L && s == KVS_OK; l++) {
        int64_t kv_ne[3] = {p->head_dim, p->capacity, p->n_kv_heads};
        int64_t pos_ne[2] = {p->capacity, p->n_kv_heads};
        int64_t len_ne[1] = {p->n_kv_heads};
        s = kvs_tensor_create(&c->k[l], dev, plane_type(p->type_k), 3, kv_ne);
        if (s == KVS_OK) s = kvs_tensor_create(&c->v[l], dev, plane_type(p->type_v), 3, kv_ne);
        if (s == KVS_OK && c->k_lo) s = kvs_tensor_create(&c->k_lo[l], dev, KVS_QH8_LO, 3, kv_ne);
        if (s == KVS_OK && c->v_lo) s = kvs_tensor_create(&c->v_lo[l], dev, KVS_QH8_LO, 3, kv_ne);
        if (s == KVS_OK && l == 0) s = cache_write_supported(dev, c->k[l], c->k_lo ? c->k_lo[l] : NULL);
        if (s == KVS_OK && l == 0) s = cache_write_supported(dev, c->v[l], c->v_lo ? c->v_lo[l] : NULL);
        if (s == KVS_OK) s = kvs_tensor_create(&c->pos[l], dev, KVS_I32, 2, pos_ne);
        if (s == KVS_OK) s = kvs_tensor_create(&c->len[l], dev, KVS_I32, 1, len_ne);
        if (s == KVS_OK && (p->flags & KVS_CACHE_KEEP_X)) {
            int64_t x_ne[2] = {p->dim, p->capacity};
            s = kvs_tensor_create(&c->x[l], dev, KVS_F32, 2, x_ne);
        }
        if (s == KVS_OK && (p->flags & KVS_CACHE_KEEP_DELTA)) {
            int64_t d_ne[2] = {p->dim, p->capacity};
            s = kvs_tensor_create(&c->rdelta[l], dev, KVS_F32, 2, d_ne);
            if (s == KVS_OK) kvs_tensor_set_name(c->rdelta[l], "cache.delta");
        }
        if (s == KVS_OK) {
            kvs_tensor_set_name(c->k[l], "cache.k");
            kvs_tensor_set_name(c->v[l], "cache.v");
            if (c->k_lo) kvs_tensor_set_name(c->k_lo[l], "cache.k_lo");
            if (c->v_lo) kvs_tensor_set_name(c->v_lo[l], "cache.v_lo");
        }
    }
    if (s == KVS_OK) {
        int64_t slots_ne[1] = {p->n_kv_heads * p->capacity};
        s = kvs_tensor_create(&c->slots, dev, KVS_I32, 1, slots_ne);
        if (s == KVS_OK) kvs_tensor_set_name(c->slots, "cache.slots");
    }
    if (s == KVS_OK) {
        /* K/V start as zero bytes so that never-written rows read as finite values (0 in every
         * type: a block with scale 0 decodes to zeros). Byte counts of the 16-bit and block types
         * may not be multiples of 4: the tail is written by an upload. */
        for (size_t l = 0; l < L && s == KVS_OK; l++) {
            kvs_tensor *kv[4] = {c->k[l], c->v[l], c->k_lo ? c->k_lo[l] : NULL, c->v_lo ? c->v_lo[l] : NULL};
            for (int w = 0; w < 4 && s == KVS_OK; w++) {
                if (!kv[w]) continue;
                size_t nb = kv[w]->nbytes, n4 = nb / 4;
                if (n4) s = dev->ops->fill32(dev, kv[w]->buf->handle, kv[w]->offset, 0, n4);
                if (s == KVS_OK && nb % 4) {
                    const uint8_t z[4] = {0, 0, 0, 0};
                    s = kvs_tensor_upload(kv[w], z, n4 * 4, nb % 4);
                }
            }
        }
    }
    if (s == KVS_OK) s = kvs_cache_reset(c);
    if (s != KVS_OK) goto fail;
    *out = c;
    return KVS_OK;
fail:
    kvs_cache_destroy(&c);
    return s;
}

kvs_status kvs_cache_reset(kvs_kv_cache *c) {
    if (!c) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_reset: NULL cache");
    for (int l = 0; c->kp && l < c->p.n_layers; l++) KVS_TRY(kvs_cache_unprune_keys(c, l)); /* full-width K back */
    size_t n = (size_t)c->p.n_layers * c->p.n_kv_heads * c->p.capacity;
    for (size_t i = 0; i < n; i++) c->host_pos[i] = c->host_rpos[i] = -1;
    memset(c->host_len, 0, (size_t)c->p.n_layers * c->p.n_kv_heads * sizeof *c->host_len);
    c->next_pos = 0;
    for (int l = 0; l < c->p.n_layers; l++) KVS_TRY(sync_layer(c, l));
    return KVS_OK;
}

const kvs_cache_params *kvs_cache_get_params(const kvs_kv_cache *c) { return c ? &c->p : NULL; }

#define LAYER_OK(c, l) ((c) && (l) >= 0 && (l) < (c)->p.n_layers)
kvs_tensor *kvs_cache_k(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->k[l] : NULL; }
kvs_tensor *kvs_cache_v(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->v[l] : NULL; }
kvs_tensor *kvs_cache_pos_tensor(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->pos[l] : NULL; }
kvs_tensor *kvs_cache_len_tensor(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->len[l] : NULL; }
kvs_tensor *kvs_cache_x(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->x[l] : NULL; }
kvs_tensor *kvs_cache_layer_delta(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) ? c->rdelta[l] : NULL; }
kvs_tensor *kvs_cache_k_lo(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && c->k_lo ? c->k_lo[l] : NULL; }
kvs_tensor *kvs_cache_v_lo(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && c->v_lo ? c->v_lo[l] : NULL; }

int64_t kvs_cache_len(const kvs_kv_cache *c, int l, int h) {
    if (!LAYER_OK(c, l) || h < 0 || h >= c->p.n_kv_heads) return -1;
    return c->host_len[(size_t)l * c->p.n_kv_heads + h];
}

const int32_t *kvs_cache_positions(const kvs_kv_cache *c, int l, int h) {
    if (!LAYER_OK(c, l) || h < 0 || h >= c->p.n_kv_heads) return NULL;
    return c->host_pos + ((size_t)l * c->p.n_kv_heads + h) * c->p.capacity;
}

const int32_t *kvs_cache_rope_positions(const kvs_kv_cache *c, int l, int h) {
    if (!LAYER_OK(c, l) || h < 0 || h >= c->p.n_kv_heads) return NULL;
    return c->host_rpos + ((size_t)l * c->p.n_kv_heads + h) * c->p.capacity;
}

int64_t kvs_cache_max_len(const kvs_kv_cache *c, int l) {
    if (!LAYER_OK(c, l)) return -1;
    int64_t m = 0;
    for (int h = 0; h < c->p.n_kv_heads; h++) {
        int64_t n = c->host_len[(size_t)l * c->p.n_kv_heads + h];
        if (n > m) m = n;
    }
    return m;
}

int64_t kvs_cache_bytes_used(const kvs_kv_cache *c) {
    if (!c) return 0;
    int64_t rows = 0, xrows = 0, pruned = 0;
    for (int l = 0; l < c->p.n_layers; l++) {
        for (int h = 0; h < c->p.n_kv_heads; h++) {
            rows += c->host_len[(size_t)l * c->p.n_kv_heads + h];
            /* a pruned key row: d_k' values instead of head_dim (f32 / f16 keys) */
            if (kp_active(c, l))
                pruned += c->kp[l].rows[h] * (int64_t)(kvs_dtype_bytes(c->p.type_k, c->p.head_dim) -
                                                       kvs_dtype_bytes(c->p.type_k, c->kp[l].d));
        }
        if (c->x[l]) xrows += kvs_cache_max_len(c, l);
        if (c->rdelta[l]) xrows += kvs_cache_max_len(c, l);
    }
    return rows * (int64_t)(kvs_dtype_bytes(c->p.type_k, c->p.head_dim) + kvs_dtype_bytes(c->p.type_v, c->p.head_dim)) -
           pruned + xrows * (int64_t)c->p.dim * 4;
}

int64_t kvs_cache_bytes_allocated(const kvs_kv_cache *c) {
    if (!c) return 0;
    const int64_t kfull = (int64_t)kvs_dtype_bytes(c->p.type_k, c->p.head_dim) * c->p.capacity * c->p.n_kv_heads;
    int64_t per_layer = (int64_t)kvs_dtype_bytes(c->p.type_v, c->p.head_dim) * c->p.capacity * c->p.n_kv_heads;
    if (c->p.flags & KVS_CACHE_KEEP_X) per_layer += (int64_t)c->p.dim * 4 * c->p.capacity;
    if (c->p.flags & KVS_CACHE_KEEP_DELTA) per_layer += (int64_t)c->p.dim * 4 * c->p.capacity;
    int64_t tot = 0;
    for (int l = 0; l < c->p.n_layers; l++) /* a pruned layer: the pruned segment and the full-width tail */
        tot += per_layer + (kp_active(c, l) ? (int64_t)c->kp[l].k->nbytes + (int64_t)c->k[l]->nbytes : kfull);
    return tot;
}

int64_t kvs_cache_row_bytes(kvs_dtype type_k, kvs_dtype type_v, int head_dim, int draft) {
    const char *op = "kvs_cache_row_bytes";
    if (head_dim < 1 || (draft != 0 && draft != 1)) {
        kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: head_dim %d < 1 or draft %d not 0 or 1", op, head_dim, draft);
        return -1;
    }
    const kvs_dtype t[2] = {type_k, type_v};
    int64_t sum = 0;
    for (int w = 0; w < 2; w++) {
        if (!cache_type_ok(t[w])) {
            kvs_error(KVS_ERR_DTYPE, "%s: %s %s is not a cache type (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, qh8)", op,
                      w ? "type_v" : "type_k", kvs_dtype_name(t[w]));
            return -1;
        }
        /* qh8 as stored: both planes (kvs_dtype_bytes' 36 per 32); the draft reads the upper one */
        const size_t b = kvs_dtype_bytes(draft ? plane_type(t[w]) : t[w], head_dim);
        if (b == 0) {
            kvs_error(KVS_ERR_DTYPE, "%s: %s %s stores blocks of 32 values along head_dim, and head_dim %d is not a multiple "
                      "of 32", op, w ? "type_v" : "type_k", kvs_dtype_name(t[w]), head_dim);
            return -1;
        }
        sum += (int64_t)b;
    }
    return sum;
}

kvs_status kvs_cache_set_tail_rows(kvs_kv_cache *c, int64_t rows) {
    if (!c || rows < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_set_tail_rows: NULL cache or rows %lld < 0",
                                         (long long)rows);
    c->tail_rows = rows;
    return KVS_OK;
}

int64_t kvs_cache_tail_capacity(const kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && kp_active(c, l) ? c->kp[l].tcap : 0; }
kvs_tensor *kvs_cache_tail_len_tensor(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && kp_active(c, l) ? c->kp[l].tlen : NULL; }

/* ---- ThinK's pruned key segment ---- */

int kvs_cache_pruned_dim(const kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && c->kp ? c->kp[l].d : 0; }

int64_t kvs_cache_pruned_rows(const kvs_kv_cache *c, int l, int h) {
    if (!LAYER_OK(c, l) || h < 0 || h >= c->p.n_kv_heads) return -1;
    return kp_active(c, l) ? c->kp[l].rows[h] : 0;
}

kvs_tensor *kvs_cache_k_pruned(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && kp_active(c, l) ? c->kp[l].k : NULL; }
kvs_tensor *kvs_cache_pruned_len_tensor(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && kp_active(c, l) ? c->kp[l].len : NULL; }
kvs_tensor *kvs_cache_tail_pos_tensor(kvs_kv_cache *c, int l) { return LAYER_OK(c, l) && kp_active(c, l) ? c->kp[l].tpos : NULL; }
const int32_t *kvs_cache_pruned_channels(const kvs_kv_cache *c, int l) {
    return LAYER_OK(c, l) && c->kp && c->kp[l].d ? c->kp[l].ch : NULL;
}

/* Raw key bytes of a pruned layer l in the full-width layout: the pruned rows expanded (0 in the
 * channels they do not hold), the tail's rows at rows[h] + j, into buf [n_kv_heads][capacity][head_dim]
 * elements of es bytes (f32 / f16 keys), zeroed by the caller. */
static kvs_status pruned_full(kvs_kv_cache *c, int l, uint8_t *buf, size_t es) {
    const struct kvs_pruned_seg *g = &c->kp[l];
    const int H = c->p.n_kv_heads, hd = c->p.head_dim, d = g->d;
    const size_t cap = (size_t)c->p.capacity, tcap = (size_t)g->tcap;
    const kvs_tensor *tail = c->k[l];
    uint8_t *pr = malloc(g->k->nbytes + tail->nbytes);
    if (!pr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache: out of host memory");
    uint8_t *tr = pr + g->k->nbytes;
    kvs_status s = kvs_tensor_download(g->k, pr, 0, g->k->nbytes);
    if (s == KVS_OK) s = kvs_tensor_download(tail, tr, 0, tail->nbytes);
    for (int h = 0; s == KVS_OK && h < H; h++) {
        for (int64_t r = 0; r < g->rows[h]; r++) {
            uint8_t *dst = buf + ((size_t)h * cap + (size_t)r) * hd * es;
            const uint8_t *src = pr + ((size_t)h * cap + (size_t)r) * d * es;
            for (int t = 0; t < d; t++) memcpy(dst + (size_t)g->ch[h * d + t] * es, src + (size_t)t * es, es);
        }
        const int64_t a = c->host_len[(size_t)l * H + h] - g->rows[h];
        for (int64_t j = 0; j < a; j++)
            memcpy(buf + ((size_t)h * cap + (size_t)(g->rows[h] + j)) * hd * es, tr + ((size_t)h * tcap + (size_t)j) * hd * es,
                   (size_t)hd * es);
    }
    free(pr);
    return s;
}

static void seg_tensors_free(struct kvs_pruned_seg *g) {
    kvs_tensor_destroy(&g->k);
    kvs_tensor_destroy(&g->len);
    kvs_tensor_destroy(&g->tlen);
    kvs_tensor_destroy(&g->tpos);
    kvs_tensor_destroy(&g->tslots);
}

kvs_status kvs_cache_unprune_keys(kvs_kv_cache *c, int l) {
    const char *op = "kvs_cache_unprune_keys";
    if (!LAYER_OK(c, l)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL cache or bad layer %d", op, l);
    if (!kp_active(c, l)) return KVS_OK;
    const int H = c->p.n_kv_heads;
    const size_t es = kvs_dtype_bytes(c->p.type_k, 1), nb = (size_t)H * (size_t)c->p.capacity * c->p.head_dim * es;
    uint8_t *buf = calloc(1, nb);
    if (!buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory (%zu bytes)", op, nb);
    kvs_tensor *full = NULL;
    kvs_status s = pruned_full(c, l, buf, es);
    if (s == KVS_OK) s = kvs_tensor_new(&full, c->dev, c->p.type_k, c->p.head_dim, c->p.capacity, H, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(full, buf, 0, nb);
    free(buf);
    if (s != KVS_OK) {
        kvs_tensor_destroy(&full);
        return s;
    }
    kvs_tensor_set_name(full, "cache.k");
    kvs_tensor_destroy(&c->k[l]); /* the tail */
    c->k[l] = full;
    struct kvs_pruned_seg *g = &c->kp[l];
    seg_tensors_free(g);
    memset(g->rows, 0, (size_t)H * sizeof *g->rows);
    g->tcap = 0;
    g->on = 0;
    return sync_layer(c, l);
}

/* The tail tensors of capacity tcap (positions and write indices with them). */
static kvs_status tail_new(kvs_kv_cache *c, struct kvs_pruned_seg *g, int64_t tcap, kvs_tensor **tail) {
    const int H = c->p.n_kv_heads;
    kvs_tensor *tp = NULL, *ts = NULL;
    uint8_t *z = calloc(1, kvs_dtype_bytes(c->p.type_k, c->p.head_dim) * (size_t)tcap * H);
    kvs_status s = z ? KVS_OK : kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache: out of host memory");
    if (s == KVS_OK) s = kvs_tensor_new(tail, c->dev, c->p.type_k, c->p.head_dim, tcap, H, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(*tail, z, 0, (*tail)->nbytes); /* never-written rows read 0 */
    if (s == KVS_OK) s = kvs_tensor_new(&tp, c->dev, KVS_I32, tcap, H, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&ts, c->dev, KVS_I32, tcap * H, 0, 0, 0);
    free(z);
    if (s != KVS_OK) {
        kvs_tensor_destroy(tail);
        kvs_tensor_destroy(&tp);
        kvs_tensor_destroy(&ts);
        return s;
    }
    kvs_tensor_set_name(*tail, "cache.k_tail");
    kvs_tensor_destroy(&g->tpos);
    kvs_tensor_destroy(&g->tslots);
    g->tpos = tp;
    g->tslots = ts;
    g->tcap = tcap;
    return KVS_OK;
}

/* Grows layer l's tail to hold need rows per head (a write of more rows than the evictor's buffer
 * announced, kvs_cache_set_tail_rows): at least doubled, at most capacity - max P (the most rows an
 * append can add before the cache is full). */
static kvs_status tail_grow(kvs_kv_cache *c, int l, int64_t need) {
    struct kvs_pruned_seg *g = &c->kp[l];
    if (need <= g->tcap) return KVS_OK;
    const int H = c->p.n_kv_heads;
    int64_t maxp = 0;
    for (int h = 0; h < H; h++) maxp = g->rows[h] > maxp ? g->rows[h] : maxp;
    int64_t nt = 2 * g->tcap > need ? 2 * g->tcap : need;
    if (nt > c->p.capacity - maxp) nt = c->p.capacity - maxp;
    if (nt < need) nt = need;
    const size_t rb = kvs_dtype_bytes(c->p.type_k, c->p.head_dim), old = (size_t)g->tcap;
    kvs_tensor *otail = c->k[l], *ntail = NULL;
    uint8_t *o = malloc(otail->nbytes), *n = calloc(1, rb * (size_t)nt * H);
    kvs_status s = o && n ? kvs_tensor_download(otail, o, 0, otail->nbytes) : kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache: out of host memory");
    if (s == KVS_OK)
        for (int h = 0; h < H; h++) memcpy(n + (size_t)h * nt * rb, o + (size_t)h * old * rb, old * rb);
    if (s == KVS_OK) s = tail_new(c, g, nt, &ntail);
    if (s == KVS_OK) s = kvs_tensor_upload(ntail, n, 0, ntail->nbytes);
    free(o);
    free(n);
    if (s != KVS_OK) return s; /* (tail_new failing leaves the old tail and its tensors) */
    kvs_tensor_destroy(&c->k[l]);
    c->k[l] = ntail;
    return sync_pruned(c, l);
}

kvs_status kvs_cache_prune_keys(kvs_kv_cache *c, int l, const uint8_t *pruned) {
    const char *op = "kvs_cache_prune_keys";
    if (!LAYER_OK(c, l) || !pruned) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or bad layer %d", op, l);
    if (c->p.mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_STATE, "%s: only append caches hold pruned keys (this cache is positional)", op);
    if ((c->p.type_k != KVS_F32 && c->p.type_k != KVS_F16) || (c->p.flags & KVS_CACHE_ROTATE))
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: keys of type %s%s: only plain f32 / f16 keys store a channel subset", op,
                         kvs_dtype_name(c->p.type_k), (c->p.flags & KVS_CACHE_ROTATE) ? " (Hadamard-rotated)" : "");
    const int H = c->p.n_kv_heads, hd = c->p.head_dim;
    int d = -1;
    for (int h = 0; h < H; h++) {
        int kept = 0;
        for (int t = 0; t < hd; t++) kept += !pruned[h * hd + t];
        if (d >= 0 && kept != d)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: kv head %d keeps %d channels, head 0 keeps %d (one d_k' per layer)", op, h,
                             kept, d);
        d = kept;
    }
    if (d < 1) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: every channel pruned (keep at least one)", op);
    const size_t cap = (size_t)c->p.capacity;
    int64_t maxp = 0;
    for (int h = 0; h < H; h++) maxp = c->host_len[(size_t)l * H + h] > maxp ? c->host_len[(size_t)l * H + h] : maxp;
    /* the keys at full width on the host: the full-width tensor's bytes, or a pruned layer's segment
     * expanded (0 outside its old channels) with its tail (pruned_full), so that pruning again never
     * makes a full-width device tensor */
    const int was_on = kp_active(c, l);
    if (maxp == 0) KVS_TRY(kvs_cache_unprune_keys(c, l)); /* nothing to prune: full width, the channels recorded */
    const size_t es = kvs_dtype_bytes(c->p.type_k, 1), fb = (size_t)H * cap * hd * es;
    uint8_t *buf = maxp > 0 ? calloc(1, fb + (size_t)H * cap * d * es) : NULL;
    if (maxp > 0 && !buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    kvs_status s = KVS_OK;
    if (buf) s = was_on ? pruned_full(c, l, buf, es) : kvs_tensor_download(c->k[l], buf, 0, fb);
    if (s != KVS_OK) {
        free(buf);
        return s;
    }
    if (!c->kp) {
        c->kp = calloc((size_t)c->p.n_layers, sizeof *c->kp);
        if (!c->kp) {
            free(buf);
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        }
    }
    struct kvs_pruned_seg *g = &c->kp[l];
    /* the new channel list, recorded once the new segment is made (the old one describes the old
     * segment until then) */
    int32_t *nch = malloc((size_t)H * d * sizeof *nch);
    if (!g->rows) g->rows = calloc((size_t)H, sizeof *g->rows);
    if (!nch || !g->rows) {
        free(nch);
        free(buf);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    for (int h = 0; h < H; h++) {
        int n = 0;
        for (int ch = 0; ch < hd; ch++)
            if (!pruned[h * hd + ch]) nch[h * d + n++] = ch;
    }
    if (maxp == 0) { /* nothing to prune: the layer stays full width */
        free(g->ch);
        g->ch = nch;
        g->d = d;
        return KVS_OK;
    }
    /* the tail: the rows appended until the next eviction, at most capacity - max P */
    int64_t tcap = (int64_t)cap - maxp;
    if (c->tail_rows > 0 && c->tail_rows < tcap) tcap = c->tail_rows;
    if (tcap < 1) tcap = 1;
    kvs_tensor *kp = NULL, *plen = NULL, *tlen = NULL, *tail = NULL;
    uint8_t *pr = buf + fb;
    for (int h = 0; s == KVS_OK && h < H; h++) {
        const int64_t len = c->host_len[(size_t)l * H + h];
        for (int64_t r = 0; r < len; r++) {
            const uint8_t *src = buf + ((size_t)h * cap + (size_t)r) * hd * es;
            uint8_t *dst = pr + ((size_t)h * cap + (size_t)r) * d * es;
            for (int x = 0; x < d; x++) memcpy(dst + (size_t)x * es, src + (size_t)nch[h * d + x] * es, es);
        }
    }
    /* full-width keys on the device are freed before the segment is made (their bytes are in buf),
     * so the two layouts are never held at once; restored from buf if the new layout fails */
    if (s == KVS_OK && !was_on) kvs_tensor_destroy(&c->k[l]);
    if (s == KVS_OK) s = kvs_tensor_new(&kp, c->dev, c->p.type_k, d, (int64_t)cap, H, 0);
    if (s == KVS_OK) s = kvs_tensor_upload(kp, pr, 0, kp->nbytes);
    if (s == KVS_OK) s = kvs_tensor_new(&plen, c->dev, KVS_I32, H, 0, 0, 0);
    if (s == KVS_OK) s = kvs_tensor_new(&tlen, c->dev, KVS_I32, H, 0, 0, 0);
    if (s == KVS_OK) s = tail_new(c, g, tcap, &tail);
    if (s != KVS_OK) {
        kvs_tensor_destroy(&kp);
        kvs_tensor_destroy(&plen);
        kvs_tensor_destroy(&tlen);
        free(nch);
        if (!c->k[l]) { /* the full-width keys back */
            kvs_status r = kvs_tensor_new(&c->k[l], c->dev, c->p.type_k, hd, (int64_t)cap, H, 0);
            if (r == KVS_OK) r = kvs_tensor_upload(c->k[l], buf, 0, fb);
            if (r == KVS_OK) kvs_tensor_set_name(c->k[l], "cache.k");
            else s = kvs_error(KVS_ERR_STATE, "%s: layer %d's keys were lost (making the pruned segment failed, then "
                               "restoring the full-width keys failed); reset the cache", op, l);
        }
        free(buf);
        return s;
    }
    free(buf);
    free(g->ch);
    g->ch = nch;
    g->d = d;
    kvs_tensor_set_name(kp, "cache.k_pruned");
    if (was_on) { /* the old segment goes (tail_new replaced the tail's positions and write rows) */
        kvs_tensor_destroy(&g->k);
        kvs_tensor_destroy(&g->len);
        kvs_tensor_destroy(&g->tlen);
    }
    g->k = kp;
    g->len = plen;
    g->tlen = tlen;
    kvs_tensor_destroy(&c->k[l]); /* the full-width keys or the old tail: the new tail replaces them */
    c->k[l] = tail;
    for (int h = 0; h < H; h++) g->rows[h] = c->host_len[(size_t)l * H + h];
    g->on = 1;
    return sync_pruned(c, l);
}

static int rot_block(int head_dim) {
    int b = 1;
    while (b < 32 && head_dim % (2 * b) == 0) b *= 2;
    return b;
}

void kvs_cache_rotate_rows(float *x, int64_t n, int head_dim) {
    const int b = head_dim > 0 ? rot_block(head_dim) : 1;
    if (!x || n < 1 || b < 2) return;
    const float norm = (float)(1.0 / sqrt((double)b));
    for (int64_t i = 0; i < n * (head_dim / b); i++) {
        float *v = x + i * b;
        for (int len = 1; len < b; len *= 2) /* fast Walsh-Hadamard butterflies */
            for (int s0 = 0; s0 < b; s0 += 2 * len)
                for (int t = s0; t < s0 + len; t++) {
                    const float u = v[t], w = v[t + len];
                    v[t] = u + w;
                    v[t + len] = u - w;
                }
        for (int t = 0; t < b; t++) v[t] *= norm;
    }
}

kvs_status kvs_cache_read_f32(kvs_kv_cache *c, int layer, int which, float *dst) {
    if (!LAYER_OK(c, layer) || (which != 0 && which != 1) || !dst)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_read_f32: NULL argument, bad layer %d or which %d", layer, which);
    const kvs_tensor *t = which ? c->v[layer] : c->k[layer];
    const kvs_tensor *tlo = which ? kvs_cache_v_lo(c, layer) : kvs_cache_k_lo(c, layer);
    const int64_t n = kvs_tensor_nelements(t), d = c->p.head_dim;
    if (tlo) { /* qh8: the 8-bit values from both planes */
        uint8_t *hi = malloc(t->nbytes + tlo->nbytes);
        if (!hi) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_read_f32: out of host memory");
        uint8_t *lo = hi + t->nbytes;
        kvs_status s = kvs_tensor_download(t, hi, 0, t->nbytes);
        if (s == KVS_OK) s = kvs_tensor_download(tlo, lo, 0, tlo->nbytes);
        if (s == KVS_OK) kvs_qb_qh8_n(hi, lo, n / 32, dst);
        free(hi);
        if (s == KVS_OK && which == 0 && (c->p.flags & KVS_CACHE_ROTATE)) kvs_cache_rotate_rows(dst, n / d, (int)d);
        return s;
    }
    if (which == 0 && kp_active(c, layer)) { /* pruned rows: 0 in the channels they do not hold */
        const size_t es = kvs_dtype_bytes(t->dtype, 1), nf = (size_t)c->p.n_kv_heads * (size_t)c->p.capacity * (size_t)d;
        uint8_t *buf = calloc(nf, es);
        if (!buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_read_f32: out of host memory");
        kvs_status s = pruned_full(c, layer, buf, es);
        for (size_t i = 0; s == KVS_OK && i < nf; i++)
            dst[i] = es == 4 ? ((const float *)buf)[i] : kvs_f16_to_f32(((const uint16_t *)buf)[i]);
        free(buf);
        return s;
    }
    if (t->dtype == KVS_F32) {
        KVS_TRY(kvs_tensor_download(t, dst, 0, (size_t)n * 4));
        if (which == 0 && (c->p.flags & KVS_CACHE_ROTATE)) kvs_cache_rotate_rows(dst, n / d, (int)d);
        return KVS_OK;
    }
    uint8_t *raw = malloc(t->nbytes);
    if (!raw) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_read_f32: out of host memory (%zu bytes)", t->nbytes);
    kvs_status s = kvs_tensor_download(t, raw, 0, t->nbytes);
    if (s == KVS_OK) {
        if (t->dtype == KVS_F16 || t->dtype == KVS_BF16) {
            const uint16_t *h = (const uint16_t *)raw;
            for (int64_t i = 0; i < n; i++) dst[i] = t->dtype == KVS_F16 ? kvs_f16_to_f32(h[i]) : kvs_bf16_to_f32(h[i]);
        } else {
            const size_t rb = kvs_dtype_bytes(t->dtype, d);
            for (int64_t r = 0; r < n / d && s == KVS_OK; r++) s = kvs_dequant_row(t->dtype, raw + (size_t)r * rb, d, dst + r * d);
        }
    }
    free(raw);
    if (s == KVS_OK && which == 0 && (c->p.flags & KVS_CACHE_ROTATE)) kvs_cache_rotate_rows(dst, n / d, (int)d);
    return s;
}

int64_t kvs_cache_next_pos(const kvs_kv_cache *c) { return c ? c->next_pos : -1; }

static int rows_shape_ok(const kvs_tensor *t, const kvs_cache_params *p, int64_t n) {
    return kvs_tensor_dtype(t) == KVS_F32 && kvs_tensor_ne(t, 0) == p->head_dim && kvs_tensor_ne(t, 1) == p->n_kv_heads &&
           kvs_tensor_ne(t, 2) == n && kvs_tensor_ne(t, 3) == 1;
}

kvs_status kvs_cache_write_rows(kvs_kv_cache *c, int l, const kvs_tensor *k, const kvs_tensor *v, const int32_t *positions,
                                int64_t n) {
    return kvs_cache_write_rows_rope(c, l, k, v, positions, NULL, n);
}

kvs_status kvs_cache_write_rows_rope(kvs_kv_cache *c, int l, const kvs_tensor *k, const kvs_tensor *v, const int32_t *positions,
                                     const int32_t *rope_positions, int64_t n) {
    const char *op = "kvs_cache_write_rows";
    if (!LAYER_OK(c, l) || !k || !v || !positions || n < 1)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument, bad layer %d or n %lld < 1", op, l, (long long)n);
    if (!rope_positions) rope_positions = positions;
    const kvs_cache_params *cp = &c->p;
    int H = cp->n_kv_heads;
    if (!rows_shape_ok(k, cp, n) || !rows_shape_ok(v, cp, n))
        return kvs_error(KVS_ERR_SHAPE, "%s: k and v must be F32 [%lld][%d][%d]", op, (long long)n, H, cp->head_dim);
    int64_t *len = c->host_len + (size_t)l * H;
    int32_t *slots = c->scratch_slots;
    for (int64_t i = 0; i < n; i++) {
        if (positions[i] < 0 || rope_positions[i] < 0)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: position %d or RoPE position %d < 0", op, positions[i],
                             rope_positions[i]);
        if (cp->mode == KVS_CACHE_POSITIONAL && positions[i] >= cp->capacity)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: position %d outside the capacity %lld", op, positions[i],
                             (long long)cp->capacity);
    }
    if (cp->mode == KVS_CACHE_POSITIONAL) {
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++) slots[h * n + i] = positions[i];
    } else {
        for (int h = 0; h < H; h++) {
            if (len[h] + n > cp->capacity)
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: append cache full at layer %d head %d (%lld + %lld > capacity %lld)",
                                 op, l, h, (long long)len[h], (long long)n, (long long)cp->capacity);
            for (int64_t i = 0; i < n; i++) slots[h * n + i] = (int32_t)(len[h] + i);
        }
    }
    /* ThinK's pruned layout: the keys go to the full-width tail (row len - P), grown if it must */
    kvs_tensor tidx;
    const int tail = cp->mode == KVS_CACHE_APPEND && kp_active(c, l);
    if (tail) {
        int64_t need = 0;
        for (int h = 0; h < H; h++)
            if (len[h] - c->kp[l].rows[h] + n > need) need = len[h] - c->kp[l].rows[h] + n;
        KVS_TRY(tail_grow(c, l, need));
        int32_t *ts = c->scratch_slots + (size_t)H * n; /* after the cache rows ([H][n] <= [H][cap] / 2, or a buffer) */
        int32_t *tsb = (size_t)H * n * 2 <= (size_t)H * (size_t)cp->capacity ? ts : malloc((size_t)H * n * sizeof *ts);
        if (!tsb) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
        for (int h = 0; h < H; h++)
            for (int64_t i = 0; i < n; i++) tsb[h * n + i] = (int32_t)(len[h] - c->kp[l].rows[h] + i);
        int64_t tne[2] = {n, H};
        kvs_status st = kvs_tensor_view_into(&tidx, c->kp[l].tslots, 0, 2, tne);
        if (st == KVS_OK) st = kvs_tensor_upload(&tidx, tsb, 0, (size_t)H * n * sizeof *tsb);
        if (tsb != ts) free(tsb);
        KVS_TRY(st);
    }
    /* the device row indices [H][n], uploaded only when they changed */
    kvs_tensor idx;
    int64_t ne[2] = {n, H};
    kvs_status s = kvs_tensor_view_into(&idx, c->slots, 0, 2, ne);
    size_t bytes = (size_t)H * (size_t)n * sizeof *slots;
    if (s == KVS_OK && !(c->slots_n == H * n && memcmp(c->slots_host, slots, bytes) == 0)) {
        c->slots_n = 0;
        s = kvs_tensor_upload(&idx, slots, 0, bytes);
        if (s == KVS_OK) {
            memcpy(c->slots_host, slots, bytes);
            c->slots_n = H * n;
        }
    }
    const kvs_tensor *ksrc = k;
    kvs_tensor kr;
    if (s == KVS_OK && (cp->flags & KVS_CACHE_ROTATE)) { /* keys rotated by R on the host, then written */
        const size_t nel = (size_t)n * (size_t)H * (size_t)cp->head_dim;
        if (c->krot_rows < n) {
            kvs_tensor_destroy(&c->krot);
            free(c->krot_host);
            c->krot_rows = 0;
            c->krot_host = malloc(nel * sizeof(float));
            s = c->krot_host ? kvs_tensor_new(&c->krot, c->dev, KVS_F32, cp->head_dim, H, n, 0)
                             : kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
            if (s == KVS_OK) c->krot_rows = n;
        }
        int64_t rne[3] = {cp->head_dim, H, n};
        if (s == KVS_OK) s = kvs_tensor_download(k, c->krot_host, 0, nel * sizeof(float));
        if (s == KVS_OK) {
            kvs_cache_rotate_rows(c->krot_host, n * H, cp->head_dim);
            s = kvs_tensor_view_into(&kr, c->krot, 0, 3, rne);
        }
        if (s == KVS_OK) s = kvs_tensor_upload(&kr, c->krot_host, 0, nel * sizeof(float));
        ksrc = &kr;
    }
    /* qh8: both planes coded by the backend (kvs_qh8_encode_row's rule; on the device for GPUs) */
    if (s == KVS_OK)
        s = c->k_lo ? kvs_scatter_qh8(c->dev, ksrc, &idx, c->k[l], c->k_lo[l], 1)
                    : kvs_scatter(c->dev, ksrc, tail ? &tidx : &idx, c->k[l], 1);
    if (s == KVS_OK)
        s = c->v_lo ? kvs_scatter_qh8(c->dev, v, &idx, c->v[l], c->v_lo[l], 1) : kvs_scatter(c->dev, v, &idx, c->v[l], 1);
    KVS_TRY(s);
    /* host mirrors + device pos/len (uploaded only when something changed) */
    int changed = 0;
    for (int h = 0; h < H; h++) {
        int32_t *pos = c->host_pos + ((size_t)l * H + h) * cp->capacity;
        int32_t *rpos = c->host_rpos + ((size_t)l * H + h) * cp->capacity;
        for (int64_t i = 0; i < n; i++) {
            rpos[slots[h * n + i]] = rope_positions[i];
            int32_t *dst = &pos[slots[h * n + i]];
            if (positions[i] + 1 > c->next_pos) c->next_pos = positions[i] + 1;
            changed |= *dst != positions[i];
            *dst = positions[i];
        }
        if (cp->mode == KVS_CACHE_APPEND) {
            len[h] += n;
            changed = 1;
        } else {
            for (int64_t i = 0; i < n; i++)
                if (slots[h * n + i] + 1 > len[h]) {
                    len[h] = slots[h * n + i] + 1;
                    changed = 1;
                }
        }
    }
    return changed ? sync_layer(c, l) : KVS_OK;
}

/* Index list [H][n] (n >= 1) of the rows sel(h, i) for i < cnt[h], padded by repeating the head's
 * last (0 when it keeps none): those rows lie beyond the head's new length, never read. */
static kvs_status keep_index(kvs_kv_cache *c, kvs_tensor **t, int64_t n, const int64_t *cnt, const int32_t *keep,
                             int64_t keep_stride, const int64_t *first, const int64_t *minus) {
    const int H = c->p.n_kv_heads;
    int32_t *idx = malloc((size_t)H * n * sizeof *idx);
    if (!idx) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_keep: out of host memory");
    for (int h = 0; h < H; h++)
        for (int64_t i = 0; i < n; i++)
            idx[h * n + i] = cnt[h] == 0 ? 0
                                         : keep[h * keep_stride + first[h] + (i < cnt[h] ? i : cnt[h] - 1)] - (int32_t)minus[h];
    int64_t ne[2] = {n, H};
    kvs_status s = kvs_tensor_create(t, c->dev, KVS_I32, 2, ne);
    if (s == KVS_OK) s = kvs_tensor_upload(*t, idx, 0, (size_t)H * n * 4);
    free(idx);
    return s;
}

/* kvs_cache_keep on a layer in ThinK's pruned layout: per head the kept rows below P[h] (a prefix of
 * the keep list, they are its lowest) move within the pruned segment, the rest within the tail
 * (kept row r to tail row i - P'[h] from r - P[h] >= i - P'[h]: an in-place compaction), the values
 * as usual; P[h] becomes P'[h], the count of the first kind. */
static kvs_status keep_pruned(kvs_kv_cache *c, int layer, const int32_t *keep, const int64_t *n_keep, int64_t keep_stride,
                              int64_t nmax) {
    const int H = c->p.n_kv_heads;
    struct kvs_pruned_seg *g = &c->kp[layer];
    int64_t np[256] = {0}, na[256] = {0}, zero[256] = {0}, pmax = 0, amax = 0;
    if (H > 256) return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_cache_keep: ThinK's pruned keys support at most 256 kv heads");
    for (int h = 0; h < H; h++) {
        np[h] = 0;
        while (np[h] < n_keep[h] && keep[h * keep_stride + np[h]] < g->rows[h]) np[h]++;
        na[h] = n_keep[h] - np[h];
        zero[h] = 0;
        pmax = np[h] > pmax ? np[h] : pmax;
        amax = na[h] > amax ? na[h] : amax;
    }
    kvs_tensor *ti = NULL;
    kvs_status s = keep_index(c, &ti, pmax, np, keep, keep_stride, zero, zero);
    if (s == KVS_OK) s = kvs_compact(c->dev, g->k, ti);
    kvs_tensor_destroy(&ti);
    if (s == KVS_OK && amax > 0) {
        s = keep_index(c, &ti, amax, na, keep, keep_stride, np, g->rows);
        if (s == KVS_OK) s = kvs_compact(c->dev, c->k[layer], ti);
        kvs_tensor_destroy(&ti);
    }
    if (s == KVS_OK) s = keep_index(c, &ti, nmax, n_keep, keep, keep_stride, zero, zero);
    if (s == KVS_OK) s = kvs_compact(c->dev, c->v[layer], ti);
    if (s == KVS_OK && c->v_lo) s = kvs_compact(c->dev, c->v_lo[layer], ti);
    kvs_tensor_destroy(&ti);
    if (s != KVS_OK) return s;
    for (int h = 0; h < H; h++) {
        int32_t *pos = c->host_pos + ((size_t)layer * H + h) * c->p.capacity;
        int32_t *rpos = c->host_rpos + ((size_t)layer * H + h) * c->p.capacity;
        int64_t len = c->host_len[(size_t)layer * H + h];
        for (int64_t i = 0; i < n_keep[h]; i++) {
            pos[i] = pos[keep[h * keep_stride + i]];
            rpos[i] = rpos[keep[h * keep_stride + i]];
        }
        for (int64_t i = n_keep[h]; i < len; i++) pos[i] = rpos[i] = -1;
        c->host_len[(size_t)layer * H + h] = n_keep[h];
        g->rows[h] = np[h];
    }
    return sync_layer(c, layer);
}

kvs_status kvs_cache_keep(kvs_kv_cache *c, int layer, const int32_t *keep, const int64_t *n_keep, int64_t keep_stride) {
    const char *op = "kvs_cache_keep";
    if (!LAYER_OK(c, layer) || !keep || !n_keep)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or bad layer %d", op, layer);
    if (c->p.mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_STATE, "%s: only append caches are evicted (this cache is positional)", op);
    int H = c->p.n_kv_heads;
    int64_t nmax = 0;
    for (int h = 0; h < H; h++) {
        int64_t len = c->host_len[(size_t)layer * H + h];
        if (n_keep[h] < 0 || n_keep[h] > len || n_keep[h] > keep_stride)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: layer %d head %d keeps %lld of %lld rows", op, layer, h,
                             (long long)n_keep[h], (long long)len);
        for (int64_t i = 0; i < n_keep[h]; i++) {
            int32_t r = keep[h * keep_stride + i];
            if (r < 0 || r >= len || (i > 0 && r <= keep[h * keep_stride + i - 1]))
                return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: layer %d head %d keep[%lld] = %d (len %lld, must increase)",
                                 op, layer, h, (long long)i, r, (long long)len);
        }
        if (n_keep[h] > nmax) nmax = n_keep[h];
    }
    /* ThinK's pruned layout stays (ThinK prunes the kept rows again after the eviction,
     * kvs_cache_prune_keys): a head's kept rows below P[h] are compacted in the pruned segment, the
     * others in the tail, so no full-width key tensor is made; a layer keeping no pruned row in any
     * head returns to full width first (its kept keys are all in the tail) */
    if (kp_active(c, layer) && nmax > 0) {
        int64_t kp_max = 0;
        for (int h = 0; h < H; h++) {
            int64_t n = 0;
            while (n < n_keep[h] && keep[h * keep_stride + n] < c->kp[layer].rows[h]) n++;
            kp_max = n > kp_max ? n : kp_max;
        }
        if (kp_max > 0) return keep_pruned(c, layer, keep, n_keep, keep_stride, nmax);
    }
    KVS_TRY(kvs_cache_unprune_keys(c, layer));
    if (nmax == 0) {
        for (int h = 0; h < H; h++) c->host_len[(size_t)layer * H + h] = 0;
        return sync_layer(c, layer);
    }
    /* Device index list [H][nmax]; heads keeping fewer rows are padded by repeating their last kept
     * row (those rows lie beyond the head's new length, so their contents do not matter). */
    int32_t *idx = malloc((size_t)H * nmax * sizeof *idx);
    if (!idx) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int h = 0; h < H; h++)
        for (int64_t i = 0; i < nmax; i++)
            idx[h * nmax + i] = n_keep[h] == 0 ? 0 : keep[h * keep_stride + (i < n_keep[h] ? i : n_keep[h] - 1)];
    kvs_tensor *t = NULL;
    int64_t ne[2] = {nmax, H};
    kvs_status s = kvs_tensor_create(&t, c->dev, KVS_I32, 2, ne);
    if (s == KVS_OK) s = kvs_tensor_upload(t, idx, 0, (size_t)H * nmax * 4);
    if (s == KVS_OK) s = kvs_compact(c->dev, c->k[layer], t);
    if (s == KVS_OK) s = kvs_compact(c->dev, c->v[layer], t);
    if (s == KVS_OK && c->k_lo) s = kvs_compact(c->dev, c->k_lo[layer], t); /* qh8: both planes move */
    if (s == KVS_OK && c->v_lo) s = kvs_compact(c->dev, c->v_lo[layer], t);
    kvs_tensor_destroy(&t);
    if (s == KVS_OK) {
        for (int h = 0; h < H; h++) {
            int32_t *pos = c->host_pos + ((size_t)layer * H + h) * c->p.capacity;
            int32_t *rpos = c->host_rpos + ((size_t)layer * H + h) * c->p.capacity;
            int64_t len = c->host_len[(size_t)layer * H + h];
            for (int64_t i = 0; i < n_keep[h]; i++) {
                pos[i] = pos[keep[h * keep_stride + i]];
                rpos[i] = rpos[keep[h * keep_stride + i]];
            }
            for (int64_t i = n_keep[h]; i < len; i++) pos[i] = rpos[i] = -1;
            c->host_len[(size_t)layer * H + h] = n_keep[h];
        }
        s = sync_layer(c, layer);
    }
    free(idx);
    return s;
}

kvs_status kvs_cache_check_rerotate(const kvs_cache_params *p) {
    const char *op = "kvs_cache_rerotate";
    if (!p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_cache_check_rerotate: p is NULL");
    /* kvs_rope_shift rotates F32/F16 keys in place as RoPE pairs */
    if (p->type_k != KVS_F32 && p->type_k != KVS_F16)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: keys of type %s cannot be re-rotated (f32 or f16 keys only)", op,
                         kvs_dtype_name(p->type_k));
    if (p->flags & KVS_CACHE_ROTATE)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a KVS_CACHE_ROTATE cache stores Hadamard-rotated keys, which RoPE "
                         "re-rotation cannot shift", op);
    return KVS_OK;
}

kvs_status kvs_cache_rerotate(kvs_kv_cache *c, int layer, const kvs_rope_params *p, int64_t *n_shifted) {
    const char *op = "kvs_cache_rerotate";
    if (n_shifted) *n_shifted = 0;
    if (!LAYER_OK(c, layer) || !p) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL argument or bad layer %d", op, layer);
    if (c->p.mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_STATE, "%s: only append caches renumber their rows (this cache is positional)", op);
    KVS_TRY(kvs_cache_check_rerotate(&c->p));
    KVS_TRY(kvs_cache_unprune_keys(c, layer)); /* pruned keys are shifted at full width */
    int H = c->p.n_kv_heads;
    int64_t cap = c->p.capacity, nmax = kvs_cache_max_len(c, layer), shifted = 0;
    if (!c->scratch_delta) {
        c->scratch_delta = malloc((size_t)H * (size_t)cap * sizeof *c->scratch_delta);
        if (!c->scratch_delta) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    }
    int32_t *d = c->scratch_delta;
    for (int h = 0; h < H; h++) {
        int32_t *rpos = c->host_rpos + ((size_t)layer * H + h) * cap;
        int64_t len = c->host_len[(size_t)layer * H + h];
        for (int64_t r = 0; r < cap; r++) {
            d[h * cap + r] = r < len ? (int32_t)r - rpos[r] : 0;
            shifted += d[h * cap + r] != 0;
        }
    }
    if (shifted == 0) return KVS_OK; /* already 0..len-1 (or empty) */
    if (!c->delta) {
        int64_t ne[2] = {cap, H};
        KVS_TRY(kvs_tensor_create(&c->delta, c->dev, KVS_I32, 2, ne));
        kvs_tensor_set_name(c->delta, "cache.rerotate_delta");
    }
    KVS_TRY(kvs_tensor_upload(c->delta, d, 0, (size_t)H * (size_t)cap * 4));
    KVS_TRY(kvs_rope_shift(c->dev, c->k[layer], c->delta, nmax, p));
    for (int h = 0; h < H; h++) {
        int32_t *rpos = c->host_rpos + ((size_t)layer * H + h) * cap;
        int64_t len = c->host_len[(size_t)layer * H + h];
        for (int64_t r = 0; r < len; r++) rpos[r] = (int32_t)r;
    }
    if (n_shifted) *n_shifted = shifted;
    return KVS_OK;
}

/* Zeroes rows [r0, r1) of kv head h of tensor t [n_kv_heads][t->ne[1] rows][t->ne[0]] (upload of
 * zero bytes: never-written rows are zero); also the pruned segment [..][capacity][d_k'] and the
 * tail [..][tcap][head_dim]. */
static kvs_status zero_rows(kvs_tensor *t, int64_t h, int64_t r0, int64_t r1) {
    if (!t || r1 <= r0) return KVS_OK;
    const size_t rb = kvs_dtype_bytes(t->dtype, t->ne[0]), nb = (size_t)(r1 - r0) * rb;
    void *z = calloc(1, nb);
    if (!z) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_cache_truncate: out of host memory");
    kvs_status s = kvs_tensor_upload(t, z, (size_t)(h * t->ne[1] + r0) * rb, nb);
    free(z);
    return s;
}

kvs_status kvs_cache_truncate(kvs_kv_cache *c, int64_t n_rows) {
    const char *op = "kvs_cache_truncate";
    if (!c) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: NULL cache", op);
    if (c->p.mode != KVS_CACHE_APPEND)
        return kvs_error(KVS_ERR_STATE, "%s: only append caches are truncated (this cache is positional)", op);
    if (n_rows < 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: n_rows %lld < 0", op, (long long)n_rows);
    if (c->p.flags & (KVS_CACHE_KEEP_X | KVS_CACHE_KEEP_DELTA))
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: a cache keeping layer inputs or residual deltas (KVS_CACHE_KEEP_X, "
                         "KVS_CACHE_KEEP_DELTA) is not truncated", op);
    const int H = c->p.n_kv_heads;
    const int64_t cap = c->p.capacity;
    int64_t next = 0;
    for (int l = 0; l < c->p.n_layers; l++) {
        int any = 0;
        /* ThinK's pruned layout stays: the dropped rows leave the tail (its rows j >= n_rows - P[h])
         * and, below P[h], the pruned segment (P[h] becomes n_rows); a layer left with no pruned row
         * in any head returns to the full-width keys (its rows are all in the tail, so no full-width
         * copy of pruned keys is made) */
        struct kvs_pruned_seg *g = kp_active(c, l) ? &c->kp[l] : NULL;
        for (int h = 0; h < H; h++) {
            int64_t *len = &c->host_len[(size_t)l * H + h];
            int32_t *pos = c->host_pos + ((size_t)l * H + h) * cap, *rpos = c->host_rpos + ((size_t)l * H + h) * cap;
            if (*len > n_rows) {
                if (g) {
                    const int64_t P = g->rows[h], A = *len - P;
                    KVS_TRY(zero_rows(c->k[l], h, n_rows > P ? n_rows - P : 0, A)); /* the tail */
                    if (n_rows < P) {
                        KVS_TRY(zero_rows(g->k, h, n_rows, P));
                        g->rows[h] = n_rows;
                    }
                } else {
                    KVS_TRY(zero_rows(c->k[l], h, n_rows, *len));
                    KVS_TRY(zero_rows(kvs_cache_k_lo(c, l), h, n_rows, *len));
                }
                KVS_TRY(zero_rows(c->v[l], h, n_rows, *len));
                KVS_TRY(zero_rows(kvs_cache_v_lo(c, l), h, n_rows, *len));
                for (int64_t r = n_rows; r < *len; r++) pos[r] = rpos[r] = -1;
                *len = n_rows;
                any = 1;
            }
            for (int64_t r = 0; r < *len; r++)
                if (pos[r] + 1 > next) next = pos[r] + 1;
        }
        if (any) KVS_TRY(sync_layer(c, l));
        int64_t maxp = 0;
        for (int h = 0; g && h < H; h++) maxp = g->rows[h] > maxp ? g->rows[h] : maxp;
        if (g && maxp == 0) KVS_TRY(kvs_cache_unprune_keys(c, l));
    }
    c->next_pos = next;
    return KVS_OK;
}
