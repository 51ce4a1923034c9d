/* cpu_dnnl.c: matrix products on oneDNN (cpu_dnnl.h) and what oneDNN says of
 * itself.
 *
 * Matmul primitives: making one costs from tens of microseconds (oneDNN's own
 * cache hit) to half a millisecond (a new JIT kernel), so each is made once per
 * call shape and kept: a cache of CACHE_SLOTS entries keyed by everything the
 * primitive fixes (types, transposes, sizes, strides, alpha, beta, threads),
 * the least recently used one replaced. Lookups hold a mutex; making and running
 * a primitive do not, so ranks of one process (threads) run their products side
 * by side. An entry in use is never replaced (users > 0): when every slot is busy
 * the call makes a primitive of its own and frees it after. Primitives run on a
 * stream made per call (under a microsecond on the CPU) with the caller's
 * pointers wrapped as oneDNN memories, and a scratchpad of the call's own: Debian's
 * oneDNN shares its library scratchpad between primitives without being built for
 * concurrent execution, so ranks of one process running products side by side
 * would overwrite each other's (user scratchpad mode, allocated per call).
 *
 * alpha is the primitive's output scale, beta a sum post-op: dst = alpha * A B +
 * beta * dst, C not read when beta is 0. The primitives and the engine live until
 * the process ends (oneDNN's engine is meant to be made once).
 *
 * RINGVIT_CPU_KERNELS=avx2 makes the CPU backend behave as on an AVX2-only CPU:
 * oneDNN's instruction set is capped at AVX2 (dnnl_set_max_cpu_isa) before its
 * first use, which every function here makes sure of (isa_setup), so its GEMMs
 * run AVX2 kernels and bf16 is refused (cpu_bf16.c). */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dnnl.h"

#define CACHE_SLOTS 64

typedef struct mm_key {
    int type, trans_a, trans_b, m, n, k, lda, ldb, ldc, threads;
    uint32_t alpha, beta; /* the floats' bits */
} mm_key;

typedef struct mm_entry {
    mm_key key;
    dnnl_primitive_t prim; /* NULL: an empty slot */
    dnnl_memory_desc_t md_a, md_b, md_c, md_s; /* md_s: its scratchpad */
    int users;             /* calls running it now */
    uint64_t used;         /* the cache clock at its last lookup */
} mm_entry;

static struct {
    pthread_mutex_t lock;
    mm_entry slot[CACHE_SLOTS];
    uint64_t clock;
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static void isa_cap(void)
{
    const char *force = getenv("RINGVIT_CPU_KERNELS");
    if (force && strcmp(force, "avx2") == 0)
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2); /* fails only after a first use */
}

/* Before oneDNN's first use: its instruction-set cap. */
static void isa_setup(void)
{
    pthread_once(&isa_once, isa_cap);
}

int cpu_dnnl_isa_capped(void)
{
    const char *force = getenv("RINGVIT_CPU_KERNELS");
    return force && strcmp(force, "avx2") == 0;
}

static void engine_make(void)
{
    isa_setup();
    engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0);
}

static rv_status dnnl_fail(dnnl_status_t s, const char *what, const cpu_gemm_call *g)
{
    return rv_fail(RV_ERR_BACKEND,
                   "gemm (%s): %s: %s (m=%d n=%d k=%d trans_a=%d trans_b=%d lda=%d ldb=%d "
                   "ldc=%d, %s)",
                   cpu_dnnl_version(), what, dnnl_status2str(s), g->m, g->n, g->k, g->trans_a,
                   g->trans_b, g->lda, g->ldb, g->ldc, g->type == CPU_GEMM_BF16 ? "bf16" : "f32");
}

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static mm_key key_of(const cpu_gemm_call *g)
{
    mm_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: no stray padding bytes */
    k.type = g->type, k.trans_a = g->trans_a, k.trans_b = g->trans_b;
    k.m = g->m, k.n = g->n, k.k = g->k, k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.threads = g->threads, k.alpha = float_bits(g->alpha), k.beta = float_bits(g->beta);
    return k;
}

/* A matmul primitive for the call's shape, with the memory descriptors of its
 * operands (strides give the transposes and leading dimensions). */
static rv_status mm_make(const cpu_gemm_call *g, mm_entry *e)
{
    const dnnl_data_type_t t = g->type == CPU_GEMM_BF16 ? dnnl_bf16 : dnnl_f32;
    const dnnl_dims_t da = {g->m, g->k}, db = {g->k, g->n}, dc = {g->m, g->n};
    const dnnl_dims_t sa = {g->trans_a ? 1 : g->lda, g->trans_a ? g->lda : 1};
    const dnnl_dims_t sb = {g->trans_b ? 1 : g->ldb, g->trans_b ? g->ldb : 1};
    const dnnl_dims_t sc = {g->ldc, 1};
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s;
    const char *what = "memory descriptors";
    e->prim = NULL;
    if ((s = dnnl_memory_desc_init_by_strides(&e->md_a, 2, da, t, sa)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&e->md_b, 2, db, t, sb)) != dnnl_success ||
        (s = dnnl_memory_desc_init_by_strides(&e->md_c, 2, dc, dnnl_f32, sc)) != dnnl_success)
        goto end;
    what = "matmul descriptor";
    if ((s = dnnl_matmul_desc_init(&desc, &e->md_a, &e->md_b, NULL, &e->md_c)) != dnnl_success)
        goto end;
    what = "attributes";
    if ((s = dnnl_primitive_attr_create(&attr)) != dnnl_success ||
        (s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)) !=
            dnnl_success)
        goto end;
    if (g->alpha != 1.0f &&
        (s = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &g->alpha)) != dnnl_success)
        goto end;
    if (g->beta != 0.0f) {
        if ((s = dnnl_post_ops_create(&po)) != dnnl_success ||
            (s = dnnl_post_ops_append_sum(po, g->beta)) != dnnl_success ||
            (s = dnnl_primitive_attr_set_post_ops(attr, po)) != dnnl_success)
            goto end;
    }
    what = "matmul primitive";
    if ((s = dnnl_primitive_desc_create(&pd, &desc, attr, engine, NULL)) != dnnl_success ||
        (s = dnnl_primitive_create(&e->prim, pd)) != dnnl_success) {
        e->prim = NULL;
        goto end;
    }
    e->md_s = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
end:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return s == dnnl_success ? RV_OK : dnnl_fail(s, what, g);
}

static rv_status mm_run(const cpu_gemm_call *g, const mm_entry *e)
{
    dnnl_stream_t stream = NULL;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    dnnl_status_t s;
    const char *what = "scratchpad";
    const size_t sp_bytes = dnnl_memory_desc_get_size(&e->md_s);
    void *sp = sp_bytes ? aligned_alloc(64, (sp_bytes + 63) / 64 * 64) : NULL;
    if (sp_bytes && !sp) {
        s = dnnl_out_of_memory;
        goto end;
    }
    what = "stream and memories";
    if ((s = dnnl_stream_create(&stream, engine, dnnl_stream_default_flags)) != dnnl_success ||
        (s = dnnl_memory_create(&ma, &e->md_a, engine, (void *)g->a)) != dnnl_success ||
        (s = dnnl_memory_create(&mb, &e->md_b, engine, (void *)g->b)) != dnnl_success ||
        (s = dnnl_memory_create(&mc, &e->md_c, engine, g->c)) != dnnl_success ||
        (sp && (s = dnnl_memory_create(&ms, &e->md_s, engine, sp)) != dnnl_success))
        goto end;
    const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma},
                                     {DNNL_ARG_WEIGHTS, mb},
                                     {DNNL_ARG_DST, mc},
                                     {DNNL_ARG_SCRATCHPAD, ms}};
    what = "matmul";
    if ((s = dnnl_primitive_execute(e->prim, stream, ms ? 4 : 3, args)) == dnnl_success)
        s = dnnl_stream_wait(stream);
end:
    if (ms)
        dnnl_memory_destroy(ms);
    free(sp);
    if (ma)
        dnnl_memory_destroy(ma);
    if (mb)
        dnnl_memory_destroy(mb);
    if (mc)
        dnnl_memory_destroy(mc);
    if (stream)
        dnnl_stream_destroy(stream);
    return s == dnnl_success ? RV_OK : dnnl_fail(s, what, g);
}

/* The cached entry of key (users counted up), or NULL. Under the lock. */
static mm_entry *cache_find(const mm_key *key)
{
    for (int i = 0; i < CACHE_SLOTS; i++) {
        mm_entry *e = &cache.slot[i];
        if (e->prim && memcmp(&e->key, key, sizeof *key) == 0) {
            e->users++;
            e->used = ++cache.clock;
            return e;
        }
    }
    return NULL;
}

/* A slot for a new entry: an empty one, else the least recently used one no call
 * is running (its primitive freed); NULL when every slot is busy. Under the lock. */
static mm_entry *cache_victim(void)
{
    mm_entry *best = NULL;
    for (int i = 0; i < CACHE_SLOTS; i++) {
        mm_entry *e = &cache.slot[i];
        if (!e->prim)
            return e;
        if (e->users == 0 && (!best || e->used < best->used))
            best = e;
    }
    if (best) {
        dnnl_primitive_destroy(best->prim);
        best->prim = NULL;
    }
    return best;
}

rv_status cpu_dnnl_matmul(const cpu_gemm_call *g)
{
    pthread_once(&engine_once, engine_make);
    if (engine_status != dnnl_success)
        return dnnl_fail(engine_status, "CPU engine", g);
    const mm_key key = key_of(g);
    pthread_mutex_lock(&cache.lock);
    mm_entry *e = cache_find(&key);
    pthread_mutex_unlock(&cache.lock);

    mm_entry own = {.key = key};
    rv_status st = RV_OK;
    if (!e) {
        if ((st = mm_make(g, &own)) != RV_OK)
            return st;
        pthread_mutex_lock(&cache.lock);
        if ((e = cache_find(&key)) == NULL && (e = cache_victim()) != NULL) {
            *e = own; /* kept: the cache owns the primitive now */
            e->users = 1;
            e->used = ++cache.clock;
            own.prim = NULL;
        }
        pthread_mutex_unlock(&cache.lock);
    }
    st = mm_run(g, e ? e : &own);
    if (e) {
        pthread_mutex_lock(&cache.lock);
        e->users--;
        pthread_mutex_unlock(&cache.lock);
    }
    if (own.prim) /* made while another call made the same, or no slot was free */
        dnnl_primitive_destroy(own.prim);
    return st;
}

void cpu_sgemm_serial(int trans_a, int trans_b, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *b, int ldb, float beta, float *c,
                      int ldc)
{
    isa_setup();
    omp_set_num_threads(1); /* inside a parallel region oneDNN is serial anyway */
    dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta,
               c, ldc);
}

static char version_text[32];
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_make(void)
{
    const dnnl_version_t *v = dnnl_version();
    snprintf(version_text, sizeof version_text, "oneDNN %d.%d.%d", v->major, v->minor,
             v->patch);
}

const char *cpu_dnnl_version(void)
{
    pthread_once(&version_once, version_make);
    return version_text;
}

const char *cpu_dnnl_isa(void)
{
    isa_setup();
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
    }
}

int cpu_dnnl_has_bf16(void)
{
    isa_setup();
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16;
}
