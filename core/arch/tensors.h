/* The one table of the tensors weft reads from a GGUF: an X-macro of
 * (id, GGUF name, scope, kind). The loader, weight placement, weight_prepare,
 * bytes_per_token, the "every tensor is used" check and `weft gen` all read
 * it; a family (core/arch/family.h) says which ids it uses and their shapes.
 * A layer tensor's GGUF name is "blk.<layer>." followed by its name here.
 *
 * Kinds: MATRIX — a weight matrix [ne0 = input, ne1 = output rows], any
 * supported type, read once per token (bytes_per_token) and offered to the
 * backend's weight_prepare (MLA's per-head attn_k_b / attn_v_b are 3-D:
 * ne2 = heads, each token reads them all); EXPERTS — a mixture's n_expert matrices in one 3-D
 * tensor [ne0 = input, ne1 = output rows, ne2 = experts] (a token reads
 * n_expert_used of them; MATMUL_ID's weights); NORM — a norm's F32 weight
 * vector; BIAS — an F32 vector added to a MATRIX's output; VECTOR — other F32
 * data. */
#ifndef WEFT_ARCH_TENSORS_H
#define WEFT_ARCH_TENSORS_H

#include <stddef.h>
#include <stdint.h>

/*      id              GGUF name                     scope   kind   */
#define WEFT_TENSOR_TABLE(X)                                             \
    X(TOKEN_EMBD,     "token_embd.weight",           GLOBAL, MATRIX)   \
    X(OUTPUT_NORM,    "output_norm.weight",          GLOBAL, NORM)     \
    X(OUTPUT,         "output.weight",               GLOBAL, MATRIX)   \
    X(ROPE_FREQS,     "rope_freqs.weight",           GLOBAL, VECTOR)   \
    X(ROPE_LONG,      "rope_factors_long.weight",    GLOBAL, VECTOR)   \
    X(ROPE_SHORT,     "rope_factors_short.weight",   GLOBAL, VECTOR)   \
    X(ATTN_NORM,      "attn_norm.weight",            LAYER,  NORM)     \
    X(ATTN_Q,         "attn_q.weight",               LAYER,  MATRIX)   \
    X(ATTN_K,         "attn_k.weight",               LAYER,  MATRIX)   \
    X(ATTN_V,         "attn_v.weight",               LAYER,  MATRIX)   \
    X(ATTN_OUT,       "attn_output.weight",          LAYER,  MATRIX)   \
    X(FFN_NORM,       "ffn_norm.weight",             LAYER,  NORM)     \
    X(FFN_GATE,       "ffn_gate.weight",             LAYER,  MATRIX)   \
    X(FFN_UP,         "ffn_up.weight",               LAYER,  MATRIX)   \
    X(FFN_DOWN,       "ffn_down.weight",             LAYER,  MATRIX)   \
    X(ATTN_QKV,       "attn_qkv.weight",             LAYER,  MATRIX)   \
    X(ATTN_Q_B,       "attn_q.bias",                 LAYER,  BIAS)     \
    X(ATTN_K_B,       "attn_k.bias",                 LAYER,  BIAS)     \
    X(ATTN_V_B,       "attn_v.bias",                 LAYER,  BIAS)     \
    X(ATTN_Q_NORM,    "attn_q_norm.weight",          LAYER,  NORM)     \
    X(ATTN_K_NORM,    "attn_k_norm.weight",          LAYER,  NORM)     \
    X(ATTN_POST_NORM, "post_attention_norm.weight",  LAYER,  NORM)     \
    X(FFN_POST_NORM,  "post_ffw_norm.weight",        LAYER,  NORM)     \
    X(FFN_GATE_INP,   "ffn_gate_inp.weight",         LAYER,  MATRIX)   \
    X(FFN_GATE_EXPS,  "ffn_gate_exps.weight",        LAYER,  EXPERTS)  \
    X(FFN_UP_EXPS,    "ffn_up_exps.weight",          LAYER,  EXPERTS)  \
    X(FFN_DOWN_EXPS,  "ffn_down_exps.weight",        LAYER,  EXPERTS)  \
    X(ATTN_OUT_B,     "attn_output.bias",            LAYER,  BIAS)     \
    X(ATTN_SINKS,     "attn_sinks.weight",           LAYER,  VECTOR)   \
    X(FFN_GATE_INP_B, "ffn_gate_inp.bias",           LAYER,  BIAS)     \
    X(FFN_GATE_EXPS_B, "ffn_gate_exps.bias",         LAYER,  BIAS)     \
    X(FFN_UP_EXPS_B,  "ffn_up_exps.bias",            LAYER,  BIAS)     \
    X(FFN_DOWN_EXPS_B, "ffn_down_exps.bias",         LAYER,  BIAS)     \
    X(EXP_PROBS_B,    "exp_probs_b.bias",            LAYER,  BIAS)     \
    X(FFN_GATE_SHEXP, "ffn_gate_shexp.weight",       LAYER,  MATRIX)   \
    X(FFN_UP_SHEXP,   "ffn_up_shexp.weight",         LAYER,  MATRIX)   \
    X(FFN_DOWN_SHEXP, "ffn_down_shexp.weight",       LAYER,  MATRIX)   \
    X(ATTN_Q_A,       "attn_q_a.weight",             LAYER,  MATRIX)   \
    X(ATTN_Q_A_NORM,  "attn_q_a_norm.weight",        LAYER,  NORM)     \
    X(ATTN_Q_UP,      "attn_q_b.weight",             LAYER,  MATRIX)   \
    X(ATTN_KV_A_MQA,  "attn_kv_a_mqa.weight",        LAYER,  MATRIX)   \
    X(ATTN_KV_A_NORM, "attn_kv_a_norm.weight",       LAYER,  NORM)     \
    X(ATTN_K_UP,      "attn_k_b.weight",             LAYER,  MATRIX)   \
    X(ATTN_V_UP,      "attn_v_b.weight",             LAYER,  MATRIX)   \
    X(ATTN_GATE,      "attn_gate.weight",            LAYER,  MATRIX)   \
    X(SSM_CONV1D,     "ssm_conv1d.weight",           LAYER,  VECTOR)   \
    X(SSM_DT,         "ssm_dt.bias",                 LAYER,  VECTOR)   \
    X(SSM_A,          "ssm_a",                       LAYER,  VECTOR)   \
    X(SSM_BETA,       "ssm_beta.weight",             LAYER,  MATRIX)   \
    X(SSM_ALPHA,      "ssm_alpha.weight",            LAYER,  MATRIX)   \
    X(SSM_NORM,       "ssm_norm.weight",             LAYER,  NORM)     \
    X(SSM_OUT,        "ssm_out.weight",              LAYER,  MATRIX)   \
    X(FFN_GATE_INP_SHEXP, "ffn_gate_inp_shexp.weight", LAYER, VECTOR)   \
    X(SSM_BA,         "ssm_ba.weight",               LAYER,  MATRIX)   \
    X(PLE_TOKEN_EMBD, "per_layer_token_embd.weight", GLOBAL, MATRIX)   \
    X(PLE_MODEL_PROJ, "per_layer_model_proj.weight", GLOBAL, MATRIX)   \
    X(PLE_PROJ_NORM,  "per_layer_proj_norm.weight",  GLOBAL, NORM)     \
    X(PLE_INP_GATE,   "inp_gate.weight",             LAYER,  MATRIX)   \
    X(PLE_PROJ,       "proj.weight",                 LAYER,  MATRIX)   \
    X(PLE_POST_NORM,  "post_norm.weight",            LAYER,  NORM)     \
    X(LAYER_OUT_SCALE, "layer_output_scale.weight",  LAYER,  VECTOR)   \
    X(FFN_GATE_INP_S, "ffn_gate_inp.scale",          LAYER,  VECTOR)   \
    X(FFN_PRE_NORM_2, "pre_ffw_norm_2.weight",       LAYER,  NORM)     \
    X(FFN_POST_NORM_1, "post_ffw_norm_1.weight",     LAYER,  NORM)     \
    X(FFN_POST_NORM_2, "post_ffw_norm_2.weight",     LAYER,  NORM)     \
    X(FFN_GATE_UP_EXPS, "ffn_gate_up_exps.weight",   LAYER,  EXPERTS)  \
    X(FFN_DOWN_EXPS_S, "ffn_down_exps.scale",        LAYER,  VECTOR)

enum weft_tensor_id {
#define WEFT_T_ENUM_(id, name, scope, kind) WEFT_T_##id,
    WEFT_TENSOR_TABLE(WEFT_T_ENUM_)
#undef WEFT_T_ENUM_
    WEFT_T_COUNT_
};

enum weft_tensor_scope { WEFT_TS_GLOBAL, WEFT_TS_LAYER };
enum weft_tensor_kind { WEFT_TK_MATRIX, WEFT_TK_NORM, WEFT_TK_BIAS, WEFT_TK_VECTOR, WEFT_TK_EXPERTS };

struct weft_tensor_info {
    const char *name;
    enum weft_tensor_scope scope;
    enum weft_tensor_kind kind;
};

const struct weft_tensor_info *weft_tensor_info(enum weft_tensor_id id);

/* Which table entry a GGUF tensor name is: WEFT_T_COUNT_ when none; *layer
 * gets the layer of a "blk.N." name (UINT32_MAX for a global one). */
enum weft_tensor_id weft_tensor_lookup(const char *gguf_name, uint32_t *layer);

/* The GGUF name of id (at layer l for a layer tensor) into out. */
void weft_tensor_name(enum weft_tensor_id id, uint32_t l, char *out, size_t cap);

#endif
