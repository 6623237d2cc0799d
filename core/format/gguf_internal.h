/* The GGUF reader's object, shared by gguf.c (parsing, tensors) and gguf_get.c (metadata getters).
 * Not installed. */
#ifndef KVS_FORMAT_GGUF_INTERNAL_H
#define KVS_FORMAT_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/gguf.h"
#include "format/format.h"

struct kvs_gguf {
    const uint8_t *base;
    size_t size;
    void *map;          /* mmap'ed region (munmap on close) */
    void *heap;         /* read() fallback copy */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    int64_t n_kv;
    char **keys;
    kvs_gguf_value *vals;
    int64_t n_tensors;
    kvs_gguf_tensor_info *tensors;
    kvs_strhash key_index;
    kvs_strhash tensor_index;
    char src[256];      /* path or "<memory>" for messages */
};

/* Bytes of one scalar of GGUF type t (0 for strings, arrays, unknown types), and its decoding from
 * p into v (gguf.c). */
size_t kvs_gguf_scalar_size(uint32_t t);
void kvs_gguf_scalar_decode(kvs_gguf_value *v, uint32_t t, const uint8_t *p);

#endif
