/* test_export_npy.c: the .npy 1.0 header of the export's shards (encoder/export/
 * export_npy.c) against the bytes numpy 1.24's numpy.lib.format writes for the
 * same arrays (copied below), its length a multiple of 64 for every extent up
 * to 2^63 - 1, parsed back to the same shape, and the headers and files the
 * parser must refuse: another magic, version, descr or order, a shape that is
 * not (rows, columns), a cut header, and a file whose size is not its rows. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../encoder/export/export_npy.h"

/* numpy: io = BytesIO(); np.lib.format.write_array_header_1_0(io, {"descr":
 * "<f4", "fortran_order": False, "shape": (4, 192)}); io.getvalue() */
static const char numpy_4x192[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': (4, 192), }"
    "                                                        \n";
static const char numpy_f2_0x0[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '<f2', 'fortran_order': False, 'shape': (0, 0), }"
    "                                                          \n";
static const char numpy_big[] =
    "\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'shape': "
    "(123456789012, 768), }                                             \n";

static void same_as_numpy(rv_dtype dt, int64_t rows, int64_t cols, const char *want, size_t n)
{
    char buf[NPY_HEADER_MAX];
    const size_t len = npy_header(dt, rows, cols, buf, sizeof buf);
    cr_assert_eq(len, n, "(%" PRId64 ", %" PRId64 "): %zu bytes, numpy %zu", rows, cols, len, n);
    cr_assert(memcmp(buf, want, n) == 0, "(%" PRId64 ", %" PRId64 ") differs from numpy's", rows,
              cols);
}

Test(export_npy, header_is_numpys)
{
    same_as_numpy(RV_F32, 4, 192, numpy_4x192, sizeof numpy_4x192 - 1);
    same_as_numpy(RV_F16, 0, 0, numpy_f2_0x0, sizeof numpy_f2_0x0 - 1);
    same_as_numpy(RV_F32, INT64_C(123456789012), 768, numpy_big, sizeof numpy_big - 1);
}

Test(export_npy, padded_to_64_and_parsed_back)
{
    const int64_t extents[] = {0, 1, 9, 10, 99999, INT64_C(1) << 32, INT64_MAX};
    const rv_dtype dts[] = {RV_F32, RV_F16};
    char buf[NPY_HEADER_MAX];
    for (size_t i = 0; i < sizeof extents / sizeof extents[0]; i++)
        for (size_t j = 0; j < sizeof extents / sizeof extents[0]; j++)
            for (int d = 0; d < 2; d++) {
                const size_t len = npy_header(dts[d], extents[i], extents[j], buf, sizeof buf);
                cr_assert(len > 0 && len % 64 == 0, "length %zu", len);
                cr_assert_eq((size_t)(unsigned char)buf[8] | (size_t)(unsigned char)buf[9] << 8,
                             len - 10);
                cr_assert_eq(buf[len - 1], '\n');
                rv_dtype dt;
                int64_t r, c;
                size_t hl;
                cr_assert_eq(npy_parse(buf, len, "h", &dt, &r, &c, &hl), RV_OK, "%s",
                             rv_last_error());
                cr_assert(dt == dts[d] && r == extents[i] && c == extents[j] && hl == len);
            }
}

Test(export_npy, refuses_what_is_not_a_shard_header)
{
    char buf[NPY_HEADER_MAX];
    const size_t len = npy_header(RV_F32, 4, 192, buf, sizeof buf);
    struct {
        const char *from, *to, *why;
    } bad[] = {
        {"NUMPY", "NUMPX", "magic"},
        {"'<f4'", "'>f4'", "big-endian"},
        {"'<f4'", "'<f8'", "f64"},
        {"False", "True ", "Fortran order"},
        {"(4, 192)", "(4, 19,)", "3 extents"},
        {"(4, 192)", "(4,    )", "1-d"},
        {"(4, 192)", "(-4, 92)", "negative"},
    };
    rv_dtype dt;
    int64_t r, c;
    size_t hl;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char copy[NPY_HEADER_MAX];
        memcpy(copy, buf, len);
        char *p = memmem(copy, len, bad[i].from, strlen(bad[i].from));
        cr_assert(p, "%s", bad[i].why);
        memcpy(p, bad[i].to, strlen(bad[i].to));
        cr_assert_eq(npy_parse(copy, len, "h", &dt, &r, &c, &hl), RV_ERR_FORMAT, "%s accepted",
                     bad[i].why);
    }
    char v2[NPY_HEADER_MAX];
    memcpy(v2, buf, len);
    v2[6] = 2;
    cr_assert_eq(npy_parse(v2, len, "h", &dt, &r, &c, &hl), RV_ERR_FORMAT, "version 2 accepted");
    cr_assert_eq(npy_parse(buf, len - 1, "h", &dt, &r, &c, &hl), RV_ERR_FORMAT, "cut header");
    cr_assert_eq(npy_parse(buf, 9, "h", &dt, &r, &c, &hl), RV_ERR_FORMAT, "9 bytes");
    cr_assert_eq(npy_header(RV_F64, 4, 4, buf, sizeof buf), 0, "f64 has no shard header");
    cr_assert_eq(npy_header(RV_F32, -1, 4, buf, sizeof buf), 0, "negative rows");
    cr_assert_eq(npy_header(RV_F32, 4, 4, buf, 100), 0, "a buffer too small");
}

/* A shard file: accepted at exactly its rows' size; a byte less or more, another
 * width or dtype is refused, the message naming the file. */
Test(export_npy, file_size_is_its_rows)
{
    char path[] = "/tmp/rv_test_npy_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    char head[NPY_HEADER_MAX];
    const size_t hl = npy_header(RV_F32, 3, 5, head, sizeof head);
    float rows[15] = {0};
    cr_assert_eq(write(fd, head, hl), (ssize_t)hl);
    cr_assert_eq(write(fd, rows, sizeof rows), (ssize_t)sizeof rows);
    int64_t r = -1;
    size_t got_hl = 0;
    cr_assert_eq(npy_check_file(path, RV_F32, 5, &r, &got_hl), RV_OK, "%s", rv_last_error());
    cr_assert(r == 3 && got_hl == hl);
    cr_assert_eq(npy_check_file(path, RV_F32, 4, &r, &got_hl), RV_ERR_FORMAT);
    cr_assert_eq(npy_check_file(path, RV_F16, 5, &r, &got_hl), RV_ERR_FORMAT);
    cr_assert_eq(write(fd, rows, 1), 1);
    cr_assert_eq(npy_check_file(path, RV_F32, 5, &r, &got_hl), RV_ERR_FORMAT);
    cr_assert_eq(ftruncate(fd, (off_t)(hl + sizeof rows - 4)), 0);
    cr_assert_eq(npy_check_file(path, RV_F32, 5, &r, &got_hl), RV_ERR_FORMAT);
    cr_assert(strstr(rv_last_error(), path) && strstr(rv_last_error(), "truncated"), "%s",
              rv_last_error());
    close(fd);
    unlink(path);
}
