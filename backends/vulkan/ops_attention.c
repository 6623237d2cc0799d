/* Vulkan attention op: the attn shader (one tiled online-softmax pass, split-K for few query rows
 * with attn_combine merging the splits) and the attn_stats passes (key mass, probe
 * probabilities), with lse_extra the attn_lse pass between them (out and the statistics' normaliser
 * take the external mass). K and V may each be f32, f16, bf16 or a block type (the quantized KV cache,
 * issue 17): the shaders decode the stored blocks while staging a key tile (quant.glsl). Push constants and flags: vk_params.h. Inputs are validated by core/ops.c. */
#include <stdio.h>
#include <string.h>

#include "vk_internal.h"

/* CPU-type devices (lavapipe): llvmpipe ends the loops of a shader invocation after 65535
 * iterations in total (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS), silently, so one attn pass over
 * many key tiles returns wrong rows (measured, head_dim 128, 8-key tiles: 257 tiles right, 513
 * wrong; found when the tests first forced the "single" variant). There, no pass walks more than
 * KVS_VK_ATTN_CPU_MAX_TILES tiles: more keys are split (split-K), and "single" is refused. */
#define KVS_VK_ATTN_CPU_MAX_TILES 256

int kvs_vk_attention_plan(kvs_device *dev, const kvs_attention_args *a, kvs_vk_attn_plan *pl, char *why, size_t n) {
    const uint32_t D = (uint32_t)a->head_dim, DV = (uint32_t)a->head_dim_v, G = (uint32_t)(a->n_heads / a->n_kv_heads);
    memset(pl, 0, sizeof *pl);
    /* rows per workgroup R and keys per tile TK: the largest that fit in shared memory */
    int64_t shm = dev->caps.shared_mem_bytes - 512;
    uint32_t r_max = 1;
    /* no more rows per workgroup than there are query rows per kv head (decode: R = G) */
    while (r_max < 16 && (int64_t)r_max < a->n_q * (int64_t)G) r_max *= 2;
    for (uint32_t r = r_max; r >= 1 && !pl->R; r /= 2)
        for (uint32_t tk = 32; tk >= 4; tk /= 2) {
            /* sQ [r][D], sO [r][DV], sK [tk][D], sV [tk][DV], sS [r][tk], 7 per-row words */
            int64_t bytes = 4 * ((int64_t)r * (D + DV) + (int64_t)tk * (D + DV) + (int64_t)r * tk + 7 * (int64_t)r);
            if (bytes <= shm) {
                pl->R = r;
                pl->TK = tk;
                break;
            }
        }
    if (!pl->R) {
        snprintf(why, n, "head_dim %u (d_v %u) needs more shared memory than the device's %lld bytes", D, DV,
                 (long long)dev->caps.shared_mem_bytes);
        return 0;
    }
    const uint64_t TK = pl->TK, n_kv = (uint64_t)a->n_kv, tiles = kvs_vk_ceil_div(n_kv, TK);
    const uint64_t blocks = kvs_vk_ceil_div((uint64_t)a->n_q * G, pl->R);
    const int cpu = kvs_vk_of(dev)->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const uint64_t max_tiles = cpu ? KVS_VK_ATTN_CPU_MAX_TILES : UINT64_MAX;
    pl->base = blocks * (uint64_t)a->n_kv_heads;
    /* split-K for few query rows (decode): aim at >= 128 workgroups, >= 4 key tiles per split.
     * Variants (vk_supports.c): "single" never splits; "split4" takes 4 splits of whole key tiles
     * on every call (fewer when there are fewer tiles). CPU devices: see above. */
    const int variant = kvs_device_variant(dev, KVS_OP_attention);
    uint64_t nsplit = 1;
    if (variant == KVS_VK_ATTN_SPLIT4) {
        nsplit = 4;
    } else if (!variant && pl->base < 64) {
        nsplit = kvs_vk_ceil_div(128, pl->base);
        uint64_t maxs = kvs_vk_ceil_div(n_kv, 4 * TK);
        if (nsplit > maxs) nsplit = maxs;
        if (nsplit > 64) nsplit = 64;
    }
    if (variant == KVS_VK_ATTN_SINGLE && tiles > max_tiles) {
        snprintf(why, n, "variant attention:single: %llu key tiles in one pass exceed this CPU device's %llu "
                 "(lavapipe ends long shader loops early)", (unsigned long long)tiles, (unsigned long long)max_tiles);
        return 0;
    }
    if (variant != KVS_VK_ATTN_SINGLE && kvs_vk_ceil_div(tiles, nsplit) > max_tiles)
        nsplit = kvs_vk_ceil_div(tiles, max_tiles);
    if (nsplit > tiles) nsplit = tiles;
    pl->nsplit = 1;
    pl->split_len = n_kv;
    if (nsplit > 1) {
        pl->split_len = kvs_vk_ceil_div(kvs_vk_ceil_div(n_kv, nsplit), TK) * TK;
        pl->nsplit = kvs_vk_ceil_div(n_kv, pl->split_len);
        if (pl->nsplit <= 1) pl->nsplit = 1, pl->split_len = n_kv;
    }
    return 1;
}

kvs_status kvs_vk_attention(kvs_device *dev, const kvs_attention_args *a) {
    const char *op = "kvs_attention";
    kvs_vk *v = kvs_vk_of(dev);
    KVS_TRY(kvs_vk_begin_op(v, op));
    const kvs_attention_params *pp = &a->p;
    const uint32_t D = (uint32_t)a->head_dim, DV = (uint32_t)a->head_dim_v, G = (uint32_t)(a->n_heads / a->n_kv_heads);
    kvs_vk_attn_plan pl;
    char why[256];
    if (!kvs_vk_attention_plan(dev, a, &pl, why, sizeof why)) return kvs_error(KVS_ERR_UNSUPPORTED, "%s: %s", op, why);
    const uint32_t R = pl.R, TK = pl.TK;
    int need_stats = pp->key_mass || pp->probs;
    const uint64_t nrows = (uint64_t)a->n_q * (uint64_t)a->n_heads;
    const uint64_t base = pl.base, nsplit = pl.nsplit, split_len = pl.split_len;
    VkDeviceSize mbytes = nrows * 4;
    VkDeviceSize pbytes = nsplit > 1 ? nsplit * nrows * 4 : 0, obytes = nsplit > 1 ? nsplit * nrows * DV * 4 : 0;
    KVS_TRY(kvs_vk_reserve(v, (pp->lse_extra ? 3 : 2) * mbytes + 3 * pbytes + obytes, 0));
    uint32_t flags = (pp->q_pos ? KVS_VK_ATTN_QPOS : 0) | (pp->k_pos ? KVS_VK_ATTN_KPOS : 0) |
                     (pp->kv_len ? KVS_VK_ATTN_KVLEN : 0) | (pp->row_len ? KVS_VK_ATTN_ROWLEN : 0) |
                     (pp->mask ? KVS_VK_ATTN_MASK : 0) | (pp->argmax ? KVS_VK_ATTN_ARGMAX : 0) |
                     (pp->unnormalised ? KVS_VK_ATTN_UNNORM : 0) | (pp->causal ? KVS_VK_ATTN_CAUSAL : 0);
    kvs_vk_pc_attn pc;
    memset(&pc, 0, sizeof pc);
    kvs_vk_arg args[14];
    KVS_VK_BIND(a->q, 0, 0, pc.oq);
    KVS_VK_BIND(a->k, 0, 1, pc.ok);
    KVS_VK_BIND(a->v, 0, 2, pc.ov);
    KVS_VK_BIND(a->out, 1, 3, pc.oo);
    KVS_TRY(kvs_vk_bind_opt(v, pp->q_pos, 0, &args[4], &pc.oqp, op));
    KVS_TRY(kvs_vk_bind_opt(v, pp->k_pos, 0, &args[5], &pc.okp, op));
    KVS_TRY(kvs_vk_bind_opt(v, pp->kv_len, 0, &args[6], &pc.okl, op));
    KVS_TRY(kvs_vk_bind_opt(v, pp->row_len, 0, &args[7], &pc.orl, op));
    KVS_TRY(kvs_vk_bind_opt(v, pp->mask, 0, &args[8], &pc.om, op));
    KVS_TRY(kvs_vk_bind_opt(v, pp->argmax, 1, &args[9], &pc.oam, op));
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
    /* a qh8 K / V (k_lo / v_lo: QuantSpec's 8-bit read): its lower plane as bytes, bindings 12, 13 */
    const kvs_tensor *los[2] = {pp->k_lo, pp->v_lo};
    uint32_t *lo_off[2] = {&pc.oklo, &pc.ovlo};
    for (int i = 0; i < 2; i++) {
        if (los[i]) KVS_TRY(kvs_vk_bind(v, los[i], 0, 1, &args[12 + i], lo_off[i], op));
        else args[12 + i] = kvs_vk_dummy_arg(v);
    }
    /* K and V dtypes (vk_params.h codes = kvs_dtype): attn.comp constants 1 and 5; 6 and 7: qh8;
     * 2 and 8: d_k and d_v */
    const uint32_t kdt = (uint32_t)a->k->dtype, vdt = (uint32_t)a->v->dtype;
    uint32_t spec[9] = {kvs_vk_wg(dev, 128), kdt, D, R, TK, vdt, pp->k_lo != NULL, pp->v_lo != NULL, DV};
    const kvs_vk_arg out_arg = args[3];
    const uint32_t out_off = pc.oo;
    if (nsplit == 1) {
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN, spec, 9, args, 14, &pc, sizeof pc, base, op));
    } else {
        /* partials: O [nsplit][n_q*n_heads][DV], m, l, argmax [nsplit][n_q*n_heads] */
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
        pc.flags = flags | KVS_VK_ATTN_ARGMAX | KVS_VK_ATTN_UNNORM;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN, spec, 9, args, 14, &pc, sizeof pc, base * nsplit, op));
        kvs_vk_pc_attn_combine cpc = {
            (uint32_t)nrows, DV, (uint32_t)nsplit, poff[0], poff[1], poff[2], poff[3], fin_off[0], fin_off[1], fin_off[2],
            fin_off[3], flags};
        kvs_vk_arg cargs[8] = {part[0], part[1], part[2], part[3], fin[0], fin[1], fin[2], fin[3]};
        for (int i = 0; i < 4; i++) cargs[i].write = 0;
        uint32_t cwg = kvs_vk_wg(dev, KVS_VK_WG_ELEM);
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN_COMBINE, &cwg, 1, cargs, 8, &cpc, sizeof cpc,
                                kvs_vk_ceil_div(nrows * DV, cwg), op));
        /* the stats pass reads the final row_max / row_sum */
        args[10] = fin[2], pc.orm = fin_off[2];
        args[11] = fin[3], pc.ors = fin_off[3];
    }
    if (pp->lse_extra) {
        /* the external normaliser (attn_lse.comp): out rescaled to l + exp(lse - m); the statistics
         * read that normaliser from scratch instead of row_sum */
        kvs_vk_pc_attn_lse lpc = {(uint32_t)nrows, DV, 0, out_off, pc.orm, pc.ors, 0};
        kvs_vk_arg largs[5];
        KVS_TRY(kvs_vk_bind(v, pp->lse_extra, 0, 4, &largs[0], &lpc.olse, op));
        largs[1] = out_arg;
        largs[2] = args[10];
        largs[3] = args[11];
        largs[2].write = largs[3].write = 0;
        kvs_vk_alloc *la;
        VkDeviceSize lo;
        KVS_TRY(kvs_vk_scratch(v, mbytes, &la, &lo));
        KVS_TRY(kvs_vk_bind_alloc(v, la, lo, mbytes, 1, 4, &largs[4], &lpc.olt, op));
        uint32_t lwg = kvs_vk_wg(dev, 64);
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN_LSE, &lwg, 1, largs, 5, &lpc, sizeof lpc, kvs_vk_ceil_div(nrows, lwg), op));
        args[11] = largs[4], pc.ors = lpc.olt;
    }
    if (!need_stats) return KVS_OK;

    kvs_vk_pc_attn_stats sc;
    memset(&sc, 0, sizeof sc);
    kvs_vk_arg sa[12];
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
    sa[11] = args[12], sc.oklo = pc.oklo; /* a qh8 K's lower plane (or the dummy) */
    sc.n_q = pc.n_q, sc.n_heads = pc.n_heads, sc.G = G, sc.cap = pc.cap, sc.n_kv = pc.n_kv, sc.n_kvh = pc.n_kvh;
    sc.scale = pc.scale;
    uint32_t sflags = flags & (KVS_VK_ATTN_QPOS | KVS_VK_ATTN_KPOS | KVS_VK_ATTN_KVLEN | KVS_VK_ATTN_ROWLEN |
                               KVS_VK_ATTN_MASK | KVS_VK_ATTN_CAUSAL);
    uint32_t sspec[5] = {kvs_vk_wg(dev, 64), kdt, D, KVS_VK_STATS_KEY_MASS, pp->k_lo != NULL};
    if (pp->key_mass) {
        KVS_TRY(kvs_vk_bind_opt(v, pp->stat_rows, 0, &sa[7], &sc.orows, op));
        KVS_TRY(kvs_vk_bind(v, pp->key_mass, 1, 4, &sa[8], &sc.oout, op));
        sc.flags = sflags | (pp->stat_rows ? KVS_VK_ATTN_ROWS : 0) | (pp->key_mass_accumulate ? KVS_VK_ATTN_ACCUM : 0);
        sc.n_rows = (uint32_t)a->n_stat_rows;
        sspec[3] = KVS_VK_STATS_KEY_MASS;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN_STATS, sspec, 5, sa, 12, &sc, sizeof sc,
                                kvs_vk_ceil_div((uint64_t)a->n_kv_heads * (uint64_t)a->n_kv, sspec[0]), op));
    }
    if (pp->probs) {
        KVS_TRY(kvs_vk_bind(v, pp->probe_rows, 0, 4, &sa[7], &sc.orows, op));
        KVS_TRY(kvs_vk_bind(v, pp->probs, 1, 4, &sa[8], &sc.oout, op));
        sc.flags = sflags | KVS_VK_ATTN_ROWS;
        sc.n_rows = (uint32_t)a->n_probe;
        sspec[3] = KVS_VK_STATS_PROBS;
        const uint64_t items = (uint64_t)a->n_probe * (uint64_t)a->n_heads * (uint64_t)a->capacity;
        KVS_TRY(kvs_vk_dispatch(v, KVS_VK_SH_ATTN_STATS, sspec, 5, sa, 12, &sc, sizeof sc,
                                kvs_vk_ceil_div(items, sspec[0]), op));
    }
    return KVS_OK;
}

