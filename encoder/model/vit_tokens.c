/* vit_tokens.c: the forward's view (rv_vit_tokens) of a rank's token slice made
 * by the tokenizer's recipe (rv_tok_slice.h), and the audio steps its AST-style
 * positions are resampled to: the sequence's, or with blocks cut from the
 * recording each block's own (the tokenizer gives every block its own steps,
 * so a block's tokens see the grid the block alone would). */
#include "rv_vit.h"
#include "vit_internal.h"

int64_t rv_vit_window_audio_steps(const rv_tok_layout *L, int64_t w)
{
    int64_t g0, g1, p0, p1;
    rv_tok_window_items(L, w, &g0, &g1, &p0, &p1);
    return p1 - p0;
}

int64_t rv_vit_audio_steps(const rv_tok_layout *L)
{
    if (!L->opts.window_positions)
        return L->steps;
    int64_t most = 0;
    for (int64_t w = 0; w < L->windows; w++) {
        int64_t n = rv_vit_window_audio_steps(L, w);
        most = n > most ? n : most;
    }
    return most;
}

int64_t vit_token_audio_steps(const rv_vit_tokens *in, int64_t i, vit_steps_cache *c)
{
    if (!in->layout || !in->window || !in->layout->opts.window_positions)
        return in->audio_steps;
    if (in->window[i] != c->w) {
        c->w = in->window[i];
        c->steps = rv_vit_window_audio_steps(in->layout, c->w);
    }
    return c->steps;
}

rv_vit_tokens rv_vit_slice_tokens(const rv_tok_layout *L, const rv_tok_slice *s)
{
    return (rv_vit_tokens){.len = s->len, .modality = s->modality, .pos = s->pos,
                           .seq_time = s->seq_time, .nvideo = s->nvideo, .video = s->video,
                           .naudio = s->naudio, .audio = s->audio, .grid = L->grid,
                           .audio_steps = rv_vit_audio_steps(L), .window = s->window,
                           .layout = L};
}
