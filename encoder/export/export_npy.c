/* export_npy.c: the .npy 1.0 header of the export's shards, written as
 * numpy.lib.format writes it and read back to check a shard of an earlier run.
 * ref: numpy/lib/format.py (_write_array_header, _read_array_header). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_npy.h"

#define NPY_GROWTH_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

const char *npy_descr(rv_dtype dtype)
{
    return dtype == RV_F32 ? "<f4" : dtype == RV_F16 ? "<f2" : NULL;
}

size_t npy_header(rv_dtype dtype, int64_t rows, int64_t cols, char *buf, size_t cap)
{
    const char *descr = npy_descr(dtype);
    char dict[160];
    if (!descr || rows < 0 || cols < 0)
        return 0;
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRId64
                     ", %" PRId64 "), }",
                     descr, rows, cols);
    if (n < 0 || (size_t)n >= sizeof dict)
        return 0;
    /* numpy leaves room for the first extent to grow to 21 digits before it pads
     * to the alignment: the same bytes as numpy.save. */
    const int digits = snprintf(NULL, 0, "%" PRId64, rows);
    const size_t growth = digits < NPY_GROWTH_DIGITS ? (size_t)(NPY_GROWTH_DIGITS - digits) : 0;
    /* magic, version, length, the dict, the padding, a newline */
    const size_t total =
        ((size_t)10 + (size_t)n + growth + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    if (total > cap)
        return 0;
    const size_t hlen = total - 10;
    memcpy(buf, magic, sizeof magic);
    buf[6] = 1;
    buf[7] = 0;
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)n);
    memset(buf + 10 + n, ' ', total - 10 - (size_t)n - 1);
    buf[total - 1] = '\n';
    return total;
}

/* The value after key in the dict text (NULL when the key is absent). */
static const char *after(const char *dict, const char *key)
{
    const char *p = strstr(dict, key);
    if (!p)
        return NULL;
    p += strlen(key);
    while (*p == ' ')
        p++;
    return *p == ':' ? p + 1 + strspn(p + 1, " ") : NULL;
}

/* A non-negative decimal extent at *p, advancing *p past it; -1 when none. */
static int64_t extent(const char **p)
{
    const char *s = *p;
    int64_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        const int d = *s - '0';
        if (v > (INT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *p = s;
    return v;
}

rv_status npy_parse(const void *bytes, size_t len, const char *label, rv_dtype *dtype,
                    int64_t *rows, int64_t *cols, size_t *header_len)
{
    const unsigned char *b = bytes;
    if (len < 10 || memcmp(b, magic, sizeof magic) != 0)
        return rv_fail(RV_ERR_FORMAT, "%s: not a .npy file (%s)", label,
                       len < 10 ? "shorter than a header" : "no \\x93NUMPY magic");
    if (b[6] != 1 || b[7] != 0)
        return rv_fail(RV_ERR_FORMAT, "%s: .npy version %u.%u, not 1.0", label, b[6], b[7]);
    const size_t hlen = (size_t)b[8] | (size_t)b[9] << 8;
    if (hlen >= NPY_HEADER_MAX || 10 + hlen > len)
        return rv_fail(RV_ERR_FORMAT, "%s: .npy header of %zu bytes %s", label, hlen,
                       hlen >= NPY_HEADER_MAX ? "is longer than a shard's" : "is cut short");
    char dict[NPY_HEADER_MAX + 1];
    memcpy(dict, b + 10, hlen);
    dict[hlen] = '\0';
    if (hlen == 0 || dict[hlen - 1] != '\n' || strlen(dict) != hlen)
        return rv_fail(RV_ERR_FORMAT, "%s: .npy header does not end in a newline", label);
    const char *d = after(dict, "'descr'"), *f = after(dict, "'fortran_order'"),
               *s = after(dict, "'shape'");
    if (!d || !f || !s)
        return rv_fail(RV_ERR_FORMAT, "%s: .npy header lacks %s", label,
                       !d ? "'descr'" : !f ? "'fortran_order'" : "'shape'");
    if (strncmp(d, "'<f4'", 5) == 0)
        *dtype = RV_F32;
    else if (strncmp(d, "'<f2'", 5) == 0)
        *dtype = RV_F16;
    else
        return rv_fail(RV_ERR_FORMAT, "%s: .npy descr %.8s is neither '<f4' nor '<f2'", label, d);
    if (strncmp(f, "False", 5) != 0)
        return rv_fail(RV_ERR_FORMAT, "%s: .npy array is not in C order", label);
    if (*s != '(')
        return rv_fail(RV_ERR_FORMAT, "%s: .npy shape is not a tuple", label);
    s++;
    s += strspn(s, " ");
    const int64_t r = extent(&s);
    s += strspn(s, " ");
    if (r < 0 || *s != ',')
        return rv_fail(RV_ERR_FORMAT, "%s: .npy shape is not (rows, columns)", label);
    s++;
    s += strspn(s, " ");
    const int64_t c = extent(&s);
    s += strspn(s, " ");
    if (c < 0 || *s != ')')
        return rv_fail(RV_ERR_FORMAT, "%s: .npy shape is not (rows, columns)", label);
    *rows = r;
    *cols = c;
    *header_len = 10 + hlen;
    return RV_OK;
}

rv_status npy_check_file(const char *path, rv_dtype dtype, int64_t cols, int64_t *rows,
                         size_t *header_len)
{
    unsigned char head[10 + NPY_HEADER_MAX];
    struct stat sb;
    rv_status st = RV_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = rv_fail(RV_ERR_FORMAT, "%s: not a regular file", path);
        goto end;
    }
    ssize_t got = pread(fd, head, sizeof head, 0);
    if (got < 0) {
        st = rv_fail(RV_ERR_IO, "%s: %s", path, strerror(errno));
        goto end;
    }
    rv_dtype dt;
    int64_t r, c;
    if ((st = npy_parse(head, (size_t)got, path, &dt, &r, &c, header_len)) != RV_OK)
        goto end;
    if (dt != dtype || c != cols) {
        st = rv_fail(RV_ERR_FORMAT, "%s: a (%" PRId64 ", %" PRId64 ") %s array, not %s of %" PRId64
                     " columns", path, r, c, npy_descr(dt), npy_descr(dtype), cols);
        goto end;
    }
    const uint64_t row_bytes = (uint64_t)c * rv_dtype_size(dt); /* c is the caller's width */
    if (row_bytes > 0 && (uint64_t)r > ((uint64_t)INT64_MAX - *header_len) / row_bytes) {
        st = rv_fail(RV_ERR_FORMAT, "%s: %" PRId64 " rows is beyond any file", path, r);
        goto end;
    }
    const uint64_t want = (uint64_t)*header_len + (uint64_t)r * row_bytes;
    if ((uint64_t)sb.st_size != want) {
        st = rv_fail(RV_ERR_FORMAT, "%s: %lld bytes, but its header says %" PRId64 " rows of %" PRId64
                     " (%llu bytes)%s", path, (long long)sb.st_size, r, c,
                     (unsigned long long)want, (uint64_t)sb.st_size < want ? ": truncated" : "");
        goto end;
    }
    *rows = r;
end:
    close(fd);
    return st;
}
