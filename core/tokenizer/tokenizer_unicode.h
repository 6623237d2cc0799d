/* Unicode classes and mappings for the tokenizers (private; tables in tokenizer_unicode.c). */
#ifndef KVS_MODEL_TOKENIZER_UNICODE_H
#define KVS_MODEL_TOKENIZER_UNICODE_H

#include <stdint.h>

int kvs_uni_is_letter(uint32_t cp);    /* general category L* */
int kvs_uni_is_number(uint32_t cp);    /* general category N* */
int kvs_uni_is_punct(uint32_t cp);     /* general category P* */
int kvs_uni_is_symbol(uint32_t cp);    /* general category S* */
int kvs_uni_is_control(uint32_t cp);   /* Cc, Cf, Cs, Co */
int kvs_uni_is_space(uint32_t cp);     /* White_Space property */
uint32_t kvs_uni_nfd_first(uint32_t cp);  /* first code point of the canonical decomposition */
uint32_t kvs_uni_tolower(uint32_t cp);    /* first code point of the lowercase mapping */

#endif
