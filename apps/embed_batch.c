/* embed_batch.c: one rank's run of `ringvit embed`: its compute backend, two
 * views of its communicator (the forward's, with --timeout deadlines, and one
 * for the gather of --tokens), a watch for the votes between stages (a vote may
 * wait long, as a rank may still be decoding its part of an hour-long file, but
 * only while that rank beats: one silent for --timeout fails it), a third for the
 * forward's device buffers under MPI with --device cuda (NCCL bootstrapped over
 * the first, or the first staged through host memory), then every input in
 * turn. Rank 0 reports each input; a signal or a broken communicator
 * ends the batch, and a last vote shares rank 0's counts so every process of
 * an MPI run exits with the same status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed.h"
#include "cli.h"
#include "embed_rank.h"

int embed_agree(embed_rank *k, rv_status mine, const double *val, int nval)
{
    embed_vote v;
    memset(&v, 0, sizeof v);
    v.status = mine;
    v.stop = embed_stop_signal != 0;
    for (int i = 0; i < nval && i < EMBED_VOTE_VALS; i++)
        v.val[i] = val[i];
    if (mine != RV_OK) {
        const char *m = rv_last_error();
        snprintf(v.msg, sizeof v.msg, "%s", m && m[0] ? m : rv_status_name(mine));
    }
    rv_status st = rv_comm_watch_allgather(k->watch, &v, k->votes, sizeof v);
    if (st != RV_OK)
        return AGREE_FATAL;
    int stop = 0, broken = 0, first = -1;
    for (int r = 0; r < k->size; r++) {
        const int s = k->votes[r].status;
        stop |= k->votes[r].stop;
        /* A timeout or a lost peer inside a collective breaks the communicator,
         * whichever rank saw it. */
        const int comm_err = s == RV_ERR_TIMEOUT || s == RV_ERR_COMM;
        broken |= comm_err;
        /* Report the cause: a rank's own failure rather than the timeouts of the
         * peers left waiting for it. */
        if (s != RV_OK && (first < 0 || (!comm_err && (k->votes[first].status == RV_ERR_TIMEOUT ||
                                                       k->votes[first].status == RV_ERR_COMM))))
            first = r;
    }
    if (first >= 0) {
        const int r = first;
        const embed_vote *x = &k->votes[r];
        /* A rank stopped by a signal fails its stage; that is the stop, not an error. */
        if (stop)
            return AGREE_STOP;
        char msg[sizeof x->msg];
        memcpy(msg, x->msg, sizeof msg);
        msg[sizeof msg - 1] = '\0';
        /* Name the rank only when the ranks' outcomes differ. */
        int alike = 1;
        for (int q = 0; q < k->size; q++)
            alike &= k->votes[q].status == x->status &&
                     strncmp(k->votes[q].msg, msg, sizeof msg - 1) == 0;
        if (!alike && strncmp(msg, "rank ", 5) != 0)
            rv_fail((rv_status)x->status, "rank %d: %s", r, msg);
        else
            rv_fail((rv_status)x->status, "%s", msg);
        return broken ? AGREE_FATAL : AGREE_FAILED;
    }
    return stop ? AGREE_STOP : AGREE_OK;
}

rv_status embed_batch_rank(rv_comm *comm, void *arg)
{
    embed_batch *b = arg;
    embed_rank k = {.b = b, .set = b->set, .comm = comm, .rank = comm->rank,
                    .size = comm->size};
    /* The batch is this rank's to fill: rank 0's, or every process's own copy
     * under MPI (local ranks share rank 0's). */
    const int own = k.rank == 0 || b->set->mpi;
    embed_result scratch;
    int counts[3] = {0, 0, 0}; /* ok, failed, skipped: rank 0's */
    int out = AGREE_OK;
    rv_status st = rv_comm_split(comm, 0, comm->rank, &k.ctl);
    if (st == RV_OK)
        st = rv_comm_set_timeout(k.ctl, b->set->timeout_s);
    if (st == RV_OK)
        st = rv_comm_watch_create(comm, b->set->timeout_s, &k.watch);
    if (st == RV_OK)
        st = rv_comm_set_timeout(comm, b->set->timeout_s);
    if (st == RV_OK && !(k.votes = calloc((size_t)k.size, sizeof *k.votes)))
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k.rank);
    if (st != RV_OK) {
        /* Cannot vote: the others fail on this rank's departure (local), or
         * once it has been silent for --timeout. */
        out = AGREE_FATAL;
        if (own)
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", rv_last_error());
        goto end;
    }
    /* Local ranks: --gpu, else rank % GPUs; a process under MPI: its own GPU. */
    const int gpu = b->set->gpu >= 0 ? b->set->gpu : k.rank;
    st = rv_cli_backend_create(b->set->cuda, b->set->threads, gpu, &k.be);
    if (st == RV_OK && b->set->cuda)
        st = rv_vit_to_backend(b->set->model, k.be, &k.dev_weights);
    if ((out = embed_agree(&k, st, NULL, 0)) != AGREE_OK) {
        if (out == AGREE_FAILED) /* a rank has no backend: nothing can run */
            out = AGREE_FATAL;
        if (own)
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", rv_last_error());
        goto end;
    }
    /* Under MPI the forward's buffers are device memory: NCCL moves them, or MPI
     * through host copies; pooling and the votes stay on comm and ctl (host).
     * Created only once every rank has its backend: all ranks join or none. */
    if (b->set->mpi && b->set->cuda) {
        rv_clear_error();
        if (b->set->nccl) {
            st = rv_comm_nccl_create(comm, b->set->gpu, &k.dev);
        } else {
            st = rv_comm_split(comm, 0, comm->rank, &k.dev);
            if (st == RV_OK)
                st = rv_comm_mpi_stage_device(k.dev, rv_cli_device_copy(1));
        }
        if (st == RV_OK)
            st = rv_comm_set_timeout(k.dev, b->set->timeout_s);
        if ((out = embed_agree(&k, st, NULL, 0)) != AGREE_OK) {
            out = AGREE_FATAL; /* without it no input can be encoded */
            if (own)
                snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", rv_last_error());
            goto end;
        }
    }
    for (int i = 0; i < b->n; i++) {
        embed_result *res = k.rank == 0 ? &b->res[i] : &scratch;
        out = embed_job_run(&k, i, res);
        if (out == AGREE_STOP)
            break;
        if (k.rank == 0) {
            b->done = i + 1;
            counts[res->status]++;
            embed_report_done(b->report, i, &b->in[i], res);
        }
        if (out == AGREE_FATAL) {
            if (own)
                snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", res->error);
            break;
        }
    }
    if (out != AGREE_FATAL) {
        /* Rank 0's counts (its writes may have failed) for every process. */
        double v[3] = {counts[0], counts[1], counts[2]};
        int last = embed_agree(&k, RV_OK, v, 3);
        if (last == AGREE_FATAL)
            out = AGREE_FATAL;
        else if (k.rank != 0 && own) {
            const double *c = k.votes[0].val;
            b->done = (int)(c[0] + c[1] + c[2]);
            for (int i = 0; i < b->done; i++)
                b->res[i].status = i < c[0] ? EMBED_OK : i < c[0] + c[1] ? EMBED_FAILED
                                                                         : EMBED_SKIPPED;
        }
    }
end:
    if (own) {
        b->fatal |= out == AGREE_FATAL;
        b->stopped |= out == AGREE_STOP;
    }
    rv_vit_backend_free(k.be, &k.dev_weights);
    rv_backend_free(&k.be);
    free(k.votes);
    rv_comm_free(&k.dev);
    rv_comm_free(&k.ctl);
    rv_comm_watch_free(&k.watch);
    /* The outcome is in the batch; the run itself went as far as it could. */
    return RV_OK;
}
