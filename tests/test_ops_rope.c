/* Suite "rope": kvs_rope (adjacent and NeoX pairing, n_rot < head_dim, freq_scale, theta_base) and
 * kvs_rope_shift (f32 and f16 caches; rows >= n_rows untouched; composition R(a)R(b) = R(a+b)).
 *
 * Tolerances: rotated values nmse <= 1e-7 (angles are f32 by contract: for positions <= 8192 the
 * angle error pos*2^-24 gives nmse ~1e-8 at most); dims >= n_rot must pass through bit-exactly.
 * f16 caches: nmse <= 1e-6 against the reference rotation of the decoded f16 input (the f16
 * output rounding alone contributes ~1e-7).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

#define BEGIN_LOOP(name)                                                                            \
    char tname_[64];                                                                                \
    snprintf(tname_, sizeof tname_, "%s#%d", name, _i);                                             \
    t_begin(tname_)

typedef struct rope_case {
    int n, heads, head_dim;
    kvs_rope_mode mode;
    int n_rot;
    float base, freq_scale;
    int maxpos;
} rope_case;

static const rope_case rope_cases[] = {
    {1, 1, 2, KVS_ROPE_ADJACENT, 0, 10000.0f, 1.0f, 10},
    {13, 4, 64, KVS_ROPE_ADJACENT, 0, 10000.0f, 1.0f, 4096},
    {13, 4, 64, KVS_ROPE_NEOX, 0, 10000.0f, 1.0f, 4096},
    {7, 3, 128, KVS_ROPE_NEOX, 64, 500000.0f, 1.0f, 8192},
    {33, 2, 96, KVS_ROPE_ADJACENT, 32, 10000.0f, 0.25f, 8192},
    {5, 8, 8, KVS_ROPE_ADJACENT, 0, 10000.0f, 1.0f, 512},
    {100, 1, 64, KVS_ROPE_NEOX, 0, 1000000.0f, 1.0f, 2048},
    {9, 5, 80, KVS_ROPE_ADJACENT, 20, 10000.0f, 4.0f, 1000},
};

static const char *mode_name(kvs_rope_mode m) { return m == KVS_ROPE_NEOX ? "neox" : "adjacent"; }

static void rope_run(int _i) {
    (void)_i;
    const rope_case *c = &rope_cases[_i];
    t_case("rope n=%d heads=%d head_dim=%d mode=%s n_rot=%d base=%g freq_scale=%g maxpos=%d", c->n, c->heads,
           c->head_dim, mode_name(c->mode), c->n_rot, (double)c->base, (double)c->freq_scale, c->maxpos);
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = c->mode;
    p.n_rot = c->n_rot;
    p.theta_base = c->base;
    p.freq_scale = c->freq_scale;
    int64_t hd = c->head_dim, nel = (int64_t)c->n * c->heads * hd;
    float *x = t_alloc(4 * (size_t)nel), *y = t_alloc(4 * (size_t)nel);
    t_fill_normal(x, nel, 1.0);
    int32_t *pos = t_alloc(4 * (size_t)c->n);
    for (int i = 0; i < c->n; i++) pos[i] = (int32_t)t_rand_int(0, c->maxpos);
    pos[0] = c->n > 1 ? 0 : c->maxpos;
    if (c->n > 2) pos[2] = pos[1]; /* repeated position */
    tt *xt = t_new3(KVS_F32, hd, c->heads, c->n), *pt = t_new1(KVS_I32, c->n);
    t_upload_f32(xt, x);
    t_upload_i32(pt, pos);
    double *ref = t_alloc(sizeof(double) * (size_t)nel);
    for (int64_t i = 0; i < nel; i++) ref[i] = x[i];
    for (int i = 0; i < c->n; i++)
        for (int h = 0; h < c->heads; h++) ref_rope_vec(ref + ((int64_t)i * c->heads + h) * hd, hd, pos[i], &p);
    if (!t_op(kvs_rope(t_dev(), xt->t, pt->t, &p))) {
        t_download(xt, y);
        t_check_nmse("x", y, ref, nel, 1e-7);
        int64_t n_rot = c->n_rot ? c->n_rot : hd;
        for (int64_t v = 0; v < nel / hd; v++)
            for (int64_t j = n_rot; j < hd; j++)
                T_ASSERT(memcmp(&y[v * hd + j], &x[v * hd + j], 4) == 0,
                         "vector %lld dim %lld >= n_rot must pass unchanged: got %.9g want %.9g", (long long)v,
                         (long long)j, (double)y[v * hd + j], (double)x[v * hd + j]);
        t_assert_unchanged(pt, "pos");
    }
}

START_TEST(test_rope) {
    BEGIN_LOOP("rope");
    rope_run(_i);
    t_end();
}
END_TEST

typedef struct shift_case {
    int kv_heads, capacity, n_rows, head_dim;
    kvs_dtype dt;
    kvs_rope_mode mode;
    int n_rot;
} shift_case;

static const shift_case shift_cases[] = {
    {1, 1, 1, 2, KVS_F32, KVS_ROPE_ADJACENT, 0},   {4, 40, 33, 64, KVS_F32, KVS_ROPE_ADJACENT, 0},
    {2, 13, 13, 64, KVS_F32, KVS_ROPE_NEOX, 0},    {3, 100, 57, 128, KVS_F32, KVS_ROPE_NEOX, 32},
    {4, 40, 33, 64, KVS_F16, KVS_ROPE_ADJACENT, 0}, {2, 129, 100, 96, KVS_F16, KVS_ROPE_NEOX, 48},
    {1, 33, 1, 8, KVS_F16, KVS_ROPE_ADJACENT, 0},
};

static void rope_shift_run(int _i) {
    (void)_i;
    const shift_case *c = &shift_cases[_i];
    t_case("rope_shift kv_heads=%d capacity=%d n_rows=%d head_dim=%d k=%s mode=%s n_rot=%d", c->kv_heads,
           c->capacity, c->n_rows, c->head_dim, kvs_dtype_name(c->dt), mode_name(c->mode), c->n_rot);
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = c->mode;
    p.n_rot = c->n_rot;
    int64_t hd = c->head_dim, cap = c->capacity, nel = (int64_t)c->kv_heads * cap * hd;
    float *k = t_alloc(4 * (size_t)nel);
    t_fill_normal(k, nel, 1.0);
    int32_t *delta = t_alloc(4 * (size_t)(c->kv_heads * cap));
    for (int64_t i = 0; i < c->kv_heads * cap; i++) delta[i] = (int32_t)t_rand_int(-2000, 2000);
    delta[0] = 0;
    tt *kt = t_new3(c->dt, hd, cap, c->kv_heads), *dt = t_new1(KVS_I32, c->kv_heads * cap);
    t_upload_as(kt, k);
    t_upload_i32(dt, delta);
    unsigned char *before = t_alloc(kt->nbytes);
    memcpy(before, kt->shadow + kt->guard, kt->nbytes);
    double *ref = t_alloc(sizeof(double) * (size_t)nel);
    for (int64_t i = 0; i < nel; i++) ref[i] = ref_round_to(c->dt, k[i]);
    for (int h = 0; h < c->kv_heads; h++)
        for (int64_t j = 0; j < c->n_rows; j++) ref_rope_vec(ref + (h * cap + j) * hd, hd, delta[h * cap + j], &p);
    if (!t_op(kvs_rope_shift(t_dev(), kt->t, dt->t, c->n_rows, &p))) {
        double *got = t_alloc(sizeof(double) * (size_t)nel);
        float *gotf = t_alloc(4 * (size_t)nel);
        unsigned char *after = t_alloc(kt->nbytes);
        t_download(kt, after);
        t_download_f64(kt, got);
        for (int64_t i = 0; i < nel; i++) gotf[i] = (float)got[i];
        t_check_nmse("k", gotf, ref, nel, c->dt == KVS_F32 ? 1e-7 : 1e-6);
        size_t esz = kvs_dtype_bytes(c->dt, 1), row = esz * (size_t)hd;
        for (int h = 0; h < c->kv_heads; h++)
            for (int64_t j = c->n_rows; j < cap; j++)
                T_ASSERT(memcmp(after + (h * cap + j) * row, before + (h * cap + j) * row, row) == 0,
                         "head %d row %lld >= n_rows=%d was modified", h, (long long)j, c->n_rows);
        t_assert_unchanged(dt, "delta");
    }
}

START_TEST(test_rope_shift) {
    BEGIN_LOOP("rope_shift");
    rope_shift_run(_i);
    t_end();
}
END_TEST

/* rope(x, pos) then rope_shift by delta equals rope(x, pos + delta): the property eviction with
 * position re-use relies on. x: [n][1][hd] viewed as the cache [1][n][hd]. */
static void rope_compose_run(int _i) {
    (void)_i;
    kvs_rope_mode mode = _i ? KVS_ROPE_NEOX : KVS_ROPE_ADJACENT;
    const int n = 33, hd = 64;
    t_case("rope_compose n=%d head_dim=%d mode=%s", n, hd, mode_name(mode));
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = mode;
    float *x = t_alloc(4 * (size_t)n * hd), *a = t_alloc(4 * (size_t)n * hd), *b = t_alloc(4 * (size_t)n * hd);
    t_fill_normal(x, (int64_t)n * hd, 1.0);
    int32_t *pos = t_alloc(4 * n), *delta = t_alloc(4 * n), *sum = t_alloc(4 * n);
    for (int i = 0; i < n; i++) {
        pos[i] = (int32_t)t_rand_int(0, 3000);
        delta[i] = (int32_t)t_rand_int(-pos[i], 1000);
        sum[i] = pos[i] + delta[i];
    }
    tt *x1 = t_new3(KVS_F32, hd, 1, n), *x2 = t_new3(KVS_F32, hd, 1, n);
    tt *pt = t_new1(KVS_I32, n), *dt = t_new1(KVS_I32, n), *st = t_new1(KVS_I32, n);
    t_upload_f32(x1, x);
    t_upload_f32(x2, x);
    t_upload_i32(pt, pos);
    t_upload_i32(dt, delta);
    t_upload_i32(st, sum);
    if (t_op(kvs_rope(t_dev(), x1->t, pt->t, &p))) return;
    kvs_tensor *cache = NULL;
    int64_t ne[3] = {hd, n, 1};
    ck_assert(kvs_tensor_view(&cache, x1->t, 0, 3, ne) == KVS_OK);
    int skip = t_op(kvs_rope_shift(t_dev(), cache, dt->t, n, &p));
    kvs_tensor_destroy(&cache);
    if (skip) return;
    if (t_op(kvs_rope(t_dev(), x2->t, st->t, &p))) return;
    t_download(x1, a);
    t_download(x2, b);
    double *bd = t_alloc(sizeof(double) * (size_t)n * hd);
    for (int i = 0; i < n * hd; i++) bd[i] = b[i];
    t_check_nmse("shift(rope(x,pos),delta) vs rope(x,pos+delta)", a, bd, (int64_t)n * hd, 1e-7);
}

START_TEST(test_rope_compose) {
    BEGIN_LOOP("rope_compose");
    rope_compose_run(_i);
    t_end();
}
END_TEST

/* Calls on one device whose positions grow from call to call (a decode's pattern: the CPU backend
 * keeps the tables of the positions it has seen for the last parameters), then reach past what it
 * keeps, then come back with other parameters, and negative positions: each call against the
 * reference. */
static void rope_grow_run(int _i) {
    (void)_i;
    static const struct {
        int n, maxpos;
        float base;
        int n_rot;
    } calls[] = {{20, 40, 10000.0f, 0}, {50, 300, 10000.0f, 0}, {40, 3000, 10000.0f, 0}, {30, 20000, 10000.0f, 0},
                 {30, 300, 500000.0f, 0}, {30, 300, 10000.0f, 4}, {30, 300, 10000.0f, 0}};
    const int heads = 3, hd = 8;
    t_case("rope_grow heads=%d head_dim=%d, %d calls on one device", heads, hd, (int)(sizeof calls / sizeof calls[0]));
    for (size_t k = 0; k < sizeof calls / sizeof calls[0]; k++) {
        kvs_rope_params p = kvs_rope_params_default();
        p.theta_base = calls[k].base;
        p.n_rot = calls[k].n_rot;
        const int n = calls[k].n;
        int64_t nel = (int64_t)n * heads * hd;
        float *x = t_alloc(4 * (size_t)nel), *y = t_alloc(4 * (size_t)nel);
        t_fill_normal(x, nel, 1.0);
        int32_t *pos = t_alloc(4 * (size_t)n);
        for (int i = 0; i < n; i++) pos[i] = (int32_t)t_rand_int(0, calls[k].maxpos);
        pos[0] = calls[k].maxpos;
        pos[1] = -(int32_t)k - 1;
        tt *xt = t_new3(KVS_F32, hd, heads, n), *pt = t_new1(KVS_I32, n);
        t_upload_f32(xt, x);
        t_upload_i32(pt, pos);
        double *ref = t_alloc(sizeof(double) * (size_t)nel);
        for (int64_t i = 0; i < nel; i++) ref[i] = x[i];
        for (int i = 0; i < n; i++)
            for (int h = 0; h < heads; h++) ref_rope_vec(ref + ((int64_t)i * heads + h) * hd, hd, pos[i], &p);
        if (t_op(kvs_rope(t_dev(), xt->t, pt->t, &p))) return;
        t_download(xt, y);
        char what[48];
        snprintf(what, sizeof what, "x of call %d (maxpos %d)", (int)k, calls[k].maxpos);
        t_check_nmse(what, y, ref, nel, 1e-7);
    }
}

START_TEST(test_rope_grow) {
    BEGIN_LOOP("rope_grow");
    rope_grow_run(_i);
    t_end();
}
END_TEST

static const t_seq test_rope_sequence_seq[] = {{rope_run, (int)(sizeof rope_cases / sizeof rope_cases[0])},
    {rope_shift_run, (int)(sizeof shift_cases / sizeof shift_cases[0])}, {rope_compose_run, 2}, {rope_grow_run, 1}};
T_SEQUENCE_TEST(test_rope_sequence, test_rope_sequence_seq)

Suite *suite_rope(void) {
    Suite *s = suite_create("rope");
    TCase *tc = tcase_create("rope");
    tcase_add_loop_test(tc, test_rope, 0, (int)(sizeof rope_cases / sizeof rope_cases[0]));
    tcase_add_loop_test(tc, test_rope_grow, 0, 1);
    suite_add_tcase(s, tc);
    tc = tcase_create("rope_shift");
    tcase_add_loop_test(tc, test_rope_shift, 0, (int)(sizeof shift_cases / sizeof shift_cases[0]));
    tcase_add_loop_test(tc, test_rope_compose, 0, 2);
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_rope_sequence);
    suite_add_tcase(s, tc);
    return s;
}
