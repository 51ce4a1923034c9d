/* test_safetensors.c: the safetensors reader and writer (encoder/weights/rv_safetensors.c).
 * Round trip through the writer; a file laid out by hand from the format spec;
 * every hostile-header case with its message; every truncation and random byte
 * corruption of a valid file; atomic-write failure paths; the same bytes written
 * to a descriptor (-o -), and its write error when the reader is gone. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rv_safetensors.h"

#define LABEL "hostile.st"

/* ---- helpers ------------------------------------------------------------------ */

static char *make_tmpdir(void)
{
    char tmpl[] = "/tmp/rv_st_test_XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert_not_null(d, "mkdtemp: %s", strerror(errno));
    return strdup(d);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Removes dir and what is in it (one level of subdirectories). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    chmod(dir, 0755);
    if (d) {
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            char *p = join(dir, de->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                remove_tree(p);
            else
                unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Entries in dir whose name contains part ("" counts all). */
static int count_entries(const char *dir, const char *part)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    cr_assert_not_null(d, "opendir %s", dir);
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && strstr(de->d_name, part))
            n++;
    closedir(d);
    return n;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n ? (size_t)n : 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void spit(const char *path, const void *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A file from a header text and data_len bytes of 0x5a. */
static uint8_t *build(const char *hdr, size_t data_len, size_t *len)
{
    size_t n = strlen(hdr);
    uint8_t *b = malloc(8 + n + data_len);
    put_u64le(b, n);
    memcpy(b + 8, hdr, n);
    memset(b + 8 + n, 0x5a, data_len);
    *len = 8 + n + data_len;
    return b;
}

static void expect_bad_bytes(const uint8_t *b, size_t len, const char *needle, const char *what)
{
    rv_safetensors *st = (rv_safetensors *)&st; /* must be reset to NULL */
    rv_clear_error();
    rv_status rc = rv_st_parse(b, len, LABEL, &st);
    cr_assert_neq(rc, RV_OK, "%s: accepted", what);
    cr_assert_null(st, "%s: handle not NULL on failure", what);
    cr_assert_not_null(strstr(rv_last_error(), needle), "%s: message '%s' lacks '%s'", what,
                       rv_last_error(), needle);
    cr_assert_not_null(strstr(rv_last_error(), LABEL), "%s: message '%s' lacks the label",
                       what, rv_last_error());
}

static void expect_bad(const char *hdr, size_t data_len, const char *needle)
{
    size_t len;
    uint8_t *b = build(hdr, data_len, &len);
    expect_bad_bytes(b, len, needle, hdr);
    free(b);
}

#define DT0 "\"dtype\":\"F32\""

/* ---- the round trip --------------------------------------------------------------- */

static float f32[6] = {1.0f, -2.0f, 3.5f, 1e-30f, -0.0f, 65504.0f};
static double f64[4] = {1.0, -1e300, 0.1, 2.5};
static uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff}; /* odd byte count: 6 */
static uint16_t bf16[2] = {0x3f80, 0xc000};
static uint8_t u8[5] = {0, 1, 127, 128, 255};
static int16_t i16 = -1234; /* scalar */
static int32_t i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
static int64_t i64[3] = {INT64_MIN, 42, INT64_MAX};
static uint16_t u16[2] = {0, 65535};
static uint32_t u32[1] = {0xdeadbeef};
static uint64_t u64[2] = {0, UINT64_MAX};
static uint8_t bools[3] = {1, 0, 1};

typedef struct case_t {
    const char *name;
    rv_dtype dtype;
    int ndim;
    int64_t shape[RV_ST_MAX_DIMS];
    const void *data;
    size_t nbytes;
} case_t;

/* Insertion order; zero-size tensors first, between and last, never adjacent. */
static const case_t cases[] = {
    {"empty.first", RV_I8, 1, {0}, NULL, 0},
    {"w.f32", RV_F32, 2, {2, 3}, f32, sizeof f32},
    {"w.f16", RV_F16, 1, {3}, f16, sizeof f16},
    {"zero.mid", RV_F32, 3, {3, 0, 2}, NULL, 0},
    {"w.f64", RV_F64, 2, {4, 1}, f64, sizeof f64},
    {"w.bf16", RV_BF16, 3, {1, 1, 2}, bf16, sizeof bf16},
    {"w.u8", RV_U8, 1, {5}, u8, sizeof u8},
    {"scalar.i16", RV_I16, 0, {0}, &i16, sizeof i16},
    {"w.i32", RV_I32, 2, {2, 2}, i32, sizeof i32},
    {"w.i64", RV_I64, 1, {3}, i64, sizeof i64},
    {"w.u16", RV_U16, 1, {2}, u16, sizeof u16},
    {"w.u32", RV_U32, 8, {1, 1, 1, 1, 1, 1, 1, 1}, u32, sizeof u32},
    {"w.u64", RV_U64, 1, {2}, u64, sizeof u64},
    {"w.bool", RV_BOOL, 1, {3}, bools, sizeof bools},
    {"empty.last", RV_U64, 2, {0, 7}, NULL, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void write_reference(const char *path)
{
    rv_st_writer *w = NULL;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK, "%s", rv_last_error());
    for (int i = 0; i < NCASES; i++)
        cr_assert_eq(rv_st_writer_add(w, cases[i].name, cases[i].dtype, cases[i].ndim,
                                      cases[i].shape, cases[i].data),
                     RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_meta(w, "format", "pt"), RV_OK);
    cr_assert_eq(rv_st_writer_meta(w, "note", "h\xc3\xa9llo \"quoted\""), RV_OK);
    cr_assert_eq(rv_st_writer_meta(w, "format", "ringvit"), RV_OK); /* replaces */
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    rv_st_writer_free(&w);
    cr_assert_null(w);
}

static void check_reference(const rv_safetensors *st)
{
    cr_assert_eq(rv_st_count(st), NCASES);
    for (int i = 0; i < NCASES; i++) {
        const case_t *c = &cases[i];
        const rv_st_tensor *t = rv_st_find(st, c->name);
        cr_assert_not_null(t, "%s missing", c->name);
        cr_assert_eq(rv_st_at(st, i), t, "%s: not at its insertion position %d", c->name, i);
        cr_assert_str_eq(t->name, c->name);
        cr_assert_eq(t->dtype, c->dtype, "%s dtype", c->name);
        cr_assert_eq(t->ndim, c->ndim, "%s ndim", c->name);
        int64_t numel = 1;
        for (int d = 0; d < c->ndim; d++) {
            cr_assert_eq(t->shape[d], c->shape[d], "%s shape[%d]", c->name, d);
            numel *= c->shape[d];
        }
        cr_assert_eq(t->numel, numel, "%s numel", c->name);
        cr_assert_eq(t->nbytes, c->nbytes, "%s nbytes", c->name);
        cr_assert_not_null(t->data, "%s data", c->name);
        if (c->nbytes)
            cr_assert_eq(memcmp(t->data, c->data, c->nbytes), 0, "%s bytes differ", c->name);
    }
    cr_assert_null(rv_st_at(st, -1));
    cr_assert_null(rv_st_at(st, NCASES));
    cr_assert_null(rv_st_find(st, "absent"));
    cr_assert_null(rv_st_find(st, "__metadata__"));
    cr_assert_str_eq(rv_st_meta(st, "format"), "ringvit");
    cr_assert_str_eq(rv_st_meta(st, "note"), "h\xc3\xa9llo \"quoted\"");
    cr_assert_null(rv_st_meta(st, "absent"));
}

Test(safetensors, round_trip)
{
    char *dir = make_tmpdir(), *path = join(dir, "ref.safetensors");
    rv_safetensors *st = NULL;
    size_t len;

    write_reference(path);
    cr_assert_eq(count_entries(dir, ""), 1, "temporary file left behind");

    cr_assert_eq(rv_st_open(path, &st), RV_OK, "%s", rv_last_error());
    cr_assert_str_eq(rv_st_label(st), path);
    check_reference(st);
    rv_st_free(&st);
    cr_assert_null(st);
    rv_st_free(&st); /* no-op */

    /* The same bytes from memory; the copy must outlive the caller's buffer. */
    uint8_t *bytes = slurp(path, &len);
    cr_assert_eq(rv_st_parse(bytes, len, "mem", &st), RV_OK, "%s", rv_last_error());
    memset(bytes, 0, len);
    free(bytes);
    check_reference(st);
    rv_st_free(&st);

    /* Layout: data start 8-aligned, header padded with spaces, compact sorted JSON,
     * nothing after the last tensor. */
    bytes = slurp(path, &len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)bytes[i] << (8 * i);
    cr_assert_eq((8 + n) % 8, 0);
    size_t total = 0;
    for (int i = 0; i < NCASES; i++)
        total += cases[i].nbytes;
    cr_assert_eq(len, 8 + n + total);
    char *hdr = strndup((const char *)bytes + 8, n);
    size_t jl = strlen(hdr);
    while (jl > 0 && hdr[jl - 1] == ' ')
        jl--;
    cr_assert(n - jl < 8, "padding of %zu bytes", (size_t)(n - jl));
    cr_assert_eq(hdr[0], '{');
    cr_assert_eq(hdr[jl - 1], '}');
    cr_assert_not_null(strstr(hdr, "\"__metadata__\":{\"format\":\"ringvit\",\"note\":"), "%s", hdr);
    cr_assert_not_null(strstr(hdr, "\"scalar.i16\":{\"data_offsets\":["), "%s", hdr);
    cr_assert_not_null(strstr(hdr, "\"shape\":[]"), "%s", hdr);
    free(hdr);
    free(bytes);

    /* Overwriting an existing file replaces it and leaves no temp file. */
    write_reference(path);
    cr_assert_eq(count_entries(dir, ""), 1);

    free(path);
    remove_tree(dir);
    free(dir);
}

/* ---- to a descriptor (standard output) ------------------------------------------------ */

/* rv_st_writer_write_fd writes exactly the bytes rv_st_writer_write puts in a
 * file, in place (no temporary file); a pipe without a reader is RV_ERR_IO
 * naming the label and EPIPE (SIGPIPE ignored), not a silent death. */
Test(safetensors, write_fd_same_bytes_and_reader_gone)
{
    char *dir = make_tmpdir(), *path = join(dir, "ref.safetensors"),
         *fdpath = join(dir, "fd.safetensors");
    rv_st_writer *w = NULL;
    size_t len, fdlen;
    cr_assert_eq(rv_st_writer_new(&w), RV_OK, "%s", rv_last_error());
    for (int i = 0; i < NCASES; i++)
        cr_assert_eq(rv_st_writer_add(w, cases[i].name, cases[i].dtype, cases[i].ndim,
                                      cases[i].shape, cases[i].data),
                     RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_meta(w, "format", "ringvit"), RV_OK);
    cr_assert_eq(rv_st_writer_write(w, path), RV_OK, "%s", rv_last_error());
    int fd = open(fdpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0, "%s", strerror(errno));
    cr_assert_eq(rv_st_writer_write_fd(w, fd, "standard output"), RV_OK, "%s", rv_last_error());
    close(fd);
    cr_assert_eq(count_entries(dir, ""), 2, "a temporary file was left");
    uint8_t *a = slurp(path, &len), *b = slurp(fdpath, &fdlen);
    cr_assert_eq(fdlen, len);
    cr_assert_eq(memcmp(a, b, len), 0, "the bytes differ");
    free(a);
    free(b);

    int p[2];
    cr_assert_eq(pipe(p), 0);
    close(p[0]);
    void (*old)(int) = signal(SIGPIPE, SIG_IGN);
    cr_assert_eq(rv_st_writer_write_fd(w, p[1], "standard output"), RV_ERR_IO);
    signal(SIGPIPE, old);
    close(p[1]);
    cr_assert_not_null(strstr(rv_last_error(), "standard output: writing failed: "),
                       "%s", rv_last_error());
    cr_assert_not_null(strstr(rv_last_error(), strerror(EPIPE)), "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_write_fd(w, -1, "x"), RV_ERR_INVALID);
    rv_st_writer_free(&w);
    free(path);
    free(fdpath);
    remove_tree(dir);
    free(dir);
}

/* ---- a file laid out by hand from the spec --------------------------------------- */

Test(safetensors, hand_built_file)
{
    /* Header deliberately not a multiple of 8, keys out of data order, an unknown
     * field, trailing spaces, a zero-size tensor at the very end of the data. */
    const char *hdr =
        "{\"b\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[8,12]},"
        "\"__metadata__\":{\"k\":\"v\"},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"extra\":1},"
        "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[12,12]}}   ";
    const uint8_t data[12] = {0x00, 0x00, 0x80, 0x3f,  /* a[0] = 1.0f   */
                              0x00, 0x00, 0x00, 0xc0,  /* a[1] = -2.0f  */
                              0x02, 0x01,              /* b[0] = 258    */
                              0xff, 0xff};             /* b[1] = -1     */
    size_t n = strlen(hdr), len = 8 + n + sizeof data;
    uint8_t *b = malloc(len);
    for (int i = 0; i < 8; i++) /* u64 little-endian, byte by byte */
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, hdr, n);
    memcpy(b + 8 + n, data, sizeof data);

    char *dir = make_tmpdir(), *path = join(dir, "hand.safetensors");
    spit(path, b, len);
    for (int pass = 0; pass < 2; pass++) {
        rv_safetensors *st = NULL;
        rv_status rc = pass == 0 ? rv_st_parse(b, len, "hand", &st) : rv_st_open(path, &st);
        cr_assert_eq(rc, RV_OK, "%s", rv_last_error());
        cr_assert_eq(rv_st_count(st), 3);
        cr_assert_str_eq(rv_st_at(st, 0)->name, "a");
        cr_assert_str_eq(rv_st_at(st, 1)->name, "b");
        cr_assert_str_eq(rv_st_at(st, 2)->name, "z");

        const rv_st_tensor *t = NULL;
        const int64_t s2[1] = {2};
        cr_assert_eq(rv_st_get(st, "a", RV_F32, 1, s2, &t), RV_OK, "%s", rv_last_error());
        float fa[2];
        memcpy(fa, t->data, sizeof fa);
        cr_assert_eq(fa[0], 1.0f);
        cr_assert_eq(fa[1], -2.0f);
        cr_assert_eq(t->numel, 2);

        cr_assert_eq(rv_st_get(st, "b", RV_I16, 1, s2, &t), RV_OK, "%s", rv_last_error());
        int16_t ib[2];
        memcpy(ib, t->data, sizeof ib);
        cr_assert_eq(ib[0], 258);
        cr_assert_eq(ib[1], -1);

        const int64_t s03[2] = {0, 3};
        cr_assert_eq(rv_st_get(st, "z", RV_BF16, 2, s03, &t), RV_OK, "%s", rv_last_error());
        cr_assert_eq(t->numel, 0);
        cr_assert_eq(t->nbytes, 0);
        cr_assert_str_eq(rv_st_meta(st, "k"), "v");
        rv_st_free(&st);
    }
    free(b);
    free(path);
    remove_tree(dir);
    free(dir);
}

Test(safetensors, no_metadata_and_no_tensors_are_valid)
{
    /* No __metadata__; the one tensor covers the data section exactly. */
    size_t len;
    uint8_t *b = build("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, &len);
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_parse(b, len, "plain", &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_count(st), 1);
    cr_assert_null(rv_st_meta(st, "k"));
    rv_st_free(&st);
    free(b);

    b = build("{}", 0, &len); /* no tensors at all */
    cr_assert_eq(rv_st_parse(b, len, "none", &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_count(st), 0);
    cr_assert_null(rv_st_find(st, "x"));
    rv_st_free(&st);
    free(b);

    /* A zero-size tensor holds no bytes: any offset in range is fine. */
    b = build("{\"a\":{" DT0 ",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"e\":{" DT0 ",\"shape\":[0],\"data_offsets\":[2,2]}}", 4, &len);
    cr_assert_eq(rv_st_parse(b, len, "empty", &st), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_count(st), 2);
    rv_st_free(&st);
    free(b);
}

/* The tensors must cover the data section exactly, as the format requires: a
 * hole, leading or trailing bytes mean the header and the data disagree (the
 * hostile-input issue: a header length one byte short loaded with every tensor
 * shifted by one byte). */
Test(safetensors, data_section_covered_exactly)
{
    expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}", 6,
               "bytes 0..4 of the 6-byte data section belong to no tensor (a gap before 'x')");
    expect_bad("{\"a\":{" DT0 ",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{" DT0 ",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
               "bytes 4..8 of the 12-byte data section belong to no tensor (a gap before 'b', "
               "after 'a')");
    expect_bad("{\"x\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 5,
               "3 trailing bytes (bytes 2..5 of the 5-byte data section) after the last "
               "tensor 'x'");
    expect_bad("{}", 3, "3 trailing bytes (bytes 0..3 of the 3-byte data section)");

    /* The reporter's case: the header padded with spaces and its length one byte
     * short still parses, but the data then start one byte early. */
    const char *h = "{\"x\":{" DT0 ",\"shape\":[2],\"data_offsets\":[0,8]}}   ";
    size_t len;
    uint8_t *b = build(h, 8, &len);
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_parse(b, len, "ok", &st), RV_OK, "%s", rv_last_error());
    rv_st_free(&st);
    put_u64le(b, strlen(h) - 1);
    expect_bad_bytes(b, len, "1 trailing byte (bytes 8..9 of the 9-byte data section) after "
                     "the last tensor 'x'", "header length one byte short");
    char *dir = make_tmpdir(), *path = join(dir, "short.safetensors");
    spit(path, b, len);
    cr_assert_eq(rv_st_open(path, &st), RV_ERR_FORMAT, "file accepted");
    cr_assert_null(st);
    cr_assert_not_null(strstr(rv_last_error(), path), "%s", rv_last_error());
    cr_assert_not_null(strstr(rv_last_error(), "trailing byte"), "%s", rv_last_error());
    free(b);
    free(path);
    remove_tree(dir);
    free(dir);
}

/* ---- rv_st_get ------------------------------------------------------------------- */

Test(safetensors, get_checks)
{
    size_t len;
    uint8_t *b = build("{\"enc.w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,12]}}",
                       12, &len);
    rv_safetensors *st = NULL;
    const rv_st_tensor *t = NULL;
    cr_assert_eq(rv_st_parse(b, len, "w.st", &st), RV_OK, "%s", rv_last_error());

    const int64_t ok[2] = {2, 3}, any[2] = {-1, 3}, bad[2] = {3, 2};
    cr_assert_eq(rv_st_get(st, "enc.w", RV_F16, 2, ok, &t), RV_OK);
    cr_assert_str_eq(t->name, "enc.w");
    cr_assert_eq(rv_st_get(st, "enc.w", RV_F16, 2, any, &t), RV_OK);
    cr_assert_eq(rv_st_get(st, "enc.w", RV_F16, 2, NULL, &t), RV_OK);
    cr_assert_eq(rv_st_get(st, "enc.w", RV_F16, -1, NULL, &t), RV_OK);

    cr_assert_neq(rv_st_get(st, "enc.missing", RV_F16, 2, ok, &t), RV_OK);
    cr_assert_null(t);
    cr_assert_not_null(strstr(rv_last_error(), "w.st: tensor 'enc.missing' not found"), "%s",
                       rv_last_error());

    cr_assert_neq(rv_st_get(st, "enc.w", RV_F32, 2, ok, &t), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'enc.w': dtype is F16, expected F32"), "%s",
                       rv_last_error());

    cr_assert_neq(rv_st_get(st, "enc.w", RV_F16, 2, bad, &t), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'enc.w': shape is [2, 3], expected [3, 2]"),
                       "%s", rv_last_error());

    const int64_t wild[3] = {2, -1, 1};
    cr_assert_neq(rv_st_get(st, "enc.w", RV_F16, 3, wild, &t), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "shape is [2, 3], expected [2, *, 1]"), "%s",
                       rv_last_error());

    cr_assert_neq(rv_st_get(st, "enc.w", RV_F16, 1, NULL, &t), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "expected rank 1"), "%s", rv_last_error());

    rv_st_free(&st);
    free(b);
}

/* ---- hostile files ---------------------------------------------------------------- */

Test(safetensors, hostile_lengths)
{
    uint8_t b[64] = {0};
    for (size_t len = 0; len < 8; len++)
        expect_bad_bytes(len ? b : NULL, len, "shorter than the 8-byte", "short file");

    memset(b, ' ', sizeof b);
    put_u64le(b, 0);
    expect_bad_bytes(b, 16, "header length is 0", "zero header");

    put_u64le(b, 100000001);
    expect_bad_bytes(b, sizeof b, "exceeds the limit of 100000000", ">100 MB header");
    put_u64le(b, UINT64_MAX);
    expect_bad_bytes(b, sizeof b, "exceeds the limit", "u64 max header");

    put_u64le(b, 57);
    expect_bad_bytes(b, sizeof b, "header length 57 exceeds the 56 bytes", "header past EOF");
}

typedef struct bad_t {
    const char *hdr;
    size_t data_len;
    const char *needle;
} bad_t;

#define T1(fields) "{\"t\":{" fields "}}"
#define DT "\"dtype\":\"F32\""
#define SH "\"shape\":[2]"
#define OF "\"data_offsets\":[0,8]"

static const bad_t bad_headers[] = {
    /* not JSON, not UTF-8, not an object */
    {"{", 8, "header is not valid UTF-8 JSON"},
    {"{\"t\xff" "\":{" DT "," SH "," OF "}}", 8, "header is not valid UTF-8 JSON"},
    {"{\"t\":{\"dtype\":\"F\xc0\xaf" "32\"," SH "," OF "}}", 8, "not valid UTF-8 JSON"},
    {"{\"a\\u0000b\":{" DT "," SH "," OF "}}", 8, "not valid UTF-8 JSON"},
    {"[1,2]", 8, "header is not a JSON object"},
    {"\"str\"", 8, "not valid UTF-8 JSON"}, /* jansson wants an object or array */
    {T1(DT "," SH "," OF) " x", 8, "not valid UTF-8 JSON"},
    /* entries */
    {"{\"t\":5}", 8, "tensor 't': entry is not a JSON object"},
    {"{\"t\":[]}", 8, "tensor 't': entry is not a JSON object"},
    {"{\"\":{" DT "," SH "," OF "}}", 8, "empty name"},
    {"{\"t\":{" DT "," SH "," OF "},\"t\":{" DT "," SH "," OF "}}", 8, "duplicate"},
    /* dtype */
    {T1(SH "," OF), 8, "tensor 't': missing \"dtype\""},
    {T1("\"dtype\":5," SH "," OF), 8, "tensor 't': \"dtype\" is not a string"},
    {T1("\"dtype\":\"F128\"," SH "," OF), 8, "tensor 't': unknown dtype 'F128'"},
    {T1("\"dtype\":\"f32\"," SH "," OF), 8, "tensor 't': unknown dtype 'f32'"},
    {T1("\"dtype\":\"F8_E4M3\"," SH "," OF), 8, "unknown dtype 'F8_E4M3'"},
    /* shape */
    {T1(DT "," OF), 8, "tensor 't': missing \"shape\""},
    {T1(DT ",\"shape\":2," OF), 8, "tensor 't': \"shape\" is not an array"},
    {T1(DT ",\"shape\":{}," OF), 8, "\"shape\" is not an array"},
    {T1(DT ",\"shape\":[-1]," OF), 8, "tensor 't': shape[0] is not a non-negative integer"},
    {T1(DT ",\"shape\":[2,1.5]," OF), 8, "shape[1] is not a non-negative integer"},
    {T1(DT ",\"shape\":[\"2\"]," OF), 8, "shape[0] is not a non-negative integer"},
    {T1(DT ",\"shape\":[null]," OF), 8, "shape[0] is not a non-negative integer"},
    {T1(DT ",\"shape\":[1,1,1,1,1,1,1,1,2]," OF), 8, "tensor 't': shape has 9 dims, more than 8"},
    {T1("\"dtype\":\"I8\",\"shape\":[4294967296,4294967296,4]," OF), 8,
     "tensor 't': shape [4294967296, 4294967296, 4] element count overflows"},
    {T1("\"dtype\":\"F64\",\"shape\":[4611686018427387904]," OF), 8,
     "tensor 't': shape [4611686018427387904] of F64 byte size overflows"},
    {T1(DT ",\"shape\":[99999999999999999999]," OF), 8, "not valid UTF-8 JSON"},
    /* data_offsets */
    {T1(DT "," SH), 8, "tensor 't': missing \"data_offsets\""},
    {T1(DT "," SH ",\"data_offsets\":8"), 8, "\"data_offsets\" is not an array of two integers"},
    {T1(DT "," SH ",\"data_offsets\":[0]"), 8, "\"data_offsets\" is not an array of two integers"},
    {T1(DT "," SH ",\"data_offsets\":[0,8,8]"), 8, "is not an array of two integers"},
    {T1(DT "," SH ",\"data_offsets\":[-8,0]"), 8, "tensor 't': \"data_offsets\" are not two non-negative integers"},
    {T1(DT "," SH ",\"data_offsets\":[0,\"8\"]"), 8, "are not two non-negative integers"},
    {T1(DT "," SH ",\"data_offsets\":[0,8.0]"), 8, "are not two non-negative integers"},
    {T1(DT "," SH ",\"data_offsets\":[8,0]"), 16, "tensor 't': data_offsets begin 8 is after end 0"},
    {T1(DT "," SH ",\"data_offsets\":[8,16]"), 8, "tensor 't': data_offsets end 16 is beyond the 8-byte data section"},
    {T1(DT "," SH ",\"data_offsets\":[9223372036854775807,9223372036854775807]"), 8, "is beyond"},
    {T1(DT "," SH ",\"data_offsets\":[0,4]"), 8, "tensor 't': data_offsets span 4 bytes but F32 [2] needs 8"},
    {T1(DT "," SH ",\"data_offsets\":[0,12]"), 12, "span 12 bytes but F32 [2] needs 8"},
    {T1("\"dtype\":\"U8\",\"shape\":[0]," OF), 8, "span 8 bytes but U8 [0] needs 0"},
    /* overlap, also hidden behind a tensor that starts earlier and ends later */
    {"{\"a\":{" DT "," SH ",\"data_offsets\":[0,8]},\"b\":{" DT "," SH ",\"data_offsets\":[4,12]}}",
     12, "tensors 'a' (bytes 0..8) and 'b' (bytes 4..12) overlap"},
    {"{\"big\":{" DT ",\"shape\":[4],\"data_offsets\":[0,16]},"
     "\"e\":{" DT ",\"shape\":[0],\"data_offsets\":[4,4]},"
     "\"in\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[8,10]}}",
     16, "tensors 'big' (bytes 0..16) and 'in' (bytes 8..10) overlap"},
    {"{\"a\":{" DT "," SH "," OF "},\"b\":{" DT "," SH "," OF "}}", 8, "overlap"},
    /* metadata */
    {"{\"__metadata__\":5}", 0, "\"__metadata__\" is not a JSON object"},
    {"{\"__metadata__\":[\"k\",\"v\"]}", 0, "\"__metadata__\" is not a JSON object"},
    {"{\"__metadata__\":{\"k\":\"v\",\"n\":1}}", 0, "\"__metadata__\" entry 'n' is not a string"},
    {"{\"__metadata__\":{\"k\":{}}}", 0, "entry 'k' is not a string"},
};

Test(safetensors, hostile_headers)
{
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++)
        expect_bad(bad_headers[i].hdr, bad_headers[i].data_len, bad_headers[i].needle);

    /* Padding with NUL bytes instead of spaces (a C string cannot hold it). */
    const char *h = T1(DT "," SH "," OF);
    size_t hn = strlen(h), len = 8 + hn + 3 + 8;
    uint8_t *b = calloc(1, len);
    put_u64le(b, hn + 3);
    memcpy(b + 8, h, hn);
    expect_bad_bytes(b, len, "not valid UTF-8 JSON", "NUL padding");
    free(b);
}

Test(safetensors, hostile_nesting)
{
    /* Deep nesting must be refused by the parser, not blow the stack. */
    size_t depth = 100000;
    char *h = malloc(2 * depth + 16);
    size_t n = 0;
    n += (size_t)sprintf(h, "{\"t\":");
    memset(h + n, '[', depth);
    n += depth;
    memset(h + n, ']', depth);
    n += depth;
    h[n++] = '}';
    h[n] = '\0';
    expect_bad(h, 0, "not valid UTF-8 JSON");
    free(h);
}

/* Every proper prefix of a valid file fails cleanly, from memory (exact-size
 * buffers, so the sanitizer sees any overread) and from disk (the mmap path). */
Test(safetensors, every_truncation_fails)
{
    char *dir = make_tmpdir(), *path = join(dir, "ref.safetensors"),
         *cut = join(dir, "cut.safetensors");
    size_t len;
    write_reference(path);
    uint8_t *full = slurp(path, &len);
    for (size_t l = 0; l < len; l++) {
        uint8_t *b = l ? malloc(l) : NULL;
        if (l)
            memcpy(b, full, l);
        rv_safetensors *st = NULL;
        cr_assert_neq(rv_st_parse(b, l, "cut", &st), RV_OK, "prefix of %zu bytes accepted", l);
        cr_assert_null(st);
        cr_assert_not_null(strstr(rv_last_error(), "cut: "), "%s", rv_last_error());
        free(b);

        spit(cut, full, l);
        cr_assert_neq(rv_st_open(cut, &st), RV_OK, "file cut at %zu bytes accepted", l);
        cr_assert_null(st);
        cr_assert_not_null(strstr(rv_last_error(), cut), "%s", rv_last_error());
    }
    free(full);
    free(cut);
    free(path);
    remove_tree(dir);
    free(dir);
}

/* Random byte corruption of a valid file: never a crash, and whatever is accepted
 * only hands out in-bounds data (read in full here, under the sanitizer). */
Test(safetensors, random_corruption)
{
    char *dir = make_tmpdir(), *path = join(dir, "ref.safetensors");
    size_t len;
    write_reference(path);
    uint8_t *full = slurp(path, &len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)full[i] << (8 * i);
    static const char pool[] = "0123456789-[]{},:\" .eE\xff\x80";
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int accepted = 0;
    for (int it = 0; it < 4000; it++) {
        uint8_t *b = malloc(len);
        memcpy(b, full, len);
        int flips = 1 + (int)(s % 3);
        for (int f = 0; f < flips; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)((s >> 33) % (8 + n)); /* length field and header */
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            b[pos] = (s >> 40) & 1 ? (uint8_t)(s >> 48) : (uint8_t)pool[(s >> 48) % (sizeof pool - 1)];
        }
        rv_safetensors *st = NULL;
        if (rv_st_parse(b, len, "fuzz", &st) == RV_OK) {
            accepted++;
            unsigned sum = 0;
            for (int i = 0; i < rv_st_count(st); i++) {
                const rv_st_tensor *t = rv_st_at(st, i);
                cr_assert(t->name[0] != '\0');
                for (size_t k = 0; k < t->nbytes; k++)
                    sum += ((const uint8_t *)t->data)[k];
            }
            (void)sum;
            rv_st_free(&st);
        } else {
            cr_assert_null(st);
            cr_assert_not_null(strstr(rv_last_error(), "fuzz"), "%s", rv_last_error());
        }
        free(b);
    }
    cr_log_info("random_corruption: %d of 4000 corrupted files still valid", accepted);
    free(full);
    free(path);
    remove_tree(dir);
    free(dir);
}

/* ---- the writer -------------------------------------------------------------------- */

Test(safetensors, writer_rejects_bad_input)
{
    rv_st_writer *w = NULL;
    const int64_t s2[2] = {2, 2}, neg[1] = {-1}, huge[2] = {INT64_MAX, 2};
    const float d[4] = {0};
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_st_writer_add(w, "a", RV_F32, 2, s2, d), RV_OK);

    cr_assert_neq(rv_st_writer_add(w, "a", RV_F32, 2, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'a' added twice"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "", RV_F32, 2, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "empty"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "__metadata__", RV_F32, 2, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "reserved"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "bad\xff", RV_F32, 2, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "UTF-8"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "b", RV_F32, 9, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'b': ndim 9"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "b", RV_F32, 1, neg, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'b': shape[0] = -1"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "b", RV_F32, 2, huge, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "overflows"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "b", RV_F32, 2, s2, NULL), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'b': data is NULL"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_add(w, "b", RV_DTYPE_COUNT, 2, s2, d), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "'b': unknown dtype"), "%s", rv_last_error());
    cr_assert_neq(rv_st_writer_meta(w, "k", "\xc3"), RV_OK);
    /* A failed add leaves the name free. */
    cr_assert_eq(rv_st_writer_add(w, "b", RV_F32, 0, NULL, d), RV_OK, "%s", rv_last_error());
    cr_assert_eq(rv_st_writer_add(w, "c", RV_F32, 1, (int64_t[]){0}, NULL), RV_OK);
    rv_st_writer_free(&w);
    cr_assert_null(w);
    rv_st_writer_free(&w);
}

/* Writes a one-tensor file to path; returns the status. */
static rv_status write_small(const char *path, float v)
{
    rv_st_writer *w = NULL;
    const float d[2] = {v, v};
    const int64_t s[1] = {2};
    cr_assert_eq(rv_st_writer_new(&w), RV_OK);
    cr_assert_eq(rv_st_writer_add(w, "x", RV_F32, 1, s, d), RV_OK);
    rv_status rc = rv_st_writer_write(w, path);
    rv_st_writer_free(&w);
    return rc;
}

Test(safetensors, write_failures_leave_nothing)
{
    char *dir = make_tmpdir();

    /* path is a directory (with something in it): the rename fails late, after
     * the temporary file was written; it must be gone and the directory intact. */
    char *dpath = join(dir, "out.safetensors");
    cr_assert_eq(mkdir(dpath, 0755), 0);
    char *inner = join(dpath, "keep");
    spit(inner, "k", 1);
    cr_assert_neq(write_small(dpath, 1.0f), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), dpath), "%s", rv_last_error());
    struct stat sb;
    cr_assert_eq(stat(dpath, &sb), 0);
    cr_assert(S_ISDIR(sb.st_mode));
    cr_assert_eq(access(inner, F_OK), 0);
    cr_assert_eq(count_entries(dir, ".tmp."), 0, "temporary file left behind");
    cr_assert_eq(count_entries(dpath, ""), 1);

    /* The parent does not exist / is a regular file. */
    char *missing = join(dir, "nope/x.safetensors");
    cr_assert_neq(write_small(missing, 1.0f), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), missing), "%s", rv_last_error());
    char *file = join(dir, "plain"), *under = join(dir, "plain/x.safetensors");
    spit(file, "p", 1);
    cr_assert_neq(write_small(under, 1.0f), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), under), "%s", rv_last_error());

    /* A directory nobody may create files in, also as root. */
    cr_assert_neq(write_small("/proc/rv_st_cannot_write.safetensors", 1.0f), RV_OK);
    cr_assert_not_null(strstr(rv_last_error(), "/proc/rv_st_cannot_write.safetensors"), "%s",
                       rv_last_error());

    /* A symlink planted at the temporary name is not followed. */
    char *dst = join(dir, "dst.safetensors"), *victim = join(dir, "victim");
    char tmpname[4096];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", dst, (long)getpid());
    spit(victim, "victim", 6);
    cr_assert_eq(symlink(victim, tmpname), 0);
    cr_assert_neq(write_small(dst, 1.0f), RV_OK);
    size_t vl;
    uint8_t *vb = slurp(victim, &vl);
    cr_assert_eq(vl, 6);
    cr_assert_eq(memcmp(vb, "victim", 6), 0);
    cr_assert_eq(access(dst, F_OK), -1);
    free(vb);
    unlink(tmpname);

    /* A stale regular temp file (crashed writer with the same pid) is reused. */
    spit(tmpname, "stale", 5);
    cr_assert_eq(write_small(dst, 3.0f), RV_OK, "%s", rv_last_error());
    cr_assert_eq(access(tmpname, F_OK), -1);

    free(dst);
    free(victim);
    free(file);
    free(under);
    free(missing);
    free(inner);
    free(dpath);
    remove_tree(dir);
    free(dir);
}

/* Only nothing or a regular file is replaced: a FIFO, a symlink and a device
 * node (made as root) at the path are refused before any byte is written, and left as
 * they were; a regular file is replaced. */
Test(safetensors, write_replaces_only_regular_files)
{
    char *dir = make_tmpdir();
    char *fifo = join(dir, "f.safetensors"), *link = join(dir, "l.safetensors");
    char *target = join(dir, "t.safetensors"), *dev = join(dir, "d.safetensors");
    struct stat sb;
    cr_assert_eq(mkfifo(fifo, 0644), 0);
    cr_assert_neq(write_small(fifo, 1.0f), RV_OK);
    cr_expect(strstr(rv_last_error(), fifo) && strstr(rv_last_error(), "is a FIFO"), "%s",
              rv_last_error());
    cr_assert_eq(lstat(fifo, &sb), 0);
    cr_expect(S_ISFIFO(sb.st_mode), "the FIFO was replaced");

    spit(target, "t", 1);
    cr_assert_eq(symlink(target, link), 0);
    cr_assert_neq(write_small(link, 1.0f), RV_OK);
    cr_expect(strstr(rv_last_error(), "is a symlink"), "%s", rv_last_error());
    cr_assert_eq(lstat(link, &sb), 0);
    cr_expect(S_ISLNK(sb.st_mode), "the symlink was replaced");
    cr_assert_eq(stat(target, &sb), 0);
    cr_expect_eq(sb.st_size, 1, "the symlink's target was written");

    /* /dev/null's numbers; the tests run as root, as scripts/test.sh and CI do. */
    cr_assert_eq(mknod(dev, S_IFCHR | 0644, makedev(1, 3)), 0,
                 "mknod %s: %s (the device-node case needs root)", dev, strerror(errno));
    cr_assert_neq(write_small(dev, 1.0f), RV_OK);
    cr_expect(strstr(rv_last_error(), "is a character device"), "%s", rv_last_error());
    cr_assert_eq(lstat(dev, &sb), 0);
    cr_expect(S_ISCHR(sb.st_mode), "the device node was replaced");
    cr_expect_eq(count_entries(dir, ".tmp."), 0, "temporary file left behind");
    cr_assert_eq(write_small(target, 2.0f), RV_OK, "%s", rv_last_error());
    remove_tree(dir);
    free(fifo), free(link), free(target), free(dev), free(dir);
}

Test(safetensors, write_into_readonly_dir_keeps_old_file)
{
    char *dir = make_tmpdir(), *ro = join(dir, "ro"), *path = join(ro, "w.safetensors");
    cr_assert_eq(mkdir(ro, 0755), 0);
    cr_assert_eq(write_small(path, 1.0f), RV_OK, "%s", rv_last_error());
    size_t l0, l1;
    uint8_t *before = slurp(path, &l0);
    cr_assert_eq(chmod(ro, 0555), 0);
    if (geteuid() == 0) {
        /* root ignores mode bits: make the write attempt as user nobody in a child
         * process, which reports through its exit status. */
        cr_assert_eq(chmod(dir, 0755), 0);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0)
                _exit(10);
            if (write_small(path, 2.0f) == RV_OK)
                _exit(11);
            if (!strstr(rv_last_error(), path) || !strstr(rv_last_error(), "Permission denied"))
                _exit(12);
            _exit(0);
        }
        int status = 0;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "write as nobody into a read-only directory: child status %d (10 setuid "
                  "failed, 11 write succeeded, 12 message lacks path or reason)",
                  WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    } else {
        cr_assert_neq(write_small(path, 2.0f), RV_OK);
        cr_assert_not_null(strstr(rv_last_error(), path), "%s", rv_last_error());
        cr_assert_not_null(strstr(rv_last_error(), "Permission denied"), "%s", rv_last_error());
    }
    uint8_t *after = slurp(path, &l1);
    cr_assert_eq(l0, l1);
    cr_assert_eq(memcmp(before, after, l0), 0, "existing file changed");
    cr_assert_eq(count_entries(ro, ""), 1, "temporary file left behind");
    free(before);
    free(after);
    free(path);
    free(ro);
    remove_tree(dir);
    free(dir);
}

Test(safetensors, open_errors)
{
    char *dir = make_tmpdir(), *missing = join(dir, "missing.safetensors");
    rv_safetensors *st = NULL;
    cr_assert_eq(rv_st_open(missing, &st), RV_ERR_IO);
    cr_assert_null(st);
    cr_assert_not_null(strstr(rv_last_error(), missing), "%s", rv_last_error());
    cr_assert_eq(rv_st_open(dir, &st), RV_ERR_IO);
    cr_assert_not_null(strstr(rv_last_error(), "not a regular file"), "%s", rv_last_error());
    cr_assert_null(st);
    free(missing);
    remove_tree(dir);
    free(dir);
}

Test(safetensors, dtype_table)
{
    static const char *names[] = {"F32", "F64", "F16", "BF16", "U8", "I8", "I16",
                                  "I32", "I64", "U16", "U32", "U64", "BOOL"};
    static const size_t sizes[] = {4, 8, 2, 2, 1, 1, 2, 4, 8, 2, 4, 8, 1};
    for (int d = 0; d < RV_DTYPE_COUNT; d++) {
        cr_assert_str_eq(rv_dtype_name((rv_dtype)d), names[d]);
        cr_assert_eq(rv_dtype_size((rv_dtype)d), sizes[d]);
    }
    cr_assert_eq(rv_dtype_size(RV_DTYPE_COUNT), 0);
    cr_assert_str_eq(rv_dtype_name((rv_dtype)-1), "?");
}
