"""examples/python/llama_decoder.py end to end on the CPU: a Llama decoder quantized by
`nibble quantize --from`, every projection on nibble, generating tokens that match the same model
with nibble's dequantized weights in plain PyTorch."""
import os
import subprocess
import sys

from conftest import CPU_DIR

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "llama_decoder.py")


def test_llama_decoder_on_the_cpu(tmp_path):
    env = dict(os.environ, NIBBLE_PLUGIN_PATH=CPU_DIR)
    env.pop("NIBBLE_BACKEND", None)
    env.pop("NIBBLE_CONFIG", None)
    p = subprocess.run([sys.executable, EXAMPLE, "--device", "cpu", "--tokens", "12", "--model", "minimal",
                        "--work", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    print(p.stdout, p.stderr)
    assert p.returncode == 0
    assert "14 projections run on nibble (cpu_w4a16" in p.stdout
    assert "generated 12 tokens" in p.stdout and "every step matches the reference" in p.stdout
    assert os.path.exists(tmp_path / "gptq-4bit" / "config.json")
