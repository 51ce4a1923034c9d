/* embed_two_ranks.c: embeds one recording across 2 ranks (threads of this
 * process, context parallelism with ring attention) through the installed
 * library's embed job (rv_embed.h), and writes what `ringvit embed --cp 2`
 * writes. This is the example of docs/c-library.md; scripts/test.sh builds it
 * against the installed package and checks that its file holds the same
 * tensors, byte for byte, and the same metadata as the command's.
 * usage: embed_two_ranks MODEL.safetensors MEDIA OUT.safetensors */
#include <stdio.h>

#include <rv_embed.h>

typedef struct job {
    rv_embed_model model;
    rv_embed_opts opts;
    const char *media, *out;
} job;

/* One rank: every rank of the group makes the same calls; rank 0 gets the output. */
static rv_status rank_main(rv_comm *group, void *arg)
{
    const job *jb = arg;
    rv_embed_job *j = NULL;
    rv_embed_input *in = NULL;
    rv_embed_output *out = NULL;
    rv_status st = RV_OK;
    if (rv_embed_open(&jb->model, group, &jb->opts, NULL, &j) != RV_VOTE_OK ||
        (st = rv_embed_queue(j, jb->media, 0, &in)) != RV_OK ||
        rv_embed_run(j, in, NULL) != RV_VOTE_OK ||
        rv_embed_collect(j, in, jb->out, &out, NULL) != RV_VOTE_OK)
        st = st != RV_OK ? st : RV_ERR_IO;
    if (st == RV_OK && out) /* rank 0 */
        st = rv_embed_output_write(out, jb->out);
    rv_embed_output_free(&out);
    rv_embed_input_free(&in);
    rv_embed_close(&j);
    return st;
}

int main(int argc, char **argv)
{
    rv_vit_model *m = NULL;
    if (argc != 4) {
        fprintf(stderr, "usage: embed_two_ranks MODEL.safetensors MEDIA OUT.safetensors\n");
        return 2;
    }
    job jb = {.media = argv[2], .out = argv[3]};
    rv_status st = rv_vit_load(argv[1], NULL, &m);
    if (st == RV_OK) {
        jb.model = (rv_embed_model){.model = m, .name = argv[1]};
        rv_embed_opts_default(&jb.opts); /* the command's defaults */
        st = rv_local_run(2, rank_main, &jb);
    }
    if (st != RV_OK)
        fprintf(stderr, "embed_two_ranks: %s\n", rv_last_error());
    rv_vit_free(&m);
    return st == RV_OK ? 0 : 1;
}
