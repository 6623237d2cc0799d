/* The op suites of test_ops; each file test_ops_<name>.c defines one constructor. */
#ifndef KVS_TESTS_SUITES_H
#define KVS_TESTS_SUITES_H

#include <check.h>

Suite *suite_tensor(void);
Suite *suite_matmul(void);
Suite *suite_matmul_quant(void);
Suite *suite_elementwise(void);
Suite *suite_embedding(void);
Suite *suite_rope(void);
Suite *suite_attention(void);
Suite *suite_attention_kvq(void);
Suite *suite_dwt(void);
Suite *suite_topk(void);
Suite *suite_topp(void);
Suite *suite_rows(void);

#endif
