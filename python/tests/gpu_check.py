#!/usr/bin/env python3
"""nibble's Python package on a CUDA GPU, every check in one run (run by gpu_check.sh):

  fixtures   every fixture layer through PreparedLinear.apply and QuantLinear on CUDA tensors
             against the tool's reference outputs, every width (2, 3, 4, 8 bits: cuda_w4a16
             declares them all; a layer refused or read at another width fails)
  stream     apply enqueued on a side stream (PyTorch's current one) and read after a sync
  errors     a CPU tensor, a wrong dtype and a non-contiguous tensor for a CUDA layer
  compile    torch.compile(fullgraph=True) over a module of two QuantLinears (the nibble::linear op)
  opcheck    torch.library.opcheck of nibble::linear (schema, fake kernel, dispatch)
  graph      CUDA graph capture and replay of the same module, with new inputs before each replay
  example    examples/python/llama_decoder.py --device cuda end to end
  timing     the op's time against `nibble bench`'s kernel time at M = 1 and 64, weights rotated
             past the L2 as the bench does: through a captured CUDA graph (the pass criterion,
             within 5%) and eagerly from Python (reported)

Prints SKIP and exits 77 without a CUDA device; exits 1 if any check failed. Writes
gpu_check.log (everything), gpu_check.json (the results) and bench.json into --out.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

try:
    import torch
except ImportError as e:  # a machine without PyTorch has nothing to check here
    print(f"SKIP: PyTorch is not importable ({e})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
DEVICE = "cuda"  # a dry run of the helpers on a CPU sets "cpu"
results = []  # (check, ok, detail)
log_file = None


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if log_file:
        log_file.write(line + "\n")
        log_file.flush()


def check(name):
    def wrap(fn):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                detail = fn(*a, **kw) or ""
                results.append((name, True, detail))
                log(f"ok   {name} ({time.perf_counter() - t0:.1f} s): {detail}")
            except Exception as e:  # noqa: BLE001 - every failure is a result of this run
                results.append((name, False, f"{type(e).__name__}: {e}"))
                log(f"FAIL {name}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return run
    return wrap


def tolerance_ok(y, ref, mag):
    """nibble's rule for f16 outputs (reference.h)."""
    tol = 2.0**-11 * np.abs(ref) + 2.0**-10 * mag + 1e-30
    ratio = np.abs(y.astype(np.float64) - ref) / tol
    return bool(np.all(ratio <= 1)), float(ratio.max())


@check("registry")
def check_registry(reg):
    cuda = reg.backend("cuda_w4a16")
    assert cuda.available, f"cuda_w4a16 has no device: {cuda.device}"
    return f"cuda_w4a16 on {cuda.device}; backends: {', '.join(b.name for b in reg.backends)}"


@check("fixtures")
def check_fixtures(reg, fixtures):
    import nibble
    import nibble.torch as nt
    from nibble import safetensors
    ran = 0
    for fx in sorted(d for d in os.listdir(fixtures) if os.path.isdir(os.path.join(fixtures, d))):
        d = os.path.join(fixtures, fx)
        meta = json.load(open(os.path.join(d, "meta.json")))
        ref = safetensors.load(os.path.join(d, "reference.safetensors"))
        ck = nibble.Checkpoint(d)
        for layer in meta["layers"]:
            name, bits = layer["name"], layer.get("bits", meta.get("bits", 4))
            entry = ck.layer(name)
            assert entry.status == "quantized" and entry.bits == bits, \
                f"{fx}: the {bits}-bit layer {name} is {entry.status} ({entry.bits} bits): {entry.reason}"
            x = torch.from_numpy(ref[name + ".x"]).half().cuda()
            w = ref[name + ".weight"].astype(np.float64)
            y_ref = ref[name + ".y"].astype(np.float64)
            mag = np.abs(ref[name + ".x"].astype(np.float64)) @ np.abs(w).T
            p = reg.prepare(ck, name, device="cuda")
            assert p.backend == "cuda_w4a16", f"{fx}: {name}: prepared by {p.backend}"
            for how, y in (("apply", p.apply(x)), ("QuantLinear", nt.QuantLinear(p)(x.view(1, *x.shape))[0])):
                torch.cuda.synchronize()
                assert y.is_cuda and y.dtype == torch.float16
                ok, worst = tolerance_ok(y.float().cpu().numpy(), y_ref, mag)
                assert ok, f"{fx}: {name} ({how}): {worst:.2f}x the tolerance"
            ran += 1
    return f"{ran} layers match their reference on CUDA (apply and QuantLinear)"


def layer_from(reg, work, k, n, copies=1, cli=None):
    """QuantLinears of a random K x N layer (one GPTQ checkpoint written by nibble quantize)."""
    import nibble
    import nibble.torch as nt
    from nibble import safetensors
    d = os.path.join(work, f"random_{k}x{n}")
    if not os.path.exists(os.path.join(d, "q", "config.json")):
        os.makedirs(os.path.join(d, "fp16"), exist_ok=True)
        rng = np.random.default_rng(k * 7 + n)
        w = (rng.standard_normal((n, k)) * 0.02).astype(np.float16)
        safetensors.save(os.path.join(d, "fp16", "model.safetensors"), {"model.layers.0.mlp.proj.weight": w})
        json.dump({"architectures": ["LlamaForCausalLM"], "torch_dtype": "float16"},
                  open(os.path.join(d, "fp16", "config.json"), "w"))
        subprocess.run([cli, "quantize", "--from", os.path.join(d, "fp16"), "--out", os.path.join(d, "q")],
                       check=True, capture_output=True)
    ck = nibble.Checkpoint(os.path.join(d, "q"))
    return [nt.QuantLinear(reg.prepare(ck, "model.layers.0.mlp.proj", device=DEVICE)) for _ in range(copies)], ck


class TwoLayers(torch.nn.Module):
    def __init__(self, a, b):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x):
        return self.b(torch.nn.functional.silu(self.a(x)))


@check("stream")
def check_stream(reg, work, cli):
    (q,), ck = layer_from(reg, work, 4096, 4096, cli=cli)
    x = torch.randn(16, 4096, device="cuda").half()
    want = q(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(20):  # queue work on s, so that a kernel on the wrong stream would race
            y = q(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    assert torch.equal(y, want), "a side stream gave another result"
    return "20 applies on a side stream agree with the default stream bit for bit"


@check("errors")
def check_errors(reg, work, cli):
    import nibble
    (q,), _ = layer_from(reg, work, 4096, 4096, cli=cli)
    cases = [(torch.ones(2, 4096, dtype=torch.float16), "expected device cuda:0"),
             (torch.ones(2, 4096, device="cuda", dtype=torch.bfloat16), "expected dtype float16"),
             (torch.ones(4096, 2, device="cuda", dtype=torch.float16).t(), "expected a contiguous tensor")]
    for x, want in cases:
        try:
            q(x)
        except nibble.InvalidArgumentError as e:
            assert want in str(e) and "layer 'model.layers.0.mlp.proj'" in str(e), str(e)
            continue
        raise AssertionError(f"no error for {want}")
    return "CPU tensor, bf16 and non-contiguous inputs are errors naming layer, tensor, expected and found"


@check("compile")
def check_compile(reg, work, cli):
    import nibble.torch as nt
    assert nt.HAS_CUSTOM_OP, f"PyTorch {torch.__version__} has no torch.library.custom_op"
    (a,), _ = layer_from(reg, work, 4096, 14336, cli=cli)
    (b,), _ = layer_from(reg, work, 14336, 4096, cli=cli)
    m = TwoLayers(a, b)
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True)
    out = []
    for rows in (1, 7, 64):
        x = torch.randn(rows, 4096, device="cuda").half()
        eager, got = m(x), compiled(x)
        torch.cuda.synchronize()
        err = (got - eager).abs().max().item() / eager.abs().max().item()
        assert err < 1e-2, f"M={rows}: compiled differs from eager by {err:.2e} of the largest output"
        out.append(f"M={rows} {err:.1e}")
    return f"torch.compile(fullgraph=True) matches eager ({', '.join(out)})"


@check("opcheck")
def check_opcheck(reg, work, cli):
    (a,), _ = layer_from(reg, work, 4096, 4096, cli=cli)
    x = torch.randn(5, 4096, device="cuda").half()
    torch.library.opcheck(torch.ops.nibble.linear.default, (x, a._key))
    return "torch.library.opcheck: schema, fake kernel and dispatch of nibble::linear are consistent"


@check("graph")
def check_graph(reg, work, cli):
    (a,), _ = layer_from(reg, work, 4096, 14336, cli=cli)
    (b,), _ = layer_from(reg, work, 14336, 4096, cli=cli)
    m = TwoLayers(a, b)
    static_x = torch.randn(8, 4096, device="cuda").half()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: first-call setup stays out of the graph
        for _ in range(3):
            m(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        static_y = m(static_x)
    for i in range(5):
        static_x.copy_(torch.randn(8, 4096, device="cuda").half())
        g.replay()
        torch.cuda.synchronize()
        want = m(static_x)
        assert torch.equal(static_y, want), f"replay {i} differs from eager"
    return "captured once, 5 replays with new inputs equal eager bit for bit"


@check("example")
def check_example(cli):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "llama_decoder.py"), "--device", "cuda",
                        "--tokens", "16", "--nibble", cli], capture_output=True, text=True, timeout=900)
    log(p.stdout + p.stderr)
    assert p.returncode == 0, f"exit {p.returncode}"
    lines = [l for l in p.stdout.splitlines() if l.startswith("[example]")]
    return " / ".join(lines[-3:])


def time_events(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps  # us per fn()


@check("timing")
def check_timing(reg, work, cli, out_dir, shapes, rotate_mb):
    bench_json = os.path.join(out_dir, "bench.json")
    cmd = [cli, "bench", "--backend", "cuda_w4a16", "--shapes", ",".join(f"{k}x{n}" for k, n in shapes), "--m", "1,64",
           "--no-dense", "--rotate-mb", str(rotate_mb), "--json", bench_json]
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log(p.stdout + p.stderr)
    assert p.returncode == 0, f"nibble bench exited {p.returncode}"
    bench = {(r["k"], r["n"], r["m"]): r["time_us"] for r in json.load(open(bench_json))["results"]}
    rows, worst = [], 0.0
    for k, n in shapes:
        layer_bytes = k * n / 2 + (k // 128) * n * 2
        copies = int(min(64, max(1, math.ceil(rotate_mb * 1048576 / layer_bytes))))  # as the bench rotates
        qs, _ = layer_from(reg, work, k, n, copies, cli=cli)
        for m in (1, 64):
            x = torch.randn(m, k, device="cuda").half()

            def rotation():
                for q in qs:
                    q(x)

            eager = time_events(rotation, 20) / copies
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                rotation()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                rotation()
            graph = time_events(g.replay, 20) / copies
            ref = bench[(k, n, m)]
            ratio = graph / ref
            # What the op adds to the kernel (Python, DLPack, launch): a graph replay runs launches
            # back to back, so it may also come out faster than the bench's own timing.
            worst = max(worst, ratio - 1)
            rows.append({"k": k, "n": n, "m": m, "bench_us": ref, "op_graph_us": graph, "op_eager_us": eager,
                         "graph_over_bench": ratio, "eager_over_bench": eager / ref, "copies": copies})
            log(f"  {k}x{n} M={m}: bench {ref:.2f} us, op in a CUDA graph {graph:.2f} us ({ratio:.3f}x), "
                f"op eager from Python {eager:.2f} us ({eager / ref:.3f}x), {copies} copies")
    json.dump(rows, open(os.path.join(out_dir, "timing.json"), "w"), indent=2)
    assert worst <= 0.05, f"the op in a CUDA graph takes {worst * 100:.1f}% more than nibble bench's kernel time (limit 5%)"
    return (f"the op in a CUDA graph adds at most {max(worst, 0) * 100:.1f}% to nibble bench's kernel time at M = 1 and 64 "
            f"(eager: see timing.json)")


def main():
    global log_file
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.environ.get("NIBBLE_CLI"), help="the nibble command line")
    ap.add_argument("--fixtures", default=os.path.join(ROOT, "tests", "data", "fixtures"))
    ap.add_argument("--out", default=os.environ.get("OUT") or ".", help="where the logs and JSON go")
    ap.add_argument("--shapes", default="4096x4096,14336x4096", help="KxN,... timed against nibble bench")
    ap.add_argument("--rotate-mb", type=float, default=256)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print(f"SKIP: no CUDA device (PyTorch {torch.__version__}: torch.cuda.is_available() is False)")
        return 77
    if not args.cli:
        print("FAIL: the nibble command line is needed (--cli or NIBBLE_CLI)")
        return 1
    os.makedirs(args.out, exist_ok=True)
    log_file = open(os.path.join(args.out, "gpu_check.log"), "w")
    import nibble
    log(f"nibble {nibble.__version__} from {nibble.library_path}; PyTorch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"{torch.cuda.get_device_name()}; python {sys.version.split()[0]}; NIBBLE_PLUGIN_PATH="
        f"{os.environ.get('NIBBLE_PLUGIN_PATH', '')}")
    reg = nibble.Registry()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    with tempfile.TemporaryDirectory(prefix="nibble_gpu_") as work:
        check_registry(reg)
        check_fixtures(reg, args.fixtures)
        check_stream(reg, work, args.cli)
        check_errors(reg, work, args.cli)
        check_compile(reg, work, args.cli)
        check_opcheck(reg, work, args.cli)
        check_graph(reg, work, args.cli)
        check_example(args.cli)
        check_timing(reg, work, args.cli, args.out, shapes, args.rotate_mb)
    json.dump([{"check": c, "ok": ok, "detail": d} for c, ok, d in results],
              open(os.path.join(args.out, "gpu_check.json"), "w"), indent=2)
    log("\n== summary")
    for c, ok, d in results:
        log(f"{'ok  ' if ok else 'FAIL'} {c:<9} {d}")
    failed = sum(1 for _, ok, _ in results if not ok)
    log(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
