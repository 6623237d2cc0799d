/* kvsieve — GGUF files: a bounds-checked reader (versions 1, 2, 3) and a small writer.
 *
 * Format reference: ggml's docs/gguf.md and gguf.c (ggerganov/ggml, llama.cpp). Layout:
 *   "GGUF" | u32 version | n_tensors | n_kv | kv[n_kv] | tensor_info[n_tensors] | pad | data
 * where n_tensors, n_kv, string lengths and array counts are u64 (v2, v3) or u32 (v1), a string is
 * length + bytes (no NUL), a kv is string key + u32 type + value, an array is u32 element type +
 * count + elements, a tensor info is string name + u32 n_dims + n_dims dims (ne[0] fastest) +
 * u32 ggml type + u64 offset (relative to the data section). The data section starts at the header
 * end rounded up to `general.alignment` (default 32). All values are little-endian; this reader
 * supports little-endian hosts only.
 *
 * Validation at open (every failure is KVS_ERR_FORMAT with a message naming the byte offset and the
 * key or tensor): magic and version, every count and length against the bytes left (so a corrupt
 * count never causes an unbounded allocation), value types, array nesting depth (<= 8), duplicate
 * keys and tensor names, n_dims in 1..4, dims >= 1 without overflow, ne[0] a multiple of the ggml
 * block size, known ggml type numbers, alignment (a power of two), offsets aligned, tensors inside the
 * file and not overlapping. A known but unsupported ggml type (Q4_K, ...) opens; asking for its data
 * as a kvs_dtype gives KVS_ERR_DTYPE naming the tensor and the type number.
 *
 * Ownership: a kvs_gguf owns its mapping (mmap, or a heap copy when mmap fails); every pointer it
 * hands out (keys, values, strings, tensor data) stays valid until kvs_gguf_close. Strings in values
 * are NOT NUL-terminated (use .len); keys and tensor names are NUL-terminated copies.
 * Thread-safety: a kvs_gguf is read-only after open; concurrent readers are safe.
 */
#ifndef KVSIEVE_GGUF_H
#define KVSIEVE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types (numbers as in the file). */
typedef enum kvs_gguf_type {
    KVS_GGUF_UINT8 = 0,
    KVS_GGUF_INT8 = 1,
    KVS_GGUF_UINT16 = 2,
    KVS_GGUF_INT16 = 3,
    KVS_GGUF_UINT32 = 4,
    KVS_GGUF_INT32 = 5,
    KVS_GGUF_FLOAT32 = 6,
    KVS_GGUF_BOOL = 7,
    KVS_GGUF_STRING = 8,
    KVS_GGUF_ARRAY = 9,
    KVS_GGUF_UINT64 = 10,
    KVS_GGUF_INT64 = 11,
    KVS_GGUF_FLOAT64 = 12,
    KVS_GGUF_TYPE_COUNT
} kvs_gguf_type;

/* "uint8", ..., "float64"; "unknown" otherwise. */
KVS_API const char *kvs_gguf_type_name(kvs_gguf_type t);

/* ggml tensor types this library reads (numbers as in ggml.h; each has a kvs_dtype). Other numbers
 * known to ggml (Q8_1, Q8_K, IQ2_*, IQ3_*, IQ1_*, TQ*, ...) are accepted by the reader for sizing but
 * not converted. */
enum {
    KVS_GGML_F32 = 0,
    KVS_GGML_F16 = 1,
    KVS_GGML_Q4_0 = 2,
    KVS_GGML_Q4_1 = 3,
    KVS_GGML_Q5_0 = 6,
    KVS_GGML_Q5_1 = 7,
    KVS_GGML_Q8_0 = 8,
    KVS_GGML_Q2_K = 10,
    KVS_GGML_Q3_K = 11,
    KVS_GGML_Q4_K = 12,
    KVS_GGML_Q5_K = 13,
    KVS_GGML_Q6_K = 14,
    KVS_GGML_IQ4_NL = 20,
    KVS_GGML_IQ4_XS = 23,
    KVS_GGML_BF16 = 30
};
/* The list in the "not supported" messages. */
#define KVS_GGUF_TYPES_SUPPORTED                                                                     \
    "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"

/* "f32", "f16", "q4_0", ..., or "unknown" for a ggml type number. */
KVS_API const char *kvs_ggml_type_name(uint32_t ggml_type);

typedef struct kvs_gguf_str {
    const char *data;   /* NOT NUL-terminated; points into the file mapping */
    uint64_t len;       /* bytes */
} kvs_gguf_str;

/* One metadata value. Integer types fill both .i and .u (as the file's value converted; .u of a
 * negative value is its two's complement), FLOAT32/FLOAT64 fill .f, BOOL fills .b (0/1, any nonzero
 * byte reads as 1), STRING fills .s, ARRAY fills .arr. */
typedef struct kvs_gguf_value {
    kvs_gguf_type type;
    int64_t i;
    uint64_t u;
    double f;
    int b;
    kvs_gguf_str s;
    struct {
        kvs_gguf_type type;                   /* element type */
        uint64_t n;                           /* element count */
        const void *data;                     /* scalar elements: packed little-endian, unaligned */
        const struct kvs_gguf_value *items;   /* STRING / ARRAY elements: n parsed values; else NULL */
    } arr;
} kvs_gguf_value;

typedef struct kvs_gguf_tensor_info {
    const char *name;      /* NUL-terminated */
    int n_dims;            /* 1..4 */
    int64_t ne[4];         /* ne[0] fastest (row length); ne[i] = 1 for i >= n_dims */
    uint32_t ggml_type;    /* ggml type number (KVS_GGML_F32, ...) */
    uint64_t offset;       /* bytes from the start of the data section */
    uint64_t file_offset;  /* bytes from the start of the file */
    uint64_t nbytes;       /* bytes of data */
    const void *data;      /* the tensor's bytes in the mapping (aligned to general.alignment) */
} kvs_gguf_tensor_info;

typedef struct kvs_gguf kvs_gguf;

/* Opens and validates a GGUF file; maps it read-only (mmap, or read() into memory as a fallback;
 * the environment variable KVSIEVE_NO_MMAP=1 forces the fallback).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_IO (cannot open/read; message has the path and
 * errno text), KVS_ERR_FORMAT (malformed; message has the byte offset and the key or tensor),
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_gguf_open(kvs_gguf **out, const char *path);

/* As kvs_gguf_open, over caller memory `data` of `size` bytes, which must outlive the kvs_gguf
 * (nothing is copied). Used for in-memory files and fuzzing. */
KVS_API kvs_status kvs_gguf_open_memory(kvs_gguf **out, const void *data, size_t size);

/* Unmaps and frees; sets *g = NULL. Accepts NULL and *g == NULL. */
KVS_API void kvs_gguf_close(kvs_gguf **g);

KVS_API uint32_t kvs_gguf_version(const kvs_gguf *g);
KVS_API uint32_t kvs_gguf_alignment(const kvs_gguf *g);
/* Byte offset of the data section in the file. */
KVS_API uint64_t kvs_gguf_data_offset(const kvs_gguf *g);
KVS_API int64_t kvs_gguf_n_kv(const kvs_gguf *g);
KVS_API int64_t kvs_gguf_n_tensors(const kvs_gguf *g);

/* Key-value pairs by index in file order, 0 <= i < n_kv; NULL when out of range. */
KVS_API const char *kvs_gguf_key(const kvs_gguf *g, int64_t i);
KVS_API const kvs_gguf_value *kvs_gguf_value_at(const kvs_gguf *g, int64_t i);
/* Index of key, or -1 when absent. */
KVS_API int64_t kvs_gguf_find_key(const kvs_gguf *g, const char *key);
/* The value of key, or NULL when absent. */
KVS_API const kvs_gguf_value *kvs_gguf_get(const kvs_gguf *g, const char *key);

/* Typed getters by key. Errors: KVS_ERR_NOT_FOUND (absent key), KVS_ERR_DTYPE (wrong value type; the
 * message names the key, the expected and the found type), KVS_ERR_OUT_OF_RANGE (integer does not
 * fit int64). get_int accepts every integer type and BOOL; get_float accepts FLOAT32/64 and integers;
 * get_bool accepts BOOL and integers (nonzero = 1); get_str returns a NUL-free view (not terminated)
 * and get_string copies into buf (cap bytes, NUL-terminated; KVS_ERR_OUT_OF_RANGE if too short). */
KVS_API kvs_status kvs_gguf_get_int(const kvs_gguf *g, const char *key, int64_t *v);
KVS_API kvs_status kvs_gguf_get_float(const kvs_gguf *g, const char *key, double *v);
KVS_API kvs_status kvs_gguf_get_bool(const kvs_gguf *g, const char *key, int *v);
KVS_API kvs_status kvs_gguf_get_str(const kvs_gguf *g, const char *key, kvs_gguf_str *v);
KVS_API kvs_status kvs_gguf_get_string(const kvs_gguf *g, const char *key, char *buf, size_t cap);
/* The array value of key; elem_type = KVS_GGUF_TYPE_COUNT accepts any element type, otherwise the
 * element type must match (KVS_ERR_DTYPE). */
KVS_API kvs_status kvs_gguf_get_arr(const kvs_gguf *g, const char *key, kvs_gguf_type elem_type,
                                    const kvs_gguf_value **arr);

/* Element access for an ARRAY value `arr`, index < arr->arr.n (else KVS_ERR_OUT_OF_RANGE):
 * as int (integer/bool elements), as double (float or integer elements), as string (STRING
 * elements), or the nested value (STRING/ARRAY elements). Wrong element type: KVS_ERR_DTYPE. */
KVS_API kvs_status kvs_gguf_arr_int(const kvs_gguf_value *arr, uint64_t idx, int64_t *v);
KVS_API kvs_status kvs_gguf_arr_float(const kvs_gguf_value *arr, uint64_t idx, double *v);
KVS_API kvs_status kvs_gguf_arr_str(const kvs_gguf_value *arr, uint64_t idx, kvs_gguf_str *v);

/* Tensor infos by index (file order) or name; NULL / -1 when absent. */
KVS_API const kvs_gguf_tensor_info *kvs_gguf_tensor(const kvs_gguf *g, int64_t i);
KVS_API int64_t kvs_gguf_find_tensor(const kvs_gguf *g, const char *name);

/* The kvs_dtype of a ggml type: F32, F16, BF16 and the block types of the KVS_GGML_* list. Others:
 * KVS_ERR_DTYPE with the message "gguf: tensor 'NAME': ggml type N (NAME) is not supported (F32, F16,
 * BF16, Q4_0, ... are)". */
KVS_API kvs_status kvs_gguf_tensor_dtype(const kvs_gguf_tensor_info *t, kvs_dtype *dtype);

/* Converts a tensor's data to f32 (dst: ne[0]*ne[1]*ne[2]*ne[3] floats, row-major, ne[0] fastest).
 * Supported types as kvs_gguf_tensor_dtype; errors as that function. */
KVS_API kvs_status kvs_gguf_tensor_to_f32(const kvs_gguf_tensor_info *t, float *dst);

/* ---------------------------------------------------------------------------------------------- */
/* Writer: collects metadata and tensors in memory, then writes one file. Values are serialised as
 * they are set (file order = call order). Output is bit-exact: reading the file back gives the
 * same values and tensor bytes. */

typedef struct kvs_gguf_writer kvs_gguf_writer;

/* version: 1, 2 or 3 (0 = 3). Errors: KVS_ERR_INVALID_ARGUMENT, KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_gguf_writer_create(kvs_gguf_writer **out, uint32_t version);
KVS_API void kvs_gguf_writer_destroy(kvs_gguf_writer **w);

/* Scalar metadata. Errors: KVS_ERR_INVALID_ARGUMENT (NULL, empty key, duplicate key; the message
 * names the key), KVS_ERR_OUT_OF_MEMORY. set_alignment writes general.alignment (u32, a power of
 * two) and uses it for the data section. */
KVS_API kvs_status kvs_gguf_writer_set_u32(kvs_gguf_writer *w, const char *key, uint32_t v);
KVS_API kvs_status kvs_gguf_writer_set_i32(kvs_gguf_writer *w, const char *key, int32_t v);
KVS_API kvs_status kvs_gguf_writer_set_u64(kvs_gguf_writer *w, const char *key, uint64_t v);
KVS_API kvs_status kvs_gguf_writer_set_i64(kvs_gguf_writer *w, const char *key, int64_t v);
KVS_API kvs_status kvs_gguf_writer_set_f32(kvs_gguf_writer *w, const char *key, float v);
KVS_API kvs_status kvs_gguf_writer_set_f64(kvs_gguf_writer *w, const char *key, double v);
KVS_API kvs_status kvs_gguf_writer_set_bool(kvs_gguf_writer *w, const char *key, int v);
KVS_API kvs_status kvs_gguf_writer_set_str(kvs_gguf_writer *w, const char *key, const char *v);
KVS_API kvs_status kvs_gguf_writer_set_alignment(kvs_gguf_writer *w, uint32_t alignment);
/* Array of n scalars of elem_type (not STRING/ARRAY), data packed in host (little-endian) order. */
KVS_API kvs_status kvs_gguf_writer_set_arr(kvs_gguf_writer *w, const char *key,
                                           kvs_gguf_type elem_type, const void *data, uint64_t n);
/* Array of n NUL-terminated strings. */
KVS_API kvs_status kvs_gguf_writer_set_arr_str(kvs_gguf_writer *w, const char *key,
                                               const char *const *v, uint64_t n);

/* Adds a tensor; `data` (ne[0]*...*ne[n_dims-1] elements of a ggml_type of the KVS_GGML_* list,
 * ne[0] fastest; block types: whole blocks, ne[0] % block == 0) is copied. n_dims 1..4, ne >= 1.
 * Errors: KVS_ERR_INVALID_ARGUMENT (bad dims, duplicate or empty name), KVS_ERR_DTYPE,
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_gguf_writer_add_tensor(kvs_gguf_writer *w, const char *name,
                                              uint32_t ggml_type, int n_dims, const int64_t *ne,
                                              const void *data);

/* Writes the file. Errors: KVS_ERR_IO (path and errno text), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_gguf_writer_write(const kvs_gguf_writer *w, const char *path);

/* Serialises into a malloc'ed buffer (*data, *size); the caller frees it with free(). */
KVS_API kvs_status kvs_gguf_writer_to_memory(const kvs_gguf_writer *w, void **data, size_t *size);

#ifdef __cplusplus
}
#endif
#endif
