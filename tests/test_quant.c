/* Block-quantized dtypes (Q4_0 ... IQ4_XS; core/quant/): the decoders against gguf-py's
 * dequantization (tests/data/quant/NAME.bin, written by tools/fixtures/make_quant_vectors.py) bit-exactly
 * in float32, and against a float64 reference written here from the format (an independent per-value
 * reading of the bits), plus the refusals of rows that are not whole blocks.
 *
 * Decoders checked: kvs_dequant_row (the reference, core/quant/quant.c) and the CPU backend's tile
 * decoders kvs_cpu_qdecode_portable / _avx2 / _avx512 / _neon (the ISA ones where the CPU has the
 * ISA; _neon in aarch64 builds, under qemu-user in tools/test.sh's aarch64 lane): the portable one is
 * the reference compiled as plain C; the SIMD ones store the registers of backends/cpu/quant_fused.h,
 * the very decoders the fused GEMV kernels multiply with, so this checks those bit-exactly too; the
 * qh8 tile decoders of the CPU attention (kvs_cpu_qh8_decode_*) against kvs_qb_qh8_n bit for bit.
 *
 * float64 tolerance: the f32 decoders round twice (scale * sub-scale, then * q) and, for the types
 * with a min, once more at the subtraction: |f32 - exact| <= 3 * 2^-24 * (|scale*q| + |min|) plus the
 * smallest subnormal (products of a subnormal scale round absolutely). A wrong bit anywhere in the
 * unpacking changes a value by at least one quantization step, far above this bound (except for a
 * zero scale, where the bit-exact check against gguf-py still applies).
 * Usage: test_quant DATA_DIR (tests/data/quant). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/matmul.h"
#include "kvsieve/gguf.h"
#include "quant/quant.h"
#include "quant/quant_blocks.h"
#include "ref_quant.h"

static const char *g_dir;

typedef struct vec_file {
    uint32_t ggml_type, n_blocks, block, size;
    uint8_t *blocks;
    float *expect;
} vec_file;

static const struct {
    const char *name;
    kvs_dtype dt;
} types[] = {
    {"q4_0", KVS_Q4_0}, {"q4_1", KVS_Q4_1}, {"q5_0", KVS_Q5_0}, {"q5_1", KVS_Q5_1},
    {"q8_0", KVS_Q8_0}, {"iq4_nl", KVS_IQ4_NL}, {"q2_k", KVS_Q2_K}, {"q3_k", KVS_Q3_K},
    {"q4_k", KVS_Q4_K}, {"q5_k", KVS_Q5_K}, {"q6_k", KVS_Q6_K}, {"iq4_xs", KVS_IQ4_XS},
};
#define N_TYPES (int)(sizeof types / sizeof types[0])

static void load(const char *name, vec_file *v) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", g_dir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (run tools/fixtures/make_quant_vectors.py)", path);
    char magic[4];
    uint32_t h[5];
    ck_assert(fread(magic, 1, 4, f) == 4 && memcmp(magic, "KVSQ", 4) == 0);
    ck_assert(fread(h, 4, 5, f) == 5 && h[0] == 1);
    v->ggml_type = h[1];
    v->n_blocks = h[2];
    v->block = h[3];
    v->size = h[4];
    v->blocks = malloc((size_t)v->n_blocks * v->size);
    v->expect = malloc((size_t)v->n_blocks * v->block * sizeof(float));
    ck_assert(v->blocks && v->expect);
    ck_assert(fread(v->blocks, v->size, v->n_blocks, f) == v->n_blocks);
    ck_assert(fread(v->expect, sizeof(float) * v->block, v->n_blocks, f) == v->n_blocks);
    fclose(f);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void check_bits(const char *who, const char *name, const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], 4);
        memcpy(&b, &want[i], 4);
        ck_assert_msg(a == b, "%s %s value %lld: %.9g (0x%08x), gguf-py %.9g (0x%08x)", who, name, (long long)i,
                      got[i], a, want[i], b);
    }
}

START_TEST(test_vectors) {
    const char *name = types[_i].name;
    const kvs_dtype dt = types[_i].dt;
    vec_file v;
    load(name, &v);
    /* the type table agrees with gguf-py's block and type sizes and ggml numbering */
    ck_assert_int_eq(kvs_dtype_block(dt), (int)v.block);
    ck_assert_uint_eq(kvs_dtype_bytes(dt, v.block), v.size);
    ck_assert_int_eq(kvs_dtype_from_ggml(v.ggml_type), dt);
    ck_assert_str_eq(kvs_dtype_name(dt), name);
    ck_assert_int_eq(strcasecmp(kvs_ggml_type_name(v.ggml_type), name), 0); /* ggml spells "q4_K" */
    const int64_t n = (int64_t)v.n_blocks * v.block;
    float *got = malloc((size_t)n * sizeof(float));
    ck_assert(got != NULL);
    /* reference decoder */
    memset(got, 0xff, (size_t)n * sizeof(float));
    ck_assert_int_eq(kvs_dequant_row(dt, v.blocks, n, got), KVS_OK);
    check_bits("kvs_dequant_row", name, got, v.expect, n);
    /* the CPU backend's per-ISA compilations of the decoders */
    struct { const char *isa; kvs_cpu_qdecode_fn fn; int ok; } isas[] = {
        {"portable", kvs_cpu_qdecode_portable, 1},
#if KVS_CPU_HAVE_AVX512
        {"avx2", kvs_cpu_qdecode_avx2, kvs_cpu_avx2()},
        {"avx512", kvs_cpu_qdecode_avx512, kvs_cpu_avx512()},
#endif
#if KVS_CPU_HAVE_NEON
        {"neon", kvs_cpu_qdecode_neon, (kvs_cpu_arm_features() & KVS_ARM_NEON) != 0},
#endif
    };
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (!isas[k].ok) {
            printf("# %s: %s decoder not checked (this CPU lacks the ISA)\n", name, isas[k].isa);
            continue;
        }
        memset(got, 0xff, (size_t)n * sizeof(float));
        isas[k].fn(dt, v.blocks, n, got);
        check_bits(isas[k].isa, name, got, v.expect, n);
    }
    /* float64 reference from the format */
    double max_err = 0.0;
    for (uint32_t bi = 0; bi < v.n_blocks; bi++) {
        const uint8_t *b = v.blocks + (size_t)bi * v.size;
        for (uint32_t i = 0; i < v.block; i++) {
            double mul, add;
            ref_quant_value(dt, b, (int)i, &mul, &add);
            const double want = mul + add, g = v.expect[(size_t)bi * v.block + i];
            const double tol = 3.0 * 0x1p-24 * (fabs(mul) + fabs(add)) + 0x1p-149;
            ck_assert_msg(fabs(g - want) <= tol, "%s block %u value %u: f32 %.9g, float64 reference %.17g (tol %.3g)",
                          name, bi, i, g, want, tol);
            if (fabs(mul) + fabs(add) > 0) max_err = fmax(max_err, fabs(g - want) / (fabs(mul) + fabs(add)));
        }
    }
    printf("# %s: %u blocks bit-exact vs gguf-py; max |f32 - f64| / (|scale*q| + |min|) = %.3g\n", name, v.n_blocks,
           max_err);
    free(got);
    free(v.blocks);
    free(v.expect);
}
END_TEST

/* Rows that are not whole blocks are refused with a message naming the type and the block. */
START_TEST(test_refusals) {
    const kvs_dtype dt = types[_i].dt;
    const int blk = kvs_dtype_block(dt);
    float out[512];
    uint8_t buf[2048] = {0};
    ck_assert_int_eq(kvs_dequant_row(dt, buf, blk + 16, out), KVS_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(kvs_last_error(), kvs_dtype_name(dt)));
    ck_assert_uint_eq(kvs_dtype_bytes(dt, blk + 16), 0);
    ck_assert_uint_eq(kvs_dtype_bytes(dt, 2 * blk), 2 * kvs_dtype_bytes(dt, blk));
    ck_assert(kvs_dtype_is_quant(dt));

    kvs_device *dev = NULL;
    kvs_device_params p = kvs_device_params_default();
    p.backend = KVS_BACKEND_CPU;
    ck_assert_int_eq(kvs_device_open(&dev, &p), KVS_OK);
    kvs_tensor *t = NULL;
    int64_t ne_bad[2] = {blk + 16, 3}, ne_ok[2] = {2 * blk, 3};
    ck_assert_int_eq(kvs_tensor_create(&t, dev, dt, 2, ne_bad), KVS_ERR_DTYPE);
    ck_assert_ptr_nonnull(strstr(kvs_last_error(), kvs_dtype_name(dt)));
    ck_assert_int_eq(kvs_tensor_create(&t, dev, dt, 2, ne_ok), KVS_OK);
    ck_assert_uint_eq(kvs_tensor_nbytes(t), 3 * kvs_dtype_bytes(dt, 2 * blk));
    kvs_tensor *view = NULL;
    int64_t ne_v[1] = {blk};
    ck_assert_int_eq(kvs_tensor_view(&view, t, 16, 1, ne_v), KVS_ERR_OUT_OF_RANGE); /* mid-block offset */
    ck_assert_int_eq(kvs_tensor_view(&view, t, blk, 1, ne_v), KVS_OK);
    kvs_tensor_destroy(&view);
    kvs_tensor_destroy(&t);
    kvs_device_destroy(&dev);

    /* the GGUF writer refuses a row of a partial block, accepts whole blocks */
    kvs_gguf_writer *w = NULL;
    ck_assert_int_eq(kvs_gguf_writer_create(&w, 3), KVS_OK);
    const uint32_t gt = kvs_dtype_info_get(dt)->ggml_type;
    int64_t wne[2] = {blk + 16, 1};
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "bad", gt, 2, wne, buf), KVS_ERR_DTYPE);
    wne[0] = blk;
    ck_assert_int_eq(kvs_gguf_writer_add_tensor(w, "good", gt, 2, wne, buf), KVS_OK);
    kvs_gguf_writer_destroy(&w);
}
END_TEST

/* QuantSpec's qh8 (two planes, not a GGUF type: no gguf-py vectors): the per-ISA decoders the CPU
 * attention uses for a qh8 tile (backends/cpu/quant_fused.h qf_decode_qh8) against kvs_qb_qh8_n bit
 * for bit, on 600 blocks of random nibbles with random finite f16 d and m (signs, subnormals, zero). */
START_TEST(test_qh8_isa) {
    enum { NB = 600 };
    uint8_t *hi = malloc(NB * 20), *lo = malloc(NB * 16);
    float *want = malloc(NB * 32 * sizeof(float)), *got = malloc(NB * 32 * sizeof(float));
    ck_assert(hi && lo && want && got);
    uint32_t st = 12345u;
    for (int i = 0; i < NB * 20; i++) hi[i] = (uint8_t)((st = st * 1664525u + 1013904223u) >> 24);
    for (int i = 0; i < NB * 16; i++) lo[i] = (uint8_t)((st = st * 1664525u + 1013904223u) >> 24);
    for (int b = 0; b < NB; b++)
        for (int f = 0; f < 2; f++) { /* d, m: no inf / NaN (exponent 31) */
            uint8_t *h = hi + 20 * b + 2 * f;
            if (((h[1] >> 2) & 31) == 31) h[1] &= 0xbf;
            if (b % 50 == 7) h[0] = h[1] = 0; /* a zero scale or min */
        }
    kvs_qb_qh8_n(hi, lo, NB, want);
    struct { const char *isa; kvs_cpu_qh8_decode_fn fn; int ok; } isas[] = {
        {"portable", kvs_cpu_qh8_decode_portable, 1},
#if KVS_CPU_HAVE_AVX512
        {"avx2", kvs_cpu_qh8_decode_avx2, kvs_cpu_avx2()},
        {"avx512", kvs_cpu_qh8_decode_avx512, kvs_cpu_avx512()},
#endif
#if KVS_CPU_HAVE_NEON
        {"neon", kvs_cpu_qh8_decode_neon, (kvs_cpu_arm_features() & KVS_ARM_NEON) != 0},
#endif
    };
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (!isas[k].ok) {
            printf("# qh8: %s decoder not checked (this CPU lacks the ISA)\n", isas[k].isa);
            continue;
        }
        memset(got, 0xff, NB * 32 * sizeof(float));
        isas[k].fn(hi, lo, NB, got);
        check_bits(isas[k].isa, "qh8", got, want, NB * 32);
    }
    free(hi);
    free(lo);
    free(want);
    free(got);
}
END_TEST

int main(int argc, char **argv) {
    g_dir = argc > 1 ? argv[1] : "tests/data/quant";
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("vectors");
    tcase_add_loop_test(tc, test_vectors, 0, N_TYPES);
    tcase_add_loop_test(tc, test_refusals, 0, N_TYPES);
    tcase_add_test(tc, test_qh8_isa);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
