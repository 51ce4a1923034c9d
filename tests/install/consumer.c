/* consumer.c: a program outside the tree that uses an installed ringvit, built once
 * through find_package(ringvit) and once through pkg-config by scripts/test.sh. It
 * runs one small attention block and checks a value computed by hand. */
#include <math.h>
#include <stdio.h>

#include <rv_backend.h>
#include <rv_version.h>

int main(void)
{
    rv_backend *be = NULL;
    if (rv_backend_create("cpu", 1, -1, &be) != RV_OK) {
        fprintf(stderr, "consumer: %s\n", rv_last_error());
        return 1;
    }
    /* One query, two keys with scores 0 and ln 3 (scale 1): weights 1/4 and 3/4. */
    float q[1] = {1.0f}, k[2] = {0.0f, logf(3.0f)}, v[2] = {4.0f, 8.0f}, o[1], lse[1];
    rv_attn_fwd_args a = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .sq = 1, .sk = 2, .heads = 1,
                          .dim = 1, .scale = 1.0f,
                          .mask = {.kind = RV_MASK_NONE, .q_start = 0, .k_start = 0},
                          .accumulate = 0};
    rv_status st = be->attn_fwd(be, &a);
    rv_backend_free(&be);
    if (st != RV_OK || fabsf(o[0] - 7.0f) > 1e-5f || fabsf(lse[0] - logf(4.0f)) > 1e-5f) {
        fprintf(stderr, "consumer: wrong result o=%g lse=%g\n", o[0], lse[0]);
        return 1;
    }
    printf("consumer: ringvit %s ok\n", RINGVIT_VERSION);
    return 0;
}
