/* GGUF writer: metadata serialised in call order, tensors copied and laid out at aligned offsets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kvsieve/gguf.h"
#include "quant/quant.h"

typedef struct {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static int wb_put(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

typedef struct {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[4];
    void *data;
    size_t nbytes;
} wtensor;

struct kvs_gguf_writer {
    uint32_t version;
    uint32_t alignment;
    wbuf kv;             /* serialised key-value pairs */
    uint64_t n_kv;
    char **keys;
    size_t n_keys, cap_keys;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
};

kvs_status kvs_gguf_writer_create(kvs_gguf_writer **out, uint32_t version) {
    if (!out) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_gguf_writer_create: NULL");
    *out = NULL;
    if (version == 0) version = 3;
    if (version > 3)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_gguf_writer_create: version %u (1..3)", version);
    kvs_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    w->version = version;
    w->alignment = 32;
    *out = w;
    return KVS_OK;
}

void kvs_gguf_writer_destroy(kvs_gguf_writer **pw) {
    if (!pw || !*pw) return;
    kvs_gguf_writer *w = *pw;
    free(w->kv.p);
    for (size_t i = 0; i < w->n_keys; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w);
    *pw = NULL;
}

static kvs_status oom(void) { return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf writer: out of memory"); }

static int put_cnt(const kvs_gguf_writer *w, wbuf *b, uint64_t n) {
    if (w->version == 1) {
        uint32_t x = (uint32_t)n;
        return wb_put(b, &x, 4);
    }
    return wb_put(b, &n, 8);
}

static int put_str(const kvs_gguf_writer *w, wbuf *b, const char *s) {
    size_t n = strlen(s);
    return put_cnt(w, b, n) || wb_put(b, s, n);
}

/* Registers key (rejecting duplicates) and writes key + type. */
static kvs_status begin_kv(kvs_gguf_writer *w, const char *key, uint32_t type) {
    if (!w || !key || !key[0])
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL or empty key");
    for (size_t i = 0; i < w->n_keys; i++)
        if (strcmp(w->keys[i], key) == 0)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: duplicate key '%s'", key);
    if (w->version == 1 && strlen(key) > UINT32_MAX)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: key too long");
    if (w->n_keys == w->cap_keys) {
        size_t cap = w->cap_keys ? 2 * w->cap_keys : 16;
        char **k = realloc(w->keys, cap * sizeof *k);
        if (!k) return oom();
        w->keys = k;
        w->cap_keys = cap;
    }
    char *k = strdup(key);
    if (!k) return oom();
    if (put_str(w, &w->kv, key) || wb_put(&w->kv, &type, 4)) {
        free(k);
        return oom();
    }
    w->keys[w->n_keys++] = k;
    w->n_kv++;
    return KVS_OK;
}

static kvs_status set_scalar(kvs_gguf_writer *w, const char *key, uint32_t type, const void *v,
                             size_t n) {
    KVS_TRY(begin_kv(w, key, type));
    return wb_put(&w->kv, v, n) ? oom() : KVS_OK;
}

kvs_status kvs_gguf_writer_set_u32(kvs_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, KVS_GGUF_UINT32, &v, 4);
}
kvs_status kvs_gguf_writer_set_i32(kvs_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, KVS_GGUF_INT32, &v, 4);
}
kvs_status kvs_gguf_writer_set_u64(kvs_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, KVS_GGUF_UINT64, &v, 8);
}
kvs_status kvs_gguf_writer_set_i64(kvs_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, KVS_GGUF_INT64, &v, 8);
}
kvs_status kvs_gguf_writer_set_f32(kvs_gguf_writer *w, const char *key, float v) {
    return set_scalar(w, key, KVS_GGUF_FLOAT32, &v, 4);
}
kvs_status kvs_gguf_writer_set_f64(kvs_gguf_writer *w, const char *key, double v) {
    return set_scalar(w, key, KVS_GGUF_FLOAT64, &v, 8);
}
kvs_status kvs_gguf_writer_set_bool(kvs_gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    return set_scalar(w, key, KVS_GGUF_BOOL, &b, 1);
}
kvs_status kvs_gguf_writer_set_str(kvs_gguf_writer *w, const char *key, const char *v) {
    if (!v) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL string for '%s'", key);
    KVS_TRY(begin_kv(w, key, KVS_GGUF_STRING));
    return put_str(w, &w->kv, v) ? oom() : KVS_OK;
}

kvs_status kvs_gguf_writer_set_alignment(kvs_gguf_writer *w, uint32_t a) {
    if (!w || a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: alignment %u is not a power of two",
                         a);
    KVS_TRY(kvs_gguf_writer_set_u32(w, "general.alignment", a));
    w->alignment = a;
    return KVS_OK;
}

static size_t scalar_size(kvs_gguf_type t) {
    switch (t) {
    case KVS_GGUF_UINT8: case KVS_GGUF_INT8: case KVS_GGUF_BOOL: return 1;
    case KVS_GGUF_UINT16: case KVS_GGUF_INT16: return 2;
    case KVS_GGUF_UINT32: case KVS_GGUF_INT32: case KVS_GGUF_FLOAT32: return 4;
    case KVS_GGUF_UINT64: case KVS_GGUF_INT64: case KVS_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

kvs_status kvs_gguf_writer_set_arr(kvs_gguf_writer *w, const char *key, kvs_gguf_type et,
                                   const void *data, uint64_t n) {
    size_t sz = scalar_size(et);
    if (sz == 0)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: '%s': element type %s is not a "
                                                   "scalar", key ? key : "?", kvs_gguf_type_name(et));
    if (!data && n) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL array data");
    if (w && w->version == 1 && n > UINT32_MAX)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: v1 array too long");
    KVS_TRY(begin_kv(w, key, KVS_GGUF_ARRAY));
    uint32_t t = (uint32_t)et;
    if (wb_put(&w->kv, &t, 4) || put_cnt(w, &w->kv, n) || wb_put(&w->kv, data, (size_t)n * sz))
        return oom();
    return KVS_OK;
}

kvs_status kvs_gguf_writer_set_arr_str(kvs_gguf_writer *w, const char *key, const char *const *v,
                                       uint64_t n) {
    if (!v && n) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL string array");
    for (uint64_t i = 0; i < n; i++)
        if (!v[i]) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL string %llu",
                                    (unsigned long long)i);
    KVS_TRY(begin_kv(w, key, KVS_GGUF_ARRAY));
    uint32_t t = KVS_GGUF_STRING;
    if (wb_put(&w->kv, &t, 4) || put_cnt(w, &w->kv, n)) return oom();
    for (uint64_t i = 0; i < n; i++)
        if (put_str(w, &w->kv, v[i])) return oom();
    return KVS_OK;
}

kvs_status kvs_gguf_writer_add_tensor(kvs_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                                      const int64_t *ne, const void *data) {
    if (!w || !name || !name[0] || !ne || !data)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: add_tensor: NULL or empty name");
    if (n_dims < 1 || n_dims > 4)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: tensor '%s': n_dims %d (1..4)", name,
                         n_dims);
    const kvs_dtype_info *ti = kvs_dtype_info_get(kvs_dtype_from_ggml(type));
    if (!ti)
        return kvs_error(KVS_ERR_DTYPE, "gguf writer: tensor '%s': ggml type %u not supported (%s)", name, type,
                         KVS_GGUF_TYPES_SUPPORTED);
    size_t esz = (size_t)ti->bytes, blck = (size_t)ti->block;
    int64_t nel = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || ne[d] > INT64_MAX / nel / 64)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: tensor '%s': ne[%d] = %lld",
                             name, d, (long long)ne[d]);
        nel *= ne[d];
    }
    if (ne[0] % (int64_t)blck != 0)
        return kvs_error(KVS_ERR_DTYPE, "gguf writer: tensor '%s': ne[0] %lld not a multiple of %zu",
                         name, (long long)ne[0], blck);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: duplicate tensor '%s'", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return oom();
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->nbytes = (size_t)nel / blck * esz;
    t->name = strdup(name);
    t->data = malloc(t->nbytes ? t->nbytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        return oom();
    }
    memcpy(t->data, data, t->nbytes);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    w->n_tensors++;
    return KVS_OK;
}

kvs_status kvs_gguf_writer_to_memory(const kvs_gguf_writer *w, void **data, size_t *size) {
    if (!w || !data || !size) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL");
    *data = NULL;
    *size = 0;
    wbuf b = {0};
    uint32_t ver = w->version;
    int bad = wb_put(&b, "GGUF", 4) || wb_put(&b, &ver, 4) || put_cnt(w, &b, w->n_tensors) ||
              put_cnt(w, &b, w->n_kv) || wb_put(&b, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors && !bad; i++) {
        const wtensor *t = &w->tensors[i];
        uint32_t nd = (uint32_t)t->n_dims, ty = t->type;
        bad = put_str(w, &b, t->name) || wb_put(&b, &nd, 4);
        for (int d = 0; d < t->n_dims && !bad; d++) bad = put_cnt(w, &b, (uint64_t)t->ne[d]);
        bad = bad || wb_put(&b, &ty, 4) || wb_put(&b, &off, 8);
        off += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    static const uint8_t zeros[64] = {0};
    if (w->n_tensors > 0) {
        while (!bad && b.n % w->alignment != 0) {
            size_t pad = w->alignment - b.n % w->alignment;
            bad = wb_put(&b, zeros, pad < sizeof zeros ? pad : sizeof zeros);
        }
        for (size_t i = 0; i < w->n_tensors && !bad; i++) {
            const wtensor *t = &w->tensors[i];
            bad = wb_put(&b, t->data, t->nbytes);
            while (!bad && b.n % w->alignment != 0 && i + 1 < w->n_tensors) {
                size_t pad = w->alignment - b.n % w->alignment;
                bad = wb_put(&b, zeros, pad < sizeof zeros ? pad : sizeof zeros);
            }
        }
    }
    if (bad) {
        free(b.p);
        return oom();
    }
    *data = b.p;
    *size = b.n;
    return KVS_OK;
}

kvs_status kvs_gguf_writer_write(const kvs_gguf_writer *w, const char *path) {
    if (!path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf writer: NULL path");
    void *data;
    size_t size;
    KVS_TRY(kvs_gguf_writer_to_memory(w, &data, &size));
    FILE *f = fopen(path, "wb");
    if (!f) {
        int e = errno;
        free(data);
        return kvs_error(KVS_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(e));
    }
    /* the errno of the call that failed: fwrite's when it wrote short, else fclose's (a full disk
     * usually shows only when the buffer is flushed at the close) */
    errno = 0;
    size_t put = fwrite(data, 1, size, f);
    int e = put != size ? errno : 0;
    errno = 0;
    int rc = fclose(f);
    if (!e && rc != 0) e = errno;
    free(data);
    if (put != size || rc != 0)
        return kvs_error(KVS_ERR_IO, "gguf writer: cannot write '%s': %s", path, strerror(e ? e : EIO));
    return KVS_OK;
}
