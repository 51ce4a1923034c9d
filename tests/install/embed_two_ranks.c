/* embed_two_ranks.c: embeds one recording across 2 ranks (threads of this
 * process, context parallelism with ring attention) through the installed
 * library, and prints its global embedding, one value per line. This is the
 * README's example; scripts/test.sh builds it against the installed package and
 * compares its output with `ringvit embed --cp 2` on the same file and model.
 * usage: embed_two_ranks MODEL.safetensors MEDIA */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <rv_tok_slice.h>
#include <rv_vit.h>

typedef struct job {
    const rv_vit_model *m;
    const char *path;
    rv_tok_recording rec;  /* the plan every rank shares */
    rv_vit_pooled pooled;  /* rank 0's result */
} job;

static rv_status rank_main(rv_comm *comm, void *arg)
{
    job *j = arg;
    const int rank = rv_comm_rank(comm), D = j->m->cfg.dim;
    rv_tok_slice s = {0};
    rv_backend *be = NULL;
    rv_vit_pooled pooled = {0};
    float *y = NULL;
    rv_status st;
    if ((st = rv_tok_slice_plan(&j->rec.layout, RV_SHARD_CONTIGUOUS, 2, rank, 1, &s)) != RV_OK ||
        (st = rv_tok_slice_fill(j->path, &j->rec.layout, &s, NULL, NULL, NULL)) != RV_OK ||
        (st = rv_backend_create("cpu", 1, -1, &be)) != RV_OK)
        goto end;
    if (!(y = malloc(sizeof(float) * (size_t)(s.len + 1) * (size_t)D))) {
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
        goto end;
    }
    rv_vit_tokens tok = rv_vit_slice_tokens(&j->rec.layout, &s);
    rv_vit_run run = {.be = be, .comm = comm, .plan = s.plan, .strategy = RV_CP_RING};
    rv_vit_pool_opts po = {.segment_s = 10, .end_s = j->rec.end_s, .start_s = j->rec.io.start_s};
    if ((st = rv_vit_forward(j->m, &run, &tok, y, NULL)) == RV_OK &&
        (st = rv_vit_pool(comm, &tok, y, D, &po, &pooled)) == RV_OK && rank == 0) {
        j->pooled = pooled; /* rank 0's is returned */
        pooled = (rv_vit_pooled){0};
    }
end:
    rv_vit_pooled_free(&pooled);
    free(y);
    rv_backend_free(&be);
    rv_tok_slice_release(&s);
    return st;
}

int main(int argc, char **argv)
{
    job j = {.path = argc == 3 ? argv[2] : NULL};
    rv_vit_model *m = NULL;
    rv_tok_opts to;
    rv_ingest_opts io;
    rv_ingest_opts_default(&io);
    rv_status st = argc == 3 ? RV_OK : rv_fail(RV_ERR_INVALID, "usage: embed_two_ranks MODEL MEDIA");
    if (st == RV_OK && (st = rv_vit_load(argv[1], NULL, &m)) == RV_OK &&
        (st = rv_vit_input_opts(&m->cfg, 0, 0, 0, NULL, &to, &io)) == RV_OK &&
        (st = rv_tok_recording_plan(j.path, &to, &io, NAN, &j.rec, NULL)) == RV_OK) {
        j.m = m;
        st = j.rec.need_count ? rv_fail(RV_ERR_UNSUPPORTED, "%s states no duration", j.path)
                              : rv_local_run(2, rank_main, &j);
    }
    for (int i = 0; st == RV_OK && i < j.pooled.dim; i++)
        printf("%.9g\n", j.pooled.global[i]);
    if (st != RV_OK)
        fprintf(stderr, "embed_two_ranks: %s\n", rv_last_error());
    rv_vit_pooled_free(&j.pooled);
    rv_vit_free(&m);
    return st == RV_OK ? 0 : 1;
}
