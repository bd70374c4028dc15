/* What a sweep reads back from each run (launcher/sweep/sweep.c): the
 * metrics file, JSON lines written by the program under the sweep (shmtrain,
 * the PyTorch peer, or a script of the user's: --compare-torch=SCRIPT), and
 * the launcher's --report.  The first byte picks the system the run stands
 * for and the target; the rest is the file, read both ways.  A run read as
 * good has a positive, finite throughput and step time: a report of NaN or
 * infinity would be ranked. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "sweep.h"

static void strings_terminated(const struct sweep_run *r, const struct sweep_versions *v)
{
    fuzz_assert(memchr(r->error, 0, sizeof r->error) && memchr(r->precision, 0, sizeof r->precision));
    fuzz_assert(memchr(r->mode, 0, sizeof r->mode) && memchr(v->torch, 0, sizeof v->torch));
    fuzz_assert(memchr(v->torch_mode, 0, sizeof v->torch_mode) && memchr(v->onednn, 0, sizeof v->onednn));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = fuzz_text(data + 1, size - 1);
    if (!text)
        return 0;
    const struct sweep_target target = {.loss = data[0] & 1, .value = data[0] & 2 ? 0.5 : 0};
    struct sweep_run r;
    struct sweep_versions v = {0};
    sweep_run_reset(&r, 0, (data[0] >> 2) % SWEEP_NSYSTEMS, 0, 0);
    if (sweep_read_metrics(text, target, &r, &v) == 0) {
        fuzz_assert(isfinite(r.samples_per_s) && r.samples_per_s > 0);
        fuzz_assert(isfinite(r.step_ms) && r.step_ms > 0);
    } else {
        fuzz_assert(!r.ok && r.error[0]);
    }
    strings_terminated(&r, &v);
    sweep_run_reset(&r, 0, 0, 0, 0);
    if (sweep_read_report(text, &r) == 0)
        fuzz_assert(!(r.rss_max_mb < 0) && !(r.rss_total_mb < r.rss_max_mb));
    else
        fuzz_assert(r.error[0]);
    free(text);
    return 0;
}
