#!/usr/bin/python3
# torch_steps.py: PyTorch's half of bench/vs_torch. Runs the same training step as reel_steps.cpp
# (same model structure, shapes, loss, optimizer and parameter count) on synthetic data, times
# each step and prints one machine-readable line for run.sh.
#
#   /usr/bin/python3 bench/vs_torch/torch_steps.py WORKLOAD STEPS [--warmup N] [--threads N]
#   /usr/bin/python3 bench/vs_torch/torch_steps.py --blas     # which BLAS torch runs on, and exit
#
# Written for Debian's python3-torch (1.13), on the BLAS that tools/setup_bench.sh selects
# (OpenBLAS, OpenMP build). torch 1.13 has no scaled_dot_product_attention (it came in 2.0), so
# the attention is the explicit one: q k^T / sqrt(d), causal mask, softmax, times v.
#
# PyTorch as its users get it on CPU: the optimizers' default (single-tensor) implementations, and
# zero_grad(set_to_none=True), 2.0's default and the faster choice (no pass zeroing the gradients;
# reel zeroes its gradient buffers in place instead and keeps them allocated).
#
# gpt_bf16 is gpt_tied in mixed precision, PyTorch's CPU recipe: the forward and the loss inside
# torch.autocast("cpu", dtype=torch.bfloat16) (f32 parameters; the linears and matmuls run in bf16),
# the backward, the clipping and the AdamW step outside it; no GradScaler (bf16 needs none).
#
# Output, one line: vs_torch {"framework": "torch", "workload": ..., "params": ..., "median_ms": ...,
# "ms": [per step], "loss": the last step's, "blas": path}.
import argparse
import contextlib
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PIXELS, CLASSES = 784, 10
# examples/char_gpt's defaults (vocabulary: Debian's fortunes corpus, 114 byte values).
VOCAB, BLOCK_SIZE, GPT_BATCH = 114, 64, 32
N_LAYER, N_HEAD, N_EMBD = 3, 4, 96


def mapped_blas():
    """The BLAS libraries mapped into this process after a matmul ran: what torch really calls."""
    a = torch.randn(64, 64)
    (a @ a).sum().item()
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in path or "blis" in path:
                paths.add(path)
    return sorted(paths)


def check_blas():
    """The OpenBLAS library torch runs on; exits 3 when the reference BLAS (or no OpenBLAS) is in
    use: the reference implementation is tens of times slower and would make the comparison
    meaningless."""
    paths = mapped_blas()
    openblas = [p for p in paths if "openblas" in p]
    if not openblas:
        sys.stderr.write("torch_steps: torch is not running on OpenBLAS (mapped: %s); run tools/setup_bench.sh\n"
                         % (", ".join(paths) or "no BLAS library"))
        sys.exit(3)
    return openblas[0]


# ---- the models ---------------------------------------------------------------------------

def mlp():
    """nn::MLP({784, 512, 512, 10}): Linear, ReLU, Linear, ReLU, Linear (no dropout)."""
    return nn.Sequential(nn.Linear(PIXELS, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, CLASSES))


class CausalSelfAttention(nn.Module):
    """nn::CausalSelfAttention: c_attn (C -> 3C), heads of C / n_head, causal softmax, c_proj."""

    def __init__(self, dropout, bias):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD, bias=bias)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD, bias=bias)
        self.resid_dropout = nn.Dropout(dropout)  # reel has no dropout on the probabilities
        self.register_buffer("mask", torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE, dtype=torch.bool)))

    def forward(self, x):
        B, T, C = x.shape
        D = C // N_HEAD
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, N_HEAD, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, dropout, bias):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD, bias=bias)
        self.gelu = nn.GELU(approximate="tanh")  # reel's gelu is GPT-2's tanh approximation
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self, dropout, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=1e-5)  # affine weight and bias, as reel's with bias
        self.attn = CausalSelfAttention(dropout, bias)
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.mlp = FeedForward(dropout, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nn::GPT: token + position embeddings, blocks, final LayerNorm, LM head without bias,
    optionally tied to the token embedding; GPT-2's initialisation."""

    def __init__(self, tied, dropout=0.0, bias=True):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(BLOCK_SIZE, N_EMBD)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([Block(dropout, bias) for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.lm_head = None if tied else nn.Linear(N_EMBD, VOCAB, bias=False)
        proj_std = 0.02 / math.sqrt(2 * N_LAYER)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, ids):
        T = ids.size(1)
        pos = torch.arange(T, dtype=torch.long, device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x) if self.lm_head is not None else F.linear(x, self.wte.weight)


def chain():
    """64 x [Linear(1024) + GELU] (reel's nn::GELU: the tanh approximation)."""
    layers = []
    for _ in range(64):
        layers += [nn.Linear(1024, 1024), nn.GELU(approximate="tanh")]
    return nn.Sequential(*layers)


# ---- the steps ----------------------------------------------------------------------------

def mlp_step(micro, size):
    """SGD (momentum 0.9) over `micro` micro-batches of `size`: the window's loss is the SUM over
    its samples divided by the samples in the window, as reel's Accumulator computes it."""
    model = mlp().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [(torch.randn(size, PIXELS), torch.randint(0, CLASSES, (size,))) for _ in range(micro)]
    total = micro * size

    def step():
        opt.zero_grad(set_to_none=True)
        window_loss = 0.0
        for x, y in batches:
            loss = F.cross_entropy(model(x), y, reduction="sum") / total
            loss.backward()
            window_loss += loss.item()  # reel's Accumulator reads each micro-batch's loss too
        opt.step()
        return window_loss

    return model, step


def gpt_step(tied, bf16=False):
    """char_gpt's step: AdamW (lr 4e-3, weight decay 0.01), gradients clipped at norm 1.0; with
    `bf16` the forward and the loss under CPU autocast to bfloat16 (the rest outside it)."""
    model = GPT(tied).train()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=4e-3, weight_decay=0.01)
    x = torch.randint(0, VOCAB, (GPT_BATCH, BLOCK_SIZE))
    y = torch.randint(0, VOCAB, (GPT_BATCH, BLOCK_SIZE))

    def amp():
        return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    def step():
        opt.zero_grad(set_to_none=True)
        with amp():
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), reduction="sum") / y.numel()
        loss.backward()
        value = loss.item()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return value

    return model, step


def chain_step():
    """Forward + backward, no optimizer: the gradients add into .grad step after step, as in reel."""
    model = chain().train()
    x = torch.randn(256, 1024)

    def step():
        model(x).sum().backward()
        return None

    return model, step


WORKLOADS = {
    "mlp128": lambda: mlp_step(1, 128),
    "mlp512": lambda: mlp_step(1, 512),
    "accum8x16": lambda: mlp_step(8, 16),
    "gpt_tied": lambda: gpt_step(True),
    "gpt_untied": lambda: gpt_step(False),
    "gpt_bf16": lambda: gpt_step(True, bf16=True),
    "chain": chain_step,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", nargs="?", choices=sorted(WORKLOADS))
    parser.add_argument("steps", nargs="?", type=int)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blas", action="store_true", help="print the BLAS library torch runs on and exit")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)  # ATen's OpenMP pool, which OpenBLAS's OpenMP build shares
    blas = check_blas()
    if a.blas:
        print(blas)
        return
    if a.workload is None or a.steps is None or a.steps < 1:
        parser.error("give a WORKLOAD and a positive number of STEPS")
    torch.manual_seed(1)
    model, step = WORKLOADS[a.workload]()
    params = sum(p.numel() for p in model.parameters())  # a tied weight is counted once
    for _ in range(a.warmup):
        step()
    ms = []
    loss = None
    for _ in range(a.steps):
        start = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - start) * 1e3)
    median = sorted(ms)[len(ms) // 2]  # the upper median, as reel's bench::median
    print("vs_torch " + json.dumps({
        "framework": "torch", "workload": a.workload, "threads": torch.get_num_threads(), "params": params,
        "warmup": a.warmup, "steps": a.steps, "median_ms": round(median, 3), "ms": [round(t, 3) for t in ms],
        "loss": loss, "blas": blas, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
