#!/usr/bin/env python3
"""A small Llama-architecture decoder run on nibble, end to end:

  1. builds the model (transformers' LlamaForCausalLM where transformers is installed, else the
     minimal PyTorch Llama below, with the same parameter names) and saves its fp16 weights as a
     Hugging Face directory (config.json + model.safetensors);
  2. quantizes it with `nibble quantize --from` (GPTQ, 4-bit, G128 by default);
  3. loads the fp16 weights, swaps every projection for a nibble.torch.QuantLinear from the
     quantized checkpoint (nibble.torch.replace_linears) and generates tokens greedily;
  4. checks every step against the same model in plain PyTorch whose projections hold nibble's
     reference dequantization of the checkpoint: the logits must agree within the activation
     dtype's rounding, and each token nibble picks must be the reference's top token or tie with it.

    llama_decoder.py [--device cpu|cuda] [--tokens N] [--work DIR] [--nibble PATH]

Needs the nibble package importable (PYTHONPATH=<build>/python, or installed), its plugins found
(NIBBLE_PLUGIN_PATH, or installed), and the nibble command line (--nibble, $NIBBLE_CLI or PATH).
Exit status 0 when every step agrees.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

import nibble
import nibble.torch as nt
from nibble import safetensors

CONFIG = dict(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0)
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


# ---- a minimal Llama in plain PyTorch (what transformers' LlamaForCausalLM computes) -------------

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv, self.d = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
        self.theta = c["rope_theta"]
        self.q_proj = nn.Linear(c["hidden_size"], self.h * self.d, bias=False)
        self.k_proj = nn.Linear(c["hidden_size"], self.kv * self.d, bias=False)
        self.v_proj = nn.Linear(c["hidden_size"], self.kv * self.d, bias=False)
        self.o_proj = nn.Linear(self.h * self.d, c["hidden_size"], bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.h, self.d).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv, self.d).transpose(1, 2)
        inv = 1.0 / self.theta ** (torch.arange(0, self.d, 2, device=x.device, dtype=torch.float32) / self.d)
        ang = torch.arange(s, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = torch.cat((ang, ang), -1).cos().to(x.dtype), torch.cat((ang, ang), -1).sin().to(x.dtype)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(self.h // self.kv, dim=1), v.repeat_interleave(self.h // self.kv, dim=1)
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        out = (scores.softmax(-1).to(x.dtype) @ v).transpose(1, 2).reshape(b, s, self.h * self.d)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class MiniLlamaForCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.model.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def forward(self, ids):
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))


# ---- the run ---------------------------------------------------------------------------------------

def make_model(kind):
    if kind == "transformers":
        from transformers import LlamaConfig, LlamaForCausalLM
        return LlamaForCausalLM(LlamaConfig(**CONFIG, tie_word_embeddings=False, attention_bias=False, mlp_bias=False))
    return MiniLlamaForCausalLM(CONFIG)


def logits_of(model, ids):
    out = model(ids)
    return (out.logits if hasattr(out, "logits") else out)[:, -1, :].float()


def save_hf_model(model, kind, out_dir):
    """The model's fp16 weights and config as a Hugging Face model directory."""
    os.makedirs(out_dir, exist_ok=True)
    state = {k: v.detach().to(torch.float16).cpu().numpy() for k, v in model.state_dict().items()
             if not k.endswith("rotary_emb.inv_freq")}
    safetensors.save(os.path.join(out_dir, "model.safetensors"), state, {"format": "pt"})
    config = dict(CONFIG, architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="float16",
                  tie_word_embeddings=False, hidden_act="silu")
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return state


def load_weights(model, state, dtype, device):
    model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    return model.to(device=device, dtype=dtype).eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    ap.add_argument("--tokens", type=int, default=16, help="tokens to generate (default 16)")
    ap.add_argument("--prompt-length", type=int, default=8)
    ap.add_argument("--format", default="gptq", help="nibble quantize --format (default gptq)")
    ap.add_argument("--group", type=int, default=128)
    ap.add_argument("--model", choices=["auto", "transformers", "minimal"], default="auto",
                    help="transformers' LlamaForCausalLM or the minimal PyTorch Llama (auto: transformers if installed)")
    ap.add_argument("--work", help="directory for the fp16 and quantized models (default: a temporary one)")
    ap.add_argument("--nibble", default=os.environ.get("NIBBLE_CLI") or shutil.which("nibble"), help="the nibble CLI")
    args = ap.parse_args()
    if not args.nibble:
        sys.exit("llama_decoder: the nibble command line was not found: pass --nibble PATH or set NIBBLE_CLI")
    kind = args.model
    if kind == "auto":
        try:
            import transformers  # noqa: F401
            kind = "transformers"
        except ImportError:
            kind = "minimal"
    device = torch.device(args.device)
    # Activations: f32 on CPUs (plain PyTorch on CPUs computes in f32; cpu_w4a16 takes f32), f16 on GPUs.
    dtype = torch.float32 if device.type == "cpu" else torch.float16
    tol = 1e-3 if dtype == torch.float32 else 3e-2  # of the largest reference logit

    work = args.work or tempfile.mkdtemp(prefix="nibble_llama_")
    hf_dir, q_dir = os.path.join(work, "fp16"), os.path.join(work, f"{args.format}-4bit")
    torch.manual_seed(0)
    base = make_model(kind)
    with torch.no_grad():  # Llama-like weight statistics: N(0, 0.02), norms near 1
        for name, p in base.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn_like(p) if name.endswith("norm.weight") else 0.02 * torch.randn_like(p))
    state = save_hf_model(base, kind, hf_dir)
    t0 = time.perf_counter()
    q = subprocess.run([args.nibble, "quantize", "--from", hf_dir, "--out", q_dir, "--format", args.format, "--group",
                        str(args.group)], capture_output=True, text=True)
    if q.returncode != 0:
        sys.exit(f"llama_decoder: nibble quantize failed ({q.returncode}):\n{q.stderr}")
    print(f"[example] {kind} Llama ({CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']}), fp16 in "
          f"{hf_dir}, quantized by nibble quantize --format {args.format} --group {args.group} in "
          f"{time.perf_counter() - t0:.1f} s")

    ck = nibble.Checkpoint(q_dir)
    registry = nibble.Registry()
    quant = load_weights(make_model(kind), state, dtype, device)
    swapped = nt.replace_linears(quant, ck, registry=registry, policy=nibble.Policy.from_env(), dtype=dtype)
    expected = [f"model.layers.{i}.{p}" for i in range(CONFIG["num_hidden_layers"]) for p in PROJECTIONS]
    if sorted(swapped) != sorted(expected):
        sys.exit(f"llama_decoder: swapped {sorted(swapped)}, expected every projection {sorted(expected)}")
    backends = sorted({m.prepared.backend for m in quant.modules() if isinstance(m, nt.QuantLinear)})
    print(f"[example] {len(swapped)} projections run on nibble ({', '.join(backends)}, {dtype}, {device})")

    reference = load_weights(make_model(kind), state, dtype, device)
    with torch.no_grad():
        for name in expected:  # nibble's reference dequantization, [K, N] -> nn.Linear's [N, K]
            reference.get_submodule(name).weight.copy_(torch.from_numpy(ck.dequantize(name).T.copy()))

    ids = torch.randint(0, CONFIG["vocab_size"], (1, args.prompt_length), generator=torch.Generator().manual_seed(1))
    ids = ids.to(device)
    worst, ties, failures = 0.0, 0, []
    with torch.no_grad():
        for step in range(args.tokens):
            got, want = logits_of(quant, ids), logits_of(reference, ids)
            scale = want.abs().max().item()
            err = (got - want).abs().max().item() / scale
            worst = max(worst, err)
            token = int(got.argmax())
            gap = (want.max() - want[0, token]).item() / scale
            if err > tol:
                failures.append(f"step {step}: logits differ by {err:.2e} of the largest (tolerance {tol:.0e})")
            if token != int(want.argmax()):
                if gap > 2 * tol:
                    failures.append(f"step {step}: nibble picked token {token}, {gap:.2e} below the reference's top")
                ties += 1
            ids = torch.cat([ids, torch.tensor([[token]], device=device)], dim=1)
    tokens = ids[0, args.prompt_length:].tolist()
    print(f"[example] generated {len(tokens)} tokens: {tokens}")
    print(f"[example] against the dequantized model in plain PyTorch: largest logit difference {worst:.2e} of the "
          f"largest logit (tolerance {tol:.0e}); {ties} near-tie(s) where the top token differed")
    if failures:
        print("[example] MISMATCH:\n  " + "\n  ".join(failures))
        return 1
    print("[example] every step matches the reference")
    if not args.work:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
