#!/usr/bin/python3
# reads_reel.py: PyTorch reads a safetensors file that reel wrote (tests/torch_reference/
# write_reel_file.cpp) and checks it, the reverse of tests/test_torch_interop.cpp:
# * the header names the dtypes PyTorch's and the safetensors library's writers use (F32, BF16, F16),
#   with the shapes reel gave, and the data offsets tile the data without gaps;
# * torch's own f32 -> bf16 / f16 conversion of the sources gives reel's bits (NaN: both NaN, since
#   torch's NaN bits depend on its code path, see test_torch_interop.cpp);
# * torch's widening of reel's 16-bit values is bit for bit reel's widening (exact both ways).
# torch 1.13 has no safetensors module, so the file is parsed here by hand and each tensor made with
# torch.frombuffer, as safetensors.torch.load does.
#
#   /usr/bin/python3 tests/torch_reference/reads_reel.py FILE
# Exit 0: passed; 1: a check failed; 77: torch is not installed (CTest reports SKIPPED).
import json
import struct
import sys

try:
    import torch
except ImportError:
    print("reads_reel: torch is not installed (tools/setup_bench.sh installs it): skipped")
    sys.exit(77)

DTYPES = {"F32": (torch.float32, torch.int32), "BF16": (torch.bfloat16, torch.int16),
          "F16": (torch.float16, torch.int16)}
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED: " + what)


def load(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    check(n % 8 == 0, "header length %d is a multiple of 8 (the safetensors library pads it)" % n)
    header = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, bits = DTYPES[e["dtype"]]
        begin, end = e["data_offsets"]
        spans.append((begin, end))
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=bits).view(dtype).reshape(e["shape"])
        out[name] = t
    spans.sort()
    check(spans[0][0] == 0 and spans[-1][1] == len(data) and all(a[1] == b[0] for a, b in zip(spans, spans[1:])),
          "the data offsets tile the data")
    return header, out


def bits(t):
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def same_bits_or_both_nan(mine, theirs, what):
    nan = torch.isnan(theirs.float())
    check(bool(torch.equal(torch.isnan(mine.float()), nan)), what + ": NaN in the same places")
    equal = bits(mine) == bits(theirs)
    wrong = (~equal & ~nan).nonzero()
    check(wrong.numel() == 0, "%s: %d elements differ, first at %s" % (what, wrong.size(0), wrong[:1].tolist()))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: reads_reel.py FILE")
    header, t = load(sys.argv[1])
    expected = {"src": "F32", "randn_f32": "F32", "reel_bf16": "BF16", "reel_f16": "F16", "reel_bf16_f32": "F32",
                "reel_f16_f32": "F32", "randn_bf16": "BF16", "randn_f16": "F16"}
    check(sorted(t) == sorted(expected), "tensor names: %s" % sorted(t))
    for name, dtype in expected.items():
        check(header.get(name, {}).get("dtype") == dtype, "%s is %s" % (name, dtype))
    check(list(t["randn_bf16"].shape) == [4, 5, 3] and list(t["randn_f16"].shape) == [4, 5, 3], "3-D shapes")
    for tag, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
        same_bits_or_both_nan(t["reel_" + tag], t["src"].to(dtype), "torch's %s of src against reel's" % tag)
        same_bits_or_both_nan(t["randn_" + tag], t["randn_f32"].to(dtype), "torch's %s of randn against reel's" % tag)
        check(bool(torch.equal(bits(t["reel_" + tag].to(torch.float32)), bits(t["reel_%s_f32" % tag]))),
              "torch's widening of reel's %s is reel's, bit for bit" % tag)
    # Not vacuous: the sources hold NaNs, infinities, subnormals and values that round differently in the two types.
    src = t["src"]
    check(int(torch.isnan(src).sum()) == 5 and int(torch.isinf(src).sum()) >= 2, "src holds NaNs and infinities")
    check(int(((src != 0) & (src.abs() < 2.0 ** -126)).sum()) >= 4, "src holds f32 subnormals")
    print("reads_reel: %d tensors read, torch %s: %s" % (len(t), torch.__version__,
                                                         "FAILED" if failures else "all checks passed"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
