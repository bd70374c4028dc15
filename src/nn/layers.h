/* Internal: the layer table.  One row per layer kind names everything the
 * engine needs of it:
 *
 *   KIND      the node_kind is NODE_<KIND>
 *   keyword   its word in the model text, its name in summaries and profiles
 *   parse     model_lines.c (declared in model_parser.h, dispatched by
 *             model.c): reads the line's arguments, infers the output
 *             shape, lays out its parameters in the flat buffer
 *   init      net.c: fills its parameters (and buffers) from the seed
 *   ref_*     ref_backend.c: the reference (plain C) forward and backward,
 *             over the kernels of ref.c, and the scratch they need
 *   onednn    onednn_*.c: builds its primitives and ops for the oneDNN backend
 *   lowp      precision.c: what a layer of this kind does in a net of a low
 *             precision (bf16, fp16), for both backends: computes in it
 *             (lowp_computes; lowp_attention where its kernels have the
 *             instruction), computes in fp32 and writes it for consumers
 *             that take it (lowp_writes), carries whatever type its input
 *             has (lowp_carries), or stays fp32 (lowp_never); each rule is
 *             asked with the precision and answers per backend, so fp16 is
 *             an answer per rule, not a column
 *   summary   model_info.c: the layer's line in --summary
 *   flops     model_flops.c: its products' floating-point operations per
 *             sample (0: a layer that only moves data), for the roofline
 *
 * Each of those files expands the table with the columns it owns, so the
 * enum, the parser's keywords and every backend's dispatch come from these
 * rows: a row whose functions a file lacks does not compile (a kind cannot
 * be half added), and adding a kind is one row here plus its functions.
 * tests/CMakeLists.txt checks that an incomplete row fails to build.
 */
#ifndef SHMTRAIN_NN_LAYERS_H
#define SHMTRAIN_NN_LAYERS_H

/* clang-format off */
#define NN_LAYER_TABLE_ROWS(X)                                                                                                                                                              \
  /* KIND        keyword       parse               init           ref_scratch        ref_forward           ref_backward           onednn               lowp            summary            flops            */  \
  X(INPUT,      "input",      parse_input,        init_nothing,  scratch_none,      input_ref_forward,    input_ref_backward,    dn_build_input,      lowp_never,     summary_input,     flops_none       )     \
  X(CONV,       "conv",       parse_conv,         init_kaiming,  scratch_none,      conv_ref_forward,     conv_ref_backward,     dn_build_conv,       lowp_computes,  summary_conv,      flops_weighted   )     \
  X(LINEAR,     "linear",     parse_linear,       init_linear,   scratch_none,      linear_ref_forward,   linear_ref_backward,   dn_build_linear,     lowp_computes,  summary_linear,    flops_weighted   )     \
  X(RELU,       "relu",       parse_elementwise,  init_nothing,  scratch_none,      relu_ref_forward,     relu_ref_backward,     dn_build_relu,       lowp_carries,   summary_keyword,   flops_none       )     \
  X(MAXPOOL,    "maxpool",    parse_pool,         init_nothing,  scratch_argmax,    maxpool_ref_forward,  maxpool_ref_backward,  dn_build_pool,       lowp_carries,   summary_pool,      flops_none       )     \
  X(AVGPOOL,    "avgpool",    parse_pool,         init_nothing,  scratch_none,      avgpool_ref_forward,  avgpool_ref_backward,  dn_build_pool,       lowp_carries,   summary_pool,      flops_none       )     \
  X(BATCHNORM,  "batchnorm",  parse_batchnorm,    init_bn,       scratch_bn_stats,  bn_ref_forward,       bn_ref_backward,       dn_build_bn,         lowp_carries,   summary_keyword,   flops_none       )     \
  X(DROPOUT,    "dropout",    parse_dropout,      init_nothing,  scratch_mask,      dropout_ref_forward,  dropout_ref_backward,  dn_build_dropout,    lowp_carries,   summary_dropout,   flops_none       )     \
  X(FLATTEN,    "flatten",    parse_flatten,      init_nothing,  scratch_none,      flatten_ref_forward,  flatten_ref_backward,  dn_build_flatten,    lowp_carries,   summary_keyword,   flops_none       )     \
  X(ADD,        "add",        parse_add,          init_nothing,  scratch_none,      add_ref_forward,      add_ref_backward,      dn_build_add,        lowp_carries,   summary_add,       flops_none       )     \
  X(EMBED,      "embed",      parse_embed,        init_embed,    scratch_none,      embed_ref_forward,    embed_ref_backward,    dn_build_embed,      lowp_never,     summary_embed,     flops_none       )     \
  X(LAYERNORM,  "layernorm",  parse_layernorm,    init_ln,       scratch_ln_stats,  ln_ref_forward,       ln_ref_backward,       dn_build_ln,         lowp_writes,    summary_keyword,   flops_none       )     \
  X(ATTENTION,  "attention",  parse_attention,    init_nothing,  scratch_att,       att_ref_forward,      att_ref_backward,      dn_build_attention,  lowp_attention, summary_attention, flops_attention  )     \
  X(GELU,       "gelu",       parse_elementwise,  init_nothing,  scratch_none,      gelu_ref_forward,     gelu_ref_backward,     dn_build_gelu,       lowp_carries,   summary_keyword,   flops_none       )     \
  X(HEAD,       "head",       parse_head,         init_nothing,  scratch_none,      head_ref_forward,     head_ref_backward,     dn_build_head,       lowp_computes,  summary_head,      flops_head       )
/* clang-format on */

/* A test build appends a row whose functions exist nowhere: it must fail. */
#ifdef NN_LAYER_TABLE_TEST_INCOMPLETE_ROW
#define NN_LAYER_TABLE(X)                                                                                  \
    NN_LAYER_TABLE_ROWS(X)                                                                                 \
    X(UNFINISHED, "unfinished", parse_unfinished, init_unfinished, scratch_unfinished,                    \
      unfinished_ref_forward, unfinished_ref_backward, dn_build_unfinished, lowp_unfinished, summary_unfinished, \
      flops_unfinished)
#else
#define NN_LAYER_TABLE(X) NN_LAYER_TABLE_ROWS(X)
#endif

#endif
