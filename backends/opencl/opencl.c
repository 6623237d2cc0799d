/* OpenCL backend: device enumeration over all platforms, buffers (cl_mem), a per-device program
 * cache for the embedded kernel sources, launch helpers, and the ops table. Ops live in ops_*.c.
 *
 * Devices are indexed over the flat list of every device of every platform (CL_DEVICE_TYPE_ALL),
 * in platform order. One context and one in-order queue per open device. Tensors are cl_mem
 * buffers; tensor offsets are passed to kernels as element offsets (no sub-buffers, so no
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN constraints). Uploads and downloads are blocking. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocl.h"
#include "shaders/opencl/kvs_ocl_kernels.h"

/* ---- errors ---------------------------------------------------------------------------------- */

const char *kvs_ocl_errname(cl_int err) {
    switch (err) {
#define E(x) case x: return #x;
    E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
    E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
    E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
    E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
    E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
    E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
    E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
    E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
    E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
    E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
    E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
    E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
    E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
    E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
    E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
    E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
    E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
    E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

kvs_status kvs_ocl_check(cl_int err, const char *call) {
    if (err == CL_SUCCESS) return KVS_OK;
    kvs_status s = KVS_ERR_BACKEND;
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY) s = KVS_ERR_OUT_OF_MEMORY;
    return kvs_error(s, "opencl: %s failed: %s (%d)", call, kvs_ocl_errname(err), (int)err);
}

/* ---- enumeration ----------------------------------------------------------------------------- */

#define KVS_OCL_MAX_DEVICES 64

/* Why POCL_CACHE_DIR is unusable, into why[n] (empty when it is usable or not set). PoCL lists no
 * device (clGetDeviceIDs: CL_DEVICE_NOT_FOUND) when it cannot create its kernel cache directory
 * (pocl_cache_init_topdir); this repeats what it does, mkdir -p, then writes and removes a probe file
 * (an access() test is not enough: root passes it on directories where mkdir fails, e.g. under /proc).
 * Runs only when the PoCL platform listed no device. */
static void ocl_pocl_cache_check(char *why, size_t n) {
    why[0] = '\0';
    const char *dir = getenv("POCL_CACHE_DIR");
    if (!dir || !*dir) return;
    char path[4096];
    if (strlen(dir) >= sizeof path - 32) {
        snprintf(why, n, "POCL_CACHE_DIR is %zu bytes long", strlen(dir));
        return;
    }
    snprintf(path, sizeof path, "%s", dir);
    for (char *c = path + 1;; c++) { /* mkdir -p */
        const int end = *c == '\0';
        if (*c == '/' || end) {
            *c = '\0';
            struct stat sb;
            if (mkdir(path, 0755) != 0 && errno != EEXIST) {
                snprintf(why, n, "POCL_CACHE_DIR=%s: cannot create %s: %s", dir, path, strerror(errno));
                return;
            }
            if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                snprintf(why, n, "POCL_CACHE_DIR=%s: %s is not a directory", dir, path);
                return;
            }
            if (end) break;
            *c = '/';
        }
    }
    snprintf(path, sizeof path, "%s/.kvsieve-probe-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        snprintf(why, n, "POCL_CACHE_DIR=%s is not writable: %s", dir, strerror(errno));
        return;
    }
    close(fd);
    unlink(path);
}

/* Flat list of (platform, device) over all platforms. No ICD or no platform: 0 devices; none at all
 * while the PoCL platform lists none and POCL_CACHE_DIR is unusable: KVS_ERR_NO_DEVICE saying so
 * (PoCL's only sign of it is an empty platform). */
static kvs_status ocl_enumerate(cl_platform_id *plats, cl_device_id *devs, int *count) {
    *count = 0;
    cl_uint np = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &np);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0) return KVS_OK;
    KVS_OCL_TRY(err, "clGetPlatformIDs");
    cl_platform_id pl[16];
    int pocl_empty = 0; /* the PoCL platform listed no device */
    if (np > 16) np = 16;
    KVS_OCL_TRY(clGetPlatformIDs(np, pl, NULL), "clGetPlatformIDs");
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        err = clGetDeviceIDs(pl[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
        if (err == CL_DEVICE_NOT_FOUND || nd == 0) {
            char name[128] = "";
            if (clGetPlatformInfo(pl[p], CL_PLATFORM_NAME, sizeof name - 1, name, NULL) == CL_SUCCESS &&
                strstr(name, "Portable Computing Language"))
                pocl_empty = 1;
            continue;
        }
        KVS_OCL_TRY(err, "clGetDeviceIDs");
        cl_device_id d[KVS_OCL_MAX_DEVICES];
        if (nd > KVS_OCL_MAX_DEVICES) nd = KVS_OCL_MAX_DEVICES;
        KVS_OCL_TRY(clGetDeviceIDs(pl[p], CL_DEVICE_TYPE_ALL, nd, d, NULL), "clGetDeviceIDs");
        for (cl_uint i = 0; i < nd && *count < KVS_OCL_MAX_DEVICES; i++) {
            plats[*count] = pl[p];
            devs[*count] = d[i];
            (*count)++;
        }
    }
    if (*count == 0 && pocl_empty) {
        char why[4400];
        ocl_pocl_cache_check(why, sizeof why);
        if (why[0])
            return kvs_error(KVS_ERR_NO_DEVICE, "opencl: the PoCL platform lists no device because its kernel cache "
                             "directory is unusable (%s); set POCL_CACHE_DIR to a writable directory", why);
    }
    return KVS_OK;
}

static kvs_status ocl_device_count(int *count) {
    cl_platform_id pl[KVS_OCL_MAX_DEVICES];
    cl_device_id d[KVS_OCL_MAX_DEVICES];
    return ocl_enumerate(pl, d, count);
}

static kvs_status ocl_lookup(int index, cl_platform_id *pl, cl_device_id *dv) {
    cl_platform_id pls[KVS_OCL_MAX_DEVICES];
    cl_device_id ds[KVS_OCL_MAX_DEVICES];
    int n = 0;
    KVS_TRY(ocl_enumerate(pls, ds, &n));
    if (index < 0 || index >= n)
        return kvs_error(KVS_ERR_NO_DEVICE, "opencl device %d does not exist (%d found)", index, n);
    *pl = pls[index];
    *dv = ds[index];
    return KVS_OK;
}

/* Copies a string into dst[n], truncating. */
static void ocl_strcpy(char *dst, size_t n, const char *src) {
    size_t len = strlen(src);
    if (len >= n) len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* A device string, truncated to n-1 bytes (the driver refuses buffers that are too small). */
static void ocl_str(cl_device_id d, cl_device_info what, char *dst, size_t n) {
    char buf[1024];
    dst[0] = '\0';
    if (clGetDeviceInfo(d, what, sizeof buf, buf, NULL) != CL_SUCCESS) return;
    buf[sizeof buf - 1] = '\0';
    ocl_strcpy(dst, n, buf);
}

static int ocl_has_ext(cl_device_id d, const char *ext) {
    size_t sz = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &sz) != CL_SUCCESS || sz == 0) return 0;
    char *s = malloc(sz + 1);
    if (!s) return 0;
    int found = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, sz, s, NULL) == CL_SUCCESS) {
        s[sz] = '\0';
        size_t len = strlen(ext);
        for (char *p = strstr(s, ext); p; p = strstr(p + 1, ext))
            if ((p == s || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) { found = 1; break; }
    }
    free(s);
    return found;
}

static void ocl_fill_info(cl_platform_id pl, cl_device_id d, kvs_device_info *info) {
    char ver[48], drv[32], plat[48], pbuf[256];
    ocl_str(d, CL_DEVICE_NAME, info->name, sizeof info->name);
    ocl_str(d, CL_DEVICE_VENDOR, info->vendor, sizeof info->vendor);
    ocl_str(d, CL_DEVICE_VERSION, ver, sizeof ver);
    /* "OpenCL 3.0 PoCL HSTR: ..." -> "OpenCL 3.0": the vendor text after the version is noise. */
    char *sp = strchr(ver, ' ');
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = '\0';
    ocl_str(d, CL_DRIVER_VERSION, drv, sizeof drv);
    plat[0] = '\0';
    if (clGetPlatformInfo(pl, CL_PLATFORM_NAME, sizeof pbuf, pbuf, NULL) == CL_SUCCESS) {
        pbuf[sizeof pbuf - 1] = '\0';
        ocl_strcpy(plat, sizeof plat, pbuf);
    }
    snprintf(info->driver, sizeof info->driver, "%s, driver %s, %s", ver, drv, plat);
    cl_device_type t = 0;
    cl_bool unified = CL_FALSE;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    if (t & CL_DEVICE_TYPE_CPU) info->type = KVS_DEVICE_CPU;
    else if (t & CL_DEVICE_TYPE_GPU) info->type = unified ? KVS_DEVICE_GPU_INTEGRATED : KVS_DEVICE_GPU_DISCRETE;
    else info->type = KVS_DEVICE_OTHER;
}

static kvs_status ocl_device_describe(int index, kvs_device_info *info) {
    cl_platform_id pl;
    cl_device_id d;
    KVS_TRY(ocl_lookup(index, &pl, &d));
    ocl_fill_info(pl, d, info);
    return KVS_OK;
}

/* ---- device ---------------------------------------------------------------------------------- */

static void ocl_device_close(kvs_device *dev);

static kvs_status ocl_device_open(kvs_device *dev, const kvs_device_params *p) {
    kvs_ocl *o = calloc(1, sizeof *o);
    if (!o) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "opencl backend: out of host memory");
    dev->impl = o;
    kvs_status s = ocl_lookup(p->index, &o->platform, &o->device);
    if (s != KVS_OK) goto fail;
    ocl_fill_info(o->platform, o->device, &dev->info);
    dev->info.backend = KVS_BACKEND_OPENCL;
    dev->info.index = p->index;

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)o->platform, 0};
    o->ctx = clCreateContext(props, 1, &o->device, NULL, NULL, &err);
    if ((s = kvs_ocl_check(err, "clCreateContext")) != KVS_OK) goto fail;
    o->queue = clCreateCommandQueue(o->ctx, o->device, 0, &err);
    if ((s = kvs_ocl_check(err, "clCreateCommandQueue")) != KVS_OK) goto fail;
    o->zero = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, 16, NULL, &err);
    if ((s = kvs_ocl_check(err, "clCreateBuffer")) != KVS_OK) goto fail;

    cl_ulong local = 0, maxalloc = 0, global = 0;
    size_t maxwg = 0;
    cl_uint cus = 0;
    cl_bool unified = CL_FALSE;
    cl_device_type t = 0;
    clGetDeviceInfo(o->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clGetDeviceInfo(o->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    clGetDeviceInfo(o->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL);
    clGetDeviceInfo(o->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL);
    if (clGetDeviceInfo(o->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL) != CL_SUCCESS)
        cus = 0; /* not reported (kvs_caps.compute_units) */
    clGetDeviceInfo(o->device, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
    clGetDeviceInfo(o->device, CL_DEVICE_TYPE, sizeof t, &t, NULL);
    o->max_wg = maxwg ? maxwg : 64;
    o->local_mem = local ? (size_t)local : 16384;
    o->is_cpu = (t & CL_DEVICE_TYPE_CPU) != 0;
    o->fp16_arith = ocl_has_ext(o->device, "cl_khr_fp16");

    kvs_caps *c = &dev->caps;
    memset(c, 0, sizeof *c);
    c->fp16_storage = 1;          /* vload_half / vstore_half are core OpenCL C */
    c->fp16_arith = o->fp16_arith;
    c->bf16_storage = 1;          /* bf16 handled as ushort bit patterns */
    c->int8_arith = 1;
    c->subgroup_size = 0;         /* kernels use no subgroup operations */
    c->subgroup_ops = ocl_has_ext(o->device, "cl_khr_subgroups") || ocl_has_ext(o->device, "cl_intel_subgroups");
    c->shared_mem_bytes = (int64_t)local;
    c->max_workgroup_size = (int)o->max_wg;
    c->max_buffer_bytes = (int64_t)maxalloc;
    c->max_binding_bytes = (int64_t)maxalloc;
    c->total_memory_bytes = (int64_t)global;
    c->compute_units = (int)cus;
    c->unified_memory = unified || o->is_cpu;
    c->kv_hierarchical = 1;       /* attention.cl reads qh8's lower planes (QT_QH8), rows.cl writes them */
    return KVS_OK;
fail:
    ocl_device_close(dev);
    return s;
}

static void ocl_device_close(kvs_device *dev) {
    kvs_ocl *o = dev->impl;
    if (!o) return;
    if (o->queue) clFinish(o->queue);
    for (int i = 0; i < o->n_progs; i++) {
        kvs_ocl_program *pr = &o->progs[i];
        for (int k = 0; k < pr->n_kernels; k++) clReleaseKernel(pr->kernels[k].k);
        if (pr->prog) clReleaseProgram(pr->prog);
        free(pr->defines);
    }
    free(o->progs);
    for (int i = 0; i < KVS_OCL_SCR_COUNT; i++)
        if (o->scratch[i]) clReleaseMemObject(o->scratch[i]);
    if (o->zero) clReleaseMemObject(o->zero);
    if (o->queue) clReleaseCommandQueue(o->queue);
    if (o->ctx) clReleaseContext(o->ctx);
    free(o);
    dev->impl = NULL;
}

static kvs_status ocl_device_sync(kvs_device *dev) {
    kvs_ocl *o = dev->impl;
    return kvs_ocl_check(clFinish(o->queue), "clFinish");
}

/* ---- buffers --------------------------------------------------------------------------------- */

static kvs_status ocl_buffer_alloc(kvs_device *dev, size_t nbytes, void **handle) {
    kvs_ocl *o = dev->impl;
    cl_int err;
    /* Round up to 16 bytes so vectorised tails and 4-byte fills never straddle the end. */
    size_t sz = (nbytes + 15) & ~(size_t)15;
    cl_mem m = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, sz ? sz : 16, NULL, &err);
    if (err != CL_SUCCESS) {
        kvs_status s = kvs_ocl_check(err, "clCreateBuffer");
        return kvs_error(s, "opencl: clCreateBuffer(%zu bytes) failed: %s (%d)", nbytes, kvs_ocl_errname(err),
                         (int)err);
    }
    *handle = m;
    return KVS_OK;
}

static void ocl_buffer_free(kvs_device *dev, void *handle) {
    (void)dev;
    if (handle) clReleaseMemObject((cl_mem)handle);
}

kvs_status kvs_ocl_write(kvs_device *dev, cl_mem m, size_t offset, const void *src, size_t n) {
    kvs_ocl *o = dev->impl;
    if (n == 0) return KVS_OK;
    return kvs_ocl_check(clEnqueueWriteBuffer(o->queue, m, CL_TRUE, offset, n, src, 0, NULL, NULL),
                         "clEnqueueWriteBuffer");
}

static kvs_status ocl_upload(kvs_device *dev, void *handle, size_t offset, const void *src, size_t n) {
    return kvs_ocl_write(dev, (cl_mem)handle, offset, src, n);
}

static kvs_status ocl_download(kvs_device *dev, void *handle, size_t offset, void *dst, size_t n) {
    kvs_ocl *o = dev->impl;
    if (n == 0) return KVS_OK;
    return kvs_ocl_check(clEnqueueReadBuffer(o->queue, (cl_mem)handle, CL_TRUE, offset, n, dst, 0, NULL, NULL),
                         "clEnqueueReadBuffer");
}

kvs_status kvs_ocl_fill32(kvs_device *dev, cl_mem m, size_t offset, uint32_t word, size_t n_words) {
    kvs_ocl *o = dev->impl;
    if (n_words == 0) return KVS_OK;
    cl_uint w = word;
    return kvs_ocl_check(clEnqueueFillBuffer(o->queue, m, &w, sizeof w, offset, n_words * 4, 0, NULL, NULL),
                         "clEnqueueFillBuffer");
}

static kvs_status ocl_fill32(kvs_device *dev, void *handle, size_t offset, uint32_t word, size_t n) {
    return kvs_ocl_fill32(dev, (cl_mem)handle, offset, word, n);
}

kvs_status kvs_ocl_scratch(kvs_device *dev, int slot, size_t nbytes, cl_mem *out) {
    kvs_ocl *o = dev->impl;
    if (nbytes < 16) nbytes = 16;
    if (o->scratch_bytes[slot] < nbytes) {
        if (o->scratch[slot]) clReleaseMemObject(o->scratch[slot]);
        o->scratch[slot] = NULL;
        o->scratch_bytes[slot] = 0;
        size_t sz = kvs_ocl_round_up(nbytes + nbytes / 4, 4096);
        cl_int err;
        o->scratch[slot] = clCreateBuffer(o->ctx, CL_MEM_READ_WRITE, sz, NULL, &err);
        if (err != CL_SUCCESS) {
            o->scratch[slot] = NULL;
            return kvs_error(err == CL_MEM_OBJECT_ALLOCATION_FAILURE ? KVS_ERR_OUT_OF_MEMORY : KVS_ERR_BACKEND,
                             "opencl: clCreateBuffer for %zu bytes of scratch failed: %s (%d)", sz,
                             kvs_ocl_errname(err), (int)err);
        }
        o->scratch_bytes[slot] = sz;
    }
    *out = o->scratch[slot];
    return KVS_OK;
}

int kvs_ocl_qt(kvs_dtype t) {
    switch (t) {
    case KVS_F32: return 0;
    case KVS_F16: return 1;
    case KVS_BF16: return 2;
    case KVS_Q8_0: return 3;
    case KVS_Q4_0: return 4;
    case KVS_Q4_1: return 5;
    case KVS_Q5_0: return 6;
    case KVS_Q5_1: return 7;
    case KVS_IQ4_NL: return 8;
    case KVS_Q2_K: return 9;
    case KVS_Q3_K: return 10;
    case KVS_Q4_K: return 11;
    case KVS_Q5_K: return 12;
    case KVS_Q6_K: return 13;
    case KVS_IQ4_XS: return 14;
    default: return -1;
    }
}

size_t kvs_ocl_wg(kvs_device *dev, size_t want) {
    kvs_ocl *o = dev->impl;
    size_t w = want < o->max_wg ? want : o->max_wg;
    return kvs_ocl_pow2_floor(w ? w : 1);
}

/* ---- programs -------------------------------------------------------------------------------- */

static const struct kvs_cl_entry *ocl_find_source(const char *file) {
    for (const struct kvs_cl_entry *e = kvs_cl_table; e->name; e++)
        if (strcmp(e->name, file) == 0) return e;
    return NULL;
}

static kvs_status ocl_build(kvs_device *dev, const char *file, const char *defines, kvs_ocl_program *pr) {
    kvs_ocl *o = dev->impl;
    const struct kvs_cl_entry *e = ocl_find_source(file);
    if (!e) return kvs_error(KVS_ERR_INTERNAL, "opencl: no embedded kernel source '%s'", file);
    /* the sources that read block types get the shared block decoders (qblocks.cl) in front */
    const struct kvs_cl_entry *pre = NULL;
    if (strcmp(file, "qmatmul.cl") == 0 || strcmp(file, "attention.cl") == 0 || strcmp(file, "rows.cl") == 0) {
        pre = ocl_find_source("qblocks.cl");
        if (!pre) return kvs_error(KVS_ERR_INTERNAL, "opencl: no embedded kernel source 'qblocks.cl'");
    }
    const char *srcs[3] = {defines, pre ? pre->source : "", e->source};
    size_t lens[3] = {strlen(defines), pre ? pre->length : 0, e->length};
    cl_int err;
    cl_program prog = clCreateProgramWithSource(o->ctx, 3, srcs, lens, &err);
    KVS_OCL_TRY(err, "clCreateProgramWithSource");
    /* No fast-math: the ops' NaN/inf semantics and the tests' tolerances depend on IEEE behaviour. */
    const double tb = kvs_now_s();
    err = clBuildProgram(prog, 1, &o->device, "", NULL, NULL);
    dev->build_seconds += kvs_now_s() - tb;
    if (err != CL_SUCCESS) {
        char log[800];
        log[0] = '\0';
        size_t sz = 0;
        clGetProgramBuildInfo(prog, o->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &sz);
        char *full = sz ? malloc(sz + 1) : NULL;
        if (full && clGetProgramBuildInfo(prog, o->device, CL_PROGRAM_BUILD_LOG, sz, full, NULL) == CL_SUCCESS) {
            full[sz] = '\0';
            snprintf(log, sizeof log, "%s", full);
        }
        free(full);
        clReleaseProgram(prog);
        if (err == CL_BUILD_PROGRAM_FAILURE || err == CL_INVALID_BUILD_OPTIONS)
            return kvs_error(KVS_ERR_COMPILE, "opencl: building %s failed: %s (%d); log: %s", file,
                             kvs_ocl_errname(err), (int)err, log);
        return kvs_ocl_check(err, "clBuildProgram");
    }
    pr->file = e->name;
    pr->defines = strdup(defines);
    pr->prog = prog;
    pr->n_kernels = 0;
    if (!pr->defines) {
        clReleaseProgram(prog);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "opencl: out of host memory");
    }
    return KVS_OK;
}

kvs_status kvs_ocl_kernel(kvs_device *dev, const char *file, const char *defines, const char *name,
                          cl_kernel *out) {
    kvs_ocl *o = dev->impl;
    if (!defines) defines = "";
    kvs_ocl_program *pr = NULL;
    for (int i = 0; i < o->n_progs; i++)
        if (strcmp(o->progs[i].file, file) == 0 && strcmp(o->progs[i].defines, defines) == 0) {
            pr = &o->progs[i];
            break;
        }
    if (!pr) {
        if (o->n_progs == o->cap_progs) {
            int cap = o->cap_progs ? o->cap_progs * 2 : 16;
            kvs_ocl_program *np = realloc(o->progs, (size_t)cap * sizeof *np);
            if (!np) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "opencl: out of host memory");
            o->progs = np;
            o->cap_progs = cap;
        }
        kvs_ocl_program tmp;
        memset(&tmp, 0, sizeof tmp);
        KVS_TRY(ocl_build(dev, file, defines, &tmp));
        o->progs[o->n_progs] = tmp;
        pr = &o->progs[o->n_progs++];
    }
    for (int i = 0; i < pr->n_kernels; i++)
        if (strcmp(pr->kernels[i].name, name) == 0) {
            *out = pr->kernels[i].k;
            return KVS_OK;
        }
    if (pr->n_kernels == (int)(sizeof pr->kernels / sizeof pr->kernels[0]))
        return kvs_error(KVS_ERR_INTERNAL, "opencl: too many kernels cached for %s", file);
    cl_int err;
    cl_kernel k = clCreateKernel(pr->prog, name, &err);
    if (err != CL_SUCCESS)
        return kvs_error(KVS_ERR_BACKEND, "opencl: clCreateKernel(%s in %s) failed: %s (%d)", name, file,
                         kvs_ocl_errname(err), (int)err);
    snprintf(pr->kernels[pr->n_kernels].name, sizeof pr->kernels[0].name, "%s", name);
    pr->kernels[pr->n_kernels].k = k;
    pr->n_kernels++;
    *out = k;
    return KVS_OK;
}

kvs_status kvs_ocl_launch(kvs_device *dev, cl_kernel k, const char *what, int ndim, const size_t *gws,
                          const size_t *lws, int nargs, const kvs_ocl_arg *args) {
    kvs_ocl *o = dev->impl;
    for (int i = 0; i < nargs; i++) {
        const kvs_ocl_arg *a = &args[i];
        const void *ptr = NULL;
        switch (a->kind) {
        case 0: ptr = &a->mem; break;
        case 1: ptr = &a->i; break;
        case 2: ptr = &a->l; break;
        case 3: ptr = &a->f; break;
        default: ptr = NULL; break;
        }
        cl_int err = clSetKernelArg(k, (cl_uint)i, a->size, ptr);
        if (err != CL_SUCCESS)
            return kvs_error(KVS_ERR_BACKEND, "opencl: clSetKernelArg(%s, arg %d) failed: %s (%d)", what, i,
                             kvs_ocl_errname(err), (int)err);
    }
    size_t g[3];
    for (int d = 0; d < ndim; d++) {
        g[d] = gws[d];
        if (g[d] == 0) return KVS_OK; /* empty range: nothing to do */
        if (lws) g[d] = kvs_ocl_round_up(g[d], lws[d]);
    }
    cl_int err = clEnqueueNDRangeKernel(o->queue, k, (cl_uint)ndim, NULL, g, lws, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return kvs_error(err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY
                             ? KVS_ERR_OUT_OF_MEMORY : KVS_ERR_BACKEND,
                         "opencl: clEnqueueNDRangeKernel(%s) failed: %s (%d)", what, kvs_ocl_errname(err), (int)err);
    return KVS_OK;
}

const kvs_backend_ops kvs_opencl_backend = {
    .id = KVS_BACKEND_OPENCL,
    .name = "opencl",
    .device_count = ocl_device_count,
    .device_describe = ocl_device_describe,
    .device_open = ocl_device_open,
    .device_close = ocl_device_close,
    .device_sync = ocl_device_sync,
    .set_threads = NULL,
    .buffer_alloc = ocl_buffer_alloc,
    .buffer_free = ocl_buffer_free,
    .upload = ocl_upload,
    .download = ocl_download,
    .fill32 = ocl_fill32,
    .supports = kvs_ocl_supports,
    .variants = kvs_ocl_variants,
    .n_variants = KVS_OCL_N_VARIANTS,
    KVS_OP_TABLE_ENTRIES(kvs_ocl_)
};
