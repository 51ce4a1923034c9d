/* fuzz_manifest.c: libFuzzer target for the finetune manifest parser
 * (ft_data_read, with and without labels, with classes derived and looked up):
 * any bytes either fail with a usage error or give items whose paths and labels
 * are strings within the classes. */
#include <stdint.h>
#include <string.h>

#include "finetune.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file f;
    if (fuzz_file_open(&f, "manifest.tsv", data, size) != 0)
        return 0;
    ft_classes classes;
    ft_data d;
    memset(&classes, 0, sizeof classes);
    if (ft_data_read(f.path, 1, &classes, NULL, &d) == 0) {
        for (int i = 0; i < d.n; i++)
            if (!d.item[i].path || d.item[i].label < 0 || d.item[i].label >= classes.n)
                __builtin_trap();
        ft_data val;
        if (ft_data_read(f.path, 1, NULL, &classes, &val) == 0) /* the same labels, known */
            ft_data_free(&val);
        ft_data_free(&d);
    }
    ft_classes_free(&classes);
    if (ft_data_read(f.path, 0, NULL, NULL, &d) == 0)
        ft_data_free(&d);
    fuzz_file_close(&f);
    return 0;
}
