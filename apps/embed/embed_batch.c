/* embed_batch.c: one rank's run of `ringvit embed`. The world's ranks form
 * groups of --cp ranks; each rank sets up, within its group: its compute
 * backend, two views of the group's communicator (the forward's, with
 * --timeout deadlines, and one for the gather of --tokens), a watch for the
 * votes between stages (a vote may wait long, as a rank may still be decoding
 * its part of an hour-long file, but only while that rank beats: one silent
 * for --timeout fails it), a third for the forward's device buffers under MPI
 * with --device cuda (NCCL bootstrapped over the first, or the first staged
 * through host memory). Then its group takes inputs until none is left: rank
 * 0 of the group claims the next (embed_dispatch.c) and the group agrees on
 * it; with --prefetch N every rank prepares (probes, decodes, tokenizes) up to
 * N claimed inputs ahead on threads while the encoder works. At the end rank 0
 * of the group reports the group finished and shares the batch's counts, so
 * every process of an MPI run exits with the same status. */
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

/* The group's next input: rank 0 claims it and decides --resume, the group
 * agrees. Returns an AGREE_* outcome; *index -1 when none is left. */
static int claim_next(embed_rank *k, int *index, int *skip)
{
    int idx = -1, sk = 0;
    rv_status st = RV_OK;
    rv_clear_error();
    if (k->rank == 0) {
        st = embed_dispatch_claim(k->disp, &idx);
        if (st == RV_OK && idx >= 0 && k->set->resume)
            sk = embed_output_complete(k->b->in[idx].output, k->set);
    }
    double v[2] = {idx, sk};
    int out = embed_agree(k, st, v, 2);
    if (out == AGREE_FAILED) /* without world rank 0 no input can be handed out */
        out = AGREE_FATAL;
    *index = out == AGREE_OK ? (int)k->votes[0].val[0] : -1;
    *skip = out == AGREE_OK && k->votes[0].val[1] != 0;
    return out;
}

/* The group's loop over its inputs; returns the last AGREE_* outcome, with
 * fatal_msg filled on a broken group. */
static int run_inputs(embed_rank *k, rv_backend *hb, char *fatal_msg, size_t msg_size)
{
    const int ahead = k->set->prefetch;
    const int slots = ahead + 1;
    embed_prep *q = calloc((size_t)slots, sizeof *q);
    embed_result res, scratch;
    int head = 0, held = 0, no_more = 0, out = AGREE_OK;
    /* Without a worker (no thread or memory for one) this rank prepares each
     * input in its turn: slower, the same outputs. */
    if (q && ahead > 0 && embed_ahead_create(k, slots, &k->ahead) != RV_OK && k->rank == 0)
        embed_report_message(k->b->report, "embed: rank %d prepares inputs in turn: %s",
                             k->world_rank, rv_last_error());
    if (!q) {
        rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", k->rank);
        out = embed_agree(k, RV_ERR_NOMEM, NULL, 0);
        out = out == AGREE_STOP ? out : AGREE_FATAL;
        snprintf(fatal_msg, msg_size, "%s", rv_last_error());
        return out;
    }
    for (;;) {
        /* Claim until the encoder's input and --prefetch more are held. */
        while (!no_more && held < slots) {
            int idx, skip;
            if ((out = claim_next(k, &idx, &skip)) != AGREE_OK)
                goto end;
            if (idx < 0) {
                no_more = 1;
                break;
            }
            embed_prep *p = &q[(head + held++) % slots];
            memset(p, 0, sizeof *p);
            p->index = idx;
            p->skip = skip;
            if (!skip && k->ahead)
                embed_ahead_push(k->ahead, p);
        }
        if (held == 0)
            break;
        embed_prep *p = &q[head];
        head = (head + 1) % slots;
        held--;
        if (!p->skip && !p->queued) {
            /* In turn: probe, then this rank's slice. */
            embed_report *rep = k->rank == 0 ? k->b->report : NULL;
            embed_report_stage(rep, p->index, k->b->in[p->index].path, "probe", 0, 0);
            const double t0 = rv_clock_s();
            embed_prepare_probe(k, p);
            if (p->reached == PREP_DONE && p->probe_st == RV_OK) {
                embed_report_stage(rep, p->index, k->b->in[p->index].path, "tokenize",
                                   p->rec.end_s, p->rec.layout.seq);
                p->s.report = rep;
                embed_prepare_tokens(k, p, hb, k->watch);
            }
            p->wait_s = rv_clock_s() - t0;
        }
        const int index = p->index;
        embed_result *r = k->rank == 0 ? &res : &scratch;
        out = embed_job_run(k, p, r);
        if (out == AGREE_STOP)
            break;
        if (k->rank == 0 && embed_dispatch_done(k->disp, index, r) != RV_OK && out == AGREE_OK) {
            snprintf(fatal_msg, msg_size, "%s", rv_last_error());
            out = AGREE_FATAL;
        }
        if (out == AGREE_FATAL) {
            if (!fatal_msg[0])
                snprintf(fatal_msg, msg_size, "%s", r->error);
            break;
        }
    }
end:
    if (out == AGREE_FATAL && !fatal_msg[0])
        snprintf(fatal_msg, msg_size, "%s", rv_last_error());
    embed_ahead_free(&k->ahead); /* after the input in its hands */
    for (int i = 0; i < slots; i++)
        embed_prepare_free(&q[i]);
    free(q);
    return out;
}

rv_status embed_batch_rank(rv_comm *world, void *arg)
{
    embed_batch *b = arg;
    const embed_settings *set = b->set;
    const int C = set->ranks;
    embed_rank k = {.b = b, .set = set, .world_rank = world->rank, .group = world->rank / C,
                    .groups = world->size / C};
    /* The batch is this rank's to fill: world rank 0's, or every process's own
     * copy under MPI (local ranks share world rank 0's). */
    const int own = world->rank == 0 || set->mpi;
    char fatal_msg[sizeof b->fatal_msg] = "";
    int out = AGREE_OK;
    rv_comm *comm = NULL;
    rv_status st = rv_comm_set_timeout(world, set->timeout_s);
    if (st == RV_OK)
        st = rv_comm_split(world, k.group, world->rank, &comm);
    if (st == RV_OK)
        st = embed_dispatch_create(world, &k, &k.disp);
    if (st == RV_OK) {
        k.comm = comm;
        k.rank = comm->rank;
        k.size = comm->size;
        st = rv_comm_split(comm, 0, comm->rank, &k.ctl);
    }
    if (st == RV_OK)
        st = rv_comm_set_timeout(k.ctl, set->timeout_s);
    if (st == RV_OK)
        st = rv_comm_watch_create(comm, set->timeout_s, &k.watch);
    if (st == RV_OK && !(k.votes = calloc((size_t)k.size, sizeof *k.votes)))
        st = rv_fail(RV_ERR_NOMEM, "rank %d: out of memory", world->rank);
    if (st != RV_OK) {
        /* Cannot vote: the others fail on this rank's departure (local), or
         * once it has been silent for --timeout. */
        out = AGREE_FATAL;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    /* Local ranks: --gpu, else rank % GPUs; a process under MPI: its own GPU. */
    const int gpu = set->gpu >= 0 ? set->gpu : world->rank;
    st = cli_backend_create(set->cuda, set->threads, gpu, &k.be);
    if (st == RV_OK && set->cuda)
        st = rv_vit_to_backend(set->model, k.be, &k.dev_weights);
    /* The patch embedding of what is tokenized in turn runs on the host: the
     * rank's backend, or beside a GPU one of its own. */
    if (st == RV_OK && !rv_backend_is_host(k.be))
        st = rv_backend_cpu_create(set->threads, &k.host);
    if ((out = embed_agree(&k, st, NULL, 0)) != AGREE_OK) {
        if (out == AGREE_FAILED) /* a rank has no backend: nothing can run */
            out = AGREE_FATAL;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    /* Under MPI the forward's buffers are device memory: NCCL moves them, or MPI
     * through host copies; pooling and the votes stay on comm and ctl (host).
     * Created only once every rank has its backend: all ranks join or none. */
    if (set->mpi && set->cuda) {
        rv_clear_error();
        if (set->nccl) {
            st = rv_comm_nccl_create(comm, set->gpu, &k.dev);
        } else {
            st = rv_comm_split(comm, 0, comm->rank, &k.dev);
            if (st == RV_OK)
                st = rv_comm_mpi_stage_device(k.dev, cli_device_copy(1));
        }
        if (st == RV_OK)
            st = rv_comm_set_timeout(k.dev, set->timeout_s);
        if ((out = embed_agree(&k, st, NULL, 0)) != AGREE_OK) {
            out = out == AGREE_STOP ? out : AGREE_FATAL; /* no input could be encoded */
            snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
            goto end;
        }
    }
    if (embed_dispatch_start(k.disp) != RV_OK) {
        out = AGREE_FATAL;
        snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        goto end;
    }
    out = run_inputs(&k, k.host ? k.host : k.be, fatal_msg, sizeof fatal_msg);
end:
    /* Started late if set-up failed here: the other groups are still told. */
    embed_dispatch_start(k.disp);
    if (k.disp) {
        /* The group is finished: rank 0 says so and learns the batch's counts
         * once every group is; the group shares them (a broken group cannot). */
        double c[5] = {0, 0, 0, 0, 0};
        if (k.rank == 0 &&
            embed_dispatch_finish(k.disp, out == AGREE_FATAL, out == AGREE_STOP, fatal_msg, c) !=
                RV_OK && out != AGREE_FATAL) {
            out = AGREE_FATAL;
            snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
        }
        if (out != AGREE_FATAL && k.votes) {
            int last = embed_agree(&k, k.rank == 0 || out != AGREE_FATAL ? RV_OK : RV_ERR_COMM,
                                   c, 5);
            if (last == AGREE_FATAL) {
                out = AGREE_FATAL;
                snprintf(fatal_msg, sizeof fatal_msg, "%s", rv_last_error());
            } else if (own) {
                const double *v = k.votes[0].val;
                for (int i = 0; i < 3; i++)
                    b->counts[i] = (int)v[i];
                b->done = b->counts[0] + b->counts[1] + b->counts[2];
                b->fatal |= v[3] != 0;
                b->stopped |= v[4] != 0 || last == AGREE_STOP;
            }
        }
    }
    if (own) {
        b->fatal |= out == AGREE_FATAL;
        b->stopped |= out == AGREE_STOP;
        if (out == AGREE_FATAL && !b->fatal_msg[0])
            snprintf(b->fatal_msg, sizeof b->fatal_msg, "%s", fatal_msg);
    }
    rv_backend_free(&k.host);
    rv_vit_backend_free(k.be, &k.dev_weights);
    rv_backend_free(&k.be);
    free(k.votes);
    rv_comm_free(&k.dev);
    rv_comm_free(&k.ctl);
    rv_comm_watch_free(&k.watch);
    embed_dispatch_free(&k.disp);
    rv_comm_free(&comm);
    /* The outcome is in the batch; the run itself went as far as it could. */
    return RV_OK;
}
