/* The built-in models by name: the texts the files under models/ hold too
 * (test_model checks that they agree). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "model.h"

static const char *const PRESETS[][2] = {
    {"mlp", "# 784-256-128-10 perceptron for 28x28 grey images\n"
            "input 1 28 28\nlinear 256\nrelu\nlinear 128\nrelu\nlinear 10\n"},
    {"lenet", "# LeNet-5 for 28x28 grey images\n"
              "input 1 28 28\nconv 6 k5 p2\nrelu\nmaxpool k2\nconv 16 k5\nrelu\nmaxpool k2\n"
              "linear 120\nrelu\nlinear 84\nrelu\nlinear 10\n"},
    {"cnn", "# two conv layers for 28x28 grey images\n"
            "input 1 28 28\nconv 32 k3\nrelu\nmaxpool k2\nconv 64 k3\nrelu\nmaxpool k2\n"
            "linear 128\nrelu\nlinear 10\n"},
    {"resnet", "# a small ResNet (3 stages of one basic block) for 32x32 colour images\n"
               "input 3 32 32\n"
               "conv 16 k3 p1 nobias\nbatchnorm\nrelu\nsave b0\n"
               "conv 16 k3 p1 nobias\nbatchnorm\nrelu\nconv 16 k3 p1 nobias\nbatchnorm\nadd b0\nrelu\n"
               "save b1\n"
               "conv 32 k3 s2 p1 nobias\nbatchnorm\nrelu\nconv 32 k3 p1 nobias\nbatchnorm\nadd b1 proj\n"
               "relu\nsave b2\n"
               "conv 64 k3 s2 p1 nobias\nbatchnorm\nrelu\nconv 64 k3 p1 nobias\nbatchnorm\nadd b2 proj\n"
               "relu\navgpool global\nlinear 10\n"},
    {"gpt-mini", "# nanoGPT's CPU recipe for character-level text: 4 layers, 4 heads, 128 dims, context 64\n"
                 "train optimizer adamw lr 1e-3 schedule cosine warmup 100 min-lr 1e-4 weight-decay 0.1 beta2 0.99 "
                 "clip-norm 1 batch-size 12\n"
                 "input tokens 64\nembed 256 128\n"
                 "block heads 4\nblock heads 4\nblock heads 4\nblock heads 4\n"
                 "layernorm\nhead tied\n"},
    {"gpt", "# nanoGPT's GPU recipe for character-level text: 6 layers, 6 heads, 384 dims, context 256\n"
            "train optimizer adamw lr 1e-3 schedule cosine warmup 100 min-lr 1e-4 weight-decay 0.1 beta2 0.99 "
            "clip-norm 1 batch-size 12\n"
            "input tokens 256\nembed 256 384\n"
            "block heads 6\nblock heads 6\nblock heads 6\nblock heads 6\nblock heads 6\nblock heads 6\n"
            "layernorm\nhead tied\n"},
    {"gpt2", "# GPT-2 small (124M) for token files of GPT-2's BPE (--tokens-bin): 12 layers, 12 heads, 768 dims,\n"
             "# context 1024, vocabulary 50257 padded to 50304 (nanoGPT's); nanoGPT's train_gpt2 recipe\n"
             "train optimizer adamw lr 6e-4 schedule cosine warmup 2000 min-lr 6e-5 weight-decay 0.1 beta2 0.95 "
             "clip-norm 1 batch-size 12\n"
             "input tokens 1024\nembed 50304 768\n"
             "block heads 12\nblock heads 12\nblock heads 12\nblock heads 12\nblock heads 12\nblock heads 12\n"
             "block heads 12\nblock heads 12\nblock heads 12\nblock heads 12\nblock heads 12\nblock heads 12\n"
             "layernorm\nhead tied\n"},
};

const char *st_model_preset_text(const char *name)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (!strcmp(PRESETS[i][0], name))
            return PRESETS[i][1];
    return NULL;
}

/* "mlp, lenet, ...", for messages. */
const char *nn_preset_names(void)
{
    static char names[128];
    if (!names[0])
        for (size_t i = 0, at = 0; i < sizeof PRESETS / sizeof *PRESETS && at < sizeof names; i++)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", i ? ", " : "", PRESETS[i][0]);
    return names;
}
