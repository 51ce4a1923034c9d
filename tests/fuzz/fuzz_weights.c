/* fuzz_weights.c: libFuzzer target for the model loader (rv_vit_load_ex on a
 * safetensors file: ringvit and torchvision names, the config in its metadata):
 * any bytes either fail with a status or load a model; a config larger than the
 * tensors the file holds must fail before allocating (libFuzzer's -rss_limit_mb
 * and -malloc_limit_mb catch one that does not). */
#include <stdint.h>

#include "fuzz_file.h"
#include "rv_vit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file f;
    if (fuzz_file_open(&f, "weights.safetensors", data, size) != 0)
        return 0;
    rv_vit_model *m = NULL;
    rv_vit_load_info info;
    if (rv_vit_load_ex(f.path, NULL, &m, &info) == RV_OK)
        rv_vit_free(&m);
    rv_vit_load_info_free(&info);
    fuzz_file_close(&f);
    return 0;
}
