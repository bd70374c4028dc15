#include "test_half.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

void st_test_half(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--skip") == 0)
        cmocka_set_skip_filter(argv[2]);
    else if (argc > 1)
        cmocka_set_test_filter(argv[1]);
}
