/* embed_job.c: rv_embed_open and rv_embed_close, one rank's job. Each rank sets
 * up, within its group: its compute backend (CPU threads, or a GPU stream with
 * the model copied there and a host backend beside it for the patch embedding),
 * a second view of the group's communicator for the gather of the per-token
 * outputs, a watch for the votes between stages (a vote may wait long, as a rank
 * may still be decoding its part of an hour-long file, but only while that rank
 * beats), and under MPI with cuda a communicator for the forward's device
 * buffers (NCCL, bootstrapped over the group, or the group staged through host
 * memory). The ranks vote after each step, so all of them set up or none. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_internal.h"

/* The options a job over cfg on size ranks runs, checked and resolved (the
 * defaults filled in), with the model's tokenizer and sampling. */
static rv_status resolve(const rv_vit_config *cfg, const rv_embed_opts *o, int size, int mpi,
                         rv_embed_opts *r, rv_tok_opts *to, rv_ingest_opts *io)
{
    *r = *o;
    if (!o->device || (strcmp(o->device, "cpu") != 0 && strcmp(o->device, "cuda") != 0))
        return rv_fail(RV_ERR_INVALID, "device '%s': known devices are cpu and cuda",
                       o->device ? o->device : "");
    r->device = strcmp(o->device, "cuda") == 0 ? "cuda" : "cpu";
    if (rv_precision_check(r->device, o->precision) != RV_OK)
        return RV_ERR_UNSUPPORTED; /* its message says why */
    if (rv_cp_strategy_check(o->strategy, cfg->heads, size) != RV_OK)
        return rv_fail(RV_ERR_INVALID, "the model's heads and the ranks: %s", rv_last_error());
    if (!embed_dtype_name(o->dtype))
        return rv_fail(RV_ERR_INVALID, "dtype: the embeddings are f32, f16 or bf16");
    if (o->prefetch < 0 || o->prefetch > RV_EMBED_MAX_PREFETCH)
        return rv_fail(RV_ERR_INVALID, "prefetch %d: from 0 to %d inputs ahead", o->prefetch,
                       RV_EMBED_MAX_PREFETCH);
    if (!(o->segment_s >= 0) || !(o->hop_s >= 0) || o->max_tokens < 1 || o->threads < 0)
        return rv_fail(RV_ERR_INVALID, "embed options: segment_s and hop_s >= 0, max_tokens "
                       ">= 1, threads >= 0");
    /* With blocks the segments are the blocks unless told otherwise. */
    if (r->segment_s == 0)
        r->segment_s = o->span.kind == RV_SPAN_BLOCK ? o->span.seconds : 10.0;
    r->threads = rv_cpu_threads_per_rank(o->threads, o->local_ranks > 0 ? o->local_ranks : size,
                                         mpi);
    if (r->timeout_s <= 0 && rv_comm_default_timeout(&r->timeout_s) != RV_OK)
        r->timeout_s = RV_COMM_DEFAULT_TIMEOUT_S;
    int video = 0, audio = 0;
    rv_status st = rv_embed_modalities(cfg, o, &video, &audio, NULL, 0);
    if (st != RV_OK)
        return st;
    /* The model's tokens and frames; blocks and frames are the tokenizer's
     * windows, as if each block were embedded alone. */
    *io = o->io;
    io->start_s = 0; /* each input's own, from start_at (embed_prepare_probe) */
    if ((st = rv_vit_input_opts(cfg, o->io.size, !video, !audio, &r->span, to, io)) != RV_OK)
        return st;
    /* Decoders by default as many as the compute threads, up to what FFmpeg's
     * decoders take. */
    if (io->threads <= 0)
        io->threads = r->threads > RV_INGEST_MAX_THREADS ? RV_INGEST_MAX_THREADS : r->threads;
    r->io = *io;
    return RV_OK;
}

rv_status rv_embed_check(const rv_vit_model *m, const rv_embed_opts *o, int ranks, int mpi)
{
    rv_embed_opts r;
    rv_tok_opts to;
    rv_ingest_opts io;
    if (!m || !o || ranks < 1)
        return rv_fail(RV_ERR_INVALID, "embed: a model, options and ranks are needed");
    return resolve(&m->cfg, o, ranks, mpi, &r, &to, &io);
}

/* This rank's backends and, on a GPU, the model there. */
static rv_status make_backends(rv_embed_job *j)
{
    const int gpu = j->o.gpu >= 0 ? j->o.gpu : j->comm->world_rank;
    rv_status st = rv_backend_create(j->o.device, j->o.threads, gpu, &j->be);
    if (st == RV_OK)
        st = rv_backend_set_precision(j->be, j->o.precision);
    if (st == RV_OK && !rv_backend_is_host(j->be)) {
        if ((st = rv_vit_to_backend(j->m.model, j->be, &j->dev_weights)) == RV_OK)
            st = rv_backend_cpu_create(j->o.threads, &j->host);
    }
    return st;
}

rv_vote_outcome rv_embed_open(const rv_embed_model *m, rv_comm *group, const rv_embed_opts *o,
                              const rv_embed_hooks *hooks, rv_embed_job **out)
{
    rv_embed_job *j = NULL;
    rv_vote_outcome v = RV_VOTE_BROKEN;
    rv_status st;
    *out = NULL;
    if (!m || !m->model || !group || !o) {
        rv_fail(RV_ERR_INVALID, "embed: a model, a group and options are needed");
        return RV_VOTE_FAILED;
    }
    if (!(j = calloc(1, sizeof *j)) || !(j->m.name = strdup(m->name ? m->name : ""))) {
        free(j);
        rv_fail(RV_ERR_NOMEM, "out of memory");
        return RV_VOTE_BROKEN; /* cannot vote: the others fail on its silence */
    }
    j->m.model = m->model;
    j->m.random_weights = m->random_weights;
    if (hooks)
        j->h = *hooks;
    j->comm = group;
    j->rank = group->rank;
    j->size = group->size;
    j->mpi = strcmp(group->name, "mpi") == 0;
    j->o.timeout_s = o->timeout_s;
    if (j->o.timeout_s <= 0 && rv_comm_default_timeout(&j->o.timeout_s) != RV_OK)
        j->o.timeout_s = RV_COMM_DEFAULT_TIMEOUT_S;
    /* What every rank needs to vote at all. */
    if ((st = rv_comm_set_timeout(group, j->o.timeout_s)) != RV_OK ||
        (st = rv_comm_split(group, 0, group->rank, &j->ctl)) != RV_OK ||
        (st = rv_comm_set_timeout(j->ctl, j->o.timeout_s)) != RV_OK ||
        (st = rv_comm_watch_create(group, j->o.timeout_s, &j->watch)) != RV_OK)
        goto end;
    /* The options and the backends: a failure on any rank fails them all. */
    rv_clear_error();
    st = resolve(&m->model->cfg, o, j->size, j->mpi, &j->o, &j->to, &j->io);
    if (st == RV_OK)
        st = make_backends(j);
    if (st == RV_OK && j->rank == 0) {
        rv_vit_hash(j->m.model, j->hash);
        if (!(j->config_json = rv_vit_config_to_json(&j->m.model->cfg)))
            st = rv_fail(RV_ERR_NOMEM, "out of memory");
    }
    if ((v = embed_agree(j, st, NULL, 0)) != RV_VOTE_OK)
        goto end;
    /* Under MPI the forward's buffers are device memory: NCCL moves them, or MPI
     * through host copies; pooling and the votes stay on comm and ctl (host).
     * Made only once every rank has its backend: all ranks join or none. */
    if (j->mpi && !rv_backend_is_host(j->be)) {
        rv_clear_error();
        if (j->o.nccl) {
            st = rv_comm_nccl_create(group, j->o.gpu, &j->dev);
        } else {
            st = rv_comm_split(group, 0, group->rank, &j->dev);
            if (st == RV_OK)
                st = rv_comm_mpi_stage_device(j->dev, rv_backend_copy(j->o.device));
        }
        if (st == RV_OK)
            st = rv_comm_set_timeout(j->dev, j->o.timeout_s);
        if ((v = embed_agree(j, st, NULL, 0)) != RV_VOTE_OK) {
            v = v == RV_VOTE_STOP ? v : RV_VOTE_BROKEN; /* no input could be encoded */
            goto end;
        }
    }
    /* Without a worker (no thread or memory for one) this rank prepares each
     * input in its turn: slower, the same outputs. */
    if (j->o.prefetch > 0 && embed_ahead_create(j, j->o.prefetch + 1, &j->ahead) != RV_OK)
        rv_log(RV_LOG_INFO, "embed: rank %d prepares inputs in turn: %s", group->world_rank,
               rv_last_error());
    *out = j;
    j = NULL;
    v = RV_VOTE_OK;
end:
    rv_embed_close(&j);
    return v;
}

void rv_embed_close(rv_embed_job **jp)
{
    rv_embed_job *j = jp ? *jp : NULL;
    if (!j)
        return;
    embed_ahead_free(&j->ahead); /* after the input in its hands */
    rv_backend_free(&j->host);
    rv_vit_backend_free(j->be, &j->dev_weights);
    rv_backend_free(&j->be);
    rv_comm_free(&j->dev);
    rv_comm_free(&j->ctl);
    rv_comm_watch_free(&j->watch);
    rv_vote_release(&j->vote);
    free(j->config_json);
    free((char *)j->m.name);
    free(j);
    *jp = NULL;
}
