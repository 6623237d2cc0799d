/* CPU backend internals: device state, the ops-table entry points, variant codes. */
#ifndef KVS_BACKENDS_CPU_H
#define KVS_BACKENDS_CPU_H

#include <stdio.h>

#include "internal.h"
#include "kvs_config.h"

typedef struct kvs_cpu {
    int n_threads;       /* worker threads for OpenMP regions and OpenBLAS */
    void *scratch;       /* grow-only scratch buffer (kvs_cpu_scratch) */
    size_t scratch_bytes;
    /* kvs_cpu_rope's cos/sin tables of positions [0, rope_npos) for the last (theta_base,
     * freq_scale, n_rot): [rope_npos][n_rot] f32, cos of the n_rot/2 pairs then sin; NULL: none */
    float *rope_tab;
    int64_t rope_npos;
    int rope_n_rot;
    float rope_theta, rope_fscale;
} kvs_cpu;

/* Returns a scratch buffer of at least nbytes owned by the device (valid until the next call), or
 * NULL when out of memory. Not reentrant: one op at a time per device. */
void *kvs_cpu_scratch(kvs_device *dev, size_t nbytes);

static inline int kvs_cpu_threads(const kvs_device *dev) { return ((const kvs_cpu *)dev->impl)->n_threads; }

/* Sets OpenBLAS's (process-wide) thread count when it differs from the last value set; no-op for
 * other BLAS libraries (blas.c). */
void kvs_cpu_blas_threads(int n);

/* 1 when kvs_matmul's automatic choice is the backend's own AVX-512 GEMM instead of cblas_sgemm
 * (the CPU has AVX-512 and the BLAS has no AVX-512 kernels for it); blas.c. */
int kvs_cpu_own_gemm(void);

/* "OpenBLAS core <name>, GEMM: ..." for device descriptions (blas.c). */
const char *kvs_cpu_blas_name(void);

/* Device and buffer slots of the ops table (cpu.c). */
kvs_status kvs_cpu_device_count(int *count);
kvs_status kvs_cpu_device_describe(int index, kvs_device_info *info);
kvs_status kvs_cpu_device_open(kvs_device *dev, const kvs_device_params *p);
void kvs_cpu_device_close(kvs_device *dev);
kvs_status kvs_cpu_device_sync(kvs_device *dev);
kvs_status kvs_cpu_set_threads(kvs_device *dev, int n_threads);
kvs_status kvs_cpu_buffer_alloc(kvs_device *dev, size_t nbytes, void **handle);
void kvs_cpu_buffer_free(kvs_device *dev, void *handle);
kvs_status kvs_cpu_upload(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n);
kvs_status kvs_cpu_download(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n);
kvs_status kvs_cpu_fill32(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n);

/* The ops (ops_*.c): kvs_cpu_<op>(dev, const <args> *a) for every op of KVS_OP_LIST. */
KVS_OP_PROTOTYPES(kvs_cpu_)

/* Kernel variants (backend.c): kvs_variant.code is a set of these bits. PORTABLE: the plain C
 * kernels, the reference implementation of every op (readable, and what a CPU without AVX-512
 * runs); AVX512: the hand-written AVX-512 kernels (backends/cpu/x86/, files named AREA_avx512.c) where the shape
 * allows them (head_dim or k a multiple of 16), the portable ones elsewhere; BLAS: matmul's larger
 * products through cblas_sgemm instead of the own AVX-512 GEMM; SPLIT: attention split over 3 key
 * ranges (flash-decoding) on every call; AVX2: the hand-written AVX2 + FMA + F16C kernels
 * (x86/AREA_avx2.c, compiled with per-file -mavx2 -mfma -mf16c) under the same shape rules; for
 * matmul every weight type (dense f32/f16/bf16/q8_0: matmul_avx2.c; block types: quant_avx2.c).
 * Without a forced variant the backend takes AVX512 when the CPU has it, else AVX2 when it has
 * AVX2, FMA and F16C, BLAS unless OpenBLAS lacks AVX-512 kernels for this CPU, and splits when the
 * (query tile, kv head) tasks are fewer than the threads. */
enum { KVS_CPU_V_PORTABLE = 1, KVS_CPU_V_AVX512 = 2, KVS_CPU_V_BLAS = 4, KVS_CPU_V_SPLIT = 8, KVS_CPU_V_AVX2 = 16 };
/* aarch64 (backends/cpu/arm/AREA_neon.c, arm/neon.h): NEON: the NEON kernels (KVS_ISA_NEON of
 * kvs_cpu_isa: matmul's GEMV of every weight type (float weights: k % 16) and block decoding,
 * attention's tile pass (head_dim % 4), top-k, the DWT / IDWT level bodies), the portable ones
 * elsewhere; with DOTPROD: q8_0 GEMV by SDOT; with FP16: f16 GEMV by FMLAL. Without a forced variant
 * an aarch64 CPU takes NEON plus the extensions it has (getauxval(AT_HWCAP)). */
enum { KVS_CPU_V_NEON = 1 << 8, KVS_CPU_V_DOTPROD = 1 << 9, KVS_CPU_V_FP16 = 1 << 10 };
/* matmul's GEMV of block-type weights on 8-bit activations (matmul.h, kvs_cpu_q8_kernel): Q8 with
 * PORTABLE (portable-q8), AVX2 (avx2-q8: maddubs) or AVX512 (avx512-vnni: AVX512-VNNI dot products);
 * the larger products (GEMM tiles) of these variants are their ISA's f32 ones. Attention: Q8 with
 * AVX512 (avx512-vnni) or AVX2 (avx2-q8) reads a q8_0 / q4_0 / q4_1 / qh8 K / V on 8-bit query codes and
 * weights (attention_q8.h), as the automatic choice does on x86 (kvs_cpu_att_q8). */
enum { KVS_CPU_V_Q8 = 1 << 11 };

#endif
