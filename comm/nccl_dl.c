/* nccl_dl.c: loads NCCL when the first "nccl" communicator is created, instead of
 * linking it: a libringvit linked with libnccl would not load at all where NCCL
 * is missing, which took the CPU and single-GPU paths down with it. The build
 * still compiles against nccl.h (nccl_dl.h types every pointer from it); only the
 * library is found at run time, once per process (pthread_once). */
#ifdef RINGVIT_HAVE_NCCL
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "nccl_dl.h"

rv_nccl_api rv_nccl;

/* NCCL's name of each entry of rv_nccl. */
static const struct {
    const char *name;
    size_t offset;
} symbols[] = {
#define SYM(f) {"nccl" #f, offsetof(rv_nccl_api, f)}
    SYM(GetUniqueId),   SYM(CommInitRankConfig), SYM(CommSplit),    SYM(CommFinalize),
    SYM(CommDestroy),   SYM(CommAbort),          SYM(CommGetAsyncError),
    SYM(CommCount),     SYM(CommUserRank),       SYM(GetErrorString), SYM(GetLastError),
    SYM(AllReduce),     SYM(AllGather),          SYM(Send),         SYM(Recv),
    SYM(GroupStart),    SYM(GroupEnd),
#undef SYM
};

_Static_assert(sizeof(void *) == sizeof(rv_nccl.AllReduce),
               "dlsym's object pointer must hold a function pointer");

/* The outcome of the one load, read by every later call. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static rv_status load_status;
static char load_error[512];

/* The file names tried in order: the soname (LD_LIBRARY_PATH, this library's run
 * path, the ld.so cache), the folder where configure found NCCL (what the link
 * used to put in the run path, e.g. under NCCL_HOME), then the development name. */
static const char *const library_names[] = {
    "libnccl.so.2",
#ifdef RINGVIT_NCCL_LIBDIR
    RINGVIT_NCCL_LIBDIR "/libnccl.so.2",
#endif
    "libnccl.so",
};

static void load(void)
{
    void *lib = NULL;
    char first_error[256] = "";
    const char *name = NULL;
    for (size_t i = 0; i < sizeof library_names / sizeof *library_names && !lib; i++) {
        name = library_names[i];
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib && i == 0) { /* the soname's failure says the most */
            const char *e = dlerror();
            snprintf(first_error, sizeof first_error, "%s", e ? e : "not found");
        }
    }
    if (!lib) {
        load_status = RV_ERR_UNSUPPORTED;
        snprintf(load_error, sizeof load_error,
                 "NCCL communicator: cannot load libnccl.so.2: %s; install NCCL or add its "
                 "lib folder to LD_LIBRARY_PATH", first_error);
        return;
    }
    for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++) {
        dlerror(); /* a NULL answer is an error only if dlerror says so */
        void *fn = dlsym(lib, symbols[i].name);
        const char *e = dlerror();
        if (!fn || e) {
            load_status = RV_ERR_UNSUPPORTED;
            snprintf(load_error, sizeof load_error,
                     "NCCL communicator: %s has no %s (%s); ringvit needs NCCL 2.18 or later",
                     name, symbols[i].name, e ? e : "NULL symbol");
            memset(&rv_nccl, 0, sizeof rv_nccl);
            dlclose(lib);
            return;
        }
        memcpy((char *)&rv_nccl + symbols[i].offset, &fn, sizeof fn);
    }
    /* lib stays open for the life of the process: communicators may outlive any
     * one caller, and NCCL keeps threads of its own. */
    load_status = RV_OK;
    rv_log(RV_LOG_DEBUG, "NCCL communicator: loaded %s", name);
}

rv_status rv_nccl_load(void)
{
    pthread_once(&load_once, load);
    return load_status == RV_OK ? RV_OK : rv_fail(load_status, "%s", load_error);
}

#endif /* RINGVIT_HAVE_NCCL */
