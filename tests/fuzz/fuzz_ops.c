/* Fuzz target: one op call decoded from the input, run on the CPU device and compared with the
 * float64 reference (tests/reference.c). Byte 0 picks the op:
 *   even: kvs_attention — n_q 1..8, n_kv_heads 1..4, group 1..4 (n_heads = group * n_kv_heads),
 *         head_dim 1..40 (even), capacity 1..48, n_kv <= capacity, causal, an additive mask
 *         (0, small integers, -inf), ragged kv_len and row_len, F32 or F16 K/V, key_mass / argmax /
 *         row_max / row_sum outputs; q and k small integers, so equal logits are exactly equal
 *         on both sides and argmax ties are well defined.
 *   odd:  kvs_topk — rows 1..4, n 1..300, k 1..n, by score or by index, row_len; values small
 *         integers (ties) with NaN, -inf and +inf mixed in. Indices and values must match exactly.
 * Tolerance (attention): |out - ref| <= 1e-4 (1 + |ref|) after scaling by max |v|; key_mass likewise.
 * Seeds: tests/data/fuzz/corpus/ops. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kvsieve/kvsieve.h"
#include "reference.h"

static kvs_device *g_dev;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    kvs_device_params p = kvs_device_params_default();
    p.n_threads = 1;
    if (kvs_device_open(&g_dev, &p) != KVS_OK) fuzz_fail("cannot open the CPU device: %s", kvs_last_error());
    return 0;
}

static kvs_tensor *mk(kvs_dtype dt, int64_t a, int64_t b, int64_t c, const void *host) {
    kvs_tensor *t = NULL;
    if (kvs_tensor_new(&t, g_dev, dt, a, b, c, 0) != KVS_OK) fuzz_fail("tensor: %s", kvs_last_error());
    if (host && kvs_tensor_upload(t, host, 0, kvs_tensor_nbytes(t)) != KVS_OK) fuzz_fail("upload: %s", kvs_last_error());
    return t;
}

static void down(const kvs_tensor *t, void *host) {
    if (kvs_tensor_download(t, host, 0, kvs_tensor_nbytes(t)) != KVS_OK) fuzz_fail("download: %s", kvs_last_error());
}

static int close_to(double got, double want, double scale) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= 1e-4 * (scale + fabs(want));
}

static void fuzz_attention(fuzz_in *in) {
    int n_q = fuzz_range(in, 1, 8), hkv = fuzz_range(in, 1, 4), grp = fuzz_range(in, 1, 4);
    int hd = 2 * fuzz_range(in, 1, 20), cap = fuzz_range(in, 1, 48);
    int n_kv = fuzz_range(in, 1, cap), nh = hkv * grp;
    uint8_t fl = fuzz_u8(in);
    int causal = fl & 1, use_mask = fl & 2, use_kvlen = fl & 4, use_rowlen = fl & 8, f16 = fl & 16,
        want_mass = fl & 32;
    size_t nqv = (size_t)n_q * nh * hd, nkv = (size_t)hkv * cap * hd;
    float *q = malloc(nqv * 4), *k = malloc(nkv * 4), *v = malloc(nkv * 4), *mask = malloc((size_t)n_q * n_kv * 4);
    uint16_t *k16 = malloc(nkv * 2), *v16 = malloc(nkv * 2);
    double *qd = malloc(nqv * 8), *kd = malloc(nkv * 8), *vd = malloc(nkv * 8), *md = malloc((size_t)n_q * n_kv * 8);
    int32_t kvlen[4], rowlen[8];
    if (!q || !k || !v || !mask || !k16 || !v16 || !qd || !kd || !vd || !md) fuzz_fail("out of memory");
    for (size_t i = 0; i < nqv; i++) qd[i] = q[i] = (float)((int)(fuzz_u8(in) % 9) - 4);
    double vmax = 1;
    for (size_t i = 0; i < nkv; i++) {
        k[i] = (float)((int)(fuzz_u8(in) % 9) - 4);
        v[i] = (float)((int)fuzz_u8(in) - 128) / 16.0f;
        k16[i] = kvs_f32_to_f16(k[i]);
        v16[i] = kvs_f32_to_f16(v[i]);
        kd[i] = k[i];
        vd[i] = v[i];
        if (fabs(vd[i]) > vmax) vmax = fabs(vd[i]);
    }
    for (int i = 0; i < n_q * n_kv; i++) {
        uint8_t b = fuzz_u8(in);
        md[i] = mask[i] = b >= 224 ? -INFINITY : (b < 160 ? 0.0f : (float)((int)(b % 5) - 2));
    }
    for (int h = 0; h < hkv; h++) kvlen[h] = fuzz_range(in, 0, n_kv);
    for (int i = 0; i < n_q; i++) rowlen[i] = fuzz_range(in, 0, cap);

    kvs_tensor *tq = mk(KVS_F32, hd, nh, n_q, q);
    kvs_tensor *tk = f16 ? mk(KVS_F16, hd, cap, hkv, k16) : mk(KVS_F32, hd, cap, hkv, k);
    kvs_tensor *tv = f16 ? mk(KVS_F16, hd, cap, hkv, v16) : mk(KVS_F32, hd, cap, hkv, v);
    kvs_tensor *to = mk(KVS_F32, hd, nh, n_q, NULL);
    kvs_tensor *tm = use_mask ? mk(KVS_F32, n_kv, n_q, 0, mask) : NULL;
    kvs_tensor *tkl = use_kvlen ? mk(KVS_I32, hkv, 0, 0, kvlen) : NULL;
    kvs_tensor *trl = use_rowlen ? mk(KVS_I32, n_q, 0, 0, rowlen) : NULL;
    kvs_tensor *tmass = want_mass ? mk(KVS_F32, cap, hkv, 0, NULL) : NULL;
    kvs_tensor *targ = mk(KVS_I32, nh, n_q, 0, NULL), *tmax = mk(KVS_F32, nh, n_q, 0, NULL), *tsum = mk(KVS_F32, nh, n_q, 0, NULL);
    if (tmass) kvs_tensor_fill(tmass, 0.0);
    kvs_attention_params p = kvs_attention_params_default();
    p.causal = causal;
    p.n_kv = n_kv;
    p.mask = tm;
    p.kv_len = tkl;
    p.row_len = trl;
    p.key_mass = tmass;
    p.argmax = targ;
    p.row_max = tmax;
    p.row_sum = tsum;
    kvs_status s = kvs_attention(g_dev, tq, tk, tv, to, &p);
    if (s != KVS_OK)
        fuzz_fail("attention n_q %d heads %d/%d hd %d cap %d n_kv %d flags %#x refused: %s", n_q, nh, hkv, hd, cap, n_kv, fl,
                  kvs_last_error());
    size_t nrow = (size_t)n_q * nh;
    float *out = malloc(nqv * 4), *mass = malloc((size_t)hkv * cap * 4), *rmax = malloc(nrow * 4), *rsum = malloc(nrow * 4);
    int32_t *arg = malloc(nrow * 4);
    double *o_ref = malloc(nqv * 8), *m_ref = calloc((size_t)hkv * cap, 8), *rmax_ref = malloc(nrow * 8),
           *rsum_ref = malloc(nrow * 8);
    int32_t *arg_ref = malloc(nrow * 4);
    if (!out || !mass || !rmax || !rsum || !arg || !o_ref || !m_ref || !rmax_ref || !rsum_ref || !arg_ref)
        fuzz_fail("out of memory");
    down(to, out);
    down(targ, arg);
    down(tmax, rmax);
    down(tsum, rsum);
    if (tmass) down(tmass, mass);
    ref_attn r;
    memset(&r, 0, sizeof r);
    r.n_q = n_q;
    r.n_heads = nh;
    r.n_kv_heads = hkv;
    r.head_dim = hd;
    r.capacity = cap;
    r.n_kv = n_kv;
    r.scale = 1.0 / sqrt((double)hd);
    r.causal = causal;
    r.q = qd;
    r.k = kd;
    r.v = vd;
    r.kv_len = use_kvlen ? kvlen : NULL;
    r.row_len = use_rowlen ? rowlen : NULL;
    r.mask = use_mask ? md : NULL;
    r.out = o_ref;
    r.key_mass = want_mass ? m_ref : NULL;
    r.argmax = arg_ref;
    r.row_max = rmax_ref;
    r.row_sum = rsum_ref;
    ref_attention(&r);
    for (size_t i = 0; i < nqv; i++)
        if (!close_to(out[i], o_ref[i], vmax))
            fuzz_fail("attention out[%zu] = %.9g, reference %.9g (n_q %d heads %d/%d hd %d cap %d n_kv %d flags %#x)", i,
                      (double)out[i], o_ref[i], n_q, nh, hkv, hd, cap, n_kv, fl);
    for (size_t i = 0; i < nrow; i++) {
        if (arg[i] != arg_ref[i]) fuzz_fail("attention argmax[%zu] = %d, reference %d (flags %#x)", i, arg[i], arg_ref[i], fl);
        if (arg_ref[i] >= 0 && (!close_to(rmax[i], rmax_ref[i], 1) || !close_to(rsum[i], rsum_ref[i], 1)))
            fuzz_fail("attention row %zu: max/sum %.9g/%.9g, reference %.9g/%.9g", i, (double)rmax[i], (double)rsum[i],
                      rmax_ref[i], rsum_ref[i]);
    }
    if (want_mass)
        for (int h = 0; h < hkv; h++)
            for (int64_t j = 0; j < ref_attn_valid(&r, h); j++)
                if (!close_to(mass[h * cap + j], m_ref[h * cap + j], 1))
                    fuzz_fail("attention key_mass[%d][%lld] = %.9g, reference %.9g", h, (long long)j,
                              (double)mass[h * cap + j], m_ref[h * cap + j]);
    kvs_tensor *all[] = {tq, tk, tv, to, tm, tkl, trl, tmass, targ, tmax, tsum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvs_tensor_destroy(&all[i]);
    free(q), free(k), free(v), free(mask), free(k16), free(v16), free(qd), free(kd), free(vd), free(md);
    free(out), free(mass), free(rmax), free(rsum), free(arg), free(o_ref), free(m_ref), free(rmax_ref), free(rsum_ref),
        free(arg_ref);
}

static void fuzz_topk(fuzz_in *in) {
    int rows = fuzz_range(in, 1, 4), n = fuzz_range(in, 1, 300), k = fuzz_range(in, 1, n);
    uint8_t fl = fuzz_u8(in);
    int by_index = fl & 1, use_rowlen = fl & 2;
    float *x = malloc((size_t)rows * n * 4), *val = malloc((size_t)rows * k * 4), *val_ref = malloc((size_t)k * 4);
    int32_t *idx = malloc((size_t)rows * k * 4), *idx_ref = malloc((size_t)k * 4), rowlen[4];
    if (!x || !val || !val_ref || !idx || !idx_ref) fuzz_fail("out of memory");
    for (int i = 0; i < rows * n; i++) {
        uint8_t b = fuzz_u8(in);
        x[i] = b == 255 ? NAN : b == 254 ? -INFINITY : b == 253 ? INFINITY : (float)((int)(b % 16) - 8);
    }
    for (int r = 0; r < rows; r++) rowlen[r] = fuzz_range(in, 0, n);
    kvs_tensor *tx = mk(KVS_F32, n, rows, 0, x), *ti = mk(KVS_I32, k, rows, 0, NULL), *tv = mk(KVS_F32, k, rows, 0, NULL);
    kvs_tensor *tr = use_rowlen ? mk(KVS_I32, rows, 0, 0, rowlen) : NULL;
    kvs_topk_params p = kvs_topk_params_default();
    p.k = k;
    p.order_by_index = by_index;
    p.row_len = tr;
    if (kvs_topk(g_dev, tx, ti, tv, &p) != KVS_OK)
        fuzz_fail("topk rows %d n %d k %d flags %#x refused: %s", rows, n, k, fl, kvs_last_error());
    down(ti, idx);
    down(tv, val);
    for (int r = 0; r < rows; r++) {
        ref_topk(x + (size_t)r * n, n, use_rowlen ? rowlen[r] : n, k, by_index, idx_ref, val_ref);
        for (int j = 0; j < k; j++) {
            int32_t gi = idx[r * k + j];
            float gv = val[r * k + j];
            int same_v = (isnan(gv) && isnan(val_ref[j])) || gv == val_ref[j];
            if (gi != idx_ref[j] || !same_v)
                fuzz_fail("topk rows %d n %d k %d flags %#x row %d slot %d: (%d, %g), reference (%d, %g)", rows, n, k, fl, r, j,
                          gi, (double)gv, idx_ref[j], (double)val_ref[j]);
        }
    }
    kvs_tensor_destroy(&tx);
    kvs_tensor_destroy(&ti);
    kvs_tensor_destroy(&tv);
    kvs_tensor_destroy(&tr);
    free(x), free(val), free(val_ref), free(idx), free(idx_ref);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dev) LLVMFuzzerInitialize(NULL, NULL);
    fuzz_in in = {data, size};
    if (size == 0) return 0;
    if (fuzz_u8(&in) & 1) fuzz_topk(&in);
    else fuzz_attention(&in);
    return 0;
}
