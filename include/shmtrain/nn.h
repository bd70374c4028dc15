/* shmtrain neural-network engine: model descriptions and executable networks.
 *
 * A model is text, one layer per line, shapes inferred from one `input` line:
 *
 *     # LeNet for 28x28 grey images
 *     input 1 28 28          # channels height width
 *     conv 6 k5 p2           # out-channels, kernel, [stride s1], [padding p0], [nobias]
 *     relu
 *     maxpool k2             # kernel, [stride = kernel], [padding p0]
 *     linear 10              # out-features (flattens a 4-D input)
 *
 * Also: `avgpool k2 | avgpool global`, `batchnorm`, `dropout 0.5`, `flatten`, and
 * residual blocks: `save NAME` names the current activation, `add NAME` adds it back
 * (`add NAME proj` through a 1x1 convolution with the stride that matches shapes).
 *
 * Language models work on sequences, [T, C] per sample (docs/engine.md):
 *
 *     input tokens 64        # int32 token ids, context 64
 *     embed 256 128          # token table [256, 128] + learned positions [64, 128]
 *     block heads 4          # a pre-norm GPT-2 block, expanded into its parts:
 *                            #   save, layernorm, linear 3C, attention heads 4, linear C, add,
 *                            #   save, layernorm, linear 4C, gelu, linear C, add
 *     layernorm
 *     head tied              # logits [64, 256] through the embed's token table
 *
 * `linear` on [T, C] maps every position alike; the loss is cross-entropy at
 * every position.
 *
 * A network (st_net) is a model built for one batch size.  All parameters live
 * in one contiguous float buffer, in plain layouts (OIHW weights, then bias, layer by
 * layer), with gradients in a second buffer of the same layout, so zeroing,
 * clipping, the optimizer and the all-reduce each see one flat span.  Networks
 * know nothing of ranks; the caller decides what to do with the gradients.
 *
 * Thread count: oneDNN fixes it when primitives are created, so set OpenMP's
 * thread count before st_net_create and do not change it afterwards.
 */
#ifndef SHMTRAIN_NN_H
#define SHMTRAIN_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "shmtrain/tuning.h"
#include "shmtrain/dtype.h"
#include "shmtrain/optim.h"
#include "shmtrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_model st_model;
typedef struct st_net st_net;

/* ------------------------------------------------------ shapes, types -- */

/* Element types: st_dtype (shmtrain/dtype.h). */

/* A per-sample shape, outermost first: [C, H, W] for an image, [C] for
 * features; a sequence [T, C] or token ids [T] fit the same way. */
#define ST_MAX_DIMS 4
typedef struct st_shape {
    int ndims;
    int dims[ST_MAX_DIMS];
} st_shape;
size_t st_shape_elems(const st_shape *s);
void st_shape_str(const st_shape *s, char *buf, size_t len);  /* "1x28x28" */
bool st_shape_equal(const st_shape *a, const st_shape *b);

/* ---------------------------------------------------------------- models -- */

/* Parse model text.  `source` names it in errors ("lenet.model:4: ..."). */
st_status st_model_parse(st_model **out, const char *text, const char *source);

/* A preset name (mlp, lenet, cnn, resnet, gpt-mini, gpt) or a path to a model file. */
st_status st_model_load(st_model **out, const char *name_or_path);

/* The text of a preset, or NULL. */
const char *st_model_preset_text(const char *name);

void st_model_destroy(st_model *m);

/* The canonical text (one normalised line per layer): stored in checkpoints
 * and compared to refuse a checkpoint of another model. */
const char *st_model_text(const st_model *m);
/* A parameter tensor by PyTorch's name: nanoGPT's GPT keys for a language
 * model of GPT blocks ("transformer.h.0.attn.c_attn.weight", its linear
 * weights out x in; "lm_head.weight" is the tied token table again), else
 * nn.Sequential's ("3.weight", the index counting layers after the input;
 * batch norm's statistics as "running_mean"/"running_var", in the
 * buffers). */
typedef struct st_tensor_ref {
    char name[96];
    bool buffer;             /* in st_net_buffers' span, not the parameters */
    size_t offset, count;    /* floats */
    int ndims;
    int64_t dims[4];
} st_tensor_ref;
/* Every tensor in flat-buffer order (the tied head last).  *out is the
 * caller's (free). */
st_status st_model_tensors(const st_model *m, st_tensor_ref **out, int *count);

/* The training defaults the model carries, from its `train` line ("optimizer
 * adamw lr 1e-3 batch-size 12": shmtrain's flags without their dashes), or
 * NULL.  shmtrain applies them before its own flags, which override them. */
const char *st_model_recipe(const st_model *m);
size_t st_model_param_count(const st_model *m);
size_t st_model_buffer_count(const st_model *m);   /* batch-norm running statistics */
size_t st_model_input_size(const st_model *m);     /* C*H*W of one sample */
void st_model_input_shape(const st_model *m, int *c, int *h, int *w);  /* an image input's C, H, W */
void st_model_input(const st_model *m, st_shape *shape, st_dtype *dtype);  /* any input, per sample */
int st_model_classes(const st_model *m);            /* outputs of the last layer, per position */
int st_model_positions(const st_model *m);          /* positions scored per sample: T of a sequence, else 1 */
int st_model_vocab(const st_model *m);              /* a language model's vocabulary (embed), else 0 */

/* Which parameters are matrices (conv and linear weights, embedding
 * tables: 1) and which are biases and norms' scales and shifts (0): the
 * ones nanoGPT's AdamW decays.  `mask` holds st_model_param_count bytes. */
void st_model_decay_mask(const st_model *m, uint8_t *mask);

/* Layer, output shape, parameter count, total: like Keras' summary(). */
void st_model_summary(const st_model *m, FILE *f);

/* Flush denormal floats to zero (FTZ and DAZ) on this thread and every
 * OpenMP worker, or stop doing so.  Gradients that shrink towards zero late
 * in training otherwise turn into denormals and slow every kernel down by an
 * order of magnitude (torch.set_flush_denormal does the same).  Call it from
 * the thread that runs the network, before st_net_create.  Returns false where
 * the CPU has no such mode. */
bool st_nn_flush_denormals(bool on);

/* The oneDNN library in use, e.g. "3.7.2", the file it was loaded from
 * (the distribution's, or the prefix scripts/install-deps.sh made), and the
 * widest instruction set its kernels may use on this CPU, e.g.
 * "avx512_core_amx" (for reports, so results can be compared across
 * machines). */
void st_nn_onednn_version(char *buf, size_t len);
void st_nn_onednn_library(char *buf, size_t len);
const char *st_nn_onednn_isa(void);
/* Whether oneDNN computes `type` here at full speed: fp32 always; bf16 where
 * its ISA has native bf16 (AVX512-BF16 or AMX), or the tuning's
 * bf16_any_isa says to take whatever bf16 kernels oneDNN offers (its
 * reference ones on other CPUs: for checking the bf16 path there,
 * tests/bf16_any_isa.c; docs/engine.md); fp16 not (its kernels are not
 * wired).  `t` may be NULL: the defaults. */
bool st_nn_native(st_dtype type, const st_nn_tuning *t);
/* Whether oneDNN's ISA has AMX's bf16 tiles: where a bf16 net's attention
 * runs as oneDNN matmul primitives unless the tuning says otherwise. */
bool st_nn_amx_supported(void);

/* ------------------------------------------------------------ networks -- */

typedef enum st_backend {
    ST_BACKEND_ONEDNN = 0,   /* oneDNN primitives, activations in their layouts */
    ST_BACKEND_REFERENCE = 1 /* plain C on NCHW, for tests and as the definition */
} st_backend;

/* The one check of a precision request: fp32 anywhere; bf16 on the oneDNN
 * backend where st_nn_native(); bf16 and fp16 on the reference
 * backend, which defines them (it rounds values where the plan keeps them
 * low; docs/engine.md, "Low precision").  ST_ERR_INVALID with a message
 * (starting "precision ...") otherwise. */
st_status st_nn_precision_check(st_dtype precision, st_backend backend, const st_nn_tuning *t);

typedef struct st_net_config {
    int batch;               /* samples per forward pass (fixed) */
    st_backend backend;
    float *grad_buffer;      /* optional: param_count floats the caller owns (e.g.
                                the collectives' zero-copy region); else allocated */
    bool input_grad;         /* also compute d(loss)/d(input) (tests) */
    st_dtype precision;      /* ST_DTYPE_F32 (default), ST_DTYPE_BF16 or ST_DTYPE_F16 (the
                                reference backend only): mixed precision (docs/engine.md) */
    st_nn_tuning tuning;     /* the engine's choices (tuning.h); zero: as built */
    int head_chunk_rows;     /* the most rows of a tied head's logits held at once (tests: many
                                chunks at a small cost); 0: as many as 256 MB of logits hold */
    bool plan_only;          /* the plan alone: what each layer computes in and keeps
                                (st_net_describe_precision, st_net_lowp_layers), with no
                                parameters, gradients or activations behind it (gpt2's
                                --summary in a few MB); nothing runs on such a net */
} st_net_config;

st_status st_net_create(st_net **out, const st_model *m, const st_net_config *cfg);
void st_net_destroy(st_net *n);

/* The flat parameter and gradient spans (plain layouts), and the batch-norm
 * running statistics (mean then variance per layer).  Owned by the net (or
 * the caller, for a supplied gradient buffer). */
float *st_net_params(st_net *n, size_t *count);
float *st_net_grads(st_net *n, size_t *count);
float *st_net_buffers(st_net *n, size_t *count);

/* PyTorch's default initialisation (Kaiming-uniform weights and uniform
 * biases with bound 1/sqrt(fan_in); batch norm 1/0, running stats 0/1),
 * deterministic from `seed`. */
void st_net_init(st_net *n, uint64_t seed);

/* Training mode (batch statistics, dropout on) or evaluation mode. */
void st_net_set_training(st_net *n, bool training);

/* Seed of the dropout masks for the next forward pass (same seed, same masks). */
void st_net_set_dropout_seed(st_net *n, uint64_t seed);

/* Forward a batch of `batch` samples: plain NCHW floats, or int32 token
 * ids (batch x T) for an `input tokens` model (ids outside the vocabulary
 * are an error).  The net reads `input` in place (no copy), so it must stay
 * unchanged until the backward pass of this batch has run. */
st_status st_net_forward(st_net *n, const void *input);

/* Softmax cross-entropy of the last forward pass against class indices in
 * [0, classes), one per sample and position (batch x positions): mean loss
 * over them all, number of correct predictions, and the gradient of the
 * mean loss w.r.t. the logits, ready for st_net_backward().  Labels out of
 * range are an error. */
st_status st_net_loss(st_net *n, const int *labels, float *loss, int *correct);

/* The same for evaluation, without gradients: the summed loss and the
 * count correct of the batch's first `rows` rows (samples x positions; a
 * last batch may be short).  A model ending in a tied head is scored in
 * chunks of rows on the oneDNN backend, never holding the batch's whole
 * logits; st_net_output still gives them in full to whoever asks. */
st_status st_net_score(st_net *n, const int *labels, int rows, double *loss_sum, int *correct);

/* Backward from the loss: writes (overwrites) the gradient buffer. */
st_status st_net_backward(st_net *n);

/* Called during a backward pass each time a layer's parameter gradients
 * are final: `count` floats from `first` in the gradient buffer (layers
 * finish last first, so ranges come in decreasing order).  For starting
 * their all-reduce while the backward pass goes on.  NULL turns it off. */
typedef void (*st_grads_ready_fn)(void *ctx, size_t first, size_t count);
void st_net_on_grads_ready(st_net *n, st_grads_ready_fn fn, void *ctx);

/* Tests and tools: the last activation in plain layout (batch x outputs), and
 * backward from an arbitrary gradient of it instead of the loss. */
size_t st_net_output_size(const st_net *n);            /* floats per batch */
st_status st_net_output(st_net *n, float *out);
st_status st_net_backward_from(st_net *n, const float *d_output);
/* d(loss)/d(input) of the last backward, plain NCHW (needs input_grad). */
st_status st_net_input_grad(st_net *n, float *d_input);

/* The layers' output gradients: how many there are, in how many buffers,
 * and those buffers' bytes.  A model of sequence layers on the oneDNN
 * backend shares buffers among gradients never alive at the same time
 * (gpt2: 148 gradients in a handful); otherwise each has its own.  Zeros
 * from the reference backend, which keeps its own per layer. */
typedef struct st_net_gradient_memory {
    int gradients, buffers;
    size_t bytes;
    int conversion_buffers;   /* backward's converted copies (bf16 ones of fp32 gradients), shared */
    size_t conversion_bytes;
} st_net_gradient_memory;
void st_net_gradient_memory_get(const st_net *n, st_net_gradient_memory *m);

/* Which implementation each layer got, e.g. "conv:jit:avx512_core fused-relu". */
void st_net_describe(const st_net *n, FILE *f);

/* Time spent per layer kind since profiling was last enabled (which resets
 * it), plus "reorders" and "loss" (for benchmarks).  The optimizer is not
 * the net's: time it beside. */
#define ST_NET_PROFILE_MAX 32  /* layer kinds + "reorders" + "loss" fit (checked at build time) */
typedef struct st_net_profile {
    double seconds[ST_NET_PROFILE_MAX];
    const char *names[ST_NET_PROFILE_MAX];
    int kinds;
} st_net_profile;
void st_net_profile_enable(st_net *n, bool on);
void st_net_profile_get(const st_net *n, st_net_profile *p);

/* What the net moves between precisions and layouts, counted as it runs
 * (since the net was made or the counters last reset), on every path: the
 * reference kernels of SHMTRAIN_BF16_ANY_ISA count as native ones do, and
 * the reference backend counts the same edges in bf16 and fp16, so the
 * low-precision dataflow is checked on any machine. */
typedef struct st_net_counters {
    unsigned long long conversions;      /* an activation or its gradient converted between fp32 and the low precision */
    unsigned long long converted_bytes;  /* bytes those conversions read */
    unsigned long long weight_reorders;  /* a parameter or its gradient reordered or converted */
    unsigned long long activation_reorders; /* an activation or its gradient copied or relaid in its own
                                               precision (oneDNN's backend; the reference copies none) */
} st_net_counters;
void st_net_counters_get(const st_net *n, st_net_counters *c);
void st_net_counters_reset(st_net *n);

/* The low-precision copies (bf16, fp16) of the parameters a low-precision
 * net's kernels read, each in the layout its kernel wants (none in an fp32
 * net).  Hand them to the
 * optimizer (st_optim_set_copies): each step then writes them in the pass
 * that updates the fp32 masters, and no step converts a weight.  Any other
 * change to the parameters must go through a pointer st_net_params()
 * returned after the last forward pass: that call makes the next forward
 * pass write the copies again (a resume, a broadcast, a test's values).
 * Owned by the net. */
const st_weight_copy *st_net_weight_copies(const st_net *n, int *count);
/* Elements of the copies that differ from their master now, rounded to
 * the copy's type (tests: 0 after every optimizer step). */
size_t st_net_weight_copies_differing(const st_net *n);

/* What each layer computes in and keeps its output in, as built: the
 * request (st_net_config.precision), the layer table's rule and the
 * kernels this CPU has (or the reference's emulation) decide it, so a
 * bf16 net may run some layers in fp32.  `layer` counts the net's layers (st_net_layers) in order. */
int st_net_layers(const st_net *n);
st_dtype st_net_layer_compute(const st_net *n, int layer);
/* The layers computing in the net's low precision (bf16, fp16). */
int st_net_lowp_layers(const st_net *n);
/* One line per layer (kind, model line, compute and output types), then
 * the count of layers computing in the low precision (bf16 in an fp32 net). */
void st_net_describe_precision(const st_net *n, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
