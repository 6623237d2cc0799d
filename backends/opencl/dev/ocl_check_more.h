/* Further checks (attention, dwt, topk, rows): filled in as the ops land. */
#define MORE_TESTS {"none", NULL}
