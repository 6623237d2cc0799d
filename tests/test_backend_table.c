/* The backend table machinery of core/ (internal.h): the one op list, the open-time check of a
 * table's required slots, op names, the variant tables and the public variant and support-query
 * API on the CPU device. Links the static library (internals). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "probe.h"

START_TEST(test_op_names) {
    ck_assert_int_eq(KVS_OP_COUNT, 18);
    for (int i = 0; i < KVS_OP_COUNT; i++) {
        const char *n = kvs_op_name((kvs_op_id)i);
        ck_assert_ptr_nonnull(n);
        ck_assert_int_eq(kvs_op_from_name(n, strlen(n)), i);
    }
    ck_assert_str_eq(kvs_op_name(KVS_OP_topk_global), "topk_global");
    ck_assert_str_eq(kvs_op_name(KVS_OP_topp), "topp");
    ck_assert_int_eq(kvs_op_from_name("topk", 4), KVS_OP_topk);
    ck_assert_int_eq(kvs_op_from_name("topk_glob", 9), -1);
    ck_assert_ptr_null(kvs_op_name(KVS_OP_COUNT));
}
END_TEST

/* Every built backend's table passes; a copy with one slot NULL is refused, naming the slot. */
START_TEST(test_table_check) {
    for (int b = 0; b < KVS_BACKEND_COUNT; b++) {
        const kvs_backend_ops *ops = kvs_backend_lookup((kvs_backend)b);
        if (!ops) continue;
        ck_assert_msg(kvs_backend_check(ops) == KVS_OK, "%s: %s", ops->name, kvs_last_error());
        /* variant names are unique per op and codes non-zero */
        for (int i = 0; i < ops->n_variants; i++) {
            ck_assert_int_ne(ops->variants[i].code, 0);
            ck_assert_str_ne(ops->variants[i].name, "auto");
            for (int j = i + 1; j < ops->n_variants; j++)
                ck_assert(ops->variants[i].op != ops->variants[j].op ||
                          strcmp(ops->variants[i].name, ops->variants[j].name) != 0);
        }
    }
    kvs_backend_ops bad = *kvs_backend_lookup(KVS_BACKEND_CPU);
    bad.attention = NULL;
    ck_assert_int_eq(kvs_backend_check(&bad), KVS_ERR_INTERNAL);
    ck_assert_msg(strstr(kvs_last_error(), "'attention'") != NULL, "message: %s", kvs_last_error());
    bad = *kvs_backend_lookup(KVS_BACKEND_CPU);
    bad.fill32 = NULL;
    ck_assert_int_eq(kvs_backend_check(&bad), KVS_ERR_INTERNAL);
    ck_assert_msg(strstr(kvs_last_error(), "'fill32'") != NULL, "message: %s", kvs_last_error());
    bad = *kvs_backend_lookup(KVS_BACKEND_CPU);
    bad.set_threads = NULL; /* optional */
    bad.supports = NULL;    /* optional */
    ck_assert_int_eq(kvs_backend_check(&bad), KVS_OK);
}
END_TEST

/* kvs_device_set_variants: parsing, errors, forcing, reset; KVS_VARIANT at open. */
START_TEST(test_variants_api) {
    kvs_device *dev = NULL;
    ck_assert_int_eq(kvs_device_open(&dev, NULL), KVS_OK);
    /* counts from the CPU table itself (each ISA adds rows: avx512, avx2, neon, ...) */
    const kvs_backend_ops *cpu = kvs_backend_lookup(KVS_BACKEND_CPU);
    int n_att = 0, n_mm = 0;
    for (int i = 0; i < cpu->n_variants; i++) {
        n_att += cpu->variants[i].op == KVS_OP_attention;
        n_mm += cpu->variants[i].op == KVS_OP_matmul;
    }
    ck_assert_int_ge(n_att, 4);
    ck_assert_int_eq(kvs_device_variant_count(dev, "attention"), n_att);
    ck_assert_int_eq(kvs_device_variant_count(dev, "matmul"), n_mm);
    ck_assert_int_eq(kvs_device_variant_count(dev, "rope"), 0);
    ck_assert_int_eq(kvs_device_variant_count(dev, "nope"), 0);
    ck_assert_str_eq(kvs_device_variant_name(dev, "matmul", 0), "portable");
    ck_assert_str_eq(kvs_device_variant_name(dev, "matmul", 3), "avx2");
    ck_assert_ptr_null(kvs_device_variant_name(dev, "matmul", n_mm));
    ck_assert_int_eq(kvs_device_set_variants(dev, "attention:portable-split, topk:portable"), KVS_OK);
    ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_attention), 1 | 8 /* KVS_CPU_V_PORTABLE | KVS_CPU_V_SPLIT */);
    ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_matmul), 0);
    ck_assert_int_eq(kvs_device_set_variants(dev, "attention:auto"), KVS_OK);
    ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_attention), 0);
    ck_assert_int_ne(kvs_device_variant(dev, KVS_OP_topk), 0);
    ck_assert_int_eq(kvs_device_set_variants(dev, NULL), KVS_OK);
    ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_topk), 0);
    ck_assert_int_eq(kvs_device_set_variants(dev, "attention"), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_device_set_variants(dev, "attention:"), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_device_set_variants(dev, "atention:portable"), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "unknown op 'atention'") != NULL, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_device_set_variants(dev, "attention:fast"), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "portable-split") != NULL, "lists the variants: %s", kvs_last_error());
    ck_assert_int_eq(kvs_device_set_variants(dev, "rope:portable"), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(kvs_device_set_variants(dev, "matmul:portable, topk:portable, matmul:auto"),
                     KVS_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(kvs_last_error(), "'matmul' is named twice") != NULL, "%s", kvs_last_error());
    ck_assert_int_eq(kvs_device_set_variants(dev, NULL), KVS_OK);
    kvs_status s = kvs_device_set_variants(dev, "attention:avx512");
    /* usable only with AVX-512: either forced, or refused with the reason */
    ck_assert_msg(s == KVS_OK || (s == KVS_ERR_UNSUPPORTED && strstr(kvs_last_error(), "AVX-512")), "%s",
                  kvs_last_error());
    s = kvs_device_set_variants(dev, "attention:avx2");
    ck_assert_msg(s == KVS_OK || (s == KVS_ERR_UNSUPPORTED && strstr(kvs_last_error(), "AVX2")), "%s",
                  kvs_last_error());
    if (s == KVS_OK) ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_attention), 16 /* KVS_CPU_V_AVX2 */);
    /* NEON: usable on every aarch64 build (qemu-user in tools/test.sh's aarch64 lane), refused elsewhere */
    s = kvs_device_set_variants(dev, "attention:neon,matmul:neon,topk:neon,topk_global:neon,dwt:neon,idwt:neon");
#if defined(__aarch64__)
    ck_assert_msg(s == KVS_OK, "%s", kvs_last_error());
#else
    ck_assert_msg(s == KVS_ERR_UNSUPPORTED && strstr(kvs_last_error(), "NEON"), "%s", kvs_last_error());
#endif
    kvs_device_destroy(&dev);

    setenv("KVS_VARIANT", "matmul:portable", 1);
    ck_assert_int_eq(kvs_device_open(&dev, NULL), KVS_OK);
    ck_assert_int_eq(kvs_device_variant(dev, KVS_OP_matmul), 1);
    kvs_device_destroy(&dev);
    setenv("KVS_VARIANT", "matmul:bogus", 1);
    ck_assert_int_eq(kvs_device_open(&dev, NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_null(dev);
    ck_assert_msg(strstr(kvs_last_error(), "KVS_VARIANT") != NULL, "%s", kvs_last_error());
    unsetenv("KVS_VARIANT");
}
END_TEST

/* 1 when backend table o lists variant `name` of op. */
static int table_has(const kvs_backend_ops *o, kvs_op_id op, const char *name) {
    for (int i = 0; i < o->n_variants; i++)
        if (o->variants[i].op == op && !strcmp(o->variants[i].name, name)) return 1;
    return 0;
}

/* One KVS_VARIANT serves every backend: on each built backend with a device, an entry only another
 * backend knows (KVS_VARIANT=attention:avx512 on OpenCL) is skipped and the open succeeds with that
 * op on automatic choice; the entries the backend knows still apply; a variant no backend knows
 * still fails the open. */
START_TEST(test_variant_env_foreign) {
    for (int b = 0; b < KVS_BACKEND_COUNT; b++) {
        const kvs_backend_ops *ops = kvs_backend_lookup((kvs_backend)b);
        int n = 0;
        if (!ops || ops->device_count(&n) != KVS_OK || n < 1) continue;
        const kvs_variant *foreign = NULL;
        for (int o = 0; o < KVS_BACKEND_COUNT && !foreign; o++) {
            const kvs_backend_ops *other = kvs_backend_lookup((kvs_backend)o);
            for (int i = 0; other && other != ops && i < other->n_variants && !foreign; i++)
                if (!table_has(ops, other->variants[i].op, other->variants[i].name)) foreign = &other->variants[i];
        }
        if (!foreign) continue; /* a build with one backend */
        char spec[128];
        kvs_device_params p = kvs_device_params_default();
        p.backend = (kvs_backend)b;
        kvs_device *dev = NULL;
        const char *own = ops->n_variants > 0 && ops->variants[0].op != foreign->op && !ops->variants[0].usable
                              ? ops->variants[0].name
                              : NULL;
        if (own)
            snprintf(spec, sizeof spec, "%s:%s,%s:%s", kvs_op_name(foreign->op), foreign->name,
                     kvs_op_name(ops->variants[0].op), own);
        else
            snprintf(spec, sizeof spec, "%s:%s", kvs_op_name(foreign->op), foreign->name);
        setenv("KVS_VARIANT", spec, 1);
        kvs_status s = kvs_device_open(&dev, &p);
        ck_assert_msg(s == KVS_OK, "%s KVS_VARIANT=%s: %s", ops->name, spec, kvs_last_error());
        ck_assert_int_eq(kvs_device_variant(dev, foreign->op), 0);
        if (own) ck_assert_int_eq(kvs_device_variant(dev, ops->variants[0].op), ops->variants[0].code);
        kvs_device_destroy(&dev);
        snprintf(spec, sizeof spec, "%s:%s,%s:nosuch", kvs_op_name(foreign->op), foreign->name,
                 kvs_op_name(foreign->op == KVS_OP_topk ? KVS_OP_attention : KVS_OP_topk));
        setenv("KVS_VARIANT", spec, 1);
        ck_assert_int_eq(kvs_device_open(&dev, &p), KVS_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(kvs_last_error(), "'nosuch'") != NULL, "%s", kvs_last_error());
        unsetenv("KVS_VARIANT");
    }
}
END_TEST

/* Query mode validates and answers without running: the output keeps its contents. */
START_TEST(test_query_mode) {
    kvs_device *dev = NULL;
    ck_assert_int_eq(kvs_device_open(&dev, NULL), KVS_OK);
    int64_t n = 8;
    kvs_tensor *a = NULL, *y = NULL, *bad = NULL;
    ck_assert_int_eq(kvs_tensor_create(&a, dev, KVS_F32, 1, &n), KVS_OK);
    ck_assert_int_eq(kvs_tensor_create(&y, dev, KVS_F32, 1, &n), KVS_OK);
    ck_assert_int_eq(kvs_tensor_create(&bad, dev, KVS_I32, 1, &n), KVS_OK);
    float one[8] = {1, 1, 1, 1, 1, 1, 1, 1}, seven[8] = {7, 7, 7, 7, 7, 7, 7, 7}, got[8];
    ck_assert_int_eq(kvs_tensor_upload(a, one, 0, sizeof one), KVS_OK);
    ck_assert_int_eq(kvs_tensor_upload(y, seven, 0, sizeof seven), KVS_OK);
    ck_assert_int_eq(kvs_device_set_query(dev, 1), KVS_OK);
    ck_assert_int_eq(kvs_add(dev, a, a, y), KVS_OK);
    ck_assert_int_eq(kvs_add(dev, a, bad, y), KVS_ERR_DTYPE); /* validation as a real call */
    ck_assert_int_eq(kvs_device_set_query(dev, 0), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(y, got, 0, sizeof got), KVS_OK);
    ck_assert(got[0] == 7.0f && got[7] == 7.0f);
    ck_assert_int_eq(kvs_add(dev, a, a, y), KVS_OK);
    ck_assert_int_eq(kvs_tensor_download(y, got, 0, sizeof got), KVS_OK);
    ck_assert(got[0] == 2.0f && got[7] == 2.0f);
    ck_assert_int_eq(kvs_device_set_query(NULL, 1), KVS_ERR_INVALID_ARGUMENT);
    kvs_tensor_destroy(&a);
    kvs_tensor_destroy(&y);
    kvs_tensor_destroy(&bad);
    kvs_device_destroy(&dev);
}
END_TEST

int main(void) {
    Suite *s = suite_create("backend-table");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_op_names);
    tcase_add_test(tc, test_table_check);
    tcase_add_test(tc, test_variants_api);
    tcase_add_test(tc, test_variant_env_foreign);
    tcase_add_test(tc, test_query_mode);
    suite_add_tcase(s, tc);
    return kvs_test_run(s);
}
