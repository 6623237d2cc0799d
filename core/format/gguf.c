/* GGUF reader (versions 1, 2, 3): every read bounds-checked, every count checked against the bytes
 * left before anything is allocated. Format: ggml docs/gguf.md; see include/kvsieve/gguf.h.
 * Parsing, open/close and the tensor accessors; the metadata getters are gguf_get.c. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "kvsieve/gguf.h"
#include "format/format.h"
#include "format/gguf_internal.h"
#include "quant/quant.h"

#define GGUF_MAX_DEPTH 8
#define GGUF_MAX_NAME 1024

/* ---- ggml type table (block size, bytes per block), from ggml.c's type_traits ------------------- */

typedef struct {
    const char *name;
    uint32_t blck;
    uint32_t size;
} ggml_type_info;

static const ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4},        [1] = {"f16", 1, 2},         [2] = {"q4_0", 32, 18},
    [3] = {"q4_1", 32, 20},     [6] = {"q5_0", 32, 22},      [7] = {"q5_1", 32, 24},
    [8] = {"q8_0", 32, 34},     [9] = {"q8_1", 32, 36},      [10] = {"q2_K", 256, 84},
    [11] = {"q3_K", 256, 110},  [12] = {"q4_K", 256, 144},   [13] = {"q5_K", 256, 176},
    [14] = {"q6_K", 256, 210},  [15] = {"q8_K", 256, 292},   [16] = {"iq2_xxs", 256, 66},
    [17] = {"iq2_xs", 256, 74}, [18] = {"iq3_xxs", 256, 98}, [19] = {"iq1_s", 256, 50},
    [20] = {"iq4_nl", 32, 18},  [21] = {"iq3_s", 256, 110},  [22] = {"iq2_s", 256, 82},
    [23] = {"iq4_xs", 256, 136}, [24] = {"i8", 1, 1},        [25] = {"i16", 1, 2},
    [26] = {"i32", 1, 4},       [27] = {"i64", 1, 8},        [28] = {"f64", 1, 8},
    [29] = {"iq1_m", 256, 56},  [30] = {"bf16", 1, 2},       [34] = {"tq1_0", 256, 54},
    [35] = {"tq2_0", 256, 66},
};
#define N_GGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static const ggml_type_info *ggml_type_get(uint32_t t) {
    if (t >= N_GGML_TYPES || ggml_types[t].name == NULL) return NULL;
    return &ggml_types[t];
}

const char *kvs_ggml_type_name(uint32_t t) {
    const ggml_type_info *ti = ggml_type_get(t);
    return ti ? ti->name : "unknown";
}

static const char *const gguf_type_names[KVS_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool",  "string", "array", "uint64", "int64", "float64"};

const char *kvs_gguf_type_name(kvs_gguf_type t) {
    if ((unsigned)t >= KVS_GGUF_TYPE_COUNT) return "unknown";
    return gguf_type_names[t];
}

/* Bytes of one scalar element; 0 for STRING/ARRAY/unknown. */
static size_t gguf_scalar_size(uint32_t t) {
    switch (t) {
    case KVS_GGUF_UINT8: case KVS_GGUF_INT8: case KVS_GGUF_BOOL: return 1;
    case KVS_GGUF_UINT16: case KVS_GGUF_INT16: return 2;
    case KVS_GGUF_UINT32: case KVS_GGUF_INT32: case KVS_GGUF_FLOAT32: return 4;
    case KVS_GGUF_UINT64: case KVS_GGUF_INT64: case KVS_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- the object ------------------------------------------------------------------------------- */

/* struct kvs_gguf: gguf_internal.h */

/* ---- cursor ------------------------------------------------------------------------------------- */

typedef struct {
    kvs_gguf *g;
    size_t off;
    const char *what;    /* "key 'x'" / "tensor 'y'" / "header" for messages */
} cursor;

static kvs_status fmt_err(const cursor *c, const char *fmt, ...) KVS_PRINTF(2, 3);
static kvs_status fmt_err(const cursor *c, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kvs_error(KVS_ERR_FORMAT, "gguf: %s: offset %zu: %s: %s", c->g->src, c->off, c->what, msg);
}

static size_t left(const cursor *c) { return c->g->size - c->off; }

static kvs_status rd(cursor *c, void *dst, size_t n, const char *field) {
    if (n > left(c))
        return fmt_err(c, "truncated reading %s (%zu bytes needed, %zu left)", field, n, left(c));
    memcpy(dst, c->g->base + c->off, n);
    c->off += n;
    return KVS_OK;
}

static kvs_status rd_u32(cursor *c, uint32_t *v, const char *field) { return rd(c, v, 4, field); }
static kvs_status rd_u64(cursor *c, uint64_t *v, const char *field) { return rd(c, v, 8, field); }

/* A count or length: u32 in v1, u64 later. */
static kvs_status rd_cnt(cursor *c, uint64_t *v, const char *field) {
    if (c->g->version == 1) {
        uint32_t x = 0;
        KVS_TRY(rd_u32(c, &x, field));
        *v = x;
        return KVS_OK;
    }
    return rd_u64(c, v, field);
}

static size_t cnt_size(const kvs_gguf *g) { return g->version == 1 ? 4 : 8; }

/* A string view in the mapping. */
static kvs_status rd_str(cursor *c, kvs_gguf_str *s, const char *field) {
    uint64_t n = 0;
    size_t at = c->off;
    KVS_TRY(rd_cnt(c, &n, field));
    if (n > left(c)) {
        c->off = at;
        return fmt_err(c, "%s length %llu exceeds the file (%zu bytes left)", field,
                       (unsigned long long)n, left(c) - cnt_size(c->g));
    }
    s->data = (const char *)c->g->base + c->off;
    s->len = n;
    c->off += (size_t)n;
    return KVS_OK;
}

/* Grows *arr (elements of `elem` bytes, capacity *cap) to hold at least need elements, zeroing the
 * new part. Counts read from the file only bound the loops: memory grows with the entries actually
 * parsed, so a corrupt count cannot make us allocate more than the file's real content needs. */
static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *p = realloc(*arr, nc * elem);
    if (!p) return -1;
    memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return 0;
}

/* ---- values ------------------------------------------------------------------------------------- */

static void value_free(kvs_gguf_value *v) {
    if (v->type == KVS_GGUF_ARRAY && v->arr.items) {
        kvs_gguf_value *items = (kvs_gguf_value *)v->arr.items;
        if (v->arr.type == KVS_GGUF_ARRAY)
            for (uint64_t i = 0; i < v->arr.n; i++) value_free(&items[i]);
        free(items);
        v->arr.items = NULL;
    }
}

static void scalar_decode(kvs_gguf_value *v, uint32_t t, const uint8_t *p) {
    v->type = (kvs_gguf_type)t;
    switch (t) {
    case KVS_GGUF_UINT8: v->u = p[0]; v->i = (int64_t)v->u; break;
    case KVS_GGUF_INT8: { int8_t x; memcpy(&x, p, 1); v->i = x; v->u = (uint64_t)v->i; } break;
    case KVS_GGUF_UINT16: { uint16_t x; memcpy(&x, p, 2); v->u = x; v->i = x; } break;
    case KVS_GGUF_INT16: { int16_t x; memcpy(&x, p, 2); v->i = x; v->u = (uint64_t)v->i; } break;
    case KVS_GGUF_UINT32: { uint32_t x; memcpy(&x, p, 4); v->u = x; v->i = x; } break;
    case KVS_GGUF_INT32: { int32_t x; memcpy(&x, p, 4); v->i = x; v->u = (uint64_t)v->i; } break;
    case KVS_GGUF_UINT64: { uint64_t x; memcpy(&x, p, 8); v->u = x; v->i = (int64_t)x; } break;
    case KVS_GGUF_INT64: { int64_t x; memcpy(&x, p, 8); v->i = x; v->u = (uint64_t)x; } break;
    case KVS_GGUF_FLOAT32: { float x; memcpy(&x, p, 4); v->f = x; } break;
    case KVS_GGUF_FLOAT64: { double x; memcpy(&x, p, 8); v->f = x; } break;
    case KVS_GGUF_BOOL: v->b = p[0] != 0; v->i = v->b; v->u = (uint64_t)v->b; break;
    default: break;
    }
}

static kvs_status read_value(cursor *c, uint32_t t, kvs_gguf_value *v, int depth);

static kvs_status read_array(cursor *c, kvs_gguf_value *v, int depth) {
    uint32_t et = 0;
    uint64_t n = 0;
    size_t at = c->off;
    v->type = KVS_GGUF_ARRAY;
    if (depth >= GGUF_MAX_DEPTH) return fmt_err(c, "arrays nested deeper than %d", GGUF_MAX_DEPTH);
    KVS_TRY(rd_u32(c, &et, "array element type"));
    if (et >= KVS_GGUF_TYPE_COUNT) {
        c->off = at;
        return fmt_err(c, "bad array element type %u (0..12 valid)", et);
    }
    at = c->off;
    KVS_TRY(rd_cnt(c, &n, "array count"));
    size_t min_elem = gguf_scalar_size(et);
    if (et == KVS_GGUF_STRING) min_elem = cnt_size(c->g);
    if (et == KVS_GGUF_ARRAY) min_elem = 4 + cnt_size(c->g);
    if (n > left(c) / min_elem) {
        c->off = at;
        return fmt_err(c, "array count %llu of %s needs at least %llu bytes, %zu left",
                       (unsigned long long)n, kvs_gguf_type_name((kvs_gguf_type)et),
                       (unsigned long long)n * min_elem, left(c) - cnt_size(c->g));
    }
    v->arr.type = (kvs_gguf_type)et;
    v->arr.n = n;
    v->arr.data = c->g->base + c->off;
    v->arr.items = NULL;
    if (et != KVS_GGUF_STRING && et != KVS_GGUF_ARRAY) {
        c->off += (size_t)(n * min_elem);
        return KVS_OK;
    }
    /* STRING / ARRAY elements: parsed values, grown as they parse; arr.n counts the initialised
     * ones until the end so that value_free never walks past them */
    kvs_gguf_value *items = NULL;
    size_t cap = 0;
    v->arr.n = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (grow((void **)&items, &cap, (size_t)i + 1, sizeof *items)) {
            v->arr.items = items;
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: %s: array of %llu values", c->what,
                             (unsigned long long)n);
        }
        v->arr.items = items;
        v->arr.n = i + 1;
        kvs_status s = read_value(c, et, &items[i], depth + 1);
        if (s != KVS_OK) {
            char buf[1024];
            snprintf(buf, sizeof buf, "%s (array element %llu)", kvs_last_error(),
                     (unsigned long long)i);
            kvs_error(s, "%s", buf);
            return s;
        }
    }
    if (!items && grow((void **)&items, &cap, 1, sizeof *items))
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
    v->arr.items = items;
    v->arr.n = n;
    return KVS_OK;
}

static kvs_status read_value(cursor *c, uint32_t t, kvs_gguf_value *v, int depth) {
    memset(v, 0, sizeof *v);
    if (t == KVS_GGUF_STRING) {
        v->type = KVS_GGUF_STRING;
        return rd_str(c, &v->s, "string");
    }
    if (t == KVS_GGUF_ARRAY) return read_array(c, v, depth);
    size_t sz = gguf_scalar_size(t);
    if (sz == 0) return fmt_err(c, "bad value type %u (0..12 valid)", t);
    if (sz > left(c))
        return fmt_err(c, "truncated reading a %s value (%zu bytes needed, %zu left)",
                       kvs_gguf_type_name((kvs_gguf_type)t), sz, left(c));
    scalar_decode(v, t, c->g->base + c->off);
    c->off += sz;
    return KVS_OK;
}

/* ---- open --------------------------------------------------------------------------------------- */

static char *str_dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Printable, truncated copy of a file string for messages. */
static void safe_name(char *dst, size_t cap, const char *s, size_t n) {
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[j++] = (ch >= 32 && ch < 127) ? (char)ch : '?';
    }
    dst[j] = '\0';
}

static int cmp_tensor_off(const void *a, const void *b) {
    const kvs_gguf_tensor_info *x = *(const kvs_gguf_tensor_info *const *)a;
    const kvs_gguf_tensor_info *y = *(const kvs_gguf_tensor_info *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

static kvs_status parse(kvs_gguf *g) {
    cursor c = {g, 0, "header"};
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return kvs_error(KVS_ERR_UNSUPPORTED, "gguf: %s: big-endian hosts are not supported", g->src);
#endif
    char what[GGUF_MAX_NAME + 32];
    char magic[4];
    KVS_TRY(rd(&c, magic, 4, "magic"));
    if (memcmp(magic, "GGUF", 4) != 0) {
        c.off = 0;
        return fmt_err(&c, "bad magic %02x %02x %02x %02x (expected \"GGUF\")", (unsigned char)magic[0],
                       (unsigned char)magic[1], (unsigned char)magic[2], (unsigned char)magic[3]);
    }
    KVS_TRY(rd_u32(&c, &g->version, "version"));
    if (g->version < 1 || g->version > 3) {
        c.off = 4;
        return fmt_err(&c, "unsupported version %u (1, 2, 3 are)", g->version);
    }
    uint64_t n_tensors = 0, n_kv = 0;
    size_t at = c.off;
    KVS_TRY(rd_cnt(&c, &n_tensors, "tensor count"));
    /* a tensor info takes at least len + 1 name byte + n_dims + 1 dim + type + offset */
    size_t min_ti = cnt_size(g) + 1 + 4 + cnt_size(g) + 4 + 8;
    if (n_tensors > left(&c) / min_ti) {
        c.off = at;
        return fmt_err(&c, "tensor count %llu exceeds what %zu bytes can hold",
                       (unsigned long long)n_tensors, g->size - at);
    }
    at = c.off;
    KVS_TRY(rd_cnt(&c, &n_kv, "metadata count"));
    size_t min_kv = cnt_size(g) + 1 + 4 + 1;
    if (n_kv > left(&c) / min_kv) {
        c.off = at;
        return fmt_err(&c, "metadata count %llu exceeds what %zu bytes can hold",
                       (unsigned long long)n_kv, g->size - at);
    }
    size_t cap_kv = 0, cap_vals = 0, cap_t = 0;
    if (kvs_strhash_init(&g->key_index, n_kv < 256 ? (size_t)n_kv : 256) != 0 ||
        kvs_strhash_init(&g->tensor_index, n_tensors < 256 ? (size_t)n_tensors : 256) != 0)
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: %s: out of memory for the header", g->src);

    g->alignment = 32;
    for (uint64_t i = 0; i < n_kv; i++) {
        kvs_gguf_str key;
        snprintf(what, sizeof what, "metadata entry %llu", (unsigned long long)i);
        c.what = what;
        at = c.off;
        KVS_TRY(rd_str(&c, &key, "key"));
        if (key.len == 0 || key.len > GGUF_MAX_NAME) {
            c.off = at;
            return fmt_err(&c, "key length %llu (1..%d allowed)", (unsigned long long)key.len,
                           GGUF_MAX_NAME);
        }
        if (memchr(key.data, 0, (size_t)key.len)) {
            c.off = at;
            return fmt_err(&c, "key contains a NUL byte");
        }
        char kname[GGUF_MAX_NAME + 1];
        safe_name(kname, sizeof kname, key.data, (size_t)key.len);
        snprintf(what, sizeof what, "key '%s'", kname);
        if (grow((void **)&g->keys, &cap_kv, (size_t)i + 1, sizeof *g->keys) ||
            grow((void **)&g->vals, &cap_vals, (size_t)i + 1, sizeof *g->vals))
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        g->keys[i] = str_dup_n(key.data, (size_t)key.len);
        if (!g->keys[i]) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        g->n_kv = (int64_t)i + 1;   /* keys/vals [0, i] are owned from here on */
        if (kvs_strhash_find(&g->key_index, g->keys[i]) >= 0) {
            c.off = at;
            return fmt_err(&c, "duplicate key");
        }
        uint32_t t = 0;
        at = c.off;
        KVS_TRY(rd_u32(&c, &t, "value type"));
        if (t >= KVS_GGUF_TYPE_COUNT) {
            c.off = at;
            return fmt_err(&c, "bad value type %u (0..12 valid)", t);
        }
        KVS_TRY(read_value(&c, t, &g->vals[i], 0));
        if (kvs_strhash_put(&g->key_index, g->keys[i], (int64_t)i) != 0)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        if (strcmp(g->keys[i], "general.alignment") == 0) {
            const kvs_gguf_value *v = &g->vals[i];
            if (t == KVS_GGUF_ARRAY || t == KVS_GGUF_STRING || t == KVS_GGUF_FLOAT32 ||
                t == KVS_GGUF_FLOAT64 || t == KVS_GGUF_BOOL) {
                c.off = at;
                return fmt_err(&c, "general.alignment has type %s (an integer expected)",
                               kvs_gguf_type_name((kvs_gguf_type)t));
            }
            if (v->i <= 0 || v->i > (1 << 30) || (v->i & (v->i - 1)) != 0) {
                c.off = at;
                return fmt_err(&c, "general.alignment %lld is not a power of two in [1, 2^30]",
                               (long long)v->i);
            }
            g->alignment = (uint32_t)v->i;
        }
    }

    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow((void **)&g->tensors, &cap_t, (size_t)i + 1, sizeof *g->tensors))
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        kvs_gguf_tensor_info *ti = &g->tensors[i];
        kvs_gguf_str name;
        snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)i);
        c.what = what;
        at = c.off;
        KVS_TRY(rd_str(&c, &name, "tensor name"));
        if (name.len == 0 || name.len > GGUF_MAX_NAME || memchr(name.data, 0, (size_t)name.len)) {
            c.off = at;
            return fmt_err(&c, "bad tensor name (length %llu, 1..%d allowed, no NUL)",
                           (unsigned long long)name.len, GGUF_MAX_NAME);
        }
        char tname[GGUF_MAX_NAME + 1];
        safe_name(tname, sizeof tname, name.data, (size_t)name.len);
        snprintf(what, sizeof what, "tensor '%s'", tname);
        ti->name = str_dup_n(name.data, (size_t)name.len);
        if (!ti->name) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        g->n_tensors = (int64_t)i + 1;
        if (kvs_strhash_find(&g->tensor_index, ti->name) >= 0) {
            c.off = at;
            return fmt_err(&c, "duplicate tensor name");
        }
        if (kvs_strhash_put(&g->tensor_index, ti->name, (int64_t)i) != 0)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        uint32_t nd = 0;
        at = c.off;
        KVS_TRY(rd_u32(&c, &nd, "n_dims"));
        if (nd < 1 || nd > 4) {
            c.off = at;
            return fmt_err(&c, "n_dims %u (1..4 allowed)", nd);
        }
        ti->n_dims = (int)nd;
        int64_t nel = 1;
        for (int d = 0; d < 4; d++) ti->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t x = 0;
            at = c.off;
            KVS_TRY(rd_cnt(&c, &x, "dimension"));
            if (x < 1 || x > (uint64_t)INT64_MAX / (uint64_t)nel) {
                c.off = at;
                return fmt_err(&c, "dimension %u = %llu (zero or element count overflows)", d,
                               (unsigned long long)x);
            }
            ti->ne[d] = (int64_t)x;
            nel *= (int64_t)x;
        }
        at = c.off;
        KVS_TRY(rd_u32(&c, &ti->ggml_type, "ggml type"));
        const ggml_type_info *tt = ggml_type_get(ti->ggml_type);
        if (!tt) {
            c.off = at;
            return fmt_err(&c, "unknown ggml type %u", ti->ggml_type);
        }
        if (ti->ne[0] % tt->blck != 0) {
            c.off = at;
            return fmt_err(&c, "ne[0] = %lld is not a multiple of the %s block size %u",
                           (long long)ti->ne[0], tt->name, tt->blck);
        }
        uint64_t nblocks = (uint64_t)nel / tt->blck;
        if (nblocks > (uint64_t)INT64_MAX / tt->size) {
            c.off = at;
            return fmt_err(&c, "byte size overflows");
        }
        ti->nbytes = nblocks * tt->size;
        at = c.off;
        KVS_TRY(rd_u64(&c, &ti->offset, "data offset"));
        ti->file_offset = at;   /* the info's position until the data section is known */
    }

    /* data section */
    uint64_t hdr_end = c.off;
    g->data_off = (hdr_end + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors > 0 && g->data_off > g->size) {
        c.what = "data section";
        return fmt_err(&c, "data section at %llu starts beyond the end of the file (%zu bytes)",
                       (unsigned long long)g->data_off, g->size);
    }
    uint64_t data_size = n_tensors > 0 ? g->size - g->data_off : 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        kvs_gguf_tensor_info *ti = &g->tensors[i];
        snprintf(what, sizeof what, "tensor '%.*s'", GGUF_MAX_NAME, ti->name);
        c.what = what;
        c.off = (size_t)ti->file_offset;
        if (ti->offset % g->alignment != 0)
            return fmt_err(&c, "data offset %llu is not a multiple of the alignment %u",
                           (unsigned long long)ti->offset, g->alignment);
        if (ti->offset > data_size || ti->nbytes > data_size - ti->offset)
            return fmt_err(&c, "data [%llu, %llu) (+%llu) lies beyond the end of the file (%zu bytes)",
                           (unsigned long long)ti->offset,
                           (unsigned long long)(ti->offset + ti->nbytes),
                           (unsigned long long)g->data_off, g->size);
        ti->file_offset = g->data_off + ti->offset;
        ti->data = g->base + ti->file_offset;
    }
    if (n_tensors > 1) {
        const kvs_gguf_tensor_info **order = malloc((size_t)n_tensors * sizeof *order);
        if (!order) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
        for (uint64_t i = 0; i < n_tensors; i++) order[i] = &g->tensors[i];
        qsort(order, (size_t)n_tensors, sizeof *order, cmp_tensor_off);
        for (uint64_t i = 1; i < n_tensors; i++) {
            const kvs_gguf_tensor_info *a = order[i - 1], *b = order[i];
            if (a->offset + a->nbytes > b->offset) {
                snprintf(what, sizeof what, "tensor '%.*s'", GGUF_MAX_NAME, b->name);
                c.what = what;
                c.off = (size_t)b->file_offset;
                kvs_status s = fmt_err(&c, "data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
                                       (unsigned long long)b->offset,
                                       (unsigned long long)(b->offset + b->nbytes), a->name,
                                       (unsigned long long)a->offset,
                                       (unsigned long long)(a->offset + a->nbytes));
                free(order);
                return s;
            }
        }
        free(order);
    }
    return KVS_OK;
}

static kvs_status open_common(kvs_gguf **out, kvs_gguf *g) {
    kvs_status s = parse(g);
    if (s != KVS_OK) {
        kvs_gguf_close(&g);
        return s;
    }
    *out = g;
    return KVS_OK;
}

kvs_status kvs_gguf_open_memory(kvs_gguf **out, const void *data, size_t size) {
    if (!out || (!data && size)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_gguf_open_memory: NULL");
    *out = NULL;
    kvs_gguf *g = calloc(1, sizeof *g);
    if (!g) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
    g->base = data;
    g->size = size;
    snprintf(g->src, sizeof g->src, "<memory>");
    return open_common(out, g);
}

kvs_status kvs_gguf_open(kvs_gguf **out, const char *path) {
    if (!out || !path) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_gguf_open: NULL");
    *out = NULL;
    void *map = NULL, *heap = NULL;
    size_t size = 0;
    KVS_TRY(kvs_map_file(path, &map, &heap, &size));
    kvs_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        kvs_unmap_file(map, heap, size);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "gguf: out of memory");
    }
    g->map = map;
    g->heap = heap;
    g->base = map ? map : heap;
    g->size = size;
    snprintf(g->src, sizeof g->src, "%s", path);
    return open_common(out, g);
}

void kvs_gguf_close(kvs_gguf **pg) {
    if (!pg || !*pg) return;
    kvs_gguf *g = *pg;
    for (int64_t i = 0; i < g->n_kv; i++) {
        free(g->keys[i]);
        value_free(&g->vals[i]);
    }
    free(g->keys);
    free(g->vals);
    for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->tensors);
    kvs_strhash_free(&g->key_index);
    kvs_strhash_free(&g->tensor_index);
    kvs_unmap_file(g->map, g->heap, g->size);
    free(g);
    *pg = NULL;
}

/* ---- tensors (the metadata getters are gguf_get.c) ---------------------------------------- */

const kvs_gguf_tensor_info *kvs_gguf_tensor(const kvs_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

int64_t kvs_gguf_find_tensor(const kvs_gguf *g, const char *name) {
    if (!g || !name) return -1;
    return kvs_strhash_find(&g->tensor_index, name);
}

kvs_status kvs_gguf_tensor_dtype(const kvs_gguf_tensor_info *t, kvs_dtype *dt) {
    if (!t || !dt) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf: NULL argument");
    kvs_dtype d = kvs_dtype_from_ggml(t->ggml_type);
    if (d == KVS_DTYPE_COUNT)
        return kvs_error(KVS_ERR_DTYPE, "gguf: tensor '%s': ggml type %u (%s) is not supported (%s are)", t->name,
                         t->ggml_type, kvs_ggml_type_name(t->ggml_type), KVS_GGUF_TYPES_SUPPORTED);
    *dt = d;
    return KVS_OK;
}

kvs_status kvs_gguf_tensor_to_f32(const kvs_gguf_tensor_info *t, float *dst) {
    kvs_dtype dt;
    KVS_TRY(kvs_gguf_tensor_dtype(t, &dt));
    if (!dst) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf: NULL destination");
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    return kvs_convert_to_f32(dt, t->data, n, dst);
}

/* For the metadata getters (gguf_get.c). */
size_t kvs_gguf_scalar_size(uint32_t t) { return gguf_scalar_size(t); }
void kvs_gguf_scalar_decode(kvs_gguf_value *v, uint32_t t, const uint8_t *p) { scalar_decode(v, t, p); }
