/* console.log: what rank 0 printed, on stdout and stderr, line by line (the
 * start lines, warnings, a resume, a stop on a bad loss, the end), as the
 * terminal showed it less its progress bar's redraws.
 *
 * Both streams are taken through pipes by a thread that writes every byte
 * on to where they went before and keeps the lines: in memory from
 * console_keep_start, in the file from console_keep_in (the memory first),
 * until console_keep_stop (also at exit) puts the streams back.  A write to
 * the file that fails (a full disk) is said once and ends the keeping,
 * never the run.  One keeper a process; rank 0 only. */
#ifndef SHMTRAIN_CONSOLE_H
#define SHMTRAIN_CONSOLE_H

void console_keep_start(void);
void console_keep_in(const char *path);
void console_keep_stop(void);

/* `program arg` run in `dir` with its output thrown away (so none of it is
 * kept); its exit status, 127 when it could not run. */
int console_run_quietly(const char *dir, const char *program, const char *arg);

#endif
