/* console.log's keeper (src/shmtrain_console.h). */
#define _GNU_SOURCE
#include "shmtrain_console.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmtrain/env.h"

/* One stream: its pipe, where its bytes went before, and the line it is on. */
struct stream {
    int from, to;      /* the pipe's read end; the original descriptor */
    char line[4096];   /* the current line, as the terminal would show it */
    size_t n;
    bool escape;       /* inside an ANSI escape sequence (the bar's "\033[K") */
};

static struct {
    bool on;
    pthread_t thread;
    pthread_mutex_t lock;
    struct stream s[2];
    int stop[2];       /* console_keep_stop's word to the thread */
    FILE *file;        /* console.log, once the run began */
    char *held;        /* before that: the lines, in memory */
    size_t nheld;
    FILE *hold;
    char path[4200];
} keeper = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;  /* where the stream went is gone: nothing to tell it */
        p += w;
        n -= (size_t)w;
    }
}

/* A whole line to the file (or memory): a failed write is said once, on
 * the original stderr, and ends the keeping. */
static void keep_line(const char *line, size_t n)
{
    pthread_mutex_lock(&keeper.lock);
    FILE *f = keeper.file ? keeper.file : keeper.hold;
    if (f && (fwrite(line, 1, n, f) != n || fputc('\n', f) == EOF || fflush(f) != 0)) {
        char msg[4400];
        const int len = snprintf(msg, sizeof msg, "shmtrain: warning: %s: %s; console.log stops here\n",
                                 keeper.file ? keeper.path : "console.log", strerror(errno));
        write_all(keeper.s[1].to, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
        fclose(f);
        if (keeper.file)
            keeper.file = NULL;
        else
            keeper.hold = NULL;
    }
    pthread_mutex_unlock(&keeper.lock);
}

/* Bytes of one stream: passed on whole, kept as the lines a terminal shows
 * (a carriage return starts the line again, escape sequences draw nothing). */
static void take(struct stream *s, const char *p, size_t n)
{
    write_all(s->to, p, n);
    for (size_t i = 0; i < n; i++) {
        const char c = p[i];
        if (s->escape) {
            s->escape = !((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
        } else if (c == '\033') {
            s->escape = true;
        } else if (c == '\r') {
            s->n = 0;
        } else if (c == '\n') {
            keep_line(s->line, s->n);
            s->n = 0;
        } else if (s->n < sizeof s->line) {
            s->line[s->n++] = c;
        }
    }
}

/* Until console_keep_stop's byte on the control pipe: then what the
 * streams hold is read to its end and the thread returns.  (Waiting for
 * the pipes' ends instead would wait on a child that inherited them, as
 * MPI's helper daemons do, for ever.) */
static void *keep_thread(void *arg)
{
    (void)arg;
    struct pollfd fds[3] = {{.fd = keeper.s[0].from, .events = POLLIN}, {.fd = keeper.s[1].from, .events = POLLIN},
                            {.fd = keeper.stop[0], .events = POLLIN}};
    char buf[8192];
    for (bool stopping = false;;) {
        if (!stopping && poll(fds, 3, -1) < 0 && errno != EINTR)
            break;
        stopping |= (fds[2].revents & POLLIN) != 0;
        bool read_any = false;
        for (int k = 0; k < 2; k++) {
            if (fds[k].fd < 0 || (!stopping && !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))))
                continue;
            const ssize_t n = read(fds[k].fd, buf, sizeof buf);
            if (n > 0) {
                take(&keeper.s[k], buf, (size_t)n);
                read_any = true;
            } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
                fds[k].fd = -1;
            }
        }
        if (stopping && !read_any)
            break;
    }
    for (int k = 0; k < 2; k++)
        if (keeper.s[k].n)  /* a last line without its newline */
            keep_line(keeper.s[k].line, keeper.s[k].n);
    return NULL;
}

/* fd (1 or 2) into a pipe whose read end the thread takes. */
static bool divert(int fd, struct stream *s)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return false;
    fcntl(p[0], F_SETFL, O_NONBLOCK);  /* the last reads, at the stop, must not wait */
    s->to = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (s->to < 0 || dup2(p[1], fd) < 0) {
        close(p[0]);
        close(p[1]);
        if (s->to >= 0)
            close(s->to);
        return false;
    }
    close(p[1]);
    s->from = p[0];
    return true;
}

void console_keep_start(void)
{
    if (keeper.on)
        return;
    fflush(stdout);
    fflush(stderr);
    /* the trainer draws its progress bar on a terminal; a pipe now stands
     * between, so say where the bytes go in the end */
    if (isatty(STDOUT_FILENO))
        setenv(ST_ENV_CONSOLE_TTY, "1", 0);
    if (pipe2(keeper.stop, O_CLOEXEC) != 0)
        return;
    if (!(keeper.hold = open_memstream(&keeper.held, &keeper.nheld))) {
        close(keeper.stop[0]);
        close(keeper.stop[1]);
        return;
    }
    if (!divert(STDOUT_FILENO, &keeper.s[0])) {
        fclose(keeper.hold);
        keeper.hold = NULL;
        return;
    }
    if (!divert(STDERR_FILENO, &keeper.s[1])) {
        dup2(keeper.s[0].to, STDOUT_FILENO);
        close(keeper.s[0].to);
        close(keeper.s[0].from);
        fclose(keeper.hold);
        keeper.hold = NULL;
        return;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* no signal for this thread: Ctrl-C and SIGTERM are main's signal thread's */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    keeper.on = pthread_create(&keeper.thread, NULL, keep_thread, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (!keeper.on) {
        dup2(keeper.s[0].to, STDOUT_FILENO);
        dup2(keeper.s[1].to, STDERR_FILENO);
        return;
    }
    atexit(console_keep_stop);  /* exit(2) after a bad flag, exit from main: the lines reach both ends */
}

void console_keep_in(const char *path)
{
    if (!keeper.on)
        return;
    fflush(stdout);
    fflush(stderr);
    pthread_mutex_lock(&keeper.lock);
    snprintf(keeper.path, sizeof keeper.path, "%s", path);
    keeper.file = fopen(path, "a");
    if (!keeper.file) {
        char msg[4400];
        const int len = snprintf(msg, sizeof msg, "shmtrain: warning: %s: %s (no console log)\n", path,
                                 strerror(errno));
        write_all(keeper.s[1].to, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1);
    }
    if (keeper.hold) {
        fclose(keeper.hold);
        keeper.hold = NULL;
        if (keeper.file && keeper.nheld &&
            (fwrite(keeper.held, 1, keeper.nheld, keeper.file) != keeper.nheld || fflush(keeper.file) != 0)) {
            fclose(keeper.file);
            keeper.file = NULL;
        }
        free(keeper.held);
        keeper.held = NULL;
    }
    pthread_mutex_unlock(&keeper.lock);
}

void console_keep_stop(void)
{
    if (!keeper.on)
        return;
    keeper.on = false;
    fflush(stdout);
    fflush(stderr);
    /* the streams back where they were; the thread reads what is left */
    dup2(keeper.s[0].to, STDOUT_FILENO);
    dup2(keeper.s[1].to, STDERR_FILENO);
    if (write(keeper.stop[1], "", 1) == 1)
        pthread_join(keeper.thread, NULL);
    for (int k = 0; k < 2; k++) {
        close(keeper.s[k].from);
        close(keeper.s[k].to);
        close(keeper.stop[k]);
    }
    if (keeper.file)
        fclose(keeper.file);
    if (keeper.hold)
        fclose(keeper.hold);
    free(keeper.held);
    keeper.file = keeper.hold = NULL;
    keeper.held = NULL;
}

int console_run_quietly(const char *dir, const char *program, const char *arg)
{
    const pid_t pid = fork();
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, STDOUT_FILENO) < 0 || dup2(null, STDERR_FILENO) < 0)
            _exit(127);
        if (chdir(dir) == 0)
            execlp(program, program, arg, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return 126;
    return WEXITSTATUS(status);
}
