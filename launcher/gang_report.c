/* What an attempt of the gang did, said (gang.h): the failure table with
 * the root cause's last words, and shmrun --report's JSON object. */
#define _GNU_SOURCE
#include "gang.h"

#include <signal.h>
#include <string.h>

#include "shmtrain/json.h"

static void describe_end(const struct rank_result *r, char *buf, size_t len)
{
    if (r->stall[0])
        snprintf(buf, len, "%s, killed", r->stall);
    else if (r->peer_failed)
        snprintf(buf, len, "exit %d (a peer failed)", r->exit_code);
    else if (r->signaled)
        snprintf(buf, len, "signal %d (%s)%s", r->signal, sigabbrev_np(r->signal) ? sigabbrev_np(r->signal) : "?",
                 r->stopped_by_us ? ", stopped" : "");
    else if (r->exited)
        snprintf(buf, len, "exit %d%s", r->exit_code, r->stopped_by_us && r->exit_code ? ", stopped" : "");
    else
        snprintf(buf, len, "not started");
}

/* The last `lines` lines of a log, indented: the root cause's own words. */
static void print_tail(FILE *f, const char *path, int lines)
{
    FILE *in = fopen(path, "r");
    if (!in)
        return;
    char buf[8192];
    fseek(in, 0, SEEK_END);
    long size = ftell(in), from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(in, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, in);
    fclose(in);
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\n')
        buf[--n] = '\0';
    char *start = buf + n;
    for (int seen = 0; start > buf && seen < lines; start--)
        if (start[-1] == '\n' && ++seen == lines)
            break;
    if (!*start)
        return;
    fprintf(f, "last lines of its log:\n");
    for (char *line = strtok(start, "\n"); line; line = strtok(NULL, "\n"))
        fprintf(f, "  | %s\n", line);
}

void gang_print_summary(FILE *f, const st_plan *p, const struct attempt *a, const char *job_id)
{
    fprintf(f, "shmrun: job %s: %d instance%s, %.1f s\n", job_id, a->world, a->world == 1 ? "" : "s",
            a->seconds);
    fprintf(f, "%5s %8s %-14s %-24s %s\n", "rank", "pid", "PUs", "result", "log");
    for (int r = 0; r < a->world; r++) {
        char end[256];
        describe_end(&a->ranks[r], end, sizeof end);
        fprintf(f, "%5d %8d %-14s %-24s %s\n", r, (int)a->ranks[r].pid, p->inst[r].pu_list, end,
                a->ranks[r].log_path);
    }
    if (a->root_cause >= 0) {
        const struct rank_result *rc = &a->ranks[a->root_cause];
        char end[256];
        describe_end(rc, end, sizeof end);
        fprintf(f, "root cause: rank %d (pid %d, PUs %s): %s after %.2f s; see %s\n", a->root_cause,
                (int)rc->pid, p->inst[a->root_cause].pu_list, end, rc->end_s, rc->log_path);
        print_tail(f, rc->log_path, 6);
    } else if (a->user_signal) {
        fprintf(f, "interrupted by %s\n", strsignal(a->user_signal));
    }
}

void gang_write_report(FILE *f, const st_plan *p, const struct attempt *a, const char *job_id)
{
    st_json j;
    st_json_init(&j, f);
    st_json_object_begin(&j, NULL);
    st_json_string(&j, "job", job_id);
    st_json_int(&j, "instances", a->world);
    st_json_number(&j, "seconds", a->seconds, "%.3f");
    st_json_bool(&j, "ok", a->root_cause < 0 && !a->user_signal);
    st_json_array_begin(&j, "ranks");
    for (int r = 0; r < a->world; r++) {
        const struct rank_result *rr = &a->ranks[r];
        st_json_object_begin(&j, NULL);
        st_json_int(&j, "rank", r);
        st_json_string(&j, "pus", p->inst[r].pu_list);
        st_json_int(&j, "exit", rr->exit_code);
        st_json_int(&j, "signal", rr->signal);
        st_json_int(&j, "max_rss_kb", rr->max_rss_kb);
        st_json_number(&j, "cpu_s", rr->cpu_s, "%.3f");
        st_json_number(&j, "end_s", rr->end_s, "%.3f");
        st_json_bool(&j, "peer_failed", rr->peer_failed);
        st_json_string(&j, "stall", rr->stall);
        st_json_object_end(&j);
    }
    st_json_array_end(&j);
    st_json_object_end(&j);
    fputc('\n', f);
}
