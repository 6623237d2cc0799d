/* Vulkan backend ops: argument packing (bindings + push constants) and dispatch shapes for the
 * shaders in shaders/vulkan. Every op only records commands (see vulkan.c for batching); inputs are
 * validated by core/ops.c. Each push-constant struct mirrors the `P` block of its shader. */
#include <math.h>
#include <string.h>

#include "vk_internal.h"

#define WG_ELEM 256u

static uint32_t unit_of(kvs_dtype d) {
    switch (d) {
    case KVS_F16: case KVS_BF16: return 2;
    case KVS_Q8_0: return 1;
    default: return 4;
    }
}

/* Workgroup size for a shader that wants `want` invocations (power of two), capped by the device. */
static uint32_t wg_size(kvs_device *dev, uint32_t want) {
    uint32_t maxwg = (uint32_t)dev->caps.max_workgroup_size;
    while (want > maxwg && want > 1) want >>= 1;
    return want;
}

static uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

#define BIND(t, wr, i, off) KVS_TRY(kvs_vk_bind(v, (t), (wr), unit_of((t)->dtype), &args[i], &(off), op))

/* ---- element-wise ------------------------------------------------------------------------- */

/* y = f(a, b) element-wise over n floats, shader `name` (add, swiglu). */
static kvs_status vk_binary(kvs_device *dev, const char *op, const char *name, const kvs_tensor *a,
                            const kvs_tensor *b, kvs_tensor *y, int64_t n) {
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    struct { uint32_t n, oa, ob, oy; } pc = {(uint32_t)n, 0, 0, 0};
    BIND(a, 0, 0, pc.oa);
    BIND(b, 0, 1, pc.ob);
    BIND(y, 1, 2, pc.oy);
    uint32_t wg = wg_size(dev, WG_ELEM);
    return kvs_vk_dispatch(v, name, &wg, 1, args, 3, &pc, sizeof pc, ceil_div((uint64_t)n, wg), op);
}

kvs_status kvs_vk_add(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *a = oa->a, *b = oa->b;
    kvs_tensor *y = oa->y;
    const int64_t n = oa->n;
    return vk_binary(dev, "kvs_add", "add", a, b, y, n);
}

kvs_status kvs_vk_swiglu(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *gate = oa->a, *up = oa->b;
    kvs_tensor *out = oa->y;
    const int64_t n = oa->n;
    return vk_binary(dev, "kvs_swiglu", "swiglu", gate, up, out, n);
}

kvs_status kvs_vk_copy(kvs_device *dev, const kvs_copy_args *oa) {
    const kvs_tensor *src = oa->src;
    kvs_tensor *dst = oa->dst;
    const int64_t n = oa->n;
    const char *op = "kvs_copy";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    if (src->dtype == dst->dtype) {
        const kvs_vk_alloc *sa = kvs_vk_alloc_of(src), *da = kvs_vk_alloc_of(dst);
        return kvs_vk_copy_buffer(v, sa->block->buf, sa->offset + src->offset, da->block->buf,
                                  da->offset + dst->offset, src->nbytes);
    }
    kvs_vk_arg args[2];
    struct { uint32_t n, os, od; } pc = {(uint32_t)n, 0, 0};
    BIND(src, 0, 0, pc.os);
    BIND(dst, 1, 1, pc.od);
    uint32_t spec[3] = {wg_size(dev, WG_ELEM), (uint32_t)src->dtype, (uint32_t)dst->dtype};
    uint64_t items = dst->dtype == KVS_F32 ? (uint64_t)n : ((uint64_t)pc.od + (uint64_t)n + 1) / 2 - pc.od / 2;
    return kvs_vk_dispatch(v, "copy", spec, 3, args, 2, &pc, sizeof pc, ceil_div(items, spec[0]), op);
}

static uint32_t row_wg(kvs_device *dev, int64_t n) {
    uint32_t w = n <= 32 ? 32u : n <= 64 ? 64u : n <= 128 ? 128u : 256u;
    return wg_size(dev, w);
}

kvs_status kvs_vk_rmsnorm(kvs_device *dev, const kvs_rmsnorm_args *oa) {
    const kvs_tensor *x = oa->x, *w = oa->w;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, dim = oa->dim;
    const float eps = oa->eps;
    const char *op = "kvs_rmsnorm";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    struct { uint32_t rows, dim, ox, ow, oy; float eps; } pc = {(uint32_t)rows, (uint32_t)dim, 0, 0, 0, eps};
    BIND(x, 0, 0, pc.ox);
    BIND(w, 0, 1, pc.ow);
    BIND(y, 1, 2, pc.oy);
    uint32_t wg = row_wg(dev, dim);
    return kvs_vk_dispatch(v, "rmsnorm", &wg, 1, args, 3, &pc, sizeof pc, (uint64_t)rows, op);
}

kvs_status kvs_vk_softmax(kvs_device *dev, const kvs_softmax_args *oa) {
    const kvs_tensor *x = oa->x;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, n = oa->n;
    const float scale = oa->scale;
    const char *op = "kvs_softmax";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[2];
    struct { uint32_t rows, n, ox, oy; float scale; } pc = {(uint32_t)rows, (uint32_t)n, 0, 0, scale};
    BIND(x, 0, 0, pc.ox);
    BIND(y, 1, 1, pc.oy);
    uint32_t wg = row_wg(dev, n);
    return kvs_vk_dispatch(v, "softmax", &wg, 1, args, 2, &pc, sizeof pc, (uint64_t)rows, op);
}

kvs_status kvs_vk_embedding(kvs_device *dev, const kvs_embedding_args *oa) {
    const kvs_tensor *table = oa->table;
    kvs_tensor *out = oa->out;
    const int32_t *ids = oa->ids;
    const int64_t n = oa->n, dim = oa->dim;
    const char *op = "kvs_embedding";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_alloc *st;
    VkDeviceSize so;
    void *host;
    KVS_TRY(kvs_vk_reserve(v, 0, (VkDeviceSize)n * 4));
    KVS_TRY(kvs_vk_stage(v, (VkDeviceSize)n * 4, &st, &so, &host));
    memcpy(host, ids, (size_t)n * 4);
    kvs_vk_arg args[3];
    struct { uint32_t n, dim, vocab, ot, oi, oo; } pc = {(uint32_t)n, (uint32_t)dim, (uint32_t)kvs_tensor_rows(table),
                                                          0, 0, 0};
    BIND(table, 0, 0, pc.ot);
    KVS_TRY(kvs_vk_bind_alloc(v, st, so, (VkDeviceSize)n * 4, 0, 4, &args[1], &pc.oi, op));
    BIND(out, 1, 2, pc.oo);
    uint32_t spec[2] = {wg_size(dev, WG_ELEM), (uint32_t)table->dtype};
    return kvs_vk_dispatch(v, "embedding", spec, 2, args, 3, &pc, sizeof pc, ceil_div((uint64_t)n * (uint64_t)dim, spec[0]),
                           op);
}

/* ---- matmul ------------------------------------------------------------------------------- */

kvs_status kvs_vk_matmul(kvs_device *dev, const kvs_matmul_args *a) {
    const char *op = "kvs_matmul";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    kvs_vk_arg args[3];
    struct { uint32_t m, k, n, ow, ox, oy, accumulate, groups_m; } pc = {
        (uint32_t)a->m, (uint32_t)a->k, (uint32_t)a->n, 0, 0, 0, (uint32_t)a->accumulate, 0};
    BIND(a->W, 0, 0, pc.ow);
    BIND(a->x, 0, 1, pc.ox);
    BIND(a->y, 1, 2, pc.oy);
    int tiled = a->n > 8 && dev->caps.max_workgroup_size >= 256;
    if (tiled) {
        uint32_t spec[2] = {256, (uint32_t)a->W->dtype};
        pc.groups_m = (uint32_t)ceil_div((uint64_t)a->m, 64);
        return kvs_vk_dispatch(v, "matmul", spec, 2, args, 3, &pc, sizeof pc,
                               (uint64_t)pc.groups_m * ceil_div((uint64_t)a->n, 64), op);
    }
    /* GEMV path, up to 8 rows of x per dispatch (NV = rows, a specialization constant) */
    uint32_t spec[3] = {wg_size(dev, a->k >= 128 ? 128 : 64), (uint32_t)a->W->dtype, 8};
    uint32_t ox = pc.ox, oy = pc.oy;
    for (int64_t i0 = 0; i0 < a->n; i0 += 8) {
        pc.n = (uint32_t)(a->n - i0 < 8 ? a->n - i0 : 8);
        pc.ox = ox + (uint32_t)(i0 * a->k);
        pc.oy = oy + (uint32_t)(i0 * a->m);
        spec[2] = pc.n;
        KVS_TRY(kvs_vk_dispatch(v, "matmul_vec", spec, 3, args, 3, &pc, sizeof pc, (uint64_t)a->m, op));
    }
    return KVS_OK;
}

/* ---- rope ---------------------------------------------------------------------------------- */

kvs_status kvs_vk_rope(kvs_device *dev, const kvs_rope_args *a) {
    const char *op = a->vec_stride_rows ? "kvs_rope_shift" : "kvs_rope";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    const int half = a->p.n_rot / 2;
    const int64_t stride = a->vec_stride_rows ? a->vec_stride_rows : a->n_vec;
    const int64_t nrow = a->vec_stride_rows ? a->n_rows : a->n_vec;
    const int64_t visited = (a->n_vec / stride) * nrow;
    /* freq_i / (2 pi) as a 64-bit fixed-point fraction, from the f64 frequency */
    VkDeviceSize sbytes = a->x->dtype == KVS_F32 ? 0 : (VkDeviceSize)visited * (VkDeviceSize)a->p.n_rot * 4;
    KVS_TRY(kvs_vk_reserve(v, sbytes, (VkDeviceSize)half * 8));
    kvs_vk_alloc *fa;
    VkDeviceSize fo;
    void *host;
    KVS_TRY(kvs_vk_stage(v, (VkDeviceSize)half * 8, &fa, &fo, &host));
    uint32_t *fq = host;
    for (int i = 0; i < half; i++) {
        double f = (double)a->p.freq_scale * pow((double)a->p.theta_base, -2.0 * i / (double)a->p.n_rot) /
                   (2.0 * 3.14159265358979323846);
        f -= floor(f);
        double t = f * 4294967296.0;
        double hi = floor(t);
        double lo = floor((t - hi) * 4294967296.0);
        fq[2 * i] = (uint32_t)hi;
        fq[2 * i + 1] = (uint32_t)(lo < 4294967296.0 ? lo : 4294967295.0);
    }
    kvs_vk_arg args[4];
    struct { uint32_t total, head_dim, n_rot, pos_div, stride, n_rows, ox, op, of, os, nx; } pc = {
        (uint32_t)(visited * half), (uint32_t)a->head_dim, (uint32_t)a->p.n_rot, (uint32_t)a->pos_div,
        (uint32_t)stride, (uint32_t)nrow, 0, 0, 0, 0, (uint32_t)kvs_tensor_nelements(a->x)};
    BIND(a->x, 1, 0, pc.ox);
    BIND(a->pos, 0, 1, pc.op);
    KVS_TRY(kvs_vk_bind_alloc(v, fa, fo, (VkDeviceSize)half * 8, 0, 4, &args[2], &pc.of, op));
    uint32_t wg = wg_size(dev, WG_ELEM);
    uint32_t spec[3] = {wg, 0, a->p.mode == KVS_ROPE_NEOX};
    if (a->x->dtype == KVS_F32) {
        args[3] = args[2];
        return kvs_vk_dispatch(v, "rope", spec, 3, args, 4, &pc, sizeof pc, ceil_div(pc.total, wg), op);
    }
    kvs_vk_alloc *sa;
    VkDeviceSize so;
    KVS_TRY(kvs_vk_scratch(v, sbytes, &sa, &so));
    KVS_TRY(kvs_vk_bind_alloc(v, sa, so, sbytes, 1, 4, &args[3], &pc.os, op));
    spec[1] = 1;
    args[0].write = 0;
    KVS_TRY(kvs_vk_dispatch(v, "rope", spec, 3, args, 4, &pc, sizeof pc, ceil_div(pc.total, wg), op));
    spec[1] = 2;
    args[0].write = 1;
    args[3].write = 0;
    pc.total = (uint32_t)(((uint64_t)pc.ox + pc.nx + 1) / 2 - pc.ox / 2);
    return kvs_vk_dispatch(v, "rope", spec, 3, args, 4, &pc, sizeof pc, ceil_div(pc.total, wg), op);
}

/* ---- attention ---------------------------------------------------------------------------- */

enum { AF_QPOS = 1, AF_KPOS = 2, AF_KVLEN = 4, AF_ROWLEN = 8, AF_MASK = 16, AF_ARGMAX = 32, AF_UNNORM = 64,
       AF_CAUSAL = 128, AF_ACCUM = 256, AF_ROWS = 512 };

static kvs_vk_arg dummy_arg(kvs_vk *v) {
    kvs_vk_arg a = {v->dummy->block->buf, v->dummy->offset, 256, 0};
    return a;
}

/* Optional tensor: binds t, or the dummy buffer (offset 0) when t is NULL. */
static kvs_status bind_opt(kvs_vk *v, const kvs_tensor *t, int write, kvs_vk_arg *arg, uint32_t *off, const char *op) {
    if (!t) {
        *arg = dummy_arg(v);
        *off = 0;
        return KVS_OK;
    }
    return kvs_vk_bind(v, t, write, unit_of(t->dtype), arg, off, op);
}

kvs_status kvs_vk_attention(kvs_device *dev, const kvs_attention_args *a) {
    const char *op = "kvs_attention";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    const kvs_attention_params *pp = &a->p;
    const uint32_t D = (uint32_t)a->head_dim, G = (uint32_t)(a->n_heads / a->n_kv_heads);
    /* rows per workgroup R and keys per tile TK: the largest that fit in shared memory */
    int64_t shm = dev->caps.shared_mem_bytes - 512;
    uint32_t R = 0, TK = 0, r_max = 1;
    /* no more rows per workgroup than there are query rows per kv head (decode: R = G) */
    while (r_max < 16 && (int64_t)r_max < a->n_q * (int64_t)G) r_max *= 2;
    for (uint32_t r = r_max; r >= 1 && !R; r /= 2)
        for (uint32_t tk = 32; tk >= 4; tk /= 2) {
            int64_t bytes = 4 * (2 * (int64_t)r * D + 2 * (int64_t)tk * D + (int64_t)r * tk + 7 * (int64_t)r);
            if (bytes <= shm) {
                R = r;
                TK = tk;
                break;
            }
        }
    if (!R)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: head_dim %u needs more shared memory than the device's %lld bytes", op,
                         D, (long long)dev->caps.shared_mem_bytes);
    int need_stats = pp->key_mass || pp->probs;
    const uint64_t nrows = (uint64_t)a->n_q * (uint64_t)a->n_heads;
    const uint64_t blocks = ceil_div((uint64_t)a->n_q * G, R), base = blocks * (uint64_t)a->n_kv_heads;
    /* split-K for few query rows (decode): aim at >= 128 workgroups, >= 4 key tiles per split */
    uint64_t nsplit = 1, split_len = (uint64_t)a->n_kv;
    if (base < 64) {
        nsplit = ceil_div(128, base);
        uint64_t maxs = ceil_div((uint64_t)a->n_kv, 4 * (uint64_t)TK);
        if (nsplit > maxs) nsplit = maxs;
        if (nsplit > 64) nsplit = 64;
        if (nsplit > 1) {
            split_len = ceil_div(ceil_div((uint64_t)a->n_kv, nsplit), TK) * TK;
            nsplit = ceil_div((uint64_t)a->n_kv, split_len);
        }
        if (nsplit <= 1) nsplit = 1, split_len = (uint64_t)a->n_kv;
    }
    VkDeviceSize mbytes = nrows * 4;
    VkDeviceSize pbytes = nsplit > 1 ? nsplit * nrows * 4 : 0, obytes = nsplit > 1 ? nsplit * nrows * D * 4 : 0;
    KVS_TRY(kvs_vk_reserve(v, 2 * mbytes + 3 * pbytes + obytes, 0));
    uint32_t flags = (pp->q_pos ? AF_QPOS : 0) | (pp->k_pos ? AF_KPOS : 0) | (pp->kv_len ? AF_KVLEN : 0) |
                     (pp->row_len ? AF_ROWLEN : 0) | (pp->mask ? AF_MASK : 0) | (pp->argmax ? AF_ARGMAX : 0) |
                     (pp->unnormalised ? AF_UNNORM : 0) | (pp->causal ? AF_CAUSAL : 0);
    struct {
        uint32_t oq, ok, ov, oo, oqp, okp, okl, orl, om, oam, orm, ors;
        uint32_t n_q, n_heads, G, cap, n_kv, flags, n_kvh;
        float scale;
        uint32_t nsplit, split_len;
    } pc;
    memset(&pc, 0, sizeof pc);
    kvs_vk_arg args[12];
    BIND(a->q, 0, 0, pc.oq);
    BIND(a->k, 0, 1, pc.ok);
    BIND(a->v, 0, 2, pc.ov);
    BIND(a->out, 1, 3, pc.oo);
    KVS_TRY(bind_opt(v, pp->q_pos, 0, &args[4], &pc.oqp, op));
    KVS_TRY(bind_opt(v, pp->k_pos, 0, &args[5], &pc.okp, op));
    KVS_TRY(bind_opt(v, pp->kv_len, 0, &args[6], &pc.okl, op));
    KVS_TRY(bind_opt(v, pp->row_len, 0, &args[7], &pc.orl, op));
    KVS_TRY(bind_opt(v, pp->mask, 0, &args[8], &pc.om, op));
    KVS_TRY(bind_opt(v, pp->argmax, 1, &args[9], &pc.oam, op));
    /* row_max / row_sum: the caller's tensors, else scratch (always written; the stats pass reads) */
    const kvs_tensor *rm_t[2] = {pp->row_max, pp->row_sum};
    uint32_t *rm_off[2] = {&pc.orm, &pc.ors};
    for (int i = 0; i < 2; i++) {
        if (rm_t[i]) {
            KVS_TRY(kvs_vk_bind(v, rm_t[i], 1, 4, &args[10 + i], rm_off[i], op));
        } else {
            kvs_vk_alloc *sa;
            VkDeviceSize so;
            KVS_TRY(kvs_vk_scratch(v, mbytes, &sa, &so));
            KVS_TRY(kvs_vk_bind_alloc(v, sa, so, mbytes, 1, 4, &args[10 + i], rm_off[i], op));
        }
    }
    pc.n_q = (uint32_t)a->n_q;
    pc.n_heads = (uint32_t)a->n_heads;
    pc.G = G;
    pc.cap = (uint32_t)a->capacity;
    pc.n_kv = (uint32_t)a->n_kv;
    pc.flags = flags;
    pc.n_kvh = (uint32_t)a->n_kv_heads;
    pc.scale = pp->scale;
    pc.nsplit = (uint32_t)nsplit;
    pc.split_len = (uint32_t)split_len;
    uint32_t kvdt = a->k->dtype == KVS_F16 ? 1u : 0u;
    uint32_t spec[5] = {wg_size(dev, 128), kvdt, D, R, TK};
    if (nsplit == 1) {
        KVS_TRY(kvs_vk_dispatch(v, "attn", spec, 5, args, 12, &pc, sizeof pc, base, op));
    } else {
        /* partials: O [nsplit][n_q*n_heads][D], m, l, argmax [nsplit][n_q*n_heads] */
        kvs_vk_arg fin[4] = {args[3], args[9], args[10], args[11]};
        uint32_t fin_off[4] = {pc.oo, pc.oam, pc.orm, pc.ors};
        kvs_vk_arg part[4];
        uint32_t poff[4];
        VkDeviceSize psz[4] = {obytes, pbytes, pbytes, pbytes};
        for (int i = 0; i < 4; i++) {
            kvs_vk_alloc *sa;
            VkDeviceSize so;
            KVS_TRY(kvs_vk_scratch(v, psz[i], &sa, &so));
            KVS_TRY(kvs_vk_bind_alloc(v, sa, so, psz[i], 1, 4, &part[i], &poff[i], op));
        }
        args[3] = part[0], pc.oo = poff[0];
        args[9] = part[3], pc.oam = poff[3];
        args[10] = part[1], pc.orm = poff[1];
        args[11] = part[2], pc.ors = poff[2];
        pc.flags = flags | AF_ARGMAX | AF_UNNORM;
        KVS_TRY(kvs_vk_dispatch(v, "attn", spec, 5, args, 12, &pc, sizeof pc, base * nsplit, op));
        struct { uint32_t rows, D, nsplit, oop, omp, olp, oap, oo, oam, orm, ors, flags; } cpc = {
            (uint32_t)nrows, D, (uint32_t)nsplit, poff[0], poff[1], poff[2], poff[3], fin_off[0], fin_off[1], fin_off[2],
            fin_off[3], flags};
        kvs_vk_arg cargs[8] = {part[0], part[1], part[2], part[3], fin[0], fin[1], fin[2], fin[3]};
        for (int i = 0; i < 4; i++) cargs[i].write = 0;
        uint32_t cwg = wg_size(dev, WG_ELEM);
        KVS_TRY(kvs_vk_dispatch(v, "attn_combine", &cwg, 1, cargs, 8, &cpc, sizeof cpc, ceil_div(nrows * D, cwg), op));
        /* the stats pass reads the final row_max / row_sum */
        args[10] = fin[2], pc.orm = fin_off[2];
        args[11] = fin[3], pc.ors = fin_off[3];
    }
    if (!need_stats) return KVS_OK;

    struct {
        uint32_t oq, ok, oqp, okp, okl, orl, om, orows, oout, orm, ors;
        uint32_t n_q, n_heads, G, cap, n_kv, flags, n_kvh, n_rows;
        float scale;
    } sc;
    memset(&sc, 0, sizeof sc);
    kvs_vk_arg sa[11];
    sa[0] = args[0], sc.oq = pc.oq;
    sa[1] = args[1], sc.ok = pc.ok;
    sa[2] = args[4], sc.oqp = pc.oqp;
    sa[3] = args[5], sc.okp = pc.okp;
    sa[4] = args[6], sc.okl = pc.okl;
    sa[5] = args[7], sc.orl = pc.orl;
    sa[6] = args[8], sc.om = pc.om;
    sa[9] = args[10], sc.orm = pc.orm;
    sa[10] = args[11], sc.ors = pc.ors;
    sa[9].write = sa[10].write = 0;
    sc.n_q = pc.n_q, sc.n_heads = pc.n_heads, sc.G = G, sc.cap = pc.cap, sc.n_kv = pc.n_kv, sc.n_kvh = pc.n_kvh;
    sc.scale = pc.scale;
    uint32_t sflags = flags & (AF_QPOS | AF_KPOS | AF_KVLEN | AF_ROWLEN | AF_MASK | AF_CAUSAL);
    uint32_t sspec[4] = {wg_size(dev, 64), kvdt, D, 0};
    if (pp->key_mass) {
        KVS_TRY(bind_opt(v, pp->stat_rows, 0, &sa[7], &sc.orows, op));
        KVS_TRY(kvs_vk_bind(v, pp->key_mass, 1, 4, &sa[8], &sc.oout, op));
        sc.flags = sflags | (pp->stat_rows ? AF_ROWS : 0) | (pp->key_mass_accumulate ? AF_ACCUM : 0);
        sc.n_rows = (uint32_t)a->n_stat_rows;
        sspec[3] = 0;
        KVS_TRY(kvs_vk_dispatch(v, "attn_stats", sspec, 4, sa, 11, &sc, sizeof sc,
                                ceil_div((uint64_t)a->n_kv_heads * (uint64_t)a->n_kv, sspec[0]), op));
    }
    if (pp->probs) {
        KVS_TRY(kvs_vk_bind(v, pp->probe_rows, 0, 4, &sa[7], &sc.orows, op));
        KVS_TRY(kvs_vk_bind(v, pp->probs, 1, 4, &sa[8], &sc.oout, op));
        sc.flags = sflags | AF_ROWS;
        sc.n_rows = (uint32_t)a->n_probe;
        sspec[3] = 1;
        KVS_TRY(kvs_vk_dispatch(v, "attn_stats", sspec, 4, sa, 11, &sc, sizeof sc,
                                ceil_div((uint64_t)a->n_probe * (uint64_t)a->n_heads * (uint64_t)a->capacity, sspec[0]),
                                op));
    }
    return KVS_OK;
}

/* ---- dwt / idwt ----------------------------------------------------------------------------- */

typedef struct {
    uint32_t rows, L, half, o0, s0, o1, s1, o2, s2, T;
    float lo[8], hi[8];
} dwt_pc;

static void dwt_setup(const kvs_dwt_args *a, dwt_pc *pc, int64_t *len, int64_t *doff) {
    double lo[8];
    memset(pc, 0, sizeof *pc);
    int T = kvs_wavelet_filter(a->w, lo);
    pc->T = (uint32_t)T;
    for (int t = 0; t < T; t++) {
        pc->lo[t] = (float)lo[t];
        pc->hi[t] = (float)((t & 1) ? -lo[T - 1 - t] : lo[T - 1 - t]);
    }
    pc->rows = (uint32_t)a->rows;
    len[0] = a->n;
    for (int l = 1; l <= a->levels; l++) len[l] = (len[l - 1] + 1) / 2;
    int64_t off = len[a->levels];
    for (int l = a->levels; l >= 1; l--) {
        doff[l] = off;
        off += len[l];
    }
}

/* Per level one dispatch over all rows; intermediate approximations ping-pong in scratch
 * [rows][len_1] x 2. */
static kvs_status dwt_run(kvs_device *dev, const kvs_dwt_args *a, int inverse) {
    const char *op = inverse ? "kvs_idwt" : "kvs_dwt";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    dwt_pc pc;
    int64_t len[KVS_DWT_MAX_LEVELS + 1] = {0}, doff[KVS_DWT_MAX_LEVELS + 1] = {0};
    dwt_setup(a, &pc, len, doff);
    const int J = a->levels;
    VkDeviceSize sbytes = (VkDeviceSize)a->rows * (VkDeviceSize)len[1] * 4;
    if (J > 1) KVS_TRY(kvs_vk_reserve(v, 2 * sbytes, 0));
    kvs_vk_arg src, dst, scr[2];
    uint32_t osrc, odst, oscr[2] = {0, 0};
    KVS_TRY(kvs_vk_bind(v, a->src, 0, 4, &src, &osrc, op));
    KVS_TRY(kvs_vk_bind(v, a->dst, 1, 4, &dst, &odst, op));
    for (int i = 0; i < 2 && J > 1; i++) {
        kvs_vk_alloc *sa;
        VkDeviceSize so;
        KVS_TRY(kvs_vk_scratch(v, sbytes, &sa, &so));
        KVS_TRY(kvs_vk_bind_alloc(v, sa, so, sbytes, 1, 4, &scr[i], &oscr[i], op));
    }
    const uint32_t nc = (uint32_t)a->ncoef, n = (uint32_t)a->n;
    uint32_t wg = wg_size(dev, WG_ELEM);
    kvs_vk_arg args[3];
    if (!inverse) {
        for (int l = 1; l <= J; l++) {
            pc.L = (uint32_t)len[l - 1];
            pc.half = (uint32_t)len[l];
            /* input: x, or the previous level's approximation */
            if (l == 1) args[0] = src, pc.o0 = osrc, pc.s0 = n;
            else args[0] = scr[(l - 2) & 1], pc.o0 = oscr[(l - 2) & 1], pc.s0 = (uint32_t)len[1];
            args[0].write = 0;
            if (l == J) args[1] = dst, pc.o1 = odst, pc.s1 = nc;
            else args[1] = scr[(l - 1) & 1], pc.o1 = oscr[(l - 1) & 1], pc.s1 = (uint32_t)len[1];
            args[1].write = 1;
            args[2] = dst, pc.o2 = odst + (uint32_t)doff[l], pc.s2 = nc;
            KVS_TRY(kvs_vk_dispatch(v, "dwt", &wg, 1, args, 3, &pc, sizeof pc,
                                    ceil_div((uint64_t)pc.rows * pc.half, wg), op));
        }
        return KVS_OK;
    }
    for (int l = J; l >= 1; l--) {
        pc.half = (uint32_t)len[l];
        pc.L = (uint32_t)len[l - 1];
        if (l == J) args[0] = src, pc.o0 = osrc, pc.s0 = nc;
        else args[0] = scr[(l) & 1], pc.o0 = oscr[(l) & 1], pc.s0 = (uint32_t)len[1];
        args[0].write = 0;
        args[1] = src, pc.o1 = osrc + (uint32_t)doff[l], pc.s1 = nc;
        if (l == 1) args[2] = dst, pc.o2 = odst, pc.s2 = n;
        else args[2] = scr[(l - 1) & 1], pc.o2 = oscr[(l - 1) & 1], pc.s2 = (uint32_t)len[1];
        args[2].write = 1;
        KVS_TRY(kvs_vk_dispatch(v, "idwt", &wg, 1, args, 3, &pc, sizeof pc, ceil_div((uint64_t)pc.rows * pc.L, wg), op));
    }
    return KVS_OK;
}

kvs_status kvs_vk_dwt(kvs_device *dev, const kvs_dwt_args *a) { return dwt_run(dev, a, 0); }
kvs_status kvs_vk_idwt(kvs_device *dev, const kvs_dwt_args *a) { return dwt_run(dev, a, 1); }

/* ---- gather / scatter / compact ------------------------------------------------------------- */

typedef struct { uint32_t G, n, Ns, Nd, RU, os, oi, od, ow, shared_, total; } rows_pc;

/* A byte range of device memory (a tensor or scratch). */
typedef struct { const kvs_vk_alloc *a; VkDeviceSize off, size; } vk_range;

static vk_range range_of(const kvs_tensor *t) {
    const kvs_vk_alloc *a = kvs_vk_alloc_of(t);
    vk_range r = {a, a->offset + t->offset, t->nbytes};
    return r;
}

/* gather (mode 0) or the copy step of scatter (mode 1) between ranges; win: scatter winners. */
static kvs_status rows_dispatch(kvs_device *dev, const kvs_rows_args *a, int mode, vk_range src, vk_range dst,
                                const vk_range *win, int64_t Nd, const char *op) {
    kvs_vk *v = kvs_vk_of(dev);
    int u16 = (a->row_bytes % 4) || (src.off % 4) || (dst.off % 4);
    uint32_t unit = u16 ? 2 : 4;
    rows_pc pc;
    memset(&pc, 0, sizeof pc);
    kvs_vk_arg args[4];
    KVS_TRY(kvs_vk_bind_alloc(v, src.a, src.off, src.size, 0, unit, &args[0], &pc.os, op));
    KVS_TRY(kvs_vk_bind(v, a->idx, 0, 4, &args[1], &pc.oi, op));
    KVS_TRY(kvs_vk_bind_alloc(v, dst.a, dst.off, dst.size, 1, unit, &args[2], &pc.od, op));
    if (win) KVS_TRY(kvs_vk_bind_alloc(v, win->a, win->off, win->size, 0, 4, &args[3], &pc.ow, op));
    else args[3] = dummy_arg(v);
    pc.G = (uint32_t)a->groups;
    pc.n = (uint32_t)a->n;
    pc.Ns = (uint32_t)a->src_rows;
    pc.Nd = (uint32_t)Nd;
    pc.RU = (uint32_t)(a->row_bytes / unit);
    pc.shared_ = (uint32_t)a->idx_shared;
    uint64_t total = u16 ? ((uint64_t)pc.od + (uint64_t)pc.G * pc.Nd * pc.RU + 1) / 2 - pc.od / 2
                         : (uint64_t)pc.G * pc.n * pc.RU;
    if (total > UINT32_MAX) return kvs_error(KVS_ERR_UNSUPPORTED, "%s: too many elements for one dispatch", op);
    pc.total = (uint32_t)total;
    uint32_t spec[4] = {wg_size(dev, WG_ELEM), (uint32_t)mode, (uint32_t)u16, (uint32_t)a->src_token_major};
    return kvs_vk_dispatch(v, "rows_copy", spec, 4, args, 4, &pc, sizeof pc, ceil_div(total, spec[0]), op);
}

kvs_status kvs_vk_gather(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_gather";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    return rows_dispatch(dev, a, 0, range_of(a->src), range_of(a->dst), NULL, a->dst_rows, op);
}

kvs_status kvs_vk_scatter(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_scatter";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    VkDeviceSize wbytes = (VkDeviceSize)a->groups * (VkDeviceSize)a->dst_rows * 4;
    KVS_TRY(kvs_vk_reserve(v, wbytes, 0));
    kvs_vk_alloc *wa;
    VkDeviceSize wo;
    KVS_TRY(kvs_vk_scratch(v, wbytes, &wa, &wo));
    KVS_TRY(kvs_vk_fill(v, wa->block->buf, wo, wbytes, 0xffffffffu));
    struct { uint32_t G, n, Nd, oi, ow, shared_; } pc = {(uint32_t)a->groups, (uint32_t)a->n, (uint32_t)a->dst_rows, 0, 0,
                                                          (uint32_t)a->idx_shared};
    kvs_vk_arg args[2];
    KVS_TRY(kvs_vk_bind(v, a->idx, 0, 4, &args[0], &pc.oi, op));
    KVS_TRY(kvs_vk_bind_alloc(v, wa, wo, wbytes, 1, 4, &args[1], &pc.ow, op));
    uint32_t wg = wg_size(dev, WG_ELEM);
    KVS_TRY(kvs_vk_dispatch(v, "scatter_win", &wg, 1, args, 2, &pc, sizeof pc,
                            ceil_div((uint64_t)a->groups * (uint64_t)a->n, wg), op));
    vk_range win = {wa, wo, wbytes};
    return rows_dispatch(dev, a, 1, range_of(a->src), range_of(a->dst), &win, a->dst_rows, op);
}

kvs_status kvs_vk_compact(kvs_device *dev, const kvs_rows_args *a) {
    const char *op = "kvs_compact";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    VkDeviceSize rb = (VkDeviceSize)a->row_bytes, per = (VkDeviceSize)a->n * rb;
    VkDeviceSize bytes = (VkDeviceSize)a->groups * per;
    KVS_TRY(kvs_vk_reserve(v, bytes, 0));
    kvs_vk_alloc *sa;
    VkDeviceSize so;
    KVS_TRY(kvs_vk_scratch(v, bytes, &sa, &so));
    vk_range t = range_of(a->dst), s = {sa, so, bytes};
    /* gather the kept rows into scratch [G][n][row], then copy each group back to rows [0, n) */
    KVS_TRY(rows_dispatch(dev, a, 0, t, s, NULL, a->n, op));
    for (int64_t g = 0; g < a->groups; g++)
        KVS_TRY(kvs_vk_copy_buffer(v, sa->block->buf, so + (VkDeviceSize)g * per, t.a->block->buf,
                                   t.off + (VkDeviceSize)g * (VkDeviceSize)a->dst_rows * rb, per));
    return KVS_OK;
}

/* ---- top-k ---------------------------------------------------------------------------------- */

/* Radix select (4 passes of 8-bit digits over an order-preserving key: per-chunk histograms, then
 * a per-row digit choice) finds the k-th key T; entries with key > T and the lowest-index entries
 * with key == T are collected in index order; a bitonic sort puts them in output order. All
 * counts are integers, so the result is deterministic. Scratch: see shaders/vulkan/topk.glsl. */
static kvs_status topk_run(kvs_device *dev, const kvs_topk_args *a, const char *op) {
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    if (dev->caps.max_workgroup_size < 256)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: needs 256-invocation workgroups (device max %d)", op,
                         dev->caps.max_workgroup_size);
    const uint64_t rows = (uint64_t)a->rows, n = (uint64_t)a->n, k = (uint64_t)a->k;
    uint64_t P = 1;
    while (P < k) P <<= 1;
    uint64_t chunk = 4096, nchunks = ceil_div(n, chunk);
    while (rows * nchunks * 1024 > ((uint64_t)64 << 20) && chunk < ((uint64_t)1 << 30)) {
        chunk <<= 1;
        nchunks = ceil_div(n, chunk);
    }
    VkDeviceSize b_st = rows * 16, b_h = rows * nchunks * 1024, b_c = rows * nchunks * 8, b_s = rows * P * 4;
    if (rows * P > UINT32_MAX || rows * nchunks * 256 > UINT32_MAX)
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %llu rows x k=%llu too large", op, (unsigned long long)rows,
                         (unsigned long long)k);
    KVS_TRY(kvs_vk_reserve(v, b_st + b_h + b_c + 2 * b_s, 0));
    kvs_vk_alloc *al[5];
    VkDeviceSize off[5], sz[5] = {b_st, b_h, b_c, b_s, b_s};
    kvs_vk_arg sarg[5];
    uint32_t soff[5];
    for (int i = 0; i < 5; i++) {
        KVS_TRY(kvs_vk_scratch(v, sz[i], &al[i], &off[i]));
        KVS_TRY(kvs_vk_bind_alloc(v, al[i], off[i], sz[i], 1, 4, &sarg[i], &soff[i], op));
    }
    KVS_TRY(kvs_vk_fill(v, al[3]->block->buf, off[3], b_s, 0u));
    KVS_TRY(kvs_vk_fill(v, al[4]->block->buf, off[4], b_s, 0x7fffffffu));
    kvs_vk_arg xa, rla;
    uint32_t ox = 0, orl = 0;
    KVS_TRY(kvs_vk_bind(v, a->x, 0, 4, &xa, &ox, op));
    KVS_TRY(bind_opt(v, a->p.row_len, 0, &rla, &orl, op));
    const uint32_t has_rl = a->p.row_len != NULL;
    const uint32_t wg = 256;

    /* state init */
    struct { uint32_t rows, nchunks, shift, ost, oh, n, k, orl, has_rl; } sp = {
        (uint32_t)rows, (uint32_t)nchunks, 0, soff[0], soff[1], (uint32_t)n, (uint32_t)k, orl, has_rl};
    kvs_vk_arg args[6];
    uint32_t spec[2] = {wg, 2};
    args[0] = sarg[0], args[1] = sarg[1], args[2] = rla;
    KVS_TRY(kvs_vk_dispatch(v, "topk_select", spec, 2, args, 3, &sp, sizeof sp, rows, op));
    /* 4 radix passes */
    struct { uint32_t rows, n, ox, orl, has_rl, chunk, nchunks, shift, ost, oh; } hp = {
        (uint32_t)rows, (uint32_t)n, ox, orl, has_rl, (uint32_t)chunk, (uint32_t)nchunks, 0, soff[0], soff[1]};
    for (int pass = 0; pass < 4; pass++) {
        hp.shift = sp.shift = (uint32_t)(24 - 8 * pass);
        args[0] = xa, args[1] = rla, args[2] = sarg[0], args[3] = sarg[1];
        args[2].write = 0;
        KVS_TRY(kvs_vk_dispatch(v, "topk_hist", &wg, 1, args, 4, &hp, sizeof hp, rows * nchunks, op));
        spec[1] = 0;
        args[0] = sarg[0], args[1] = sarg[1], args[2] = rla;
        KVS_TRY(kvs_vk_dispatch(v, "topk_select", spec, 2, args, 3, &sp, sizeof sp, rows, op));
    }
    /* count, scan, collect */
    struct { uint32_t rows, n, ox, orl, has_rl, chunk, nchunks, ost, oc, osk, osi, P_; } cp = {
        (uint32_t)rows, (uint32_t)n, ox, orl, has_rl, (uint32_t)chunk, (uint32_t)nchunks, soff[0], soff[2], soff[3],
        soff[4], (uint32_t)P};
    args[0] = xa, args[1] = rla, args[2] = sarg[0], args[3] = sarg[2], args[4] = sarg[3], args[5] = sarg[4];
    args[2].write = 0;
    args[4].write = args[5].write = 0;
    spec[1] = 0;
    KVS_TRY(kvs_vk_dispatch(v, "topk_collect", spec, 2, args, 6, &cp, sizeof cp, rows * nchunks, op));
    sp.oh = soff[2];
    spec[1] = 1;
    kvs_vk_arg sa3[3] = {sarg[0], sarg[2], rla};
    sa3[0].write = 0;
    KVS_TRY(kvs_vk_dispatch(v, "topk_select", spec, 2, sa3, 3, &sp, sizeof sp, rows, op));
    args[4].write = args[5].write = 1;
    args[3].write = 0;
    KVS_TRY(kvs_vk_dispatch(v, "topk_collect", spec, 2, args, 6, &cp, sizeof cp, rows * nchunks, op));
    /* bitonic sort of [rows][P] */
    if (P > 1) {
        const uint64_t B = P < 2 * wg ? P : 2 * wg;
        struct { uint32_t rows, P_, B, s, j, osk, osi, by_index; } bp = {
            (uint32_t)rows, (uint32_t)P, (uint32_t)B, 0, 0, soff[3], soff[4], (uint32_t)(a->p.order_by_index != 0)};
        kvs_vk_arg ba[2] = {sarg[3], sarg[4]};
        spec[1] = 0;
        KVS_TRY(kvs_vk_dispatch(v, "topk_sort", spec, 2, ba, 2, &bp, sizeof bp, rows * (P / B), op));
        for (uint64_t s = 2 * B; s <= P; s <<= 1) {
            bp.s = (uint32_t)s;
            for (uint64_t j = s / 2; j >= B; j >>= 1) {
                bp.j = (uint32_t)j;
                spec[1] = 2;
                KVS_TRY(kvs_vk_dispatch(v, "topk_sort", spec, 2, ba, 2, &bp, sizeof bp, ceil_div(rows * P / 2, wg), op));
            }
            spec[1] = 1;
            KVS_TRY(kvs_vk_dispatch(v, "topk_sort", spec, 2, ba, 2, &bp, sizeof bp, rows * (P / B), op));
        }
    }
    /* outputs */
    struct { uint32_t rows, n, k, P_, ox, osi, oi, ov, has_val; } wp = {
        (uint32_t)rows, (uint32_t)n, (uint32_t)k, (uint32_t)P, ox, soff[4], 0, 0, a->val != NULL};
    args[0] = xa;
    args[1] = sarg[4];
    args[1].write = 0;
    KVS_TRY(kvs_vk_bind(v, a->idx, 1, 4, &args[2], &wp.oi, op));
    KVS_TRY(bind_opt(v, a->val, 1, &args[3], &wp.ov, op));
    return kvs_vk_dispatch(v, "topk_write", &wg, 1, args, 4, &wp, sizeof wp, ceil_div(rows * k, wg), op);
}

kvs_status kvs_vk_topk(kvs_device *dev, const kvs_topk_args *a) { return topk_run(dev, a, "kvs_topk"); }
kvs_status kvs_vk_topk_global(kvs_device *dev, const kvs_topk_args *a) { return topk_run(dev, a, "kvs_topk_global"); }
