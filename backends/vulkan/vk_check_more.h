/* Further checks of vk_check.c (rope, attention, dwt, top-k, rows), included once. */
static void more_tests(void) {}
