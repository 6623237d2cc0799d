/* CPU backend: device and host buffers. The ops table is in backend.c, the ops in ops_*.c, the BLAS
 * helpers in blas.c. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise */
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "cpu_kernels.h"

kvs_status kvs_cpu_device_count(int *count) {
    *count = 1;
    return KVS_OK;
}

static void cpu_read_model_name(char *dst, size_t n) {
    snprintf(dst, n, "host CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ') c++;
                c[strcspn(c, "\n")] = '\0';
                snprintf(dst, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* The kernels the automatic choice runs on this CPU, for the device description. */
static const char *cpu_kernels_name(void) {
    if (kvs_cpu_avx512()) return "AVX-512 kernels";
    if (kvs_cpu_avx2()) return "AVX2 kernels";
    const int arm = kvs_cpu_arm_features();
    if (!(arm & KVS_ARM_NEON)) return "portable kernels";
    if ((arm & KVS_ARM_DOTPROD) && (arm & KVS_ARM_FP16FML)) return "NEON kernels, dotprod, fp16fml";
    if (arm & KVS_ARM_DOTPROD) return "NEON kernels, dotprod";
    if (arm & KVS_ARM_FP16FML) return "NEON kernels, fp16fml";
    return "NEON kernels";
}

kvs_status kvs_cpu_device_describe(int index, kvs_device_info *info) {
    (void)index;
    info->type = KVS_DEVICE_CPU;
    cpu_read_model_name(info->name, sizeof info->name);
    snprintf(info->vendor, sizeof info->vendor, "host");
    snprintf(info->driver, sizeof info->driver, "kvsieve cpu backend (%s; %s%s)",
             cpu_kernels_name(), kvs_cpu_blas_name(),
             KVS_HAVE_OPENMP ? "; OpenMP" : "");
    return KVS_OK;
}

static int cpu_online_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

kvs_status kvs_cpu_set_threads(kvs_device *dev, int n_threads) {
    kvs_cpu *c = dev->impl;
    c->n_threads = n_threads;
    dev->caps.n_threads = n_threads;
    return KVS_OK;
}

kvs_status kvs_cpu_device_open(kvs_device *dev, const kvs_device_params *p) {
    kvs_cpu *c = calloc(1, sizeof *c);
    if (!c) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "cpu backend: out of host memory");
    dev->impl = c;
    kvs_cpu_device_describe(0, &dev->info);
    int cores = cpu_online_cores();
    kvs_caps *caps = &dev->caps;
    caps->fp16_storage = 1;
    caps->fp16_arith = 0;
    caps->bf16_storage = 1;
    caps->int8_arith = 1;
    caps->max_workgroup_size = 1;
    caps->max_buffer_bytes = INT64_MAX / 2;
    caps->max_binding_bytes = INT64_MAX / 2;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    caps->total_memory_bytes = (pages > 0 && page > 0) ? (int64_t)pages * page : 0;
    caps->compute_units = cores;
    caps->unified_memory = 1;
    caps->kv_hierarchical = 1; /* attention_tiles.c decodes qh8 tiles (k_lo / v_lo) */
    kvs_cpu_set_threads(dev, p->n_threads > 0 ? p->n_threads : cores);
    return KVS_OK;
}

void kvs_cpu_device_close(kvs_device *dev) {
    kvs_cpu *c = dev->impl;
    if (c) {
        free(c->scratch);
        free(c->rope_tab);
    }
    free(c);
    dev->impl = NULL;
}

kvs_status kvs_cpu_device_sync(kvs_device *dev) {
    (void)dev;
    return KVS_OK;
}

kvs_status kvs_cpu_buffer_alloc(kvs_device *dev, size_t nbytes, void **handle) {
    (void)dev;
    /* 64-byte alignment for AVX-512 loads; rounded up so aligned_alloc accepts the size. Buffers of
     * 2 MiB and more (weights, KV caches, score rows) are 2 MiB aligned and offered to the kernel
     * as transparent huge pages (Linux, THP mode "madvise"): streaming ops then walk one TLB entry
     * per 2 MiB instead of one per 4 KiB. A refusal leaves ordinary pages; nothing else changes. */
    const size_t huge = (size_t)2 << 20;
    size_t sz = (nbytes + 63) & ~(size_t)63;
    size_t align = 64;
    if (sz >= huge) {
        align = huge;
        sz = (sz + huge - 1) & ~(huge - 1);
    }
    void *p = aligned_alloc(align, sz ? sz : 64);
    if (!p) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "cpu backend: cannot allocate %zu bytes", nbytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (align == huge) (void)madvise(p, sz, MADV_HUGEPAGE);
#endif
    *handle = p;
    return KVS_OK;
}

void kvs_cpu_buffer_free(kvs_device *dev, void *handle) {
    (void)dev;
    free(handle);
}

kvs_status kvs_cpu_upload(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n) {
    (void)dev;
    memcpy((char *)handle + offset, src, n);
    return KVS_OK;
}

kvs_status kvs_cpu_download(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n) {
    (void)dev;
    memcpy(dst, (const char *)handle + offset, n);
    return KVS_OK;
}

kvs_status kvs_cpu_fill32(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n) {
    (void)dev;
    uint32_t *p = (uint32_t *)((char *)handle + offset);
    for (size_t i = 0; i < n; i++) p[i] = word;
    return KVS_OK;
}

void *kvs_cpu_scratch(kvs_device *dev, size_t nbytes) {
    kvs_cpu *c = dev->impl;
    if (c->scratch_bytes < nbytes) {
        free(c->scratch);
        c->scratch = aligned_alloc(64, (nbytes + 63) & ~(size_t)63);
        c->scratch_bytes = c->scratch ? nbytes : 0;
    }
    return c->scratch;
}
