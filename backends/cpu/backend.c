/* CPU backend: the ops table and the kernel variants tests and experts may force.
 *
 * The table lives here, not in cpu.c, so that the device code (cpu.c) and the ops (ops_*.c) do not
 * depend on each other: both are below this file. supports() is left NULL: the CPU backend runs
 * every call the front-ends accept. */
#include <stdio.h>

#include "cpu_kernels.h"

static int cpu_has_avx512(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    if (kvs_cpu_avx512()) return 1;
    snprintf(why, n, "%s", KVS_CPU_HAVE_AVX512 ? "this CPU lacks AVX-512F or F16C"
                                               : "this build has no AVX-512 kernels (not GCC/Clang on x86-64)");
    return 0;
}

static int cpu_has_vnni(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    if (kvs_cpu_avx512_vnni()) return 1;
    snprintf(why, n, "%s", KVS_CPU_HAVE_AVX512 ? "this CPU lacks AVX512-VNNI, AVX512BW or AVX512VL"
                                               : "this build has no AVX-512 kernels (not GCC/Clang on x86-64)");
    return 0;
}

static int cpu_has_avx2(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    if (kvs_cpu_avx2()) return 1;
    snprintf(why, n, "%s", KVS_CPU_HAVE_AVX2 ? "this CPU lacks AVX2, FMA or F16C"
                                             : "this build has no AVX2 kernels (not GCC/Clang on x86-64)");
    return 0;
}

static int cpu_has_arm(int feature, const char *what, char *why, size_t n) {
    if (kvs_cpu_arm_features() & feature) return 1;
    snprintf(why, n, "%s", KVS_CPU_HAVE_NEON ? what : "this build has no NEON kernels (not GCC/Clang for aarch64)");
    return 0;
}

static int cpu_has_neon(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    return cpu_has_arm(KVS_ARM_NEON, "this CPU lacks NEON", why, n);
}

static int cpu_has_dotprod(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    return cpu_has_arm(KVS_ARM_DOTPROD, "this CPU lacks the dot product extension (HWCAP_ASIMDDP)", why, n);
}

static int cpu_has_fp16fml(const kvs_device *dev, char *why, size_t n) {
    (void)dev;
    return cpu_has_arm(KVS_ARM_FP16FML, "this CPU lacks fp16 arithmetic with FMLAL (HWCAP_ASIMDHP, HWCAP_ASIMDFHM)",
                       why, n);
}

/* Codes: KVS_CPU_V_* bits (cpu.h). The portable variants run the plain C kernels, the reference
 * every other variant is tested against (with the float64 references in tests/). */
static const kvs_variant cpu_variants[] = {
    {KVS_OP_matmul, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_matmul, "avx512", KVS_CPU_V_AVX512, cpu_has_avx512},
    {KVS_OP_matmul, "avx512-blas", KVS_CPU_V_AVX512 | KVS_CPU_V_BLAS, cpu_has_avx512},
    {KVS_OP_matmul, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_matmul, "avx2-blas", KVS_CPU_V_AVX2 | KVS_CPU_V_BLAS, cpu_has_avx2},
    {KVS_OP_matmul, "portable-q8", KVS_CPU_V_PORTABLE | KVS_CPU_V_Q8, NULL},
    {KVS_OP_matmul, "avx2-q8", KVS_CPU_V_AVX2 | KVS_CPU_V_Q8, cpu_has_avx2},
    {KVS_OP_matmul, "avx512-vnni", KVS_CPU_V_AVX512 | KVS_CPU_V_Q8, cpu_has_vnni},
    {KVS_OP_matmul, "neon", KVS_CPU_V_NEON, cpu_has_neon},
    {KVS_OP_matmul, "neon-dotprod", KVS_CPU_V_NEON | KVS_CPU_V_DOTPROD, cpu_has_dotprod},
    {KVS_OP_matmul, "neon-fp16", KVS_CPU_V_NEON | KVS_CPU_V_FP16, cpu_has_fp16fml},
    {KVS_OP_attention, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_attention, "portable-split", KVS_CPU_V_PORTABLE | KVS_CPU_V_SPLIT, NULL},
    {KVS_OP_attention, "avx512", KVS_CPU_V_AVX512, cpu_has_avx512},
    {KVS_OP_attention, "avx512-split", KVS_CPU_V_AVX512 | KVS_CPU_V_SPLIT, cpu_has_avx512},
    {KVS_OP_attention, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_attention, "avx2-split", KVS_CPU_V_AVX2 | KVS_CPU_V_SPLIT, cpu_has_avx2},
    /* Q.K^T over a q8_0 / q4_0 / q4_1 / qh8 K on 8-bit query codes, P.V over such a V on 8-bit weights
     * (attention_q8.h): not bit-compatible with avx512 / avx2 (which keep the f32 query, the reference
     * when forced); the automatic choice on x86 for those types (kvs_cpu_att_q8) */
    {KVS_OP_attention, "avx512-vnni", KVS_CPU_V_AVX512 | KVS_CPU_V_Q8, cpu_has_vnni},
    {KVS_OP_attention, "avx512-vnni-split", KVS_CPU_V_AVX512 | KVS_CPU_V_Q8 | KVS_CPU_V_SPLIT, cpu_has_vnni},
    {KVS_OP_attention, "avx2-q8", KVS_CPU_V_AVX2 | KVS_CPU_V_Q8, cpu_has_avx2},
    {KVS_OP_attention, "avx2-q8-split", KVS_CPU_V_AVX2 | KVS_CPU_V_Q8 | KVS_CPU_V_SPLIT, cpu_has_avx2},
    {KVS_OP_attention, "neon", KVS_CPU_V_NEON, cpu_has_neon},
    {KVS_OP_attention, "neon-split", KVS_CPU_V_NEON | KVS_CPU_V_SPLIT, cpu_has_neon},
    {KVS_OP_topk, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_topk, "avx512", KVS_CPU_V_AVX512, cpu_has_avx512},
    {KVS_OP_topk, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_topk, "neon", KVS_CPU_V_NEON, cpu_has_neon},
    {KVS_OP_topk_global, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_topk_global, "avx512", KVS_CPU_V_AVX512, cpu_has_avx512},
    {KVS_OP_topk_global, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_topk_global, "neon", KVS_CPU_V_NEON, cpu_has_neon},
    {KVS_OP_dwt, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_dwt, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_dwt, "neon", KVS_CPU_V_NEON, cpu_has_neon},
    {KVS_OP_idwt, "portable", KVS_CPU_V_PORTABLE, NULL},
    {KVS_OP_idwt, "avx2", KVS_CPU_V_AVX2, cpu_has_avx2},
    {KVS_OP_idwt, "neon", KVS_CPU_V_NEON, cpu_has_neon},
};

const kvs_backend_ops kvs_cpu_backend = {
    .id = KVS_BACKEND_CPU,
    .name = "cpu",
    .device_count = kvs_cpu_device_count,
    .device_describe = kvs_cpu_device_describe,
    .device_open = kvs_cpu_device_open,
    .device_close = kvs_cpu_device_close,
    .device_sync = kvs_cpu_device_sync,
    .set_threads = kvs_cpu_set_threads,
    .buffer_alloc = kvs_cpu_buffer_alloc,
    .buffer_free = kvs_cpu_buffer_free,
    .upload = kvs_cpu_upload,
    .download = kvs_cpu_download,
    .fill32 = kvs_cpu_fill32,
    .supports = NULL,
    .variants = cpu_variants,
    .n_variants = (int)(sizeof cpu_variants / sizeof cpu_variants[0]),
    KVS_OP_TABLE_ENTRIES(kvs_cpu_)
};
