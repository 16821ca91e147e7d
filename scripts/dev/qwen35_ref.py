#!/usr/bin/env python3
# A numpy model of the qwen35 forward pass (Qwen3.5: Gated DeltaNet layers, then a gated
# full-attention layer every full_attention_interval), written while planning issue 38 from
# reading llama.cpp (the oracle): docs/hybrid.md says what each step is. Teacher-forced along
# ../shared/golden/arch-qwen35-greedy.json it stays within 0.014 of every top-5 logprob, every
# greedy id equal. A development aid, not a test: weft's own forward is what the goldens judge.
#   pip install numpy gguf
#   python3 scripts/dev/qwen35_ref.py [rms|l2] [SHARED_DIR]   (l2: ggml's l2_norm for q and k)
import json
import os
import sys

import numpy as np

import gguf

f32, f16 = np.float32, np.float16
SHARED = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), '..', '..', '..', 'shared')
R = gguf.GGUFReader(os.path.join(SHARED, 'models', 'arch', 'qwen35-F16.gguf'))
W = {t.name: np.array(t.data).astype(f32) for t in R.tensors}   # numpy shape = reversed ggml ne => [out, in]
EPS = f32(1e-6)
n_embd, n_layer = 128, 4
H, HKV, HD, NROT = 4, 2, 64, 16
S, HK, HV = 32, 2, 4             # d_state, group_count (k heads), time_step_rank (v heads)
KCONV = 4
L2MODE = sys.argv[1] if len(sys.argv) > 1 else 'rms'

def r16(x): return x.astype(f16).astype(f32)          # activation rounding before F16 matmul
def mm(w, x): return (r16(x).astype(np.float64) @ w.T.astype(np.float64)).astype(f32)   # x [T,in], w [out,in]
def rms_norm(x, eps=EPS):
    ss = (x.astype(f32)**2).astype(np.float64).sum(-1, keepdims=True)
    mean = (ss / x.shape[-1]).astype(f32)
    return x * (f32(1) / np.sqrt(mean + eps)).astype(f32)
def silu(x): return x / (f32(1) + np.exp(-x))
def sigmoid(x): return f32(1) / (f32(1) + np.exp(-x))
def softplus(x): return np.where(x > 20, x, np.log1p(np.exp(x))).astype(f32)
def l2(x):
    n = x.shape[-1]
    if L2MODE == 'rms':
        return rms_norm(x, f32(EPS / n)) * f32(1 / np.sqrt(f32(n)))
    ss = (x**2).astype(np.float64).sum(-1, keepdims=True)
    return x * (f32(1) / np.maximum(np.sqrt(ss.astype(f32)), EPS))

def deltanet(il, x):           # x [T,128] (already attn_norm'ed)
    p = f'blk.{il}.'
    T = x.shape[0]
    qkv = mm(W[p+'attn_qkv.weight'], x)            # [T,256]
    z   = mm(W[p+'attn_gate.weight'], x)           # [T,128]
    beta = sigmoid(mm(W[p+'ssm_beta.weight'], x))  # [T,4]
    alpha = mm(W[p+'ssm_alpha.weight'], x)         # [T,4]
    g = softplus(alpha + W[p+'ssm_dt.bias']) * W[p+'ssm_a']   # [T,4], <=0
    cw = W[p+'ssm_conv1d.weight']                   # [256,4]
    xin = np.concatenate([np.zeros((KCONV-1, 256), f32), qkv], 0)   # zero conv state at seq start
    conv = np.stack([(xin[t:t+KCONV] * cw.T).sum(0) for t in range(T)]).astype(f32)
    conv = silu(conv)
    q = l2(conv[:, 0:64].reshape(T, HK, S))
    k = l2(conv[:, 64:128].reshape(T, HK, S))
    v = conv[:, 128:256].reshape(T, HV, S)
    St = np.zeros((HV, S, S), f32)   # St[h][j][i] = S[i][j]  (i: key dim, j: value dim)
    o = np.zeros((T, HV, S), f32)
    scale = f32(1 / np.sqrt(f32(S)))
    for t in range(T):
        for h in range(HV):
            kh = h % HK                                     # TILED mapping
            M = St[h] * np.exp(g[t, h])
            d = (v[t, h] - M @ k[t, kh]) * beta[t, h]
            M = M + np.outer(d, k[t, kh])
            St[h] = M
            o[t, h] = (M @ q[t, kh]) * scale
    on = rms_norm(o) * W[p+'ssm_norm.weight']
    on = on * silu(z.reshape(T, HV, S))
    return mm(W[p+'ssm_out.weight'], on.reshape(T, 128))

def rope_neox(x, pos):   # x [T, nh, 64], rotate first 16 dims in NEOX pairs (i, i+8)
    theta_scale = f32(np.float32(1e7) ** f32(-2.0 / NROT))
    out = x.copy()
    for t in range(x.shape[0]):
        th = f32(pos[t])
        for i in range(NROT // 2):
            c, s = f32(np.cos(th)), f32(np.sin(th))
            x0, x1 = x[t, :, i], x[t, :, i + NROT // 2]
            out[t, :, i] = x0 * c - x1 * s
            out[t, :, i + NROT // 2] = x0 * s + x1 * c
            th = f32(th * theta_scale)
    return out

def attn(il, x):
    p = f'blk.{il}.'
    T = x.shape[0]
    qf = mm(W[p+'attn_q.weight'], x).reshape(T, H, 2 * HD)
    q, gate = qf[:, :, :HD], qf[:, :, HD:].reshape(T, H * HD)
    k = mm(W[p+'attn_k.weight'], x).reshape(T, HKV, HD)
    v = mm(W[p+'attn_v.weight'], x).reshape(T, HKV, HD)
    q = rms_norm(q) * W[p+'attn_q_norm.weight']
    k = rms_norm(k) * W[p+'attn_k_norm.weight']
    pos = np.arange(T)
    q = rope_neox(q, pos); k = rope_neox(k, pos)
    k = r16(k); v = r16(v)                       # F16 KV cache
    out = np.zeros((T, H, HD), f32)
    for h in range(H):
        kv = h // (H // HKV)                     # GQA: q head h -> kv head h/2
        s = (q[:, h].astype(np.float64) @ k[:, kv].T.astype(np.float64)) * 0.125
        s[np.triu_indices(T, 1)] = -np.inf
        s = np.exp(s - s.max(-1, keepdims=True)); s /= s.sum(-1, keepdims=True)
        out[:, h] = (s @ v[:, kv].astype(np.float64)).astype(f32)
    out = out.reshape(T, H * HD) * sigmoid(gate)
    return mm(W[p+'attn_output.weight'], out)

def forward(ids):
    x = W['token_embd.weight'][ids]              # [T,128]
    for il in range(n_layer):
        p = f'blk.{il}.'
        h = rms_norm(x) * W[p+'attn_norm.weight']
        a = deltanet(il, h) if (il + 1) % 4 != 0 else attn(il, h)
        x = x + a
        h = rms_norm(x) * W[p+'post_attention_norm.weight']
        ff = mm(W[p+'ffn_down.weight'], silu(mm(W[p+'ffn_gate.weight'], h)) * mm(W[p+'ffn_up.weight'], h))
        x = x + ff
    x = rms_norm(x) * W['output_norm.weight']
    return mm(W['token_embd.weight'], x)         # tied

G = json.load(open(os.path.join(SHARED, 'golden', 'arch-qwen35-greedy.json')))
worst = 0
for case in G['cases_by_type']['F16']:
    P, Gen = case['prompt_ids'], case['generated_ids']
    logits = forward(np.array(P + Gen)).astype(np.float64)
    lp = logits - logits.max(-1, keepdims=True); lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    cw, mism = 0, 0
    for st, ref in enumerate(case['top5_logprobs_per_step']):
        row = lp[len(P) - 1 + st]
        if int(row.argmax()) != ref['id']: mism += 1
        for tid, l in ref['top']:
            cw = max(cw, abs(row[tid] - l))
    worst = max(worst, cw)
    print(f"{case['prompt'][:30]!r:34} T={len(P)+len(Gen)} max|dlogprob|={cw:.4f} argmax_mismatch={mism}")
print('worst', worst)
