/* Suite "rows": kvs_gather, kvs_scatter (group-major and token-major sources, duplicate indices:
 * highest i wins) and kvs_compact, with shared ([n]) and per-group ([G][n]) index lists, rows of
 * F32, F16, BF16 and I32 (odd row lengths, so rows are not 4-byte multiples), 2-D and 3-D tensors.
 * Copies are bit-exact: compared byte for byte. Rows the op must not write (gather: dst rows >= n;
 * scatter: rows no index names) are checked unchanged, and the guard bands around every tensor.
 * Out-of-range indices: the CPU backend must report KVS_ERR_OUT_OF_RANGE; other backends skip the
 * row (dst row untouched) and return KVS_OK (KVS_ERR_OUT_OF_RANGE also accepted), per ops.h.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"
#include "suites.h"

static void random_bytes(unsigned char *p, size_t n, kvs_dtype dt) {
    /* random finite values of the dtype (NaN payloads could legally be canonicalised by a copy
     * through float registers; bit-exact copies must still hold for all of these) */
    for (size_t i = 0; i < n;) {
        if (dt == KVS_F16 || dt == KVS_BF16) {
            float v = (float)t_rand_normal();
            uint16_t h = dt == KVS_F16 ? ref_f16_bits(v) : ref_bf16_bits(v);
            p[i++] = (unsigned char)h;
            if (i < n) p[i++] = (unsigned char)(h >> 8);
        } else {
            uint32_t w = (uint32_t)t_rand_u64();
            if (dt == KVS_F32 && ((w >> 23) & 0xff) == 0xff) w ^= 0x40000000u; /* no NaN/inf */
            for (int b = 0; b < 4 && i < n; b++) p[i++] = (unsigned char)(w >> (8 * b));
        }
    }
}

typedef struct rows_case {
    int G;        /* 0: 2-D tensors (one group) */
    int Ns, Nd, row;
    kvs_dtype dt;
    int n;
    int shared;   /* idx [n] shared by all groups */
    int token_major, dups; /* scatter only */
} rows_case;

static const rows_case gather_cases[] = {
    {0, 40, 33, 13, KVS_F32, 20, 1, 0, 0},  {3, 40, 33, 13, KVS_F16, 20, 1, 0, 0},
    {3, 40, 33, 13, KVS_F16, 20, 0, 0, 0},  {4, 17, 17, 64, KVS_BF16, 17, 0, 0, 0},
    {2, 100, 50, 7, KVS_I32, 1, 1, 0, 0},   {1, 33, 33, 128, KVS_F32, 33, 0, 0, 0},
    {8, 300, 256, 64, KVS_F16, 200, 0, 0, 0},
};

static int G_of(const rows_case *c) { return c->G ? c->G : 1; }

static tt *new_grouped(const rows_case *c, int64_t rows) {
    return c->G ? t_new3(c->dt, c->row, rows, c->G) : t_new2(c->dt, c->row, rows);
}

static void gather_run(int _i) {
    (void)_i;
    const rows_case *c = &gather_cases[_i];
    t_case("gather G=%d Ns=%d Nd=%d row=%d dtype=%s n=%d idx=%s", c->G, c->Ns, c->Nd, c->row, kvs_dtype_name(c->dt),
           c->n, c->shared ? "shared" : "per-group");
    int G = G_of(c);
    size_t rb = kvs_dtype_bytes(c->dt, c->row);
    unsigned char *src = t_alloc(rb * (size_t)(G * c->Ns)), *dst0 = t_alloc(rb * (size_t)(G * c->Nd));
    unsigned char *got = t_alloc(rb * (size_t)(G * c->Nd));
    random_bytes(src, rb * (size_t)(G * c->Ns), c->dt);
    random_bytes(dst0, rb * (size_t)(G * c->Nd), c->dt);
    int nidx = c->shared ? c->n : G * c->n;
    int32_t *idx = t_alloc(4 * (size_t)nidx);
    for (int i = 0; i < nidx; i++) idx[i] = (int32_t)t_rand_int(0, c->Ns - 1); /* repeats allowed */
    idx[0] = c->Ns - 1;
    tt *st = new_grouped(c, c->Ns), *dt = new_grouped(c, c->Nd);
    tt *it = c->shared ? t_new1(KVS_I32, c->n) : t_new2(KVS_I32, c->n, G);
    t_upload(st, src);
    t_upload(dt, dst0);
    t_upload_i32(it, idx);
    if (!t_op(kvs_gather(t_dev(), st->t, it->t, dt->t))) {
        unsigned char *want = t_alloc(rb * (size_t)(G * c->Nd));
        memcpy(want, dst0, rb * (size_t)(G * c->Nd));
        for (int g = 0; g < G; g++)
            for (int i = 0; i < c->n; i++) {
                int32_t j = idx[c->shared ? i : g * c->n + i];
                memcpy(want + rb * (size_t)(g * c->Nd + i), src + rb * (size_t)(g * c->Ns + j), rb);
            }
        t_download(dt, got);
        for (int g = 0; g < G; g++)
            for (int i = 0; i < c->Nd; i++) {
                size_t off = rb * (size_t)(g * c->Nd + i);
                T_ASSERT(memcmp(got + off, want + off, rb) == 0, "dst[group %d][row %d] %s", g, i,
                         i < c->n ? "differs from src[idx]" : "(>= n) was modified");
            }
        t_assert_unchanged(st, "src");
        t_assert_unchanged(it, "idx");
    }
}

START_TEST(test_gather) {
    char tname[40];
    snprintf(tname, sizeof tname, "gather#%d", _i);
    t_begin(tname);
    gather_run(_i);
    t_end();
}
END_TEST

static const rows_case scatter_cases[] = {
    {3, 0, 40, 13, KVS_F32, 10, 0, 0, 0},   {3, 0, 40, 13, KVS_F16, 10, 1, 1, 0},
    {2, 0, 33, 64, KVS_BF16, 33, 0, 0, 1},  {4, 0, 50, 7, KVS_I32, 5, 0, 1, 1},
    {0, 0, 13, 13, KVS_F32, 4, 1, 0, 1},    {1, 0, 1, 1, KVS_F32, 1, 0, 0, 0},
    {8, 0, 256, 64, KVS_F16, 3, 0, 1, 0},
};

static void scatter_run(int _i) {
    (void)_i;
    const rows_case *c = &scatter_cases[_i];
    t_case("scatter G=%d Nd=%d row=%d dtype=%s n=%d idx=%s src=%s duplicates=%d", c->G, c->Nd, c->row,
           kvs_dtype_name(c->dt), c->n, c->shared ? "shared" : "per-group", c->token_major ? "token-major" : "group-major",
           c->dups);
    int G = G_of(c);
    size_t rb = kvs_dtype_bytes(c->dt, c->row);
    unsigned char *src = t_alloc(rb * (size_t)(G * c->n)), *dst0 = t_alloc(rb * (size_t)(G * c->Nd));
    unsigned char *got = t_alloc(rb * (size_t)(G * c->Nd));
    random_bytes(src, rb * (size_t)(G * c->n), c->dt);
    random_bytes(dst0, rb * (size_t)(G * c->Nd), c->dt);
    int nidx = c->shared ? c->n : G * c->n;
    int32_t *idx = t_alloc(4 * (size_t)nidx);
    int lists = c->shared ? 1 : G;
    for (int l = 0; l < lists; l++) {
        if (c->dups) {
            for (int i = 0; i < c->n; i++) idx[l * c->n + i] = (int32_t)t_rand_int(0, c->Nd - 1);
            if (c->n >= 3) idx[l * c->n + c->n - 1] = idx[l * c->n]; /* a guaranteed duplicate */
        } else {
            /* distinct slots: a random subset of [0, Nd) */
            int32_t *perm = t_alloc(4 * (size_t)c->Nd);
            for (int j = 0; j < c->Nd; j++) perm[j] = j;
            t_shuffle_i32(perm, c->Nd);
            memcpy(idx + l * c->n, perm, 4 * (size_t)c->n);
        }
    }
    tt *st = c->token_major ? t_new3(c->dt, c->row, G, c->n) : (c->G ? t_new3(c->dt, c->row, c->n, c->G)
                                                                     : t_new2(c->dt, c->row, c->n));
    tt *dt = new_grouped(c, c->Nd);
    tt *it = c->shared ? t_new1(KVS_I32, c->n) : t_new2(KVS_I32, c->n, G);
    t_upload(st, src);
    t_upload(dt, dst0);
    t_upload_i32(it, idx);
    if (!t_op(kvs_scatter(t_dev(), st->t, it->t, dt->t, c->token_major))) {
        unsigned char *want = t_alloc(rb * (size_t)(G * c->Nd));
        memcpy(want, dst0, rb * (size_t)(G * c->Nd));
        for (int g = 0; g < G; g++)
            for (int i = 0; i < c->n; i++) { /* in order: the highest i wins */
                int32_t j = idx[c->shared ? i : g * c->n + i];
                size_t so = c->token_major ? (size_t)(i * G + g) : (size_t)(g * c->n + i);
                memcpy(want + rb * (size_t)(g * c->Nd + j), src + rb * so, rb);
            }
        t_download(dt, got);
        for (int g = 0; g < G; g++)
            for (int j = 0; j < c->Nd; j++) {
                size_t off = rb * (size_t)(g * c->Nd + j);
                T_ASSERT(memcmp(got + off, want + off, rb) == 0, "dst[group %d][row %d] differs (%s)", g, j,
                         memcmp(want + off, dst0 + off, rb) ? "written row" : "row no index names must be untouched");
            }
        t_assert_unchanged(st, "src");
    }
}

START_TEST(test_scatter) {
    char tname[40];
    snprintf(tname, sizeof tname, "scatter#%d", _i);
    t_begin(tname);
    scatter_run(_i);
    t_end();
}
END_TEST

static const rows_case compact_cases[] = {
    {3, 40, 40, 13, KVS_F32, 20, 0, 0, 0}, {2, 33, 33, 13, KVS_F16, 33, 0, 0, 0},
    {4, 100, 100, 64, KVS_BF16, 50, 1, 0, 0}, {0, 13, 13, 7, KVS_I32, 1, 0, 0, 0},
    {8, 256, 256, 64, KVS_F16, 129, 0, 0, 0},
};

static void compact_run(int _i) {
    (void)_i;
    const rows_case *c = &compact_cases[_i];
    t_case("compact G=%d N=%d row=%d dtype=%s n=%d idx=%s", c->G, c->Ns, c->row, kvs_dtype_name(c->dt), c->n,
           c->shared ? "shared" : "per-group");
    int G = G_of(c);
    size_t rb = kvs_dtype_bytes(c->dt, c->row);
    unsigned char *data = t_alloc(rb * (size_t)(G * c->Ns)), *got = t_alloc(rb * (size_t)(G * c->Ns));
    random_bytes(data, rb * (size_t)(G * c->Ns), c->dt);
    int lists = c->shared ? 1 : G;
    int32_t *idx = t_alloc(4 * (size_t)(lists * c->n));
    for (int l = 0; l < lists; l++) {
        /* a keep-set: n distinct indices in increasing order (with the first row evicted when possible) */
        int32_t *perm = t_alloc(4 * (size_t)c->Ns);
        for (int j = 0; j < c->Ns; j++) perm[j] = j;
        if (c->n < c->Ns) {
            t_shuffle_i32(perm + 1, c->Ns - 1);
            memcpy(idx + l * c->n, perm + 1, 4 * (size_t)c->n);
        } else {
            memcpy(idx + l * c->n, perm, 4 * (size_t)c->n);
        }
        for (int a = 0; a < c->n; a++) /* insertion sort */
            for (int b = a; b > 0 && idx[l * c->n + b - 1] > idx[l * c->n + b]; b--) {
                int32_t tmp = idx[l * c->n + b];
                idx[l * c->n + b] = idx[l * c->n + b - 1];
                idx[l * c->n + b - 1] = tmp;
            }
    }
    tt *t = new_grouped(c, c->Ns);
    tt *it = c->shared ? t_new1(KVS_I32, c->n) : t_new2(KVS_I32, c->n, G);
    t_upload(t, data);
    t_upload_i32(it, idx);
    if (!t_op(kvs_compact(t_dev(), t->t, it->t))) {
        t_download(t, got);
        for (int g = 0; g < G; g++)
            for (int i = 0; i < c->n; i++) {
                int32_t j = idx[c->shared ? i : g * c->n + i];
                T_ASSERT(memcmp(got + rb * (size_t)(g * c->Ns + i), data + rb * (size_t)(g * c->Ns + j), rb) == 0,
                         "t[group %d][row %d] should be old row %d", g, i, j);
            }
        t_assert_unchanged(it, "idx");
    }
}

START_TEST(test_compact) {
    char tname[40];
    snprintf(tname, sizeof tname, "compact#%d", _i);
    t_begin(tname);
    compact_run(_i);
    t_end();
}
END_TEST

/* Out-of-range indices (-1 and Ns) in gather and scatter. */
static void rows_out_of_range_run(int _i) {
    (void)_i;
    const int G = 2, N = 9, row = 5;
    size_t rb = 4 * row;
    unsigned char *src = t_alloc(rb * G * N), *dst0 = t_alloc(rb * G * N), *got = t_alloc(rb * G * N);
    random_bytes(src, rb * G * N, KVS_F32);
    random_bytes(dst0, rb * G * N, KVS_F32);
    int32_t idx[4] = {2, -1, N, 0};
    tt *st = t_new3(KVS_F32, row, N, G), *dt = t_new3(KVS_F32, row, N, G), *it = t_new1(KVS_I32, 4);
    t_upload(st, src);
    t_upload(dt, dst0);
    t_upload_i32(it, idx);
    for (int op = 0; op < 2; op++) {
        t_case("%s out-of-range indices {2, -1, %d, 0} G=%d N=%d row=%d f32", op ? "scatter" : "gather", N, G, N, row);
        t_upload(dt, dst0);
        tt *sv = st;
        kvs_tensor *sview = NULL;
        kvs_status s;
        int skip;
        if (op == 0) {
            skip = t_query(kvs_gather(t_dev(), sv->t, it->t, dt->t));
            s = skip ? KVS_OK : kvs_gather(t_dev(), sv->t, it->t, dt->t);
        } else {
            int64_t ne[3] = {row, 4, G}; /* src [G][4][row]: the first 4 rows of each group's storage */
            ck_assert(kvs_tensor_view(&sview, st->t, 0, 3, ne) == KVS_OK);
            skip = t_query(kvs_scatter(t_dev(), sview, it->t, dt->t, 0));
            s = skip ? KVS_OK : kvs_scatter(t_dev(), sview, it->t, dt->t, 0);
            kvs_tensor_destroy(&sview);
        }
        if (skip) continue;
        if (t_backend() == KVS_BACKEND_CPU) {
            t_expect(s, KVS_ERR_OUT_OF_RANGE, "CPU backend with index -1 / N");
            t_download(dt, NULL); /* guards only */
            continue;
        }
        T_ASSERT(s == KVS_OK || s == KVS_ERR_OUT_OF_RANGE, "status %s: %s", kvs_status_name(s), kvs_last_error());
        t_download(dt, got);
        if (s != KVS_OK) continue;
        for (int g = 0; g < G; g++) {
            if (op == 0) {
                /* rows 1 and 2 (bad indices) untouched, rows 0 and 3 gathered */
                for (int i = 1; i <= 2; i++)
                    T_ASSERT(memcmp(got + rb * (g * N + i), dst0 + rb * (g * N + i), rb) == 0,
                             "gather: dst row %d with a bad index was written", i);
                T_ASSERT(memcmp(got + rb * (g * N + 0), src + rb * (g * N + 2), rb) == 0, "gather: dst row 0");
                T_ASSERT(memcmp(got + rb * (g * N + 3), src + rb * (g * N + 0), rb) == 0, "gather: dst row 3");
            } else {
                /* dst rows 2 and 0 written from src rows 0 and 3; nothing else touched */
                for (int j = 0; j < N; j++) {
                    /* the src view's row (g, i) is storage row g*4 + i */
                    const unsigned char *want = j == 2 ? src + rb * (g * 4 + 0)
                                               : j == 0 ? src + rb * (g * 4 + 3)
                                                        : dst0 + rb * (g * N + j);
                    T_ASSERT(memcmp(got + rb * (g * N + j), want, rb) == 0, "scatter: dst row %d", j);
                }
            }
        }
    }
}

START_TEST(test_rows_out_of_range) {
    t_begin("rows_out_of_range");
    rows_out_of_range_run(_i);
    t_end();
}
END_TEST

static const t_seq test_rows_sequence_seq[] = {{gather_run, (int)(sizeof gather_cases / sizeof gather_cases[0])},
    {scatter_run, (int)(sizeof scatter_cases / sizeof scatter_cases[0])}, {compact_run, (int)(sizeof compact_cases / sizeof compact_cases[0])},
    {rows_out_of_range_run, 1}};
T_SEQUENCE_TEST(test_rows_sequence, test_rows_sequence_seq)

Suite *suite_rows(void) {
    Suite *s = suite_create("rows");
    TCase *tc = tcase_create("gather");
    tcase_add_loop_test(tc, test_gather, 0, (int)(sizeof gather_cases / sizeof gather_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("scatter");
    tcase_add_loop_test(tc, test_scatter, 0, (int)(sizeof scatter_cases / sizeof scatter_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("compact");
    tcase_add_loop_test(tc, test_compact, 0, (int)(sizeof compact_cases / sizeof compact_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("out_of_range");
    tcase_add_test(tc, test_rows_out_of_range);
    suite_add_tcase(s, tc);
    tc = tcase_create("sequence");
    tcase_add_test(tc, test_rows_sequence);
    suite_add_tcase(s, tc);
    return s;
}
