static void attn_tests(void) {}
