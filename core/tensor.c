/* Tensors: shape bookkeeping, reference-counted device buffers, host transfers, dtype helpers. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "quant/quant.h"

const char *kvs_dtype_name(kvs_dtype t) {
    const kvs_dtype_info *ti = kvs_dtype_info_get(t);
    return ti ? ti->name : "unknown";
}

int kvs_dtype_block(kvs_dtype t) {
    const kvs_dtype_info *ti = kvs_dtype_info_get(t);
    return ti ? ti->block : 0;
}

int kvs_dtype_is_quant(kvs_dtype t) { return kvs_dtype_block(t) > 1 && t != KVS_QH8 && t != KVS_QH8_LO; }

size_t kvs_dtype_bytes(kvs_dtype t, int64_t n) {
    const kvs_dtype_info *ti = kvs_dtype_info_get(t);
    if (n < 0 || !ti || n % ti->block) return 0;
    return (size_t)(n / ti->block) * (size_t)ti->bytes;
}

static kvs_status kvs_shape_check(kvs_dtype dtype, int ndim, const int64_t *ne, size_t *nbytes,
                                  const char *who) {
    if (ndim < 1 || ndim > KVS_MAX_DIMS)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: ndim %d outside 1..%d", who, ndim, KVS_MAX_DIMS);
    if (dtype < 0 || dtype >= KVS_DTYPE_COUNT)
        return kvs_error(KVS_ERR_DTYPE, "%s: unknown dtype %d", who, (int)dtype);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 1)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: ne[%d] = %lld must be >= 1", who, i, (long long)ne[i]);
        if (n > INT64_MAX / 64 / ne[i])
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "%s: element count overflows", who);
        n *= ne[i];
    }
    if (dtype == KVS_QH8)
        return kvs_error(KVS_ERR_DTYPE, "%s: qh8 is a KV-cache type stored as two tensors (its q4_1 upper plane and a qh8_lo "
                         "lower plane): create those", who);
    if (ne[0] % kvs_dtype_block(dtype))
        return kvs_error(KVS_ERR_DTYPE, "%s: %s needs ne[0] %% %d == 0 (ne[0] = %lld)", who, kvs_dtype_name(dtype),
                         kvs_dtype_block(dtype), (long long)ne[0]);
    *nbytes = kvs_dtype_bytes(dtype, n);
    return KVS_OK;
}

static void kvs_buffer_release(kvs_buffer *b) {
    if (!b || --b->refs > 0) return;
    if (!b->borrowed) {
        b->dev->ops->buffer_free(b->dev, b->handle);
        b->dev->bytes_allocated -= (int64_t)b->nbytes;
    }
    free(b);
}

kvs_status kvs_tensor_wrap_host(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int ndim, const int64_t *ne,
                                const void *data) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_wrap_host: out is NULL");
    *out = NULL;
    if (!dev || !ne || !data) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_wrap_host: NULL argument");
    if (dev->ops->id != KVS_BACKEND_CPU)
        return kvs_error(KVS_ERR_UNSUPPORTED, "kvs_tensor_wrap_host: only CPU devices use host memory in place");
    const size_t align = dtype == KVS_F32 || dtype == KVS_I32 ? 4 : dtype == KVS_F16 || dtype == KVS_BF16 ? 2 : 1;
    if ((uintptr_t)data % align)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_wrap_host: %s data at %p is not %zu-byte aligned",
                         kvs_dtype_name(dtype), data, align);
    size_t nbytes;
    KVS_TRY(kvs_shape_check(dtype, ndim, ne, &nbytes, "kvs_tensor_wrap_host"));
    kvs_tensor *t = calloc(1, sizeof *t);
    kvs_buffer *b = calloc(1, sizeof *b);
    if (!t || !b) {
        free(t);
        free(b);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_tensor_wrap_host: out of host memory");
    }
    b->dev = dev;
    b->handle = (void *)(uintptr_t)data; /* read-only by contract */
    b->nbytes = nbytes;
    b->refs = 1;
    b->borrowed = 1;
    t->dev = dev;
    t->buf = b;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < KVS_MAX_DIMS; i++) t->ne[i] = i < ndim ? ne[i] : 1;
    t->nbytes = nbytes;
    *out = t;
    return KVS_OK;
}

kvs_status kvs_tensor_create(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int ndim, const int64_t *ne) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_create: out is NULL");
    *out = NULL;
    if (!dev || !ne) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_create: NULL device or shape");
    size_t nbytes;
    KVS_TRY(kvs_shape_check(dtype, ndim, ne, &nbytes, "kvs_tensor_create"));
    if (dev->caps.max_buffer_bytes > 0 && (int64_t)nbytes > dev->caps.max_buffer_bytes)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY,
                         "kvs_tensor_create: %zu bytes exceed the device's largest buffer (%lld bytes)",
                         nbytes, (long long)dev->caps.max_buffer_bytes);
    kvs_tensor *t = calloc(1, sizeof *t);
    kvs_buffer *b = calloc(1, sizeof *b);
    if (!t || !b) {
        free(t);
        free(b);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_tensor_create: out of host memory");
    }
    kvs_status s = dev->ops->buffer_alloc(dev, nbytes, &b->handle);
    if (s != KVS_OK) {
        free(t);
        free(b);
        return s;
    }
    b->dev = dev;
    b->nbytes = nbytes;
    b->refs = 1;
    dev->bytes_allocated += (int64_t)nbytes;
    if (dev->bytes_allocated > dev->bytes_peak) dev->bytes_peak = dev->bytes_allocated;
    t->dev = dev;
    t->buf = b;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < KVS_MAX_DIMS; i++) t->ne[i] = i < ndim ? ne[i] : 1;
    t->nbytes = nbytes;
    *out = t;
    return KVS_OK;
}

kvs_status kvs_tensor_new(kvs_tensor **out, kvs_device *dev, kvs_dtype dtype, int64_t ne0, int64_t ne1,
                          int64_t ne2, int64_t ne3) {
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    int ndim = 1;
    for (int i = 1; i < 4; i++)
        if (ne[i] > 0) ndim = i + 1;
    for (int i = 1; i < ndim; i++)
        if (ne[i] == 0) ne[i] = 1;
    return kvs_tensor_create(out, dev, dtype, ndim, ne);
}

/* The checks and the fields of a view (no reference taken). */
static kvs_status view_fill(kvs_tensor *t, const kvs_tensor *parent, int64_t offset_elems, int ndim, const int64_t *ne,
                            const char *op) {
    size_t nbytes;
    KVS_TRY(kvs_shape_check(parent->dtype, ndim, ne, &nbytes, op));
    if (offset_elems < 0 || offset_elems % kvs_dtype_block(parent->dtype))
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: bad offset %lld", op, (long long)offset_elems);
    size_t off = kvs_dtype_bytes(parent->dtype, offset_elems);
    if (off + nbytes > parent->nbytes)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: view of %zu bytes at byte %zu exceeds parent '%s' of %zu bytes", op,
                         nbytes, off, parent->name, parent->nbytes);
    *t = *parent;
    t->offset = parent->offset + off;
    t->ndim = ndim;
    for (int i = 0; i < KVS_MAX_DIMS; i++) t->ne[i] = i < ndim ? ne[i] : 1;
    t->nbytes = nbytes;
    return KVS_OK;
}

kvs_status kvs_tensor_view(kvs_tensor **out, kvs_tensor *parent, int64_t offset_elems, int ndim, const int64_t *ne) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_view: out is NULL");
    *out = NULL;
    if (!parent || !ne) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_view: NULL parent or shape");
    kvs_tensor v;
    KVS_TRY(view_fill(&v, parent, offset_elems, ndim, ne, "kvs_tensor_view"));
    kvs_tensor *t = calloc(1, sizeof *t);
    if (!t) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_tensor_view: out of host memory");
    *t = v;
    t->buf->refs++;
    *out = t;
    return KVS_OK;
}

kvs_status kvs_tensor_view_into(kvs_tensor *t, const kvs_tensor *parent, int64_t offset_elems, int ndim, const int64_t *ne) {
    if (!t || !parent || !ne) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_view_into: NULL argument");
    return view_fill(t, parent, offset_elems, ndim, ne, "kvs_tensor_view_into");
}

void kvs_tensor_destroy(kvs_tensor **t) {
    if (!t || !*t) return;
    kvs_buffer_release((*t)->buf);
    free(*t);
    *t = NULL;
}

kvs_status kvs_tensor_upload(kvs_tensor *t, const void *src, size_t offset, size_t nbytes) {
    if (!t || (!src && nbytes)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_upload: NULL argument");
    if (offset > t->nbytes || nbytes > t->nbytes - offset)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tensor_upload: bytes [%zu, %zu) outside tensor '%s' of %zu bytes",
                         offset, offset + nbytes, t->name, t->nbytes);
    if (!nbytes) return KVS_OK;
    if (!t->dev->prof) return t->dev->ops->upload(t->dev, t->buf->handle, t->offset + offset, src, nbytes);
    double t0 = kvs_profile_begin(t->dev);
    kvs_status s = t->dev->ops->upload(t->dev, t->buf->handle, t->offset + offset, src, nbytes);
    kvs_profile_end(t->dev, KVS_PROF_UPLOAD, t0, (int64_t)nbytes);
    return s;
}

kvs_status kvs_tensor_download(const kvs_tensor *t, void *dst, size_t offset, size_t nbytes) {
    if (!t || (!dst && nbytes)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_download: NULL argument");
    if (offset > t->nbytes || nbytes > t->nbytes - offset)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tensor_download: bytes [%zu, %zu) outside tensor '%s' of %zu bytes",
                         offset, offset + nbytes, t->name, t->nbytes);
    if (!nbytes) return KVS_OK;
    if (!t->dev->prof) return t->dev->ops->download(t->dev, t->buf->handle, t->offset + offset, dst, nbytes);
    double t0 = kvs_profile_begin(t->dev);
    kvs_status s = t->dev->ops->download(t->dev, t->buf->handle, t->offset + offset, dst, nbytes);
    kvs_profile_end(t->dev, KVS_PROF_DOWNLOAD, t0, (int64_t)nbytes);
    return s;
}

kvs_status kvs_tensor_fill(kvs_tensor *t, double value) {
    if (!t) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tensor_fill: NULL tensor");
    uint32_t word;
    if (t->dtype == KVS_F32) {
        float f = (float)value;
        memcpy(&word, &f, 4);
    } else if (t->dtype == KVS_I32) {
        if (!(value >= INT32_MIN && value <= INT32_MAX))
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tensor_fill: %g does not fit int32", value);
        int32_t i = (int32_t)value;
        memcpy(&word, &i, 4);
    } else {
        return kvs_error(KVS_ERR_DTYPE, "kvs_tensor_fill: dtype %s not supported (f32, i32)", kvs_dtype_name(t->dtype));
    }
    if (!t->dev->prof) return t->dev->ops->fill32(t->dev, t->buf->handle, t->offset, word, t->nbytes / 4);
    double t0 = kvs_profile_begin(t->dev);
    kvs_status s = t->dev->ops->fill32(t->dev, t->buf->handle, t->offset, word, t->nbytes / 4);
    kvs_profile_end(t->dev, KVS_PROF_FILL, t0, (int64_t)t->nbytes);
    return s;
}

kvs_dtype kvs_tensor_dtype(const kvs_tensor *t) { return t ? t->dtype : KVS_DTYPE_COUNT; }
int kvs_tensor_ndim(const kvs_tensor *t) { return t ? t->ndim : 0; }
int64_t kvs_tensor_ne(const kvs_tensor *t, int i) { return (t && i >= 0 && i < KVS_MAX_DIMS) ? t->ne[i] : 1; }
int64_t kvs_tensor_nelements(const kvs_tensor *t) {
    return t ? t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3] : 0;
}
int64_t kvs_tensor_rows(const kvs_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }
size_t kvs_tensor_nbytes(const kvs_tensor *t) { return t ? t->nbytes : 0; }
kvs_device *kvs_tensor_device(const kvs_tensor *t) { return t ? t->dev : NULL; }

void kvs_tensor_set_name(kvs_tensor *t, const char *name) {
    if (!t) return;
    if (!name) name = "";
    strncpy(t->name, name, sizeof t->name - 1);
    t->name[sizeof t->name - 1] = '\0';
}
const char *kvs_tensor_name(const kvs_tensor *t) { return t ? t->name : ""; }

/* ---- f16 / bf16 conversions (round-to-nearest-even) ---- */

uint16_t kvs_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float kvs_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {
            float f = ldexpf((float)mant, -24);
            memcpy(&x, &f, 4);
            x |= sign;
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t kvs_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float kvs_bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}
