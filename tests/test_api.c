/* test_api: the backend-independent public API on the CPU device: status codes and messages,
 * device enumeration and open errors, tensor creation/view errors, the error paths of every op
 * front-end (bad shapes, dtypes, GQA, ranges, NULLs, aliasing), f16/bf16 host conversions
 * (exhaustive round trips, RNE, subnormals, inf, NaN) and the wavelet filter tables.
 * Front-end errors are raised before dispatch, so these pass whatever the backend implements.
 * Over 600 lines by reason: a flat list of independent error-path cases, one per front-end check,
 * read as a table; no shared state worth a module boundary. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reference.h"

/* every error check: the status, and a non-empty message naming something */
#define EXPECT(call, want) t_expect((call), (want), #call)

/* ---- status, version, backends ---- */

START_TEST(test_status_strings) {
    t_case("kvs_status_str / kvs_status_name for every code");
    static const struct { kvs_status s; const char *name; } codes[] = {
#define X(name, value, desc) {name, #name},
        KVS_STATUS_LIST(X)
#undef X
    };
    size_t n = sizeof codes / sizeof codes[0];
    ck_assert_int_ge((int)n, 17);
    for (size_t i = 0; i < n; i++) {
        const char *str = kvs_status_str(codes[i].s), *nm = kvs_status_name(codes[i].s);
        T_ASSERT(str && str[0] && strcmp(str, "unknown status"), "kvs_status_str(%s) = '%s'", codes[i].name, str ? str : "(null)");
        T_ASSERT(nm && !strcmp(nm, codes[i].name), "kvs_status_name(%d) = '%s', want %s", (int)codes[i].s, nm ? nm : "(null)",
                 codes[i].name);
        for (size_t j = 0; j < i; j++)
            T_ASSERT(strcmp(str, kvs_status_str(codes[j].s)), "%s and %s share the description '%s'", codes[i].name,
                     codes[j].name, str);
    }
    ck_assert_str_eq(kvs_status_str(KVS_OK), "success");
    ck_assert_str_eq(kvs_status_str((kvs_status)12345), "unknown status");
    ck_assert(kvs_status_name((kvs_status)-1) != NULL);
}
END_TEST

START_TEST(test_last_error) {
    t_case("kvs_last_error after errors, kvs_clear_error");
    kvs_clear_error();
    ck_assert_str_eq(kvs_last_error(), "");
    kvs_backend b;
    EXPECT(kvs_backend_from_name("cuda-nope", &b), KVS_ERR_INVALID_ARGUMENT);
    T_ASSERT(strstr(kvs_last_error(), "cuda-nope") != NULL, "message should name the bad input: '%s'", kvs_last_error());
    kvs_clear_error();
    ck_assert_str_eq(kvs_last_error(), "");
}
END_TEST

START_TEST(test_version) {
    t_case("version");
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", KVS_VERSION_MAJOR, KVS_VERSION_MINOR, KVS_VERSION_PATCH);
    ck_assert_str_eq(kvs_version(), want);
    ck_assert_uint_eq(kvs_version_number(), KVS_VERSION_NUMBER);
}
END_TEST

START_TEST(test_backends_and_devices) {
    t_case("backend names, parse, built, count, describe, open errors");
    kvs_backend b;
    static const char *names[] = {"cpu", "opencl", "vulkan"};
    for (int i = 0; i < KVS_BACKEND_COUNT; i++) {
        ck_assert_str_eq(kvs_backend_name((kvs_backend)i), names[i]);
        EXPECT(kvs_backend_from_name(names[i], &b), KVS_OK);
        ck_assert_int_eq(b, i);
    }
    EXPECT(kvs_backend_from_name("VULKAN", &b), KVS_OK);
    ck_assert_int_eq(b, KVS_BACKEND_VULKAN);
    ck_assert_str_eq(kvs_backend_name(KVS_BACKEND_COUNT), "unknown");
    EXPECT(kvs_backend_from_name(NULL, &b), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_backend_from_name("", &b), KVS_ERR_INVALID_ARGUMENT);

    kvs_device_params p = kvs_device_params_default();
    ck_assert_int_eq(p.backend, KVS_BACKEND_CPU);
    ck_assert_int_eq(p.index, 0);
    ck_assert_int_eq(p.n_threads, 0);
    ck_assert_int_eq(p.validation, -1);
    EXPECT(kvs_device_params_parse("opencl:1", &p), KVS_OK);
    ck_assert_int_eq(p.backend, KVS_BACKEND_OPENCL);
    ck_assert_int_eq(p.index, 1);
    EXPECT(kvs_device_params_parse("cpu", &p), KVS_OK);
    ck_assert_int_eq(p.index, 0);
    EXPECT(kvs_device_params_parse("cpu:", &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_params_parse("cpu:-1", &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_params_parse("cpu:1x", &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_params_parse(":0", &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_params_parse("tpu:0", &p), KVS_ERR_INVALID_ARGUMENT);

    ck_assert(kvs_backend_built(KVS_BACKEND_CPU));
    int count = -1;
    EXPECT(kvs_device_count(KVS_BACKEND_CPU, &count), KVS_OK);
    ck_assert_int_eq(count, 1);
    kvs_device_info info;
    EXPECT(kvs_device_describe(KVS_BACKEND_CPU, 0, &info), KVS_OK);
    ck_assert_int_eq(info.backend, KVS_BACKEND_CPU);
    ck_assert(info.name[0] != '\0');
    EXPECT(kvs_device_describe(KVS_BACKEND_CPU, 1, &info), KVS_ERR_NO_DEVICE);
    EXPECT(kvs_device_describe(KVS_BACKEND_CPU, -1, &info), KVS_ERR_NO_DEVICE);
    EXPECT(kvs_device_describe(KVS_BACKEND_CPU, 0, NULL), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_count(KVS_BACKEND_CPU, NULL), KVS_ERR_INVALID_ARGUMENT);

    kvs_device *dev = (kvs_device *)&p; /* must be reset to NULL on failure */
    p = kvs_device_params_default();
    p.index = 1;
    EXPECT(kvs_device_open(&dev, &p), KVS_ERR_NO_DEVICE);
    T_ASSERT(dev == NULL, "failed open must set *out = NULL");
    p.index = -1;
    EXPECT(kvs_device_open(&dev, &p), KVS_ERR_NO_DEVICE);
    p.index = 0;
    p.n_threads = -2;
    EXPECT(kvs_device_open(&dev, &p), KVS_ERR_INVALID_ARGUMENT);
    p.n_threads = 0;
    p.backend = KVS_BACKEND_COUNT;
    EXPECT(kvs_device_open(&dev, &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_open(NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    int not_built = 0;
    for (int i = 0; i < KVS_BACKEND_COUNT; i++) {
        if (kvs_backend_built((kvs_backend)i)) continue;
        not_built++;
        p = kvs_device_params_default();
        p.backend = (kvs_backend)i;
        EXPECT(kvs_device_open(&dev, &p), KVS_ERR_BACKEND_NOT_BUILT);
        T_ASSERT(strstr(kvs_last_error(), names[i]) != NULL, "message should name the backend: '%s'", kvs_last_error());
        EXPECT(kvs_device_count((kvs_backend)i, &count), KVS_ERR_BACKEND_NOT_BUILT);
        EXPECT(kvs_device_describe((kvs_backend)i, 0, &info), KVS_ERR_BACKEND_NOT_BUILT);
    }
    if (!not_built) printf("# every backend is built: KVS_ERR_BACKEND_NOT_BUILT not exercised\n");

    /* a real open, threads, destroy(NULL) */
    p = kvs_device_params_default();
    p.n_threads = 1;
    EXPECT(kvs_device_open(&dev, &p), KVS_OK);
    ck_assert_int_eq(kvs_device_caps(dev)->n_threads, 1);
    EXPECT(kvs_device_set_threads(dev, 2), KVS_OK);
    ck_assert_int_eq(kvs_device_caps(dev)->n_threads, 2);
    EXPECT(kvs_device_set_threads(dev, 0), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_set_threads(NULL, 1), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_device_sync(NULL), KVS_ERR_INVALID_ARGUMENT);
    kvs_device_destroy(&dev);
    ck_assert(dev == NULL);
    kvs_device_destroy(&dev);
    kvs_device_destroy(NULL);
}
END_TEST

/* ---- tensors ---- */

START_TEST(test_tensor_errors) {
    kvs_device *dev = t_begin("tensor_errors");
    t_case("tensor create/view errors, dtype helpers");
    kvs_tensor *t = NULL;
    int64_t ne[5] = {4, 3, 2, 1, 1};
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 0, ne), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 5, ne), KVS_ERR_INVALID_ARGUMENT);
    int64_t zero[2] = {4, 0}, neg[2] = {-1, 2}, huge[4] = {INT64_MAX / 4, 4, 4, 4};
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 2, zero), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 2, neg), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 4, huge), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(&t, dev, KVS_DTYPE_COUNT, 2, ne), KVS_ERR_DTYPE);
    EXPECT(kvs_tensor_create(&t, dev, KVS_Q8_0, 2, ne), KVS_ERR_DTYPE); /* ne[0] = 4 not a multiple of 32 */
    EXPECT(kvs_tensor_create(&t, NULL, KVS_F32, 2, ne), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(&t, dev, KVS_F32, 2, NULL), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_tensor_create(NULL, dev, KVS_F32, 2, ne), KVS_ERR_INVALID_ARGUMENT);
    T_ASSERT(t == NULL, "failed create must leave *out NULL");
    EXPECT(kvs_tensor_new(&t, dev, KVS_F16, 13, 3, 0, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_ndim(t), 2);
    ck_assert_int_eq(kvs_tensor_ne(t, 0), 13);
    ck_assert_int_eq(kvs_tensor_ne(t, 1), 3);
    ck_assert_int_eq(kvs_tensor_ne(t, 3), 1);
    ck_assert_int_eq(kvs_tensor_nelements(t), 39);
    ck_assert_uint_eq(kvs_tensor_nbytes(t), 78);
    ck_assert_int_eq(kvs_tensor_dtype(t), KVS_F16);
    ck_assert(kvs_tensor_device(t) == dev);
    kvs_tensor_set_name(t, "a_rather_long_tensor_name_that_goes_on_and_on_beyond_sixty_three_bytes_total");
    ck_assert_uint_eq(strlen(kvs_tensor_name(t)), 63);
    kvs_tensor *v = NULL;
    int64_t vne[1] = {40};
    EXPECT(kvs_tensor_view(&v, t, 0, 1, vne), KVS_ERR_OUT_OF_RANGE);
    vne[0] = 39;
    EXPECT(kvs_tensor_view(&v, t, 1, 1, vne), KVS_ERR_OUT_OF_RANGE);
    EXPECT(kvs_tensor_view(&v, t, 0, 1, vne), KVS_OK);
    kvs_tensor_destroy(&v); /* a failing call sets v = NULL: destroy the view first (LeakSanitizer) */
    EXPECT(kvs_tensor_view(&v, NULL, 0, 1, vne), KVS_ERR_INVALID_ARGUMENT);
    ck_assert(v == NULL);
    int64_t qne[2] = {64, 2};
    kvs_tensor *q = NULL;
    EXPECT(kvs_tensor_create(&q, dev, KVS_Q8_0, 2, qne), KVS_OK);
    ck_assert_uint_eq(kvs_tensor_nbytes(q), 4 * 34);
    int64_t qv[1] = {32};
    EXPECT(kvs_tensor_view(&v, q, 16, 1, qv), KVS_ERR_OUT_OF_RANGE); /* not block aligned */
    EXPECT(kvs_tensor_view(&v, q, 32, 1, qv), KVS_OK);
    kvs_tensor_destroy(&v);
    kvs_tensor_destroy(&q);
    kvs_tensor_destroy(&t);
    ck_assert_uint_eq(kvs_dtype_bytes(KVS_F32, 3), 12);
    ck_assert_uint_eq(kvs_dtype_bytes(KVS_BF16, 3), 6);
    ck_assert_uint_eq(kvs_dtype_bytes(KVS_Q8_0, 64), 68);
    ck_assert_uint_eq(kvs_dtype_bytes(KVS_Q8_0, 33), 0);
    ck_assert_uint_eq(kvs_dtype_bytes(KVS_DTYPE_COUNT, 1), 0);
    ck_assert_str_eq(kvs_dtype_name(KVS_BF16), "bf16");
    ck_assert_str_eq(kvs_dtype_name(KVS_Q8_0), "q8_0");
    ck_assert_str_eq(kvs_dtype_name(KVS_DTYPE_COUNT), "unknown");
    kvs_tensor_destroy(NULL);
    t_end();
}
END_TEST

/* ---- op front-end errors ---- */

/* A zero-filled plain tensor (some of these calls are valid and reach the backend). */
static kvs_tensor *mk(kvs_dtype dt, int64_t a, int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    kvs_tensor *t = t_plain(dt, c > 1 ? 3 : b > 1 ? 2 : 1, ne);
    void *z = t_alloc(kvs_tensor_nbytes(t));
    ck_assert(kvs_tensor_upload(t, z, 0, kvs_tensor_nbytes(t)) == KVS_OK);
    return t;
}

START_TEST(test_dense_errors) {
    kvs_device *dev = t_begin("dense_errors");
    t_case("matmul/add/copy/rmsnorm/swiglu/softmax/embedding front-end errors");
    kvs_tensor *W = mk(KVS_F32, 8, 4, 1), *x = mk(KVS_F32, 8, 3, 1), *y = mk(KVS_F32, 4, 3, 1);
    kvs_tensor *xbad = mk(KVS_F32, 7, 3, 1), *ybad = mk(KVS_F32, 4, 2, 1), *xi = mk(KVS_I32, 8, 3, 1);
    EXPECT(kvs_matmul(dev, W, xbad, y, 0), KVS_ERR_SHAPE);
    EXPECT(kvs_matmul(dev, W, x, ybad, 0), KVS_ERR_SHAPE);
    EXPECT(kvs_matmul(dev, W, xi, y, 0), KVS_ERR_DTYPE);
    EXPECT(kvs_matmul(dev, xi, x, y, 0), KVS_ERR_DTYPE);
    EXPECT(kvs_matmul(dev, mk(KVS_F32, 8, 4, 2), x, y, 0), KVS_ERR_SHAPE); /* 3-D W */
    EXPECT(kvs_matmul(dev, NULL, x, y, 0), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_matmul(NULL, W, x, y, 0), KVS_ERR_INVALID_ARGUMENT);
    /* y aliasing x: views of one buffer, rows 0..1 as x and rows 1..2 as y */
    kvs_tensor *W4 = mk(KVS_F32, 4, 4, 1), *xy = mk(KVS_F32, 4, 3, 1), *xv = NULL, *yv = NULL, *yv2 = NULL;
    int64_t vne[2] = {4, 2}, vne1[2] = {4, 1};
    ck_assert(kvs_tensor_view(&xv, xy, 0, 2, vne) == KVS_OK);
    ck_assert(kvs_tensor_view(&yv, xy, 4, 2, vne) == KVS_OK);
    EXPECT(kvs_matmul(dev, W4, xv, yv, 0), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_matmul(dev, W4, xy, xy, 0), KVS_ERR_INVALID_ARGUMENT);
    kvs_tensor_destroy(&yv);
    ck_assert(kvs_tensor_view(&yv, xy, 8, 2, vne1) == KVS_OK); /* row 2 only: no overlap with rows 0..1 */
    ck_assert(kvs_tensor_view(&yv2, xy, 0, 2, vne1) == KVS_OK);
    kvs_tensor *x1 = mk(KVS_F32, 4, 1, 1);
    kvs_status st = kvs_matmul(dev, W4, x1, yv, 0);
    T_ASSERT(st == KVS_OK || st == KVS_ERR_UNSUPPORTED, "disjoint views of one buffer: %s (%s)", kvs_status_name(st),
             kvs_last_error());
    kvs_tensor_destroy(&xv);
    kvs_tensor_destroy(&yv);
    kvs_tensor_destroy(&yv2);
    /* tensors of another device */
    kvs_device *dev2 = NULL;
    kvs_device_params p = kvs_device_params_default();
    ck_assert(kvs_device_open(&dev2, &p) == KVS_OK);
    kvs_tensor *other = NULL;
    int64_t one = 8;
    ck_assert(kvs_tensor_create(&other, dev2, KVS_F32, 1, &one) == KVS_OK);
    kvs_tensor *a8 = mk(KVS_F32, 8, 1, 1);
    EXPECT(kvs_add(dev, a8, other, a8), KVS_ERR_INVALID_ARGUMENT);
    kvs_tensor_destroy(&other);
    kvs_device_destroy(&dev2);

    /* add */
    kvs_tensor *a = mk(KVS_F32, 12, 1, 1), *b = mk(KVS_F32, 4, 3, 1), *c13 = mk(KVS_F32, 13, 1, 1);
    EXPECT(kvs_add(dev, a, c13, a), KVS_ERR_SHAPE);
    EXPECT(kvs_add(dev, a, mk(KVS_F16, 12, 1, 1), a), KVS_ERR_DTYPE);
    kvs_tensor *big = mk(KVS_F32, 24, 1, 1), *v0 = NULL, *v1 = NULL;
    int64_t n12 = 12;
    ck_assert(kvs_tensor_view(&v0, big, 0, 1, &n12) == KVS_OK);
    ck_assert(kvs_tensor_view(&v1, big, 6, 1, &n12) == KVS_OK);
    EXPECT(kvs_add(dev, v0, b, v1), KVS_ERR_INVALID_ARGUMENT); /* partial overlap */
    kvs_tensor_destroy(&v0);
    kvs_tensor_destroy(&v1);
    /* copy */
    EXPECT(kvs_copy(dev, a, mk(KVS_F16, 13, 1, 1)), KVS_ERR_SHAPE);
    EXPECT(kvs_copy(dev, a, mk(KVS_I32, 12, 1, 1)), KVS_ERR_DTYPE);
    EXPECT(kvs_copy(dev, a, a), KVS_ERR_INVALID_ARGUMENT);
    /* rmsnorm */
    kvs_tensor *w8 = mk(KVS_F32, 8, 1, 1);
    EXPECT(kvs_rmsnorm(dev, x, mk(KVS_F32, 7, 1, 1), mk(KVS_F32, 8, 3, 1), 1e-5f), KVS_ERR_SHAPE);
    EXPECT(kvs_rmsnorm(dev, x, w8, mk(KVS_F32, 8, 2, 1), 1e-5f), KVS_ERR_SHAPE);
    EXPECT(kvs_rmsnorm(dev, x, w8, mk(KVS_F32, 8, 3, 1), 0.0f), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_rmsnorm(dev, x, w8, mk(KVS_F32, 8, 3, 1), NAN), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_rmsnorm(dev, x, w8, mk(KVS_F32, 8, 3, 1), -1.0f), KVS_ERR_INVALID_ARGUMENT);
    /* swiglu */
    EXPECT(kvs_swiglu(dev, a, c13, a), KVS_ERR_SHAPE);
    EXPECT(kvs_swiglu(dev, a, b, mk(KVS_BF16, 12, 1, 1)), KVS_ERR_DTYPE);
    /* softmax */
    EXPECT(kvs_softmax(dev, x, mk(KVS_F32, 8, 2, 1), 1.0f), KVS_ERR_SHAPE);
    EXPECT(kvs_softmax(dev, x, mk(KVS_F32, 8, 3, 1), 0.0f), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_softmax(dev, x, mk(KVS_F32, 8, 3, 1), -1.0f), KVS_ERR_INVALID_ARGUMENT);
    /* embedding */
    kvs_tensor *tab = mk(KVS_F32, 8, 10, 1), *eo = mk(KVS_F32, 8, 3, 1);
    int32_t ids[3] = {0, 9, 10};
    EXPECT(kvs_embedding(dev, tab, ids, 3, eo), KVS_ERR_OUT_OF_RANGE);
    T_ASSERT(strstr(kvs_last_error(), "10") != NULL, "message should name the bad id: '%s'", kvs_last_error());
    ids[2] = -1;
    EXPECT(kvs_embedding(dev, tab, ids, 3, eo), KVS_ERR_OUT_OF_RANGE);
    ids[2] = 1;
    EXPECT(kvs_embedding(dev, tab, ids, 2, eo), KVS_ERR_SHAPE);
    EXPECT(kvs_embedding(dev, tab, NULL, 3, eo), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_embedding(dev, tab, ids, 0, eo), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_embedding(dev, mk(KVS_I32, 8, 10, 1), ids, 3, eo), KVS_ERR_DTYPE);
    EXPECT(kvs_embedding(dev, tab, ids, 3, mk(KVS_F16, 8, 3, 1)), KVS_ERR_DTYPE);
    t_end();
}
END_TEST

START_TEST(test_rope_errors) {
    kvs_device *dev = t_begin("rope_errors");
    t_case("rope / rope_shift front-end errors");
    kvs_tensor *x = mk(KVS_F32, 8, 2, 3), *pos = mk(KVS_I32, 3, 1, 1);
    kvs_rope_params p = kvs_rope_params_default();
    ck_assert_int_eq(p.mode, KVS_ROPE_ADJACENT);
    ck_assert(p.theta_base == 10000.0f && p.n_rot == 0 && p.freq_scale == 1.0f);
    EXPECT(kvs_rope(dev, x, mk(KVS_I32, 2, 1, 1), &p), KVS_ERR_SHAPE);
    EXPECT(kvs_rope(dev, x, mk(KVS_F32, 3, 1, 1), &p), KVS_ERR_DTYPE);
    EXPECT(kvs_rope(dev, mk(KVS_F16, 8, 2, 3), pos, &p), KVS_ERR_DTYPE);
    EXPECT(kvs_rope(dev, x, pos, NULL), KVS_ERR_INVALID_ARGUMENT);
    p.n_rot = 3;
    EXPECT(kvs_rope(dev, x, pos, &p), KVS_ERR_INVALID_ARGUMENT);
    p.n_rot = 10;
    EXPECT(kvs_rope(dev, x, pos, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_rope_params_default();
    p.theta_base = 1.0f;
    EXPECT(kvs_rope(dev, x, pos, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_rope_params_default();
    p.freq_scale = 0.0f;
    EXPECT(kvs_rope(dev, x, pos, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_rope_params_default();
    p.mode = (kvs_rope_mode)7;
    EXPECT(kvs_rope(dev, x, pos, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_rope_params_default();
    kvs_tensor *k = mk(KVS_F32, 8, 5, 2), *delta = mk(KVS_I32, 10, 1, 1);
    EXPECT(kvs_rope_shift(dev, k, delta, 0, &p), KVS_ERR_OUT_OF_RANGE);
    EXPECT(kvs_rope_shift(dev, k, delta, 6, &p), KVS_ERR_OUT_OF_RANGE);
    EXPECT(kvs_rope_shift(dev, k, mk(KVS_I32, 9, 1, 1), 5, &p), KVS_ERR_SHAPE);
    EXPECT(kvs_rope_shift(dev, mk(KVS_BF16, 8, 5, 2), delta, 5, &p), KVS_ERR_DTYPE);
    EXPECT(kvs_rope_shift(dev, NULL, delta, 5, &p), KVS_ERR_INVALID_ARGUMENT);
    t_end();
}
END_TEST

START_TEST(test_attention_errors) {
    kvs_device *dev = t_begin("attention_errors");
    t_case("attention front-end errors");
    const int64_t d = 8, H = 6, nq = 3, cap = 10;
    kvs_tensor *q = mk(KVS_F32, d, H, nq), *k = mk(KVS_F32, d, cap, 2), *v = mk(KVS_F32, d, cap, 2),
               *out = mk(KVS_F32, d, H, nq);
    kvs_attention_params p = kvs_attention_params_default();
    ck_assert(p.scale == 0 && p.causal == 0 && p.n_kv == 0 && p.q_pos == NULL && p.key_mass == NULL);
    /* GQA: 6 heads over 4 kv heads */
    kvs_tensor *k4 = mk(KVS_F32, d, cap, 4), *v4 = mk(KVS_F32, d, cap, 4);
    EXPECT(kvs_attention(dev, q, k4, v4, out, &p), KVS_ERR_SHAPE);
    T_ASSERT(strstr(kvs_last_error(), "multiple") || strstr(kvs_last_error(), "GQA"), "message: '%s'", kvs_last_error());
    EXPECT(kvs_attention(dev, q, mk(KVS_F32, d + 1, cap, 2), v, out, &p), KVS_ERR_SHAPE);
    EXPECT(kvs_attention(dev, q, k, mk(KVS_F32, d, cap + 1, 2), out, &p), KVS_ERR_SHAPE);
    EXPECT(kvs_attention(dev, q, k, v, mk(KVS_F32, d, H, nq + 1), &p), KVS_ERR_SHAPE);
    /* K and V types are independent (issue 17: f32, f16, bf16 and the cache's block types); I32 is none */
    EXPECT(kvs_attention(dev, q, mk(KVS_I32, d, cap, 2), v, out, &p), KVS_ERR_DTYPE);
    EXPECT(kvs_attention(dev, q, k, mk(KVS_I32, d, cap, 2), out, &p), KVS_ERR_DTYPE);
    EXPECT(kvs_attention(dev, mk(KVS_F16, d, H, nq), k, v, out, &p), KVS_ERR_DTYPE);
    EXPECT(kvs_attention(dev, q, k, v, q, &p), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_attention(dev, q, k, v, out, NULL), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_attention(dev, NULL, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT);
    p.n_kv = cap + 1;
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_OUT_OF_RANGE);
    p.n_kv = -1;
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_OUT_OF_RANGE);
    p = kvs_attention_params_default();
    p.scale = -1.0f;
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_attention_params_default();
    /* statistics of the wrong shape/dtype */
    p.key_mass = mk(KVS_F32, cap, 3, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_SHAPE);
    p = kvs_attention_params_default();
    p.argmax = mk(KVS_F32, H, nq, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_DTYPE);
    p = kvs_attention_params_default();
    p.row_max = mk(KVS_F32, H, nq + 1, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_SHAPE);
    p = kvs_attention_params_default();
    p.mask = mk(KVS_F32, cap - 1, nq, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_SHAPE);
    p.n_kv = cap - 1; /* the mask is [n_q][n_kv] */
    kvs_status s = kvs_attention(dev, q, k, v, out, &p);
    T_ASSERT(s == KVS_OK || s == KVS_ERR_UNSUPPORTED, "mask [n_q][n_kv] with n_kv < capacity: %s (%s)", kvs_status_name(s),
             kvs_last_error());
    p = kvs_attention_params_default();
    p.q_pos = mk(KVS_I32, nq + 1, 1, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_SHAPE);
    p = kvs_attention_params_default();
    p.kv_len = mk(KVS_F32, 2, 1, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_DTYPE);
    p = kvs_attention_params_default();
    p.probe_rows = mk(KVS_I32, 2, 1, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT); /* probs missing */
    p.probs = mk(KVS_F32, cap, H, 3);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_SHAPE);
    p = kvs_attention_params_default();
    p.stat_rows = mk(KVS_I32, 2, 1, 1);
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT); /* without key_mass */
    /* statistics aliasing each other or an input */
    p = kvs_attention_params_default();
    kvs_tensor *rm = mk(KVS_F32, H, nq, 1);
    p.row_max = rm;
    p.row_sum = rm;
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT);
    p = kvs_attention_params_default();
    kvs_tensor *qv = NULL;
    int64_t ne2[2] = {H, nq};
    ck_assert(kvs_tensor_view(&qv, q, 0, 2, ne2) == KVS_OK);
    p.row_sum = qv;
    EXPECT(kvs_attention(dev, q, k, v, out, &p), KVS_ERR_INVALID_ARGUMENT);
    kvs_tensor_destroy(&qv);
    t_end();
}
END_TEST

START_TEST(test_dwt_topk_rows_errors) {
    kvs_device *dev = t_begin("dwt_topk_rows_errors");
    t_case("dwt/idwt, topk/topk_global, gather/scatter/compact front-end errors");
    /* dwt */
    kvs_tensor *x = mk(KVS_F32, 13, 2, 1);
    int64_t nc = kvs_dwt_length(13, 2);
    ck_assert_int_eq(nc, 4 + 4 + 7);
    kvs_tensor *y = mk(KVS_F32, nc, 2, 1);
    EXPECT(kvs_dwt(dev, x, mk(KVS_F32, nc + 1, 2, 1), KVS_WAVELET_HAAR, 2), KVS_ERR_SHAPE);
    EXPECT(kvs_dwt(dev, x, mk(KVS_F32, nc, 3, 1), KVS_WAVELET_HAAR, 2), KVS_ERR_SHAPE);
    EXPECT(kvs_dwt(dev, x, y, KVS_WAVELET_HAAR, 0), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_dwt(dev, x, y, KVS_WAVELET_HAAR, KVS_DWT_MAX_LEVELS + 1), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_dwt(dev, x, y, (kvs_wavelet)9, 2), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_dwt(dev, mk(KVS_F16, 13, 2, 1), y, KVS_WAVELET_HAAR, 2), KVS_ERR_DTYPE);
    EXPECT(kvs_idwt(dev, mk(KVS_F32, nc - 1, 2, 1), x, KVS_WAVELET_DB2, 2), KVS_ERR_SHAPE);
    EXPECT(kvs_idwt(dev, y, NULL, KVS_WAVELET_DB2, 2), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_dwt_length(0, 1), -1);
    ck_assert_int_eq(kvs_dwt_length(5, 0), -1);
    ck_assert_int_eq(kvs_dwt_length(5, KVS_DWT_MAX_LEVELS + 1), -1);
    ck_assert_int_eq(kvs_dwt_length(1, 3), 4);
    ck_assert_int_eq(kvs_dwt_level_length(13, 2), 4);
    for (int64_t n = 1; n < 300; n += 7)
        for (int l = 1; l <= 9; l++) ck_assert_int_eq(kvs_dwt_length(n, l), ref_dwt_len(n, l));
    /* top-k */
    kvs_tensor *s = mk(KVS_F32, 10, 3, 1);
    kvs_topk_params tp = kvs_topk_params_default();
    ck_assert(tp.k == 1 && tp.order_by_index == 0 && tp.row_len == NULL);
    tp.k = 11;
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 11, 3, 1), NULL, &tp), KVS_ERR_OUT_OF_RANGE);
    tp.k = 0;
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 1, 3, 1), NULL, &tp), KVS_ERR_OUT_OF_RANGE);
    tp.k = 4;
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 4, 2, 1), NULL, &tp), KVS_ERR_SHAPE);
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 6, 2, 1), NULL, &tp), KVS_ERR_SHAPE); /* right count, wrong ne[0] */
    EXPECT(kvs_topk(dev, s, mk(KVS_F32, 4, 3, 1), NULL, &tp), KVS_ERR_DTYPE);
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 4, 3, 1), mk(KVS_F32, 4, 2, 1), &tp), KVS_ERR_SHAPE);
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 4, 3, 1), mk(KVS_I32, 4, 3, 1), &tp), KVS_ERR_DTYPE);
    EXPECT(kvs_topk(dev, mk(KVS_I32, 10, 3, 1), mk(KVS_I32, 4, 3, 1), NULL, &tp), KVS_ERR_DTYPE);
    tp.row_len = mk(KVS_I32, 2, 1, 1);
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 4, 3, 1), NULL, &tp), KVS_ERR_SHAPE);
    EXPECT(kvs_topk(dev, s, mk(KVS_I32, 4, 3, 1), NULL, NULL), KVS_ERR_INVALID_ARGUMENT);
    tp = kvs_topk_params_default();
    tp.k = 31;
    EXPECT(kvs_topk_global(dev, s, mk(KVS_I32, 31, 1, 1), NULL, &tp), KVS_ERR_OUT_OF_RANGE);
    tp.k = 30;
    EXPECT(kvs_topk_global(dev, s, mk(KVS_I32, 29, 1, 1), NULL, &tp), KVS_ERR_SHAPE);
    tp.row_len = mk(KVS_I32, 3, 1, 1);
    EXPECT(kvs_topk_global(dev, s, mk(KVS_I32, 30, 1, 1), NULL, &tp), KVS_ERR_INVALID_ARGUMENT);
    /* gather / scatter / compact */
    kvs_tensor *src = mk(KVS_F32, 8, 10, 3), *dst = mk(KVS_F32, 8, 6, 3), *idx = mk(KVS_I32, 6, 3, 1);
    EXPECT(kvs_gather(dev, src, mk(KVS_I32, 6, 2, 1), dst), KVS_ERR_SHAPE);        /* [2][n] for G=3 */
    EXPECT(kvs_gather(dev, src, mk(KVS_I32, 7, 1, 1), dst), KVS_ERR_SHAPE);        /* n > Nd */
    EXPECT(kvs_gather(dev, src, mk(KVS_F32, 6, 3, 1), dst), KVS_ERR_DTYPE);
    EXPECT(kvs_gather(dev, src, idx, mk(KVS_F16, 8, 6, 3)), KVS_ERR_DTYPE);
    EXPECT(kvs_gather(dev, src, idx, mk(KVS_F32, 7, 6, 3)), KVS_ERR_SHAPE);
    EXPECT(kvs_gather(dev, src, idx, mk(KVS_F32, 8, 6, 2)), KVS_ERR_SHAPE);
    EXPECT(kvs_gather(dev, src, idx, src), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_gather(dev, src, NULL, dst), KVS_ERR_INVALID_ARGUMENT);
    int64_t qne[3] = {32, 4, 2};
    kvs_tensor *q8 = t_plain(KVS_Q8_0, 3, qne);
    /* block rows move as bytes; a scatter converts only from f32 (the quantized cache's append) */
    EXPECT(kvs_scatter(dev, mk(KVS_F16, 32, 2, 2), mk(KVS_I32, 2, 1, 1), q8, 0), KVS_ERR_DTYPE);
    EXPECT(kvs_scatter(dev, mk(KVS_F32, 32, 2, 2), mk(KVS_I32, 2, 1, 1), mk(KVS_Q4_K, 256, 4, 2), 0), KVS_ERR_DTYPE);
    EXPECT(kvs_scatter(dev, mk(KVS_F32, 8, 5, 3), idx, src, 0), KVS_ERR_SHAPE);   /* src rows != n */
    EXPECT(kvs_scatter(dev, mk(KVS_F32, 8, 6, 3), idx, src, 1), KVS_ERR_SHAPE);   /* token-major wants [n][G] */
    kvs_status st = kvs_scatter(dev, mk(KVS_F32, 8, 3, 6), idx, src, 1); /* token-major [n=6][G=3][8]: valid */
    T_ASSERT(st == KVS_OK || st == KVS_ERR_UNSUPPORTED || st == KVS_ERR_OUT_OF_RANGE, "token-major scatter: %s (%s)",
             kvs_status_name(st), kvs_last_error());
    EXPECT(kvs_scatter(dev, mk(KVS_F16, 8, 6, 3), idx, src, 0), KVS_ERR_DTYPE);
    EXPECT(kvs_compact(dev, dst, mk(KVS_I32, 7, 3, 1)), KVS_ERR_SHAPE);
    EXPECT(kvs_compact(dev, NULL, idx), KVS_ERR_INVALID_ARGUMENT);
    kvs_tensor *iv = NULL;
    int64_t ine[2] = {8, 1};
    ck_assert(kvs_tensor_view(&iv, src, 0, 1, ine) == KVS_OK);
    EXPECT(kvs_compact(dev, src, iv), KVS_ERR_DTYPE); /* f32 view used as idx */
    kvs_tensor_destroy(&iv);
    t_end();
}
END_TEST

/* ---- conversions ---- */

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

START_TEST(test_f16_conversions) {
    t_seed("test_f16_conversions");
    t_case("f16: all 65536 patterns round-trip, RNE, subnormals, overflow, NaN");
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvs_f16_to_f32((uint16_t)h);
        double r = ref_f16_to_f64((uint16_t)h);
        if (isnan(r)) {
            T_ASSERT(isnan(f), "f16 0x%04x should decode to NaN, got %g", h, (double)f);
            T_ASSERT(isnan(kvs_f16_to_f32(kvs_f32_to_f16(f))), "NaN 0x%04x must stay NaN", h);
            continue;
        }
        T_ASSERT((double)f == r && !signbit(f) == !signbit(r), "f16 0x%04x decodes to %.9g, want %.9g", h, (double)f, r);
        T_ASSERT(kvs_f32_to_f16(f) == h, "round trip of f16 0x%04x gave 0x%04x", h, kvs_f32_to_f16(f));
    }
    /* every f32 exactly halfway between two f16 neighbours, and just off it, for all f16 values */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = ref_f16_to_f64((uint16_t)h), hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16_to_f64((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact in f32 */
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (h + 1 == 0x7c00) want = 0x7c00; /* 65520 rounds to inf */
        T_ASSERT(kvs_f32_to_f16(mid) == want, "tie %.9g (between 0x%04x and 0x%04x) -> 0x%04x, want 0x%04x", (double)mid,
                 h, h + 1, kvs_f32_to_f16(mid), want);
        T_ASSERT(kvs_f32_to_f16(-mid) == (want | 0x8000), "negative tie %.9g", (double)-mid);
        float above = nextafterf(mid, INFINITY), below = nextafterf(mid, 0);
        T_ASSERT(kvs_f32_to_f16(above) == (h + 1 == 0x7c00 ? 0x7c00 : h + 1), "just above the tie %.9g", (double)above);
        T_ASSERT(kvs_f32_to_f16(below) == h, "just below the tie %.9g", (double)below);
    }
    /* random f32 bit patterns against the independent reference */
    for (int i = 0; i < 2000000; i++) {
        float f = bits_f32((uint32_t)t_rand_u64());
        uint16_t got = kvs_f32_to_f16(f), want = ref_f16_bits(f);
        if (isnan(f)) {
            T_ASSERT((got & 0x7c00) == 0x7c00 && (got & 0x3ff), "NaN 0x%08x -> 0x%04x is not NaN", f32_bits(f), got);
            continue;
        }
        T_ASSERT(got == want, "f32 0x%08x (%.9g) -> f16 0x%04x, want 0x%04x", f32_bits(f), (double)f, got, want);
    }
    ck_assert_uint_eq(kvs_f32_to_f16(INFINITY), 0x7c00);
    ck_assert_uint_eq(kvs_f32_to_f16(-INFINITY), 0xfc00);
    ck_assert_uint_eq(kvs_f32_to_f16(-0.0f), 0x8000);
    ck_assert_uint_eq(kvs_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(kvs_f32_to_f16(1e-8f), 0x0000);
    ck_assert_uint_eq(kvs_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(kvs_f32_to_f16(0x1p-25f), 0x0000);
    ck_assert_uint_eq(kvs_f32_to_f16(0x1.8p-25f), 0x0001);
}
END_TEST

START_TEST(test_bf16_conversions) {
    t_seed("test_bf16_conversions");
    t_case("bf16: all 65536 patterns round-trip, RNE, NaN stays NaN");
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kvs_bf16_to_f32((uint16_t)h);
        T_ASSERT(f32_bits(f) == h << 16, "bf16 0x%04x decodes to 0x%08x", h, f32_bits(f));
        if (isnan(f)) {
            uint16_t r = kvs_f32_to_bf16(f);
            T_ASSERT((r & 0x7f80) == 0x7f80 && (r & 0x7f), "NaN 0x%04x -> 0x%04x is not NaN", h, r);
            continue;
        }
        T_ASSERT(kvs_f32_to_bf16(f) == h, "round trip of bf16 0x%04x gave 0x%04x", h, kvs_f32_to_bf16(f));
    }
    for (int i = 0; i < 2000000; i++) {
        float f = bits_f32((uint32_t)t_rand_u64());
        if (i < 65536) f = bits_f32(((uint32_t)i << 16) | 0x8000u); /* every exact tie */
        uint16_t got = kvs_f32_to_bf16(f);
        if (isnan(f)) {
            T_ASSERT((got & 0x7f80) == 0x7f80 && (got & 0x7f), "NaN 0x%08x -> 0x%04x is not NaN", f32_bits(f), got);
            continue;
        }
        uint16_t want = ref_bf16_bits(f);
        T_ASSERT(got == want, "f32 0x%08x (%.9g) -> bf16 0x%04x, want 0x%04x", f32_bits(f), (double)f, got, want);
    }
    /* a NaN whose payload lives only in the low 16 bits must not become inf */
    uint16_t r = kvs_f32_to_bf16(bits_f32(0x7f800001u));
    T_ASSERT((r & 0x7f) != 0, "signalling NaN 0x7f800001 -> 0x%04x (inf?)", r);
}
END_TEST

START_TEST(test_wavelet_filters) {
    t_case("wavelet names and filter taps (vs independent tables; orthonormality)");
    static const kvs_wavelet ws[3] = {KVS_WAVELET_HAAR, KVS_WAVELET_DB2, KVS_WAVELET_DB4};
    static const char *names[3] = {"haar", "db2", "db4"};
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(kvs_wavelet_name(ws[i]), names[i]);
        kvs_wavelet w;
        EXPECT(kvs_wavelet_from_name(names[i], &w), KVS_OK);
        ck_assert_int_eq(w, ws[i]);
        double lo[8], ref[8];
        int L = kvs_wavelet_filter(ws[i], lo);
        ck_assert_int_eq(L, ref_wavelet_lo(ws[i], ref));
        ck_assert_int_eq(kvs_wavelet_filter(ws[i], NULL), L);
        double sum = 0, sq = 0;
        for (int t = 0; t < L; t++) {
            T_ASSERT(fabs(lo[t] - ref[t]) < 1e-12, "%s tap %d: %.17g vs %.17g", names[i], t, lo[t], ref[t]);
            sum += lo[t];
            sq += lo[t] * lo[t];
        }
        T_ASSERT(fabs(sum - sqrt(2.0)) < 1e-12, "%s taps sum %.17g", names[i], sum);
        T_ASSERT(fabs(sq - 1.0) < 1e-12, "%s squares sum %.17g", names[i], sq);
        for (int k = 1; 2 * k < L; k++) {
            double o = 0;
            for (int t = 0; t + 2 * k < L; t++) o += lo[t] * lo[t + 2 * k];
            T_ASSERT(fabs(o) < 1e-12, "%s: taps not orthogonal to their shift by %d (%.3g)", names[i], 2 * k, o);
        }
    }
    ck_assert_int_eq(kvs_wavelet_filter((kvs_wavelet)5, NULL), 0);
    ck_assert_str_eq(kvs_wavelet_name((kvs_wavelet)5), "unknown");
    kvs_wavelet w;
    EXPECT(kvs_wavelet_from_name("db3", &w), KVS_ERR_INVALID_ARGUMENT);
    EXPECT(kvs_wavelet_from_name(NULL, &w), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* The references themselves: hand values, so a reference bug cannot pass silently. */
START_TEST(test_reference_selfcheck) {
    t_seed("test_reference_selfcheck");
    t_case("reference self-checks");
    /* Haar on [1 2 3 4 5], 2 levels (hand-computed, see test_ops_dwt.c) */
    double x[5] = {1, 2, 3, 4, 5}, y[7], x2[5];
    ref_dwt_row(x, 5, KVS_WAVELET_HAAR, 2, y);
    const double s = sqrt(0.5), want[7] = {5, 10, -2, 0, -s, -s, 0};
    for (int i = 0; i < 7; i++) T_ASSERT(fabs(y[i] - want[i]) < 1e-12, "ref haar y[%d] = %g want %g", i, y[i], want[i]);
    ref_idwt_row(y, 5, KVS_WAVELET_HAAR, 2, x2);
    for (int i = 0; i < 5; i++) T_ASSERT(fabs(x2[i] - x[i]) < 1e-12, "ref haar inverse");
    /* reconstruction of every family, odd lengths, deep levels */
    static const kvs_wavelet ws[3] = {KVS_WAVELET_HAAR, KVS_WAVELET_DB2, KVS_WAVELET_DB4};
    double in[101], coef[400], back[101];
    for (int i = 0; i < 101; i++) in[i] = t_rand_normal();
    for (int w = 0; w < 3; w++)
        for (int n = 1; n <= 101; n += 4)
            for (int l = 1; l <= 8; l++) {
                ref_dwt_row(in, n, ws[w], l, coef);
                ref_idwt_row(coef, n, ws[w], l, back);
                for (int i = 0; i < n; i++)
                    T_ASSERT(fabs(back[i] - in[i]) < 1e-9, "ref reconstruction w=%d n=%d l=%d i=%d: %g vs %g", w, n, l, i,
                             back[i], in[i]);
            }
    /* rope: rotation by pos then by -pos is the identity; NeoX pairs (i, i + n/2) */
    double v[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    kvs_rope_params p = kvs_rope_params_default();
    p.mode = KVS_ROPE_NEOX;
    ref_rope_vec(v, 8, 1.0, &p); /* pair 0 angle 1: (1, 0) -> (cos 1, sin 1) at dims 0 and 4 */
    T_ASSERT(fabs(v[0] - cos(1.0)) < 1e-15 && fabs(v[4] - sin(1.0)) < 1e-15, "ref neox");
    p.mode = KVS_ROPE_ADJACENT;
    double u[4] = {0, 0, 1, 0};
    ref_rope_vec(u, 4, 2.0, &p); /* pair 1 angle 2 * 10000^(-2/4) = 0.02 */
    T_ASSERT(fabs(u[2] - cos(0.02)) < 1e-15 && fabs(u[3] - sin(0.02)) < 1e-15, "ref adjacent");
    /* top-k ordering */
    float sc[6] = {1, NAN, 3, -INFINITY, 3, 1};
    int32_t id[6];
    float vv[6];
    ref_topk(sc, 6, 6, 6, 0, id, vv);
    int32_t wid[6] = {2, 4, 0, 5, 3, 1};
    for (int i = 0; i < 6; i++) T_ASSERT(id[i] == wid[i], "ref topk order [%d] = %d want %d", i, id[i], wid[i]);
    ref_topk(sc, 6, 3, 5, 1, id, vv);
    int32_t wid2[5] = {0, 1, 2, -1, -1};
    for (int i = 0; i < 5; i++) T_ASSERT(id[i] == wid2[i], "ref topk row_len [%d] = %d want %d", i, id[i], wid2[i]);
    /* f16 reference rounding */
    ck_assert_uint_eq(ref_f16_bits(65520.0), 0x7c00);
    ck_assert_uint_eq(ref_f16_bits(65519.0), 0x7bff);
    ck_assert_uint_eq(ref_f16_bits(1.0 + 0x1p-11), 0x3c00);
    ck_assert_uint_eq(ref_f16_bits(1.0 + 3 * 0x1p-11), 0x3c02);
    ck_assert_uint_eq(ref_f16_bits(0x1p-25), 0x0000);
    ck_assert_uint_eq(ref_f16_bits(0x1.8p-25), 0x0001);
    ck_assert_uint_eq(ref_f16_bits(0x1p-14 - 0x1p-25), 0x0400); /* rounds up into the normals */
    ck_assert_uint_eq(ref_bf16_bits(0x1.ffp127), 0x7f80);
    ck_assert_uint_eq(ref_bf16_bits(1.0 + 0x1p-8), 0x3f80);
    ck_assert_uint_eq(ref_bf16_bits(0x1p-133), 0x0001);
    /* attention reference: one query, two keys, hand softmax */
    double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, vv2[4] = {1, 2, 3, 4}, out[2], m, l;
    int32_t am;
    ref_attn a;
    memset(&a, 0, sizeof a);
    a.n_q = 1; a.n_heads = 1; a.n_kv_heads = 1; a.head_dim = 2; a.capacity = 2; a.n_kv = 2; a.scale = 1;
    a.q = q; a.k = k; a.v = vv2; a.out = out; a.row_max = &m; a.row_sum = &l; a.argmax = &am;
    ref_attention(&a);
    double p0 = exp(1.0) / (exp(1.0) + 1.0);
    T_ASSERT(fabs(out[0] - (p0 * 1 + (1 - p0) * 3)) < 1e-15 && fabs(out[1] - (p0 * 2 + (1 - p0) * 4)) < 1e-15, "ref attn");
    T_ASSERT(m == 1.0 && fabs(l - (1 + exp(-1.0))) < 1e-15 && am == 0, "ref attn stats");
}
END_TEST

static Suite *api_suite(void) {
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("status");
    tcase_add_test(tc, test_status_strings);
    tcase_add_test(tc, test_last_error);
    tcase_add_test(tc, test_version);
    tcase_add_test(tc, test_backends_and_devices);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_tensor_errors);
    tcase_add_test(tc, test_dense_errors);
    tcase_add_test(tc, test_rope_errors);
    tcase_add_test(tc, test_attention_errors);
    tcase_add_test(tc, test_dwt_topk_rows_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("conversions");
    tcase_add_test(tc, test_f16_conversions);
    tcase_add_test(tc, test_bf16_conversions);
    tcase_add_test(tc, test_wavelet_filters);
    tcase_add_test(tc, test_reference_selfcheck);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    const char *seed = getenv("KVS_TEST_SEED");
    if (seed && seed[0]) t_base_seed = strtoull(seed, NULL, 0);
    printf("# kvsieve %s test_api seed=%llu\n", kvs_version(), (unsigned long long)t_base_seed);
    setenv("CK_DEFAULT_TIMEOUT", "120", 0);
    t_params = kvs_device_params_default();
    t_counters_init();
    SRunner *sr = srunner_create(api_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
