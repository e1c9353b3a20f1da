# Copyright: llmfleet.serving developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM bug #36008 (fix PR #36026 closed unmerged; present 0.11 ... 0.33).

`invoke_fused_moe_wna16_cuda_kernel` and `invoke_fused_moe_wna16_triton_kernel` pass
`num_experts=B.size(1)` (the output width N) to `get_moe_wna16_block_config`, where B is the
stacked expert weight [E, N, K]; the block size then grows until `BLOCK_SIZE_K // group_size`
leaves {1, 2, 4, 8} and GPTQ/AWQ MoE models die with "RuntimeError: BLOCK_SIZE_K // group_size
must be one of [1, 2, 4, 8]" (V100, moe_wna16 path).

The fix wraps both callers to remember B.size(0) and wraps the block-config function to use it
for `num_experts`. No vLLM code is copied; a build whose callers no longer pass `B.size(1)` is left
alone.
"""

import contextvars
import functools
import inspect

TARGET = "vllm.model_executor.layers.fused_moe.fused_moe"
CALLERS = ("invoke_fused_moe_wna16_cuda_kernel", "invoke_fused_moe_wna16_triton_kernel")
BUGGY = "num_experts=B.size(1)"
_EXPERTS = contextvars.ContextVar("llmfleet_moe_wna16_num_experts", default=None)


def _remember_experts(invoke):
    @functools.wraps(invoke)
    def wrapper(A, B, *args, **kwargs):  # noqa: N803 - vLLM's own argument names
        token = _EXPERTS.set(int(B.size(0)))
        try:
            return invoke(A, B, *args, **kwargs)
        finally:
            _EXPERTS.reset(token)

    wrapper.__llmfleet_patched__ = True
    return wrapper


def _use_experts(block_config):
    @functools.wraps(block_config)
    def wrapper(*args, **kwargs):
        experts = _EXPERTS.get()
        if experts is not None and "num_experts" in kwargs:
            kwargs["num_experts"] = experts
        return block_config(*args, **kwargs)

    wrapper.__llmfleet_patched__ = True
    return wrapper


def apply(module):
    buggy = []
    for name in CALLERS:
        func = getattr(module, name, None)
        if func is None or getattr(func, "__llmfleet_patched__", False):
            continue
        try:
            source = inspect.getsource(func)
        except (OSError, TypeError):
            continue
        if BUGGY in source.replace(" ", ""):
            buggy.append(name)
    if not buggy:
        return "not needed: this vLLM build does not pass B.size(1) as num_experts (or it is patched already)"
    for name in buggy:
        setattr(module, name, _remember_experts(getattr(module, name)))
    if not getattr(module.get_moe_wna16_block_config, "__llmfleet_patched__", False):
        module.get_moe_wna16_block_config = _use_experts(module.get_moe_wna16_block_config)
    return "applied to " + ", ".join(buggy)
