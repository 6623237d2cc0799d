/* Private helpers of core/format's file readers: file mapping, a string->index hash, dtype
 * conversion to f32. Not installed. */
#ifndef KVS_FORMAT_FORMAT_H
#define KVS_FORMAT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

/* Maps path read-only: *map = mmap'ed region, or (mmap failed, or the environment variable
 * KVSIEVE_NO_MMAP=1) *heap = a malloc'ed copy read with read(); exactly one is non-NULL on success
 * (both NULL for an empty file). *size = file bytes.
 * Errors: KVS_ERR_IO (path + errno text), KVS_ERR_OUT_OF_MEMORY. */
kvs_status kvs_map_file(const char *path, void **map, void **heap, size_t *size);
void kvs_unmap_file(void *map, void *heap, size_t size);

/* Open-addressing hash from NUL-terminated strings (not copied: they must outlive the table) to
 * int64 values. */
typedef struct kvs_strhash {
    const char **keys;
    int64_t *vals;
    size_t cap;   /* power of two */
    size_t count; /* entries */
} kvs_strhash;

/* Sized for n entries (load <= 1/2; it grows as needed). Returns 0 on success, -1 out of memory. */
int kvs_strhash_init(kvs_strhash *h, size_t n);
void kvs_strhash_free(kvs_strhash *h);
/* Value of key, or -1. */
int64_t kvs_strhash_find(const kvs_strhash *h, const char *key);
/* Same with an explicit length (key need not be terminated). */
int64_t kvs_strhash_find_n(const kvs_strhash *h, const char *key, size_t len);
/* Inserts (or replaces) key -> val, growing the table. Returns 0, or -1 out of memory. */
int kvs_strhash_put(kvs_strhash *h, const char *key, int64_t val);

/* 1 when p names a directory / a regular file (stat), else 0. */
int kvs_path_is_dir(const char *p);
int kvs_path_is_file(const char *p);

/* Converts n elements of dtype (F32, F16, BF16, or a block type with n a multiple of its block) at src (any
 * alignment) to f32. Errors: KVS_ERR_DTYPE. */
kvs_status kvs_convert_to_f32(kvs_dtype dt, const void *src, int64_t n, float *dst);

/* ---- the model-file object (shared by weights.c and the per-format loaders) ---- */
#include "kvsieve/gguf.h"
#include "kvsieve/model_file.h"

#define KVS_PATH_MAX 4096

struct kvs_model_file {
    kvs_model_format format;
    char path[KVS_PATH_MAX];       /* as opened */
    char dir[KVS_PATH_MAX];        /* directory holding the weights */
    char tok_path[KVS_PATH_MAX];   /* params.tokenizer_path or "" */
    kvs_model_hparams hp;
    kvs_model_weights w;
    kvs_layer_weights *layers;
    kvs_gguf *gguf;                /* GGUF models */
    uint8_t *gguf_used;            /* [n_tensors] 1 = read by the loader (the rest are refused) */
    void *map, *heap;              /* llama2.c / safetensors file mapping */
    size_t map_size;
    void **owned;                  /* heap arrays freed at close */
    int n_owned, cap_owned;
    int force_f32;
};

/* Heap array owned by m (freed at close); NULL (with KVS_ERR_OUT_OF_MEMORY set) on failure. */
void *kvs_mf_alloc(kvs_model_file *m, size_t nbytes);

/* Sets *w to rows x cols of dtype at data (rows = 1 for vectors); when m->force_f32 or the data is
 * not aligned for its dtype, stores an owned f32/aligned copy. */
kvs_status kvs_mf_set_weight(kvs_model_file *m, kvs_weight *w, kvs_dtype dt, const void *data,
                             int64_t rows, int64_t cols);

/* Per-format loaders: fill m->hp and m->w / m->layers. */
kvs_status kvs_mf_load_gguf(kvs_model_file *m);
kvs_status kvs_mf_load_llama2c(kvs_model_file *m);
kvs_status kvs_mf_load_safetensors(kvs_model_file *m, const char *st_path, const char *cfg_path);

/* Shared validation of hparams (positive, divisibility); fills defaults (head_dim, rope_dim). */
kvs_status kvs_mf_check_hparams(kvs_model_file *m);

#endif
