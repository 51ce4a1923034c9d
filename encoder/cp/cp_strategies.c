/* cp_strategies.c: the table of context-parallel strategies (cp_strategies.h) and
 * what reads it: the names (rv_cp_strategy_name, rv_cp_strategy_parse), the checks
 * a call must pass (rv_cp_strategy_check), and the entry serving a call. A new
 * strategy is one more entry here and one more file; nothing else lists names. */
#include <stdio.h>
#include <string.h>

#include "cp_span.h"
#include "cp_strategies.h"

static const cp_strategy_entry cp_strategies[] = {
    {.id = RV_CP_RING, .name = "ring", .attention = CP_FULL,
     .forward = cp_ring_forward, .backward = cp_ring_backward},
    /* A span: K/V only to and from the ranks it reaches (cp_span_ring.c). */
    {.id = RV_CP_RING, .name = "ring", .attention = CP_SPAN, .span_contiguous = 1,
     .span_rows = 1, .span_setup = cp_span_ring_plan,
     .forward = cp_span_ring_forward, .backward = cp_span_ring_backward},
    {.id = RV_CP_ALLGATHER, .name = "allgather", .attention = CP_FULL | CP_SPAN,
     .span_setup = cp_span_gather_keys,
     .forward = cp_allgather_forward, .backward = cp_allgather_backward},
    {.id = RV_CP_ULYSSES, .name = "ulysses", .attention = CP_FULL | CP_SPAN,
     .heads_per_rank = 1, .span_setup = cp_ulysses_span_setup,
     .forward = cp_ulysses_forward, .backward = cp_ulysses_backward},
};
enum { NSTRATEGIES = (int)(sizeof cp_strategies / sizeof cp_strategies[0]) };

const cp_strategy_entry *cp_strategy_find(rv_cp_strategy s, int span)
{
    const int want = span ? CP_SPAN : CP_FULL;
    for (int i = 0; i < NSTRATEGIES; i++)
        if (cp_strategies[i].id == s && (cp_strategies[i].attention & want))
            return &cp_strategies[i];
    return NULL;
}

int cp_strategy_span_rows(rv_cp_strategy s, int ranks)
{
    const cp_strategy_entry *e = cp_strategy_find(s, 1);
    return ranks == 1 || (e && e->span_rows);
}

/* The first entry of s (its name), NULL for an unknown strategy. */
static const cp_strategy_entry *first_of(rv_cp_strategy s)
{
    for (int i = 0; i < NSTRATEGIES; i++)
        if (cp_strategies[i].id == s)
            return &cp_strategies[i];
    return NULL;
}

/* 1 when an entry of s shards the heads (heads % ranks == 0). */
static int heads_sharded(rv_cp_strategy s)
{
    for (int i = 0; i < NSTRATEGIES; i++)
        if (cp_strategies[i].id == s && cp_strategies[i].heads_per_rank)
            return 1;
    return 0;
}

/* "a, b or c": the names of the strategies, each once, in table order; with
 * any_heads, only those that take any head count. */
static const char *names(char *buf, size_t cap, int any_heads)
{
    const char *pick[NSTRATEGIES];
    int n = 0;
    for (int i = 0; i < NSTRATEGIES; i++) {
        const cp_strategy_entry *e = &cp_strategies[i];
        if (first_of(e->id) == e && !(any_heads && heads_sharded(e->id)))
            pick[n++] = e->name;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 i == 0 ? "" : i == n - 1 ? " or " : ", ", pick[i]);
    return buf;
}

const char *rv_cp_strategy_name(rv_cp_strategy s)
{
    const cp_strategy_entry *e = first_of(s);
    return e ? e->name : "?";
}

rv_status rv_cp_strategy_parse(const char *text, rv_cp_strategy *out)
{
    for (int i = 0; text && i < NSTRATEGIES; i++)
        if (strcmp(text, cp_strategies[i].name) == 0) {
            *out = cp_strategies[i].id;
            return RV_OK;
        }
    char all[128];
    return rv_fail(RV_ERR_INVALID, "unknown strategy '%.64s' (%s)", text ? text : "(null)",
                   names(all, sizeof all, 0));
}

rv_status rv_cp_strategy_check(rv_cp_strategy s, int heads, int ranks)
{
    if (!first_of(s))
        return rv_fail(RV_ERR_INVALID, "unknown strategy %d", (int)s);
    char any[128];
    if (heads_sharded(s) && ranks > 0 && heads % ranks != 0)
        return rv_fail(RV_ERR_INVALID,
                       "%s needs the head count to be a multiple of the context-parallel size, "
                       "but heads=%d and cp=%d (%s take any head count)",
                       rv_cp_strategy_name(s), heads, ranks, names(any, sizeof any, 1));
    return RV_OK;
}
