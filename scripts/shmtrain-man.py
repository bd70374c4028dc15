#!/usr/bin/env python3
"""Write docs/shmtrain.1 from docs/training.md's option table, so the man
page and the manual cannot drift (tests/help_docs.py checks both against
shmtrain --help).  Run after editing the table:

    scripts/shmtrain-man.py > docs/shmtrain.1
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def roff(text):
    text = text.replace("\\|", "|")
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"\*([^*]+)\*", r"\1", text)
    text = text.replace("\\", "\\e")
    text = re.sub(r"`([^`]+)`", lambda m: "\\fB" + m.group(1) + "\\fR", text)
    text = text.replace("-", "\\-")
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text[:1].upper() + text[1:]


def entries(markdown):
    section = markdown[markdown.index("## Options"):]
    section = section[: section.index("\n## ", 5)]
    out = []
    for row in section.splitlines():
        if not row.startswith("| `-"):
            continue
        option, default, meaning = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
        names = ", ".join(re.findall(r"`([^`]+)`", option)).replace("\\|", "|")
        text = meaning + (f" (default: {default})" if default else "") if meaning else (
            f"Default: {default}." if default else "See docs/training.md.")
        out += [".TP", ".B " + names.replace("-", "\\-"), roff(text)]
    return "\n".join(out)


HEAD = r'''.TH SHMTRAIN 1 "2026" "shmtrain 0.1.0" "User Commands"
.SH NAME
shmtrain \- train a neural network with data-parallel instances on one many-core CPU server
.SH SYNOPSIS
.B shmtrain
[\fIoptions\fR]
.br
.B shmrun
[\fIlauncher options\fR] \fB\-\-\fR \fBshmtrain\fR [\fIoptions\fR]
.br
.B shmtrain sample \-\-checkpoint
\fIFILE\fR \fB\-\-prompt\fR \fITEXT\fR [\fB\-\-tokens\fR \fIN\fR] [\fB\-\-temperature\fR \fIT\fR] [\fB\-\-top\-k\fR \fIK\fR] [\fB\-\-seed\fR \fIS\fR]
.br
.B shmtrain export \-\-checkpoint
\fIFILE\fR \fB\-\-out\fR \fIMODEL.safetensors\fR
.br
.B shmtrain \-\-version
|
.B \-\-help
.SH DESCRIPTION
.B shmtrain
trains one of its presets (mlp, lenet, cnn, resnet, gpt\-mini, gpt, gpt2) or a model file on
IDX, CIFAR, NumPy, image\-folder, text or token data, with oneDNN, in fp32 or bf16.
Alone it is one instance; under
.BR shmrun (1)
each instance trains a share of every batch and the gradients are averaged through shared
memory.  A model's own recipe (its \fBtrain\fR line) comes first and every flag given overrides it.
Options are spelled in full: a prefix is refused, and an unknown option is answered with the
one meant.
.B \-\-help
and
.B \-\-version
answer wherever they stand.
.SH OPTIONS
'''

TAIL = r'''.SH SUBCOMMANDS
.TP
.B sample
Print \fB\-\-prompt\fR and its continuation by a language model's checkpoint:
\fB\-\-tokens\fR N (200), \fB\-\-temperature\fR T (0.8; 0 is greedy), \fB\-\-top\-k\fR K (200; 0 is all),
\fB\-\-seed\fR S (1).
.TP
.B export
Write the checkpoint's parameters (and batch\-norm statistics) to \fB\-\-out\fR in the safetensors
format, named as PyTorch names them (nanoGPT's keys for the GPT presets); refuses an \fB\-\-out\fR that
is the checkpoint itself.
.SH EXIT STATUS
0 done; 1 failed; 2 a bad flag (an unknown or misspelt option, a value out of range, a model
that does not load, an output folder that does not exist); 75 stopped because another
instance failed; 130 stopped on request (SIGINT, SIGTERM or SIGHUP), after checkpointing.
.SH FILES
\fBshmtrain.ckpt\fR (\fB\-\-checkpoint\fR), \fBmetrics.jsonl\fR (\fB\-\-metrics\fR; under shmrun, in the job's log folder).
.SH SEE ALSO
shmrun(1), docs/training.md
'''

print(HEAD + entries(open(os.path.join(ROOT, "docs", "training.md")).read()) + "\n" + TAIL, end="")
