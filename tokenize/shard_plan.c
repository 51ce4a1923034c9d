/* shard_plan.c: contiguous and zigzag shard plans (see rv_shard.h). Chunk
 * boundaries are floor(c * S / C) for C chunks, so chunk sizes differ by at most
 * one token and any S works, divisible or not. */
#include <string.h>

#include "rv_shard.h"

static int64_t boundary(int64_t seq, int64_t c, int64_t chunks)
{
    return (int64_t)((__int128)seq * c / chunks);
}

rv_status rv_shard_plan_make(rv_shard_kind kind, int ranks, int64_t seq, rv_shard_plan *out)
{
    if (ranks < 1)
        return rv_fail(RV_ERR_INVALID, "shard plan: %d ranks (need at least 1)", ranks);
    if (seq < 0)
        return rv_fail(RV_ERR_INVALID, "shard plan: negative sequence length %lld",
                       (long long)seq);
    if (kind != RV_SHARD_CONTIGUOUS && kind != RV_SHARD_ZIGZAG)
        return rv_fail(RV_ERR_INVALID, "shard plan: unknown kind %d", (int)kind);
    *out = (rv_shard_plan){kind, ranks, seq};
    return RV_OK;
}

int rv_shard_segments(const rv_shard_plan *p, int r, rv_shard_seg segs[RV_SHARD_MAX_SEGS])
{
    if (p->kind == RV_SHARD_CONTIGUOUS) {
        int64_t a = boundary(p->seq, r, p->ranks), b = boundary(p->seq, r + 1, p->ranks);
        segs[0] = (rv_shard_seg){.start = a, .len = b - a};
        return 1;
    }
    int64_t chunks = 2 * (int64_t)p->ranks, c1 = r, c2 = chunks - 1 - r;
    int64_t a = boundary(p->seq, c1, chunks), b = boundary(p->seq, c1 + 1, chunks);
    int64_t e = boundary(p->seq, c2, chunks), f = boundary(p->seq, c2 + 1, chunks);
    segs[0] = (rv_shard_seg){.start = a, .len = b - a};
    segs[1] = (rv_shard_seg){.start = e, .len = f - e};
    return 2;
}

int64_t rv_shard_len(const rv_shard_plan *p, int r)
{
    rv_shard_seg s[RV_SHARD_MAX_SEGS];
    int n = rv_shard_segments(p, r, s);
    int64_t len = 0;
    for (int i = 0; i < n; i++)
        len += s[i].len;
    return len;
}

int64_t rv_shard_max_len(const rv_shard_plan *p)
{
    int64_t mx = 0;
    for (int r = 0; r < p->ranks; r++) {
        int64_t l = rv_shard_len(p, r);
        mx = l > mx ? l : mx;
    }
    return mx;
}

int rv_shard_owner(const rv_shard_plan *p, int64_t t, int64_t *local)
{
    int64_t chunks = p->kind == RV_SHARD_CONTIGUOUS ? p->ranks : 2 * (int64_t)p->ranks;
    /* The chunk holding t: the largest c with boundary(c) <= t. */
    int64_t c = (int64_t)((__int128)t * chunks / (p->seq > 0 ? p->seq : 1));
    while (c > 0 && boundary(p->seq, c, chunks) > t)
        c--;
    while (c + 1 < chunks && boundary(p->seq, c + 1, chunks) <= t)
        c++;
    int64_t off = t - boundary(p->seq, c, chunks);
    if (p->kind == RV_SHARD_CONTIGUOUS) {
        *local = off;
        return (int)c;
    }
    if (c < p->ranks) {
        *local = off;
        return (int)c;
    }
    int r = (int)(chunks - 1 - c);
    *local = boundary(p->seq, r + 1, chunks) - boundary(p->seq, r, chunks) + off;
    return r;
}

const char *rv_shard_kind_name(rv_shard_kind kind)
{
    return kind == RV_SHARD_ZIGZAG ? "zigzag" : "contiguous";
}

rv_status rv_shard_kind_parse(const char *text, rv_shard_kind *out)
{
    if (strcmp(text, "contiguous") == 0)
        *out = RV_SHARD_CONTIGUOUS;
    else if (strcmp(text, "zigzag") == 0)
        *out = RV_SHARD_ZIGZAG;
    else
        return rv_fail(RV_ERR_INVALID, "unknown shard plan '%s' (contiguous or zigzag)", text);
    return RV_OK;
}
