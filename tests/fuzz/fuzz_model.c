/* The model text parser: any text is a model or one refusal; a model's
 * canonical text parses to itself, and its sizes are within the bounds the
 * parser states (MODEL_MAX_TENSOR, MODEL_MAX_PARAMS). */
#include <string.h>

#include "fuzz.h"
#include "shmtrain/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    if (!text)
        return 0;
    st_model *m = NULL;
    if (st_model_parse(&m, text, "fuzz.model") == ST_OK) {
        fuzz_assert(st_model_param_count(m) <= 2147483647u);
        fuzz_assert(st_model_input_size(m) >= 1 && st_model_input_size(m) <= 2147483647u);
        fuzz_assert(st_model_classes(m) >= 1);
        st_model *again = NULL;
        fuzz_assert(st_model_parse(&again, st_model_text(m), "canonical") == ST_OK);
        fuzz_assert(strcmp(st_model_text(again), st_model_text(m)) == 0);
        fuzz_assert(st_model_param_count(again) == st_model_param_count(m));
        st_model_destroy(again);
        FILE *sink = fopen("/dev/null", "w");
        if (sink) {
            st_model_summary(m, sink);
            fclose(sink);
        }
        st_model_destroy(m);
    } else {
        fuzz_assert(m == NULL);
    }
    free(text);
    return 0;
}
