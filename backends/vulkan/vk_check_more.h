/* Further checks of vk_check.c (rope, attention, dwt, top-k, rows), included once. */

static void rope_ref(double *x, int64_t hd, int n_rot, int neox, double pos, double base, double fs) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = pos * fs * pow(base, -2.0 * i / n_rot);
        int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        double a = x[ia], b = x[ib];
        x[ia] = a * cos(th) - b * sin(th);
        x[ib] = a * sin(th) + b * cos(th);
    }
    (void)hd;
}

static void t_rope(int64_t n, int64_t heads, int64_t hd, int n_rot, int neox, int maxpos) {
    int64_t tot = n * heads * hd;
    float *x = malloc(tot * 4);
    double *r = malloc(tot * 8);
    int32_t *pos = malloc(n * 4);
    for (int64_t i = 0; i < tot; i++) x[i] = frand(-2, 2);
    for (int64_t i = 0; i < n; i++) pos[i] = (int32_t)(urand() * maxpos);
    kvs_tensor *tx = mkf(x, hd, heads, n), *tp = mki(pos, n, 0, 0);
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = neox ? KVS_ROPE_NEOX : KVS_ROPE_ADJACENT;
    p.n_rot = n_rot;
    p.freq_scale = 0.5f;
    CK(kvs_rope(dev, tx, tp, &p));
    float *y = dl(tx);
    for (int64_t i = 0; i < tot; i++) r[i] = x[i];
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < heads; h++) rope_ref(r + (t * heads + h) * hd, hd, n_rot ? n_rot : (int)hd, neox, pos[t], 10000.0, 0.5);
    char nm[80];
    snprintf(nm, sizeof nm, "rope %s n=%lld h=%lld d=%lld rot=%d maxpos=%d", neox ? "neox" : "adj", (long long)n,
             (long long)heads, (long long)hd, n_rot, maxpos);
    cmp(nm, y, r, tot, 2e-6, 2e-6);
    free(y), free(x), free(r), free(pos);
    kvs_tensor_destroy(&tx), kvs_tensor_destroy(&tp);
}

static void t_rope_shift(kvs_dtype dt, int64_t kvh, int64_t cap, int64_t hd, int64_t n_rows, int neox) {
    int64_t tot = kvh * cap * hd;
    float *x = malloc(tot * 4);
    double *r = malloc(tot * 8);
    int32_t *del = malloc(kvh * cap * 4);
    for (int64_t i = 0; i < tot; i++) x[i] = frand(-2, 2);
    for (int64_t i = 0; i < kvh * cap; i++) del[i] = (int32_t)(urand() * 20000) - 10000;
    kvs_tensor *tf = mkf(x, hd, cap, kvh), *tk = mk(dt, hd, cap, kvh), *tp = mki(del, cap, kvh, 0);
    CK(kvs_copy(dev, tf, tk));
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = neox ? KVS_ROPE_NEOX : KVS_ROPE_ADJACENT;
    CK(kvs_rope_shift(dev, tk, tp, n_rows, &p));
    CK(kvs_copy(dev, tk, tf));
    float *y = dl(tf);
    for (int64_t i = 0; i < tot; i++) r[i] = conv_ref(x[i], dt);
    for (int64_t h = 0; h < kvh; h++)
        for (int64_t j = 0; j < n_rows; j++) {
            double *v = r + (h * cap + j) * hd;
            rope_ref(v, hd, (int)hd, neox, del[h * cap + j], 10000.0, 1.0);
            if (dt == KVS_F16)
                for (int64_t c = 0; c < hd; c++) v[c] = kvs_f16_to_f32(kvs_f32_to_f16((float)v[c]));
        }
    char nm[80];
    snprintf(nm, sizeof nm, "rope_shift %s kvh=%lld cap=%lld d=%lld rows=%lld", kvs_dtype_name(dt), (long long)kvh,
             (long long)cap, (long long)hd, (long long)n_rows);
    cmp(nm, y, r, tot, dt == KVS_F16 ? 2e-3 : 2e-6, dt == KVS_F16 ? 2e-3 : 2e-6);
    free(y), free(x), free(r), free(del);
    kvs_tensor_destroy(&tf), kvs_tensor_destroy(&tk), kvs_tensor_destroy(&tp);
}

#include "vk_check_attn.h"
#include "vk_check_dwt.h"
#include "vk_check_rows.h"
#include "vk_check_topk.h"

/* A tensor beyond maxStorageBufferRange: ops must refuse it with KVS_ERR_UNSUPPORTED naming the
 * limit (uploads and downloads still work). */
static void t_big(void) {
    const kvs_caps *c = kvs_device_caps(dev);
    int64_t n = c->max_binding_bytes / 4 + 1024;
    if ((double)n * 4 > 1.0e9) return;
    kvs_tensor *a = mk(KVS_F32, n, 0, 0), *b = mk(KVS_F32, n, 0, 0);
    kvs_status s = kvs_add(dev, a, a, b);
    cases++;
    int ok = s == KVS_ERR_UNSUPPORTED && strstr(kvs_last_error(), "maxStorageBufferRange");
    if (!ok) failures++;
    printf("  %s add beyond maxStorageBufferRange -> %s: %s\n", ok ? "ok  " : "FAIL", kvs_status_name(s), kvs_last_error());
    kvs_tensor_destroy(&a), kvs_tensor_destroy(&b);
}

static void more_tests(void) {
    if (want("big")) t_big();
    if (want("rope")) {
        t_rope(1, 1, 2, 0, 0, 10);
        t_rope(13, 3, 64, 0, 0, 100000);
        t_rope(13, 3, 64, 32, 1, 4096);
        t_rope(7, 2, 18, 10, 0, 1000000);
        t_rope_shift(KVS_F32, 2, 33, 64, 20, 0);
        t_rope_shift(KVS_F16, 3, 13, 6, 13, 1);
        t_rope_shift(KVS_F16, 2, 9, 64, 5, 0);
    }
    attn_tests();
    dwt_tests();
    rows_tests();
    topk_tests();
}
