/* out_path.h: the one rule for what an output path (-o, --out-dir entries,
 * --ckpt, --log) may name, shared by every subcommand so none of them replaces
 * a device node, a FIFO or a folder with a regular file. */
#ifndef RV_OUT_PATH_H
#define RV_OUT_PATH_H

#include <stddef.h>

#include "rv_safetensors.h"
#include "rv_status.h"

/* The file that writing out will create or replace, in target (len bytes):
 *   - out does not exist: out itself;
 *   - out is a regular file: out itself;
 *   - out is a symlink (a chain of them): followed to the final target, which
 *     is written if it is a regular file or does not exist (a dangling link
 *     creates its target). Writers make their temporary file beside the target
 *     and rename it onto the target, so the link stays a link;
 *   - anything else (character or block device, FIFO, socket, directory, or a
 *     link to one) is refused: RV_ERR_IO, "OUT: is a character device; refusing
 *     to replace it (only a regular file is replaced)".
 * The check runs on lstat/stat: something swapped in between it and the write
 * is not caught (callers check again just before writing to narrow the window). */
rv_status out_target_path(const char *out, char *target, size_t len);

/* Opens the log path (written in place, not renamed) with open(2) flags
 * (O_WRONLY | O_CREAT and O_APPEND or O_TRUNC) and mode after the same check
 * ("refusing to write it"), and checks the opened file is regular, so a FIFO or
 * device named as the log is refused instead of blocking or being written.
 * *fd is the descriptor (blocking) or -1 on error. */
rv_status out_open_log(const char *path, int flags, int mode, int *fd);

/* "-" as the output of embed, frames or tokens (-o -): the safetensors bytes go
 * to standard output, written in one pass with no temporary file. */
int out_is_stdout(const char *out);

/* For -o -, before any work: refuses a terminal as standard output (a usage
 * error, printed: exit RV_EXIT_USAGE), then keeps standard output for the bytes
 * alone: a duplicate of descriptor 1 is kept for out_write_st, and
 * descriptor 1 itself is pointed at standard error, so whatever the command
 * prints on stdout (its summary line, its table) goes to stderr instead of
 * into the bytes. SIGPIPE is ignored: a reader that goes away makes the write
 * fail with EPIPE, which is reported, instead of killing the process silently.
 * Returns 0, RV_EXIT_USAGE or RV_EXIT_FAIL (after a message). */
int out_stdout_take(const char *cmd);

/* Writes w to out: standard output for "-" (after out_stdout_take), else
 * the file out_target_path names, atomically (rv_st_writer_write). */
rv_status out_write_st(rv_st_writer *w, const char *out);

#endif
