/* CPU backend: the BLAS library behind matmul's larger products: its thread count, its name in
 * device descriptions, and the automatic choice between cblas_sgemm and the own AVX-512 GEMM
 * (the variants avx512 / avx512-blas force one; backend.c). */
#include <ctype.h>
#include <string.h>

#include <cblas.h>

#include "cpu_kernels.h"

/* ---- BLAS threads ------------------------------------------------------------------------- */

void kvs_cpu_blas_threads(int n) {
#ifdef OPENBLAS_VERSION
    static int current = -1; /* OpenBLAS's thread count is process-wide */
    if (n < 1) n = 1;
    if (n != current) {
        openblas_set_num_threads(n);
        current = n;
    }
#else
    (void)n;
#endif
}

const char *kvs_cpu_blas_name(void) {
#ifdef OPENBLAS_VERSION
    static char name[96];
    if (!name[0]) {
        const char *core = openblas_get_corename();
        snprintf(name, sizeof name, "OpenBLAS core %s, GEMM: %s", core ? core : "?",
                 kvs_cpu_own_gemm() ? "own AVX-512" : "OpenBLAS");
    }
    return name;
#else
    return kvs_cpu_own_gemm() ? "cblas, GEMM: own AVX-512" : "cblas GEMM";
#endif
}

/* OpenBLAS picks its kernels from the CPU model at load time and falls back to old SSE3 kernels
 * ("Prescott") for models it does not know, e.g. some virtualised Xeons, where its SGEMM runs at a
 * fraction of the machine's rate. There, and with other BLAS libraries, a register-blocked AVX-512
 * kernel of our own is faster; with OpenBLAS's AVX-512 kernels, cblas_sgemm is used. */
int kvs_cpu_own_gemm(void) {
#if KVS_CPU_HAVE_AVX512
    static int cached = -1;
    if (cached < 0) {
        int own = kvs_cpu_avx512();
#ifdef OPENBLAS_VERSION
        /* OpenBLAS's AVX-512 SGEMM cores, matched without case ("SkylakeX", "Cooperlake",
         * "SapphireRapids"; an earlier case-sensitive match missed "SkylakeX") */
        const char *core = openblas_get_corename();
        static const char *const avx512_cores[] = {"skylakex", "cooperlake", "sapphirerapids"};
        char lower[64] = {0};
        for (size_t i = 0; core && core[i] && i + 1 < sizeof lower; i++) lower[i] = (char)tolower((unsigned char)core[i]);
        for (size_t i = 0; i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
            if (strstr(lower, avx512_cores[i])) own = 0;
#endif
        cached = own;
    }
    return cached;
#else
    return 0;
#endif
}
