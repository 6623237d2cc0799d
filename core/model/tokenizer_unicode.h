/* Unicode classes for the byte-level BPE pre-tokenizer (private). */
#ifndef KVS_MODEL_TOKENIZER_UNICODE_H
#define KVS_MODEL_TOKENIZER_UNICODE_H

#include <stdint.h>

int kvs_uni_is_letter(uint32_t cp);   /* general category L* */
int kvs_uni_is_number(uint32_t cp);   /* general category N* */
int kvs_uni_is_space(uint32_t cp);    /* White_Space property */

#endif
