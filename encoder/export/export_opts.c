/* export_opts.c: the export's options (rv_export.h): the defaults and the level
 * names, which the manifest and the command spell alike. */
#include <string.h>

#include "export_internal.h"

void rv_export_opts_default(rv_export_opts *o)
{
    *o = (rv_export_opts){
        .level = RV_EXPORT_AUTO,
        .dtype = RV_F32,
        .shard_rows = RV_EXPORT_SHARD_ROWS,
        .top_k = RV_EXPORT_TOP_K,
    };
}

static const char *const level_names[] = {"auto", "block", "segment", "global"};

rv_status rv_export_level_parse(const char *name, rv_export_level *out)
{
    for (int i = 0; name && i < 4; i++)
        if (strcmp(name, level_names[i]) == 0) {
            *out = (rv_export_level)i;
            return RV_OK;
        }
    return rv_fail(RV_ERR_INVALID, "level wants block, segment or global, got '%s'",
                   name ? name : "");
}

const char *rv_export_level_name(rv_export_level level)
{
    return level >= RV_EXPORT_AUTO && level <= RV_EXPORT_GLOBAL ? level_names[level] : "?";
}
