/* GGUF metadata getters: keys, values, typed lookups, array elements. See include/kvsieve/gguf.h. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "format/gguf_internal.h"

/* ---- accessors ---------------------------------------------------------------------------------- */

uint32_t kvs_gguf_version(const kvs_gguf *g) { return g ? g->version : 0; }
uint32_t kvs_gguf_alignment(const kvs_gguf *g) { return g ? g->alignment : 0; }
uint64_t kvs_gguf_data_offset(const kvs_gguf *g) { return g ? g->data_off : 0; }
int64_t kvs_gguf_n_kv(const kvs_gguf *g) { return g ? g->n_kv : 0; }
int64_t kvs_gguf_n_tensors(const kvs_gguf *g) { return g ? g->n_tensors : 0; }

const char *kvs_gguf_key(const kvs_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_kv) ? g->keys[i] : NULL;
}

const kvs_gguf_value *kvs_gguf_value_at(const kvs_gguf *g, int64_t i) {
    return (g && i >= 0 && i < g->n_kv) ? &g->vals[i] : NULL;
}

int64_t kvs_gguf_find_key(const kvs_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return kvs_strhash_find(&g->key_index, key);
}

const kvs_gguf_value *kvs_gguf_get(const kvs_gguf *g, const char *key) {
    int64_t i = kvs_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->vals[i];
}

static int is_int_type(kvs_gguf_type t) {
    return t == KVS_GGUF_UINT8 || t == KVS_GGUF_INT8 || t == KVS_GGUF_UINT16 ||
           t == KVS_GGUF_INT16 || t == KVS_GGUF_UINT32 || t == KVS_GGUF_INT32 ||
           t == KVS_GGUF_UINT64 || t == KVS_GGUF_INT64;
}

static kvs_status lookup(const kvs_gguf *g, const char *key, const kvs_gguf_value **v) {
    if (!g || !key) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf: NULL argument");
    *v = kvs_gguf_get(g, key);
    if (!*v) return kvs_error(KVS_ERR_NOT_FOUND, "gguf: %s: key '%s' not found", g->src, key);
    return KVS_OK;
}

static kvs_status wrong_type(const kvs_gguf *g, const char *key, const char *want, kvs_gguf_type got) {
    return kvs_error(KVS_ERR_DTYPE, "gguf: %s: key '%s' has type %s (%s expected)", g->src, key,
                     kvs_gguf_type_name(got), want);
}

kvs_status kvs_gguf_get_int(const kvs_gguf *g, const char *key, int64_t *out) {
    const kvs_gguf_value *v;
    KVS_TRY(lookup(g, key, &v));
    if (v->type == KVS_GGUF_BOOL) { *out = v->b; return KVS_OK; }
    if (!is_int_type(v->type)) return wrong_type(g, key, "an integer", v->type);
    if (v->type == KVS_GGUF_UINT64 && v->u > (uint64_t)INT64_MAX)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "gguf: key '%s' = %llu does not fit int64", key,
                         (unsigned long long)v->u);
    *out = v->i;
    return KVS_OK;
}

kvs_status kvs_gguf_get_float(const kvs_gguf *g, const char *key, double *out) {
    const kvs_gguf_value *v;
    KVS_TRY(lookup(g, key, &v));
    if (v->type == KVS_GGUF_FLOAT32 || v->type == KVS_GGUF_FLOAT64) { *out = v->f; return KVS_OK; }
    if (v->type == KVS_GGUF_UINT64) { *out = (double)v->u; return KVS_OK; }
    if (is_int_type(v->type)) { *out = (double)v->i; return KVS_OK; }
    return wrong_type(g, key, "a number", v->type);
}

kvs_status kvs_gguf_get_bool(const kvs_gguf *g, const char *key, int *out) {
    const kvs_gguf_value *v;
    KVS_TRY(lookup(g, key, &v));
    if (v->type == KVS_GGUF_BOOL) { *out = v->b; return KVS_OK; }
    if (is_int_type(v->type)) { *out = v->u != 0; return KVS_OK; }
    return wrong_type(g, key, "bool", v->type);
}

kvs_status kvs_gguf_get_str(const kvs_gguf *g, const char *key, kvs_gguf_str *out) {
    const kvs_gguf_value *v;
    KVS_TRY(lookup(g, key, &v));
    if (v->type != KVS_GGUF_STRING) return wrong_type(g, key, "string", v->type);
    *out = v->s;
    return KVS_OK;
}

kvs_status kvs_gguf_get_string(const kvs_gguf *g, const char *key, char *buf, size_t cap) {
    kvs_gguf_str s;
    if (!buf || cap == 0) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf: NULL buffer");
    buf[0] = '\0';
    KVS_TRY(kvs_gguf_get_str(g, key, &s));
    if (s.len >= cap)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "gguf: key '%s': string of %llu bytes, buffer %zu",
                         key, (unsigned long long)s.len, cap);
    memcpy(buf, s.data, (size_t)s.len);
    buf[s.len] = '\0';
    return KVS_OK;
}

kvs_status kvs_gguf_get_arr(const kvs_gguf *g, const char *key, kvs_gguf_type elem,
                            const kvs_gguf_value **out) {
    const kvs_gguf_value *v;
    KVS_TRY(lookup(g, key, &v));
    if (v->type != KVS_GGUF_ARRAY) return wrong_type(g, key, "array", v->type);
    if (elem != KVS_GGUF_TYPE_COUNT && v->arr.type != elem)
        return kvs_error(KVS_ERR_DTYPE, "gguf: %s: key '%s' is an array of %s (%s expected)", g->src,
                         key, kvs_gguf_type_name(v->arr.type), kvs_gguf_type_name(elem));
    *out = v;
    return KVS_OK;
}

static kvs_status arr_check(const kvs_gguf_value *a, uint64_t idx) {
    if (!a || a->type != KVS_GGUF_ARRAY)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "gguf: not an array value");
    if (idx >= a->arr.n)
        return kvs_error(KVS_ERR_OUT_OF_RANGE, "gguf: array index %llu >= count %llu",
                         (unsigned long long)idx, (unsigned long long)a->arr.n);
    return KVS_OK;
}

kvs_status kvs_gguf_arr_int(const kvs_gguf_value *a, uint64_t idx, int64_t *out) {
    KVS_TRY(arr_check(a, idx));
    if (!is_int_type(a->arr.type) && a->arr.type != KVS_GGUF_BOOL)
        return kvs_error(KVS_ERR_DTYPE, "gguf: array of %s read as integer",
                         kvs_gguf_type_name(a->arr.type));
    size_t sz = kvs_gguf_scalar_size(a->arr.type);
    kvs_gguf_value v;
    memset(&v, 0, sizeof v);
    kvs_gguf_scalar_decode(&v, a->arr.type, (const uint8_t *)a->arr.data + idx * sz);
    *out = v.i;
    return KVS_OK;
}

kvs_status kvs_gguf_arr_float(const kvs_gguf_value *a, uint64_t idx, double *out) {
    KVS_TRY(arr_check(a, idx));
    size_t sz = kvs_gguf_scalar_size(a->arr.type);
    if (sz == 0 || a->arr.type == KVS_GGUF_BOOL)
        return kvs_error(KVS_ERR_DTYPE, "gguf: array of %s read as number",
                         kvs_gguf_type_name(a->arr.type));
    kvs_gguf_value v;
    memset(&v, 0, sizeof v);
    kvs_gguf_scalar_decode(&v, a->arr.type, (const uint8_t *)a->arr.data + idx * sz);
    if (a->arr.type == KVS_GGUF_FLOAT32 || a->arr.type == KVS_GGUF_FLOAT64) *out = v.f;
    else if (a->arr.type == KVS_GGUF_UINT64) *out = (double)v.u;
    else *out = (double)v.i;
    return KVS_OK;
}

kvs_status kvs_gguf_arr_str(const kvs_gguf_value *a, uint64_t idx, kvs_gguf_str *out) {
    KVS_TRY(arr_check(a, idx));
    if (a->arr.type != KVS_GGUF_STRING)
        return kvs_error(KVS_ERR_DTYPE, "gguf: array of %s read as string",
                         kvs_gguf_type_name(a->arr.type));
    *out = a->arr.items[idx].s;
    return KVS_OK;
}
