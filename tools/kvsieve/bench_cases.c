/* kvsieve bench ops: the op cases (shapes, and what each counts as work: flops or bytes) and the
 * suite that runs them; each case times one op with bench_time_op and records a row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* ---- cases ------------------------------------------------------------------------------------ */


kvs_status bench_run_mm(bench *b, void *p) {
    mm_state *s = p;
    return kvs_matmul(b->dev, s->W, s->x, s->y, 0);
}

static void time_side_by_side(bench *b, bench_copy *cp, row *r, kvs_status (*op)(bench *, void *), void *state);
static bench_copy *side_copy(bench *b, bench_copy **cpp);

/* y [n][m] = W [m][k] x [n][k]; GFLOP/s when n > 8, else GB/s (decode GEMV is memory-bound).
 * cpp non-NULL: timed side by side with a copy (time_side_by_side), the ratio against it. */
static void case_matmul_cp(bench *b, bench_copy **cpp, kvs_dtype wt, int64_t m, int64_t k, int64_t n) {
    char shape[64];
    snprintf(shape, sizeof shape, "m=%lld k=%lld n=%lld W %s", (long long)m, (long long)k, (long long)n,
             kvs_dtype_name(wt));
    int gemv = n <= 8;
    double work = gemv ? (double)kvs_dtype_bytes(wt, m * k) + 4.0 * (double)(n * k + n * m)
                       : 2.0 * (double)m * (double)k * (double)n;
    row *r = bench_new_row(b, gemv ? "gemv" : "matmul", shape, gemv ? UNIT_BYTES : UNIT_FLOPS, work);
    if (!r) return;
    mm_state s = {0};
    double sec = 0;
    kvs_status st = bench_new_tensor(b, &s.W, wt, k, m, 0, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.x, KVS_F32, k, n, 0, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.y, KVS_F32, m, n, 0, 0);
    bench_copy *cp = cpp ? side_copy(b, cpp) : NULL;
    if (st == KVS_OK && cp) time_side_by_side(b, cp, r, bench_run_mm, &s);
    else {
        if (st == KVS_OK) st = bench_time_op(b, bench_run_mm, &s, &sec);
        bench_finish_row(b, r, st, sec);
    }
    bench_destroy_all(&s.W, 3);
}

static void case_matmul(bench *b, kvs_dtype wt, int64_t m, int64_t k, int64_t n) { case_matmul_cp(b, NULL, wt, m, k, n); }

typedef struct att_state {
    kvs_tensor *q, *k, *v, *o, *k_lo, *v_lo; /* k_lo, v_lo: the lower planes of a qh8 K / V */
    kvs_attention_params p;
} att_state;

static kvs_status run_att(bench *b, void *p) {
    att_state *s = p;
    return kvs_attention(b->dev, s->q, s->k, s->v, s->o, &s->p);
}

/* q [n_q][h][d] against k, v [hkv][n_kv][d]. n_q == 1: decode row, reported as GB/s. */
/* Returns the seconds per call measured (0 when not run, INFINITY when skipped); skip = 1 records
 * the case as skipped. */
/* A qh8 K or V (QuantSpec's hierarchical cache) is a q4_1 upper plane plus a lower plane; view = 1
 * times the draft's read of the upper planes alone (the 4-bit view), and counts only their bytes. */
static double case_attention_kv(bench *b, int64_t n_q, int64_t n_kv, int64_t d, int64_t h, int64_t hkv, int causal,
                                int skip, kvs_dtype kt, kvs_dtype vt, int view) {
    char shape[64], types[32] = "";
    if (kt != KVS_F32 || vt != KVS_F32)
        snprintf(types, sizeof types, " kv %s/%s%s", kvs_dtype_name(kt), kvs_dtype_name(vt), view ? " view" : "");
    const kvs_dtype kst = kt == KVS_QH8 ? KVS_Q4_1 : kt, vst = vt == KVS_QH8 ? KVS_Q4_1 : vt; /* stored tensors */
    snprintf(shape, sizeof shape, "n_q=%lld n_kv=%lld d=%lld h=%lld/%lld%s%s", (long long)n_q, (long long)n_kv,
             (long long)d, (long long)h, (long long)hkv, causal ? " causal" : "", types);
    int decode = n_q == 1;
    /* decoding: bytes of q, out and the K/V cache as stored (a quantized cache counts its blocks) */
    double work = decode ? 4.0 * (double)(2 * n_q * h * d) + (double)kvs_dtype_bytes(view ? kst : kt, hkv * n_kv * d) +
                               (double)kvs_dtype_bytes(view ? vst : vt, hkv * n_kv * d)
                         : 4.0 * (double)n_q * (double)n_kv * (double)d * (double)h * (causal ? 0.5 : 1.0);
    row *r = bench_new_row(b, decode ? "attn-dec" : "attention", shape, decode ? UNIT_BYTES : UNIT_FLOPS, work);
    if (!r) return 0;
    if (skip) {
        r->status = ROW_SKIPPED;
        bench_print_row(b, r);
        return INFINITY; /* the larger sizes after it are skipped too */
    }
    att_state s = {0};
    s.p = kvs_attention_params_default();
    s.p.causal = causal;
    double sec = 0;
    kvs_status st = bench_new_tensor(b, &s.q, KVS_F32, d, h, n_q, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.k, kst, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.v, vst, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.o, KVS_F32, d, h, n_q, 0);
    if (st == KVS_OK && kt == KVS_QH8 && !view) st = bench_new_tensor(b, &s.k_lo, KVS_QH8_LO, d, n_kv, hkv, 0);
    if (st == KVS_OK && vt == KVS_QH8 && !view) st = bench_new_tensor(b, &s.v_lo, KVS_QH8_LO, d, n_kv, hkv, 0);
    s.p.k_lo = s.k_lo;
    s.p.v_lo = s.v_lo;
    if (st == KVS_OK) st = bench_time_op(b, run_att, &s, &sec);
    bench_finish_row(b, r, st, sec);
    bench_destroy_all(&s.q, 6);
    return st == KVS_OK ? sec : 0;
}

/* Times op(state) interleaved with a copy of the same thread count on the CPU (cp): rounds (25, or
 * --reps if more, fewer when --max-seconds runs out) of (inner op calls, one copy), the best of each;
 * the row's ratio is then op GB/s / that copy's GB/s (r->side_bw), so load from other jobs hits both
 * alike. cp NULL (not the CPU backend): the usual timing against the bandwidth peak. Finishes r. */
static void time_side_by_side(bench *b, bench_copy *cp, row *r, kvs_status (*op)(bench *, void *), void *state) {
    kvs_status st = KVS_OK;
    if (!cp) {
        double sec = 0;
        st = bench_time_op(b, op, state, &sec);
        bench_finish_row(b, r, st, sec);
        return;
    }
    double t1 = 0;
    for (int w = 0; w < 2 && st == KVS_OK; w++) { /* warm-up, then one steady call */
        const double t0 = cli_now();
        st = op(b, state);
        if (st == KVS_OK) st = kvs_device_sync(b->dev);
        t1 = cli_now() - t0;
    }
    if (st != KVS_OK) {
        bench_finish_row(b, r, st, 0);
        return;
    }
    const double tc = bench_copy_run(b, cp);
    const int inner = t1 < b->min_sample_s ? (int)fmin(1000.0, ceil(b->min_sample_s / fmax(t1, 1e-7))) : 1;
    int rounds = b->reps > 25 ? b->reps : 25; /* best of many: other jobs come and go */
    while (rounds > 3 && rounds * (inner * t1 + tc) > b->budget_s) rounds--;
    double best_a = INFINITY, best_c = INFINITY;
    for (int k = 0; k < rounds && st == KVS_OK; k++) {
        const double t0 = cli_now();
        for (int i = 0; i < inner && st == KVS_OK; i++) st = op(b, state);
        if (st == KVS_OK) st = kvs_device_sync(b->dev);
        best_a = fmin(best_a, (cli_now() - t0) / inner);
        best_c = fmin(best_c, bench_copy_run(b, cp));
    }
    if (st != KVS_OK) {
        bench_finish_row(b, r, st, 0);
        return;
    }
    r->status = ROW_OK;
    r->sec = r->best = best_a;
    r->samples = rounds;
    r->side_bw = 2.0 * (double)bench_copy_bytes(cp) / best_c * 1e-9;
    bench_print_row(b, r);
}

/* The side-by-side copy (2 x 64 MiB: past L3), made by the first row that needs it; NULL off the CPU. */
static bench_copy *side_copy(bench *b, bench_copy **cpp) {
    if (!*cpp && kvs_device_backend(b->dev) == KVS_BACKEND_CPU)
        *cpp = bench_copy_new((size_t)64 << 20, kvs_device_caps(b->dev)->n_threads);
    return *cpp;
}

/* Issue 17's decode attention rows ("attn-kvq"): one query row of h heads over a K/V cache of type t
 * (K and V; KVS_QH8: q4_1 upper planes read with their k_lo / v_lo lower planes), n_kv keys of
 * head_dim d in hkv kv heads; work = the cache bytes as stored (blocks with
 * their scales) + q + out; timed side by side with a copy (time_side_by_side). */
static void case_attn_kvq(bench *b, bench_copy **cpp, int64_t n_kv, int64_t d, int64_t h, int64_t hkv, kvs_dtype t,
                          const char *variant) {
    char shape[64];
    snprintf(shape, sizeof shape, "n_kv=%lld d=%lld h=%lld/%lld kv %s%s%s", (long long)n_kv, (long long)d, (long long)h,
             (long long)hkv, kvs_dtype_name(t), variant ? " " : "", variant ? variant : "");
    const double work = 8.0 * (double)(h * d) + 2.0 * (double)kvs_dtype_bytes(t, hkv * n_kv * d);
    row *r = bench_new_row(b, "attn-kvq", shape, UNIT_BYTES, work);
    if (!r) return;
    bench_copy *cp = side_copy(b, cpp);
    att_state s = {0};
    s.p = kvs_attention_params_default();
    const kvs_dtype st_t = t == KVS_QH8 ? KVS_Q4_1 : t; /* qh8: the q4_1 upper planes + the lower ones */
    kvs_status st = bench_new_tensor(b, &s.q, KVS_F32, d, h, 1, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.k, st_t, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.v, st_t, d, n_kv, hkv, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.o, KVS_F32, d, h, 1, 0);
    if (st == KVS_OK && t == KVS_QH8) st = bench_new_tensor(b, &s.k_lo, KVS_QH8_LO, d, n_kv, hkv, 0);
    if (st == KVS_OK && t == KVS_QH8) st = bench_new_tensor(b, &s.v_lo, KVS_QH8_LO, d, n_kv, hkv, 0);
    s.p.k_lo = s.k_lo;
    s.p.v_lo = s.v_lo;
    if (st == KVS_OK) time_side_by_side(b, cp, r, run_att, &s);
    else bench_finish_row(b, r, st, 0);
    bench_destroy_all(&s.q, 6);
}

/* The attention case with the K/V types of --cache-type-k/-v. */
static double case_attention(bench *b, int64_t n_q, int64_t n_kv, int64_t d, int64_t h, int64_t hkv, int causal,
                             int skip) {
    return case_attention_kv(b, n_q, n_kv, d, h, hkv, causal, skip, b->kv_types[0], b->kv_types[1], 0);
}

typedef struct dwt_state {
    kvs_tensor *x, *y;
    kvs_wavelet w;
    int levels, inverse;
} dwt_state;

static kvs_status run_dwt(bench *b, void *p) {
    dwt_state *s = p;
    return s->inverse ? kvs_idwt(b->dev, s->y, s->x, s->w, s->levels) : kvs_dwt(b->dev, s->x, s->y, s->w, s->levels);
}

static void case_dwt(bench *b, kvs_wavelet w, int levels, int64_t rows, int64_t n, int inverse) {
    char shape[64];
    snprintf(shape, sizeof shape, "%s J=%d %lldx%lld", kvs_wavelet_name(w), levels, (long long)rows, (long long)n);
    int64_t nc = kvs_dwt_length(n, levels);
    row *r = bench_new_row(b, inverse ? "idwt" : "dwt", shape, UNIT_BYTES, 4.0 * (double)rows * (double)(n + nc));
    if (!r) return;
    dwt_state s = {.w = w, .levels = levels, .inverse = inverse};
    double sec = 0;
    kvs_status st = bench_new_tensor(b, &s.x, KVS_F32, n, rows, 0, 0);
    if (st == KVS_OK) st = bench_new_tensor(b, &s.y, KVS_F32, nc, rows, 0, 0);
    if (st == KVS_OK) st = bench_time_op(b, run_dwt, &s, &sec);
    bench_finish_row(b, r, st, sec);
    bench_destroy_all(&s.x, 2);
}

typedef struct topk_state {
    kvs_tensor *x, *idx, *val;
    kvs_topk_params p;
    int global;
} topk_state;

static kvs_status run_topk(bench *b, void *p) {
    topk_state *s = p;
    return s->global ? kvs_topk_global(b->dev, s->x, s->idx, s->val, &s->p)
                     : kvs_topk(b->dev, s->x, s->idx, s->val, &s->p);
}

/* rows == 0: global top-k over n elements. */
static void case_topk(bench *b, int64_t rows, int64_t n, int64_t k) {
    char shape[64];
    int global = rows == 0;
    if (global) snprintf(shape, sizeof shape, "global n=2^%d k=%lld", (int)lround(log2((double)n)), (long long)k);
    else snprintf(shape, sizeof shape, "rows %lldx%lld k=%lld", (long long)rows, (long long)n, (long long)k);
    int64_t nr = global ? 1 : rows;
    row *r = bench_new_row(b, global ? "topk-glob" : "topk", shape, UNIT_BYTES,
                     4.0 * (double)nr * (double)n + 8.0 * (double)nr * (double)k);
    if (!r) return;
    topk_state s = {.global = global};
    s.p = kvs_topk_params_default();
    s.p.k = k;
    double sec = 0;
    kvs_status st = global ? bench_new_tensor(b, &s.x, KVS_F32, n, 0, 0, 0) : bench_new_tensor(b, &s.x, KVS_F32, n, rows, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.idx, b->dev, KVS_I32, k, global ? 0 : rows, 0, 0);
    if (st == KVS_OK) st = kvs_tensor_new(&s.val, b->dev, KVS_F32, k, global ? 0 : rows, 0, 0);
    if (st == KVS_OK) st = bench_time_op(b, run_topk, &s, &sec);
    bench_finish_row(b, r, st, sec);
    bench_destroy_all(&s.x, 3);
}

typedef enum rows_op { OP_GATHER, OP_SCATTER, OP_COMPACT } rows_op;

typedef struct rows_state {
    kvs_tensor *src, *idx, *dst;
    rows_op op;
} rows_state;

static kvs_status run_rows(bench *b, void *p) {
    rows_state *s = p;
    switch (s->op) {
    case OP_GATHER: return kvs_gather(b->dev, s->src, s->idx, s->dst);
    case OP_SCATTER: return kvs_scatter(b->dev, s->src, s->idx, s->dst, 1);
    case OP_COMPACT: return kvs_compact(b->dev, s->dst, s->idx);
    }
    return KVS_ERR_INTERNAL;
}

/* One KV-cache layer [G][cap][d] f32; n rows per group moved by per-group index lists.
 * gather: cache -> [G][n][d]; scatter: token-major [n][G][d] -> cache; compact: in place. */
static void case_rows(bench *b, rows_op op, int64_t G, int64_t cap, int64_t d, int64_t n) {
    static const char *const names[] = {"gather", "scatter", "compact"};
    char shape[64];
    snprintf(shape, sizeof shape, "G=%lld cap=%lld d=%lld n=%lld f32", (long long)G, (long long)cap, (long long)d,
             (long long)n);
    double moved = 4.0 * (double)(G * n * d);
    row *r = bench_new_row(b, names[op], shape, UNIT_BYTES, 2.0 * moved + 4.0 * (double)(G * n));
    if (!r) return;
    rows_state s = {.op = op};
    double sec = 0;
    kvs_status st = bench_new_index(b, &s.idx, n, G, op == OP_SCATTER ? n : cap);
    if (op == OP_SCATTER) {
        /* token-major new rows written to slots [0, n) of every head */
        if (st == KVS_OK) st = bench_new_tensor(b, &s.src, KVS_F32, d, G, n, 0);
        if (st == KVS_OK) st = bench_new_tensor(b, &s.dst, KVS_F32, d, cap, G, 0);
    } else if (op == OP_GATHER) {
        if (st == KVS_OK) st = bench_new_tensor(b, &s.src, KVS_F32, d, cap, G, 0);
        if (st == KVS_OK) st = bench_new_tensor(b, &s.dst, KVS_F32, d, n, G, 0);
    } else {
        if (st == KVS_OK) st = bench_new_tensor(b, &s.dst, KVS_F32, d, cap, G, 0);
    }
    if (st == KVS_OK) st = bench_time_op(b, run_rows, &s, &sec);
    bench_finish_row(b, r, st, sec);
    bench_destroy_all(&s.src, 3);
}

/* ---- the suite -------------------------------------------------------------------------------- */

void bench_run_suite(bench *b) {
    const int q = b->quick;
    if (!b->json) {
        printf("\n%-10s %-48s %10s %9s %-7s %6s\n", "op", "shape", "ms", "rate", "unit", "/peak");
        printf("%-10s %-48s %10s %9s %-7s %6s\n", "----------", "------------------------------------------------", "----------",
               "---------", "-------", "------");
    }
    /* dense matmul and decode-shape GEMV */
    case_matmul(b, KVS_F32, q ? 256 : 1024, q ? 256 : 1024, q ? 256 : 1024);
    case_matmul(b, KVS_F32, q ? 1024 : 4096, q ? 1024 : 4096, 1);
    case_matmul(b, KVS_F16, q ? 1024 : 4096, q ? 1024 : 4096, 1);
    case_matmul(b, KVS_BF16, q ? 1024 : 4096, q ? 1024 : 4096, 1);
    /* the same GEMV with W (128 MiB) far beyond any L3: a 4096 x 4096 f16/bf16 W is 32 MiB, on
     * 32 MiB-L3 CPUs partly cache-resident from call to call, so its rate moves with the neighbours'
     * use of L3 (0.5-3x the memcpy peak on the 2-core EPYC); this one is DRAM against DRAM, timed
     * side by side with a 64 MiB copy (its ratio is against that copy, as the attn-kvq rows') */
    if (!q) {
        bench_copy *gcp = NULL;
        case_matmul_cp(b, &gcp, KVS_F16, 16384, 4096, 1);
        case_matmul_cp(b, &gcp, KVS_BF16, 16384, 4096, 1);
        bench_copy_free(gcp);
    }
    /* decode GEMV of common block-quantized weights (GB/s of weight bytes; README's weight types) */
    static const kvs_dtype gemv_quant[] = {KVS_Q4_0, KVS_Q4_K, KVS_Q6_K, KVS_Q8_0};
    for (size_t i = 0; i < sizeof gemv_quant / sizeof gemv_quant[0]; i++)
        case_matmul(b, gemv_quant[i], q ? 1024 : 4096, q ? 1024 : 4096, 1);
    /* the other 32-value types, and 4 x rows (a QuantSpec verify step of draft 3), one pass over W */
    if (!q) {
        static const kvs_dtype gemv_b32[] = {KVS_Q4_1, KVS_Q5_0, KVS_Q5_1, KVS_IQ4_NL};
        for (size_t i = 0; i < sizeof gemv_b32 / sizeof gemv_b32[0]; i++) case_matmul(b, gemv_b32[i], 4096, 4096, 1);
        case_matmul(b, KVS_Q4_0, 4096, 4096, 4);
        case_matmul(b, KVS_Q8_0, 4096, 4096, 4);
    }

    /* attention: prefill / diffusion block (n_q = n_kv), bidirectional; one causal row; decode */
    if (q) {
        case_attention(b, 512, 512, 64, 8, 4, 0, 0);
        case_attention(b, 512, 512, 128, 8, 8, 0, 0);
        case_attention(b, 512, 512, 64, 8, 8, 1, 0);
        case_attention(b, 1, 1024, 64, 8, 4, 0, 0);
    } else {
        static const int64_t ns[] = {512, 1024, 2048, 4096};
        double last[2][2] = {{0}}; /* seconds of the previous size per (d, gqa) series */
        for (int di = 0; di < 2; di++)
            for (int ni = 0; ni < 4; ni++)
                for (int g = 0; g < 2; g++)
                    last[di][g] = case_attention(b, ns[ni], ns[ni], di ? 128 : 64, 8, g ? 4 : 8, 0,
                                                 last[di][g] > b->budget_s);
        case_attention(b, 2048, 2048, 64, 8, 8, 1, 0);
        case_attention(b, 1, 4096, 64, 8, 4, 0, 0);
        case_attention(b, 1, 4096, 128, 8, 8, 0, 0);
    }
    /* decode attention over a long cache per cache type (issue 17: GB/s of cache bytes read; the
     * block types count their scales): f16 / q8_0 / q4_0 at n_kv 4k, 16k, 32k (quick: 4k), head_dim
     * 128 (32/8 heads) and 64 (16/4), GQA groups of 4, each side by side with a memcpy (CPU) */
    {
        bench_copy *cp = NULL;
        static const kvs_dtype t3[] = {KVS_F16, KVS_Q8_0, KVS_Q4_0};
        static const int64_t nks[] = {4096, 16384, 32768};
        /* extra rows for the block types under the other query precision of this CPU's attention
         * (attention_q8.h): the 8-bit variant avx512-vnni, else avx2-q8 (also when KVS_VARIANT forces
         * an avx2 attention), and its f32-query twin avx512 / avx2. The plain rows run the automatic
         * choice (or KVS_VARIANT's), which is the 8-bit one on a VNNI CPU and on an AVX2 one (not on
         * AVX-512 without VNNI): the extra rows then run the f32 twin (the bit-compatible reference),
         * else the 8-bit variant; none without either */
        const char *env = getenv("KVS_VARIANT"), *v8 = NULL, *vf = NULL;
        if (kvs_device_backend(b->dev) == KVS_BACKEND_CPU) {
            if (!(env && strstr(env, "attention:avx2")) && kvs_device_set_variants(b->dev, "attention:avx512-vnni") == KVS_OK)
                v8 = "avx512-vnni", vf = "avx512";
            else if (kvs_device_set_variants(b->dev, "attention:avx2-q8") == KVS_OK)
                v8 = "avx2-q8", vf = "avx2";
            const int forced = env && strstr(env, "attention:") && !strstr(env, "attention:auto");
            const int plain_q8 = forced ? strstr(env, "attention:avx512-vnni") || strstr(env, "attention:avx2-q8")
                                        : v8 && (strcmp(v8, "avx512-vnni") == 0 ||
                                                 kvs_device_set_variants(b->dev, "attention:avx512") != KVS_OK);
            if (plain_q8) v8 = vf;
            kvs_clear_error();
        }
        for (int di = 0; di < 2; di++)
            for (int ni = 0; ni < (q ? 1 : 3); ni++)
                for (int ti = 0; ti < 3; ti++)
                    for (int vi = 0; vi < (ti && v8 ? 2 : 1); vi++) {
                        char spec[48];
                        snprintf(spec, sizeof spec, "attention:%s", vi ? v8 : "auto");
                        if (v8 && kvs_device_set_variants(b->dev, spec) == KVS_OK && !vi && env)
                            (void)kvs_device_set_variants(b->dev, env); /* the user's choice for the plain rows */
                        case_attn_kvq(b, &cp, nks[ni], di ? 64 : 128, di ? 16 : 32, di ? 4 : 8, t3[ti], vi ? v8 : NULL);
                    }
        /* QuantSpec's cache, n_kv 16k (quick: 4k), head_dim 128: qh8 (the verify's 8-bit read of both
         * planes, 36 bytes per 32 values) and q4_1 (the draft's 4-bit view: the upper planes alone),
         * automatic and under the other query precision (above) */
        static const kvs_dtype tq[] = {KVS_QH8, KVS_Q4_1};
        for (int ti = 0; ti < 2; ti++)
            for (int vi = 0; vi < (v8 ? 2 : 1); vi++) {
                char spec[48];
                snprintf(spec, sizeof spec, "attention:%s", vi ? v8 : "auto");
                if (v8 && kvs_device_set_variants(b->dev, spec) == KVS_OK && !vi && env)
                    (void)kvs_device_set_variants(b->dev, env);
                case_attn_kvq(b, &cp, q ? 4096 : 16384, 128, 32, 8, tq[ti], vi ? v8 : NULL);
            }
        if (v8) {
            (void)kvs_device_set_variants(b->dev, "attention:auto");
            if (env) (void)kvs_device_set_variants(b->dev, env);
            kvs_clear_error();
        }
        bench_copy_free(cp);
    }
    /* the f32 cache and QuantSpec's qh8 at n_kv 16k (quick: 4k), GQA 32/8 heads of 128 */
    {
        const int64_t nk = q ? 4096 : 16384;
        case_attention_kv(b, 1, nk, 128, 32, 8, 0, 0, KVS_F32, KVS_F32, 0);
        /* QuantSpec's qh8 cache: the verify's 8-bit read and the draft's 4-bit view (half the bytes) */
        case_attention_kv(b, 1, nk, 128, 32, 8, 0, 0, KVS_QH8, KVS_QH8, 0);
        case_attention_kv(b, 1, nk, 128, 32, 8, 0, 0, KVS_QH8, KVS_QH8, 1);
    }

    /* wavelets along the token axis */
    const int64_t dr = q ? 16 : 64, dn = q ? 16384 : 65536;
    case_dwt(b, KVS_WAVELET_HAAR, 3, dr, dn, 0);
    case_dwt(b, KVS_WAVELET_DB4, 3, dr, dn, 0);
    case_dwt(b, KVS_WAVELET_DB4, 3, dr, dn, 1);

    /* top-k per row and global */
    case_topk(b, q ? 16 : 64, q ? 16384 : 65536, q ? 256 : 1024);
    if (q) {
        case_topk(b, 0, (int64_t)1 << 18, 1024);
    } else {
        case_topk(b, 0, (int64_t)1 << 20, 4096);
        case_topk(b, 0, (int64_t)1 << 22, 4096);
    }

    /* cache rows: one layer [8 kv heads][capacity][head_dim] */
    const int64_t cap = q ? 1024 : 4096, hd = q ? 64 : 128;
    case_rows(b, OP_GATHER, 8, cap, hd, cap / 2);
    case_rows(b, OP_COMPACT, 8, cap, hd, cap / 2);
    case_rows(b, OP_SCATTER, 8, cap, hd, q ? 128 : 512);
}
