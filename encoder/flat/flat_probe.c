/* flat_probe.c: the texts the command prints and the flat calls return, built
 * once here: the probe as JSON for a path (rv_flat_probe, over ingest's
 * rv_probe_json_text), the version and build facts (`ringvit --version`) and
 * those facts as JSON (rv_flat_build_info). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flat_internal.h"
#include "rv_backend.h"
#include "rv_comm.h"
#include "rv_cuda.h"
#include "rv_version.h"

rv_status rv_flat_probe(const char *path, char **json)
{
    rv_probe *p = NULL;
    *json = NULL;
    rv_status st = path ? rv_probe_file(path, &p) : rv_fail(RV_ERR_INVALID, "probe: no path");
    if (st == RV_OK)
        st = rv_probe_json_text(p, 1, json);
    rv_probe_free(&p);
    return st;
}

/* ---- the build ------------------------------------------------------------------ */

rv_status rv_version_text(char **text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    *text = NULL;
    if (!f)
        return rv_fail(RV_ERR_NOMEM, "out of memory");
#ifdef RINGVIT_HAVE_MPI
    const char *mpi = "yes";
#else
    const char *mpi = "no";
#endif
    fprintf(f, "ringvit %s\n", RINGVIT_VERSION);
#ifdef RINGVIT_HAVE_CUDA
    int ndev = rv_cuda_device_count();
    char name[256] = "";
    if (ndev > 0 && rv_cuda_device_name(0, name, sizeof name) != RV_OK)
        snprintf(name, sizeof name, "%s", rv_last_error());
    fprintf(f, "cuda: backend built (sm_%s), %d device%s%s%s\n", rv_cuda_build_archs(), ndev,
            ndev == 1 ? "" : "s", ndev > 0 ? ": " : "", name);
#else
    fprintf(f, "cuda: no\n");
#endif
    fprintf(f, "mpi: %s\n", mpi);
    /* NCCL is loaded when the first NCCL communicator is made, not at start-up. */
    fprintf(f, "nccl: %s\n", rv_comm_backend_built("nccl") ? "built (libnccl.so.2 loaded on first use)"
                                                          : "no");
#ifdef RINGVIT_HAVE_MEDIA
    fprintf(f, "media: yes (FFmpeg)\n");
#else
    fprintf(f, "media: no (built without FFmpeg)\n");
#endif
    /* The CPU backend's GEMMs: the library and the instruction set it chose. */
    fprintf(f, "gemm: %s, isa %s\n", rv_gemm_library(), rv_gemm_isa());
    /* The attention kernels: the best this CPU runs, or RINGVIT_CPU_KERNELS. */
    const char *kernels = rv_cpu_kernels();
    if (kernels)
        fprintf(f, "cpu kernels: %s (best on this CPU: %s)\n", kernels, rv_cpu_kernels_best());
    else
        fprintf(f, "cpu kernels: refused: %s\n", rv_last_error());
    /* --precision bf16 on the CPU: allowed here, with the kernels it would run. */
    if (rv_precision_check("cpu", RV_PRECISION_BF16) != RV_OK)
        fprintf(f, "cpu bf16: no (%s)\n", rv_last_error());
    else if ((kernels = rv_cpu_kernels_at(RV_PRECISION_BF16)) != NULL)
        fprintf(f, "cpu bf16: yes (attention kernels %s)\n", kernels);
    else
        fprintf(f, "cpu bf16: refused: %s\n", rv_last_error());
    fprintf(f, "threads: %d (default)\n", rv_cpu_default_threads());
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return rv_fail(RV_ERR_NOMEM, "out of memory");
    }
    *text = buf;
    return RV_OK;
}

rv_status rv_flat_build_info(char **json)
{
    char *text = NULL;
    json_t *o = json_object();
    *json = NULL;
    rv_status st = o ? rv_version_text(&text) : rv_fail(RV_ERR_NOMEM, "out of memory");
    if (st != RV_OK)
        goto end;
    json_object_set_new(o, "version", json_string(RINGVIT_VERSION));
    json_object_set_new(o, "text", json_string(text));
    /* Every "key: value" line of the text, the key's spaces as underscores. */
    for (char *line = strchr(text, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        char key[64], *colon = strstr(line + 1, ": "), *eol = strchr(line + 1, '\n');
        if (!colon || !eol || colon > eol || colon - (line + 1) >= (long)sizeof key)
            continue;
        snprintf(key, sizeof key, "%.*s", (int)(colon - (line + 1)), line + 1);
        for (char *k = key; *k; k++)
            if (*k == ' ')
                *k = '_';
        json_object_set_new(o, key, json_stringn(colon + 2, (size_t)(eol - colon - 2)));
    }
    if (!(*json = json_dumps(o, JSON_COMPACT)))
        st = rv_fail(RV_ERR_NOMEM, "out of memory");
end:
    free(text);
    json_decref(o);
    return st;
}
