#!/usr/bin/python3
# make_fixtures.py: writes the PyTorch reference files that tests/test_torch_interop.cpp reads on
# every machine (CI has no torch), under tests/data/torch/:
#
#   dtypes.safetensors  16-bit tensors as PyTorch writes them: f32 sources holding every class of
#                       value (normals over many exponents, f32 and 16-bit subnormals, +-0, +-inf,
#                       NaNs, the largest finite values, the overflow thresholds, ties to even),
#                       torch's conversions of them to BF16 and F16 (torch's rounding, in the file's
#                       bits), torch's widening of those back to f32, and two 3-D 16-bit tensors.
#   gpt.safetensors     a tiny nn::GPT (the structure of bench/vs_torch/torch_steps.py, which matches
#                       reel's nn/gpt.cpp): its f32 weights under reel's parameter names ("param.NAME"),
#                       input ids and targets, and PyTorch's logits, loss and every parameter's
#                       gradient for one forward/backward in plain f32 ("*.f32") and under
#                       torch.autocast("cpu", dtype=torch.bfloat16) ("*.bf16").
#
# Regenerate (needs PyTorch: tools/setup_bench.sh installs Debian's python3-torch 1.13), then commit
# the two files; the test reads the config from the gpt file's __metadata__:
#   /usr/bin/python3 tests/torch_reference/make_fixtures.py [OUT_DIR]   # default tests/data/torch
# The output is deterministic for a given torch version and CPU (seeded; one thread). It also prints
# how far torch.autocast's step, and the same step with reel's autocast policy written out in casts,
# land from the f32 step and from each other: the numbers behind the test's bf16 tolerance.
#
# torch 1.13 has no safetensors module and Debian has no python3-safetensors, so the format is written
# here by hand as the safetensors library lays it out: an 8-byte little-endian header length, the JSON
# header padded with spaces to a multiple of 8, then each tensor's raw little-endian bytes.
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16", torch.float16: "F16",
               torch.int32: "I32", torch.int64: "I64"}
# The integer type of each dtype's width, to take a tensor's bits without numpy (numpy has no bfloat16).
BITS_TYPES = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu()
    assert sys.byteorder == "little", "safetensors data is little-endian"
    return t.view(BITS_TYPES[t.element_size()]).numpy().tobytes()


def save_safetensors(path, tensors, metadata):
    """tensors: an ordered list of (name, tensor); metadata: str -> str."""
    header = {"__metadata__": metadata}
    data = bytearray()
    for name, t in tensors:
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


# ---- dtypes.safetensors --------------------------------------------------------------------------

def f32_of_bits(bits):
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def special_values():
    """f32 bit patterns of every class of value, for both 16-bit types."""
    p = []
    p += [0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000]   # +-0, +-1, +-inf
    p += [0x7FC00000, 0xFFC00000, 0x7FC12345, 0x7FA00001, 0xFFE00001]  # NaNs: quiet, signed, payload, signalling
    # bf16: largest finite (0x7F7F), f32's largest (past bf16's overflow threshold: inf), just below
    # the threshold, the threshold itself (a tie from an odd fraction: to even, which is inf).
    p += [0x7F7F0000, 0x7F7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0xFF7F8000]
    # bf16 ties at 1: 1 + 2^-8 (to even: 1), 1 + 3*2^-8 (to even: up), just above a tie, just below.
    p += [0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF818000]
    # f32 subnormals (bf16 keeps them, down to 2^-133): the smallest, a bf16 tie to 0, a tie to 2,
    # the largest f32 subnormal (rounds up to the smallest normal), negatives; the smallest f32 normal.
    p += [0x00000001, 0x00008000, 0x00018000, 0x00010000, 0x007FFFFF, 0x80000001, 0x80018000, 0x00800000]
    f = [65504.0, 65519.99, 65520.0, -65520.0, 1e10, 65536.0,                       # f16: max, overflow tie, beyond
         2.0 ** -14, 1023 * 2.0 ** -24, 2.0 ** -24, -(2.0 ** -24),                   # f16: smallest normal, subnormals
         2.0 ** -25, 3 * 2.0 ** -25, 5 * 2.0 ** -25, 1e-8, -1e-8,                    # f16: subnormal ties, +-0
         1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, -(1 + 3 * 2.0 ** -11), 2048 + 1.0, 2048 + 3.0,  # f16 ties
         0.1, -0.1, 1.0 / 3, math.pi, 6e-5, -6.1e-5, 3e38, -3e-39]
    p += [struct.unpack("<I", struct.pack("<f", x))[0] for x in f]
    # nextafter(2^-25, 1): just above f16's tie to 0.
    p.append(struct.unpack("<I", struct.pack("<f", 2.0 ** -25))[0] + 1)
    return p


def dtypes_file(path):
    g = torch.Generator().manual_seed(27)
    special = torch.tensor(special_values(), dtype=torch.int64).to(torch.int32).view(torch.float32)
    # Normals over every exponent range the two types hold (and past f16's): sign * 2^e * (1 + frac).
    n = 128 - special.numel() % 8  # a whole number of rows of 8
    exps = torch.randint(-140, 128, (n,), generator=g).to(torch.float64)
    normal = (torch.randn(n, generator=g, dtype=torch.float64).sign() * torch.exp2(exps)
              * (1 + torch.rand(n, generator=g, dtype=torch.float64))).to(torch.float32)
    src = torch.cat([special, normal]).view(-1, 8)  # (rows, 8) f32
    bf16 = src.to(torch.bfloat16)
    f16 = src.to(torch.float16)
    tensors = [
        ("src", src),
        ("torch_bf16", bf16), ("torch_f16", f16),                               # torch's f32 -> 16 rounding
        ("torch_bf16_f32", bf16.to(torch.float32)), ("torch_f16_f32", f16.to(torch.float32)),  # and widening
        ("bf16_3d", torch.randn(2, 3, 5, generator=g).to(torch.bfloat16)),      # shapes other than 2-D
        ("f16_3d", (torch.randn(3, 1, 7, generator=g) * 100).to(torch.float16)),
    ]
    save_safetensors(path, tensors, {"format": "pt", "torch": torch.__version__,
                                     "made_by": "tests/torch_reference/make_fixtures.py"})


# ---- gpt.safetensors: nn::GPT's structure (bench/vs_torch/torch_steps.py's, configurable) ----------

VOCAB, BLOCK_SIZE, N_LAYER, N_HEAD, N_EMBD, BATCH, T = 64, 16, 2, 2, 32, 2, 16


class CausalSelfAttention(nn.Module):
    """nn::CausalSelfAttention: c_attn (C -> 3C), heads of C / n_head, causal softmax, c_proj."""

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.register_buffer("mask", torch.tril(torch.ones(BLOCK_SIZE, BLOCK_SIZE, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x):
        B, T_, C = x.shape
        D = C // N_HEAD
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T_, N_HEAD, D).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        att = att.masked_fill(~self.mask[:T_, :T_], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T_, C)
        return self.c_proj(y)


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.gelu = nn.GELU(approximate="tanh")  # reel's gelu is GPT-2's tanh approximation
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then + mlp(ln_2(.))."""

    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.mlp = FeedForward()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nn::GPT with reel's defaults: biases, LM head tied to wte, no dropout."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, N_EMBD)
        self.wpe = nn.Embedding(BLOCK_SIZE, N_EMBD)
        self.h = nn.ModuleList([Block() for _ in range(N_LAYER)])
        self.ln_f = nn.LayerNorm(N_EMBD, eps=1e-5)
        proj_std = 0.02 / math.sqrt(2 * N_LAYER)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, proj_std)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith(".bias"):
                # Not GPT-2's zeros (nor LayerNorm's ones below): values of their own, so that a bias
                # gradient or a bias misplaced in reel's layout shows in the comparison.
                nn.init.normal_(p, 0.0, 0.02)
            else:
                nn.init.normal_(p, 1.0, 0.1)  # LayerNorm weights

    def forward(self, ids):
        pos = torch.arange(ids.size(1), dtype=torch.long)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head, no bias: (B, T, V)


def step(model, ids, targets, autocast):
    """One forward/backward; the loss as a user writes it, inside the autocast region when there is one."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def reel_policy_step(params, ids, targets):
    """The same step with reel's autocast policy written out in explicit casts (not stored: it
    measures, for the tolerance of test_torch_interop's autocast case, how far that policy lands
    from torch.autocast's): GEMMs on bf16-rounded operands summed in f32, output rounded to bf16;
    the attention's scores and softmax in f32 from bf16 q, k, its probabilities rounded to bf16
    before P v; layer_norm and cross-entropy in f32; GELU in its input's type (bf16)."""
    bf = torch.bfloat16
    P = {n: p.detach().clone().requires_grad_() for n, p in params}

    def lin(x, w, b=None):
        y = x.to(bf).float() @ w.to(bf).float().t()
        return (y if b is None else y + b.to(bf).float()).to(bf)

    def ln(x, name):
        return F.layer_norm(x.float(), (N_EMBD,), P[name + ".weight"], P[name + ".bias"], 1e-5)

    B, T_ = ids.shape
    D = N_EMBD // N_HEAD
    mask = torch.tril(torch.ones(T_, T_, dtype=torch.bool))
    x = P["wte.weight"][ids] + P["wpe.weight"][torch.arange(T_)]
    for i in range(N_LAYER):
        h = "h.%d." % i
        qkv = lin(ln(x, h + "ln_1"), P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"])
        q, k, v = (t.view(B, T_, N_HEAD, D).transpose(1, 2) for t in qkv.split(N_EMBD, 2))
        scores = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(D)
        att = F.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        y = (att.to(bf).float() @ v.float()).to(bf).transpose(1, 2).reshape(B, T_, N_EMBD)
        x = x + lin(y, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"]).float()
        f = F.gelu(lin(ln(x, h + "ln_2"), P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + lin(f, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"]).float()
    logits = lin(ln(x, "ln_f"), P["wte.weight"])
    F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1)).backward()
    return logits.detach(), {n: p.grad for n, p in P.items()}


def gpt_file(path):
    torch.manual_seed(27)
    model = GPT().train()
    g = torch.Generator().manual_seed(28)
    ids = torch.randint(0, VOCAB, (BATCH, T), generator=g)
    targets = torch.randint(0, VOCAB, (BATCH, T), generator=g)
    tensors = [("param." + n, p.detach().clone()) for n, p in model.named_parameters()]
    tensors += [("ids", ids), ("targets", targets)]
    for tag, autocast in (("f32", False), ("bf16", True)):
        logits, loss, grads = step(model, ids, targets, autocast)
        tensors += [("logits." + tag, logits), ("loss." + tag, loss.reshape(1))]
        tensors += [("grad.%s.%s" % (tag, n), gr) for n, gr in grads.items()]
    config = {"vocab_size": VOCAB, "block_size": BLOCK_SIZE, "n_layer": N_LAYER, "n_head": N_HEAD,
              "n_embd": N_EMBD, "batch": BATCH, "seq": T}
    save_safetensors(path, tensors, dict({k: str(v) for k, v in config.items()},
                                         format="pt", torch=torch.__version__,
                                         made_by="tests/torch_reference/make_fixtures.py"))
    # Each run's distance from another, in bf16 unit roundoffs u = 2^-8 of each tensor's max |value|
    # (the measure of test_torch_interop's autocast case; printed, not stored).
    d = dict(tensors)
    policy_logits, policy_grads = reel_policy_step(model.named_parameters(), ids, targets)
    names = [n for n, _ in model.named_parameters()]

    def units(a, b):
        return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item() * 256

    print("in u of each tensor's scale: logits / worst gradient")
    print("  torch.autocast vs f32:          %.2f / %.2f" % (units(d["logits.bf16"], d["logits.f32"]),
          max(units(d["grad.bf16." + n], d["grad.f32." + n]) for n in names)))
    print("  reel's policy vs f32:           %.2f / %.2f" % (units(policy_logits, d["logits.f32"]),
          max(units(policy_grads[n], d["grad.f32." + n]) for n in names)))
    print("  reel's policy vs torch.autocast: %.2f / %.2f" % (units(policy_logits, d["logits.bf16"]),
          max(units(policy_grads[n], d["grad.bf16." + n]) for n in names)))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "..", "data", "torch")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)  # one summation order
    dtypes_file(os.path.join(out, "dtypes.safetensors"))
    gpt_file(os.path.join(out, "gpt.safetensors"))
    for name in ("dtypes.safetensors", "gpt.safetensors"):
        print("%s: %d bytes" % (name, os.path.getsize(os.path.join(out, name))))


if __name__ == "__main__":
    main()
