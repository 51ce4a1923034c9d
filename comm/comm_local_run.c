/* comm_local_run.c: rv_local_run, the launcher of the "local" backend: one thread
 * per rank, each with its own world communicator; a rank whose function returns
 * is marked departed at once (so peers waiting on it fail instead of hanging), and
 * the run reports the first rank to fail, with that rank's message.
 * RINGVIT_COMM_STRICT=1 makes the run's communicators NCCL-like (comm_local.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_impl.h"
#include "comm_local.h"

typedef struct run_shared {
    rv_local_fn fn;
    void *arg;
    local_world *w;
    atomic_int failures; /* failures so far: orders them in time */
} run_shared;

typedef struct run_rank {
    run_shared *sh;
    rv_comm *comm;
    int rank;
    rv_status st;
    int fail_order; /* 0-based order of this rank's failure, -1 if it succeeded */
    char msg[1024]; /* rv_last_error() of the rank's thread when it failed */
} run_rank;

static void *rank_main(void *p)
{
    run_rank *rr = p;
    rv_clear_error();
    rr->st = rr->sh->fn(rr->comm, rr->sh->arg);
    if (rr->st != RV_OK) {
        rr->fail_order = atomic_fetch_add(&rr->sh->failures, 1);
        snprintf(rr->msg, sizeof rr->msg, "%s", rv_last_error());
    }
    local_world_depart(rr->sh->w, rr->rank);
    rv_comm_free(&rr->comm);
    return NULL;
}

/* RINGVIT_COMM_STRICT (unset or 0: off, 1: on) and RINGVIT_COMM_STRICT_EAGER
 * (bytes a send may complete with before its receive is posted, default 64 KiB). */
static rv_status strict_from_env(int *strict, size_t *eager)
{
    const char *s = getenv("RINGVIT_COMM_STRICT"), *e = getenv("RINGVIT_COMM_STRICT_EAGER");
    *strict = 0;
    *eager = (size_t)64 << 10;
    if (s && *s && strcmp(s, "0") != 0) {
        if (strcmp(s, "1") != 0)
            return rv_fail(RV_ERR_INVALID, "RINGVIT_COMM_STRICT=%s: want 0 or 1", s);
        *strict = 1;
    }
    if (e && *e) {
        char *end = NULL;
        unsigned long long v = strtoull(e, &end, 10);
        if (!end || *end || *e == '-')
            return rv_fail(RV_ERR_INVALID, "RINGVIT_COMM_STRICT_EAGER=%s: want a byte count", e);
        *eager = (size_t)v;
    }
    return RV_OK;
}

rv_status rv_local_run(int nranks, rv_local_fn fn, void *arg)
{
    return rv_local_run_copy(nranks, fn, arg, NULL);
}

rv_status rv_local_run_copy(int nranks, rv_local_fn fn, void *arg, rv_comm_copy_fn copy)
{
    if (nranks < 1 || nranks > 1024 || !fn)
        return rv_fail(RV_ERR_INVALID, "local run: %d ranks (want 1..1024) and a function",
                       nranks);
    double timeout_s = 0;
    int strict = 0;
    size_t eager = 0;
    rv_status st = rv_comm_default_timeout(&timeout_s);
    if (st == RV_OK)
        st = strict_from_env(&strict, &eager);
    if (st != RV_OK)
        return st;
    run_shared sh = {.fn = fn, .arg = arg};
    atomic_init(&sh.failures, 0);
    run_rank *ranks = calloc((size_t)nranks, sizeof *ranks);
    pthread_t *threads = calloc((size_t)nranks, sizeof *threads);
    int started = 0;
    if (!ranks || !threads) {
        st = rv_fail(RV_ERR_NOMEM, "local run of %d ranks: out of memory", nranks);
        goto end;
    }
    if ((st = local_world_create(nranks, &sh.w)) != RV_OK)
        goto end;
    local_world_set_copy(sh.w, copy);
    local_world_set_strict(sh.w, strict, eager);
    for (int r = 0; r < nranks; r++) {
        ranks[r] = (run_rank){.sh = &sh, .rank = r, .fail_order = -1};
        if ((st = local_world_comm(sh.w, r, timeout_s, &ranks[r].comm)) != RV_OK)
            goto end;
    }
    for (; started < nranks; started++)
        if (pthread_create(&threads[started], NULL, rank_main, &ranks[started]) != 0) {
            st = rv_fail(RV_ERR_BACKEND, "local run: cannot start the thread of rank %d of %d",
                         started, nranks);
            break;
        }
    /* Ranks that never started count as gone, so the started ones do not wait on them. */
    for (int r = started; r < nranks; r++)
        local_world_depart(sh.w, r);
    for (int r = 0; r < started; r++)
        pthread_join(threads[r], NULL);
    if (st != RV_OK)
        goto end;
    int first = -1;
    for (int r = 0; r < nranks; r++)
        if (ranks[r].fail_order >= 0 && (first < 0 || ranks[r].fail_order < ranks[first].fail_order))
            first = r;
    if (first >= 0)
        st = ranks[first].msg[0]
                 ? rv_fail(ranks[first].st, "%s", ranks[first].msg)
                 : rv_fail(ranks[first].st, "rank %d of the local run failed: %s", first,
                           rv_status_name(ranks[first].st));
end:
    if (ranks)
        for (int r = started; r < nranks; r++)
            rv_comm_free(&ranks[r].comm);
    local_world_destroy(&sh.w);
    free(ranks);
    free(threads);
    return st;
}
