/* fuzz_ckpt.c: libFuzzer target for the checkpoint loader (rv_ckpt_load into a
 * micro model, its classify head and AdamW state): any bytes either fail with a
 * status or load counters within their documented range. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_file.h"
#include "fuzz_micro.h"
#include "rv_vit_train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static rv_vit_model *m;
    static rv_train_head *h;
    static rv_adamw *o;
    if (!m) {
        rv_vit_config c;
        uint8_t *decay = NULL;
        if (fuzz_micro_config(&c) != RV_OK || rv_vit_new(&c, &m) != RV_OK ||
            rv_train_head_new(&c, RV_TASK_CLASSIFY, 3, &h) != RV_OK)
            abort();
        const int64_t n = rv_vit_params(m) + (int64_t)h->arena_floats;
        if (!(decay = calloc((size_t)n, 1)) || rv_adamw_new(n, decay, &o) != RV_OK)
            abort();
        free(decay);
    }
    fuzz_file f;
    if (fuzz_file_open(&f, "fuzz.ckpt.safetensors", data, size) != 0)
        return 0;
    rv_ckpt_info info;
    if (rv_ckpt_load(f.path, m, h, o, &info) == RV_OK &&
        (info.step < 0 || info.step > ((int64_t)1 << 40) || info.data_pos < 0 ||
         info.data_pos > ((int64_t)1 << 40)))
        __builtin_trap(); /* counters past the cap would overflow the resumed run */
    fuzz_file_close(&f);
    return 0;
}
