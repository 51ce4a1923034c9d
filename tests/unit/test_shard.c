/* test_shard.c: shard plans cover every token exactly once, contiguous plans are
 * balanced to one token, zigzag plans give equal causal work, owner lookup agrees
 * with the segments. Checked by brute force over many (N, S). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "rv_cp_attention.h"
#include "rv_shard.h"

Test(shard, coverage_balance_owner)
{
    for (int kind = 0; kind < 2; kind++)
        for (int n = 1; n <= 9; n++)
            for (int64_t s = 0; s <= 200; s += (s < 40 ? 1 : 37)) {
                rv_shard_plan p;
                cr_assert_eq(rv_shard_plan_make((rv_shard_kind)kind, n, s, &p), RV_OK);
                int *seen = calloc((size_t)s + 1, sizeof(int));
                int64_t mn = INT64_MAX, mx = 0;
                for (int r = 0; r < n; r++) {
                    rv_shard_seg sg[RV_SHARD_MAX_SEGS];
                    int ns = rv_shard_segments(&p, r, sg);
                    int64_t off = 0;
                    for (int i = 0; i < ns; i++)
                        for (int64_t t = 0; t < sg[i].len; t++, off++) {
                            int64_t pos = sg[i].start + t, local = -1;
                            cr_assert(pos >= 0 && pos < s);
                            seen[pos]++;
                            cr_assert_eq(rv_shard_owner(&p, pos, &local), r, "N=%d S=%lld t=%lld", n,
                                         (long long)s, (long long)pos);
                            cr_assert_eq(local, off);
                        }
                    int64_t len = rv_shard_len(&p, r);
                    mn = len < mn ? len : mn;
                    mx = len > mx ? len : mx;
                }
                for (int64_t t = 0; t < s; t++)
                    cr_assert_eq(seen[t], 1, "kind %d N=%d S=%lld: token %lld seen %d times",
                                 kind, n, (long long)s, (long long)t, seen[t]);
                cr_assert_leq(mx - mn, kind == RV_SHARD_CONTIGUOUS ? 1 : 2);
                free(seen);
            }
}

Test(shard, zigzag_causal_work_within_5_percent)
{
    const int ns[] = {2, 3, 4, 8};
    for (int i = 0; i < 4; i++)
        for (int64_t s = 4096; s <= 65536; s *= 4) {
            rv_shard_plan p;
            cr_assert_eq(rv_shard_plan_make(RV_SHARD_ZIGZAG, ns[i], s, &p), RV_OK);
            double mn = 1e300, mx = 0;
            rv_shard_seg all = {0, s};
            for (int r = 0; r < ns[i]; r++) {
                rv_shard_seg sg[RV_SHARD_MAX_SEGS];
                int k = rv_shard_segments(&p, r, sg);
                double w = 0;
                for (int j = 0; j < k; j++)
                    w += rv_cp_visible_pairs(sg[j], all, 1);
                mn = w < mn ? w : mn;
                mx = w > mx ? w : mx;
            }
            cr_expect(mx <= 1.05 * mn, "N=%d S=%lld: work %g..%g", ns[i], (long long)s, mn, mx);
        }
}

Test(shard, visible_pairs_match_brute_force)
{
    for (int64_t qs = 0; qs < 20; qs += 3)
        for (int64_t ql = 0; ql < 9; ql += 2)
            for (int64_t ks = 0; ks < 20; ks += 4)
                for (int64_t kl = 0; kl < 9; kl += 3) {
                    double brute = 0;
                    for (int64_t a = qs; a < qs + ql; a++)
                        for (int64_t b = ks; b < ks + kl; b++)
                            brute += b <= a;
                    rv_shard_seg q = {qs, ql}, k = {ks, kl};
                    cr_assert_eq(rv_cp_visible_pairs(q, k, 1), brute);
                    cr_assert_eq(rv_cp_visible_pairs(q, k, 0), (double)ql * kl);
                }
}

Test(shard, rejects_bad_arguments)
{
    rv_shard_plan p;
    cr_assert_eq(rv_shard_plan_make(RV_SHARD_ZIGZAG, 0, 10, &p), RV_ERR_INVALID);
    cr_assert_eq(rv_shard_plan_make(RV_SHARD_ZIGZAG, 2, -1, &p), RV_ERR_INVALID);
    rv_shard_kind k;
    cr_assert_eq(rv_shard_kind_parse("zigzag", &k), RV_OK);
    cr_assert_eq(k, RV_SHARD_ZIGZAG);
    cr_assert_eq(rv_shard_kind_parse("diagonal", &k), RV_ERR_INVALID);
}
