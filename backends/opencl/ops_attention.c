/* OpenCL backend: attention with statistics (shaders/opencl/attention.cl).
 * Pass 1 (attn_main): one work-group per (BQ query rows, kv head) with the G query heads of that
 * kv head's group as BQ*G work-items, so a K/V tile in local memory serves the whole group (GQA
 * without expanding K/V); online softmax per (row, head); out, row_max, row_sum, argmax and the
 * (m, l) pairs the statistics passes need. Pass 2 (attn_keymass, attn_probs) recomputes the
 * logits of the requested rows against the final (m, l): deterministic sums, no atomics. With
 * lse_extra, attn_lse runs between them: out rescaled to the external normaliser, (m, l) updated.
 * Few query rows (decoding, n_q <= 16), head_dim > 64 or a (query tile, kv head) grid too small
 * for the device take attn_dec instead: a work-group of 128-256 items per (RB rows, kv head, key
 * split) whose items share the keys (score lanes) and the head dimension (PV lanes),
 * flash-decoding style, merged across splits by attn_combine (GPUs only; CPU devices keep
 * attn_main).
 * KVS_OCL_ATTN=main|dec forces a path (tests use it to run every case through both);
 * KVS_OCL_ATTN_SPLITS=n forces n key splits, KVS_OCL_ATTN_WG=n caps attn_dec's work-group;
 * KVS_OCL_DEBUG=1 prints each call's plan to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

enum {
    F_QPOS = 1, F_KPOS = 2, F_KVLEN = 4, F_ROWLEN = 8, F_MASK = 16, F_ROWMAX = 32, F_ROWSUM = 64,
    F_ARGMAX = 128, F_ML = 256, F_CAUSAL = 512, F_UNNORM = 1024, F_STATROWS = 2048, F_ACCUM = 4096
};

static cl_mem mem_or(kvs_device *dev, const kvs_tensor *t) {
    kvs_ocl *o = dev->impl;
    return t ? kvs_ocl_mem(t) : o->zero;
}
static int64_t off_or(const kvs_tensor *t) { return t ? (int64_t)(t->offset / 4) : 0; }

/* KVS_OCL_DEBUG=1: each call prints its launch plan to stderr (path, work-group, tiles, splits,
 * the compiled kernel's limits), for checking on a GPU which kernel ran. */
static int debug_on(void) {
    const char *e = getenv("KVS_OCL_DEBUG");
    return e && e[0] && strcmp(e, "0") != 0;
}

/* The forced attention variant's name, "auto" when none. */
static const char *variant_name(const kvs_device *dev) {
    const kvs_variant *v = dev->forced[KVS_OP_attention];
    return v ? v->name : "auto";
}

/* attn_dec launch plan (see attention.cl): work-group nt (<= nt_cap), rows per group rb, key tile
 * bk, lane width vw, separate K/V tiles sepv. Returns 0 when the shape does not fit (the caller
 * takes attn_main). */
typedef struct dec_plan { int nt, rb, bk, vw, sepv; } dec_plan;

static int dec_plan_make(kvs_device *dev, int64_t n_q, int G, int hd, int dv, size_t nt_cap, dec_plan *pl) {
    kvs_ocl *o = dev->impl;
    int vw = hd % 4 == 0 && dv % 4 == 0 ? 4 : 1;
    int lanes = dv / vw; /* PV lanes over d_v */
    /* 128 items for decoding (G * head_dim / vw accumulators spread one or two per item), 256
     * when a group holds many query vectors; at most nt_cap (device or compiled-kernel limit) */
    size_t nt = n_q * G * lanes >= 1024 ? 256 : 128;
    if (nt > nt_cap) nt = kvs_ocl_pow2_floor(nt_cap);
    if (nt < 32 || (size_t)lanes > nt || (size_t)G > nt) return 0; /* one item per query vector */
    int pstep = (int)nt / lanes;
    const int max_acc = vw == 4 ? 8 : 16; /* private accumulators per item (floats: 32 / 16) */
    if ((G + pstep - 1) / pstep > max_acc) return 0;
    /* about 32 query vectors per group, fewer when that needs too many accumulators */
    int rb = 32 / G > 0 ? 32 / G : 1;
    if (rb > n_q) rb = (int)n_q;
    while (rb > 1 && (rb * G + pstep - 1) / pstep > max_acc) rb--;
    /* key tile: enough keys for one score per item, 16..64, within the local memory (a device
     * reporting more than 48 KiB is held to 48 KiB so that groups stay small enough to co-reside) */
    size_t budget = o->local_mem < 49152 ? o->local_mem : 49152;
    budget = budget > 1024 ? budget - 512 : budget;
    int bk = 32;
    while (bk < 64 && (size_t)(rb * G * bk) < nt) bk *= 2;
    if ((size_t)bk > nt) bk = (int)nt;
    /* separate K and V tiles (one memory round trip per tile) down to 32-key tiles, else one
     * shared tile buffer down to 8 keys, else fewer rows */
    int sepv = 1;
    for (;;) {
        int pb = rb * G, ks = (hd > dv ? hd : dv) + (vw == 4 ? 4 : 1);
        size_t bytes = 4 * ((size_t)pb * hd + (size_t)(1 + sepv) * bk * ks + (size_t)pb * (bk + 1) + 6 * (size_t)pb);
        if (bytes <= budget) break;
        if (sepv && bk > 32) bk /= 2;
        else if (sepv) sepv = 0;
        else if (bk > 8) bk /= 2;
        else if (rb > 1) rb--;
        else return 0;
    }
    pl->sepv = sepv;
    pl->nt = (int)nt;
    pl->rb = rb;
    pl->bk = bk;
    pl->vw = vw;
    return 1;
}

/* The launch choice made before any kernel is compiled: attn_main's tiling (bq rows, bk keys,
 * ntiles tiles), attn_dec's plan, and whether attn_dec is taken. */
typedef struct attn_choice {
    int bq;
    size_t bk, ntiles, cus;
    dec_plan pl;
    int use_dec;
} attn_choice;

static void attn_choose(kvs_device *dev, const kvs_attention_args *a, attn_choice *ch) {
    kvs_ocl *o = dev->impl;
    int G = (int)(a->n_heads / a->n_kv_heads);
    int hd = (int)a->head_dim, dv = (int)a->head_dim_v;
    ch->cus = (size_t)(dev->caps.compute_units > 0 ? dev->caps.compute_units : 16);
    /* attn_main: work-group of BQ rows x G heads, about 64 items. */
    int target = 64;
    int bq = target / G > 0 ? target / G : 1;
    if (a->n_q < bq) bq = (int)a->n_q;
    if (bq < 1) bq = 1;
    while ((size_t)(bq * G) > o->max_wg && bq > 1) bq--;
    ch->bq = bq;
    /* Key tile: K and V tiles of BK x (d_k + d_v) floats in at most half the local memory (<= 32 KiB). */
    size_t budget = o->local_mem / 2;
    if (budget > 32768) budget = 32768;
    const size_t row_b = 4 * (size_t)(hd + dv);
    size_t bk = kvs_ocl_pow2_floor(budget / row_b ? budget / row_b : 1);
    if (bk > 32) bk = 32;
    if (bk < 1) bk = 1;
    ch->bk = bk;
    ch->ntiles = (size_t)((a->n_q + bq - 1) / bq);

    /* Path: attn_dec for decoding-sized query counts, for head_dim > 64 (attn_main keeps 2 *
     * head_dim + BK floats per item: 288 at head_dim 128, past a GPU's register file per thread,
     * so it spills), for causal attention (measured on an NVIDIA H200, n 2048, d 64: attn_dec
     * 0.70 ms, attn_main 1.05 ms) and when attn_main's grid has fewer work-groups than compute
     * units; attn_main otherwise (n 2048, d 64 bidirectional: attn_main 0.87-0.92 ms, attn_dec
     * 1.09), when attn_dec does not fit, and on CPU devices (no registers to spill, and barriers
     * cost a CPU runtime more than the work they share). The variants "dec" and "main-split4"
     * force a kernel (dec only where its plan fits). */
    memset(&ch->pl, 0, sizeof ch->pl);
    const int variant = kvs_device_variant(dev, KVS_OP_attention);
    int fits = dec_plan_make(dev, a->n_q, G, hd, dv, o->max_wg, &ch->pl);
    int forced_dec = variant == KVS_OCL_ATTN_DEC, forced_main = variant == KVS_OCL_ATTN_MAIN_SPLIT4;
    ch->use_dec = fits && !forced_main &&
                  (forced_dec || (!o->is_cpu && (a->n_q <= 16 || hd > 64 || dv > 64 || a->p.causal ||
                                                   ch->ntiles * (size_t)a->n_kv_heads < ch->cus)));
}

/* attn_main's limits, checked when attn_main runs. */
static int attn_main_fits(kvs_device *dev, const kvs_attention_args *a, size_t bk, char *why, size_t n) {
    kvs_ocl *o = dev->impl;
    int G = (int)(a->n_heads / a->n_kv_heads), hd = (int)a->head_dim, dv = (int)a->head_dim_v;
    if ((size_t)G > o->max_wg) {
        snprintf(why, n, "GQA group of %d heads exceeds the device's work-group limit %zu", G, o->max_wg);
        return 0;
    }
    if (4 * bk * (size_t)(hd + dv) > o->local_mem) {
        snprintf(why, n, "head_dim %d (d_v %d) needs more local memory than the device's %zu bytes", hd, dv, o->local_mem);
        return 0;
    }
    return 1;
}

int kvs_ocl_attention_supported(kvs_device *dev, const kvs_attention_args *a, char *why, size_t n) {
    if (a->head_dim > 512 || a->head_dim_v > 512) {
        snprintf(why, n, "head_dim %lld (d_v %lld) > 512 not supported", (long long)a->head_dim, (long long)a->head_dim_v);
        return 0;
    }
    attn_choice ch;
    attn_choose(dev, a, &ch);
    /* attn_dec may still fall back to attn_main when its compiled kernel allows fewer items than
     * planned; the op checks attn_main's limits again then */
    return ch.use_dec || attn_main_fits(dev, a, ch.bk, why, n);
}

kvs_status kvs_ocl_attention(kvs_device *dev, const kvs_attention_args *a) {
    kvs_ocl *o = dev->impl;
    const kvs_attention_params *p = &a->p;
    int G = (int)(a->n_heads / a->n_kv_heads);
    int hd = (int)a->head_dim, dv = (int)a->head_dim_v;
    /* K and V types (qblocks.cl codes). f32 / f16 pairs compile their types in (K_T, V_T; offsets
     * in elements); every other pair shares one program per shape that reads kt / vt at run time
     * (K_T = V_T = -1; offsets in bytes), so the 49 pairs of the cache types do not compile 49. */
    /* a qh8 side (k_lo / v_lo given: QuantSpec's 8-bit read) is QT_QH8, read at run time with its
     * lower plane; without k_lo / v_lo its upper plane reads as the q4_1 cache it is */
    const int kt = p->k_lo ? KVS_OCL_QT_QH8 : kvs_ocl_qt(a->k->dtype), vt = p->v_lo ? KVS_OCL_QT_QH8 : kvs_ocl_qt(a->v->dtype);
    const cl_mem klo = p->k_lo ? kvs_ocl_mem(p->k_lo) : o->zero, vlo = p->v_lo ? kvs_ocl_mem(p->v_lo) : o->zero;
    const int64_t klo_off = p->k_lo ? (int64_t)p->k_lo->offset : 0, vlo_off = p->v_lo ? (int64_t)p->v_lo->offset : 0;
    const int rt = kt > 1 || vt > 1;
    const int dkt = rt ? -1 : kt, dvt = rt ? -1 : vt;
    const int64_t k_off = (int64_t)(a->k->offset / (rt ? 1 : kvs_dtype_bytes(a->k->dtype, 1)));
    const int64_t v_off = (int64_t)(a->v->offset / (rt ? 1 : kvs_dtype_bytes(a->v->dtype, 1)));
    if (hd > 512 || dv > 512)
        return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_attention (opencl): head_dim %d (d_v %d) > 512 not supported", hd, dv);
    int need_ml = p->key_mass || p->probs || p->lse_extra; /* lse_extra: attn_lse reads and updates (m, l) */
    int flags = (p->q_pos ? F_QPOS : 0) | (p->k_pos ? F_KPOS : 0) | (p->kv_len ? F_KVLEN : 0) |
                (p->row_len ? F_ROWLEN : 0) | (p->mask ? F_MASK : 0) | (p->row_max ? F_ROWMAX : 0) |
                (p->row_sum ? F_ROWSUM : 0) | (p->argmax ? F_ARGMAX : 0) | (need_ml ? F_ML : 0) |
                (p->causal ? F_CAUSAL : 0) | (p->unnormalised ? F_UNNORM : 0) |
                (p->stat_rows ? F_STATROWS : 0) | (p->key_mass_accumulate ? F_ACCUM : 0);
    cl_mem ml = o->zero;
    if (need_ml) KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_ML, (size_t)(a->n_q * a->n_heads) * 8, &ml));
    attn_choice ch;
    attn_choose(dev, a, &ch);
    const size_t cus = ch.cus;
    const int bq = ch.bq;
    size_t bk = ch.bk, ntiles = ch.ntiles;
    dec_plan pl = ch.pl;
    int use_dec = ch.use_dec;
    char defs[384];
    cl_kernel k = NULL;
    size_t kwg = 0;
    while (use_dec) {
        snprintf(defs, sizeof defs,
                 "#define ATTN_DEC 1\n#define HEAD_DIM %d\n#define HEAD_DIM_V %d\n#define G %d\n#define DNT %d\n#define RB %d\n"
                 "#define BK %d\n#define VW %d\n#define SEPV %d\n#define K_T %d\n#define V_T %d\n#define KM_WG 64\n#define KM_TP 16\n",
                 hd, dv, G, pl.nt, pl.rb, pl.bk, pl.vw, pl.sepv, dkt, dvt);
        KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, "attn_dec", &k));
        /* the compiled kernel may allow fewer items per group than the device (registers): plan
         * again for that many items, or take attn_main when no plan fits */
        kwg = 0;
        if (clGetKernelWorkGroupInfo(k, o->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL) != CL_SUCCESS ||
            kwg == 0 || kwg >= (size_t)pl.nt)
            break;
        size_t cap_nt = kvs_ocl_pow2_floor(kwg);
        if (cap_nt >= (size_t)pl.nt || !dec_plan_make(dev, a->n_q, G, hd, dv, cap_nt, &pl)) use_dec = 0;
    }
    size_t want_wgs = (use_dec ? 4 : 2) * cus;
    if (!use_dec) {
        char why[160];
        if (!attn_main_fits(dev, a, bk, why, sizeof why))
            return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_attention (opencl): %s", why);
    } else {
        bk = (size_t)pl.bk;
        ntiles = (size_t)((a->n_q + pl.rb - 1) / pl.rb);
    }
    if (!use_dec)
        snprintf(defs, sizeof defs,
                 "#define HEAD_DIM %d\n#define HEAD_DIM_V %d\n#define G %d\n#define BQ %d\n#define BK %zu\n#define K_T %d\n"
                 "#define V_T %d\n#define KM_WG 64\n#define KM_TP 16\n",
                 hd, dv, G, bq, bk, dkt, dvt);

    /* Split-K (flash-decoding) when the (query tile, kv head) grid is too small to fill the
     * device (attn_main: 2 work-groups per compute unit, attn_dec: 4): key ranges of `span` keys
     * (a multiple of BK; attn_main at least 4 tiles, attn_dec at least 1) per work-group, merged
     * by attn_combine in split order. */
    size_t base = ntiles * (size_t)a->n_kv_heads;
    int64_t n_split = 1, span = 0;
    int64_t want = base < want_wgs ? (int64_t)((want_wgs + base - 1) / base) : 1;
    /* the variant main-split4 forces 4 splits (as many as there are key tiles, if fewer) */
    const int forced_splits = kvs_device_variant(dev, KVS_OP_attention) == KVS_OCL_ATTN_MAIN_SPLIT4 ? 4 : 0;
    if (forced_splits) want = forced_splits;
    {
        int64_t maxs = a->n_kv / ((use_dec ? 1 : 4) * (int64_t)bk);
        if (forced_splits) maxs = (a->n_kv + (int64_t)bk - 1) / (int64_t)bk;
        if (want > maxs) want = maxs;
        if (want > 1) {
            span = (a->n_kv + want - 1) / want;
            span = (span + (int64_t)bk - 1) / (int64_t)bk * (int64_t)bk;
            n_split = (a->n_kv + span - 1) / span;
            if (n_split <= 1) span = 0, n_split = 1;
        }
    }
    cl_mem part = o->zero;
    if (n_split > 1)
        KVS_TRY(kvs_ocl_scratch(dev, KVS_OCL_SCR_B, (size_t)(n_split * a->n_q * a->n_heads) * (size_t)(dv + 3) * 4, &part));

    const char *kname = use_dec ? "attn_dec" : "attn_main";
    if (!use_dec) KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, kname, &k));
    {
        kvs_ocl_arg args[] = {
            ARG_MEM(kvs_ocl_mem(a->q)), ARG_L(a->q->offset / 4), ARG_MEM(kvs_ocl_mem(a->k)), ARG_L(k_off),
            ARG_MEM(kvs_ocl_mem(a->v)), ARG_L(v_off), ARG_MEM(kvs_ocl_mem(a->out)), ARG_L(a->out->offset / 4),
            ARG_MEM(mem_or(dev, p->q_pos)), ARG_L(off_or(p->q_pos)), ARG_MEM(mem_or(dev, p->k_pos)), ARG_L(off_or(p->k_pos)),
            ARG_MEM(mem_or(dev, p->kv_len)), ARG_L(off_or(p->kv_len)), ARG_MEM(mem_or(dev, p->row_len)),
            ARG_L(off_or(p->row_len)), ARG_MEM(mem_or(dev, p->mask)), ARG_L(off_or(p->mask)),
            ARG_MEM(mem_or(dev, p->row_max)), ARG_L(off_or(p->row_max)), ARG_MEM(mem_or(dev, p->row_sum)),
            ARG_L(off_or(p->row_sum)), ARG_MEM(mem_or(dev, p->argmax)), ARG_L(off_or(p->argmax)), ARG_MEM(ml),
            ARG_MEM(part), ARG_I(span),
            ARG_I(a->n_q), ARG_I(a->n_heads), ARG_I(a->capacity), ARG_I(a->n_kv), ARG_F(p->scale), ARG_I(flags),
            ARG_I(kt), ARG_I(vt), ARG_MEM(klo), ARG_L(klo_off), ARG_MEM(vlo), ARG_L(vlo_off)};
        size_t wg = use_dec ? (size_t)pl.nt : (size_t)(bq * G);
        size_t lws[3] = {wg, 1, 1};
        size_t gws[3] = {ntiles * wg, (size_t)a->n_kv_heads, (size_t)n_split};
        if (debug_on()) {
            cl_ulong priv = 0, lmem = 0;
            size_t kw = 0;
            clGetKernelWorkGroupInfo(k, o->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kw, &kw, NULL);
            clGetKernelWorkGroupInfo(k, o->device, CL_KERNEL_PRIVATE_MEM_SIZE, sizeof priv, &priv, NULL);
            clGetKernelWorkGroupInfo(k, o->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof lmem, &lmem, NULL);
            fprintf(stderr,
                    "kvsieve opencl attention: n_q=%lld n_kv=%lld d=%d dv=%d G=%d kv_heads=%lld -> %s (dec plan %s, variant %s, "
                    "cpu %d) wg=%zu rows/wg=%d bk=%zu vw=%d sepv=%d tiles=%zu splits=%lld span=%lld work-groups=%zu "
                    "kernel: max wg %zu, private %llu B, local %llu B; device: max wg %zu, local %zu B, %zu CUs\n",
                    (long long)a->n_q, (long long)a->n_kv, hd, dv, G, (long long)a->n_kv_heads, kname,
                    ch.pl.nt ? "fits" : "does not fit", variant_name(dev), o->is_cpu, wg, use_dec ? pl.rb : bq, bk,
                    use_dec ? pl.vw : 1, use_dec ? pl.sepv : 1, ntiles, (long long)n_split, (long long)span,
                    ntiles * (size_t)a->n_kv_heads * (size_t)n_split, kw, (unsigned long long)priv,
                    (unsigned long long)lmem, o->max_wg, o->local_mem, cus);
        }
        KVS_TRY(kvs_ocl_launch(dev, k, kname, 3, gws, lws, (int)(sizeof args / sizeof args[0]), args));
    }
    if (n_split > 1) {
        KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, "attn_combine", &k));
        kvs_ocl_arg args[] = {
            ARG_MEM(part), ARG_I(n_split), ARG_MEM(kvs_ocl_mem(a->out)), ARG_L(a->out->offset / 4),
            ARG_MEM(mem_or(dev, p->row_max)), ARG_L(off_or(p->row_max)), ARG_MEM(mem_or(dev, p->row_sum)),
            ARG_L(off_or(p->row_sum)), ARG_MEM(mem_or(dev, p->argmax)), ARG_L(off_or(p->argmax)), ARG_MEM(ml),
            ARG_I(a->n_q), ARG_I(a->n_heads), ARG_I(flags)};
        size_t lws[2] = {kvs_ocl_wg(dev, dv <= 32 ? 32 : dv <= 64 ? 64 : 128), 1};
        size_t gws[2] = {kvs_ocl_round_up((size_t)dv, lws[0]), (size_t)(a->n_q * a->n_heads)};
        KVS_TRY(kvs_ocl_launch(dev, k, "attn_combine", 2, gws, lws, (int)(sizeof args / sizeof args[0]), args));
    }
    if (p->lse_extra) { /* the external normaliser: out rescaled, ml's l made l + exp(lse - m) */
        KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, "attn_lse", &k));
        kvs_ocl_arg args[] = {ARG_MEM(kvs_ocl_mem(p->lse_extra)), ARG_L(off_or(p->lse_extra)), ARG_MEM(kvs_ocl_mem(a->out)),
                              ARG_L(a->out->offset / 4), ARG_MEM(ml), ARG_I(a->n_q), ARG_I(a->n_heads)};
        size_t lws[1] = {kvs_ocl_wg(dev, 64)};
        size_t gws[1] = {kvs_ocl_round_up((size_t)(a->n_q * a->n_heads), lws[0])};
        KVS_TRY(kvs_ocl_launch(dev, k, "attn_lse", 1, gws, lws, (int)(sizeof args / sizeof args[0]), args));
    }
    if (p->key_mass && a->n_stat_rows >= 0) {
        KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, "attn_keymass", &k));
        kvs_ocl_arg args[] = {
            ARG_MEM(kvs_ocl_mem(a->q)), ARG_L(a->q->offset / 4), ARG_MEM(kvs_ocl_mem(a->k)), ARG_L(k_off),
            ARG_MEM(mem_or(dev, p->q_pos)), ARG_L(off_or(p->q_pos)), ARG_MEM(mem_or(dev, p->k_pos)), ARG_L(off_or(p->k_pos)),
            ARG_MEM(mem_or(dev, p->kv_len)), ARG_L(off_or(p->kv_len)), ARG_MEM(mem_or(dev, p->row_len)),
            ARG_L(off_or(p->row_len)), ARG_MEM(mem_or(dev, p->mask)), ARG_L(off_or(p->mask)),
            ARG_MEM(mem_or(dev, p->stat_rows)), ARG_L(off_or(p->stat_rows)), ARG_I(a->n_stat_rows), ARG_MEM(ml),
            ARG_MEM(kvs_ocl_mem(p->key_mass)), ARG_L(off_or(p->key_mass)),
            ARG_I(a->n_q), ARG_I(a->n_heads), ARG_I(a->capacity), ARG_I(a->n_kv), ARG_F(p->scale), ARG_I(flags),
            ARG_I(kt), ARG_MEM(klo), ARG_L(klo_off)};
        size_t lws[2] = {64, 1};
        size_t gws[2] = {(size_t)a->capacity, (size_t)a->n_kv_heads};
        KVS_TRY(kvs_ocl_launch(dev, k, "attn_keymass", 2, gws, lws, (int)(sizeof args / sizeof args[0]), args));
    }
    if (p->probs && a->n_probe > 0) {
        KVS_TRY(kvs_ocl_kernel(dev, "attention.cl", defs, "attn_probs", &k));
        kvs_ocl_arg args[] = {
            ARG_MEM(kvs_ocl_mem(a->q)), ARG_L(a->q->offset / 4), ARG_MEM(kvs_ocl_mem(a->k)), ARG_L(k_off),
            ARG_MEM(mem_or(dev, p->q_pos)), ARG_L(off_or(p->q_pos)), ARG_MEM(mem_or(dev, p->k_pos)), ARG_L(off_or(p->k_pos)),
            ARG_MEM(mem_or(dev, p->kv_len)), ARG_L(off_or(p->kv_len)), ARG_MEM(mem_or(dev, p->row_len)),
            ARG_L(off_or(p->row_len)), ARG_MEM(mem_or(dev, p->mask)), ARG_L(off_or(p->mask)),
            ARG_MEM(kvs_ocl_mem(p->probe_rows)), ARG_L(off_or(p->probe_rows)), ARG_MEM(ml),
            ARG_MEM(kvs_ocl_mem(p->probs)), ARG_L(off_or(p->probs)),
            ARG_I(a->n_q), ARG_I(a->n_heads), ARG_I(a->capacity), ARG_I(a->n_kv), ARG_F(p->scale), ARG_I(flags),
            ARG_I(kt), ARG_MEM(klo), ARG_L(klo_off)};
        size_t lws[3] = {64, 1, 1};
        size_t gws[3] = {(size_t)a->capacity, (size_t)a->n_heads, (size_t)a->n_probe};
        KVS_TRY(kvs_ocl_launch(dev, k, "attn_probs", 3, gws, lws, (int)(sizeof args / sizeof args[0]), args));
    }
    return KVS_OK;
}
