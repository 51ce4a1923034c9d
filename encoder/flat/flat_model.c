/* flat_model.c: a model spec as the command's --model takes it (a preset
 * name: random weights from a seed; a weights file; a model folder), for the
 * flat calls. */
#include <string.h>
#include <sys/stat.h>

#include "flat_internal.h"
#include "rv_vit.h"

const char *rv_vit_spec_kind(const char *spec)
{
    struct stat sb;
    size_t n = strlen(spec);
    if (stat(spec, &sb) == 0)
        return S_ISDIR(sb.st_mode) ? "folder" : "file";
    if (strchr(spec, '/') || (n > 12 && strcmp(spec + n - 12, ".safetensors") == 0))
        return "file"; /* a missing file: the load names it */
    return "preset";
}

rv_status flat_model_open(const char *spec, uint64_t seed, rv_vit_model **out)
{
    *out = NULL;
    if (!spec || !spec[0])
        return rv_fail(RV_ERR_INVALID, "model: no model given");
    if (strcmp(rv_vit_spec_kind(spec), "preset") != 0)
        return rv_vit_load(spec, NULL, out);
    rv_vit_config cfg;
    if (rv_vit_preset(spec, &cfg) != RV_OK)
        return rv_fail(RV_ERR_INVALID, "model: a preset (tiny, small, base), a weights file or a "
                       "model folder is wanted, got '%s'", spec);
    rv_status st = rv_vit_new(&cfg, out);
    if (st == RV_OK && (st = rv_vit_init_random(*out, seed)) != RV_OK)
        rv_vit_free(out);
    return st;
}
